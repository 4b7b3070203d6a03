//! Helpers shared by the parity integration tests: a seeded PRNG, misaligned buffers, and a
//! checker that erases chunks of a stripe and verifies a kernel rebuilds them.

#![allow(dead_code)] // Each test file uses a different subset.

use tessera_parity::Kernel;

/// SplitMix64: a small, seeded, reproducible generator (no dependency, same stream everywhere).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (bound > 0; the tiny modulo bias does not matter for tests).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }

    pub fn fill(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// A buffer of `len` bytes starting `misalignment` bytes after a 64-byte boundary, so kernels see
/// every alignment (0: aligned, where the `-nt` kernels use non-temporal stores). Bytes around
/// it are filled with a canary to catch out-of-bounds writes.
pub struct Buffer {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

const CANARY: u8 = 0xa5;
const GUARD_BYTES: usize = 64;

impl Buffer {
    pub fn new(len: usize, misalignment: usize) -> Buffer {
        assert!(misalignment < GUARD_BYTES);
        let storage = vec![CANARY; len + 3 * GUARD_BYTES];
        let address = storage.as_ptr() as usize + GUARD_BYTES;
        let start =
            GUARD_BYTES + (GUARD_BYTES - address % GUARD_BYTES) % GUARD_BYTES + misalignment;
        Buffer {
            storage,
            start,
            len,
        }
    }

    pub fn random(rng: &mut Rng, len: usize, misalignment: usize) -> Buffer {
        let mut buffer = Buffer::new(len, misalignment);
        rng.fill(buffer.as_mut_slice());
        buffer
    }

    pub fn from_slice(bytes: &[u8], misalignment: usize) -> Buffer {
        let mut buffer = Buffer::new(bytes.len(), misalignment);
        buffer.as_mut_slice().copy_from_slice(bytes);
        buffer
    }

    fn start(&self) -> usize {
        self.start
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start()..self.start() + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let start = self.start();
        &mut self.storage[start..start + self.len]
    }

    /// Panics if anything outside the buffer proper was written.
    pub fn assert_guards_intact(&self) {
        let start = self.start();
        assert!(
            self.storage[..start].iter().all(|&b| b == CANARY),
            "write before buffer"
        );
        assert!(
            self.storage[start + self.len..]
                .iter()
                .all(|&b| b == CANARY),
            "write after buffer"
        );
    }
}

/// A stripe of random data chunks with P and Q computed by the naive kernel, every buffer at its
/// own misalignment (0 if `aligned`).
pub struct Stripe {
    pub data: Vec<Buffer>,
    pub p: Buffer,
    pub q: Buffer,
    pub len: usize,
    /// Whether every buffer of the stripe and every output is 64-byte aligned.
    pub aligned: bool,
}

impl Stripe {
    pub fn random(rng: &mut Rng, data_chunks: usize, len: usize, aligned: bool) -> Stripe {
        let misalignment = |rng: &mut Rng| if aligned { 0 } else { random_misalignment(rng) };
        let data: Vec<Buffer> = (0..data_chunks)
            .map(|_| {
                let m = misalignment(rng);
                Buffer::random(rng, len, m)
            })
            .collect();
        let mut p = Buffer::new(len, misalignment(rng));
        let mut q = Buffer::new(len, misalignment(rng));
        let refs: Vec<&[u8]> = data.iter().map(Buffer::as_slice).collect();
        tessera_parity::Naive.pq_gen(&refs, p.as_mut_slice(), q.as_mut_slice());
        Stripe {
            data,
            p,
            q,
            len,
            aligned,
        }
    }

    pub fn data_refs(&self) -> Vec<&[u8]> {
        self.data.iter().map(Buffer::as_slice).collect()
    }

    /// The data chunks with the lost ones replaced by empty slices, so a kernel that reads a lost
    /// chunk panics instead of silently using the right answer.
    pub fn data_refs_without(&self, lost: &[usize]) -> Vec<&[u8]> {
        self.data
            .iter()
            .enumerate()
            .map(|(i, chunk)| {
                if lost.contains(&i) {
                    &[][..]
                } else {
                    chunk.as_slice()
                }
            })
            .collect()
    }
}

/// A member of a stripe: a data chunk by position, or a parity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Member {
    Data(usize),
    P,
    Q,
}

/// Every 1- and 2-member erasure of a stripe with `data_chunks` data chunks.
pub fn all_erasures(data_chunks: usize) -> Vec<Vec<Member>> {
    let mut members: Vec<Member> = (0..data_chunks).map(Member::Data).collect();
    members.push(Member::P);
    members.push(Member::Q);
    let mut erasures = Vec::new();
    for (i, &first) in members.iter().enumerate() {
        erasures.push(vec![first]);
        for &second in &members[i + 1..] {
            erasures.push(vec![first, second]);
        }
    }
    erasures
}

/// A misalignment for a buffer: 64-byte aligned a quarter of the time (so that the `-nt`
/// kernels' non-temporal path runs), otherwise any offset.
pub fn random_misalignment(rng: &mut Rng) -> usize {
    if rng.below(4) == 0 {
        0
    } else {
        rng.below(GUARD_BYTES)
    }
}

/// An output buffer for `stripe`, aligned if the stripe is, else at a random misalignment,
/// prefilled with a canary.
fn output(rng: &mut Rng, stripe: &Stripe) -> Buffer {
    let m = if stripe.aligned {
        0
    } else {
        random_misalignment(rng)
    };
    Buffer::new(stripe.len, m)
}

fn assert_rebuilt(
    kernel: &dyn Kernel,
    what: &str,
    rebuilt: &Buffer,
    expected: &[u8],
    lost: &[Member],
) {
    rebuilt.assert_guards_intact();
    if rebuilt.as_slice() != expected {
        let first = rebuilt
            .as_slice()
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b);
        panic!(
            "kernel {} rebuilt {what} wrong for erasure {lost:?}, len {}, first bad byte {first:?}",
            kernel.name(),
            expected.len()
        );
    }
}

