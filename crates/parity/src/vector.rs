//! What the SIMD kernels share: the `Vector` trait (one register of bytes and the GF(2^8)
//! operations on it), implemented once per instruction set in `avx2.rs`, `avx512.rs`, `gfni.rs`,
//! and the `vector_kernel!` macro that turns such a type into a `Kernel`.
//!
//! The loops themselves are written once, generically, in `vector_loops.rs`. They are
//! `#[inline(always)]` and are instantiated inside functions compiled with
//! `#[target_feature(enable = ...)]`, so every intrinsic is inlined into code compiled for the
//! instruction set that was detected at run time.

/// One SIMD register of bytes, with the operations the parity loops need.
///
/// # Safety
/// Every method executes instructions of the implementing type's instruction set: call them only
/// from code running on a CPU that has it (the kernels check at construction) and compiled with
/// those target features (so that the intrinsics are inlined).
pub(crate) trait Vector: Copy {
    /// Bytes per register.
    const BYTES: usize;

    /// A constant prepared for `mul` (tables or a bit matrix), built once per call.
    type Multiplier: Copy;

    /// All zero bytes.
    unsafe fn zero() -> Self;

    /// Loads `BYTES` bytes from any alignment.
    unsafe fn load(source: *const u8) -> Self;

    /// Stores `BYTES` bytes at any alignment.
    unsafe fn store(self, destination: *mut u8);

    /// Stores `BYTES` bytes with a non-temporal (cache-bypassing) store; `destination` must be
    /// aligned to `BYTES`. Call `fence_streams` after the last one.
    unsafe fn store_stream(self, destination: *mut u8);

    /// Orders all non-temporal stores before any later store (`sfence`).
    unsafe fn fence_streams();

    /// `self ^ other`.
    unsafe fn xor(self, other: Self) -> Self;

    /// `self ^ b ^ c`; one instruction (`vpternlogq`) where the instruction set has it.
    #[inline(always)]
    unsafe fn xor3(self, b: Self, c: Self) -> Self {
        // SAFETY: the caller's contract covers `xor`.
        unsafe { self.xor(b).xor(c) }
    }

    /// Every byte multiplied by g = 2.
    unsafe fn mul2(self) -> Self;

    /// One step of Horner's rule for Q: `self * 2 ^ data`.
    #[inline(always)]
    unsafe fn horner(self, data: Self) -> Self {
        // SAFETY: the caller's contract covers `mul2` and `xor`.
        unsafe { self.mul2().xor(data) }
    }

    /// Two steps of Horner's rule: `(self * 2 ^ high) * 2 ^ low`.
    #[inline(always)]
    unsafe fn horner2(self, high: Self, low: Self) -> Self {
        // SAFETY: the caller's contract covers `horner`.
        unsafe { self.horner(high).horner(low) }
    }

    /// Prepares multiplication by the constant `c`.
    unsafe fn multiplier(c: u8) -> Self::Multiplier;

    /// Every byte multiplied by a prepared constant.
    unsafe fn mul(self, multiplier: Self::Multiplier) -> Self;
}

