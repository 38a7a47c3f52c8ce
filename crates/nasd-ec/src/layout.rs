//! Stripe geometry: how a file's bytes and parity map onto its component objects, one per drive.
//!
//! A [`Layout`] is a [`Code`] plus a stripe unit U. Logical byte x of a striped file lies in
//! stripe `s = x / (k·U)`, data index `j = (x mod k·U) / U`, at `x mod U` in its unit; every
//! component object holds one unit per stripe at object offset `s·U` (requirements A.2).
//!
//! | code | N components | data k per stripe | parity per stripe | group | survives |
//! |---|---|---|---|---|---|
//! | `single` | 1 | 1 (no stripes) | 0 | - | 0 drives |
//! | `raid0:N` | N | N | 0 | 1 stripe | 0 |
//! | `mirror:N` | N | 1 (whole-object copies) | 0 | - | N - 1 |
//! | `rs:K+M` | K + M | K | M | 1 stripe | M |
//! | `raid6x:K` | K + 2 | K | 2 (P,Q then R,S) | 2 stripes | 2 (and locates 3 corrupt units) |
//!
//! **Parity placement** rotates so that parity writes and data reads spread over all drives. In
//! rotation step `t` (the group number: stripe for `rs`, stripe / 2 for `raid6x`) the parity slots
//! are the components `(N - P - t + q) mod N` for q = 0..P, where P is the parity components per
//! stripe (M for `rs`, 2 for `raid6x`), and data index j goes to the j-th component, ascending,
//! that is not a parity slot. For `raid6x` this is seed 004's Fig 2 (requirements A.2:
//! `pA = (N-2-g) mod N`, `pB = (N-1-g) mod N`): row 0 puts P on pA and Q on pB, row 1 puts R on
//! pA and S on pB. For `rs` it is the same rule moving every stripe, parity t in slot t. A test
//! redraws Fig 2.
//!
//! **Codec order.** Within a group, units are numbered as the codecs take them: `rs` data j is
//! shard j and parity t is shard K + t; `raid6x` data j of row r is unit `m = r·k + j` and parity
//! e (P, Q, R, S = 0..3) is unit 2k + e. [`Layout::group_units`] lists a group in that order.
//!
//! **Short last group.** Data units past the end of the file are zeros for the parity
//! computation and are not stored (holes); parity units of a group that holds any data are full
//! units. [`Layout::component_len`] gives each component object's length.
//!
//! **Text form** ([`std::str::FromStr`], [`std::fmt::Display`]): `single`, `raid0:N[/UNIT]`,
//! `mirror:N`, `rs:K+M[/UNIT]`, `raid6x:K[/UNIT]`, UNIT a power of two from 4 KiB to 1 MiB
//! written in bytes or with a binary suffix (`4K`, `64KiB`, `1M`). Display omits the default
//! unit (256 KiB for `raid0` as in seed 002 §4.5, 64 KiB for `rs` and `raid6x`).
//!
//! **Byte form** ([`Layout::encode`], [`Layout::decode`]), little-endian, 5 bytes:
//!
//! ```text
//! offset  size  field
//! 0       1     version = 1 (LAYOUT_ENCODING_VERSION)
//! 1       1     code: 0 single, 1 raid0, 2 mirror, 3 rs, 4 raid6x
//! 2       1     a: N (raid0, mirror), K (rs, raid6x); 0 for single
//! 3       1     b: M (rs); 0 otherwise
//! 4       1     log2(unit bytes), 12..=20 (raid0, rs, raid6x); 0 for single and mirror
//! ```
//!
//! Decoding is total: any byte string gives a valid layout or a [`LayoutError`], never a panic,
//! and a decoded layout re-encodes to the same bytes (fields a code does not use must be 0).

use std::fmt;
use std::str::FromStr;

use crate::raid6x::RAID6X_K_MAX;

/// Smallest stripe unit, bytes.
pub const UNIT_BYTES_MIN: u32 = 4 << 10;
/// Largest stripe unit, bytes.
pub const UNIT_BYTES_MAX: u32 = 1 << 20;
/// Default unit of `raid0` (seed 002 §4.5 striped at 256 KiB), bytes.
pub const UNIT_BYTES_DEFAULT_RAID0: u32 = 256 << 10;
/// Default unit of `rs` and `raid6x` (requirements A.1; the bench's reference point), bytes.
pub const UNIT_BYTES_DEFAULT_PARITY: u32 = 64 << 10;
/// Most components (drives) of one file: bounds a file's fan-out and its grants per open.
pub const COMPONENTS_MAX: usize = 64;
/// Most parity shards of `rs` in nasd (the codec itself allows more).
pub const RS_PARITY_MAX: usize = 4;
/// Version byte of the byte form.
pub const LAYOUT_ENCODING_VERSION: u8 = 1;
/// Length of the byte form.
pub const LAYOUT_ENCODED_BYTES: usize = 5;

