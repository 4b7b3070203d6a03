//! The SIMD loops, written once for any `Vector` type.
//!
//! Shape of every operation: the byte positions are walked in blocks of `LANES` registers (several
//! independent registers per iteration hide instruction latency), then in single registers, and
//! the last `< V::BYTES` bytes go to the scalar kernel's `*_from` functions. Within a block, the
//! data chunks are walked from the highest index down so that Q follows Horner's rule
//! (`q = 2*q ^ D_i`), two chunks per step (`xor3`, `horner2`). Each output byte is written once,
//! and each input byte read once: recovery computes the partial syndromes and the lost chunks in
//! the same pass ("fused"), with no intermediate buffers.
//!
//! # Safety
//! Every function here is `unsafe`: it must run on a CPU with `V`'s instruction set, and the
//! argument lengths must already have been checked (`crate::checks`): all buffers as long as the
//! output, except the entries of `data` at lost positions, which are never read.

use std::ops::Range;

use crate::vector::Vector;
use crate::{gf, scalar};

/// Registers of `LANES` consecutive vectors starting at `offset` in `chunk`.
///
/// Safety: `offset + LANES * V::BYTES <= chunk.len()`, and `V`'s instruction set is available.
#[inline(always)]
unsafe fn load<V: Vector, const LANES: usize>(chunk: &[u8], offset: usize) -> [V; LANES] {
    debug_assert!(offset + LANES * V::BYTES <= chunk.len());
    let base = chunk.as_ptr().wrapping_add(offset);
    // SAFETY: in bounds by the function's contract. (Plain loops rather than `array::from_fn`
    // here and below: closures would not be inlined into the `target_feature` functions.)
    unsafe {
        let mut registers = [V::zero(); LANES];
        for (lane, register) in registers.iter_mut().enumerate() {
            *register = V::load(base.add(lane * V::BYTES));
        }
        registers
    }
}

/// Registers of `LANES` consecutive vectors at `source + offset` (a buffer the step also writes).
///
/// Safety: `LANES * V::BYTES` bytes from `source + offset` are readable.
#[inline(always)]
unsafe fn load_raw<V: Vector, const LANES: usize>(source: *const u8, offset: usize) -> [V; LANES] {
    // SAFETY: in bounds by the function's contract.
    unsafe {
        let mut registers = [V::zero(); LANES];
        for (lane, register) in registers.iter_mut().enumerate() {
            *register = V::load(source.add(offset + lane * V::BYTES));
        }
        registers
    }
}

/// Stores `LANES` registers at `destination + offset`, with non-temporal stores if `STREAM`.
///
/// Safety: `LANES * V::BYTES` bytes from `destination + offset` are writable, and if `STREAM`,
/// `destination + offset` is aligned to `V::BYTES`.
#[inline(always)]
unsafe fn store<V: Vector, const LANES: usize, const STREAM: bool>(
    registers: [V; LANES],
    destination: *mut u8,
    offset: usize,
) {
    for (lane, register) in registers.into_iter().enumerate() {
        let at = destination.wrapping_add(offset + lane * V::BYTES);
        // SAFETY: in bounds and aligned by the function's contract.
        unsafe {
            if STREAM {
                register.store_stream(at);
            } else {
                register.store(at);
            }
        }
    }
}

/// `acc ^= chunks[range]` at `offset`, from the highest index down (the order of Horner's
/// rule; walking the chunks upwards measured much slower for XOR), two chunks per step.
#[inline(always)]
unsafe fn accumulate_p<V: Vector, const LANES: usize>(
    chunks: &[&[u8]],
    range: Range<usize>,
    offset: usize,
    acc: &mut [V; LANES],
) {
    let mut end = range.end;
    // SAFETY: the caller guarantees the instruction set and lengths (whole body).
    unsafe {
        while end >= range.start + 2 {
            let first = load::<V, LANES>(chunks[end - 1], offset);
            let second = load::<V, LANES>(chunks[end - 2], offset);
            for lane in 0..LANES {
                acc[lane] = acc[lane].xor3(first[lane], second[lane]);
            }
            end -= 2;
        }
        if end > range.start {
            let last = load::<V, LANES>(chunks[end - 1], offset);
            for lane in 0..LANES {
                acc[lane] = acc[lane].xor(last[lane]);
            }
        }
    }
}

