//! `raid6x:K`, seed 004 §3: four parities P, Q, R, S over the 2k data units of **two** stripes.
//!
//! A group's data units are numbered `m = r·k + j` (row r = 0, 1 of the group, data index j),
//! and per byte column
//!
//! ```text
//! P = XOR D_m    Q = XOR g^m·D_m    R = XOR g^(2m)·D_m    S = XOR g^(3m)·D_m
//! ```
//!
//! over GF(2^8) with 0x11D and g = 2. Units are indexed in code order: data 0..2k, then P, Q, R,
//! S at 2k..2k+4. The check matrix is `H = [V | I4]`, `V[e][m] = g^(e·m)`.
//!
//! - Encoding runs the SIMD kernels ([`Engine::Simd`]) or seed 004's 32-bit tables
//!   ([`Engine::Table`], simple or cache-aware order); either can split the columns across
//!   rayon's pool ([`Raid6x::with_parallel`]).
//! - Erasures of known position: any pattern of at most 4 units whose columns of H are
//!   independent is rebuilt ([`Raid6x::reconstruct_some`]); every 1- and 2-disk failure is such a
//!   pattern for k <= 127, but from k = 11 some 4-unit patterns mixing 3 data units with Q or R
//!   are not (docs/ec.md has the exhaustive counts), and those return
//!   [`ShardError::Undecodable`].
//! - Detection ([`Raid6x::check`]): with f units missing, the 4 - f parity equations left over
//!   after rebuilding them must hold; random corruption passes with probability 2^(-8(4-f)) per
//!   byte column.
//! - Correction at unknown positions ([`Raid6x::correct`]): syndromes per column, then
//!   [`crate::locate`] per byte or per 16-byte AES window; all or nothing per group.
//!
//! K is limited to [`RAID6X_K_MAX`] = 42: at k = 43, units m and m + 85 get equal S coefficients
//! (g^(3·85) = g^255 = 1) and equal P coefficients, so losing both together with Q and R cannot
//! be undone.

use std::sync::OnceLock;

use crate::error::{CodeError, CorrectError, ShardError};
use crate::gf::{self, Matrix};
use crate::kernel::{self, Coeffs, Path};
use crate::locate::{self, Located, UnitSet, SYNDROMES};
use crate::shards::{self, PlanCache, ShardSet};
use crate::table::{self, TableOrder, Tables};

/// The largest K (data units per stripe); see the module doc.
pub const RAID6X_K_MAX: usize = 42;
/// Parity units per group: P, Q, R, S.
pub const PARITIES: usize = 4;
/// Stripes per group.
pub const STRIPES_PER_GROUP: usize = 2;
/// The AES block: the window of [`Window::AesBlock`] correction.
pub const AES_BLOCK_BYTES: usize = 16;

/// How parity and rebuilt units are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// The region kernels ([`crate::kernel`]).
    Simd,
    /// Seed 004's 32-bit lookup tables in the given order ([`crate::table`]).
    Table(TableOrder),
}

impl Engine {
    /// `simd`, `table-simple` or `table-cache-aware`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Simd => "simd",
            Engine::Table(TableOrder::Simple) => "table-simple",
            Engine::Table(TableOrder::CacheAware) => "table-cache-aware",
        }
    }
}

/// The columns whose syndromes must agree on the corrupt units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// Every byte column on its own.
    Byte,
    /// The 16 columns of each aligned AES block (seed 004 Fig 4).
    AesBlock,
}

impl Window {
    /// Columns per window.
    pub fn bytes(self) -> usize {
        match self {
            Window::Byte => 1,
            Window::AesBlock => AES_BLOCK_BYTES,
        }
    }
}

/// The outcome of [`Raid6x::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Check {
    /// Parity equations left to check per column (4 - missing units).
    pub equations: usize,
    /// Byte columns where an equation fails.
    pub bad_columns: usize,
    /// The first such column.
    pub first_bad: Option<usize>,
}

impl Check {
    /// Whether every checked equation holds.
    pub fn is_consistent(&self) -> bool {
        self.bad_columns == 0
    }
}

