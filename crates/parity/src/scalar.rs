//! The portable kernel: eight bytes at a time in a `u64` ("SIMD within a register"). It runs on
//! any CPU, and the vector kernels use its `*_from` functions for the bytes after their last
//! whole vector.
//!
//! Every `*_from(.., start)` function processes byte positions `start..len` of all buffers, so a
//! vector kernel hands over its tail without building sub-slices (no allocation). The last word
//! of a buffer may be partial: it is loaded zero-padded and stored truncated.

use crate::{Kernel, checks, gf};

/// Portable u64 kernel.
#[derive(Debug, Default, Clone, Copy)]
pub struct Scalar;

const WORD_BYTES: usize = 8;
const LOW_SEVEN_BITS: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const LOW_BIT: u64 = 0x0101_0101_0101_0101;

#[inline(always)]
fn load(chunk: &[u8], offset: usize) -> u64 {
    match chunk.get(offset..offset + WORD_BYTES) {
        Some(bytes) => u64::from_le_bytes(bytes.try_into().expect("eight bytes")),
        None => {
            let tail = &chunk[offset..];
            let mut bytes = [0u8; WORD_BYTES];
            bytes[..tail.len()].copy_from_slice(tail);
            u64::from_le_bytes(bytes)
        }
    }
}

#[inline(always)]
fn store(chunk: &mut [u8], offset: usize, word: u64) {
    let end = chunk.len().min(offset + WORD_BYTES);
    chunk[offset..end].copy_from_slice(&word.to_le_bytes()[..end - offset]);
}

/// Multiplies each of the eight bytes by g = 2: shift every byte left, then XOR 0x1d into the
/// bytes whose top bit fell out.
#[inline(always)]
fn mul2(word: u64) -> u64 {
    ((word & LOW_SEVEN_BITS) << 1) ^ (((word >> 7) & LOW_BIT) * u64::from(gf::POLYNOMIAL_LOW))
}

/// Multiplies each of the eight bytes by the constant `c`, as the sum of `c`'s bits times
/// `word * 2^bit`. No table, so tails of a few bytes cost no set-up.
#[inline(always)]
fn mul(c: u8, word: u64) -> u64 {
    let mut product = 0;
    let mut power = word;
    for bit in 0..8 {
        if c & (1 << bit) != 0 {
            product ^= power;
        }
        power = mul2(power);
    }
    product
}

/// P' and Q' of one word over the data chunks, lost chunks counted as zero; Q' by Horner's
/// rule from the highest chunk down.
#[inline(always)]
fn partial_syndromes(data: &[&[u8]], lost: &[usize], offset: usize) -> (u64, u64) {
    let mut p = 0;
    let mut q = 0;
    for (i, chunk) in data.iter().enumerate().rev() {
        q = mul2(q);
        if !lost.contains(&i) {
            let word = load(chunk, offset);
            p ^= word;
            q ^= word;
        }
    }
    (p, q)
}

pub(crate) fn xor_gen_from(sources: &[&[u8]], dest: &mut [u8], start: usize) {
    for offset in (start..dest.len()).step_by(WORD_BYTES) {
        let word = sources
            .iter()
            .fold(0, |acc, source| acc ^ load(source, offset));
        store(dest, offset, word);
    }
}

pub(crate) fn pq_gen_from(data: &[&[u8]], p: &mut [u8], q: &mut [u8], start: usize) {
    for offset in (start..p.len()).step_by(WORD_BYTES) {
        let (p_word, q_word) = partial_syndromes(data, &[], offset);
        store(p, offset, p_word);
        store(q, offset, q_word);
    }
}

pub(crate) fn p_update_from(old: &[&[u8]], new: &[&[u8]], p: &mut [u8], start: usize) {
    for offset in (start..p.len()).step_by(WORD_BYTES) {
        let mut word = load(p, offset);
        for (old_chunk, new_chunk) in old.iter().zip(new) {
            word ^= load(old_chunk, offset) ^ load(new_chunk, offset);
        }
        store(p, offset, word);
    }
}

