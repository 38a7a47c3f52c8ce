//! Exhaustive facts about raid6x's check matrix `H = [V | I4]` (`V[e][m] = g^(e·m)`, 2k data
//! columns, 4 parity columns), for any k up to 127 (2k distinct powers of g), independent of
//! [`crate::raid6x::RAID6X_K_MAX`]. The tests and docs/ec.md rest on these:
//!
//! - [`dependent_sets`]: how many 4-column sets of H are linearly dependent, by kind, for every
//!   k: such a set is a 4-unit erasure pattern that cannot be rebuilt and a pair of 2-error
//!   patterns with one syndrome.
//! - [`undecodable_disk_failures`]: which 1- and 2-disk failures (each disk loses two units of
//!   a group) leave dependent columns.

use crate::gf;

/// Rows of H.
const ROWS: usize = 4;

/// A column of H: data unit m, or parity e (0 = P .. 3 = S).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Column {
    /// Data unit m of the group.
    Data(usize),
    /// Parity e.
    Parity(usize),
}

impl Column {
    fn vector(self) -> [u8; ROWS] {
        match self {
            Column::Data(m) => [1, gf::exp(m), gf::exp(2 * m), gf::exp(3 * m)],
            Column::Parity(e) => {
                let mut v = [0; ROWS];
                v[e] = 1;
                v
            }
        }
    }

    /// The unit index in code order for a group of k (data 0..2k, then P, Q, R, S).
    pub fn unit(self, k: usize) -> usize {
        match self {
            Column::Data(m) => m,
            Column::Parity(e) => 2 * k + e,
        }
    }
}

/// The rank of up to four columns of H.
pub fn rank(columns: &[Column]) -> usize {
    let mut a: Vec<[u8; ROWS]> = columns.iter().map(|c| c.vector()).collect();
    let mut rank = 0;
    for row in 0..ROWS {
        let Some(p) = (rank..a.len()).find(|&i| a[i][row] != 0) else {
            continue;
        };
        a.swap(rank, p);
        let scale = gf::inv(a[rank][row]);
        let pivot: [u8; ROWS] = a[rank].map(|v| gf::mul(v, scale));
        a[rank] = pivot;
        for (i, col) in a.iter_mut().enumerate() {
            let f = col[row];
            if i != rank && f != 0 {
                for r in 0..ROWS {
                    col[r] ^= gf::mul(f, pivot[r]);
                }
            }
        }
        rank += 1;
    }
    rank
}

/// Dependent 4-column sets of H for one k, by how many data and parity columns they have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dependence {
    /// Data units per stripe.
    pub k: usize,
    /// Sets of 4 data columns (never: V restricted to 4 data columns is Vandermonde).
    pub data4: usize,
    /// Sets of 3 data columns and Q or R (Q: `xy + yz + zx = 0`; R: `x + y + z = 0`).
    pub data3_parity1: usize,
    /// Sets of 2 data columns m, m' and Q, R (`g^(3m) = g^(3m')`, i.e. m' - m = 85 or 170).
    pub data2_parity2: usize,
    /// Any other kind (never).
    pub other: usize,
    /// The first dependent set found for this k that is not dependent for k - 1, if any.
    pub example: Option<[Column; 4]>,
}

impl Dependence {
    /// All dependent sets.
    pub fn total(&self) -> usize {
        self.data4 + self.data3_parity1 + self.data2_parity2 + self.other
    }
}