/// What [`Raid6x::correct`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Correction {
    /// Windows that had errors and were corrected.
    pub windows: usize,
    /// Units that were changed, ascending.
    pub units: Vec<usize>,
    /// Bytes changed.
    pub bytes: usize,
}

/// Sources, outputs and coefficients of one rebuild or check; the tables are built on first
/// use by the table engine.
#[derive(Debug)]
struct Plan {
    sources: Vec<usize>,
    outputs: Vec<usize>,
    coeffs: Coeffs,
    tables: OnceLock<Tables>,
}

impl Plan {
    fn new(sources: Vec<usize>, outputs: Vec<usize>, coeffs: Matrix) -> Plan {
        Plan {
            sources,
            outputs,
            coeffs: Coeffs::from_matrix(&coeffs),
            tables: OnceLock::new(),
        }
    }

    fn tables(&self) -> &Tables {
        self.tables.get_or_init(|| table::tables(&self.coeffs))
    }
}

/// The raid6x code for one K. Cheap to share across threads.
#[derive(Debug)]
pub struct Raid6x {
    k: usize,
    check: Matrix,
    encode: Plan,
    path: Option<Path>,
    parallel: bool,
    engine: Engine,
    rebuild_plans: PlanCache<Plan>,
    check_plans: PlanCache<Plan>,
}

/// The 4 x 2k matrix `V[e][m] = g^(e·m)`.
pub fn coefficient_matrix(k: usize) -> Matrix {
    let mut v = Matrix::zero(PARITIES, 2 * k);
    for e in 0..PARITIES {
        for m in 0..2 * k {
            v.set(e, m, gf::exp(e * m));
        }
    }
    v
}

impl Raid6x {
    /// `raid6x:k`.
    pub fn new(k: usize) -> Result<Self, CodeError> {
        if k == 0 || k > RAID6X_K_MAX {
            return Err(CodeError::Raid6xK {
                k,
                max: RAID6X_K_MAX,
            });
        }
        let v = coefficient_matrix(k);
        let mut check = Matrix::zero(PARITIES, 2 * k + PARITIES);
        for e in 0..PARITIES {
            for m in 0..2 * k {
                check.set(e, m, v.get(e, m));
            }
            check.set(e, 2 * k + e, 1);
        }
        let encode = Plan::new((0..2 * k).collect(), (2 * k..2 * k + PARITIES).collect(), v);
        Ok(Raid6x {
            k,
            check,
            encode,
            path: None,
            parallel: false,
            engine: Engine::Simd,
            rebuild_plans: PlanCache::default(),
            check_plans: PlanCache::default(),
        })
    }

    /// Pins the codec to one kernel path; by default it follows [`Path::active`].
    pub fn with_path(mut self, path: Path) -> Result<Self, CodeError> {
        if !path.is_supported() {
            return Err(kernel::PathError::Unsupported(path).into());
        }
        self.path = Some(path);
        Ok(self)
    }

    /// Splits large units into pieces computed on rayon's current pool.
    pub fn with_parallel(mut self, parallel: bool) -> Self {
        self.parallel = parallel;
        self
    }