/// Implements `Kernel` for the kernel type `$kernel` (a struct with fields `streaming: bool` and
/// `_detected: ()`) whose vector type is `$vector`. `$name` and `$streaming_name` are the names
/// of its two variants (ordinary and non-temporal stores). The P+Q loops process `$lanes`
/// registers per iteration, the XOR-only loops `$xor_lanes` (measured best on their own: XOR is
/// bound by cache bandwidth, not by instruction latency). Everything is compiled with
/// `#[target_feature(enable = $features)]`. The kernel type must be constructible only after the
/// features were detected: that is what makes the `unsafe` calls below sound.
macro_rules! vector_kernel {
    (
        $kernel:ty,
        $name:literal,
        $streaming_name:literal,
        $vector:ty,
        $lanes:literal,
        $xor_lanes:literal,
        $features:literal
    ) => {
        /// The loops of `vector_loops`, compiled for this instruction set, in both store modes.
        mod compiled {
            use super::*;
            use crate::vector_loops as loops;

            #[target_feature(enable = $features)]
            pub(super) fn xor_gen(stream: bool, sources: &[&[u8]], dest: &mut [u8]) {
                // SAFETY: this function runs only where `$features` were detected (see the
                // kernel's constructor), and lengths were checked by the caller.
                unsafe {
                    if stream {
                        loops::xor_gen::<$vector, $xor_lanes, true>(sources, dest)
                    } else {
                        loops::xor_gen::<$vector, $xor_lanes, false>(sources, dest)
                    }
                }
            }

            #[target_feature(enable = $features)]
            pub(super) fn pq_gen(stream: bool, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
                // SAFETY: as in `xor_gen`.
                unsafe {
                    if stream {
                        loops::pq_gen::<$vector, $lanes, true>(data, p, q)
                    } else {
                        loops::pq_gen::<$vector, $lanes, false>(data, p, q)
                    }
                }
            }

            // The updates read P and Q and write them back in place: a non-temporal store
            // would evict the very lines just read (measured 6x slower when cache-resident and
            // no faster from DRAM), so both variants use ordinary stores here.
            #[target_feature(enable = $features)]
            pub(super) fn p_update(old: &[&[u8]], new: &[&[u8]], p: &mut [u8]) {
                // SAFETY: as in `xor_gen`.
                unsafe { loops::p_update::<$vector, $xor_lanes, false>(old, new, p) }
            }

            #[target_feature(enable = $features)]
            pub(super) fn pq_update(
                start: usize,
                old: &[&[u8]],
                new: &[&[u8]],
                p: &mut [u8],
                q: &mut [u8],
            ) {
                // SAFETY: as in `xor_gen`.
                unsafe { loops::pq_update::<$vector, $lanes, false>(start, old, new, p, q) }
            }

            #[target_feature(enable = $features)]
            pub(super) fn recover_data_p(
                stream: bool,
                data: &[&[u8]],
                x: usize,
                q: &[u8],
                out_data: &mut [u8],
                out_p: Option<&mut [u8]>,
            ) {
                // SAFETY: as in `xor_gen`.
                unsafe {
                    if stream {
                        loops::recover_data_p::<$vector, $lanes, true>(data, x, q, out_data, out_p)
                    } else {
                        loops::recover_data_p::<$vector, $lanes, false>(data, x, q, out_data, out_p)
                    }
                }
            }

            #[target_feature(enable = $features)]
            pub(super) fn recover_data_q(
                stream: bool,
                data: &[&[u8]],
                x: usize,
                p: &[u8],
                out_data: &mut [u8],
                out_q: Option<&mut [u8]>,
            ) {
                // SAFETY: as in `xor_gen`.
                unsafe {
                    if stream {
                        loops::recover_data_q::<$vector, $lanes, $xor_lanes, true>(
                            data, x, p, out_data, out_q,
                        )
                    } else {
                        loops::recover_data_q::<$vector, $lanes, $xor_lanes, false>(
                            data, x, p, out_data, out_q,
                        )
                    }
                }
            }

            #[target_feature(enable = $features)]
            #[allow(clippy::too_many_arguments)]
            pub(super) fn recover_two_data(
                stream: bool,
                data: &[&[u8]],
                (x, y): (usize, usize),
                p: &[u8],
                q: &[u8],
                out_x: &mut [u8],
                out_y: &mut [u8],
            ) {
                // SAFETY: as in `xor_gen`.
                unsafe {
                    if stream {
                        loops::recover_two_data::<$vector, $lanes, true>(
                            data, x, y, p, q, out_x, out_y,
                        )
                    } else {
                        loops::recover_two_data::<$vector, $lanes, false>(
                            data, x, y, p, q, out_x, out_y,
                        )
                    }
                }
            }
        }

        impl crate::Kernel for $kernel {
            fn name(&self) -> &'static str {
                if self.streaming {
                    $streaming_name
                } else {
                    $name
                }
            }

            fn xor_gen(&self, sources: &[&[u8]], dest: &mut [u8]) {
                crate::checks::xor_gen(sources, dest);
                // SAFETY: a value of this kernel type exists only where its features were
                // detected.
                unsafe { compiled::xor_gen(self.streaming, sources, dest) }
            }

            fn pq_gen(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
                crate::checks::pq_gen(data, p, q);
                // SAFETY: as in `xor_gen`.
                unsafe { compiled::pq_gen(self.streaming, data, p, q) }
            }

            fn p_update(&self, old: &[&[u8]], new: &[&[u8]], p: &mut [u8]) {
                crate::checks::p_update(old, new, p);
                // SAFETY: as in `xor_gen`.
                unsafe { compiled::p_update(old, new, p) }
            }

            fn pq_update(
                &self,
                start: usize,
                old: &[&[u8]],
                new: &[&[u8]],
                p: &mut [u8],
                q: &mut [u8],
            ) {
                crate::checks::pq_update(start, old, new, p, q);
                // SAFETY: as in `xor_gen`.
                unsafe { compiled::pq_update(start, old, new, p, q) }
            }

            fn recover_data_p(
                &self,
                data: &[&[u8]],
                x: usize,
                q: &[u8],
                out_data: &mut [u8],
                out_p: Option<&mut [u8]>,
            ) {
                crate::checks::recover_one_data(data, x, q, out_data, out_p.as_deref());
                // SAFETY: as in `xor_gen`.
                unsafe { compiled::recover_data_p(self.streaming, data, x, q, out_data, out_p) }
            }

            fn recover_data_q(
                &self,
                data: &[&[u8]],
                x: usize,
                p: &[u8],
                out_data: &mut [u8],
                out_q: Option<&mut [u8]>,
            ) {
                crate::checks::recover_one_data(data, x, p, out_data, out_q.as_deref());
                // SAFETY: as in `xor_gen`.
                unsafe { compiled::recover_data_q(self.streaming, data, x, p, out_data, out_q) }
            }

            fn recover_two_data(
                &self,
                data: &[&[u8]],
                x: usize,
                y: usize,
                p: &[u8],
                q: &[u8],
                out_x: &mut [u8],
                out_y: &mut [u8],
            ) {
                crate::checks::recover_two_data(data, (x, y), p, q, out_x, out_y);
                // SAFETY: as in `xor_gen`.
                unsafe {
                    compiled::recover_two_data(self.streaming, data, (x, y), p, q, out_x, out_y)
                }
            }
        }
    };
}

pub(crate) use vector_kernel;
