//! Locating corrupt units of unknown position in a raid6x group from its syndromes (seed 004 §4,
//! requirements A.5).
//!
//! A group has 2k data units (m = 0..2k) and the parities P, Q, R, S (units 2k..2k+4). Its
//! check matrix is `H = [V | I4]` with `V[e][m] = g^(e·m)`: column m of a data unit is
//! `(1, x, x², x³)` with `x = g^m`, column 2k + e of a parity unit is the unit vector e. Per byte
//! column the syndrome `Δ = stored parity XOR parity recomputed from the stored data` equals
//! `H · error`. So a set E of corrupt units explains Δ exactly when Δ lies in the span of E's
//! columns, and the error bytes are the coefficients.
//!
//! The locator tries e = 1, 2, 3 and accepts only when exactly one set of the smallest size
//! explains the syndrome; two or more is [`Located::Ambiguous`], none of size <= 3 is
//! [`Located::Uncorrectable`]. It never guesses: with 4 syndromes, e = 1 is always unique
//! (any two columns are independent), e = 2 is unique only while every 4 columns of H are
//! independent (k <= 10, docs/ec.md), and e = 3 leaves one check equation, so about one triple in
//! 255 fits any syndrome and per-byte e = 3 is ambiguous for all but tiny groups.
//!
//! AES awareness (seed 004 Fig 4): when units are stored encrypted in 16-byte AES blocks, one
//! corrupt ciphertext byte garbles the whole plaintext block, so the corrupt units are the same
//! for all 16 columns of an aligned window. [`locate`] takes a window of columns and accepts a set
//! only if it explains every column's syndrome; each extra column is another check, which makes
//! triple errors locatable.

use crate::gf;

/// The most corrupt units of unknown position the locator looks for.
pub const ERRORS_MAX: usize = 3;
/// Syndromes per column: P, Q, R, S.
pub const SYNDROMES: usize = 4;

/// A set of at most [`ERRORS_MAX`] unit indices, ascending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UnitSet {
    len: usize,
    units: [usize; ERRORS_MAX],
}

impl UnitSet {
    /// The set of the given units (ascending, distinct, at most three).
    pub fn new(units: &[usize]) -> Self {
        assert!(units.len() <= ERRORS_MAX, "at most three units");
        assert!(units.windows(2).all(|w| w[0] < w[1]), "ascending units");
        let mut s = UnitSet {
            len: units.len(),
            units: [0; ERRORS_MAX],
        };
        s.units[..units.len()].copy_from_slice(units);
        s
    }

    /// The units, ascending.
    pub fn units(&self) -> &[usize] {
        &self.units[..self.len]
    }

    /// Number of units.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What the syndromes of a window say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Located {
    /// Every syndrome is zero.
    Clean,
    /// Exactly one set of the smallest size explains every column.
    Found(UnitSet),
    /// `candidates` (the search stops at 2) sets of `errors` units explain every column.
    Ambiguous {
        /// Size of the sets.
        errors: usize,
        /// Sets found, at least 2.
        candidates: usize,
    },
    /// No set of at most [`ERRORS_MAX`] units explains every column.
    Uncorrectable,
}

/// Column `u` of the check matrix of a group of `data_units` data units.
pub fn column(data_units: usize, u: usize) -> [u8; SYNDROMES] {
    if u < data_units {
        [1, gf::exp(u), gf::exp(2 * u), gf::exp(3 * u)]
    } else {
        let mut c = [0; SYNDROMES];
        c[u - data_units] = 1;
        c
    }
}

/// The error bytes on `units` that produce syndrome `delta`, if `delta` lies in the span of
/// their columns (bytes may be zero). Gauss-Jordan on the 4 x (e + 1) augmented matrix.
pub fn solve(
    data_units: usize,
    units: &[usize],
    delta: [u8; SYNDROMES],
) -> Option<[u8; ERRORS_MAX]> {
    let e = units.len();
    debug_assert!(e <= ERRORS_MAX);
    let mut a = [[0u8; ERRORS_MAX + 1]; SYNDROMES];
    for (c, &u) in units.iter().enumerate() {
        let col = column(data_units, u);
        for r in 0..SYNDROMES {
            a[r][c] = col[r];
        }
    }
    for r in 0..SYNDROMES {
        a[r][e] = delta[r];
    }
    for c in 0..e {
        // Columns of at most three distinct units are independent for 2k <= 254 (docs/ec.md),
        // so a pivot always exists; a missing one would mean the set does not determine bytes.
        let pivot = (c..SYNDROMES).find(|&r| a[r][c] != 0)?;
        a.swap(c, pivot);
        let scale = gf::inv(a[c][c]);
        for v in a[c].iter_mut() {
            *v = gf::mul(*v, scale);
        }
        for r in 0..SYNDROMES {
            let f = a[r][c];
            if r != c && f != 0 {
                let pivot = a[c];
                for (v, p) in a[r].iter_mut().zip(pivot).take(e + 1) {
                    *v ^= gf::mul(f, p);
                }
            }
        }
    }
    if (e..SYNDROMES).any(|r| a[r][e] != 0) {
        return None;
    }
    let mut values = [0u8; ERRORS_MAX];
    for c in 0..e {
        values[c] = a[c][e];
    }
    Some(values)
}