    /// Computes parity and rebuilt units with `engine` (default [`Engine::Simd`]). Checks and
    /// syndromes always run on the kernels.
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        if let Engine::Table(_) = engine {
            self.encode.tables();
        }
        self
    }

    /// K: data units per stripe.
    pub fn k(&self) -> usize {
        self.k
    }

    /// 2k: data units per group.
    pub fn data_units(&self) -> usize {
        2 * self.k
    }

    /// 2k + 4: units per group.
    pub fn units(&self) -> usize {
        2 * self.k + PARITIES
    }

    /// The kernel path.
    pub fn path(&self) -> Path {
        self.path.unwrap_or_else(Path::active)
    }

    /// The engine.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The 4 x (2k + 4) check matrix `[V | I4]`.
    pub fn check_matrix(&self) -> &Matrix {
        &self.check
    }

    fn run(&self, plan: &Plan, srcs: &[&[u8]], dsts: &mut [&mut [u8]]) {
        match (self.engine, self.parallel) {
            (Engine::Simd, false) => kernel::dot(self.path(), &plan.coeffs, srcs, dsts, false),
            (Engine::Simd, true) => kernel::dot_par(self.path(), &plan.coeffs, srcs, dsts, false),
            (Engine::Table(order), false) => table::dot(plan.tables(), srcs, dsts, order),
            (Engine::Table(order), true) => table::dot_par(plan.tables(), srcs, dsts, order),
        }
    }

    fn run_kernel(&self, coeffs: &Coeffs, srcs: &[&[u8]], dsts: &mut [&mut [u8]]) {
        if self.parallel {
            kernel::dot_par(self.path(), coeffs, srcs, dsts, false);
        } else {
            kernel::dot(self.path(), coeffs, srcs, dsts, false);
        }
    }

    /// Computes P, Q, R, S (in that order in `parity`) of the 2k data units of a group.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), ShardError> {
        shards::check_count("data units", self.data_units(), data.len())?;
        shards::check_count("parity units", PARITIES, parity.len())?;
        shards::common_len(
            data.iter()
                .map(|d| d.len())
                .chain(parity.iter().map(|p| p.len())),
        )?;
        self.run(&self.encode, data, parity);
        Ok(())
    }

    /// Applies a change of data unit `m` to the parity: `delta = old XOR new` (requirements A.6:
    /// `P ^= Δ, Q ^= g^m·Δ, R ^= g^2m·Δ, S ^= g^3m·Δ`).
    pub fn update_parity(
        &self,
        m: usize,
        delta: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), ShardError> {
        if m >= self.data_units() {
            return Err(ShardError::Count {
                what: "data unit index",
                expected: self.data_units(),
                got: m,
            });
        }
        shards::check_count("parity units", PARITIES, parity.len())?;
        shards::common_len(std::iter::once(delta.len()).chain(parity.iter().map(|p| p.len())))?;
        let column: Vec<u8> = (0..PARITIES).map(|e| self.check.get(e, m)).collect();
        let coeffs = Coeffs::new(PARITIES, 1, column);
        kernel::dot(self.path(), &coeffs, &[delta], parity, true);
        Ok(())
    }

    /// Rebuilds every missing unit. `units` holds the 2k + 4 buffers of a group in code order.
    pub fn reconstruct<S: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        units: &mut [S],
        present: &[bool],
    ) -> Result<(), ShardError> {
        let wanted = vec![true; self.units()];
        self.reconstruct_some(units, present, &wanted)
    }

    /// Rebuilds the units that are missing and wanted (e.g. only the data a read needs).
    pub fn reconstruct_some<S: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        units: &mut [S],
        present: &[bool],
        wanted: &[bool],
    ) -> Result<(), ShardError> {
        let n = self.units();
        shards::check_count("units", n, units.len())?;
        shards::check_count("present flags", n, present.len())?;
        shards::check_count("wanted flags", n, wanted.len())?;
        shards::common_len(units.iter().map(|s| s.as_ref().len()))?;
        let wanted: Vec<bool> = (0..n).map(|i| wanted[i] && !present[i]).collect();
        let (present, wanted) = (ShardSet::from_flags(present), ShardSet::from_flags(&wanted));
        let missing = n - present.len();
        if missing > PARITIES {
            return Err(ShardError::TooFew {
                missing,
                tolerated: PARITIES,
            });
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let plan = self
            .rebuild_plans
            .get_or_build(present, wanted, || self.rebuild_plan(present, wanted))?;
        let (srcs, mut outs) = shards::split(units, &plan.sources, &plan.outputs);
        self.run(&plan, &srcs, &mut outs);
        Ok(())
    }

    /// Solves `H_F · x_F = H_S · y_S` for the missing units F from f independent rows of H.
    fn rebuild_plan(&self, present: ShardSet, wanted: ShardSet) -> Result<Plan, ShardError> {
        let n = self.units();
        let missing: Vec<usize> = (0..n).filter(|&u| !present.contains(u)).collect();
        let h_f = self.check.select_cols(&missing);
        let (rows, inverse) = independent_rows(&h_f).ok_or_else(|| ShardError::Undecodable {
            missing: missing.clone(),
        })?;
        let sources = present.members(n);
        let h_s = self.check.select_rows(&rows).select_cols(&sources);
        let solution = inverse.mul(&h_s);
        let outputs = wanted.members(n);
        let picked: Vec<usize> = outputs
            .iter()
            .map(|o| {
                missing
                    .iter()
                    .position(|m| m == o)
                    .expect("wanted units are missing")
            })
            .collect();
        let coeffs = solution.select_rows(&picked);
        Ok(trimmed_plan(sources, outputs, coeffs))
    }

    /// Checks the parity equations of a group. Units whose `present` flag is false may be empty
    /// slices: they are rebuilt (in effect) from as many equations as are missing, and the rest
    /// checked. With none missing all four hold for a consistent group; random corruption then
    /// passes a column with probability 2^-32, with one disk (two units) missing 2^-16.
    pub fn check(&self, units: &[&[u8]], present: &[bool]) -> Result<Check, ShardError> {
        let n = self.units();
        shards::check_count("units", n, units.len())?;
        shards::check_count("present flags", n, present.len())?;
        let set = ShardSet::from_flags(present);
        let len = shards::common_len(
            units
                .iter()
                .zip(present)
                .filter(|(_, p)| **p)
                .map(|(u, _)| u.len()),
        )?;
        let missing = n - set.len();
        if missing > PARITIES {
            return Err(ShardError::TooFew {
                missing,
                tolerated: PARITIES,
            });
        }
        let plan = self
            .check_plans
            .get_or_build(set, ShardSet::default(), || self.check_plan(set))?;
        let equations = plan.coeffs.rows();
        let mut out = vec![vec![0u8; len]; equations];
        let srcs: Vec<&[u8]> = plan.sources.iter().map(|&u| units[u]).collect();
        let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.run_kernel(&plan.coeffs, &srcs, &mut outs);
        let bad = (0..len).filter(|&b| out.iter().any(|row| row[b] != 0));
        let (mut bad_columns, mut first_bad) = (0, None);
        for b in bad {
            first_bad.get_or_insert(b);
            bad_columns += 1;
        }
        Ok(Check {
            equations,
            bad_columns,
            first_bad,
        })
    }

    /// The equations left after eliminating the missing units: a basis C of the left null space
    /// of `H_F`, applied to the present units (`C · H_S`).
    fn check_plan(&self, present: ShardSet) -> Result<Plan, ShardError> {
        let n = self.units();
        let missing: Vec<usize> = (0..n).filter(|&u| !present.contains(u)).collect();
        let h_f = self.check.select_cols(&missing);
        if h_f.rank() < missing.len() {
            return Err(ShardError::Undecodable { missing });
        }
        let c = h_f.transpose().null_space();
        let sources = present.members(n);
        let coeffs = c.mul(&self.check.select_cols(&sources));
        Ok(trimmed_plan(sources, Vec::new(), coeffs))
    }

    /// The syndromes `Δ = H · units` of a complete group, one row per parity (P, Q, R, S):
    /// stored parity XOR parity recomputed from the stored data.
    pub fn syndromes(&self, units: &[&[u8]]) -> Result<[Vec<u8>; PARITIES], ShardError> {
        shards::check_count("units", self.units(), units.len())?;
        let len = shards::common_len(units.iter().map(|u| u.len()))?;
        let mut rows: [Vec<u8>; PARITIES] = std::array::from_fn(|_| vec![0u8; len]);
        let coeffs = Coeffs::from_matrix(&self.check);
        let mut outs: Vec<&mut [u8]> = rows.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.run_kernel(&coeffs, units, &mut outs);
        Ok(rows)
    }

    /// Finds and corrects up to `errors_max` (at most [`locate::ERRORS_MAX`]) corrupt units of
    /// unknown position per window of a complete group (requirements A.5). All or nothing: if
    /// any window is ambiguous or uncorrectable, nothing is written and the error names the
    /// first such window.
    ///
    /// Per byte ([`Window::Byte`]) a search for three errors has one check equation left, so a
    /// column with more than three corrupt units is often "explained" by exactly one wrong
    /// triple and miscorrected; per AES window the 16 columns check each other. Callers that
    /// cannot bound the damage should use `errors_max = 2` per byte (docs/ec.md).
    pub fn correct<S: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        units: &mut [S],
        window: Window,
        errors_max: usize,
    ) -> Result<Correction, CorrectError> {
        let refs: Vec<&[u8]> = units.iter().map(|u| u.as_ref()).collect();
        let delta = self.syndromes(&refs)?;
        let len = delta[0].len();
        let w = window.bytes();
        if len % w != 0 {
            return Err(ShardError::NotBlockAligned { len, block: w }.into());
        }
        let fixes = self.locate_windows(&delta, w, errors_max)?;
        let mut correction = Correction {
            windows: fixes.len(),
            ..Correction::default()
        };
        for (start, set) in fixes {
            for b in start..start + w {
                let d = column_delta(&delta, b);
                let values = locate::solve(self.data_units(), set.units(), d)
                    .expect("the located set explains every column of its window");
                for (&u, &v) in set.units().iter().zip(&values) {
                    if v != 0 {
                        units[u].as_mut()[b] ^= v;
                        correction.bytes += 1;
                        correction.units.push(u);
                    }
                }
            }
        }
        correction.units.sort_unstable();
        correction.units.dedup();
        Ok(correction)
    }

    /// The located set of every window with a non-zero syndrome, or the first failure.
    fn locate_windows(
        &self,
        delta: &[Vec<u8>; PARITIES],
        w: usize,
        errors_max: usize,
    ) -> Result<Vec<(usize, UnitSet)>, CorrectError> {
        let len = delta[0].len();
        let mut fixes = Vec::new();
        let mut cols = vec![[0u8; SYNDROMES]; w];
        for start in (0..len).step_by(w) {
            if delta
                .iter()
                .all(|row| row[start..start + w].iter().all(|&b| b == 0))
            {
                continue;
            }
            for (i, c) in cols.iter_mut().enumerate() {
                *c = column_delta(delta, start + i);
            }
            let end = start + w;
            match locate::locate(self.data_units(), &cols, errors_max) {
                Located::Clean => {}
                Located::Found(set) => fixes.push((start, set)),
                Located::Ambiguous { errors, candidates } => {
                    return Err(CorrectError::Ambiguous {
                        offset: start,
                        end,
                        errors,
                        candidates,
                    })
                }
                Located::Uncorrectable => {
                    return Err(CorrectError::Uncorrectable { offset: start, end })
                }
            }
        }
        Ok(fixes)
    }
}

