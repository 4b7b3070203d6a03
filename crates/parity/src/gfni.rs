//! AVX-512 + GFNI kernel. `gf2p8affineqb` multiplies every byte of a register by an 8x8 bit
//! matrix, and multiplication by a constant in GF(2^8)/0x11d is such a matrix
//! (`gf::affine_matrix`), so any multiply-by-constant, including by 2, is one instruction per
//! 64 bytes. (`gf2p8mulb` would be simpler but reduces by 0x11b, the AES polynomial: wrong Q.)
//!
//! Horner's rule goes two chunks per step as `q*4 ^ high*2 ^ low`: two independent affine
//! instructions and one `vpternlogq`, so the dependency chain through `q` is one affine and one
//! ternary XOR per two chunks.

use std::arch::x86_64::*;

use crate::avx512::{XOR3, zmm_loads_stores_and_xors};
use crate::gf;
use crate::vector::{Vector, vector_kernel};

/// AVX-512 + GFNI kernel. Obtain it with [`Gfni::detect`].
#[derive(Debug, Clone, Copy)]
pub struct Gfni {
    /// Whether outputs are written with non-temporal stores (the `-nt` variant).
    streaming: bool,
    /// Private: only `detect` builds one, after checking the CPU.
    _detected: (),
}

static GFNI: Gfni = Gfni {
    streaming: false,
    _detected: (),
};
static GFNI_STREAMING: Gfni = Gfni {
    streaming: true,
    _detected: (),
};

impl Gfni {
    /// The kernel (with non-temporal stores if `streaming`), if this CPU has AVX-512 F and BW, and GFNI.
    pub fn detect(streaming: bool) -> Option<&'static Gfni> {
        let kernel = if streaming { &GFNI_STREAMING } else { &GFNI };
        (is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("gfni"))
        .then_some(kernel)
    }
}

const TIMES_2: u64 = gf::affine_matrix(2);
const TIMES_4: u64 = gf::affine_matrix(4);

/// One AVX-512 register, multiplied with GFNI.
#[derive(Clone, Copy)]
pub(crate) struct GfniZmm(__m512i);

/// A broadcast bit matrix.
#[derive(Clone, Copy)]
pub(crate) struct Matrix(__m512i);

impl GfniZmm {
    #[inline(always)]
    unsafe fn affine(self, matrix: u64) -> __m512i {
        // SAFETY: GFNI and AVX-512F available by the trait's contract.
        unsafe { _mm512_gf2p8affine_epi64_epi8::<0>(self.0, _mm512_set1_epi64(matrix as i64)) }
    }
}

impl Vector for GfniZmm {
    const BYTES: usize = 64;
    type Multiplier = Matrix;

    zmm_loads_stores_and_xors!(GfniZmm);

    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: by the trait's contract.
        GfniZmm(unsafe { self.affine(TIMES_2) })
    }

    #[inline(always)]
    unsafe fn horner2(self, high: Self, low: Self) -> Self {
        // SAFETY: by the trait's contract.
        unsafe {
            GfniZmm(_mm512_ternarylogic_epi64::<XOR3>(
                self.affine(TIMES_4),
                high.affine(TIMES_2),
                low.0,
            ))
        }
    }

    #[inline(always)]
    unsafe fn multiplier(c: u8) -> Matrix {
        // SAFETY: AVX-512F available by the trait's contract.
        Matrix(unsafe { _mm512_set1_epi64(gf::affine_matrix(c) as i64) })
    }

    #[inline(always)]
    unsafe fn mul(self, matrix: Matrix) -> Self {
        // SAFETY: GFNI and AVX-512F available by the trait's contract.
        GfniZmm(unsafe { _mm512_gf2p8affine_epi64_epi8::<0>(self.0, matrix.0) })
    }
}

vector_kernel!(
    Gfni,
    "gfni",
    "gfni-nt",
    GfniZmm,
    8,
    2,
    "avx512f,avx512bw,gfni"
);