/// The single unit that explains `delta` (closed form, requirements A.5): a parity unit if only
/// its syndrome is non-zero; data unit `m = log_g(ΔQ / ΔP)` if `ΔR = ΔP·g^(2m)` and
/// `ΔS = ΔP·g^(3m)`.
pub fn locate_one(data_units: usize, delta: [u8; SYNDROMES]) -> Option<usize> {
    let nonzero = delta.iter().filter(|&&d| d != 0).count();
    if nonzero == 1 {
        let e = delta.iter().position(|&d| d != 0)?;
        return Some(data_units + e);
    }
    if nonzero != SYNDROMES {
        return None;
    }
    let x = gf::div(delta[1], delta[0]);
    let m = gf::log(x)?;
    let x2 = gf::mul(x, x);
    let fits = m < data_units
        && delta[2] == gf::mul(delta[0], x2)
        && delta[3] == gf::mul(delta[0], gf::mul(x2, x));
    fits.then_some(m)
}

/// Locates at most `errors_max` (capped at [`ERRORS_MAX`]) corrupt units of a window of byte
/// columns (one column, or the 16 of an AES block) of a group with `data_units` data units,
/// from the columns' syndromes.
pub fn locate(data_units: usize, deltas: &[[u8; SYNDROMES]], errors_max: usize) -> Located {
    let nonzero: Vec<[u8; SYNDROMES]> = deltas.iter().copied().filter(|d| *d != [0; 4]).collect();
    let Some((&first, rest)) = nonzero.split_first() else {
        return Located::Clean;
    };
    let units = data_units + SYNDROMES;
    for e in 1..=errors_max.min(ERRORS_MAX) {
        let mut found: Option<UnitSet> = None;
        let mut candidates = 0;
        let mut consider = |set: &[usize]| -> bool {
            let fits_all = rest.iter().all(|d| solve(data_units, set, *d).is_some());
            if fits_all {
                candidates += 1;
                found = Some(UnitSet::new(set));
            }
            candidates < 2
        };
        match e {
            1 => {
                if let Some(u) = locate_one(data_units, first) {
                    consider(&[u]);
                }
            }
            2 => {
                let columns: Vec<[u8; SYNDROMES]> =
                    (0..units).map(|u| column(data_units, u)).collect();
                for_each_pair(&columns, first, |set| {
                    solve(data_units, set, first).is_none() || consider(set)
                });
            }
            _ => {
                let columns: Vec<[u8; SYNDROMES]> =
                    (0..units).map(|u| column(data_units, u)).collect();
                for_each_triple(&columns, first, |set| {
                    solve(data_units, set, first).is_none() || consider(set)
                });
            }
        }
        match (candidates, found) {
            (1, Some(set)) => return Located::Found(set),
            (0, _) => continue,
            _ => {
                return Located::Ambiguous {
                    errors: e,
                    candidates,
                }
            }
        }
    }
    Located::Uncorrectable
}

/// Calls `visit` with every ascending triple of `columns` whose span holds `delta`, until it
/// returns false.
///
/// Rather than solve a 3x3 system per triple, for each pair (a, b) take two vectors l0, l1 that
/// annihilate h_a and h_b (the quotient by their span). `delta` lies in span(h_a, h_b, h_c) exactly
/// when the projections `L·h_c` and `L·delta` are parallel, i.e. when the one linear form
/// `f = (l1·delta) l0 + (l0·delta) l1` vanishes on h_c (or when `L·delta = 0`: then every c fits).
/// That is three products per (pair, c) instead of an elimination.
fn for_each_triple(
    columns: &[[u8; SYNDROMES]],
    delta: [u8; SYNDROMES],
    mut visit: impl FnMut(&[usize]) -> bool,
) {
    let n = columns.len();
    for a in 0..n {
        for b in a + 1..n {
            let [l0, l1, _] = annihilators(&[columns[a], columns[b]]);
            let (p0, p1) = (dot(l0, delta), dot(l1, delta));
            let f: [u8; SYNDROMES] =
                std::array::from_fn(|r| gf::mul(p1, l0[r]) ^ gf::mul(p0, l1[r]));
            let every = p0 == 0 && p1 == 0;
            for (c, &h) in columns.iter().enumerate().skip(b + 1) {
                if (every || dot(f, h) == 0) && !visit(&[a, b, c]) {
                    return;
                }
            }
        }
    }
}