/// Folds data chunks `range` into the running P and Q at `offset`, from the highest index down
/// (Horner's rule), two chunks per step.
#[inline(always)]
unsafe fn accumulate_pq<V: Vector, const LANES: usize>(
    data: &[&[u8]],
    range: Range<usize>,
    offset: usize,
    p: &mut [V; LANES],
    q: &mut [V; LANES],
) {
    let mut end = range.end;
    // SAFETY: the caller guarantees the instruction set and lengths (whole body).
    unsafe {
        while end >= range.start + 2 {
            let high = load::<V, LANES>(data[end - 1], offset);
            let low = load::<V, LANES>(data[end - 2], offset);
            for lane in 0..LANES {
                p[lane] = p[lane].xor3(high[lane], low[lane]);
                q[lane] = q[lane].horner2(high[lane], low[lane]);
            }
            end -= 2;
        }
        if end > range.start {
            let last = load::<V, LANES>(data[end - 1], offset);
            for lane in 0..LANES {
                p[lane] = p[lane].xor(last[lane]);
                q[lane] = q[lane].horner(last[lane]);
            }
        }
    }
}

/// The highest data position not in `lost`, if any: Horner's rule starts there.
fn top_survivor(data_chunks: usize, lost: &[usize]) -> Option<usize> {
    (0..data_chunks).rev().find(|i| !lost.contains(i))
}

/// P' and Q' at `offset` over the data chunks, with the chunks at the `lost` positions (sorted)
/// counted as zero. `top` is `top_survivor(data.len(), lost)`.
#[inline(always)]
unsafe fn partial_syndromes<V: Vector, const LANES: usize>(
    data: &[&[u8]],
    lost: &[usize],
    top: Option<usize>,
    offset: usize,
) -> ([V; LANES], [V; LANES]) {
    // SAFETY: the caller guarantees the instruction set and lengths (whole body).
    unsafe {
        let Some(top) = top else {
            return ([V::zero(); LANES], [V::zero(); LANES]);
        };
        let first = load::<V, LANES>(data[top], offset);
        let mut p = first;
        let mut q = first;
        // Chunks `end..top` are still to be folded in, highest first.
        let mut end = top;
        for &position in lost.iter().rev() {
            if position < top {
                accumulate_pq(data, position + 1..end, offset, &mut p, &mut q);
                // The lost chunk contributes zero: only the Horner multiplication remains.
                for register in &mut q {
                    *register = register.mul2();
                }
                end = position;
            }
        }
        accumulate_pq(data, 0..end, offset, &mut p, &mut q);
        (p, q)
    }
}

/// The body of one operation for one block of `LANES` registers at `offset`, storing with
/// non-temporal stores if `STREAM`. Each operation is a struct of its arguments implementing
/// this, rather than a closure: closures are not reliably inlined into the `target_feature`
/// functions, and an intrinsic that is not inlined is a function call per instruction.
trait Step<V: Vector> {
    /// Safety: the module contract, `offset + LANES * V::BYTES` within every buffer, and if
    /// `STREAM`, every output aligned to `V::BYTES` (then so is every block, `offset` being a
    /// multiple of `V::BYTES`).
    unsafe fn block<const LANES: usize, const STREAM: bool>(&self, offset: usize);
}

