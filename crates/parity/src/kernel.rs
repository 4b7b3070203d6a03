//! The one trait every parity kernel implements.
//!
//! Conventions shared by every method:
//! - All buffers of one call have the same length; any length (including 0 and odd lengths) and
//!   any alignment is accepted. Kernels assert equal lengths.
//! - `data[i]` is data chunk `i` of the stripe row, in the order of the RAID6 Q coefficients: its
//!   Q coefficient is g^i with g = 2 in GF(2^8)/0x11d (Linux md `lib/raid6`). `i` is the chunk's
//!   position among the data chunks of the row, not its member index.
//! - Where a method recovers lost data chunks, the entries of `data` at the lost positions are
//!   ignored (they may be empty slices); every other entry must be present.
//! - No method allocates.

/// A parity kernel: one implementation of the GF(2^8) parity operations.
pub trait Kernel: Send + Sync {
    /// A short stable name (`naive`, `scalar`, `avx2`, `avx512`, `gfni`, and `avx2-nt`,
    /// `avx512-nt`, `gfni-nt` for the variants with non-temporal stores), used in reports and
    /// to force a kernel by configuration.
    fn name(&self) -> &'static str;

    /// `dest = sources[0] ^ sources[1] ^ ...`. RAID5 parity, and recovery of one data chunk from
    /// P and the surviving data. `sources` must not be empty.
    fn xor_gen(&self, sources: &[&[u8]], dest: &mut [u8]);

    /// P = XOR of `data`; Q = sum of g^i * data[i]. `data` must not be empty and has at most 255
    /// entries.
    fn pq_gen(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]);

    /// Read-modify-write of P alone: `p ^= old[i] ^ new[i]` for every `i`.
    fn p_update(&self, old: &[&[u8]], new: &[&[u8]], p: &mut [u8]);

    /// Read-modify-write of P and Q for the data chunks `start .. start + old.len()`, whose old
    /// contents are `old` and new contents `new`: `p ^= old[i] ^ new[i]` and
    /// `q ^= g^(start + i) * (old[i] ^ new[i])`. Chunks outside that range are not read.
    fn pq_update(&self, start: usize, old: &[&[u8]], new: &[&[u8]], p: &mut [u8], q: &mut [u8]);

    /// Data chunk `x` and P are lost: recover `data[x]` into `out_data` from Q and the other data
    /// chunks, and, if `out_p` is given, regenerate P into it.
    fn recover_data_p(
        &self,
        data: &[&[u8]],
        x: usize,
        q: &[u8],
        out_data: &mut [u8],
        out_p: Option<&mut [u8]>,
    );

    /// Data chunk `x` and Q are lost: recover `data[x]` into `out_data` from P and the other data
    /// chunks, and, if `out_q` is given, regenerate Q into it.
    fn recover_data_q(
        &self,
        data: &[&[u8]],
        x: usize,
        p: &[u8],
        out_data: &mut [u8],
        out_q: Option<&mut [u8]>,
    );

    /// Data chunks `x < y` are lost: recover both from P, Q and the other data chunks.
    #[allow(clippy::too_many_arguments)]
    fn recover_two_data(
        &self,
        data: &[&[u8]],
        x: usize,
        y: usize,
        p: &[u8],
        q: &[u8],
        out_x: &mut [u8],
        out_y: &mut [u8],
    );
}
