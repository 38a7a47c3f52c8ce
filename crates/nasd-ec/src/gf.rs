//! Arithmetic in GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D) and generator
//! g = 2, the field of Linux RAID 6, ISA-L and seed 004 as requirements A.3 reads it.
//!
//! Addition is XOR. Multiplication goes through log/exp tables ([`mul`]) or the full 64 KiB
//! product table ([`MUL_TABLE`], one lookup, used by the portable kernel). All tables are built at
//! compile time. [`Matrix`] holds small matrices over the field and inverts them by Gauss-Jordan
//! elimination, for the decode matrices of both codes.

/// The field polynomial with its x^8 term: x^8 + x^4 + x^3 + x^2 + 1.
pub const POLYNOMIAL: u16 = 0x11D;
/// The generator whose powers are the exp table: 2 (the polynomial is primitive).
pub const GENERATOR: u8 = 2;
/// Order of the multiplicative group: g^255 = 1.
pub const GROUP_ORDER: usize = 255;

/// `EXP[i] = g^i` for i in 0..510: doubled so that `EXP[log a + log b]` needs no reduction.
pub static EXP: [u8; 2 * GROUP_ORDER] = build_exp();
/// `LOG[a]` = i with g^i = a, for a != 0; `LOG[0]` is 0 and never used as a logarithm.
pub static LOG: [u8; 256] = build_log();
/// `MUL_TABLE[a][b] = a·b`: one lookup per product (64 KiB, for the portable kernel and the lab).
pub static MUL_TABLE: [[u8; 256]; 256] = build_mul_table();

const fn build_exp() -> [u8; 2 * GROUP_ORDER] {
    let mut exp = [0u8; 2 * GROUP_ORDER];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 2 * GROUP_ORDER {
        exp[i] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLYNOMIAL;
        }
        i += 1;
    }
    exp
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut log = [0u8; 256];
    let mut i = 0;
    while i < GROUP_ORDER {
        log[exp[i] as usize] = i as u8;
        i += 1;
    }
    log
}

/// Carry-less multiply and reduce, bit by bit: the definition, used to build tables and as the
/// oracle of the tests.
pub const fn mul_slow(a: u8, b: u8) -> u8 {
    let mut a = a as u16;
    let mut b = b;
    let mut p: u16 = 0;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        a <<= 1;
        if a & 0x100 != 0 {
            a ^= POLYNOMIAL;
        }
        b >>= 1;
    }
    p as u8
}

const fn build_mul_table() -> [[u8; 256]; 256] {
    let exp = build_exp();
    let log = build_log();
    let mut t = [[0u8; 256]; 256];
    let mut a = 1;
    while a < 256 {
        let mut b = 1;
        while b < 256 {
            t[a][b] = exp[log[a] as usize + log[b] as usize];
            b += 1;
        }
        a += 1;
    }
    t
}

/// a·b.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    MUL_TABLE[a as usize][b as usize]
}

/// The multiplicative inverse of a non-zero `a`.
///
/// # Panics
/// If `a` is zero (a programmer error: callers check pivots before inverting).
#[inline]
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "zero has no inverse in GF(2^8)");
    EXP[GROUP_ORDER - LOG[a as usize] as usize]
}

/// a / b for non-zero b.
#[inline]
pub fn div(a: u8, b: u8) -> u8 {
    mul(a, inv(b))
}

/// g^e for any e (reduced mod 255).
#[inline]
pub fn exp(e: usize) -> u8 {
    EXP[e % GROUP_ORDER]
}

/// a^e (0^0 = 1).
pub fn pow(a: u8, e: usize) -> u8 {
    if e == 0 {
        return 1;
    }
    if a == 0 {
        return 0;
    }
    EXP[(LOG[a as usize] as usize * e) % GROUP_ORDER]
}

/// log_g(a) for non-zero a.
#[inline]
pub fn log(a: u8) -> Option<usize> {
    (a != 0).then(|| LOG[a as usize] as usize)
}

/// A dense matrix over GF(2^8), row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    cells: Vec<u8>,
}

