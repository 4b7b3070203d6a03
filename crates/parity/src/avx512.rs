//! AVX-512 (F + BW) kernel: 64-byte registers, `vpternlogq` for three-way XOR, the top bit of
//! each byte into a mask register for multiply-by-2, and nibble tables with `vpshufb` for
//! multiply-by-constant.

use std::arch::x86_64::*;

use crate::gf;
use crate::vector::{Vector, vector_kernel};

/// AVX-512BW kernel. Obtain it with [`Avx512::detect`].
#[derive(Debug, Clone, Copy)]
pub struct Avx512 {
    /// Whether outputs are written with non-temporal stores (the `-nt` variant).
    streaming: bool,
    /// Private: only `detect` builds one, after checking the CPU.
    _detected: (),
}

static AVX512: Avx512 = Avx512 {
    streaming: false,
    _detected: (),
};
static AVX512_STREAMING: Avx512 = Avx512 {
    streaming: true,
    _detected: (),
};

impl Avx512 {
    /// The kernel (with non-temporal stores if `streaming`), if this CPU has AVX-512 F and BW.
    pub fn detect(streaming: bool) -> Option<&'static Avx512> {
        let kernel = if streaming {
            &AVX512_STREAMING
        } else {
            &AVX512
        };
        (is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw"))
            .then_some(kernel)
    }
}

/// `vpternlogq` truth table for `a ^ b ^ c`.
pub(crate) const XOR3: i32 = 0x96;

/// One AVX-512 register.
#[derive(Clone, Copy)]
pub(crate) struct Zmm(__m512i);

/// The nibble tables of a constant, each broadcast to the four 128-bit lanes.
#[derive(Clone, Copy)]
pub(crate) struct NibbleTables {
    low: __m512i,
    high: __m512i,
}

/// The loads, stores and XORs of a kernel whose register is a newtype over `__m512i`
/// (AVX-512 with nibble tables, and with GFNI), as items of its `Vector` impl.
macro_rules! zmm_loads_stores_and_xors {
    ($register:ident) => {
        #[inline(always)]
        unsafe fn zero() -> Self {
            // SAFETY: AVX-512F available by the trait's contract.
            $register(unsafe { _mm512_setzero_si512() })
        }

        #[inline(always)]
        unsafe fn load(source: *const u8) -> Self {
            // SAFETY: readable by the caller's contract; `loadu` accepts any alignment.
            $register(unsafe { _mm512_loadu_si512(source.cast()) })
        }

        #[inline(always)]
        unsafe fn store(self, destination: *mut u8) {
            // SAFETY: writable by the caller's contract; `storeu` accepts any alignment.
            unsafe { _mm512_storeu_si512(destination.cast(), self.0) }
        }

        #[inline(always)]
        unsafe fn store_stream(self, destination: *mut u8) {
            // SAFETY: writable and 64-byte aligned by the caller's contract.
            unsafe { _mm512_stream_si512(destination.cast(), self.0) }
        }

        #[inline(always)]
        unsafe fn fence_streams() {
            // SAFETY: SSE is part of x86-64.
            unsafe { _mm_sfence() }
        }

        #[inline(always)]
        unsafe fn xor(self, other: Self) -> Self {
            // SAFETY: AVX-512F available by the trait's contract.
            $register(unsafe { _mm512_xor_si512(self.0, other.0) })
        }

        #[inline(always)]
        unsafe fn xor3(self, b: Self, c: Self) -> Self {
            // SAFETY: AVX-512F available by the trait's contract.
            $register(unsafe { _mm512_ternarylogic_epi64::<XOR3>(self.0, b.0, c.0) })
        }
    };
}
pub(crate) use zmm_loads_stores_and_xors;

impl Zmm {
    /// `2 * self` without the final XOR of the data, so that `horner` can fold it into one
    /// three-way XOR: returns `(self + self, 0x1d where the top bit was set)`.
    #[inline(always)]
    unsafe fn doubled_and_reduction(self) -> (__m512i, __m512i) {
        // SAFETY: AVX-512BW available by the trait's contract.
        unsafe {
            let top_bit_set = _mm512_movepi8_mask(self.0);
            let reduction =
                _mm512_maskz_mov_epi8(top_bit_set, _mm512_set1_epi8(gf::POLYNOMIAL_LOW as i8));
            (_mm512_add_epi8(self.0, self.0), reduction)
        }
    }
}

impl Vector for Zmm {
    const BYTES: usize = 64;
    type Multiplier = NibbleTables;

    zmm_loads_stores_and_xors!(Zmm);

    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: AVX-512BW available by the trait's contract.
        unsafe {
            let (doubled, reduction) = self.doubled_and_reduction();
            Zmm(_mm512_xor_si512(doubled, reduction))
        }
    }

    #[inline(always)]
    unsafe fn horner(self, data: Self) -> Self {
        // SAFETY: AVX-512BW available by the trait's contract.
        unsafe {
            let (doubled, reduction) = self.doubled_and_reduction();
            Zmm(_mm512_ternarylogic_epi64::<XOR3>(
                doubled, reduction, data.0,
            ))
        }
    }

    #[inline(always)]
    unsafe fn multiplier(c: u8) -> NibbleTables {
        let (low, high) = gf::nibble_tables(c);
        // SAFETY: AVX-512F available by the trait's contract; the tables are 16 readable bytes.
        unsafe {
            NibbleTables {
                low: _mm512_broadcast_i32x4(_mm_loadu_si128(low.as_ptr().cast())),
                high: _mm512_broadcast_i32x4(_mm_loadu_si128(high.as_ptr().cast())),
            }
        }
    }

    #[inline(always)]
    unsafe fn mul(self, tables: NibbleTables) -> Self {
        // SAFETY: AVX-512BW available by the trait's contract.
        unsafe {
            let nibble_mask = _mm512_set1_epi8(0x0f);
            let low = _mm512_and_si512(self.0, nibble_mask);
            let high = _mm512_and_si512(_mm512_srli_epi16(self.0, 4), nibble_mask);
            Zmm(_mm512_xor_si512(
                _mm512_shuffle_epi8(tables.low, low),
                _mm512_shuffle_epi8(tables.high, high),
            ))
        }
    }
}

vector_kernel!(Avx512, "avx512", "avx512-nt", Zmm, 8, 2, "avx512f,avx512bw");
