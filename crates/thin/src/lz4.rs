//! An LZ4 block-format encoder whose hash table lives as long as the encoder.
//!
//! Stored blocks are decoded by `lz4_flex`; its encoder, though, zeroes a new 8 KiB hash table
//! on every call (twice the size of the block it compresses) and offers no way to keep one.
//! This one keeps its table and never clears it: a table entry is only a hint, checked against
//! the bytes before it is used, so an entry left by an earlier block is a wrong guess at worst.
//!
//! The block format: a run of sequences, each a token byte (literal count in the high four
//! bits, match length less four in the low four; 15 means more length bytes follow, each
//! adding its value, the last one below 255), the literals, a two-byte little-endian offset
//! back to the match, and the match length's extra bytes. The last sequence is literals only.
//! Decoders rely on two end rules: the last five bytes are literals, and no match starts in
//! the last twelve.

/// log2 of the hash table's entries.
const HASH_BITS: u32 = 12;
/// A match is at least this long (the format's minimum).
const MIN_MATCH: usize = 4;
/// The last bytes of a block are always literals.
const LAST_LITERALS: usize = 5;
/// No match starts within this many bytes of the end.
const MATCH_START_LIMIT: usize = 12;
/// The search steps one byte further after every `1 << SKIP_TRIGGER` misses in a row, so
/// that incompressible data costs little.
const SKIP_TRIGGER: u32 = 5;

/// Compresses blocks of up to 64 KiB into the LZ4 block format.
pub struct Lz4Encoder {
    /// Position of the last 4-byte sequence seen with each hash.
    table: Box<[u16; 1 << HASH_BITS]>,
}

impl Default for Lz4Encoder {
    fn default() -> Lz4Encoder {
        Lz4Encoder::new()
    }
}

impl Lz4Encoder {
    pub fn new() -> Lz4Encoder {
        Lz4Encoder {
            table: Box::new([0; 1 << HASH_BITS]),
        }
    }

    /// The largest output `compress` may need for `input_bytes` of input.
    pub const fn max_output_bytes(input_bytes: usize) -> usize {
        input_bytes + input_bytes / 255 + 16
    }

    /// Compresses `input` (at most 64 KiB) into `output`; the compressed length, or `None` if
    /// `output` is too small.
    pub fn compress(&mut self, input: &[u8], output: &mut [u8]) -> Option<usize> {
        assert!(input.len() <= 1 << 16, "positions fit the table's u16");
        let mut out = Output {
            bytes: output,
            len: 0,
        };
        let mut anchor = 0;
        if input.len() > MATCH_START_LIMIT {
            let last_start = input.len() - MATCH_START_LIMIT;
            let match_end_limit = input.len() - LAST_LITERALS;
            // Position 0 has nothing before it to match: it only enters the table.
            self.table[hash(read_u32(input, 0))] = 0;
            let mut pos = 1;
            let mut misses = 0u32;
            while pos <= last_start {
                let sequence = read_u32(input, pos);
                let slot = hash(sequence);
                // An entry at or past `pos` is left from an earlier block: probing the byte
                // before `pos` instead keeps the loop free of a branch on it (on incompressible
                // data stale and current entries alternate unpredictably, and the mispredicted
                // branch cost more than the probe). Any earlier position that holds the same
                // four bytes is a valid match, and every one is within the format's reach, as
                // the input is at most 64 KiB.
                let entry = usize::from(self.table[slot]);
                let candidate = std::hint::select_unpredictable(entry < pos, entry, pos - 1);
                self.table[slot] = pos as u16;
                if read_u32(input, candidate) != sequence {
                    pos += 1 + (misses >> SKIP_TRIGGER) as usize;
                    misses += 1;
                    continue;
                }
                misses = 0;
                let (mut start, mut from) = (pos, candidate);
                // Back over bytes the literals would otherwise carry.
                while start > anchor && from > 0 && input[start - 1] == input[from - 1] {
                    start -= 1;
                    from -= 1;
                }
                let end = match_end(input, pos + MIN_MATCH, start - from, match_end_limit);
                out.sequence(&input[anchor..start], start - from, end - start)?;
                // The positions the match covered are not hashed: speed over ratio, as LZ4's
                // fast mode does, but the one before the next search is.
                if end - 2 > pos && end - 2 <= last_start {
                    self.table[hash(read_u32(input, end - 2))] = (end - 2) as u16;
                }
                pos = end;
                anchor = end;
            }
        }
        out.last_literals(&input[anchor..])?;
        Some(out.len)
    }
}

