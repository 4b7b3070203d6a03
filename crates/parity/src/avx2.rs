//! AVX2 kernel: 32-byte registers. Multiply by 2 with a signed compare (top bit set) and a
//! masked 0x1d; multiply by a constant with two 16-entry nibble tables and `vpshufb`.

use std::arch::x86_64::*;

use crate::gf;
use crate::vector::{Vector, vector_kernel};

/// AVX2 kernel. Obtain it with [`Avx2::detect`].
#[derive(Debug, Clone, Copy)]
pub struct Avx2 {
    /// Whether outputs are written with non-temporal stores (the `-nt` variant).
    streaming: bool,
    /// Private: only `detect` builds one, after checking the CPU.
    _detected: (),
}

static AVX2: Avx2 = Avx2 {
    streaming: false,
    _detected: (),
};
static AVX2_STREAMING: Avx2 = Avx2 {
    streaming: true,
    _detected: (),
};

impl Avx2 {
    /// The kernel (with non-temporal stores if `streaming`), if this CPU has AVX2.
    pub fn detect(streaming: bool) -> Option<&'static Avx2> {
        let kernel = if streaming { &AVX2_STREAMING } else { &AVX2 };
        is_x86_feature_detected!("avx2").then_some(kernel)
    }
}

/// One AVX2 register.
#[derive(Clone, Copy)]
pub(crate) struct Ymm(__m256i);

/// The nibble tables of a constant, each broadcast to both 128-bit halves (`vpshufb` looks up
/// within each half).
#[derive(Clone, Copy)]
pub(crate) struct NibbleTables {
    low: __m256i,
    high: __m256i,
}

impl Vector for Ymm {
    const BYTES: usize = 32;
    type Multiplier = NibbleTables;

    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX2 available by the trait's contract.
        Ymm(unsafe { _mm256_setzero_si256() })
    }

    #[inline(always)]
    unsafe fn load(source: *const u8) -> Self {
        // SAFETY: readable by the caller's contract; `loadu` accepts any alignment.
        Ymm(unsafe { _mm256_loadu_si256(source.cast()) })
    }

    #[inline(always)]
    unsafe fn store(self, destination: *mut u8) {
        // SAFETY: writable by the caller's contract; `storeu` accepts any alignment.
        unsafe { _mm256_storeu_si256(destination.cast(), self.0) }
    }

    #[inline(always)]
    unsafe fn store_stream(self, destination: *mut u8) {
        // SAFETY: writable and 32-byte aligned by the caller's contract.
        unsafe { _mm256_stream_si256(destination.cast(), self.0) }
    }

    #[inline(always)]
    unsafe fn fence_streams() {
        // SAFETY: SSE is part of x86-64.
        unsafe { _mm_sfence() }
    }

    #[inline(always)]
    unsafe fn xor(self, other: Self) -> Self {
        // SAFETY: AVX2 available by the trait's contract.
        Ymm(unsafe { _mm256_xor_si256(self.0, other.0) })
    }

    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: AVX2 available by the trait's contract.
        unsafe {
            let top_bit_set = _mm256_cmpgt_epi8(_mm256_setzero_si256(), self.0);
            let reduction =
                _mm256_and_si256(top_bit_set, _mm256_set1_epi8(gf::POLYNOMIAL_LOW as i8));
            Ymm(_mm256_xor_si256(_mm256_add_epi8(self.0, self.0), reduction))
        }
    }

    #[inline(always)]
    unsafe fn multiplier(c: u8) -> NibbleTables {
        let (low, high) = gf::nibble_tables(c);
        // SAFETY: AVX2 available by the trait's contract; the tables are 16 readable bytes.
        unsafe {
            NibbleTables {
                low: _mm256_broadcastsi128_si256(_mm_loadu_si128(low.as_ptr().cast())),
                high: _mm256_broadcastsi128_si256(_mm_loadu_si128(high.as_ptr().cast())),
            }
        }
    }

    #[inline(always)]
    unsafe fn mul(self, tables: NibbleTables) -> Self {
        // SAFETY: AVX2 available by the trait's contract.
        unsafe {
            let nibble_mask = _mm256_set1_epi8(0x0f);
            let low = _mm256_and_si256(self.0, nibble_mask);
            let high = _mm256_and_si256(_mm256_srli_epi16(self.0, 4), nibble_mask);
            Ymm(_mm256_xor_si256(
                _mm256_shuffle_epi8(tables.low, low),
                _mm256_shuffle_epi8(tables.high, high),
            ))
        }
    }
}

vector_kernel!(Avx2, "avx2", "avx2-nt", Ymm, 4, 4, "avx2");