/// Runs `step` over every whole block of `LANES` registers, then every whole register left, and
/// returns the offset of the remaining tail bytes (fewer than `V::BYTES`).
///
/// With `STREAM`, outputs are written with non-temporal stores (bypassing the caches, so no
/// read-for-ownership of the destination and no eviction of useful lines) provided every output
/// in `outputs` is aligned to `V::BYTES`; otherwise with ordinary stores. A fence then orders
/// the streamed stores before anything the caller does next.
#[inline(always)]
unsafe fn walk<V: Vector, const LANES: usize, const STREAM: bool>(
    len: usize,
    step: &impl Step<V>,
    outputs: &[*mut u8],
) -> usize {
    let stream = STREAM
        && outputs
            .iter()
            .all(|output| (*output as usize).is_multiple_of(V::BYTES));
    // SAFETY: the module contract; alignment checked for streaming.
    unsafe {
        if stream {
            let tail = walk_blocks::<V, LANES, true>(len, step);
            V::fence_streams();
            tail
        } else {
            walk_blocks::<V, LANES, false>(len, step)
        }
    }
}

#[inline(always)]
unsafe fn walk_blocks<V: Vector, const LANES: usize, const STREAM: bool>(
    len: usize,
    step: &impl Step<V>,
) -> usize {
    let mut offset = 0;
    // SAFETY: the caller's contract; the loop conditions keep every block within `len`.
    unsafe {
        while offset + LANES * V::BYTES <= len {
            step.block::<LANES, STREAM>(offset);
            offset += LANES * V::BYTES;
        }
        while offset + V::BYTES <= len {
            step.block::<1, STREAM>(offset);
            offset += V::BYTES;
        }
    }
    offset
}

struct XorGen<'a> {
    sources: &'a [&'a [u8]],
    dest: *mut u8,
}

impl<V: Vector> Step<V> for XorGen<'_> {
    #[inline(always)]
    unsafe fn block<const LANES: usize, const STREAM: bool>(&self, offset: usize) {
        let last = self.sources.len() - 1;
        // SAFETY: the trait contract.
        unsafe {
            let mut acc = load::<V, LANES>(self.sources[last], offset);
            accumulate_p(self.sources, 0..last, offset, &mut acc);
            store::<V, LANES, STREAM>(acc, self.dest, offset);
        }
    }
}

#[inline(always)]
pub(crate) unsafe fn xor_gen<V: Vector, const XOR_LANES: usize, const STREAM: bool>(
    sources: &[&[u8]],
    dest: &mut [u8],
) {
    let step = XorGen {
        sources,
        dest: dest.as_mut_ptr(),
    };
    // SAFETY: the module contract.
    let tail = unsafe { walk::<V, XOR_LANES, STREAM>(dest.len(), &step, &[step.dest]) };
    scalar::xor_gen_from(sources, dest, tail);
}

struct PqGen<'a> {
    data: &'a [&'a [u8]],
    p: *mut u8,
    q: *mut u8,
}

impl<V: Vector> Step<V> for PqGen<'_> {
    #[inline(always)]
    unsafe fn block<const LANES: usize, const STREAM: bool>(&self, offset: usize) {
        let top = Some(self.data.len() - 1);
        // SAFETY: the trait contract.
        unsafe {
            let (p, q) = partial_syndromes::<V, LANES>(self.data, &[], top, offset);
            store::<V, LANES, STREAM>(p, self.p, offset);
            store::<V, LANES, STREAM>(q, self.q, offset);
        }
    }
}

#[inline(always)]
pub(crate) unsafe fn pq_gen<V: Vector, const LANES: usize, const STREAM: bool>(
    data: &[&[u8]],
    p: &mut [u8],
    q: &mut [u8],
) {
    let step = PqGen {
        data,
        p: p.as_mut_ptr(),
        q: q.as_mut_ptr(),
    };
    // SAFETY: the module contract.
    let tail = unsafe { walk::<V, LANES, STREAM>(p.len(), &step, &[step.p, step.q]) };
    scalar::pq_gen_from(data, p, q, tail);
}

struct PUpdate<'a> {
    old: &'a [&'a [u8]],
    new: &'a [&'a [u8]],
    p: *mut u8,
}

