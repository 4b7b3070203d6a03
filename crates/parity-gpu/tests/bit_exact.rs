//! Every GPU operation, bit for bit, against the naive CPU kernel and the erased data itself:
//! all 1- and 2-erasure combinations for 1 to 16 data chunks, sampled ones for wider stripes,
//! lengths that are not multiples of 4 (or of the shader's 16-byte vectors), many stripes of
//! mixed shapes and operations per batch, with both multiply-by-constant strategies.

mod common;

use common::{Rng, Stripe, data_pairs, open_engine, single_positions};
use tessera_parity_gpu::{
    EngineConfig, GpuEngine, MulStrategy, StripeOperation, StripeOutput, StripeRef,
};

/// One operation on one stripe and the bytes it must produce.
struct Case<'s> {
    stripe: &'s Stripe,
    operation: StripeOperation,
    parity: Vec<&'s [u8]>,
    expected_first: &'s [u8],
    /// `None`: the second output is not asked for (only where the operation allows).
    expected_second: Option<&'s [u8]>,
}

/// The cases of `stripe`: XOR, P+Q, and the given erasures (each regenerated parity asked for
/// except for position 0 of `RecoverDataP`/`RecoverDataQ`, to cover the optional output).
fn cases<'s>(stripe: &'s Stripe, singles: &[usize], pairs: &[(usize, usize)]) -> Vec<Case<'s>> {
    let mut cases = vec![
        Case {
            stripe,
            operation: StripeOperation::Xor,
            parity: vec![],
            expected_first: &stripe.p,
            expected_second: None,
        },
        Case {
            stripe,
            operation: StripeOperation::Pq,
            parity: vec![],
            expected_first: &stripe.p,
            expected_second: Some(&stripe.q),
        },
    ];
    for &x in singles {
        cases.push(Case {
            stripe,
            operation: StripeOperation::RecoverDataP { x },
            parity: vec![&stripe.q],
            expected_first: &stripe.data[x],
            expected_second: (x != 0).then_some(stripe.p.as_slice()),
        });
        cases.push(Case {
            stripe,
            operation: StripeOperation::RecoverDataQ { x },
            parity: vec![&stripe.p],
            expected_first: &stripe.data[x],
            expected_second: (x != 0).then_some(stripe.q.as_slice()),
        });
    }
    for &(x, y) in pairs {
        cases.push(Case {
            stripe,
            operation: StripeOperation::RecoverTwoData { x, y },
            parity: vec![&stripe.p, &stripe.q],
            expected_first: &stripe.data[x],
            expected_second: Some(&stripe.data[y]),
        });
    }
    cases
}