const _: () = assert!(UNIT_BYTES_MIN.is_power_of_two() && UNIT_BYTES_MAX.is_power_of_two());
const _: () = assert!(RAID6X_K_MAX + 2 <= COMPONENTS_MAX);
// The AES-aware locator and 64-byte SIMD blocks want units that are whole blocks of both.
const _: () = assert!(UNIT_BYTES_MIN.is_multiple_of(64));

/// A layout that cannot be built, parsed or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The text is not `NAME[:PARAMS][/UNIT]`.
    #[error("layout {input:?}: {reason}")]
    Syntax {
        /// The text given.
        input: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Not a known code name.
    #[error("unknown layout {0:?} (expected single, raid0:N, mirror:N, rs:K+M or raid6x:K)")]
    UnknownCode(String),
    /// A parameter is out of range.
    #[error("{code}: {what} = {value} is out of range {min}..={max}")]
    OutOfRange {
        /// The code.
        code: &'static str,
        /// The parameter (N, K, M, K+M).
        what: &'static str,
        /// Its value.
        value: usize,
        /// Smallest allowed.
        min: usize,
        /// Largest allowed.
        max: usize,
    },
    /// The stripe unit is not a power of two in range.
    #[error("stripe unit of {0} bytes: must be a power of two from 4 KiB to 1 MiB")]
    Unit(u64),
    /// `single` and `mirror` have no stripe unit.
    #[error("{0} has no stripe unit")]
    UnitNotAllowed(&'static str),
    /// The layout needs more drives than the cluster has.
    #[error("layout {layout} needs {needed} drives, the cluster has {drives}")]
    NotEnoughDrives {
        /// The layout, as text.
        layout: String,
        /// Its component count.
        needed: usize,
        /// Drives available.
        drives: usize,
    },
    /// The byte form is shorter than [`LAYOUT_ENCODED_BYTES`].
    #[error("layout bytes: {got} bytes, need {LAYOUT_ENCODED_BYTES}")]
    Truncated {
        /// Bytes given.
        got: usize,
    },
    /// The byte form is longer than [`LAYOUT_ENCODED_BYTES`].
    #[error("layout bytes: {got} bytes, expected exactly {LAYOUT_ENCODED_BYTES}")]
    TrailingBytes {
        /// Bytes given.
        got: usize,
    },
    /// Unknown version byte.
    #[error("layout bytes: version {0}, this build reads {LAYOUT_ENCODING_VERSION}")]
    Version(u8),
    /// Unknown code byte.
    #[error("layout bytes: unknown code {0}")]
    CodeTag(u8),
    /// A field the code does not use is not zero (the byte form is canonical).
    #[error("layout bytes: field {0} must be 0 for this code")]
    NonZeroField(&'static str),
}

/// The redundancy scheme of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// One object on one drive (today's layout).
    Single,
    /// Striping without redundancy over `n` components.
    Raid0 {
        /// Components.
        n: u8,
    },
    /// `n` full copies.
    Mirror {
        /// Copies.
        n: u8,
    },
    /// Reed-Solomon, `k` data and `m` parity shards per stripe ([`crate::rs`]).
    Rs {
        /// Data shards.
        k: u8,
        /// Parity shards.
        m: u8,
    },
    /// Seed 004's P, Q, R, S over two stripes of `k` data units ([`crate::raid6x`]).
    Raid6x {
        /// Data units per stripe.
        k: u8,
    },
}

impl Code {
    /// The name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            Code::Single => "single",
            Code::Raid0 { .. } => "raid0",
            Code::Mirror { .. } => "mirror",
            Code::Rs { .. } => "rs",
            Code::Raid6x { .. } => "raid6x",
        }
    }

    fn tag(self) -> u8 {
        match self {
            Code::Single => 0,
            Code::Raid0 { .. } => 1,
            Code::Mirror { .. } => 2,
            Code::Rs { .. } => 3,
            Code::Raid6x { .. } => 4,
        }
    }

    /// Whether the code stripes (has a stripe unit).
    pub fn is_striped(self) -> bool {
        matches!(
            self,
            Code::Raid0 { .. } | Code::Rs { .. } | Code::Raid6x { .. }
        )
    }

    fn default_unit(self) -> Option<u32> {
        match self {
            Code::Single | Code::Mirror { .. } => None,
            Code::Raid0 { .. } => Some(UNIT_BYTES_DEFAULT_RAID0),
            Code::Rs { .. } | Code::Raid6x { .. } => Some(UNIT_BYTES_DEFAULT_PARITY),
        }
    }

    /// Checks the parameters' ranges.
    fn validate(self) -> Result<(), LayoutError> {
        let range = |what, value: usize, min, max| {
            if (min..=max).contains(&value) {
                Ok(())
            } else {
                Err(LayoutError::OutOfRange {
                    code: self.name(),
                    what,
                    value,
                    min,
                    max,
                })
            }
        };
        match self {
            Code::Single => Ok(()),
            Code::Raid0 { n } | Code::Mirror { n } => range("N", n as usize, 2, COMPONENTS_MAX),
            Code::Rs { k, m } => {
                range("M", m as usize, 1, RS_PARITY_MAX)?;
                range("K", k as usize, 1, COMPONENTS_MAX - 1)?;
                range("K+M", k as usize + m as usize, 2, COMPONENTS_MAX)
            }
            Code::Raid6x { k } => range("K", k as usize, 1, RAID6X_K_MAX),
        }
    }
}