impl<V: Vector> Step<V> for PUpdate<'_> {
    #[inline(always)]
    unsafe fn block<const LANES: usize, const STREAM: bool>(&self, offset: usize) {
        // SAFETY: the trait contract; P is read before it is written at the same offset.
        unsafe {
            let mut acc = load_raw::<V, LANES>(self.p, offset);
            for (old_chunk, new_chunk) in self.old.iter().zip(self.new) {
                let old = load::<V, LANES>(old_chunk, offset);
                let new = load::<V, LANES>(new_chunk, offset);
                for lane in 0..LANES {
                    acc[lane] = acc[lane].xor3(old[lane], new[lane]);
                }
            }
            store::<V, LANES, STREAM>(acc, self.p, offset);
        }
    }
}

#[inline(always)]
pub(crate) unsafe fn p_update<V: Vector, const LANES: usize, const STREAM: bool>(
    old: &[&[u8]],
    new: &[&[u8]],
    p: &mut [u8],
) {
    let step = PUpdate {
        old,
        new,
        p: p.as_mut_ptr(),
    };
    // SAFETY: the module contract.
    let tail = unsafe { walk::<V, LANES, STREAM>(p.len(), &step, &[step.p]) };
    scalar::p_update_from(old, new, p, tail);
}

struct PqUpdate<'a, V: Vector> {
    old: &'a [&'a [u8]],
    new: &'a [&'a [u8]],
    /// g^start: the deltas are folded by Horner's rule as if they started at chunk 0.
    first_coefficient: V::Multiplier,
    p: *mut u8,
    q: *mut u8,
}

impl<V: Vector> Step<V> for PqUpdate<'_, V> {
    #[inline(always)]
    unsafe fn block<const LANES: usize, const STREAM: bool>(&self, offset: usize) {
        // SAFETY: the trait contract; P and Q are read before they are written at the same
        // offset.
        unsafe {
            let mut p_delta = [V::zero(); LANES];
            let mut q_delta = [V::zero(); LANES];
            for (old_chunk, new_chunk) in self.old.iter().zip(self.new).rev() {
                let old = load::<V, LANES>(old_chunk, offset);
                let new = load::<V, LANES>(new_chunk, offset);
                for lane in 0..LANES {
                    let delta = old[lane].xor(new[lane]);
                    p_delta[lane] = p_delta[lane].xor(delta);
                    q_delta[lane] = q_delta[lane].horner(delta);
                }
            }
            let mut p = load_raw::<V, LANES>(self.p, offset);
            let mut q = load_raw::<V, LANES>(self.q, offset);
            for lane in 0..LANES {
                p[lane] = p[lane].xor(p_delta[lane]);
                q[lane] = q[lane].xor(q_delta[lane].mul(self.first_coefficient));
            }
            store::<V, LANES, STREAM>(p, self.p, offset);
            store::<V, LANES, STREAM>(q, self.q, offset);
        }
    }
}

#[inline(always)]
pub(crate) unsafe fn pq_update<V: Vector, const LANES: usize, const STREAM: bool>(
    start: usize,
    old: &[&[u8]],
    new: &[&[u8]],
    p: &mut [u8],
    q: &mut [u8],
) {
    // SAFETY: the module contract.
    let first_coefficient = unsafe { V::multiplier(gf::exp(start)) };
    let step = PqUpdate::<V> {
        old,
        new,
        first_coefficient,
        p: p.as_mut_ptr(),
        q: q.as_mut_ptr(),
    };
    // SAFETY: the module contract.
    let tail = unsafe { walk::<V, LANES, STREAM>(p.len(), &step, &[step.p, step.q]) };
    scalar::pq_update_from(start, old, new, p, q, tail);
}

struct RecoverDataP<'a, V: Vector> {
    data: &'a [&'a [u8]],
    lost: [usize; 1],
    top: Option<usize>,
    q: &'a [u8],
    /// g^-x.
    inverse: V::Multiplier,
    out_data: *mut u8,
    out_p: Option<*mut u8>,
}

