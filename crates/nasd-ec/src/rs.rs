//! `rs:K+M`: systematic Reed-Solomon over GF(2^8) with a Cauchy parity matrix.
//!
//! Shards 0..K hold the data unchanged; parity shard K + i holds
//! `XOR over j of C[i][j] · data[j]` with `C[i][j] = 1 / ((K + i) XOR j)`: the matrix of ISA-L's
//! `gf_gen_cauchy1_matrix`, so our parity equals ISA-L's byte for byte. The generator `[I; C]` is
//! MDS because every square submatrix of a Cauchy matrix `1 / (x_i + y_j)` (here `x_i = K + i`,
//! `y_j = j`, all distinct) is invertible: any K of the K + M shards determine the data, so any M
//! lost shards are rebuilt. This needs K + M <= 256 distinct field elements. The tests check it
//! exhaustively for small K, M.
//!
//! Decoding picks the first K present shards, inverts their K x K rows of the generator, and
//! computes only the shards asked for ([`ReedSolomon::reconstruct_some`]): a read that lost a
//! data shard rebuilds that shard and never touches parity. Plans are cached per
//! (present, wanted) pattern.

use std::sync::Arc;

use crate::error::{CodeError, ShardError};
use crate::gf::{self, Matrix};
use crate::kernel::{self, Coeffs, Path};
use crate::shards::{self, PlanCache, ShardSet};

/// The most shards (K + M) a Cauchy code over GF(2^8) can have: K + M distinct field elements.
pub const RS_SHARDS_MAX: usize = 256;

/// A Reed-Solomon code with K data and M parity shards. Cheap to share across threads.
#[derive(Debug)]
pub struct ReedSolomon {
    data: usize,
    parity: usize,
    generator: Matrix,
    encode: Coeffs,
    path: Option<Path>,
    parallel: bool,
    plans: PlanCache<Plan>,
}

/// How to rebuild some shards: which shards are read and the coefficients of each output.
#[derive(Debug)]
struct Plan {
    sources: Vec<usize>,
    outputs: Vec<usize>,
    coeffs: Coeffs,
}

/// The M x K Cauchy matrix `1 / ((K + i) XOR j)`.
pub fn cauchy_matrix(data: usize, parity: usize) -> Matrix {
    let mut m = Matrix::zero(parity, data);
    for i in 0..parity {
        for j in 0..data {
            m.set(i, j, gf::inv(((data + i) ^ j) as u8));
        }
    }
    m
}

impl ReedSolomon {
    /// `rs:data+parity`.
    pub fn new(data: usize, parity: usize) -> Result<Self, CodeError> {
        if data == 0 || parity == 0 || data + parity > RS_SHARDS_MAX {
            return Err(CodeError::RsShape {
                data,
                parity,
                max: RS_SHARDS_MAX,
            });
        }
        let cauchy = cauchy_matrix(data, parity);
        let mut generator = Matrix::zero(data + parity, data);
        for j in 0..data {
            generator.set(j, j, 1);
        }
        for i in 0..parity {
            for j in 0..data {
                generator.set(data + i, j, cauchy.get(i, j));
            }
        }
        Ok(ReedSolomon {
            data,
            parity,
            encode: Coeffs::from_matrix(&cauchy),
            generator,
            path: None,
            parallel: false,
            plans: PlanCache::default(),
        })
    }

    /// Pins the codec to one kernel path (tests and benchmarks); by default it follows
    /// [`Path::active`].
    pub fn with_path(mut self, path: Path) -> Result<Self, CodeError> {
        if !path.is_supported() {
            return Err(kernel::PathError::Unsupported(path).into());
        }
        self.path = Some(path);
        Ok(self)
    }

    /// Splits shards of [`kernel::PARALLEL_MIN_BYTES`] and more into pieces computed on rayon's
    /// current pool (block-level parallelism).
    pub fn with_parallel(mut self, parallel: bool) -> Self {
        self.parallel = parallel;
        self
    }

    /// K.
    pub fn data_shards(&self) -> usize {
        self.data
    }

    /// M.
    pub fn parity_shards(&self) -> usize {
        self.parity
    }

    /// K + M.
    pub fn total_shards(&self) -> usize {
        self.data + self.parity
    }

    /// The kernel path this codec runs.
    pub fn path(&self) -> Path {
        self.path.unwrap_or_else(Path::active)
    }

    /// The (K + M) x K generator: identity on top, the Cauchy rows below.
    pub fn generator(&self) -> &Matrix {
        &self.generator
    }

    fn run(&self, coeffs: &Coeffs, srcs: &[&[u8]], dsts: &mut [&mut [u8]], accumulate: bool) {
        if self.parallel {
            kernel::dot_par(self.path(), coeffs, srcs, dsts, accumulate);
        } else {
            kernel::dot(self.path(), coeffs, srcs, dsts, accumulate);
        }
    }