/// What a component holds at one stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Data index j of the stripe (0..k).
    Data(usize),
    /// Parity: `rs` shard K + t has index t; `raid6x` P, Q, R, S have 0..3 (P, Q in row 0; R, S
    /// in row 1).
    Parity(usize),
    /// A full copy (`single`, `mirror`).
    Copy,
}

/// A piece of a logical byte range that lies in one unit of one component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Logical offset of the piece's first byte.
    pub logical_offset: u64,
    /// Bytes.
    pub len: u64,
    /// The component holding it (for `mirror`, every component holds it; 0 is named).
    pub component: usize,
    /// Offset in the component object.
    pub object_offset: u64,
    /// Stripe number (0 for `single` and `mirror`).
    pub stripe: u64,
    /// Data index in the stripe (0 for `single` and `mirror`).
    pub data_index: usize,
}

/// A unit of a group, in codec order ([`Layout::group_units`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupUnit {
    /// Index in codec order (data, then parity).
    pub unit: usize,
    /// What it is.
    pub role: Role,
    /// The component holding it.
    pub component: usize,
    /// Its stripe.
    pub stripe: u64,
    /// Its offset in the component object (`stripe · U`).
    pub object_offset: u64,
}

/// What [`Layout::locate`] finds at a component offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitAt {
    /// The stripe (0 for `single` and `mirror`).
    pub stripe: u64,
    /// The unit's role.
    pub role: Role,
    /// For data and copies, the logical offset of the byte.
    pub logical_offset: Option<u64>,
}

/// A layout: a code and its stripe unit. Small and `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    code: Code,
    /// 0 for `single` and `mirror`.
    unit_bytes: u32,
}

impl Layout {
    /// A layout from a code and a unit (`None`: the code's default; must be `None` for `single`
    /// and `mirror`).
    pub fn new(code: Code, unit_bytes: Option<u32>) -> Result<Layout, LayoutError> {
        code.validate()?;
        let unit_bytes = match (code.default_unit(), unit_bytes) {
            (None, None) => 0,
            (None, Some(_)) => return Err(LayoutError::UnitNotAllowed(code.name())),
            (Some(default), u) => {
                let u = u.unwrap_or(default);
                if !u.is_power_of_two() || !(UNIT_BYTES_MIN..=UNIT_BYTES_MAX).contains(&u) {
                    return Err(LayoutError::Unit(u as u64));
                }
                u
            }
        };
        Ok(Layout { code, unit_bytes })
    }

    /// `single`.
    pub fn single() -> Layout {
        Layout {
            code: Code::Single,
            unit_bytes: 0,
        }
    }

    /// The code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The stripe unit, bytes (`None` for `single` and `mirror`).
    pub fn unit_bytes(&self) -> Option<u32> {
        (self.unit_bytes != 0).then_some(self.unit_bytes)
    }

    /// N: component objects (drives) per file.
    pub fn components(&self) -> usize {
        match self.code {
            Code::Single => 1,
            Code::Raid0 { n } | Code::Mirror { n } => n as usize,
            Code::Rs { k, m } => k as usize + m as usize,
            Code::Raid6x { k } => k as usize + 2,
        }
    }

    /// k: data units per stripe (1 for `single` and `mirror`).
    pub fn data_per_stripe(&self) -> usize {
        match self.code {
            Code::Single | Code::Mirror { .. } => 1,
            Code::Raid0 { n } => n as usize,
            Code::Rs { k, .. } | Code::Raid6x { k } => k as usize,
        }
    }

    /// Parity components per stripe (M for `rs`, 2 for `raid6x`, else 0).
    pub fn parity_per_stripe(&self) -> usize {
        match self.code {
            Code::Rs { m, .. } => m as usize,
            Code::Raid6x { .. } => 2,
            _ => 0,
        }
    }

    /// Stripes per parity group (2 for `raid6x`, else 1).
    pub fn stripes_per_group(&self) -> u64 {
        match self.code {
            Code::Raid6x { .. } => 2,
            _ => 1,
        }
    }

    /// Units per group in codec order (`rs`: K + M; `raid6x`: 2k + 4; `raid0`: N; else N).
    pub fn units_per_group(&self) -> usize {
        match self.code {
            Code::Raid6x { k } => 2 * k as usize + 4,
            _ => self.components(),
        }
    }

    /// Logical bytes per stripe, k·U (`None` for `single` and `mirror`).
    pub fn stripe_bytes(&self) -> Option<u64> {
        self.unit_bytes()
            .map(|u| u as u64 * self.data_per_stripe() as u64)
    }

    /// Logical bytes per group.
    pub fn group_bytes(&self) -> Option<u64> {
        self.stripe_bytes().map(|s| s * self.stripes_per_group())
    }

    /// Drives that may be lost with every byte still readable.
    pub fn tolerated_failures(&self) -> usize {
        match self.code {
            Code::Single | Code::Raid0 { .. } => 0,
            Code::Mirror { n } => n as usize - 1,
            Code::Rs { m, .. } => m as usize,
            Code::Raid6x { .. } => 2,
        }
    }