impl<V: Vector> Step<V> for RecoverDataP<'_, V> {
    #[inline(always)]
    unsafe fn block<const LANES: usize, const STREAM: bool>(&self, offset: usize) {
        // SAFETY: the trait contract.
        unsafe {
            let (mut p, q_partial) =
                partial_syndromes::<V, LANES>(self.data, &self.lost, self.top, offset);
            let mut recovered = load::<V, LANES>(self.q, offset);
            for lane in 0..LANES {
                // Q ^ Q' = g^x * D_x.
                recovered[lane] = recovered[lane].xor(q_partial[lane]).mul(self.inverse);
            }
            store::<V, LANES, STREAM>(recovered, self.out_data, offset);
            if let Some(out_p) = self.out_p {
                for lane in 0..LANES {
                    p[lane] = p[lane].xor(recovered[lane]);
                }
                store::<V, LANES, STREAM>(p, out_p, offset);
            }
        }
    }
}

#[inline(always)]
pub(crate) unsafe fn recover_data_p<V: Vector, const LANES: usize, const STREAM: bool>(
    data: &[&[u8]],
    x: usize,
    q: &[u8],
    out_data: &mut [u8],
    mut out_p: Option<&mut [u8]>,
) {
    let lost = [x];
    let step = RecoverDataP::<V> {
        data,
        lost,
        top: top_survivor(data.len(), &lost),
        q,
        // SAFETY: the module contract.
        inverse: unsafe { V::multiplier(gf::exp_negative(x)) },
        out_data: out_data.as_mut_ptr(),
        out_p: out_p.as_deref_mut().map(|p| p.as_mut_ptr()),
    };
    let outputs = [step.out_data, step.out_p.unwrap_or(step.out_data)];
    // SAFETY: the module contract.
    let tail = unsafe { walk::<V, LANES, STREAM>(q.len(), &step, &outputs) };
    scalar::recover_data_p_from(data, x, q, out_data, out_p, tail);
}

/// Data chunk `x` lost, rebuilt from P alone (RAID5, or RAID6 with Q not needed).
struct RecoverDataFromP<'a> {
    data: &'a [&'a [u8]],
    x: usize,
    p: &'a [u8],
    out_data: *mut u8,
}

impl<V: Vector> Step<V> for RecoverDataFromP<'_> {
    #[inline(always)]
    unsafe fn block<const LANES: usize, const STREAM: bool>(&self, offset: usize) {
        // SAFETY: the trait contract.
        unsafe {
            // D_x = P ^ P'.
            let mut recovered = load::<V, LANES>(self.p, offset);
            accumulate_p(
                self.data,
                self.x + 1..self.data.len(),
                offset,
                &mut recovered,
            );
            accumulate_p(self.data, 0..self.x, offset, &mut recovered);
            store::<V, LANES, STREAM>(recovered, self.out_data, offset);
        }
    }
}

/// Data chunk `x` and Q lost: rebuilt from P and the other data in one pass.
struct RecoverDataQ<'a, V: Vector> {
    data: &'a [&'a [u8]],
    lost: [usize; 1],
    top: Option<usize>,
    p: &'a [u8],
    /// g^x.
    coefficient: V::Multiplier,
    out_data: *mut u8,
    out_q: *mut u8,
}

impl<V: Vector> Step<V> for RecoverDataQ<'_, V> {
    #[inline(always)]
    unsafe fn block<const LANES: usize, const STREAM: bool>(&self, offset: usize) {
        // SAFETY: the trait contract.
        unsafe {
            let (p_partial, mut q) =
                partial_syndromes::<V, LANES>(self.data, &self.lost, self.top, offset);
            let mut recovered = load::<V, LANES>(self.p, offset);
            for lane in 0..LANES {
                recovered[lane] = recovered[lane].xor(p_partial[lane]);
                q[lane] = q[lane].xor(recovered[lane].mul(self.coefficient));
            }
            store::<V, LANES, STREAM>(recovered, self.out_data, offset);
            store::<V, LANES, STREAM>(q, self.out_q, offset);
        }
    }
}