/// For every k in 1..=k_max (k_max <= 127), the dependent 4-column sets of H. One pass over all
/// sets of the largest H: a set is present for every k above its largest data index / 2.
pub fn dependent_sets(k_max: usize) -> Vec<Dependence> {
    assert!(
        (1..=127).contains(&k_max),
        "2k distinct powers of g need k <= 127"
    );
    let d = 2 * k_max;
    let mut new_at: Vec<Dependence> = (0..=k_max)
        .map(|k| Dependence {
            k,
            ..Dependence::default()
        })
        .collect();
    let mut record = |cols: [Column; 4]| {
        if rank(&cols) == 4 {
            return;
        }
        let data: Vec<usize> = cols
            .iter()
            .filter_map(|c| match c {
                Column::Data(m) => Some(*m),
                Column::Parity(_) => None,
            })
            .collect();
        let k_min = data.iter().max().map_or(1, |m| m / 2 + 1);
        let entry = &mut new_at[k_min];
        match data.len() {
            4 => entry.data4 += 1,
            3 => entry.data3_parity1 += 1,
            2 => entry.data2_parity2 += 1,
            _ => entry.other += 1,
        }
        entry.example.get_or_insert(cols);
    };
    for parity_mask in 0u32..16 {
        let parities: Vec<Column> = (0..ROWS)
            .filter(|e| parity_mask & (1 << e) != 0)
            .map(Column::Parity)
            .collect();
        let need = 4 - parities.len();
        for_each_subset(d, need, |data| {
            let mut cols = [Column::Parity(0); 4];
            for (slot, &m) in cols.iter_mut().zip(data) {
                *slot = Column::Data(m);
            }
            cols[need..].copy_from_slice(&parities);
            record(cols);
        });
    }
    // Cumulative: a set dependent at k is dependent at every larger k.
    let mut out = Vec::with_capacity(k_max);
    let mut acc = Dependence::default();
    for entry in new_at.into_iter().skip(1) {
        acc.k = entry.k;
        acc.data4 += entry.data4;
        acc.data3_parity1 += entry.data3_parity1;
        acc.data2_parity2 += entry.data2_parity2;
        acc.other += entry.other;
        acc.example = entry.example;
        out.push(acc.clone());
    }
    out
}

/// Calls `f` with every ascending `size`-subset of `0..n`.
fn for_each_subset(n: usize, size: usize, mut f: impl FnMut(&[usize])) {
    let mut idx: Vec<usize> = (0..size).collect();
    if size > n {
        return;
    }
    loop {
        f(&idx);
        // Advance the rightmost index that can move.
        let Some(i) = (0..size).rev().find(|&i| idx[i] < n - size + i) else {
            return;
        };
        idx[i] += 1;
        for j in i + 1..size {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

/// What a component (disk) of a raid6x layout holds in a group: data index j of both stripes,
/// or the parity pair (P, R) on `pA` or (Q, S) on `pB` (requirements A.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiskRole {
    /// Data index j: units j and k + j.
    Data(usize),
    /// pA: P in row 0, R in row 1.
    ParityA,
    /// pB: Q in row 0, S in row 1.
    ParityB,
}

impl DiskRole {
    /// The two columns of H the disk holds in a group of k.
    pub fn columns(self, k: usize) -> [Column; 2] {
        match self {
            DiskRole::Data(j) => [Column::Data(j), Column::Data(k + j)],
            DiskRole::ParityA => [Column::Parity(0), Column::Parity(2)],
            DiskRole::ParityB => [Column::Parity(1), Column::Parity(3)],
        }
    }

    /// The k + 2 roles of a group.
    pub fn all(k: usize) -> Vec<DiskRole> {
        (0..k)
            .map(DiskRole::Data)
            .chain([DiskRole::ParityA, DiskRole::ParityB])
            .collect()
    }
}

/// The 1- and 2-disk failures of a group of k whose lost units cannot be rebuilt (empty for
/// every k <= 127, as the tests check).
pub fn undecodable_disk_failures(k: usize) -> Vec<Vec<DiskRole>> {
    let roles = DiskRole::all(k);
    let mut bad = Vec::new();
    for (i, &a) in roles.iter().enumerate() {
        for &b in &roles[i..] {
            let failed = if a == b { vec![a] } else { vec![a, b] };
            let cols: Vec<Column> = failed.iter().flat_map(|r| r.columns(k)).collect();
            if rank(&cols) < cols.len() {
                bad.push(failed);
            }
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsets_are_all_visited_once() {
        let mut n = 0;
        for_each_subset(7, 3, |s| {
            assert!(s.windows(2).all(|w| w[0] < w[1]));
            n += 1;
        });
        assert_eq!(n, 35);
    }

    #[test]
    fn rank_of_simple_columns() {
        assert_eq!(rank(&[Column::Parity(0), Column::Parity(1)]), 2);
        assert_eq!(
            rank(&[
                Column::Data(0),
                Column::Data(1),
                Column::Data(2),
                Column::Data(3)
            ]),
            4
        );
        // m and m + 85 share the P and S coefficients: with Q and R gone they are dependent.
        assert_eq!(
            rank(&[
                Column::Data(0),
                Column::Data(85),
                Column::Parity(1),
                Column::Parity(2)
            ]),
            3
        );
    }
}
