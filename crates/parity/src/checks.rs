//! Precondition checks shared by every kernel, so that all kernels reject the same misuse the same
//! way. They are `assert!`s: a wrong length or index here would otherwise read or write out of
//! bounds in the SIMD kernels, and they cost nothing next to the work.

use crate::gf;

/// Checks `xor_gen` arguments and returns the common length.
pub(crate) fn xor_gen(sources: &[&[u8]], dest: &[u8]) -> usize {
    assert!(!sources.is_empty(), "xor_gen needs at least one source");
    let len = dest.len();
    for (i, source) in sources.iter().enumerate() {
        assert_eq!(
            source.len(),
            len,
            "source {i} length differs from the destination"
        );
    }
    len
}

/// Checks `pq_gen` arguments and returns the common length.
pub(crate) fn pq_gen(data: &[&[u8]], p: &[u8], q: &[u8]) -> usize {
    assert!(!data.is_empty(), "pq_gen needs at least one data chunk");
    assert!(
        data.len() <= gf::ORDER,
        "at most 255 data chunks, got {}",
        data.len()
    );
    let len = p.len();
    assert_eq!(q.len(), len, "P and Q lengths differ");
    for (i, chunk) in data.iter().enumerate() {
        assert_eq!(chunk.len(), len, "data chunk {i} length differs from P");
    }
    len
}

/// Checks `p_update` arguments and returns the common length.
pub(crate) fn p_update(old: &[&[u8]], new: &[&[u8]], p: &[u8]) -> usize {
    assert_eq!(old.len(), new.len(), "as many old as new chunks");
    let len = p.len();
    for (i, (old_chunk, new_chunk)) in old.iter().zip(new).enumerate() {
        assert_eq!(old_chunk.len(), len, "old chunk {i} length differs from P");
        assert_eq!(new_chunk.len(), len, "new chunk {i} length differs from P");
    }
    len
}

/// Checks `pq_update` arguments and returns the common length.
pub(crate) fn pq_update(start: usize, old: &[&[u8]], new: &[&[u8]], p: &[u8], q: &[u8]) -> usize {
    let len = p_update(old, new, p);
    assert_eq!(q.len(), len, "P and Q lengths differ");
    assert!(
        start + old.len() <= gf::ORDER,
        "chunks {start}..{} are beyond the 255 data chunks of a stripe",
        start + old.len()
    );
    len
}

/// Checks the data chunks of a recovery with the given lost positions (sorted, distinct) and
/// returns the common length, taken from `reference` (a surviving parity chunk).
fn recovery(data: &[&[u8]], lost: &[usize], reference: &[u8]) -> usize {
    assert!(
        data.len() <= gf::ORDER,
        "at most 255 data chunks, got {}",
        data.len()
    );
    for pair in lost.windows(2) {
        assert!(
            pair[0] < pair[1],
            "lost chunks must be distinct and in order: {lost:?}"
        );
    }
    for &position in lost {
        assert!(
            position < data.len(),
            "lost chunk {position} of {} data chunks",
            data.len()
        );
    }
    let len = reference.len();
    for (i, chunk) in data.iter().enumerate() {
        if !lost.contains(&i) {
            assert_eq!(
                chunk.len(),
                len,
                "data chunk {i} length differs from the parity"
            );
        }
    }
    len
}

/// Checks that an output buffer has the common length.
fn output(name: &str, buffer: &[u8], len: usize) {
    assert_eq!(
        buffer.len(),
        len,
        "{name} length differs from the stripe's chunk length"
    );
}

/// Checks `recover_data_p` and `recover_data_q` arguments (one data chunk `x` lost, rebuilt from
/// the surviving parity `parity`, the other parity optionally regenerated) and returns the length.
pub(crate) fn recover_one_data(
    data: &[&[u8]],
    x: usize,
    parity: &[u8],
    out_data: &[u8],
    out_parity: Option<&[u8]>,
) -> usize {
    let len = recovery(data, &[x], parity);
    output("recovered data", out_data, len);
    if let Some(out_parity) = out_parity {
        output("regenerated parity", out_parity, len);
    }
    len
}

/// Checks `recover_two_data` arguments and returns the common length.
pub(crate) fn recover_two_data(
    data: &[&[u8]],
    (x, y): (usize, usize),
    p: &[u8],
    q: &[u8],
    out_x: &[u8],
    out_y: &[u8],
) -> usize {
    let len = recovery(data, &[x, y], p);
    output("Q", q, len);
    output("recovered data x", out_x, len);
    output("recovered data y", out_y, len);
    len
}