    /// Checks that a cluster of `drives` drives can hold the layout (components on distinct
    /// drives).
    pub fn check_drives(&self, drives: usize) -> Result<(), LayoutError> {
        if self.components() <= drives {
            Ok(())
        } else {
            Err(LayoutError::NotEnoughDrives {
                layout: self.to_string(),
                needed: self.components(),
                drives,
            })
        }
    }

    /// The parity slot components of rotation step `t`, ascending by slot.
    fn parity_slots(&self, t: u64) -> impl Iterator<Item = usize> {
        let n = self.components() as u64;
        let p = self.parity_per_stripe() as u64;
        (0..p).map(move |q| ((n - p + q + n - t % n) % n) as usize)
    }

    fn is_parity_slot(&self, t: u64, c: usize) -> Option<usize> {
        self.parity_slots(t).position(|s| s == c)
    }

    /// The role of component `c` at `stripe`.
    pub fn role(&self, stripe: u64, c: usize) -> Role {
        assert!(c < self.components(), "component out of range");
        match self.code {
            Code::Single | Code::Mirror { .. } => Role::Copy,
            Code::Raid0 { .. } => Role::Data(c),
            Code::Rs { .. } | Code::Raid6x { .. } => {
                let t = stripe / self.stripes_per_group();
                if let Some(q) = self.is_parity_slot(t, c) {
                    return Role::Parity(self.parity_of_slot(stripe, q));
                }
                let before = self.parity_slots(t).filter(|&s| s < c).count();
                Role::Data(c - before)
            }
        }
    }

    /// Codec parity index held in slot q at `stripe`.
    fn parity_of_slot(&self, stripe: u64, q: usize) -> usize {
        match self.code {
            Code::Raid6x { .. } => 2 * (stripe % 2) as usize + q,
            _ => q,
        }
    }

    /// The component holding `role` at `stripe` (`Copy` names component 0).
    pub fn component(&self, stripe: u64, role: Role) -> usize {
        match (self.code, role) {
            (Code::Single | Code::Mirror { .. }, _) => 0,
            (Code::Raid0 { .. }, Role::Data(j)) => j,
            (_, Role::Data(j)) => {
                assert!(j < self.data_per_stripe(), "data index out of range");
                let t = stripe / self.stripes_per_group();
                let mut slots: Vec<usize> = self.parity_slots(t).collect();
                slots.sort_unstable();
                // The j-th component, ascending, that is not a parity slot.
                let mut c = j;
                for s in slots {
                    if s <= c {
                        c += 1;
                    }
                }
                c
            }
            (_, Role::Parity(p)) => {
                let t = stripe / self.stripes_per_group();
                let q = match self.code {
                    Code::Raid6x { .. } => {
                        assert_eq!(p / 2, (stripe % 2) as usize, "R and S live in row 1");
                        p % 2
                    }
                    _ => p,
                };
                self.parity_slots(t)
                    .nth(q)
                    .expect("parity index below parity_per_stripe")
            }
            (_, Role::Copy) => panic!("striped layouts hold no copies"),
        }
    }

    /// The units of group `group` in codec order, with their components and offsets.
    pub fn group_units(&self, group: u64) -> Vec<GroupUnit> {
        let u = self.unit_bytes as u64;
        match self.code {
            Code::Single | Code::Mirror { .. } => (0..self.components())
                .map(|c| GroupUnit {
                    unit: c,
                    role: Role::Copy,
                    component: c,
                    stripe: 0,
                    object_offset: 0,
                })
                .collect(),
            _ => {
                let spg = self.stripes_per_group();
                let k = self.data_per_stripe();
                let mut out = Vec::with_capacity(self.units_per_group());
                for r in 0..spg {
                    let stripe = group * spg + r;
                    for j in 0..k {
                        out.push(self.group_unit(stripe, Role::Data(j), r as usize * k + j, u));
                    }
                }
                let parities = self.units_per_group() - out.len();
                for p in 0..parities {
                    let stripe = match self.code {
                        Code::Raid6x { .. } => group * spg + (p / 2) as u64,
                        _ => group,
                    };
                    let unit = out.len();
                    out.push(self.group_unit(stripe, Role::Parity(p), unit, u));
                }
                out
            }
        }
    }

    fn group_unit(&self, stripe: u64, role: Role, unit: usize, u: u64) -> GroupUnit {
        GroupUnit {
            unit,
            role,
            component: self.component(stripe, role),
            stripe,
            object_offset: stripe * u,
        }
    }

    /// The pieces of the logical range `offset..offset + len`, one per unit touched, in logical
    /// order.
    pub fn map(&self, offset: u64, len: u64) -> Extents {
        Extents {
            layout: *self,
            next: offset,
            end: offset.saturating_add(len),
        }
    }

