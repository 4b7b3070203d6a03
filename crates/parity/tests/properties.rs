//! Property tests with shrinking: random stripes (data count, length, misalignment, contents) and
//! a random operation, every kernel against the naive one. A failure shrinks to a small stripe.

mod common;

use common::{Buffer, Rng};
use proptest::prelude::*;
use tessera_parity::{Kernel, Naive, available_kernels};

/// One operation with its lost positions or updated range.
#[derive(Clone, Debug)]
enum Operation {
    XorGen,
    PqGen,
    PUpdate { start: usize, count: usize },
    PqUpdate { start: usize, count: usize },
    RecoverDataP { x: usize, regenerate: bool },
    RecoverDataQ { x: usize, regenerate: bool },
    RecoverTwoData { x: usize, y: usize },
}

#[derive(Clone, Debug)]
struct Case {
    data_chunks: usize,
    len: usize,
    /// Byte offset of every buffer from a 64-byte boundary.
    misalignment: usize,
    seed: u64,
    operation: Operation,
}

fn operation(data_chunks: usize) -> impl Strategy<Value = Operation> {
    let n = data_chunks;
    let range = (0..n).prop_flat_map(move |start| (Just(start), 1..=n - start));
    let mut choices = vec![
        Just(Operation::XorGen).boxed(),
        Just(Operation::PqGen).boxed(),
        range
            .clone()
            .prop_map(|(start, count)| Operation::PUpdate { start, count })
            .boxed(),
        range
            .prop_map(|(start, count)| Operation::PqUpdate { start, count })
            .boxed(),
        (0..n, any::<bool>())
            .prop_map(|(x, regenerate)| Operation::RecoverDataP { x, regenerate })
            .boxed(),
        (0..n, any::<bool>())
            .prop_map(|(x, regenerate)| Operation::RecoverDataQ { x, regenerate })
            .boxed(),
    ];
    if n >= 2 {
        choices.push(
            (0..n - 1)
                .prop_flat_map(move |x| (Just(x), x + 1..n))
                .prop_map(|(x, y)| Operation::RecoverTwoData { x, y })
                .boxed(),
        );
    }
    proptest::strategy::Union::new(choices)
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=40, 0usize..=600, 0usize..64, any::<u64>()).prop_flat_map(
        |(data_chunks, len, misalignment, seed)| {
            operation(data_chunks).prop_map(move |operation| Case {
                data_chunks,
                len,
                misalignment,
                seed,
                operation: operation.clone(),
            })
        },
    )
}

/// Runs `case` on `kernel` and returns every output buffer's bytes.
fn run(kernel: &dyn Kernel, case: &Case) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(case.seed);
    let m = case.misalignment;
    let buffer = |rng: &mut Rng| Buffer::random(rng, case.len, m);
    let data: Vec<Buffer> = (0..case.data_chunks).map(|_| buffer(&mut rng)).collect();
    let new: Vec<Buffer> = (0..case.data_chunks).map(|_| buffer(&mut rng)).collect();
    let mut p = buffer(&mut rng);
    let mut q = buffer(&mut rng);
    let mut out_first = Buffer::new(case.len, m);
    let mut out_second = Buffer::new(case.len, m);
    let refs: Vec<&[u8]> = data.iter().map(Buffer::as_slice).collect();
    let new_refs: Vec<&[u8]> = new.iter().map(Buffer::as_slice).collect();
    let holed = |lost: &[usize]| -> Vec<&[u8]> {
        refs.iter()
            .enumerate()
            .map(|(i, &c)| if lost.contains(&i) { &[][..] } else { c })
            .collect()
    };
    match case.operation {
        Operation::XorGen => kernel.xor_gen(&refs, out_first.as_mut_slice()),
        Operation::PqGen => {
            kernel.pq_gen(&refs, out_first.as_mut_slice(), out_second.as_mut_slice())
        }
        Operation::PUpdate { start, count } => kernel.p_update(
            &refs[start..start + count],
            &new_refs[start..start + count],
            p.as_mut_slice(),
        ),
        Operation::PqUpdate { start, count } => kernel.pq_update(
            start,
            &refs[start..start + count],
            &new_refs[start..start + count],
            p.as_mut_slice(),
            q.as_mut_slice(),
        ),
        Operation::RecoverDataP { x, regenerate } => kernel.recover_data_p(
            &holed(&[x]),
            x,
            q.as_slice(),
            out_first.as_mut_slice(),
            regenerate.then_some(out_second.as_mut_slice()),
        ),
        Operation::RecoverDataQ { x, regenerate } => kernel.recover_data_q(
            &holed(&[x]),
            x,
            p.as_slice(),
            out_first.as_mut_slice(),
            regenerate.then_some(out_second.as_mut_slice()),
        ),
        Operation::RecoverTwoData { x, y } => kernel.recover_two_data(
            &holed(&[x, y]),
            x,
            y,
            p.as_slice(),
            q.as_slice(),
            out_first.as_mut_slice(),
            out_second.as_mut_slice(),
        ),
    }
    for buffer in [&p, &q, &out_first, &out_second] {
        buffer.assert_guards_intact();
    }
    [p, q, out_first, out_second]
        .iter()
        .map(|b| b.as_slice().to_vec())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn every_kernel_matches_naive(case in case()) {
        let expected = run(&Naive, &case);
        for kernel in available_kernels() {
            let got = run(kernel, &case);
            prop_assert!(got == expected, "kernel {} differs from naive", kernel.name());
        }
    }
}