#[inline(always)]
pub(crate) unsafe fn recover_data_q<
    V: Vector,
    const LANES: usize,
    const XOR_LANES: usize,
    const STREAM: bool,
>(
    data: &[&[u8]],
    x: usize,
    p: &[u8],
    out_data: &mut [u8],
    mut out_q: Option<&mut [u8]>,
) {
    let tail = match out_q.as_deref_mut() {
        None => {
            let step = RecoverDataFromP {
                data,
                x,
                p,
                out_data: out_data.as_mut_ptr(),
            };
            // SAFETY: the module contract.
            unsafe { walk::<V, XOR_LANES, STREAM>(p.len(), &step, &[step.out_data]) }
        }
        Some(out_q) => {
            let lost = [x];
            let step = RecoverDataQ::<V> {
                data,
                lost,
                top: top_survivor(data.len(), &lost),
                p,
                // SAFETY: the module contract.
                coefficient: unsafe { V::multiplier(gf::exp(x)) },
                out_data: out_data.as_mut_ptr(),
                out_q: out_q.as_mut_ptr(),
            };
            // SAFETY: the module contract.
            unsafe { walk::<V, LANES, STREAM>(p.len(), &step, &[step.out_data, step.out_q]) }
        }
    };
    scalar::recover_data_q_from(data, x, p, out_data, out_q, tail);
}

struct RecoverTwoData<'a, V: Vector> {
    data: &'a [&'a [u8]],
    lost: [usize; 2],
    top: Option<usize>,
    p: &'a [u8],
    q: &'a [u8],
    /// `gf::two_data_coefficients`: D_x = A * (P ^ P') ^ B * (Q ^ Q').
    a: V::Multiplier,
    b: V::Multiplier,
    out_x: *mut u8,
    out_y: *mut u8,
}

impl<V: Vector> Step<V> for RecoverTwoData<'_, V> {
    #[inline(always)]
    unsafe fn block<const LANES: usize, const STREAM: bool>(&self, offset: usize) {
        // SAFETY: the trait contract.
        unsafe {
            let (p_partial, q_partial) =
                partial_syndromes::<V, LANES>(self.data, &self.lost, self.top, offset);
            let p = load::<V, LANES>(self.p, offset);
            let q = load::<V, LANES>(self.q, offset);
            let mut recovered_x = [V::zero(); LANES];
            let mut recovered_y = [V::zero(); LANES];
            for lane in 0..LANES {
                let p_syndrome = p[lane].xor(p_partial[lane]);
                let q_syndrome = q[lane].xor(q_partial[lane]);
                recovered_x[lane] = p_syndrome.mul(self.a).xor(q_syndrome.mul(self.b));
                recovered_y[lane] = p_syndrome.xor(recovered_x[lane]);
            }
            store::<V, LANES, STREAM>(recovered_x, self.out_x, offset);
            store::<V, LANES, STREAM>(recovered_y, self.out_y, offset);
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn recover_two_data<V: Vector, const LANES: usize, const STREAM: bool>(
    data: &[&[u8]],
    x: usize,
    y: usize,
    p: &[u8],
    q: &[u8],
    out_x: &mut [u8],
    out_y: &mut [u8],
) {
    let lost = [x, y];
    let (a, b) = gf::two_data_coefficients(x, y);
    let step = RecoverTwoData::<V> {
        data,
        lost,
        top: top_survivor(data.len(), &lost),
        p,
        q,
        // SAFETY: the module contract.
        a: unsafe { V::multiplier(a) },
        // SAFETY: the module contract.
        b: unsafe { V::multiplier(b) },
        out_x: out_x.as_mut_ptr(),
        out_y: out_y.as_mut_ptr(),
    };
    // SAFETY: the module contract.
    let tail = unsafe { walk::<V, LANES, STREAM>(p.len(), &step, &[step.out_x, step.out_y]) };
    scalar::recover_two_data_from(data, x, y, p, q, out_x, out_y, tail);
}