fn dot(x: [u8; SYNDROMES], y: [u8; SYNDROMES]) -> u8 {
    x.iter().zip(y).fold(0, |acc, (&a, b)| acc ^ gf::mul(a, b))
}

/// A basis of the vectors l with `l·u = 0` for every u in `independent` (at most 3 independent
/// vectors of GF(2^8)^4): the null space of the matrix whose rows they are, by Gauss-Jordan
/// elimination. Returns the basis in the first `4 - independent.len()` entries.
fn annihilators(independent: &[[u8; SYNDROMES]]) -> [[u8; SYNDROMES]; SYNDROMES - 1] {
    let mut rows: Vec<[u8; SYNDROMES]> = independent.to_vec();
    let mut pivots = Vec::with_capacity(rows.len());
    for i in 0..rows.len() {
        let col = (0..SYNDROMES)
            .find(|&c| rows[i][c] != 0)
            .expect("the columns of at most three units are independent");
        let scale = gf::inv(rows[i][col]);
        rows[i] = rows[i].map(|x| gf::mul(x, scale));
        let pivot_row = rows[i];
        for (j, row) in rows.iter_mut().enumerate() {
            let f = row[col];
            if j != i && f != 0 {
                for (x, p) in row.iter_mut().zip(pivot_row) {
                    *x ^= gf::mul(f, p);
                }
            }
        }
        pivots.push(col);
    }
    // Reduced rows: x[pivot_i] = sum over free columns of rows[i][free]·x[free] (char 2).
    let mut basis = [[0u8; SYNDROMES]; SYNDROMES - 1];
    let free = (0..SYNDROMES).filter(|c| !pivots.contains(c));
    for (l, f) in basis.iter_mut().zip(free) {
        l[f] = 1;
        for (r, &p) in pivots.iter().enumerate() {
            l[p] = rows[r][f];
        }
    }
    basis
}

