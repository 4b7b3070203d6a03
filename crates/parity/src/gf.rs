//! Arithmetic in GF(2^8) with the polynomial x^8+x^4+x^3+x^2+1 (0x11d) and generator g = 2,
//! exactly as Linux md RAID6 (`lib/raid6`). Addition is XOR.
//!
//! The tables are computed at compile time by `const fn`s, so there is no start-up cost and no
//! global initialisation.

/// The field polynomial without its x^8 term: reducing after a shift out of the top bit.
pub const POLYNOMIAL_LOW: u8 = 0x1d;

/// Number of nonzero field elements: exponents of g are taken modulo this.
pub const ORDER: usize = 255;

/// `EXP_TABLE[n] = g^n` for `n` in `0..510`, doubled so that `EXP_TABLE[log a + log b]` needs no
/// modulo.
const EXP_TABLE: [u8; 2 * ORDER] = build_exp_table();

/// `LOG_TABLE[a] = n` with `g^n = a`, for `a != 0`. `LOG_TABLE[0]` is unused (0).
const LOG_TABLE: [u8; 256] = build_log_table();

/// `INVERSE_TABLE[a] = a^-1` for `a != 0`; `INVERSE_TABLE[0]` is unused (0).
const INVERSE_TABLE: [u8; 256] = build_inverse_table();

/// Multiplies a byte by g = 2: shift left, and reduce by the polynomial if the top bit fell out.
pub const fn mul2(a: u8) -> u8 {
    let shifted = a << 1;
    if a & 0x80 != 0 {
        shifted ^ POLYNOMIAL_LOW
    } else {
        shifted
    }
}

const fn build_exp_table() -> [u8; 2 * ORDER] {
    let mut table = [0u8; 2 * ORDER];
    let mut value = 1u8;
    let mut n = 0;
    while n < 2 * ORDER {
        table[n] = value;
        value = mul2(value);
        n += 1;
    }
    table
}

const fn build_log_table() -> [u8; 256] {
    let exp = build_exp_table();
    let mut table = [0u8; 256];
    let mut n = 0;
    while n < ORDER {
        table[exp[n] as usize] = n as u8;
        n += 1;
    }
    table
}

const fn build_inverse_table() -> [u8; 256] {
    let exp = build_exp_table();
    let log = build_log_table();
    let mut table = [0u8; 256];
    let mut a = 1;
    while a < 256 {
        // g^(255 - log a) * g^(log a) = g^255 = 1.
        table[a] = exp[ORDER - log[a] as usize];
        a += 1;
    }
    table
}

/// `a * b` in GF(2^8).
pub const fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP_TABLE[LOG_TABLE[a as usize] as usize + LOG_TABLE[b as usize] as usize]
}

/// `a / b` in GF(2^8). Panics if `b` is zero.
pub const fn div(a: u8, b: u8) -> u8 {
    assert!(b != 0, "division by zero in GF(2^8)");
    mul(a, INVERSE_TABLE[b as usize])
}

/// `g^n` for any `n` (taken modulo 255).
pub const fn exp(n: usize) -> u8 {
    EXP_TABLE[n % ORDER]
}

/// `g^-n` for any `n` (taken modulo 255).
pub const fn exp_negative(n: usize) -> u8 {
    EXP_TABLE[(ORDER - n % ORDER) % ORDER]
}

/// The discrete logarithm: `n` in `0..255` with `g^n = a`. Panics if `a` is zero.
pub const fn log(a: u8) -> usize {
    assert!(a != 0, "log of zero in GF(2^8)");
    LOG_TABLE[a as usize] as usize
}

/// `a^-1` in GF(2^8). Panics if `a` is zero.
pub const fn inv(a: u8) -> u8 {
    assert!(a != 0, "inverse of zero in GF(2^8)");
    INVERSE_TABLE[a as usize]
}

/// The 256-entry table of `c * x` for every byte `x`: the scalar kernels' multiply-by-constant.
pub fn mul_table(c: u8) -> [u8; 256] {
    let mut table = [0u8; 256];
    for (x, entry) in table.iter_mut().enumerate() {
        *entry = mul(c, x as u8);
    }
    table
}

/// The two 16-entry tables of `c * x` for the low nibble (`x` in 0..16) and for the high nibble
/// (`x` = 0x00, 0x10, .. 0xf0), for byte-shuffle (`pshufb`) multiplication:
/// `c * x = low[x & 15] ^ high[x >> 4]`, because multiplication distributes over XOR.
pub fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    let mut low = [0u8; 16];
    let mut high = [0u8; 16];
    for nibble in 0..16u8 {
        low[nibble as usize] = mul(c, nibble);
        high[nibble as usize] = mul(c, nibble << 4);
    }
    (low, high)
}