    /// What component `c` holds at `object_offset`.
    pub fn locate(&self, c: usize, object_offset: u64) -> UnitAt {
        assert!(c < self.components(), "component out of range");
        let Some(u) = self.unit_bytes() else {
            return UnitAt {
                stripe: 0,
                role: Role::Copy,
                logical_offset: Some(object_offset),
            };
        };
        let u = u as u64;
        let stripe = object_offset / u;
        let role = self.role(stripe, c);
        let logical_offset = match role {
            Role::Data(j) => {
                Some(stripe * u * self.data_per_stripe() as u64 + j as u64 * u + object_offset % u)
            }
            _ => None,
        };
        UnitAt {
            stripe,
            role,
            logical_offset,
        }
    }

    /// The length component `c`'s object has for a file of `logical_len` bytes: data it holds,
    /// plus full parity units of every group that holds data. Zero data units past the end of
    /// the file are holes and add nothing.
    pub fn component_len(&self, c: usize, logical_len: u64) -> u64 {
        assert!(c < self.components(), "component out of range");
        let (Some(u), Some(group_bytes)) = (self.unit_bytes(), self.group_bytes()) else {
            return logical_len;
        };
        if logical_len == 0 {
            return 0;
        }
        let u = u as u64;
        let last_group = (logical_len - 1) / group_bytes;
        let mut end = 0;
        // Units in groups before the last one are all full, so only the last two groups can
        // hold a component's last unit.
        for g in last_group.saturating_sub(1)..=last_group {
            for gu in self
                .group_units(g)
                .into_iter()
                .filter(|gu| gu.component == c)
            {
                let held = match gu.role {
                    Role::Data(j) => {
                        let start = gu.stripe * u * self.data_per_stripe() as u64 + j as u64 * u;
                        logical_len.saturating_sub(start).min(u)
                    }
                    _ => u,
                };
                if held > 0 {
                    end = end.max(gu.object_offset + held);
                }
            }
        }
        end
    }

    /// The logical offset below which writes that stay below `end` may touch bytes, for the
    /// bounds of seed 002 §3.2's quota escrow: a parity layout's writer reads and rewrites
    /// whole units of every group a write touches (read-modify-write of a partial group, and
    /// the parity of a short last group is a full unit), so its bound is `end` rounded up to a
    /// whole group; every other layout writes only the bytes asked for. Saturates at
    /// `u64::MAX`.
    pub fn write_bound(&self, end: u64) -> u64 {
        match (self.parity_per_stripe(), self.group_bytes()) {
            (p, Some(gb)) if p > 0 => end.div_ceil(gb).saturating_mul(gb),
            _ => end,
        }
    }

    /// The object bytes `[0, n)` of component `c` that writes of a file staying below logical
    /// offset `end` (and the reads its parity writes make) may touch: the component's length
    /// for a file of [`Layout::write_bound`]`(end)` bytes, so whole units of every group the
    /// writes reach, parity included. A capability for the component with this region lets
    /// such writes through and nothing past them (seed 002 §3.2: the escrowed size is the
    /// capability's maximum offset).
    pub fn component_bound(&self, c: usize, end: u64) -> u64 {
        self.component_len(c, self.write_bound(end))
    }

    /// The 5-byte form (module doc).
    pub fn encode(&self) -> [u8; LAYOUT_ENCODED_BYTES] {
        let (a, b) = match self.code {
            Code::Single => (0, 0),
            Code::Raid0 { n } | Code::Mirror { n } => (n, 0),
            Code::Rs { k, m } => (k, m),
            Code::Raid6x { k } => (k, 0),
        };
        let unit_log2 = self.unit_bytes().map_or(0, |u| u.trailing_zeros() as u8);
        [LAYOUT_ENCODING_VERSION, self.code.tag(), a, b, unit_log2]
    }

    /// Parses the 5-byte form; total (never panics) and canonical.
    pub fn decode(bytes: &[u8]) -> Result<Layout, LayoutError> {
        if bytes.len() < LAYOUT_ENCODED_BYTES {
            return Err(LayoutError::Truncated { got: bytes.len() });
        }
        if bytes.len() > LAYOUT_ENCODED_BYTES {
            return Err(LayoutError::TrailingBytes { got: bytes.len() });
        }
        let [version, tag, a, b, unit_log2] = [bytes[0], bytes[1], bytes[2], bytes[3], bytes[4]];
        if version != LAYOUT_ENCODING_VERSION {
            return Err(LayoutError::Version(version));
        }
        let zero = |v: u8, name| {
            if v == 0 {
                Ok(())
            } else {
                Err(LayoutError::NonZeroField(name))
            }
        };
        let code = match tag {
            0 => {
                zero(a, "a")?;
                Code::Single
            }
            1 => Code::Raid0 { n: a },
            2 => Code::Mirror { n: a },
            3 => Code::Rs { k: a, m: b },
            4 => Code::Raid6x { k: a },
            t => return Err(LayoutError::CodeTag(t)),
        };
        if !matches!(code, Code::Rs { .. }) {
            zero(b, "b")?;
        }
        let unit = if code.is_striped() {
            if !(12..=20).contains(&unit_log2) {
                return Err(LayoutError::Unit(1u64 << unit_log2.min(63)));
            }
            Some(1u32 << unit_log2)
        } else {
            zero(unit_log2, "unit")?;
            None
        };
        Layout::new(code, unit)
    }
}