/// Calls `visit` with every ascending pair of `columns` whose span holds `delta`, until it
/// returns false: with L annihilating h_a, `delta` is in span(h_a, h_b) exactly when `L·h_b` and
/// `L·delta` are parallel (every 2x2 minor vanishes), or when `L·delta = 0`.
fn for_each_pair(
    columns: &[[u8; SYNDROMES]],
    delta: [u8; SYNDROMES],
    mut visit: impl FnMut(&[usize]) -> bool,
) {
    let n = columns.len();
    for a in 0..n {
        let l = annihilators(&[columns[a]]);
        let d: [u8; 3] = std::array::from_fn(|i| dot(l[i], delta));
        for (b, &column_b) in columns.iter().enumerate().skip(a + 1) {
            let h: [u8; 3] = std::array::from_fn(|i| dot(l[i], column_b));
            let parallel =
                (0..3).all(|i| (i + 1..3).all(|j| gf::mul(d[i], h[j]) == gf::mul(d[j], h[i])));
            if parallel && !visit(&[a, b]) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The locator's rule by brute force over every subset.
    fn naive_locate(n: usize, deltas: &[[u8; 4]]) -> Located {
        if deltas.iter().all(|d| *d == [0; 4]) {
            return Located::Clean;
        }
        let units = n + 4;
        for e in 1..=3 {
            let mut sets = Vec::new();
            for mask in 0u128..(1 << units) {
                if mask.count_ones() as usize != e {
                    continue;
                }
                let set: Vec<usize> = (0..units).filter(|u| mask & (1 << u) != 0).collect();
                if deltas.iter().all(|d| solve(n, &set, *d).is_some()) {
                    sets.push(set);
                }
            }
            match sets.len() {
                0 => continue,
                1 => return Located::Found(UnitSet::new(&sets[0])),
                c => {
                    return Located::Ambiguous {
                        errors: e,
                        candidates: c.min(2),
                    }
                }
            }
        }
        Located::Uncorrectable
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn locate_equals_the_brute_force_rule(
            k in 1usize..6,
            errors in proptest::collection::vec((0usize..16, 1u8..=255), 0..5),
            columns in 1usize..4,
            salt in any::<u8>(),
        ) {
            let n = 2 * k;
            let deltas: Vec<[u8; 4]> = (0..columns)
                .map(|c| {
                    let e: Vec<(usize, u8)> = errors
                        .iter()
                        .map(|&(u, v)| (u % (n + 4), v.wrapping_mul(c as u8 + 1) ^ salt.wrapping_mul(c as u8)))
                        .collect();
                    syndrome(n, &e)
                })
                .collect();
            prop_assert_eq!(locate(n, &deltas, 3), naive_locate(n, &deltas));
        }
    }

    fn syndrome(data_units: usize, errors: &[(usize, u8)]) -> [u8; 4] {
        let mut d = [0u8; 4];
        for &(u, v) in errors {
            let c = column(data_units, u);
            for r in 0..4 {
                d[r] ^= gf::mul(c[r], v);
            }
        }
        d
    }

    #[test]
    fn single_errors_are_found_in_closed_form_everywhere() {
        for k in [1, 4, 12, 42] {
            let n = 2 * k;
            for u in 0..n + 4 {
                for v in [1u8, 2, 0x80, 0xFF] {
                    let d = syndrome(n, &[(u, v)]);
                    assert_eq!(locate_one(n, d), Some(u));
                    assert_eq!(locate(n, &[d], 3), Located::Found(UnitSet::new(&[u])));
                    assert_eq!(solve(n, &[u], d).unwrap()[0], v);
                }
            }
        }
    }

    #[test]
    fn double_errors_are_unique_while_k_is_at_most_ten() {
        let k = 10;
        let n = 2 * k;
        for a in 0..n + 4 {
            for b in a + 1..n + 4 {
                let d = syndrome(n, &[(a, 0x53), (b, 0xCA)]);
                assert_eq!(
                    locate(n, &[d], 3),
                    Located::Found(UnitSet::new(&[a, b])),
                    "{a},{b}"
                );
            }
        }
    }

    #[test]
    fn pair_enumeration_equals_brute_force() {
        for k in [1usize, 3, 5] {
            let n = 2 * k;
            let columns: Vec<[u8; 4]> = (0..n + 4).map(|u| column(n, u)).collect();
            for delta in [
                syndrome(n, &[(1, 5), (n + 2, 9)]),
                syndrome(n, &[(0, 1)]),
                syndrome(n, &[(n, 3), (n + 3, 8)]),
                [7, 1, 2, 3],
            ] {
                let mut fast = Vec::new();
                for_each_pair(&columns, delta, |s| {
                    fast.push(s.to_vec());
                    true
                });
                let mut slow = Vec::new();
                for a in 0..n + 4 {
                    for b in a + 1..n + 4 {
                        if solve(n, &[a, b], delta).is_some() {
                            slow.push(vec![a, b]);
                        }
                    }
                }
                assert_eq!(fast, slow, "k = {k} delta {delta:?}");
            }
        }
    }

    #[test]
    fn triple_enumeration_equals_brute_force() {
        for (k, seed) in [(2usize, 1u8), (4, 7), (6, 99)] {
            let n = 2 * k;
            let columns: Vec<[u8; 4]> = (0..n + 4).map(|u| column(n, u)).collect();
            for delta in [
                syndrome(n, &[(1, seed), (3, 9), (n + 1, 4)]),
                syndrome(n, &[(0, 1), (2, seed)]),
                syndrome(n, &[(n + 3, seed)]),
                [seed, 1, 2, 3],
            ] {
                let mut fast = Vec::new();
                for_each_triple(&columns, delta, |s| {
                    fast.push(s.to_vec());
                    true
                });
                let mut slow = Vec::new();
                for a in 0..n + 4 {
                    for b in a + 1..n + 4 {
                        for c in b + 1..n + 4 {
                            if solve(n, &[a, b, c], delta).is_some() {
                                slow.push(vec![a, b, c]);
                            }
                        }
                    }
                }
                assert_eq!(fast, slow, "k = {k} delta {delta:?}");
            }
        }
    }

    #[test]
    fn a_clean_window_is_clean() {
        assert_eq!(locate(8, &[[0; 4]; 16], 3), Located::Clean);
    }
}
