//! One stripe's parity work, as the GPU batch and the dispatcher take it, and the same work done
//! by a CPU kernel (the dispatcher's CPU route and its fallback).
//!
//! Only full-stripe operations exist here: generation (P, P+Q) and recovery. Read-modify-write
//! updates are never batched: they are small, latency-bound, and stay on the CPU kernels.

use tessera_parity::{Kernel, gf};

/// What to compute for one stripe. Positions are data positions (Q coefficient g^i), as in
/// [`tessera_parity::Kernel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StripeOperation {
    /// P = XOR of the data chunks (RAID5 parity, or RAID5 recovery from survivors and P).
    Xor,
    /// P and Q of the data chunks.
    Pq,
    /// Data chunk `x` and P lost: outputs D_x, then P. Parity input: Q.
    RecoverDataP {
        /// The lost data position.
        x: usize,
    },
    /// Data chunk `x` and Q lost: outputs D_x, then Q. Parity input: P.
    RecoverDataQ {
        /// The lost data position.
        x: usize,
    },
    /// Data chunks `x < y` lost: outputs D_x, then D_y. Parity inputs: P, Q.
    RecoverTwoData {
        /// The lower lost data position.
        x: usize,
        /// The higher lost data position.
        y: usize,
    },
}

impl StripeOperation {
    /// The lost data positions (whose entries in `data` are ignored), in increasing order.
    pub fn lost(self) -> Vec<usize> {
        match self {
            StripeOperation::Xor | StripeOperation::Pq => Vec::new(),
            StripeOperation::RecoverDataP { x } | StripeOperation::RecoverDataQ { x } => vec![x],
            StripeOperation::RecoverTwoData { x, y } => vec![x, y],
        }
    }

    /// How many parity chunks the operation reads.
    pub fn parity_inputs(self) -> usize {
        match self {
            StripeOperation::Xor | StripeOperation::Pq => 0,
            StripeOperation::RecoverDataP { .. } | StripeOperation::RecoverDataQ { .. } => 1,
            StripeOperation::RecoverTwoData { .. } => 2,
        }
    }

    /// How many chunks the operation writes.
    pub fn outputs(self) -> usize {
        match self {
            StripeOperation::Xor => 1,
            _ => 2,
        }
    }

    /// The GF(2^8) constants the recovery multiplies by: g^-x (data+P), g^x (data+Q, to
    /// regenerate Q), or Anvin's A and B (two data). Zero where unused.
    pub fn coefficients(self) -> (u8, u8) {
        match self {
            StripeOperation::Xor | StripeOperation::Pq => (0, 0),
            StripeOperation::RecoverDataP { x } => (gf::exp_negative(x), 0),
            StripeOperation::RecoverDataQ { x } => (gf::exp(x), 0),
            StripeOperation::RecoverTwoData { x, y } => gf::two_data_coefficients(x, y),
        }
    }
}

/// The inputs of one stripe's work. All chunks have the same length (any length, including 0).
#[derive(Clone, Copy, Debug)]
pub struct StripeRef<'a> {
    /// What to compute.
    pub operation: StripeOperation,
    /// The data chunks in Q-coefficient order. Entries at lost positions are never read and may
    /// be empty.
    pub data: &'a [&'a [u8]],
    /// The parity chunks read: none (`Xor`, `Pq`), `[Q]` (`RecoverDataP`), `[P]`
    /// (`RecoverDataQ`), `[P, Q]` (`RecoverTwoData`).
    pub parity: &'a [&'a [u8]],
}

impl StripeRef<'_> {
    /// The chunk length. Panics (a caller bug) if the stripe is malformed: wrong parity count,
    /// lost positions out of range or out of order, more than 255 data chunks, unequal lengths.
    pub fn chunk_bytes(&self) -> usize {
        let lost = self.operation.lost();
        assert!(
            !self.data.is_empty(),
            "a stripe needs at least one data chunk"
        );
        assert!(
            self.data.len() <= gf::ORDER,
            "at most 255 data chunks, got {}",
            self.data.len()
        );
        assert_eq!(
            self.parity.len(),
            self.operation.parity_inputs(),
            "{:?} reads {} parity chunks",
            self.operation,
            self.operation.parity_inputs()
        );
        for pair in lost.windows(2) {
            assert!(
                pair[0] < pair[1],
                "lost positions must be in order: {lost:?}"
            );
        }
        if let Some(&last) = lost.last() {
            assert!(last < self.data.len(), "lost position {last} out of range");
        }
        let len = match (
            self.parity.first(),
            (0..self.data.len()).find(|i| !lost.contains(i)),
        ) {
            (Some(parity), _) => parity.len(),
            (None, Some(first)) => self.data[first].len(),
            (None, None) => 0,
        };
        for (i, chunk) in self.data.iter().enumerate() {
            if !lost.contains(&i) {
                assert_eq!(chunk.len(), len, "data chunk {i} length differs");
            }
        }
        for parity in self.parity {
            assert_eq!(parity.len(), len, "parity chunk length differs");
        }
        len
    }

    /// Bytes of data chunks the stripe stands for (lost ones included): the unit of batch sizes
    /// and throughput everywhere in Tessera.
    pub fn data_bytes(&self) -> usize {
        self.data.len() * self.chunk_bytes()
    }
}

/// Where one stripe's results go, in the order of [`StripeOperation`]'s outputs.
#[derive(Debug)]
pub struct StripeOutput<'a> {
    /// P (`Xor`, `Pq`) or the recovered D_x.
    pub first: &'a mut [u8],
    /// Q (`Pq`), the regenerated P or Q (`RecoverDataP`, `RecoverDataQ`: `None` if not
    /// wanted), or D_y (`RecoverTwoData`: required). Always `None` for `Xor`.
    pub second: Option<&'a mut [u8]>,
}

impl StripeOutput<'_> {
    /// Panics (a caller bug) unless the buffers fit `stripe`.
    pub fn check(&self, stripe: &StripeRef<'_>) {
        let len = stripe.chunk_bytes();
        assert_eq!(self.first.len(), len, "first output length differs");
        match (stripe.operation, &self.second) {
            (StripeOperation::Xor, Some(_)) => panic!("Xor has one output"),
            (StripeOperation::Pq | StripeOperation::RecoverTwoData { .. }, None) => {
                panic!("{:?} needs its second output", stripe.operation)
            }
            _ => {}
        }
        if let Some(second) = &self.second {
            assert_eq!(second.len(), len, "second output length differs");
        }
    }
}

/// Computes `stripe` into `output` with a CPU kernel.
pub fn run_on_cpu(kernel: &dyn Kernel, stripe: &StripeRef<'_>, output: &mut StripeOutput<'_>) {
    output.check(stripe);
    let second = output.second.as_deref_mut();
    match stripe.operation {
        StripeOperation::Xor => kernel.xor_gen(stripe.data, output.first),
        StripeOperation::Pq => kernel.pq_gen(stripe.data, output.first, second.expect("checked")),
        StripeOperation::RecoverDataP { x } => {
            kernel.recover_data_p(stripe.data, x, stripe.parity[0], output.first, second)
        }
        StripeOperation::RecoverDataQ { x } => {
            kernel.recover_data_q(stripe.data, x, stripe.parity[0], output.first, second)
        }
        StripeOperation::RecoverTwoData { x, y } => kernel.recover_two_data(
            stripe.data,
            x,
            y,
            stripe.parity[0],
            stripe.parity[1],
            output.first,
            second.expect("checked"),
        ),
    }
}