/// Iterator of [`Layout::map`].
#[derive(Clone, Debug)]
pub struct Extents {
    layout: Layout,
    next: u64,
    end: u64,
}

impl Iterator for Extents {
    type Item = Extent;

    fn next(&mut self) -> Option<Extent> {
        if self.next >= self.end {
            return None;
        }
        let x = self.next;
        let Some(u) = self.layout.unit_bytes() else {
            self.next = self.end;
            return Some(Extent {
                logical_offset: x,
                len: self.end - x,
                component: 0,
                object_offset: x,
                stripe: 0,
                data_index: 0,
            });
        };
        let u = u as u64;
        let k = self.layout.data_per_stripe() as u64;
        let stripe = x / (k * u);
        let j = ((x % (k * u)) / u) as usize;
        let in_unit = x % u;
        let len = (u - in_unit).min(self.end - x);
        self.next = x + len;
        Some(Extent {
            logical_offset: x,
            len,
            component: self.layout.component(stripe, Role::Data(j)),
            object_offset: stripe * u + in_unit,
            stripe,
            data_index: j,
        })
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Code::Single => write!(f, "single")?,
            Code::Raid0 { n } => write!(f, "raid0:{n}")?,
            Code::Mirror { n } => write!(f, "mirror:{n}")?,
            Code::Rs { k, m } => write!(f, "rs:{k}+{m}")?,
            Code::Raid6x { k } => write!(f, "raid6x:{k}")?,
        }
        match (self.unit_bytes(), self.code.default_unit()) {
            (Some(u), Some(d)) if u != d => write!(f, "/{}", format_unit(u)),
            _ => Ok(()),
        }
    }
}

fn format_unit(u: u32) -> String {
    if u.is_multiple_of(1 << 20) {
        format!("{}M", u >> 20)
    } else if u.is_multiple_of(1 << 10) {
        format!("{}K", u >> 10)
    } else {
        u.to_string()
    }
}

fn parse_unit(input: &str, s: &str) -> Result<u32, LayoutError> {
    let syntax = |reason| LayoutError::Syntax {
        input: input.to_string(),
        reason,
    };
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, suffix) = s.split_at(digits_end);
    let n: u64 = digits
        .parse()
        .map_err(|_| syntax("the stripe unit must be a number of bytes, e.g. 64K"))?;
    let shift = match suffix {
        "" => 0,
        "K" | "k" | "KiB" => 10,
        "M" | "m" | "MiB" => 20,
        _ => return Err(syntax("stripe unit suffix must be K, KiB, M or MiB")),
    };
    let bytes = n
        .checked_shl(shift)
        .filter(|b| b >> shift == n)
        .unwrap_or(u64::MAX);
    u32::try_from(bytes).map_err(|_| LayoutError::Unit(bytes))
}

fn parse_count(input: &str, s: &str) -> Result<u8, LayoutError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(LayoutError::Syntax {
            input: input.to_string(),
            reason: "expected a number",
        });
    }
    // Out-of-range values saturate so that validation names the limit.
    Ok(s.parse::<u64>().unwrap_or(u64::MAX).min(255) as u8)
}

impl FromStr for Layout {
    type Err = LayoutError;

