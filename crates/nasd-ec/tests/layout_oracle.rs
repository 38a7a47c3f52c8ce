//! Stripe addressing against a naive oracle: small files are materialized byte by byte into
//! component objects with the rules of requirements A.2 written out directly, and
//! `Layout::map`, `locate`, `component_len` and `group_units` must agree with them; then parity
//! is computed per group from the materialized objects, components are lost, and the codecs
//! must bring every byte back.

use nasd_ec::layout::{Code, Layout, Role};
use nasd_ec::raid6x::Raid6x;
use nasd_ec::rs::ReedSolomon;
use proptest::prelude::*;

/// (component, object offset) of logical byte x, straight from the rules.
fn oracle(layout: &Layout, x: u64) -> (usize, u64) {
    let Some(u) = layout.unit_bytes() else {
        return (0, x);
    };
    let u = u as u64;
    let n = layout.components() as u64;
    let k = layout.data_per_stripe() as u64;
    let s = x / (k * u);
    let j = (x % (k * u)) / u;
    let off = s * u + x % u;
    let parity: Vec<u64> = match layout.code() {
        Code::Raid0 { .. } => vec![],
        // A.2: pA = (N-2-g) mod N, pB = (N-1-g) mod N with g = s div 2.
        Code::Raid6x { .. } => {
            let g = s / 2;
            let n = n as i64;
            vec![
                (n - 2 - g as i64).rem_euclid(n) as u64,
                (n - 1 - g as i64).rem_euclid(n) as u64,
            ]
        }
        // docs/ec.md: parity t of stripe s on (N - M - s + t) mod N.
        Code::Rs { m, .. } => (0..m as i64)
            .map(|t| (n as i64 - m as i64 - s as i64 + t).rem_euclid(n as i64) as u64)
            .collect(),
        _ => unreachable!(),
    };
    let data: Vec<u64> = (0..n).filter(|c| !parity.contains(c)).collect();
    (data[j as usize] as usize, off)
}

fn layouts() -> impl Strategy<Value = Layout> {
    prop_oneof![
        Just("single".to_string()),
        (2u8..6).prop_map(|n| format!("mirror:{n}")),
        (2u8..7).prop_map(|n| format!("raid0:{n}/4K")),
        (1u8..7, 1u8..5).prop_map(|(k, m)| format!("rs:{k}+{m}/4K")),
        (1u8..7).prop_map(|k| format!("raid6x:{k}/4K")),
        Just("rs:3+2/8K".to_string()),
    ]
    .prop_map(|s| s.parse().unwrap())
}

fn file(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 8) as u8 ^ seed)
        .collect()
}