/// Runs every case as one batch and compares each output with its expected bytes.
fn check(engine: &mut GpuEngine, cases: &[Case<'_>]) {
    let survivors: Vec<Vec<&[u8]>> = cases
        .iter()
        .map(|case| case.stripe.survivors(&case.operation.lost()))
        .collect();
    let stripes: Vec<StripeRef<'_>> = cases
        .iter()
        .zip(&survivors)
        .map(|(case, data)| StripeRef {
            operation: case.operation,
            data,
            parity: &case.parity,
        })
        .collect();
    // Poisoned outputs: a byte the GPU failed to write shows up.
    let mut buffers: Vec<(Vec<u8>, Option<Vec<u8>>)> = cases
        .iter()
        .map(|case| {
            let len = case.expected_first.len();
            (
                vec![0xee; len],
                case.expected_second.map(|_| vec![0xee; len]),
            )
        })
        .collect();
    let mut outputs: Vec<StripeOutput<'_>> = buffers
        .iter_mut()
        .map(|(first, second)| StripeOutput {
            first,
            second: second.as_deref_mut(),
        })
        .collect();
    engine.run(&stripes, &mut outputs).expect("GPU batch");
    for (case, (first, second)) in cases.iter().zip(&buffers) {
        let shape = format!(
            "{:?} on {} data chunks of {} bytes",
            case.operation,
            case.stripe.data.len(),
            case.expected_first.len()
        );
        assert!(
            first.as_slice() == case.expected_first,
            "first output of {shape}"
        );
        assert!(
            second.as_deref() == case.expected_second,
            "second output of {shape}"
        );
    }
}

fn engines(test: &str) -> Vec<GpuEngine> {
    MulStrategy::ALL
        .iter()
        .filter_map(|&strategy| {
            open_engine(
                test,
                EngineConfig {
                    strategy,
                    ..EngineConfig::default()
                },
            )
        })
        .collect()
}

#[test]
fn every_erasure_for_1_to_16_data_chunks_at_odd_lengths() {
    let mut rng = Rng::new(0x6770_7531);
    for mut engine in engines("every_erasure_for_1_to_16_data_chunks_at_odd_lengths") {
        for len in [1usize, 3, 5, 15, 17, 4095] {
            // One batch per length holds every data count and every erasure: a few hundred
            // stripes of mixed shapes and operations.
            let stripes: Vec<Stripe> = (1..=16)
                .map(|data_chunks| Stripe::random(&mut rng, data_chunks, len))
                .collect();
            let mut batch = Vec::new();
            for stripe in &stripes {
                let n = stripe.data.len();
                let singles: Vec<usize> = (0..n).collect();
                let pairs = data_pairs(&mut rng, n, usize::MAX);
                batch.extend(cases(stripe, &singles, &pairs));
            }
            check(&mut engine, &batch);
        }
    }
}

#[test]
fn large_chunks_not_a_multiple_of_four() {
    let mut rng = Rng::new(0x6770_7532);
    for mut engine in engines("large_chunks_not_a_multiple_of_four") {
        for (data_chunks, len) in [
            (1, 65537),
            (2, 65537),
            (5, 65537),
            (16, 65537),
            (4, 1 << 20),
        ] {
            let stripe = Stripe::random(&mut rng, data_chunks, len);
            let singles = single_positions(&mut rng, data_chunks, 4);
            let pairs = data_pairs(&mut rng, data_chunks, 6);
            check(&mut engine, &cases(&stripe, &singles, &pairs));
        }
    }
}

#[test]
fn wide_stripes_with_sampled_erasures() {
    let mut rng = Rng::new(0x6770_7533);
    for mut engine in engines("wide_stripes_with_sampled_erasures") {
        for len in [33usize, 4097] {
            let stripes: Vec<Stripe> = [17usize, 24, 40, 100, 255]
                .iter()
                .map(|&data_chunks| Stripe::random(&mut rng, data_chunks, len))
                .collect();
            let mut batch = Vec::new();
            for stripe in &stripes {
                let n = stripe.data.len();
                let singles = single_positions(&mut rng, n, 6);
                let pairs = data_pairs(&mut rng, n, 8);
                batch.extend(cases(stripe, &singles, &pairs));
            }
            check(&mut engine, &batch);
        }
    }
}

#[test]
fn many_stripes_and_a_two_dimensional_dispatch() {
    let mut rng = Rng::new(0x6770_7534);
    // An axis limit of 7 workgroups sends even this small batch through the y axis, with a
    // partly used last row.
    let config = EngineConfig {
        dispatch_axis_limit: 7,
        ..EngineConfig::default()
    };
    let Some(mut engine) = open_engine("many_stripes_and_a_two_dimensional_dispatch", config)
    else {
        return;
    };
    // 300 stripes of 4+2 and 8+2 with 4 KiB to 20 KiB chunks (1 to 5 workgroups each).
    let stripes: Vec<Stripe> = (0..300)
        .map(|i| Stripe::random(&mut rng, 4 + 4 * (i % 2), 4096 * (1 + i % 5) - i % 3))
        .collect();
    let mut batch = Vec::new();
    for (i, stripe) in stripes.iter().enumerate() {
        let n = stripe.data.len();
        let all = cases(stripe, &[i % n], &[(i % (n - 1), n - 1)]);
        // One case per stripe, rotating through the operations.
        batch.extend(all.into_iter().nth(i % 5));
    }
    check(&mut engine, &batch);
}

#[test]
fn zero_length_stripes_and_empty_batches() {
    let Some(mut engine) = open_engine(
        "zero_length_stripes_and_empty_batches",
        EngineConfig::default(),
    ) else {
        return;
    };
    engine.run(&[], &mut []).expect("empty batch");
    let mut rng = Rng::new(5);
    let empty = Stripe::random(&mut rng, 3, 0);
    check(&mut engine, &cases(&empty, &[1], &[(0, 2)]));
    // Zero-length stripes between real ones do not own any workgroup.
    let real = Stripe::random(&mut rng, 3, 100);
    let mut batch = cases(&empty, &[0], &[]);
    batch.extend(cases(&real, &[2], &[(0, 1)]));
    batch.extend(cases(&empty, &[], &[(1, 2)]));
    check(&mut engine, &batch);
}