/// Erases `lost` from `stripe`, has `kernel` rebuild it with every method that applies, and
/// compares with the original bytes (the independent reference: the data that was written).
pub fn check_erasure(kernel: &dyn Kernel, stripe: &Stripe, lost: &[Member], rng: &mut Rng) {
    let p = stripe.p.as_slice();
    let q = stripe.q.as_slice();
    match *lost {
        [Member::Data(x)] => {
            let data = stripe.data_refs_without(&[x]);
            let expected = stripe.data[x].as_slice();
            // RAID6 with P: D_x = P ^ P'.
            let mut rebuilt = output(rng, stripe);
            kernel.recover_data_q(&data, x, p, rebuilt.as_mut_slice(), None);
            assert_rebuilt(kernel, "data from P", &rebuilt, expected, lost);
            // From Q alone, as when P is also unreadable.
            let mut rebuilt = output(rng, stripe);
            kernel.recover_data_p(&data, x, q, rebuilt.as_mut_slice(), None);
            assert_rebuilt(kernel, "data from Q", &rebuilt, expected, lost);
            // RAID5: XOR of the survivors and P.
            let mut sources: Vec<&[u8]> = data
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != x)
                .map(|(_, c)| *c)
                .collect();
            sources.push(p);
            let mut rebuilt = output(rng, stripe);
            kernel.xor_gen(&sources, rebuilt.as_mut_slice());
            assert_rebuilt(kernel, "data by xor_gen", &rebuilt, expected, lost);
        }
        [Member::P] | [Member::Q] | [Member::P, Member::Q] => {
            let data = stripe.data_refs();
            let mut rebuilt_p = output(rng, stripe);
            let mut rebuilt_q = output(rng, stripe);
            kernel.pq_gen(&data, rebuilt_p.as_mut_slice(), rebuilt_q.as_mut_slice());
            assert_rebuilt(kernel, "P", &rebuilt_p, p, lost);
            assert_rebuilt(kernel, "Q", &rebuilt_q, q, lost);
            let mut rebuilt_p = output(rng, stripe);
            kernel.xor_gen(&data, rebuilt_p.as_mut_slice());
            assert_rebuilt(kernel, "P by xor_gen", &rebuilt_p, p, lost);
        }
        [Member::Data(x), Member::Data(y)] => {
            let data = stripe.data_refs_without(&[x, y]);
            let mut rebuilt_x = output(rng, stripe);
            let mut rebuilt_y = output(rng, stripe);
            kernel.recover_two_data(
                &data,
                x,
                y,
                p,
                q,
                rebuilt_x.as_mut_slice(),
                rebuilt_y.as_mut_slice(),
            );
            assert_rebuilt(
                kernel,
                "data x",
                &rebuilt_x,
                stripe.data[x].as_slice(),
                lost,
            );
            assert_rebuilt(
                kernel,
                "data y",
                &rebuilt_y,
                stripe.data[y].as_slice(),
                lost,
            );
        }
        [Member::Data(x), Member::P] => {
            let data = stripe.data_refs_without(&[x]);
            let mut rebuilt = output(rng, stripe);
            let mut rebuilt_p = output(rng, stripe);
            kernel.recover_data_p(
                &data,
                x,
                q,
                rebuilt.as_mut_slice(),
                Some(rebuilt_p.as_mut_slice()),
            );
            assert_rebuilt(kernel, "data", &rebuilt, stripe.data[x].as_slice(), lost);
            assert_rebuilt(kernel, "P", &rebuilt_p, p, lost);
        }
        [Member::Data(x), Member::Q] => {
            let data = stripe.data_refs_without(&[x]);
            let mut rebuilt = output(rng, stripe);
            let mut rebuilt_q = output(rng, stripe);
            kernel.recover_data_q(
                &data,
                x,
                p,
                rebuilt.as_mut_slice(),
                Some(rebuilt_q.as_mut_slice()),
            );
            assert_rebuilt(kernel, "data", &rebuilt, stripe.data[x].as_slice(), lost);
            assert_rebuilt(kernel, "Q", &rebuilt_q, q, lost);
        }
        _ => panic!("not an erasure this checker knows: {lost:?}"),
    }
}