    fn from_str(text: &str) -> Result<Layout, LayoutError> {
        let input = text.trim();
        let (head, unit) = match input.split_once('/') {
            Some((h, u)) => (h, Some(parse_unit(input, u)?)),
            None => (input, None),
        };
        let (name, params) = match head.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (head, None),
        };
        let need = || {
            params.ok_or_else(|| LayoutError::Syntax {
                input: input.to_string(),
                reason: "this code needs parameters, e.g. raid0:4, rs:4+2, raid6x:8",
            })
        };
        let code = match name {
            "single" if params.is_none() => Code::Single,
            "single" => {
                return Err(LayoutError::Syntax {
                    input: input.to_string(),
                    reason: "single takes no parameters",
                })
            }
            "raid0" => Code::Raid0 {
                n: parse_count(input, need()?)?,
            },
            "mirror" => Code::Mirror {
                n: parse_count(input, need()?)?,
            },
            "raid6x" => Code::Raid6x {
                k: parse_count(input, need()?)?,
            },
            "rs" => {
                let (k, m) = need()?.split_once('+').ok_or(LayoutError::Syntax {
                    input: input.to_string(),
                    reason: "rs takes K+M, e.g. rs:4+2",
                })?;
                Code::Rs {
                    k: parse_count(input, k)?,
                    m: parse_count(input, m)?,
                }
            }
            other => return Err(LayoutError::UnknownCode(other.to_string())),
        };
        Layout::new(code, unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Layout {
        s.parse().unwrap()
    }

    /// Seed 004 Fig 2 (N = 5), drawn from the layout: disks 1-5 across, stripes 0-3 down.
    #[test]
    fn raid6x_redraws_fig_2() {
        let layout = l("raid6x:3");
        let name = |s: u64, c: usize| match layout.role(s, c) {
            Role::Data(j) => format!("D{s}{j}"),
            Role::Parity(p) => {
                let g = s / 2;
                format!("{}{}{}", ["P", "Q", "R", "S"][p], 2 * g, 2 * g + 1)
            }
            Role::Copy => unreachable!(),
        };
        let rows: Vec<String> = (0..4)
            .map(|s| (0..5).map(|c| name(s, c)).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            rows,
            [
                "D00 D01 D02 P01 Q01",
                "D10 D11 D12 R01 S01",
                "D20 D21 P23 Q23 D22",
                "D30 D31 R23 S23 D32",
            ]
        );
    }

    #[test]
    fn text_form_round_trips_and_omits_default_units() {
        for (text, shown) in [
            ("single", "single"),
            ("raid0:4", "raid0:4"),
            ("raid0:4/256K", "raid0:4"),
            ("raid0:4/64KiB", "raid0:4/64K"),
            ("mirror:3", "mirror:3"),
            ("rs:4+2", "rs:4+2"),
            ("rs:10+4/1M", "rs:10+4/1M"),
            ("rs:4+2/4096", "rs:4+2/4K"),
            ("raid6x:8/65536", "raid6x:8"),
            (" raid6x:42/128k ", "raid6x:42/128K"),
        ] {
            let layout = l(text);
            assert_eq!(layout.to_string(), shown);
            assert_eq!(l(shown), layout);
            assert_eq!(Layout::decode(&layout.encode()), Ok(layout));
        }
    }

    #[test]
    fn bad_layouts_are_named() {
        let err = |s: &str| s.parse::<Layout>().unwrap_err().to_string();
        assert_eq!(err("raid6x:43"), "raid6x: K = 43 is out of range 1..=42");
        assert_eq!(err("rs:4+5"), "rs: M = 5 is out of range 1..=4");
        assert_eq!(err("rs:62+4"), "rs: K+M = 66 is out of range 2..=64");
        assert_eq!(err("raid0:1"), "raid0: N = 1 is out of range 2..=64");
        assert_eq!(
            err("raid0:99999999999999999999"),
            "raid0: N = 255 is out of range 2..=64"
        );
        assert!(err("rs:4+2/3000").contains("power of two"));
        assert!(err("rs:4+2/2M").contains("power of two"));
        assert!(err("rs:4+2/99999999999999M").contains("power of two"));
        assert_eq!(err("mirror:2/64K"), "mirror has no stripe unit");
        assert!(err("raid5:3").contains("unknown layout"));
        assert!(err("rs:4").contains("K+M"));
        assert!(err("raid0").contains("needs parameters"));
        assert!(err("raid0:x").contains("expected a number"));
        assert_eq!(
            l("rs:4+2").check_drives(5).unwrap_err().to_string(),
            "layout rs:4+2 needs 6 drives, the cluster has 5"
        );
        assert!(l("rs:4+2").check_drives(6).is_ok());
    }

    #[test]
    fn byte_form_is_strict() {
        let good = l("rs:4+2").encode();
        assert_eq!(good, [1, 3, 4, 2, 16]);
        assert_eq!(l("single").encode(), [1, 0, 0, 0, 0]);
        assert_eq!(
            Layout::decode(&good[..4]),
            Err(LayoutError::Truncated { got: 4 })
        );
        assert_eq!(
            Layout::decode(&[1, 3, 4, 2, 16, 0]),
            Err(LayoutError::TrailingBytes { got: 6 })
        );
        assert_eq!(
            Layout::decode(&[2, 3, 4, 2, 16]),
            Err(LayoutError::Version(2))
        );
        assert_eq!(
            Layout::decode(&[1, 9, 4, 2, 16]),
            Err(LayoutError::CodeTag(9))
        );
        assert_eq!(
            Layout::decode(&[1, 1, 4, 2, 16]),
            Err(LayoutError::NonZeroField("b"))
        );
        assert_eq!(
            Layout::decode(&[1, 2, 4, 0, 16]),
            Err(LayoutError::NonZeroField("unit"))
        );
        assert!(Layout::decode(&[1, 3, 4, 2, 11]).is_err());
        assert!(Layout::decode(&[1, 3, 4, 2, 255]).is_err());
    }

    /// The fuzz target's properties (fuzz/fuzz_targets/layout_decode.rs), exhaustively over every
    /// version-1 input with a known or near-known code byte.
    #[test]
    fn decode_is_total_and_canonical() {
        let mut accepted = 0;
        for tag in 0..7u8 {
            for a in 0..=255u8 {
                for b in 0..=255u8 {
                    for unit in 0..24u8 {
                        let bytes = [1, tag, a, b, unit];
                        let Ok(layout) = Layout::decode(&bytes) else {
                            continue;
                        };
                        accepted += 1;
                        assert_eq!(layout.encode(), bytes);
                        assert_eq!(layout.to_string().parse::<Layout>(), Ok(layout));
                        let last = layout.map(u64::MAX - 5000, 4999).last();
                        assert!(last.is_some_and(|e| e.component < layout.components()));
                    }
                }
            }
        }
        // single + 63 mirror + 63 raid0 x 9 units + rs (sum over M of K+M <= 64) x 9 + 42 x 9.
        let rs: usize = (1..=4).map(|m| 64 - m).sum();
        assert_eq!(accepted, 1 + 63 + 63 * 9 + rs * 9 + 42 * 9);
        for len in 0..12 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 53) as u8).collect();
            let _ = Layout::decode(&bytes);
        }
    }

    #[test]
    fn rs_parity_rotates_over_every_component() {
        let layout = l("rs:4+2");
        let mut parity_count = [0; 6];
        for s in 0..6 {
            for (c, count) in parity_count.iter_mut().enumerate() {
                if let Role::Parity(_) = layout.role(s, c) {
                    *count += 1;
                }
            }
        }
        assert_eq!(parity_count, [2; 6]);
        assert_eq!(layout.component(0, Role::Parity(0)), 4);
        assert_eq!(layout.component(5, Role::Parity(0)), 5);
        assert_eq!(layout.component(5, Role::Parity(1)), 0);
        assert_eq!(layout.component(5, Role::Data(0)), 1);
    }

    /// The naive bound: every byte a writer staying below logical `end` may touch, found
    /// by walking units. Data pieces of the range for layouts without parity; for parity
    /// layouts, every unit (data and parity) of every group the range reaches, since a
    /// partial group is read and rewritten whole.
    fn naive_bound(layout: &Layout, end: u64) -> Vec<u64> {
        let mut out = vec![0u64; layout.components()];
        match layout
            .group_bytes()
            .filter(|_| layout.parity_per_stripe() > 0)
        {
            None => {
                for e in layout.map(0, end) {
                    let (lo, hi) = match layout.code() {
                        Code::Mirror { .. } => (0, layout.components()),
                        _ => (e.component, e.component + 1),
                    };
                    for b in &mut out[lo..hi] {
                        *b = (*b).max(e.object_offset + e.len);
                    }
                }
            }
            Some(gb) => {
                let u = layout.unit_bytes().unwrap() as u64;
                for g in 0..end.div_ceil(gb) {
                    for gu in layout.group_units(g) {
                        out[gu.component] = out[gu.component].max(gu.object_offset + u);
                    }
                }
            }
        }
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
        /// Escrow bounds (seed 002 §3.2) against the naive walk, for every code.
        #[test]
        fn component_bounds_match_a_walk_over_units(
            code in 0usize..5,
            a in 1u8..7,
            b in 1u8..4,
            unit_log2 in 12u32..14,
            end in 0u64..(1 << 20),
        ) {
            let code = match code {
                0 => Code::Single,
                1 => Code::Raid0 { n: a + 1 },
                2 => Code::Mirror { n: a + 1 },
                3 => Code::Rs { k: a, m: b },
                _ => Code::Raid6x { k: a },
            };
            let unit = code.is_striped().then_some(1u32 << unit_log2);
            let layout = Layout::new(code, unit).unwrap();
            let wb = layout.write_bound(end);
            proptest::prop_assert!(wb >= end);
            proptest::prop_assert!(wb - end < layout.group_bytes().unwrap_or(1).max(1));
            let naive = naive_bound(&layout, end);
            for (c, want) in naive.iter().enumerate() {
                proptest::prop_assert_eq!(layout.component_bound(c, end), *want, "component {}", c);
                // Never below what the file's own bytes occupy.
                proptest::prop_assert!(layout.component_bound(c, end) >= layout.component_len(c, end));
            }
        }
    }

    #[test]
    fn write_bounds_saturate() {
        assert_eq!(l("rs:4+2").write_bound(u64::MAX), u64::MAX);
        assert_eq!(l("raid0:4").write_bound(u64::MAX - 1), u64::MAX - 1);
        assert_eq!(l("rs:2+1/4K").write_bound(1), 8192);
        assert_eq!(l("rs:2+1/4K").component_bound(2, 1), 4096);
        assert_eq!(l("raid0:2/4K").component_bound(1, 4096), 0);
        assert_eq!(l("raid0:2/4K").component_bound(1, 4097), 1);
    }

    #[test]
    fn component_lengths_of_a_short_last_group() {
        // raid6x:3/4K, 5000 bytes: D00 full (4096), D01 holds 904; P, Q, R, S full units, R and S
        // in stripe 1 (object offset 4 KiB).
        let layout = l("raid6x:3/4K");
        let lens: Vec<u64> = (0..5).map(|c| layout.component_len(c, 5000)).collect();
        assert_eq!(lens, [4096, 904, 0, 8192, 8192]);
        // raid0:2/4K, 3 units and 1 byte: component 0 holds units 0 and 2, component 1 unit 1
        // and the last byte.
        assert_eq!(l("raid0:2/4K").component_len(0, 3 * 4096 + 1), 8192);
        assert_eq!(l("raid0:2/4K").component_len(1, 3 * 4096 + 1), 4097);
        assert_eq!(l("mirror:2").component_len(1, 77), 77);
        assert_eq!(l("rs:2+1/4K").component_len(0, 0), 0);
    }
}