fn column_delta(delta: &[Vec<u8>; PARITIES], b: usize) -> [u8; SYNDROMES] {
    [delta[0][b], delta[1][b], delta[2][b], delta[3][b]]
}

/// Rows of `h_f` (4 x f) whose f x f submatrix is invertible, and its inverse.
fn independent_rows(h_f: &Matrix) -> Option<(Vec<usize>, Matrix)> {
    let f = h_f.cols();
    (0u32..1 << PARITIES)
        .filter(|mask| mask.count_ones() as usize == f)
        .find_map(|mask| {
            let rows: Vec<usize> = (0..PARITIES).filter(|r| mask & (1 << r) != 0).collect();
            h_f.select_rows(&rows).invert().map(|inv| (rows, inv))
        })
}

/// A plan without the sources whose coefficients are all zero (parity units an equation does
/// not involve), so the kernels do not read them.
fn trimmed_plan(sources: Vec<usize>, outputs: Vec<usize>, coeffs: Matrix) -> Plan {
    let used: Vec<usize> = (0..coeffs.cols())
        .filter(|&c| (0..coeffs.rows()).any(|r| coeffs.get(r, c) != 0))
        .collect();
    let sources = used.iter().map(|&c| sources[c]).collect();
    Plan::new(sources, outputs, coeffs.select_cols(&used))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(code: &Raid6x, len: usize, seed: usize) -> Vec<Vec<u8>> {
        let data: Vec<Vec<u8>> = (0..code.data_units())
            .map(|m| {
                (0..len)
                    .map(|b| (b * 7 + m * 59 + seed + b / 9) as u8)
                    .collect()
            })
            .collect();
        let mut parity = vec![vec![0u8; len]; PARITIES];
        let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.encode(&d, &mut p).unwrap();
        data.into_iter().chain(parity).collect()
    }

    #[test]
    fn parity_follows_the_seed_equations() {
        let code = Raid6x::new(3).unwrap();
        let units = group(&code, 5, 1);
        for b in 0..5 {
            let mut want = [0u8; 4];
            for (m, unit) in units.iter().take(6).enumerate() {
                for (e, w) in want.iter_mut().enumerate() {
                    *w ^= gf::mul_slow(gf::exp(e * m), unit[b]);
                }
            }
            for e in 0..4 {
                assert_eq!(units[6 + e][b], want[e], "parity {e} column {b}");
            }
        }
    }

    #[test]
    fn every_engine_and_path_encodes_alike() {
        let reference = group(&Raid6x::new(7).unwrap(), 9000, 4);
        for path in Path::supported() {
            for engine in [
                Engine::Simd,
                Engine::Table(TableOrder::Simple),
                Engine::Table(TableOrder::CacheAware),
            ] {
                for parallel in [false, true] {
                    let code = Raid6x::new(7)
                        .unwrap()
                        .with_path(path)
                        .unwrap()
                        .with_engine(engine)
                        .with_parallel(parallel);
                    assert_eq!(group(&code, 9000, 4), reference, "{path} {engine:?}");
                }
            }
        }
    }

    #[test]
    fn four_erasures_rebuild_when_independent() {
        let code = Raid6x::new(4)
            .unwrap()
            .with_engine(Engine::Table(TableOrder::CacheAware));
        let full = group(&code, 100, 9);
        let n = code.units();
        for lost in [[0, 1, 2, 3], [0, 5, 8, 11], [8, 9, 10, 11], [1, 2, 9, 10]] {
            let present: Vec<bool> = (0..n).map(|u| !lost.contains(&u)).collect();
            let mut units = full.clone();
            lost.iter().for_each(|&u| units[u].fill(0));
            code.reconstruct(&mut units, &present).unwrap();
            assert_eq!(units, full, "lost {lost:?}");
        }
    }

    #[test]
    fn check_detects_with_and_without_missing_units() {
        let code = Raid6x::new(5).unwrap();
        let mut units = group(&code, 300, 2);
        let n = code.units();
        let all = vec![true; n];
        let refs: Vec<&[u8]> = units.iter().map(|v| v.as_slice()).collect();
        let c = code.check(&refs, &all).unwrap();
        assert_eq!((c.equations, c.bad_columns), (4, 0));
        units[3][17] ^= 0x40;
        let mut one_disk = all.clone();
        one_disk[1] = false;
        one_disk[6] = false;
        let mut refs: Vec<&[u8]> = units.iter().map(|v| v.as_slice()).collect();
        refs[1] = &[];
        refs[6] = &[];
        let c = code.check(&refs, &one_disk).unwrap();
        assert_eq!((c.equations, c.bad_columns, c.first_bad), (2, 1, Some(17)));
    }

    #[test]
    fn correct_fixes_single_errors_and_refuses_to_guess() {
        let code = Raid6x::new(4).unwrap();
        let full = group(&code, 64, 3);
        let mut units = full.clone();
        units[2][5] ^= 0x11;
        units[9][40] ^= 0x22;
        let fix = code.correct(&mut units, Window::Byte, 3).unwrap();
        assert_eq!(units, full);
        assert_eq!(fix.units, vec![2, 9]);
        assert_eq!((fix.windows, fix.bytes), (2, 2));
        // Five corrupt units in one AES window: no set of at most three explains all 16
        // columns, so nothing is written. (Per byte, one check equation is left at e = 3 and a
        // random syndrome often fits exactly one triple: see docs/ec.md.)
        let mut units = full.clone();
        for u in [0, 1, 2, 3, 4] {
            for (b, byte) in units[u].iter_mut().enumerate().take(32).skip(16) {
                *byte ^= (u * 16 + b + 1) as u8;
            }
        }
        let before = units.clone();
        let e = code.correct(&mut units, Window::AesBlock, 3).unwrap_err();
        assert_eq!(
            e,
            CorrectError::Uncorrectable {
                offset: 16,
                end: 32
            }
        );
        let e = code.correct(&mut units, Window::Byte, 2).unwrap_err();
        assert_eq!(
            e,
            CorrectError::Uncorrectable {
                offset: 16,
                end: 17
            }
        );
        assert_eq!(units, before, "nothing written");
    }
}