/// The 8x8 bit matrix of "multiply by `c`", packed as the `gf2p8affineqb` instruction wants it.
///
/// Multiplication by a constant is linear over GF(2): column `j` of its matrix is the byte
/// `c * 2^j`, so output bit `i` is the parity of `x & row_i`, where bit `j` of `row_i` is bit `i`
/// of `c * 2^j`. The instruction computes output bit `i` from the matrix byte at position `7 - i`
/// of the qword (Intel SDM, GF2P8AFFINEQB), so row `i` goes to byte `7 - i`.
pub const fn affine_matrix(c: u8) -> u64 {
    let mut matrix = 0u64;
    let mut i = 0;
    while i < 8 {
        let mut row = 0u8;
        let mut j = 0;
        while j < 8 {
            let column = mul(c, 1 << j);
            row |= ((column >> i) & 1) << j;
            j += 1;
        }
        matrix |= (row as u64) << (8 * (7 - i));
        i += 1;
    }
    matrix
}

/// The coefficients of the fused two-data recovery (Anvin, "The mathematics of RAID-6"): with
/// data chunks `x < y` lost, `D_x = A * (P ^ P') ^ B * (Q ^ Q')` and `D_y = (P ^ P') ^ D_x`,
/// where P' and Q' are computed with the lost chunks taken as zero. Returns `(A, B)`.
pub fn two_data_coefficients(x: usize, y: usize) -> (u8, u8) {
    assert!(x < y, "two-data recovery needs x < y");
    assert!(y < ORDER, "at most 255 data chunks");
    let g_y_minus_x = exp(y - x);
    let denominator = g_y_minus_x ^ 1;
    // g^(y-x) != 1 because 0 < y - x < 255, so the denominator is nonzero.
    assert!(denominator != 0);
    let a = div(g_y_minus_x, denominator);
    let b = div(exp_negative(x), denominator);
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Multiplication by shift-and-add with reduction at every step: independent of the tables.
    fn slow_mul(a: u8, b: u8) -> u8 {
        let mut product = 0u8;
        let mut a = a;
        let mut b = b;
        while b != 0 {
            if b & 1 != 0 {
                product ^= a;
            }
            a = mul2(a);
            b >>= 1;
        }
        product
    }

    #[test]
    fn mul2_reduces_by_0x11d() {
        assert_eq!(mul2(0x01), 0x02);
        assert_eq!(mul2(0x40), 0x80);
        // 0x80 * 2 = x^8 = x^4+x^3+x^2+1 = 0x1d.
        assert_eq!(mul2(0x80), 0x1d);
        // 0xff * 2 = 0x1fe ^ 0x11d = 0xe3.
        assert_eq!(mul2(0xff), 0xe3);
    }

    #[test]
    fn tables_match_slow_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn generator_has_order_255() {
        // Known values: g^8 = 0x1d, g^255 = 1, and no smaller positive power is 1.
        assert_eq!(exp(8), 0x1d);
        assert_eq!(exp(255), 1);
        for n in 1..255 {
            assert_ne!(exp(n), 1, "g^{n}");
        }
    }

    #[test]
    fn inverse_and_division() {
        for a in 1..=255u8 {
            assert_eq!(slow_mul(a, inv(a)), 1);
            assert_eq!(exp(log(a)), a);
            for b in 1..=255u8 {
                assert_eq!(slow_mul(div(a, b), b), a);
            }
        }
        for n in 0..600 {
            assert_eq!(slow_mul(exp(n), exp_negative(n)), 1);
        }
    }

    #[test]
    fn nibble_and_byte_tables_multiply() {
        for c in [0u8, 1, 2, 0x1d, 0x8e, 0xff] {
            let table = mul_table(c);
            let (low, high) = nibble_tables(c);
            for x in 0..=255u8 {
                assert_eq!(table[x as usize], slow_mul(c, x));
                assert_eq!(
                    low[(x & 15) as usize] ^ high[(x >> 4) as usize],
                    slow_mul(c, x)
                );
            }
        }
    }

    /// Applies a packed matrix the way the SDM describes `gf2p8affineqb` (with a zero constant).
    fn apply_affine(matrix: u64, x: u8) -> u8 {
        let mut result = 0u8;
        for i in 0..8 {
            let row = (matrix >> (8 * (7 - i))) as u8;
            let bit = (row & x).count_ones() as u8 & 1;
            result |= bit << i;
        }
        result
    }

    #[test]
    fn affine_matrix_multiplies() {
        // The identity: row i = 1 << i at byte 7 - i.
        assert_eq!(affine_matrix(1), 0x0102_0408_1020_4080);
        for c in 0..=255u8 {
            let matrix = affine_matrix(c);
            for x in 0..=255u8 {
                assert_eq!(apply_affine(matrix, x), slow_mul(c, x), "{c} * {x}");
            }
        }
    }

    #[test]
    fn two_data_coefficients_solve_the_system() {
        // With D_x = a, D_y = b: P^P' = a ^ b and Q^Q' = g^x a ^ g^y b.
        for (x, y) in [(0, 1), (0, 7), (3, 4), (10, 200), (253, 254)] {
            let (coefficient_a, coefficient_b) = two_data_coefficients(x, y);
            for (a, b) in [(1u8, 0u8), (0, 1), (0x5a, 0xc3), (0xff, 0xff)] {
                let sp = a ^ b;
                let sq = slow_mul(exp(x), a) ^ slow_mul(exp(y), b);
                let recovered_x = slow_mul(coefficient_a, sp) ^ slow_mul(coefficient_b, sq);
                assert_eq!(recovered_x, a);
                assert_eq!(sp ^ recovered_x, b);
            }
        }
    }
}