    /// Computes the M parity shards of K data shards (all of one length, any length).
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), ShardError> {
        shards::check_count("data shards", self.data, data.len())?;
        shards::check_count("parity shards", self.parity, parity.len())?;
        shards::common_len(
            data.iter()
                .map(|d| d.len())
                .chain(parity.iter().map(|p| p.len())),
        )?;
        self.run(&self.encode, data, parity, false);
        Ok(())
    }

    /// Applies a change of data shard `index` to the parity: `delta = old XOR new` of that shard
    /// (or of a range of it, with `parity` the same range of each parity shard).
    pub fn update_parity(
        &self,
        index: usize,
        delta: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), ShardError> {
        if index >= self.data {
            return Err(ShardError::Count {
                what: "data shard index",
                expected: self.data,
                got: index,
            });
        }
        shards::check_count("parity shards", self.parity, parity.len())?;
        shards::common_len(std::iter::once(delta.len()).chain(parity.iter().map(|p| p.len())))?;
        let column: Vec<u8> = (0..self.parity)
            .map(|i| self.encode.get(i, index))
            .collect();
        let coeffs = Coeffs::new(self.parity, 1, column);
        self.run(&coeffs, &[delta], parity, true);
        Ok(())
    }

    /// Rebuilds every shard whose `present` flag is false, in place. `shards` holds K + M
    /// buffers of one length in code order (data, then parity); the missing ones are
    /// overwritten.
    pub fn reconstruct<S: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        shards: &mut [S],
        present: &[bool],
    ) -> Result<(), ShardError> {
        let wanted = vec![true; self.total_shards()];
        self.reconstruct_some(shards, present, &wanted)
    }

    /// Rebuilds only the missing data shards (what a read needs), never parity.
    pub fn reconstruct_data<S: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        shards: &mut [S],
        present: &[bool],
    ) -> Result<(), ShardError> {
        let wanted: Vec<bool> = (0..self.total_shards()).map(|i| i < self.data).collect();
        self.reconstruct_some(shards, present, &wanted)
    }

    /// Rebuilds the shards that are both missing and wanted; other buffers are not written.
    pub fn reconstruct_some<S: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        shards: &mut [S],
        present: &[bool],
        wanted: &[bool],
    ) -> Result<(), ShardError> {
        let n = self.total_shards();
        shards::check_count("shards", n, shards.len())?;
        shards::check_count("present flags", n, present.len())?;
        shards::check_count("wanted flags", n, wanted.len())?;
        shards::common_len(shards.iter().map(|s| s.as_ref().len()))?;
        let missing = present.iter().filter(|&&p| !p).count();
        if missing > self.parity {
            return Err(ShardError::TooFew {
                missing,
                tolerated: self.parity,
            });
        }
        let wanted: Vec<bool> = (0..n).map(|i| wanted[i] && !present[i]).collect();
        let (present, wanted) = (ShardSet::from_flags(present), ShardSet::from_flags(&wanted));
        if wanted.is_empty() {
            return Ok(());
        }
        let plan = self.plan(present, wanted);
        let (srcs, mut outs) = shards::split(shards, &plan.sources, &plan.outputs);
        self.run(&plan.coeffs, &srcs, &mut outs, false);
        Ok(())
    }

    /// Whether the parity shards agree with the data (recomputed into scratch buffers).
    pub fn verify(&self, shards: &[&[u8]]) -> Result<bool, ShardError> {
        shards::check_count("shards", self.total_shards(), shards.len())?;
        let len = shards::common_len(shards.iter().map(|s| s.len()))?;
        let mut scratch = vec![vec![0u8; len]; self.parity];
        let mut outs: Vec<&mut [u8]> = scratch.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.run(&self.encode, &shards[..self.data], &mut outs, false);
        Ok(scratch
            .iter()
            .zip(&shards[self.data..])
            .all(|(a, b)| a.as_slice() == *b))
    }

    /// Decode plans cached so far.
    pub fn cached_plans(&self) -> usize {
        self.plans.len()
    }

    fn plan(&self, present: ShardSet, wanted: ShardSet) -> Arc<Plan> {
        let built = self
            .plans
            .get_or_build(present, wanted, || -> Result<Plan, ShardError> {
                Ok(self.build_plan(present, wanted))
            });
        built.expect("building an RS plan cannot fail")
    }

    /// Inverts the generator rows of the first K present shards; each wanted data shard is a
    /// row of the inverse, each wanted parity shard its generator row times the inverse.
    fn build_plan(&self, present: ShardSet, wanted: ShardSet) -> Plan {
        let n = self.total_shards();
        let sources: Vec<usize> = present.members(n).into_iter().take(self.data).collect();
        assert_eq!(
            sources.len(),
            self.data,
            "checked: at most M shards missing"
        );
        let inverse = self
            .generator
            .select_rows(&sources)
            .invert()
            .expect("every K rows of an MDS generator are independent");
        let outputs = wanted.members(n);
        let mut rows = Vec::with_capacity(outputs.len());
        for &o in &outputs {
            let row = if o < self.data {
                inverse.row(o).to_vec()
            } else {
                let g = Matrix::from_rows(&[self.generator.row(o).to_vec()]);
                g.mul(&inverse).row(0).to_vec()
            };
            rows.push(row);
        }
        Plan {
            coeffs: Coeffs::from_matrix(&Matrix::from_rows(&rows)),
            sources,
            outputs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripe(k: usize, len: usize, seed: usize) -> Vec<Vec<u8>> {
        (0..k)
            .map(|i| {
                (0..len)
                    .map(|b| (b * 31 + i * 7 + seed + b / 5) as u8)
                    .collect()
            })
            .collect()
    }

    fn encoded(code: &ReedSolomon, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let len = data[0].len();
        let mut parity = vec![vec![0u8; len]; code.parity_shards()];
        let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.encode(&d, &mut p).unwrap();
        data.iter().cloned().chain(parity).collect()
    }

    /// Every pattern of up to M erasures, for every K + M <= 10 with M <= 4, on every path.
    #[test]
    fn mds_exhaustively_for_small_codes() {
        for k in 1..=8 {
            for m in 1..=4 {
                if k + m > 10 {
                    continue;
                }
                for path in Path::supported() {
                    let code = ReedSolomon::new(k, m).unwrap().with_path(path).unwrap();
                    let full = encoded(&code, &stripe(k, 67, k * 10 + m));
                    let n = k + m;
                    for mask in 0u32..(1 << n) {
                        if mask.count_ones() as usize > m {
                            continue;
                        }
                        let present: Vec<bool> = (0..n).map(|i| mask & (1 << i) == 0).collect();
                        let mut shards: Vec<Vec<u8>> = full
                            .iter()
                            .zip(&present)
                            .map(|(s, &p)| if p { s.clone() } else { vec![0xEE; s.len()] })
                            .collect();
                        code.reconstruct(&mut shards, &present).unwrap();
                        assert_eq!(shards, full, "rs:{k}+{m} {path} lost {mask:b}");
                    }
                }
            }
        }
    }

    #[test]
    fn reconstruct_data_leaves_parity_alone() {
        let code = ReedSolomon::new(4, 2).unwrap();
        let full = encoded(&code, &stripe(4, 1000, 3));
        let present = [true, false, true, true, false, true];
        let mut shards = full.clone();
        shards[1].fill(0xAA);
        shards[4].fill(0xBB);
        code.reconstruct_data(&mut shards, &present).unwrap();
        assert_eq!(shards[1], full[1]);
        assert!(shards[4].iter().all(|&b| b == 0xBB), "parity untouched");
        let wanted = [false, false, false, false, true, false];
        code.reconstruct_some(&mut shards, &present, &wanted)
            .unwrap();
        assert_eq!(shards, full);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert!(ReedSolomon::new(0, 2).is_err());
        assert!(ReedSolomon::new(250, 7).is_err());
        assert!(ReedSolomon::new(252, 4).is_ok());
        let code = ReedSolomon::new(3, 2).unwrap();
        let mut shards = vec![vec![0u8; 8]; 5];
        let e = code
            .reconstruct(&mut shards, &[false, false, false, true, true])
            .unwrap_err();
        assert_eq!(
            e,
            ShardError::TooFew {
                missing: 3,
                tolerated: 2
            }
        );
        shards[2] = vec![0; 9];
        let e = code
            .reconstruct(&mut shards, &[true, true, true, true, false])
            .unwrap_err();
        assert!(matches!(e, ShardError::Length { index: 2, .. }), "{e}");
        let d = [&[1u8][..], &[2][..]];
        let mut p0 = [0u8; 1];
        let mut p1 = [0u8; 1];
        assert!(code.encode(&d, &mut [&mut p0, &mut p1]).is_err());
    }

    #[test]
    fn update_parity_equals_reencoding() {
        let code = ReedSolomon::new(5, 3).unwrap();
        let data = stripe(5, 333, 1);
        let mut full = encoded(&code, &data);
        let mut new_data = data.clone();
        new_data[2].iter_mut().for_each(|b| *b = b.wrapping_add(91));
        let delta: Vec<u8> = data[2]
            .iter()
            .zip(&new_data[2])
            .map(|(a, b)| a ^ b)
            .collect();
        let (_, parity) = full.split_at_mut(5);
        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.update_parity(2, &delta, &mut p).unwrap();
        assert_eq!(full[5..], encoded(&code, &new_data)[5..]);
        let refs: Vec<&[u8]> = full.iter().map(|v| v.as_slice()).collect();
        assert!(!code.verify(&refs).unwrap(), "old data, new parity");
    }

    #[test]
    fn plans_are_cached_per_pattern() {
        let code = ReedSolomon::new(4, 2).unwrap();
        let full = encoded(&code, &stripe(4, 64, 0));
        for _ in 0..3 {
            let mut s = full.clone();
            code.reconstruct(&mut s, &[false, true, true, true, true, false])
                .unwrap();
            assert_eq!(s, full);
        }
        assert_eq!(code.cached_plans(), 1);
        let refs: Vec<&[u8]> = full.iter().map(|v| v.as_slice()).collect();
        assert!(code.verify(&refs).unwrap());
    }
}