/// Where a match that holds up to `end` stops, comparing `offset` bytes back, at most at
/// `limit`. Sixteen bytes at a time: long matches are what compressible blocks are made of.
fn match_end(input: &[u8], mut end: usize, offset: usize, limit: usize) -> usize {
    while end + 16 <= limit {
        let differ = read_u128(input, end) ^ read_u128(input, end - offset);
        if differ != 0 {
            return end + (differ.trailing_zeros() / 8) as usize;
        }
        end += 16;
    }
    while end < limit && input[end] == input[end - offset] {
        end += 1;
    }
    end
}

fn read_u128(bytes: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(bytes[at..at + 16].try_into().expect("sixteen bytes"))
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

fn hash(sequence: u32) -> usize {
    (sequence.wrapping_mul(2_654_435_761) >> (32 - HASH_BITS)) as usize
}

/// The output being written, failing (`None`) when it is full.
struct Output<'a> {
    bytes: &'a mut [u8],
    len: usize,
}

impl Output<'_> {
    fn push(&mut self, byte: u8) -> Option<()> {
        *self.bytes.get_mut(self.len)? = byte;
        self.len += 1;
        Some(())
    }

    fn extend(&mut self, bytes: &[u8]) -> Option<()> {
        self.bytes
            .get_mut(self.len..self.len + bytes.len())?
            .copy_from_slice(bytes);
        self.len += bytes.len();
        Some(())
    }

    /// The extra bytes of a length whose nibble said 15.
    fn length_extension(&mut self, mut rest: usize) -> Option<()> {
        while rest >= 255 {
            self.push(255)?;
            rest -= 255;
        }
        self.push(rest as u8)
    }

    fn sequence(&mut self, literals: &[u8], offset: usize, match_len: usize) -> Option<()> {
        debug_assert!(offset > 0 && offset <= usize::from(u16::MAX) && match_len >= MIN_MATCH);
        let literal_nibble = literals.len().min(15);
        let match_nibble = (match_len - MIN_MATCH).min(15);
        self.push(((literal_nibble << 4) | match_nibble) as u8)?;
        if literal_nibble == 15 {
            self.length_extension(literals.len() - 15)?;
        }
        self.extend(literals)?;
        self.extend(&(offset as u16).to_le_bytes())?;
        if match_nibble == 15 {
            self.length_extension(match_len - MIN_MATCH - 15)?;
        }
        Some(())
    }

    fn last_literals(&mut self, literals: &[u8]) -> Option<()> {
        let literal_nibble = literals.len().min(15);
        self.push((literal_nibble << 4) as u8)?;
        if literal_nibble == 15 {
            self.length_extension(literals.len() - 15)?;
        }
        self.extend(literals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Compresses with `encoder` and decodes with `lz4_flex` (the decoder of stored blocks,
    /// written independently of this encoder); returns the compressed length.
    fn round_trip(encoder: &mut Lz4Encoder, input: &[u8]) -> usize {
        let mut compressed = vec![0u8; Lz4Encoder::max_output_bytes(input.len())];
        let len = encoder
            .compress(input, &mut compressed)
            .expect("the bound holds");
        let mut decoded = vec![0xEEu8; input.len()];
        let decoded_len = lz4_flex::block::decompress_into(&compressed[..len], &mut decoded)
            .unwrap_or_else(|error| panic!("not valid LZ4 for {} bytes: {error}", input.len()));
        assert_eq!(decoded_len, input.len());
        assert!(decoded == input, "round trip changed the data");
        len
    }

    fn xorshift(state: &mut u64) -> u8 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state as u8
    }

    #[test]
    fn blocks_of_every_kind_round_trip() {
        let mut encoder = Lz4Encoder::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<u8> = (0..4096).map(|_| xorshift(&mut state)).collect();
        let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog; "
            .iter()
            .copied()
            .cycle()
            .take(4096)
            .collect();
        let half: Vec<u8> = (0..4096)
            .map(|i| if i < 2048 { 0 } else { random[i] })
            .collect();
        for (name, input, most) in [
            ("zeroes", vec![0u8; 4096], 64),
            ("text", text, 256),
            ("half zeroes", half, 2200),
            ("random", random.clone(), 4096 + 32),
        ] {
            let len = round_trip(&mut encoder, &input);
            assert!(len <= most, "{name}: {len} bytes");
        }
        // Short inputs and the edges of the end rules.
        for len in [0, 1, 4, 5, 11, 12, 13, 14, 16, 17, 20, 255, 270, 4095] {
            round_trip(&mut encoder, &vec![7u8; len]);
            round_trip(&mut encoder, &random[..len]);
        }
        // Literal and match lengths that need extra bytes (15, 15 + 255 and beyond).
        let mut long = random[..300].to_vec();
        long.extend(std::iter::repeat_n(3u8, 600));
        long.extend_from_slice(&random[..300]);
        round_trip(&mut encoder, &long);
    }

    #[test]
    fn a_table_left_by_other_blocks_is_only_a_hint() {
        let mut encoder = Lz4Encoder::new();
        let mut state = 1u64;
        for round in 0..200 {
            // Each block repeats pieces of itself at varying distances, so matches are
            // found; the table holds positions of the blocks before.
            let piece = 8 + round % 90;
            let block: Vec<u8> = (0..4096)
                .map(|i| {
                    if (i / piece) % 3 == 0 {
                        xorshift(&mut state)
                    } else {
                        (i % piece) as u8 ^ round as u8
                    }
                })
                .collect();
            round_trip(&mut encoder, &block);
        }
    }

    #[test]
    fn entries_past_a_shorter_block_left_by_a_longer_one_are_harmless() {
        let mut encoder = Lz4Encoder::new();
        let mut state = 11u64;
        for round in 0..50 {
            // A 64 KiB block fills the table with positions far past the short blocks after
            // it; each short one mixes runs (matches at small distances) with random bytes.
            let long: Vec<u8> = (0..1 << 16).map(|_| xorshift(&mut state) & 7).collect();
            round_trip(&mut encoder, &long);
            for len in [13, 64, 300, 4096] {
                let short: Vec<u8> = (0..len)
                    .map(|i| {
                        if (i / (5 + round)) % 2 == 0 {
                            0
                        } else {
                            xorshift(&mut state)
                        }
                    })
                    .collect();
                round_trip(&mut encoder, &short);
            }
        }
    }

    #[test]
    fn compresses_about_as_well_as_lz4_flex() {
        let mut encoder = Lz4Encoder::new();
        let mut state = 5u64;
        let mut ours = 0;
        let mut theirs = 0;
        for round in 0..100 {
            // Runs of repeated bytes between random ones: partly compressible.
            let block: Vec<u8> = (0..4096)
                .map(|i| {
                    if (i / (16 + round)) % 2 == 0 {
                        xorshift(&mut state)
                    } else {
                        round as u8
                    }
                })
                .collect();
            ours += round_trip(&mut encoder, &block);
            theirs += lz4_flex::block::compress(&block).len();
        }
        assert!(
            ours as f64 <= theirs as f64 * 1.05,
            "{ours} bytes against lz4_flex's {theirs}"
        );
    }

    proptest! {
        #[test]
        fn any_input_round_trips(
            pieces in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..64), 0usize..300, 1usize..200),
                0..40,
            )
        ) {
            // Literal pieces, each followed by a copy of earlier bytes (distance, length):
            // inputs with matches at many distances and lengths.
            let mut input: Vec<u8> = Vec::new();
            for (literals, distance, len) in pieces {
                input.extend_from_slice(&literals);
                if !input.is_empty() {
                    let from = input.len().saturating_sub(distance + 1);
                    for i in 0..len {
                        input.push(input[from + i % (input.len() - from)]);
                    }
                }
            }
            input.truncate(1 << 16);
            let mut encoder = Lz4Encoder::new();
            round_trip(&mut encoder, &input);
        }
    }
}
