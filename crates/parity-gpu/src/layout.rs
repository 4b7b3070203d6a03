//! Where each stripe of a batch goes in the GPU buffers, and how many workgroups cover it. Pure
//! arithmetic, shared by the upload (which writes the chunks there), the shader (which reads the
//! descriptors) and the download (which trims the padding).
//!
//! Chunks are packed four bytes per `u32` and handled as `vec4<u32>`, 16 bytes per shader
//! invocation step, so every chunk is padded with zeros to a multiple of 16 bytes on upload and
//! the padding is cut off on download. Each workgroup covers `VECTORS_PER_WORKGROUP` vectors
//! (4 KiB) of one stripe's chunks; a stripe gets as many workgroups as its chunk length needs, and
//! the workgroups of all stripes are numbered in one sequence that the shader maps back to its
//! stripe by a binary search over the descriptors' `first_workgroup`.

use crate::stripe::{StripeOperation, StripeRef};

/// Bytes per shader vector (`vec4<u32>`).
pub(crate) const VECTOR_BYTES: usize = 16;
/// Vectors of each chunk one workgroup covers (each invocation handles four, strided).
pub(crate) const VECTORS_PER_WORKGROUP: usize = 256;
/// `u32` words per stripe descriptor; must match `struct Stripe` in the shader.
pub(crate) const DESCRIPTOR_WORDS: usize = 12;
/// Bytes of the uniform header: stripe count, total workgroups, search start, workgroups along x.
pub(crate) const HEADER_BYTES: usize = 16;
/// WebGPU's limit on workgroups along one dispatch axis.
pub(crate) const MAX_WORKGROUPS_PER_AXIS: u32 = 65_535;
/// Marks "no lost position" in a descriptor.
const NO_POSITION: u32 = u32::MAX;

/// The operation codes of the shader's `switch`.
fn operation_code(operation: StripeOperation) -> u32 {
    match operation {
        StripeOperation::Xor => 0,
        StripeOperation::Pq => 1,
        StripeOperation::RecoverDataP { .. } => 2,
        StripeOperation::RecoverDataQ { .. } => 3,
        StripeOperation::RecoverTwoData { .. } => 4,
    }
}

/// One stripe's place in the batch buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StripeLayout {
    /// Bytes per chunk as the caller gave them.
    pub chunk_bytes: usize,
    /// Bytes per chunk in the GPU buffers (a multiple of `VECTOR_BYTES`).
    pub padded_bytes: usize,
    /// Where the stripe's first input chunk starts in the input buffer: the surviving data
    /// chunks in position order, then its parity inputs.
    pub input_offset_bytes: usize,
    /// Where its first output chunk starts in the output buffer (the second follows it).
    pub output_offset_bytes: usize,
    /// Its first workgroup in the batch's numbering.
    pub first_workgroup: u32,
}

/// Every stripe's place, the buffer sizes and the dispatch shape of one batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BatchLayout {
    pub stripes: Vec<StripeLayout>,
    /// The uniform header then the descriptors, as `u32` words.
    pub header: [u32; 4],
    pub descriptors: Vec<u32>,
    pub input_bytes: usize,
    pub output_bytes: usize,
    /// Workgroups over all stripes.
    pub total_workgroups: u32,
    /// Dispatch size along x and y (x * y >= total; the excess workgroups do nothing).
    pub dispatch: (u32, u32),
}

