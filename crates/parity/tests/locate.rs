//! The scrub helper that names the one bad chunk of a stripe from its syndromes, against
//! injected corruption.

mod common;

use common::Rng;
use tessera_parity::{Kernel, Naive, SyndromeVerdict, locate_single_error};

/// Syndromes of a stripe as scrub computes them: P ^ P' and Q ^ Q', with P' and Q' regenerated
/// from the (possibly corrupt) data.
fn syndromes(data: &[Vec<u8>], p: &[u8], q: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut p_again = vec![0; p.len()];
    let mut q_again = vec![0; q.len()];
    Naive.pq_gen(&refs, &mut p_again, &mut q_again);
    let sp = p.iter().zip(&p_again).map(|(a, b)| a ^ b).collect();
    let sq = q.iter().zip(&q_again).map(|(a, b)| a ^ b).collect();
    (sp, sq)
}

struct Stripe {
    data: Vec<Vec<u8>>,
    p: Vec<u8>,
    q: Vec<u8>,
}

fn random_stripe(rng: &mut Rng, data_chunks: usize, len: usize) -> Stripe {
    let data: Vec<Vec<u8>> = (0..data_chunks)
        .map(|_| {
            let mut chunk = vec![0; len];
            rng.fill(&mut chunk);
            chunk
        })
        .collect();
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut p = vec![0; len];
    let mut q = vec![0; len];
    Naive.pq_gen(&refs, &mut p, &mut q);
    Stripe { data, p, q }
}

/// Flips random bits in a few random bytes of `chunk` (at least one byte changes).
fn corrupt(rng: &mut Rng, chunk: &mut [u8]) {
    let bytes = 1 + rng.below(8);
    for _ in 0..bytes {
        let at = rng.below(chunk.len());
        chunk[at] ^= 1 + rng.below(255) as u8;
    }
}

#[test]
fn hand_computed_syndromes() {
    // Data chunk 2 off by e = 01: sp = 01, sq = g^2 * 01 = 04. log(04) - log(01) = 2.
    assert_eq!(
        locate_single_error(4, &[0x01, 0x00], &[0x04, 0x00]),
        SyndromeVerdict::Data(2)
    );
    // Data chunk 8 off by e = 80: sq = g^8 * 80 = 1d * 80 = 2^8 * 2^7 = g^15 = 0x26.
    assert_eq!(
        locate_single_error(9, &[0x80], &[0x26]),
        SyndromeVerdict::Data(8)
    );
    // The same syndromes in a stripe of 8 data chunks point at a chunk that does not exist.
    assert_eq!(
        locate_single_error(8, &[0x80], &[0x26]),
        SyndromeVerdict::Inconsistent
    );
    assert_eq!(
        locate_single_error(3, &[0, 0], &[0, 0]),
        SyndromeVerdict::Consistent
    );
    assert_eq!(locate_single_error(3, &[0, 7], &[0, 0]), SyndromeVerdict::P);
    assert_eq!(locate_single_error(3, &[0, 0], &[9, 0]), SyndromeVerdict::Q);
    // Nonzero sp where sq is zero (and vice versa) fits no single data chunk.
    assert_eq!(
        locate_single_error(3, &[1, 1], &[2, 0]),
        SyndromeVerdict::Inconsistent
    );
    // Two bytes pointing at different chunks (0 and 1).
    assert_eq!(
        locate_single_error(3, &[1, 1], &[1, 2]),
        SyndromeVerdict::Inconsistent
    );
}

#[test]
fn finds_the_one_corrupt_chunk() {
    let mut rng = Rng::new(0x10ca7e);
    for data_chunks in [1, 2, 3, 8, 17, 255] {
        for _ in 0..10 {
            let mut stripe = random_stripe(&mut rng, data_chunks, 300);
            let (sp, sq) = syndromes(&stripe.data, &stripe.p, &stripe.q);
            assert_eq!(
                locate_single_error(data_chunks, &sp, &sq),
                SyndromeVerdict::Consistent
            );

            let victim = rng.below(data_chunks + 2);
            let expected = if victim < data_chunks {
                corrupt(&mut rng, &mut stripe.data[victim]);
                SyndromeVerdict::Data(victim)
            } else if victim == data_chunks {
                corrupt(&mut rng, &mut stripe.p);
                SyndromeVerdict::P
            } else {
                corrupt(&mut rng, &mut stripe.q);
                SyndromeVerdict::Q
            };
            let (sp, sq) = syndromes(&stripe.data, &stripe.p, &stripe.q);
            assert_eq!(locate_single_error(data_chunks, &sp, &sq), expected);
        }
    }
}

#[test]
fn two_corrupt_chunks_are_inconsistent() {
    let mut rng = Rng::new(0xbad2);
    for data_chunks in [2, 4, 8, 30] {
        for _ in 0..10 {
            let mut stripe = random_stripe(&mut rng, data_chunks, 300);
            let first = rng.below(data_chunks);
            let second = (first + 1 + rng.below(data_chunks - 1)) % data_chunks;
            // Corrupt the same byte in both so they cannot be told apart by position alone.
            let at = rng.below(300);
            stripe.data[first][at] ^= 0x11;
            stripe.data[second][at] ^= 0x5c;
            corrupt(&mut rng, &mut stripe.data[second]);
            let (sp, sq) = syndromes(&stripe.data, &stripe.p, &stripe.q);
            assert_eq!(
                locate_single_error(data_chunks, &sp, &sq),
                SyndromeVerdict::Inconsistent
            );
        }
    }
}