/// The component objects of `data`, written byte by byte at the oracle's positions.
fn materialize(layout: &Layout, data: &[u8]) -> Vec<Vec<u8>> {
    let mut objects = vec![Vec::new(); layout.components()];
    for (x, &b) in data.iter().enumerate() {
        let (c, off) = oracle(layout, x as u64);
        let copies: Vec<usize> = match layout.code() {
            Code::Mirror { n } => (0..n as usize).collect(),
            _ => vec![c],
        };
        for c in copies {
            let obj = &mut objects[c];
            if obj.len() <= off as usize {
                obj.resize(off as usize + 1, 0);
            }
            obj[off as usize] = b;
        }
    }
    objects
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn map_and_locate_agree_with_the_oracle(
        layout in layouts(),
        len in 0usize..70_000,
        range in (0u64..80_000, 0u64..40_000),
        seed in any::<u8>(),
    ) {
        let data = file(len, seed);
        let objects = materialize(&layout, &data);
        // Every extent of a read lies where the oracle put the bytes, and together they cover
        // the range once, in order.
        let (start, rlen) = range;
        let mut next = start;
        for e in layout.map(start, rlen) {
            prop_assert_eq!(e.logical_offset, next);
            prop_assert!(e.len > 0);
            for i in [0, e.len - 1] {
                let x = e.logical_offset + i;
                prop_assert_eq!(oracle(&layout, x), (e.component, e.object_offset + i));
                let back = layout.locate(e.component, e.object_offset + i);
                prop_assert_eq!(back.logical_offset, Some(x));
                if (x as usize) < data.len() {
                    prop_assert_eq!(objects[e.component][(e.object_offset + i) as usize], data[x as usize]);
                }
            }
            next += e.len;
        }
        prop_assert_eq!(next, start + rlen);
        // Reading the whole file through the extents gives it back.
        let mut read = Vec::with_capacity(len);
        for e in layout.map(0, len as u64) {
            let o = &objects[e.component];
            read.extend_from_slice(&o[e.object_offset as usize..(e.object_offset + e.len) as usize]);
        }
        prop_assert_eq!(&read, &data);
        // Component lengths: data held, plus full parity units of groups that hold data.
        for (c, object) in objects.iter().enumerate() {
            let mut want = object.len() as u64;
            if let (Some(u), Some(gb)) = (layout.unit_bytes(), layout.group_bytes()) {
                let groups = (len as u64).div_ceil(gb);
                for g in 0..groups {
                    for gu in layout.group_units(g) {
                        if gu.component == c && matches!(gu.role, Role::Parity(_)) {
                            want = want.max(gu.object_offset + u as u64);
                        }
                    }
                }
            }
            prop_assert_eq!(layout.component_len(c, len as u64), want, "component {}", c);
        }
    }

    #[test]
    fn lost_components_come_back(
        layout in layouts(),
        len in 1usize..60_000,
        seed in any::<u8>(),
        lost_seed in any::<u64>(),
    ) {
        let data = file(len, seed);
        let mut objects = materialize(&layout, &data);
        let (Some(u), Some(gb)) = (layout.unit_bytes(), layout.group_bytes()) else {
            return Ok(());
        };
        if layout.parity_per_stripe() == 0 {
            return Ok(());
        }
        let u = u as usize;
        let groups = (len as u64).div_ceil(gb);
        let unit_of = |objects: &Vec<Vec<u8>>, c: usize, off: u64| -> Vec<u8> {
            let o = &objects[c];
            let mut v = vec![0u8; u];
            let s = (off as usize).min(o.len());
            let e = (off as usize + u).min(o.len());
            v[..e - s].copy_from_slice(&o[s..e]);
            v
        };
        // Parity per group, computed from the data units in codec order, stored in place.
        for g in 0..groups {
            let units = layout.group_units(g);
            let data_units: Vec<Vec<u8>> = units
                .iter()
                .filter(|gu| matches!(gu.role, Role::Data(_)))
                .map(|gu| unit_of(&objects, gu.component, gu.object_offset))
                .collect();
            let parity = encode(&layout, &data_units);
            for (gu, p) in units.iter().filter(|gu| matches!(gu.role, Role::Parity(_))).zip(parity) {
                let o = &mut objects[gu.component];
                let end = gu.object_offset as usize + u;
                if o.len() < end {
                    o.resize(end, 0);
                }
                o[gu.object_offset as usize..end].copy_from_slice(&p);
            }
        }
        for (c, object) in objects.iter().enumerate() {
            prop_assert_eq!(object.len() as u64, layout.component_len(c, len as u64));
        }
        // Lose `tolerated` distinct components, rebuild each group, read the file back.
        let n = layout.components();
        let mut lost = Vec::new();
        let mut r = lost_seed;
        while lost.len() < layout.tolerated_failures() {
            let c = (r % n as u64) as usize;
            r = r.rotate_left(17) ^ 0x9E37_79B9_7F4A_7C15;
            if !lost.contains(&c) {
                lost.push(c);
            }
        }
        let mut rebuilt = vec![Vec::new(); n];
        for g in 0..groups {
            let units = layout.group_units(g);
            let present: Vec<bool> = units.iter().map(|gu| !lost.contains(&gu.component)).collect();
            let mut bufs: Vec<Vec<u8>> = units
                .iter()
                .zip(&present)
                .map(|(gu, &p)| if p { unit_of(&objects, gu.component, gu.object_offset) } else { vec![0xA5; u] })
                .collect();
            reconstruct(&layout, &mut bufs, &present);
            for (gu, b) in units.iter().zip(bufs) {
                let o = &mut rebuilt[gu.component];
                let end = gu.object_offset as usize + u;
                if o.len() < end {
                    o.resize(end, 0);
                }
                o[gu.object_offset as usize..end].copy_from_slice(&b);
            }
        }
        let mut read = Vec::with_capacity(len);
        for e in layout.map(0, len as u64) {
            let o = &rebuilt[e.component];
            read.extend_from_slice(&o[e.object_offset as usize..(e.object_offset + e.len) as usize]);
        }
        prop_assert_eq!(&read, &data, "lost {:?}", lost);
    }
}

fn encode(layout: &Layout, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut parity = vec![vec![0u8; len]; layout.units_per_group() - data.len()];
    let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
    match layout.code() {
        Code::Rs { k, m } => ReedSolomon::new(k as usize, m as usize)
            .unwrap()
            .encode(&d, &mut p),
        Code::Raid6x { k } => Raid6x::new(k as usize).unwrap().encode(&d, &mut p),
        _ => unreachable!(),
    }
    .unwrap();
    parity
}

fn reconstruct(layout: &Layout, units: &mut [Vec<u8>], present: &[bool]) {
    match layout.code() {
        Code::Rs { k, m } => ReedSolomon::new(k as usize, m as usize)
            .unwrap()
            .reconstruct(units, present),
        Code::Raid6x { k } => Raid6x::new(k as usize).unwrap().reconstruct(units, present),
        _ => unreachable!(),
    }
    .unwrap();
}

#[test]
fn group_units_follow_codec_order() {
    let layout: Layout = "raid6x:3/4K".parse().unwrap();
    let units = layout.group_units(1);
    let roles: Vec<(usize, Role, usize, u64)> = units
        .iter()
        .map(|u| (u.unit, u.role, u.component, u.stripe))
        .collect();
    // Group 1 = stripes 2, 3 of Fig 2: data on disks 1, 2, 5; P, R on disk 3; Q, S on disk 4.
    assert_eq!(
        roles,
        vec![
            (0, Role::Data(0), 0, 2),
            (1, Role::Data(1), 1, 2),
            (2, Role::Data(2), 4, 2),
            (3, Role::Data(0), 0, 3),
            (4, Role::Data(1), 1, 3),
            (5, Role::Data(2), 4, 3),
            (6, Role::Parity(0), 2, 2),
            (7, Role::Parity(1), 3, 2),
            (8, Role::Parity(2), 2, 3),
            (9, Role::Parity(3), 3, 3),
        ]
    );
}