pub(crate) fn pq_update_from(
    first: usize,
    old: &[&[u8]],
    new: &[&[u8]],
    p: &mut [u8],
    q: &mut [u8],
    start: usize,
) {
    let first_coefficient = gf::exp(first);
    for offset in (start..p.len()).step_by(WORD_BYTES) {
        let mut p_delta = 0;
        let mut q_delta = 0;
        for (old_chunk, new_chunk) in old.iter().zip(new).rev() {
            let delta = load(old_chunk, offset) ^ load(new_chunk, offset);
            p_delta ^= delta;
            q_delta = mul2(q_delta) ^ delta;
        }
        store(p, offset, load(p, offset) ^ p_delta);
        store(q, offset, load(q, offset) ^ mul(first_coefficient, q_delta));
    }
}

pub(crate) fn recover_data_p_from(
    data: &[&[u8]],
    x: usize,
    q: &[u8],
    out_data: &mut [u8],
    mut out_p: Option<&mut [u8]>,
    start: usize,
) {
    let inverse = gf::exp_negative(x);
    for offset in (start..q.len()).step_by(WORD_BYTES) {
        let (p_partial, q_partial) = partial_syndromes(data, &[x], offset);
        let lost = mul(inverse, load(q, offset) ^ q_partial);
        store(out_data, offset, lost);
        if let Some(out_p) = out_p.as_deref_mut() {
            store(out_p, offset, p_partial ^ lost);
        }
    }
}

pub(crate) fn recover_data_q_from(
    data: &[&[u8]],
    x: usize,
    p: &[u8],
    out_data: &mut [u8],
    mut out_q: Option<&mut [u8]>,
    start: usize,
) {
    let coefficient = gf::exp(x);
    for offset in (start..p.len()).step_by(WORD_BYTES) {
        let (p_partial, q_partial) = partial_syndromes(data, &[x], offset);
        let lost = load(p, offset) ^ p_partial;
        store(out_data, offset, lost);
        if let Some(out_q) = out_q.as_deref_mut() {
            store(out_q, offset, q_partial ^ mul(coefficient, lost));
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn recover_two_data_from(
    data: &[&[u8]],
    x: usize,
    y: usize,
    p: &[u8],
    q: &[u8],
    out_x: &mut [u8],
    out_y: &mut [u8],
    start: usize,
) {
    let (a, b) = gf::two_data_coefficients(x, y);
    for offset in (start..p.len()).step_by(WORD_BYTES) {
        let (p_partial, q_partial) = partial_syndromes(data, &[x, y], offset);
        let p_syndrome = load(p, offset) ^ p_partial;
        let q_syndrome = load(q, offset) ^ q_partial;
        let lost_x = mul(a, p_syndrome) ^ mul(b, q_syndrome);
        store(out_x, offset, lost_x);
        store(out_y, offset, p_syndrome ^ lost_x);
    }
}

impl Kernel for Scalar {
    fn name(&self) -> &'static str {
        "scalar"
    }

    fn xor_gen(&self, sources: &[&[u8]], dest: &mut [u8]) {
        checks::xor_gen(sources, dest);
        xor_gen_from(sources, dest, 0);
    }

    fn pq_gen(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        checks::pq_gen(data, p, q);
        pq_gen_from(data, p, q, 0);
    }

    fn p_update(&self, old: &[&[u8]], new: &[&[u8]], p: &mut [u8]) {
        checks::p_update(old, new, p);
        p_update_from(old, new, p, 0);
    }

    fn pq_update(&self, start: usize, old: &[&[u8]], new: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        checks::pq_update(start, old, new, p, q);
        pq_update_from(start, old, new, p, q, 0);
    }

    fn recover_data_p(
        &self,
        data: &[&[u8]],
        x: usize,
        q: &[u8],
        out_data: &mut [u8],
        out_p: Option<&mut [u8]>,
    ) {
        checks::recover_one_data(data, x, q, out_data, out_p.as_deref());
        recover_data_p_from(data, x, q, out_data, out_p, 0);
    }

    fn recover_data_q(
        &self,
        data: &[&[u8]],
        x: usize,
        p: &[u8],
        out_data: &mut [u8],
        out_q: Option<&mut [u8]>,
    ) {
        checks::recover_one_data(data, x, p, out_data, out_q.as_deref());
        recover_data_q_from(data, x, p, out_data, out_q, 0);
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
        checks::recover_two_data(data, (x, y), p, q, out_x, out_y);
        recover_two_data_from(data, x, y, p, q, out_x, out_y, 0);
    }
}
