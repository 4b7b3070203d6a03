//! The reference kernel: one byte at a time, straight from the definitions, written to be read.
//! Every other kernel is tested against this one; it is never fast and is never chosen
//! automatically unless nothing else exists.

use crate::{Kernel, checks, gf};

/// Byte-at-a-time reference kernel.
#[derive(Debug, Default, Clone, Copy)]
pub struct Naive;

impl Naive {
    /// P' and Q' of one byte position over the data chunks, lost chunks counted as zero:
    /// `P' = XOR of D_i`, `Q' = XOR of g^i * D_i`.
    fn partial_syndromes(data: &[&[u8]], lost: &[usize], byte: usize) -> (u8, u8) {
        let mut p = 0u8;
        let mut q = 0u8;
        for (i, chunk) in data.iter().enumerate() {
            if lost.contains(&i) {
                continue;
            }
            p ^= chunk[byte];
            q ^= gf::mul(gf::exp(i), chunk[byte]);
        }
        (p, q)
    }
}

impl Kernel for Naive {
    fn name(&self) -> &'static str {
        "naive"
    }

    fn xor_gen(&self, sources: &[&[u8]], dest: &mut [u8]) {
        let len = checks::xor_gen(sources, dest);
        for byte in 0..len {
            dest[byte] = sources.iter().fold(0, |acc, source| acc ^ source[byte]);
        }
    }

    fn pq_gen(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        let len = checks::pq_gen(data, p, q);
        for byte in 0..len {
            (p[byte], q[byte]) = Self::partial_syndromes(data, &[], byte);
        }
    }

    fn p_update(&self, old: &[&[u8]], new: &[&[u8]], p: &mut [u8]) {
        let len = checks::p_update(old, new, p);
        for byte in 0..len {
            for (old_chunk, new_chunk) in old.iter().zip(new) {
                p[byte] ^= old_chunk[byte] ^ new_chunk[byte];
            }
        }
    }

    fn pq_update(&self, start: usize, old: &[&[u8]], new: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        let len = checks::pq_update(start, old, new, p, q);
        for byte in 0..len {
            for (i, (old_chunk, new_chunk)) in old.iter().zip(new).enumerate() {
                let delta = old_chunk[byte] ^ new_chunk[byte];
                p[byte] ^= delta;
                q[byte] ^= gf::mul(gf::exp(start + i), delta);
            }
        }
    }

    fn recover_data_p(
        &self,
        data: &[&[u8]],
        x: usize,
        q: &[u8],
        out_data: &mut [u8],
        mut out_p: Option<&mut [u8]>,
    ) {
        let len = checks::recover_one_data(data, x, q, out_data, out_p.as_deref());
        for byte in 0..len {
            let (p_partial, q_partial) = Self::partial_syndromes(data, &[x], byte);
            // Q ^ Q' = g^x * D_x.
            let lost = gf::mul(gf::exp_negative(x), q[byte] ^ q_partial);
            out_data[byte] = lost;
            if let Some(out_p) = out_p.as_deref_mut() {
                out_p[byte] = p_partial ^ lost;
            }
        }
    }

    fn recover_data_q(
        &self,
        data: &[&[u8]],
        x: usize,
        p: &[u8],
        out_data: &mut [u8],
        mut out_q: Option<&mut [u8]>,
    ) {
        let len = checks::recover_one_data(data, x, p, out_data, out_q.as_deref());
        for byte in 0..len {
            let (p_partial, q_partial) = Self::partial_syndromes(data, &[x], byte);
            // P ^ P' = D_x.
            let lost = p[byte] ^ p_partial;
            out_data[byte] = lost;
            if let Some(out_q) = out_q.as_deref_mut() {
                out_q[byte] = q_partial ^ gf::mul(gf::exp(x), lost);
            }
        }
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
        let len = checks::recover_two_data(data, (x, y), p, q, out_x, out_y);
        let (a, b) = gf::two_data_coefficients(x, y);
        for byte in 0..len {
            let (p_partial, q_partial) = Self::partial_syndromes(data, &[x, y], byte);
            let p_syndrome = p[byte] ^ p_partial;
            let q_syndrome = q[byte] ^ q_partial;
            let lost_x = gf::mul(a, p_syndrome) ^ gf::mul(b, q_syndrome);
            out_x[byte] = lost_x;
            out_y[byte] = p_syndrome ^ lost_x;
        }
    }
}