impl Matrix {
    /// The zero matrix.
    pub fn zero(rows: usize, cols: usize) -> Self {
        Matrix {
            rows,
            cols,
            cells: vec![0; rows * cols],
        }
    }

    /// The identity.
    pub fn identity(n: usize) -> Self {
        let mut m = Matrix::zero(n, n);
        for i in 0..n {
            m.set(i, i, 1);
        }
        m
    }

    /// A matrix from its rows (all of one length).
    pub fn from_rows(rows: &[Vec<u8>]) -> Self {
        let cols = rows.first().map_or(0, Vec::len);
        assert!(rows.iter().all(|r| r.len() == cols), "ragged matrix rows");
        Matrix {
            rows: rows.len(),
            cols,
            cells: rows.concat(),
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Cell (r, c).
    #[inline]
    pub fn get(&self, r: usize, c: usize) -> u8 {
        self.cells[r * self.cols + c]
    }

    /// Sets cell (r, c).
    #[inline]
    pub fn set(&mut self, r: usize, c: usize, v: u8) {
        self.cells[r * self.cols + c] = v;
    }

    /// Row r.
    pub fn row(&self, r: usize) -> &[u8] {
        &self.cells[r * self.cols..(r + 1) * self.cols]
    }

    /// All cells, row-major.
    pub fn cells(&self) -> &[u8] {
        &self.cells
    }

    /// The matrix made of the given rows, in that order.
    pub fn select_rows(&self, rows: &[usize]) -> Matrix {
        let mut out = Matrix::zero(rows.len(), self.cols);
        for (i, &r) in rows.iter().enumerate() {
            out.cells[i * self.cols..(i + 1) * self.cols].copy_from_slice(self.row(r));
        }
        out
    }

    /// The matrix made of the given columns, in that order.
    pub fn select_cols(&self, cols: &[usize]) -> Matrix {
        let mut out = Matrix::zero(self.rows, cols.len());
        for r in 0..self.rows {
            for (i, &c) in cols.iter().enumerate() {
                out.set(r, i, self.get(r, c));
            }
        }
        out
    }

    /// self · rhs.
    pub fn mul(&self, rhs: &Matrix) -> Matrix {
        assert_eq!(self.cols, rhs.rows, "matrix product of mismatched shapes");
        let mut out = Matrix::zero(self.rows, rhs.cols);
        for r in 0..self.rows {
            for k in 0..self.cols {
                let a = self.get(r, k);
                if a == 0 {
                    continue;
                }
                for c in 0..rhs.cols {
                    let v = out.get(r, c) ^ mul(a, rhs.get(k, c));
                    out.set(r, c, v);
                }
            }
        }
        out
    }

    /// The inverse of a square matrix, or `None` if it is singular.
    pub fn invert(&self) -> Option<Matrix> {
        assert_eq!(self.rows, self.cols, "only square matrices have inverses");
        let n = self.rows;
        let mut a = self.clone();
        let mut inv_m = Matrix::identity(n);
        for col in 0..n {
            let pivot = (col..n).find(|&r| a.get(r, col) != 0)?;
            a.swap_rows(col, pivot);
            inv_m.swap_rows(col, pivot);
            let scale = inv(a.get(col, col));
            a.scale_row(col, scale);
            inv_m.scale_row(col, scale);
            for r in 0..n {
                let f = a.get(r, col);
                if r != col && f != 0 {
                    a.add_scaled_row(r, col, f);
                    inv_m.add_scaled_row(r, col, f);
                }
            }
        }
        Some(inv_m)
    }

    /// The rank, by Gaussian elimination.
    pub fn rank(&self) -> usize {
        let mut a = self.clone();
        let mut rank = 0;
        for col in 0..a.cols {
            let Some(pivot) = (rank..a.rows).find(|&r| a.get(r, col) != 0) else {
                continue;
            };
            a.swap_rows(rank, pivot);
            let scale = inv(a.get(rank, col));
            a.scale_row(rank, scale);
            for r in 0..a.rows {
                let f = a.get(r, col);
                if r != rank && f != 0 {
                    a.add_scaled_row(r, rank, f);
                }
            }
            rank += 1;
        }
        rank
    }

    /// The transpose.
    pub fn transpose(&self) -> Matrix {
        let mut t = Matrix::zero(self.cols, self.rows);
        for r in 0..self.rows {
            for c in 0..self.cols {
                t.set(c, r, self.get(r, c));
            }
        }
        t
    }

    /// A basis of `{x : self · x = 0}`, one vector per row (`cols - rank` rows of `cols`).
    pub fn null_space(&self) -> Matrix {
        let mut a = self.clone();
        let mut pivots = Vec::new();
        let mut rank = 0;
        for col in 0..a.cols {
            let Some(pivot) = (rank..a.rows).find(|&r| a.get(r, col) != 0) else {
                continue;
            };
            a.swap_rows(rank, pivot);
            let scale = inv(a.get(rank, col));
            a.scale_row(rank, scale);
            for r in 0..a.rows {
                let f = a.get(r, col);
                if r != rank && f != 0 {
                    a.add_scaled_row(r, rank, f);
                }
            }
            pivots.push(col);
            rank += 1;
        }
        // Each free column f gives the vector with x_f = 1, x_pivot(i) = a[i][f] (char 2: no
        // signs), and zero elsewhere.
        let free: Vec<usize> = (0..a.cols).filter(|c| !pivots.contains(c)).collect();
        let mut basis = Matrix::zero(free.len(), a.cols);
        for (i, &f) in free.iter().enumerate() {
            basis.set(i, f, 1);
            for (r, &p) in pivots.iter().enumerate() {
                basis.set(i, p, a.get(r, f));
            }
        }
        basis
    }

    fn swap_rows(&mut self, a: usize, b: usize) {
        if a != b {
            for c in 0..self.cols {
                self.cells.swap(a * self.cols + c, b * self.cols + c);
            }
        }
    }

    fn scale_row(&mut self, r: usize, f: u8) {
        for c in 0..self.cols {
            let v = mul(self.get(r, c), f);
            self.set(r, c, v);
        }
    }

    /// row[dst] += f · row[src].
    fn add_scaled_row(&mut self, dst: usize, src: usize, f: u8) {
        for c in 0..self.cols {
            let v = self.get(dst, c) ^ mul(f, self.get(src, c));
            self.set(dst, c, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_agree_with_the_definition() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_slow(a, b), "{a}·{b}");
            }
        }
    }

    #[test]
    fn generator_is_primitive_and_inverses_invert() {
        let mut seen = [false; 256];
        for i in 0..GROUP_ORDER {
            assert!(!seen[EXP[i] as usize], "g^{i} repeats");
            seen[EXP[i] as usize] = true;
        }
        assert_eq!(exp(GROUP_ORDER), 1);
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1);
            assert_eq!(div(mul(a, 7), 7), a);
            assert_eq!(EXP[LOG[a as usize] as usize], a);
        }
        assert_eq!(pow(GENERATOR, 8), 0x1D, "x^8 = x^4+x^3+x^2+1");
    }

    #[test]
    fn matrix_inverse_round_trips() {
        let m = Matrix::from_rows(&[vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 10]]);
        let i = m.invert().expect("invertible");
        assert_eq!(m.mul(&i), Matrix::identity(3));
        assert_eq!(m.rank(), 3);
        let singular = Matrix::from_rows(&[vec![1, 2], vec![2, 4]]);
        assert!(singular.invert().is_none());
        assert_eq!(singular.rank(), 1);
        let n = singular.null_space();
        assert_eq!(n.rows(), 1);
        assert_eq!(singular.mul(&n.transpose()), Matrix::zero(2, 1));
        let wide = Matrix::from_rows(&[vec![1, 1, 1, 1], vec![1, 2, 4, 8]]);
        let n = wide.null_space();
        assert_eq!(n.rows(), 2);
        assert_eq!(n.rank(), 2);
        assert_eq!(wide.mul(&n.transpose()), Matrix::zero(2, 2));
        assert_eq!(Matrix::zero(0, 4).null_space(), Matrix::identity(4));
    }
}
