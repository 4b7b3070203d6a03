//! Locating a single bad chunk of a RAID6 stripe from its syndromes, for scrub.
//!
//! Scrub recomputes P' and Q' from the data chunks it read and compares them with the stored P
//! and Q. The syndromes are `sp = P ^ P'` and `sq = Q ^ Q'`. If exactly one chunk is corrupt:
//! - data chunk `z` differs by `e`: `sp = e` and `sq = g^z * e`, so on every byte where `sp` is
//!   nonzero, `log(sq) - log(sp) = z`, and both are zero elsewhere;
//! - P is corrupt: `sp != 0` and `sq = 0` everywhere;
//! - Q is corrupt: `sp = 0` everywhere and `sq != 0`.
//!
//! Anything else means more than one chunk is corrupt (or the stripe was torn), and no single
//! chunk can be blamed.

use crate::gf;

/// What the syndromes of one stripe say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyndromeVerdict {
    /// Both syndromes are zero: P and Q agree with the data.
    Consistent,
    /// Data chunk at this position (among the data chunks of the stripe row) is the only bad one.
    Data(usize),
    /// Only P is bad.
    P,
    /// Only Q is bad.
    Q,
    /// The syndromes fit no single bad chunk: more than one chunk is bad.
    Inconsistent,
}

/// Decides which single chunk, if any, explains the syndromes `sp = P ^ P'` and `sq = Q ^ Q'` of
/// a stripe with `data_chunks` data chunks. Scalar code: scrub finds errors rarely, and calls this
/// only for a stripe whose syndromes are not both zero.
pub fn locate_single_error(data_chunks: usize, sp: &[u8], sq: &[u8]) -> SyndromeVerdict {
    assert_eq!(sp.len(), sq.len(), "syndromes of different lengths");
    assert!(
        (1..=gf::ORDER).contains(&data_chunks),
        "a stripe has 1 to 255 data chunks, not {data_chunks}"
    );
    let sp_is_zero = sp.iter().all(|&byte| byte == 0);
    let sq_is_zero = sq.iter().all(|&byte| byte == 0);
    match (sp_is_zero, sq_is_zero) {
        (true, true) => return SyndromeVerdict::Consistent,
        (true, false) => return SyndromeVerdict::Q,
        (false, true) => return SyndromeVerdict::P,
        (false, false) => {}
    }
    let mut position: Option<usize> = None;
    for (&p_byte, &q_byte) in sp.iter().zip(sq) {
        match (p_byte, q_byte) {
            (0, 0) => continue,
            // One syndrome is zero where the other is not: no single data chunk does that.
            (0, _) | (_, 0) => return SyndromeVerdict::Inconsistent,
            _ => {}
        }
        let z = (gf::log(q_byte) + gf::ORDER - gf::log(p_byte)) % gf::ORDER;
        match position {
            None => position = Some(z),
            Some(previous) if previous != z => return SyndromeVerdict::Inconsistent,
            Some(_) => {}
        }
    }
    // sp is nonzero somewhere, so the loop saw at least one byte with both nonzero.
    let z = position.expect("a nonzero syndrome byte");
    if z < data_chunks {
        SyndromeVerdict::Data(z)
    } else {
        SyndromeVerdict::Inconsistent
    }
}