impl BatchLayout {
    /// Lays out `stripes` (which must be well-formed: see `StripeRef::chunk_bytes`), with at
    /// most `axis_limit` workgroups along x (`MAX_WORKGROUPS_PER_AXIS` except in tests, which
    /// lower it to reach the two-dimensional dispatch with small batches).
    pub fn new(stripes: &[StripeRef<'_>], axis_limit: u32) -> BatchLayout {
        assert!((1..=MAX_WORKGROUPS_PER_AXIS).contains(&axis_limit));
        let mut layouts = Vec::with_capacity(stripes.len());
        let mut descriptors = Vec::with_capacity(stripes.len() * DESCRIPTOR_WORDS);
        let (mut input_bytes, mut output_bytes) = (0usize, 0usize);
        let mut total_workgroups = 0u32;
        for stripe in stripes {
            let chunk_bytes = stripe.chunk_bytes();
            let padded_bytes = chunk_bytes.div_ceil(VECTOR_BYTES) * VECTOR_BYTES;
            let vectors = padded_bytes / VECTOR_BYTES;
            let workgroups = vectors.div_ceil(VECTORS_PER_WORKGROUP);
            let lost = stripe.operation.lost();
            let inputs = stripe.data.len() - lost.len() + stripe.operation.parity_inputs();
            let layout = StripeLayout {
                chunk_bytes,
                padded_bytes,
                input_offset_bytes: input_bytes,
                output_offset_bytes: output_bytes,
                first_workgroup: total_workgroups,
            };
            let (a, b) = stripe.operation.coefficients();
            let position = |index: usize| lost.get(index).map_or(NO_POSITION, |&p| p as u32);
            descriptors.extend_from_slice(&[
                layout.first_workgroup,
                operation_code(stripe.operation),
                stripe.data.len() as u32,
                vectors as u32,
                (layout.input_offset_bytes / VECTOR_BYTES) as u32,
                (layout.output_offset_bytes / VECTOR_BYTES) as u32,
                position(0),
                position(1),
                u32::from(a),
                u32::from(b),
                0,
                0,
            ]);
            input_bytes += inputs * padded_bytes;
            output_bytes += stripe.operation.outputs() * padded_bytes;
            total_workgroups = total_workgroups
                .checked_add(workgroups as u32)
                .expect("fewer than 2^32 workgroups per batch");
            layouts.push(layout);
        }
        assert!(
            input_bytes / VECTOR_BYTES <= u32::MAX as usize
                && output_bytes / VECTOR_BYTES <= u32::MAX as usize,
            "vector offsets fit in u32"
        );
        let dispatch_x = total_workgroups.clamp(1, axis_limit);
        let dispatch = (dispatch_x, total_workgroups.div_ceil(dispatch_x));
        // The shader's binary search starts at the highest power of two below the stripe count.
        let search_start = match stripes.len() {
            0 => 0,
            count => 1u32 << (usize::BITS - 1 - count.leading_zeros()),
        };
        BatchLayout {
            stripes: layouts,
            header: [
                stripes.len() as u32,
                total_workgroups,
                search_start,
                dispatch.0,
            ],
            descriptors,
            input_bytes,
            output_bytes,
            total_workgroups,
            dispatch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_padding_and_workgroups_by_hand() {
        let a = [7u8; 5];
        let data: [&[u8]; 3] = [&a, &a, &a];
        let big = vec![1u8; 4096 + 1];
        let big_data: [&[u8]; 2] = [&big, &[]];
        let big_parity: [&[u8]; 1] = [&big];
        let stripes = [
            StripeRef {
                operation: StripeOperation::Pq,
                data: &data,
                parity: &[],
            },
            StripeRef {
                operation: StripeOperation::RecoverDataQ { x: 1 },
                data: &big_data,
                parity: &big_parity,
            },
        ];
        let layout = BatchLayout::new(&stripes, MAX_WORKGROUPS_PER_AXIS);
        // Stripe 0: 5 bytes pad to 16; 3 inputs, 2 outputs, 1 workgroup.
        // Stripe 1: 4097 bytes pad to 4112 = 257 vectors: 2 workgroups; inputs: data 0 and P.
        assert_eq!(layout.stripes[0].padded_bytes, 16);
        assert_eq!(layout.stripes[1].padded_bytes, 4112);
        assert_eq!(layout.stripes[1].input_offset_bytes, 48);
        assert_eq!(layout.stripes[1].output_offset_bytes, 32);
        assert_eq!(layout.input_bytes, 48 + 2 * 4112);
        assert_eq!(layout.output_bytes, 32 + 2 * 4112);
        assert_eq!(layout.total_workgroups, 3);
        assert_eq!(layout.dispatch, (3, 1));
        assert_eq!(layout.header, [2, 3, 2, 3]);
        // g^1 = 2 regenerates Q for x = 1.
        assert_eq!(
            &layout.descriptors[DESCRIPTOR_WORDS..],
            &[1, 3, 2, 257, 3, 2, 1, u32::MAX, 2, 0, 0, 0]
        );
    }

    #[test]
    fn dispatch_goes_two_dimensional_past_the_axis_limit() {
        let chunk = vec![0u8; 70_000 * VECTORS_PER_WORKGROUP * VECTOR_BYTES];
        let data: [&[u8]; 1] = [&chunk];
        let stripes = [StripeRef {
            operation: StripeOperation::Xor,
            data: &data,
            parity: &[],
        }];
        let layout = BatchLayout::new(&stripes, MAX_WORKGROUPS_PER_AXIS);
        assert_eq!(layout.total_workgroups, 70_000);
        assert_eq!(layout.dispatch, (65_535, 2));
        assert_eq!(layout.header, [1, 70_000, 1, 65_535]);
    }
}