/// Updates `count` chunks from `start` of `stripe` to random new contents with `kernel`'s
/// `pq_update` and `p_update`, and compares P and Q with those the naive kernel generates from
/// the new data.
pub fn check_update(
    kernel: &dyn Kernel,
    stripe: &Stripe,
    start: usize,
    count: usize,
    rng: &mut Rng,
) {
    let len = stripe.len;
    let new_chunks: Vec<Buffer> = (0..count)
        .map(|_| {
            let m = random_misalignment(rng);
            Buffer::random(rng, len, m)
        })
        .collect();
    let old: Vec<&[u8]> = stripe.data[start..start + count]
        .iter()
        .map(Buffer::as_slice)
        .collect();
    let new: Vec<&[u8]> = new_chunks.iter().map(Buffer::as_slice).collect();

    let mut all_new = stripe.data_refs();
    all_new[start..start + count].copy_from_slice(&new);
    let mut expected_p = vec![0; len];
    let mut expected_q = vec![0; len];
    tessera_parity::Naive.pq_gen(&all_new, &mut expected_p, &mut expected_q);

    let mut p = Buffer::from_slice(stripe.p.as_slice(), random_misalignment(rng));
    let mut q = Buffer::from_slice(stripe.q.as_slice(), random_misalignment(rng));
    kernel.pq_update(start, &old, &new, p.as_mut_slice(), q.as_mut_slice());
    let lost = [Member::Data(start)];
    assert_rebuilt(kernel, "updated P", &p, &expected_p, &lost);
    assert_rebuilt(kernel, "updated Q", &q, &expected_q, &lost);

    let mut p = Buffer::from_slice(stripe.p.as_slice(), random_misalignment(rng));
    kernel.p_update(&old, &new, p.as_mut_slice());
    assert_rebuilt(kernel, "updated P (p_update)", &p, &expected_p, &lost);
}
