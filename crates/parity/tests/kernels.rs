//! Every kernel, called directly (not through the dispatcher), against the original data and the
//! naive kernel: every 1- and 2-chunk erasure for 1 to 32 data chunks at odd and even lengths,
//! a few stripes of up to 255 data chunks, 1 MiB chunks, misaligned buffers, and updates.
//!
//! The reference for a recovery is the data that was erased; the reference for P and Q is the
//! naive kernel (itself checked against hand-derived bytes in `golden.rs`).

mod common;

use common::{Member, Rng, Stripe, all_erasures, check_erasure, check_update};
use tessera_parity::{Kernel, kernel_by_name};

const LENGTHS: [usize; 8] = [0, 1, 63, 64, 65, 127, 4095, 4096];

/// The kernel, or `None` (with a note on stderr) if this CPU cannot run it.
fn kernel(name: &str) -> Option<&'static dyn Kernel> {
    match kernel_by_name(name) {
        Ok(kernel) => Some(kernel),
        Err(error) => {
            eprintln!("skipping {name}: {error}");
            None
        }
    }
}

/// All erasures for every data count 1..=32 and every length in `lengths`.
fn all_erasures_small_stripes(name: &str, lengths: &[usize]) {
    let Some(kernel) = kernel(name) else { return };
    let mut rng = Rng::new(0x5eed_0001);
    let mut checked = 0;
    for data_chunks in 1..=32 {
        for &len in lengths {
            let stripe = Stripe::random(&mut rng, data_chunks, len, false);
            for erasure in all_erasures(data_chunks) {
                check_erasure(kernel, &stripe, &erasure, &mut rng);
                checked += 1;
            }
        }
    }
    assert!(checked > 0);
}

/// Large stripes (up to 255 data chunks) with a sample of erasures, including the extremes.
fn wide_stripes(name: &str) {
    let Some(kernel) = kernel(name) else { return };
    let mut rng = Rng::new(0x5eed_0002);
    for data_chunks in [33, 64, 100, 128, 200, 254, 255] {
        for len in [65, 320] {
            let stripe = Stripe::random(&mut rng, data_chunks, len, false);
            let last = data_chunks - 1;
            let mut erasures = vec![
                vec![Member::Data(0)],
                vec![Member::Data(last)],
                vec![Member::P, Member::Q],
                vec![Member::Data(0), Member::Data(last)],
                vec![Member::Data(last - 1), Member::Data(last)],
                vec![Member::Data(last), Member::P],
                vec![Member::Data(last), Member::Q],
            ];
            for _ in 0..8 {
                let x = rng.below(data_chunks - 1);
                let y = x + 1 + rng.below(data_chunks - 1 - x);
                erasures.push(vec![Member::Data(x), Member::Data(y)]);
                erasures.push(vec![Member::Data(x), Member::P]);
                erasures.push(vec![Member::Data(y), Member::Q]);
            }
            for erasure in &erasures {
                check_erasure(kernel, &stripe, erasure, &mut rng);
            }
        }
    }
}

/// 1 MiB chunks, aligned and misaligned, a few erasures of each kind.
fn big_chunks(name: &str) {
    let Some(kernel) = kernel(name) else { return };
    let mut rng = Rng::new(0x5eed_0003);
    for (data_chunks, aligned) in [(4, true), (8, false), (5, true)] {
        let stripe = Stripe::random(&mut rng, data_chunks, 1 << 20, aligned);
        for erasure in [
            vec![Member::Data(1)],
            vec![Member::P, Member::Q],
            vec![Member::Data(0), Member::Data(data_chunks - 1)],
            vec![Member::Data(2), Member::P],
            vec![Member::Data(data_chunks - 1), Member::Q],
        ] {
            check_erasure(kernel, &stripe, &erasure, &mut rng);
        }
        check_update(kernel, &stripe, 1, 2, &mut rng);
    }
}

/// Read-modify-write updates of random runs of chunks.
fn updates(name: &str) {
    let Some(kernel) = kernel(name) else { return };
    let mut rng = Rng::new(0x5eed_0004);
    for data_chunks in [1, 2, 3, 4, 8, 17, 32, 255] {
        for &len in &LENGTHS {
            let stripe = Stripe::random(&mut rng, data_chunks, len, false);
            for _ in 0..4 {
                let start = rng.below(data_chunks);
                let count = 1 + rng.below(data_chunks - start);
                check_update(kernel, &stripe, start, count, &mut rng);
            }
            check_update(kernel, &stripe, 0, data_chunks, &mut rng);
        }
    }
}

// The naive kernel is slow: its exhaustive run uses short chunks only. Its results are checked
// against the erased data here and against hand-derived bytes in `golden.rs`.
#[test]
fn naive_all_erasures() {
    all_erasures_small_stripes("naive", &[0, 1, 63, 64, 65]);
}

#[test]
fn naive_wide_stripes_and_updates() {
    wide_stripes("naive");
    updates("naive");
}

macro_rules! kernel_tests {
    ($module:ident, $name:literal) => {
        mod $module {
            #[test]
            fn all_erasures() {
                super::all_erasures_small_stripes($name, &super::LENGTHS);
            }

            #[test]
            fn wide_stripes() {
                super::wide_stripes($name);
            }

            #[test]
            fn big_chunks() {
                super::big_chunks($name);
            }

            #[test]
            fn updates() {
                super::updates($name);
            }
        }
    };
}

kernel_tests!(scalar, "scalar");
kernel_tests!(avx2, "avx2");
kernel_tests!(avx2_nt, "avx2-nt");
kernel_tests!(avx512, "avx512");
kernel_tests!(avx512_nt, "avx512-nt");
kernel_tests!(gfni, "gfni");
kernel_tests!(gfni_nt, "gfni-nt");
