//! The on-member format of the write journal: batches of entries, each batch checksummed as a
//! whole so a torn or stale batch is recognised and never replayed in part.
//!
//! A batch starts on a 4 KiB boundary of a member's journal area and is a multiple of 4 KiB:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TSJBATCH` |
//! | 8 | 4 | format version (1) |
//! | 12 | 4 | CRC32C of the whole batch with this field zeroed |
//! | 16 | 16 | group uuid |
//! | 32 | 8 | sequence number |
//! | 40 | 8 | retired below: every batch with a smaller sequence number is in place and durable |
//! | 48 | 4 | total bytes of the batch |
//! | 52 | 4 | entry count |
//! | 56 | 4 | descriptor bytes (from offset 64) |
//! | 60 | 4 | flags: bit 0 set on one piece of a batch split over parity members |
//! | 64 | .. | descriptors, then payload from the next 512-byte boundary |
//!
//! An entry descriptor is 16 bytes (kind: 1 redo, 2 intent, 3 partial parity, 4 supplied
//! intent, 5 parity piece; three zero bytes; write count u32; stripe u64) followed by 16 bytes per write
//! (column: data index, or 0x80 | parity index; three zero bytes; length u32; offset within the
//! chunk u64). Redo, partial parity and supplied intent payloads follow in descriptor order,
//! each a whole number of sectors. A partial parity entry's first write names the data column
//! the update wrote; its payload is P of the stripe's other data columns over that range. On
//! RAID6 a second write names Q (parity index 1) over the same range, its payload Q of those
//! other columns. A supplied intent's writes name only data columns: the columns of a
//! full-stripe write that had no member, with their new contents.
//!
//! A *piece* (flag bit 0) is the part of a batch that one member holds when the batch is
//! split over the parity members of its stripes: every piece of a batch has the batch's
//! sequence number, and holds the intents of the stripes whose parity is on its member and
//! their partial parity entries, on RAID6 as *parity piece* entries: two writes over the same
//! range, the data column the update wrote (no payload) and the parity column this member
//! holds (its partial parity as payload). Replay reads every piece of a batch and joins them.

use crate::geometry::Column;
use crate::superblock::Uuid;
use tessera_parity::checksum;

pub const BATCH_MAGIC: [u8; 8] = *b"TSJBATCH";
pub const BATCH_VERSION: u32 = 1;
/// Batches start and end on this boundary.
pub const BATCH_ALIGN_BYTES: u64 = 4096;
/// Bytes of the fixed batch header.
pub const HEADER_BYTES: usize = 64;
const PAYLOAD_ALIGN_BYTES: usize = 512;
const DESCRIPTOR_BYTES: usize = 16;
const WRITE_BYTES: usize = 16;
const KIND_REDO: u8 = 1;
const KIND_INTENT: u8 = 2;
const KIND_PARTIAL_PARITY: u8 = 3;
const KIND_SUPPLIED_INTENT: u8 = 4;
const KIND_PARITY_PIECE: u8 = 5;
const FLAG_PIECE: u32 = 1;
const PARITY_FLAG: u8 = 0x80;

/// What replaying an entry does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// The new contents of every block the update writes (data and parity): replay writes them
    /// again.
    Redo,
    /// A full-stripe write, recorded by stripe only: replay recomputes the stripe's parity from
    /// its data.
    Intent,
    /// An update of one data column: the payload is the parity of the stripe's other data
    /// columns over the written range (P, and on RAID6 also Q as a second write naming Q), so
    /// replay sets parity to it plus that column as it is on its member, whichever sectors of
    /// the update reached it.
    PartialParity,
    /// A full-stripe write on a stripe some of whose data columns have no member: the writes
    /// name those columns and carry their new contents, so replay recomputes parity from the
    /// other data columns as they are on their members and these contents (the missing
    /// columns live only in parity, which a torn write leaves useless).
    SuppliedIntent,
    /// One parity's share of a RAID6 partial parity entry, in a batch piece on that parity's
    /// member: the first write names the data column the update wrote and carries nothing;
    /// the second names the parity column, its payload that parity of the stripe's other data
    /// columns over the same range.
    ParityPiece,
}

impl EntryKind {
    /// Whether the entry's writes carry payload bytes.
    pub fn has_payload(self) -> bool {
        self != EntryKind::Intent
    }

    /// Whether write `write_index` of an entry of this kind carries payload bytes.
    pub fn write_has_payload(self, write_index: usize) -> bool {
        match self {
            EntryKind::Intent => false,
            EntryKind::ParityPiece => write_index == 1,
            _ => true,
        }
    }

    /// Whether the entry records a full-stripe write (replay recomputes the stripe's parity).
    pub fn is_intent(self) -> bool {
        matches!(self, EntryKind::Intent | EntryKind::SuppliedIntent)
    }
}

/// One block write of a redo entry: `len_bytes` at `within_bytes` of `column` of the stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteDescriptor {
    pub column: Column,
    pub within_bytes: u64,
    pub len_bytes: u64,
}

/// One entry: a stripe update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryDescriptor {
    pub kind: EntryKind,
    pub stripe: u64,
    pub writes: EntryWrites,
}

/// An entry's writes: inline up to three (data, P and Q of a redo entry on RAID6), so that
/// journaling a small update allocates nothing for them.
pub type EntryWrites = smallvec::SmallVec<[WriteDescriptor; 3]>;

/// The fixed fields of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub group_uuid: Uuid,
    pub sequence: u64,
    pub retired_below: u64,
    pub total_bytes: u64,
    pub entry_count: u32,
    pub descriptor_bytes: u32,
    /// One piece of a batch split over parity members (see the module documentation).
    pub piece: bool,
}

/// A checked batch: its header, entries, and where each write's payload starts in the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub header: BatchHeader,
    pub entries: Vec<EntryDescriptor>,
    /// Per entry, per write that carries payload (all but an intent's, and a parity piece's
    /// second only): the payload's byte offset in the batch.
    pub payload_offsets: Vec<Vec<u64>>,
}

/// Why bytes are not a usable batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchError {
    /// No batch starts here (no magic, another group, another version).
    NotABatch,
    /// A header names more bytes than are available: read more and try again.
    NeedBytes(u64),
    /// The checksum does not match: a torn or overwritten batch.
    Checksum,
    /// The checksum matches but the contents are inconsistent.
    Malformed(&'static str),
}

/// A parity piece's writes: one data column, then one parity column over the same range.
fn parity_piece_shape(writes: &[WriteDescriptor]) -> bool {
    match writes {
        [data, parity] => {
            matches!(data.column, Column::Data(_))
                && matches!(parity.column, Column::Parity(_))
                && parity.within_bytes == data.within_bytes
                && parity.len_bytes == data.len_bytes
        }
        _ => false,
    }
}

/// A partial parity entry's writes: one data column, then on RAID6 Q over the same range.
fn partial_parity_shape(writes: &[WriteDescriptor]) -> bool {
    match writes {
        [data] => matches!(data.column, Column::Data(_)),
        [data, q] => {
            matches!(data.column, Column::Data(_))
                && q.column == Column::Parity(1)
                && q.within_bytes == data.within_bytes
                && q.len_bytes == data.len_bytes
        }
        _ => false,
    }
}

fn column_code(column: Column) -> u8 {
    match column {
        Column::Data(index) => u8::try_from(index).expect("data index fits below 0x80"),
        Column::Parity(which) => PARITY_FLAG | u8::try_from(which).expect("parity index"),
    }
}

fn column_from_code(code: u8) -> Column {
    if code & PARITY_FLAG != 0 {
        Column::Parity(usize::from(code & !PARITY_FLAG))
    } else {
        Column::Data(usize::from(code))
    }
}

/// Bytes of the descriptor area for `entries`.
pub fn descriptor_bytes(entries: &[EntryDescriptor]) -> usize {
    entries
        .iter()
        .map(|entry| DESCRIPTOR_BYTES + entry.writes.len() * WRITE_BYTES)
        .sum()
}

/// Where the payload starts for a descriptor area of `descriptor_bytes`.
fn payload_start(descriptor_bytes: usize) -> usize {
    (HEADER_BYTES + descriptor_bytes).div_ceil(PAYLOAD_ALIGN_BYTES) * PAYLOAD_ALIGN_BYTES
}

/// Total bytes of a batch holding `entries`.
pub fn batch_bytes(entries: &[EntryDescriptor]) -> u64 {
    let payload: u64 = entries.iter().map(payload_bytes).sum();
    (payload_start(descriptor_bytes(entries)) as u64 + payload).div_ceil(BATCH_ALIGN_BYTES)
        * BATCH_ALIGN_BYTES
}

/// Payload bytes of `entry`.
fn payload_bytes(entry: &EntryDescriptor) -> u64 {
    entry
        .writes
        .iter()
        .enumerate()
        .filter(|&(index, _)| entry.kind.write_has_payload(index))
        .map(|(_, write)| write.len_bytes)
        .sum()
}

/// Bytes of a batch holding one entry of `writes` writes carrying `payload_bytes` in all.
pub fn single_entry_batch_bytes(writes: usize, payload_bytes: u64) -> u64 {
    (payload_start(DESCRIPTOR_BYTES + writes * WRITE_BYTES) as u64 + payload_bytes)
        .div_ceil(BATCH_ALIGN_BYTES)
        * BATCH_ALIGN_BYTES
}

/// Bytes a batch with one more entry would take, given the current descriptor and payload
/// totals (for deciding when to seal a batch).
pub fn entry_cost_bytes(entry: &EntryDescriptor) -> u64 {
    (DESCRIPTOR_BYTES + entry.writes.len() * WRITE_BYTES) as u64 + payload_bytes(entry)
}

/// Where each payload of a batch holding `entries` lies: `each(entry, write, offset, len)`
/// in descriptor order, with `write` counted among the entry's writes that carry payload (as
/// in `Batch::payload_offsets`) and `offset` from the start of the batch.
pub fn for_each_payload(
    entries: &[EntryDescriptor],
    mut each: impl FnMut(usize, usize, usize, usize),
) {
    let mut at = payload_start(descriptor_bytes(entries));
    for (entry_index, entry) in entries.iter().enumerate() {
        let mut payload_index = 0;
        for (write_index, write) in entry.writes.iter().enumerate() {
            if entry.kind.write_has_payload(write_index) {
                let len = write.len_bytes as usize;
                each(entry_index, payload_index, at, len);
                payload_index += 1;
                at += len;
            }
        }
    }
}

/// Writes a batch (or with `piece`, one piece of one) into `out` (exactly
/// `batch_bytes(entries)` long). `payload` yields, in descriptor order, the bytes of each
/// write that carries some; it is called once per such write with the entry's index, the
/// write's index among the entry's writes that carry payload (as in `Batch::payload_offsets`)
/// and the slice of `out` to fill.
pub fn encode_batch(
    out: &mut [u8],
    group_uuid: Uuid,
    sequence: u64,
    retired_below: u64,
    piece: bool,
    entries: &[EntryDescriptor],
    mut payload: impl FnMut(usize, usize, &mut [u8]),
) {
    let total = batch_bytes(entries);
    assert_eq!(out.len() as u64, total, "batch buffer size");
    let descriptors = descriptor_bytes(entries);
    // Payloads are written whole below, so only the rest is cleared (zeroing the whole batch
    // first cost as much as copying the payloads).
    let payload_begin = payload_start(descriptors);
    let payload_end = payload_begin + entries.iter().map(payload_bytes).sum::<u64>() as usize;
    out[..payload_begin].fill(0);
    out[payload_end..].fill(0);
    out[0..8].copy_from_slice(&BATCH_MAGIC);
    out[8..12].copy_from_slice(&BATCH_VERSION.to_le_bytes());
    out[16..32].copy_from_slice(&group_uuid.0);
    out[32..40].copy_from_slice(&sequence.to_le_bytes());
    out[40..48].copy_from_slice(&retired_below.to_le_bytes());
    out[48..52].copy_from_slice(&u32::try_from(total).expect("batch fits u32").to_le_bytes());
    out[52..56].copy_from_slice(
        &u32::try_from(entries.len())
            .expect("entries fit u32")
            .to_le_bytes(),
    );
    out[56..60].copy_from_slice(
        &u32::try_from(descriptors)
            .expect("descriptors fit u32")
            .to_le_bytes(),
    );
    out[60..64].copy_from_slice(&(if piece { FLAG_PIECE } else { 0 }).to_le_bytes());
    let mut at = HEADER_BYTES;
    for entry in entries {
        out[at] = match entry.kind {
            EntryKind::Redo => KIND_REDO,
            EntryKind::Intent => KIND_INTENT,
            EntryKind::PartialParity => KIND_PARTIAL_PARITY,
            EntryKind::SuppliedIntent => KIND_SUPPLIED_INTENT,
            EntryKind::ParityPiece => KIND_PARITY_PIECE,
        };
        out[at + 4..at + 8].copy_from_slice(
            &u32::try_from(entry.writes.len())
                .expect("writes fit u32")
                .to_le_bytes(),
        );
        out[at + 8..at + 16].copy_from_slice(&entry.stripe.to_le_bytes());
        at += DESCRIPTOR_BYTES;
        for write in &entry.writes {
            assert_eq!(
                write.len_bytes % PAYLOAD_ALIGN_BYTES as u64,
                0,
                "whole sectors"
            );
            out[at] = column_code(write.column);
            out[at + 4..at + 8].copy_from_slice(
                &u32::try_from(write.len_bytes)
                    .expect("write fits u32")
                    .to_le_bytes(),
            );
            out[at + 8..at + 16].copy_from_slice(&write.within_bytes.to_le_bytes());
            at += WRITE_BYTES;
        }
    }
    for_each_payload(entries, |entry, write, at, len| {
        payload(entry, write, &mut out[at..at + len]);
    });
    let crc = checksum::crc32c(out);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Reads the fixed header at the start of `bytes`, if a batch of this group starts there.
pub fn decode_header(bytes: &[u8], group_uuid: Uuid) -> Result<BatchHeader, BatchError> {
    if bytes.len() < HEADER_BYTES || bytes[0..8] != BATCH_MAGIC {
        return Err(BatchError::NotABatch);
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if u32_at(8) != BATCH_VERSION || bytes[16..32] != group_uuid.0 {
        return Err(BatchError::NotABatch);
    }
    let total_bytes = u64::from(u32_at(48));
    if total_bytes == 0 || !total_bytes.is_multiple_of(BATCH_ALIGN_BYTES) {
        return Err(BatchError::NotABatch);
    }
    Ok(BatchHeader {
        group_uuid,
        sequence: u64_at(32),
        retired_below: u64_at(40),
        total_bytes,
        entry_count: u32_at(52),
        descriptor_bytes: u32_at(56),
        piece: u32_at(60) & FLAG_PIECE != 0,
    })
}

/// Checks and decodes a whole batch at the start of `bytes`.
pub fn decode_batch(bytes: &[u8], group_uuid: Uuid) -> Result<Batch, BatchError> {
    let header = decode_header(bytes, group_uuid)?;
    let total = header.total_bytes as usize;
    if bytes.len() < total {
        return Err(BatchError::NeedBytes(header.total_bytes));
    }
    let image = &bytes[..total];
    let stored = u32::from_le_bytes(image[12..16].try_into().expect("4 bytes"));
    let mut crc = checksum::Crc32c::new();
    crc.update(&image[..12]);
    crc.update(&[0; 4]);
    crc.update(&image[16..]);
    if crc.finish() != stored {
        return Err(BatchError::Checksum);
    }
    let descriptors = header.descriptor_bytes as usize;
    if HEADER_BYTES + descriptors > total {
        return Err(BatchError::Malformed("descriptor area beyond the batch"));
    }
    let mut entries = Vec::new();
    let mut payload_offsets = Vec::new();
    let mut at = HEADER_BYTES;
    let end = HEADER_BYTES + descriptors;
    let mut payload_at = payload_start(descriptors) as u64;
    for _ in 0..header.entry_count {
        if at + DESCRIPTOR_BYTES > end {
            return Err(BatchError::Malformed("entry beyond the descriptor area"));
        }
        let kind = match image[at] {
            KIND_REDO => EntryKind::Redo,
            KIND_INTENT => EntryKind::Intent,
            KIND_PARTIAL_PARITY => EntryKind::PartialParity,
            KIND_SUPPLIED_INTENT => EntryKind::SuppliedIntent,
            KIND_PARITY_PIECE => EntryKind::ParityPiece,
            _ => return Err(BatchError::Malformed("entry kind")),
        };
        let writes = u32::from_le_bytes(image[at + 4..at + 8].try_into().expect("4 bytes"));
        let stripe = u64::from_le_bytes(image[at + 8..at + 16].try_into().expect("8 bytes"));
        at += DESCRIPTOR_BYTES;
        let mut entry = EntryDescriptor {
            kind,
            stripe,
            writes: EntryWrites::new(),
        };
        let mut offsets = Vec::new();
        for write_index in 0..writes as usize {
            if at + WRITE_BYTES > end {
                return Err(BatchError::Malformed("write beyond the descriptor area"));
            }
            let len_bytes = u64::from(u32::from_le_bytes(
                image[at + 4..at + 8].try_into().expect("4"),
            ));
            let within_bytes =
                u64::from_le_bytes(image[at + 8..at + 16].try_into().expect("8 bytes"));
            let sector = PAYLOAD_ALIGN_BYTES as u64;
            if !len_bytes.is_multiple_of(sector) || !within_bytes.is_multiple_of(sector) {
                // Replay writes these ranges to members in place, sector by sector.
                return Err(BatchError::Malformed("write not in whole sectors"));
            }
            entry.writes.push(WriteDescriptor {
                column: column_from_code(image[at]),
                within_bytes,
                len_bytes,
            });
            at += WRITE_BYTES;
            if kind.write_has_payload(write_index) {
                offsets.push(payload_at);
                payload_at += len_bytes;
            }
        }
        if kind == EntryKind::PartialParity && !partial_parity_shape(&entry.writes) {
            return Err(BatchError::Malformed(
                "partial parity names one data column, then optionally Q over its range",
            ));
        }
        if kind == EntryKind::ParityPiece && !parity_piece_shape(&entry.writes) {
            return Err(BatchError::Malformed(
                "a parity piece names one data column, then one parity column over its range",
            ));
        }
        if kind == EntryKind::ParityPiece && !header.piece {
            return Err(BatchError::Malformed(
                "a parity piece outside a batch piece",
            ));
        }
        if kind == EntryKind::SuppliedIntent
            && (entry.writes.is_empty()
                || entry
                    .writes
                    .iter()
                    .any(|write| !matches!(write.column, Column::Data(_))))
        {
            return Err(BatchError::Malformed(
                "a supplied intent names data columns",
            ));
        }
        entries.push(entry);
        payload_offsets.push(offsets);
    }
    if payload_at > total as u64 {
        return Err(BatchError::Malformed("payload beyond the batch"));
    }
    Ok(Batch {
        header,
        entries,
        payload_offsets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuid(byte: u8) -> Uuid {
        Uuid([byte; 16])
    }

    fn sample() -> Vec<EntryDescriptor> {
        vec![
            EntryDescriptor {
                kind: EntryKind::Redo,
                stripe: 7,
                writes: vec![
                    WriteDescriptor {
                        column: Column::Data(2),
                        within_bytes: 4096,
                        len_bytes: 1024,
                    },
                    WriteDescriptor {
                        column: Column::Parity(1),
                        within_bytes: 4096,
                        len_bytes: 1024,
                    },
                ]
                .into(),
            },
            EntryDescriptor {
                kind: EntryKind::Intent,
                stripe: 9,
                writes: EntryWrites::new(),
            },
            EntryDescriptor {
                kind: EntryKind::PartialParity,
                stripe: 11,
                writes: vec![WriteDescriptor {
                    column: Column::Data(1),
                    within_bytes: 512,
                    len_bytes: 512,
                }]
                .into(),
            },
        ]
    }

    fn encode_piece_over(entries: &[EntryDescriptor], piece: bool, fill: u8) -> Vec<u8> {
        let mut out = vec![fill; batch_bytes(entries) as usize];
        encode_batch(
            &mut out,
            uuid(3),
            42,
            40,
            piece,
            entries,
            |entry, write, bytes| bytes.fill((entry * 16 + write + 1) as u8),
        );
        out
    }

    fn encode_over(entries: &[EntryDescriptor], fill: u8) -> Vec<u8> {
        encode_piece_over(entries, false, fill)
    }

    fn encode(entries: &[EntryDescriptor]) -> Vec<u8> {
        encode_over(entries, 0)
    }

    #[test]
    fn a_parity_piece_carries_only_its_parity_and_lives_in_a_piece() {
        let write = |column| WriteDescriptor {
            column,
            within_bytes: 1024,
            len_bytes: 1024,
        };
        let piece = |parity| EntryDescriptor {
            kind: EntryKind::ParityPiece,
            stripe: 5,
            writes: vec![write(Column::Data(1)), write(Column::Parity(parity))].into(),
        };
        let entries = vec![
            piece(1),
            EntryDescriptor {
                kind: EntryKind::Intent,
                stripe: 6,
                writes: EntryWrites::new(),
            },
            piece(0),
        ];
        // Header, descriptors (16 + 32, 16, 16 + 32) and two 1 KiB payloads, not four.
        let image = encode_piece_over(&entries, true, 0x5a);
        assert_eq!(image.len() as u64, BATCH_ALIGN_BYTES);
        let batch = decode_batch(&image, uuid(3)).unwrap();
        assert!(batch.header.piece);
        assert_eq!(batch.entries, entries);
        let start = payload_start(descriptor_bytes(&entries)) as u64;
        assert_eq!(
            batch.payload_offsets,
            vec![vec![start], vec![], vec![start + 1024]]
        );
        // Each piece's one payload is its second write's.
        let at = |offset: u64| image[offset as usize];
        assert_eq!((at(start), at(start + 1024)), (1, 33));
        assert!(!decode_batch(&encode(&[]), uuid(3)).unwrap().header.piece);
        // Outside a piece, or in any other shape, a parity piece is refused.
        assert_eq!(
            decode_batch(&encode(&entries), uuid(3)),
            Err(BatchError::Malformed(
                "a parity piece outside a batch piece"
            ))
        );
        for writes in [
            vec![write(Column::Data(1))],
            vec![write(Column::Parity(0)), write(Column::Data(1))],
            vec![write(Column::Data(1)), write(Column::Data(2))],
            vec![
                write(Column::Data(1)),
                WriteDescriptor {
                    column: Column::Parity(0),
                    within_bytes: 0,
                    len_bytes: 1024,
                },
            ],
        ] {
            let bad = [EntryDescriptor {
                kind: EntryKind::ParityPiece,
                stripe: 5,
                writes: writes.into(),
            }];
            assert!(matches!(
                decode_batch(&encode_piece_over(&bad, true, 0), uuid(3)),
                Err(BatchError::Malformed(_))
            ));
        }
    }

    #[test]
    fn encoding_does_not_depend_on_what_the_buffer_held() {
        let entries = sample();
        assert_eq!(encode_over(&entries, 0), encode_over(&entries, 0xa5));
        let image = encode_over(&entries, 0xa5);
        let batch = decode_batch(&image, uuid(3)).unwrap();
        let end = batch.payload_offsets[2][0] as usize + 512;
        assert!(image[end..].iter().all(|&b| b == 0), "padding is zero");
    }

    #[test]
    fn a_partial_parity_entry_names_one_data_column_then_optionally_q_over_its_range() {
        let write = |column, within_bytes| WriteDescriptor {
            column,
            within_bytes,
            len_bytes: 512,
        };
        let entry = |writes: Vec<WriteDescriptor>| {
            vec![EntryDescriptor {
                kind: EntryKind::PartialParity,
                stripe: 3,
                writes: writes.into(),
            }]
        };
        for writes in [
            vec![write(Column::Data(0), 0)],
            vec![write(Column::Data(2), 1024), write(Column::Parity(1), 1024)],
        ] {
            let entries = entry(writes);
            let batch = decode_batch(&encode(&entries), uuid(3)).unwrap();
            assert_eq!(batch.entries, entries);
        }
        for writes in [
            vec![],
            vec![write(Column::Parity(0), 0)],
            vec![write(Column::Data(0), 0); 2],
            vec![write(Column::Data(0), 0), write(Column::Parity(0), 0)],
            vec![write(Column::Data(0), 0), write(Column::Parity(1), 512)],
            vec![write(Column::Parity(1), 0), write(Column::Data(0), 0)],
            vec![
                write(Column::Data(0), 0),
                write(Column::Parity(1), 0),
                write(Column::Parity(1), 0),
            ],
        ] {
            assert!(matches!(
                decode_batch(&encode(&entry(writes)), uuid(3)),
                Err(BatchError::Malformed(_))
            ));
        }
    }

    #[test]
    fn a_supplied_intent_carries_data_columns_only() {
        let supplied = |column| {
            vec![EntryDescriptor {
                kind: EntryKind::SuppliedIntent,
                stripe: 5,
                writes: vec![WriteDescriptor {
                    column,
                    within_bytes: 0,
                    len_bytes: 1024,
                }]
                .into(),
            }]
        };
        let entries = supplied(Column::Data(3));
        let image = encode(&entries);
        let batch = decode_batch(&image, uuid(3)).unwrap();
        assert_eq!(batch.entries, entries);
        assert_eq!(image[HEADER_BYTES], 4, "kind 4 on disk");
        let payload = batch.payload_offsets[0][0] as usize;
        assert!(image[payload..payload + 1024].iter().all(|&b| b == 1));
        assert!(matches!(
            decode_batch(&encode(&supplied(Column::Parity(0))), uuid(3)),
            Err(BatchError::Malformed(_))
        ));
    }

    #[test]
    fn round_trip_keeps_entries_and_payloads() {
        let entries = sample();
        let image = encode(&entries);
        assert_eq!(image.len(), 4096);
        let batch = decode_batch(&image, uuid(3)).unwrap();
        assert_eq!(batch.header.sequence, 42);
        assert_eq!(batch.header.retired_below, 40);
        assert_eq!(batch.entries, entries);
        assert_eq!(batch.payload_offsets[1], Vec::<u64>::new());
        let first = batch.payload_offsets[0][0] as usize;
        let second = batch.payload_offsets[0][1] as usize;
        assert!(image[first..first + 1024].iter().all(|&b| b == 1));
        assert!(image[second..second + 1024].iter().all(|&b| b == 2));
        assert_eq!(first % 512, 0);
        let partial = batch.payload_offsets[2][0] as usize;
        assert_eq!(partial, second + 1024);
        assert!(image[partial..partial + 512].iter().all(|&b| b == 33));
    }

    #[test]
    fn payload_places_are_where_decoding_finds_them() {
        // The engine computes partial parity shares into these places before encoding.
        let check = |entries: &[EntryDescriptor], piece: bool| {
            let image = encode_piece_over(entries, piece, 0);
            let batch = decode_batch(&image, uuid(3)).unwrap();
            let mut places = vec![Vec::new(); entries.len()];
            for_each_payload(entries, |entry, write, at, len| {
                assert_eq!(write, places[entry].len());
                let payload_lens = entries[entry]
                    .writes
                    .iter()
                    .enumerate()
                    .filter(|&(index, _)| entries[entry].kind.write_has_payload(index))
                    .map(|(_, write)| write.len_bytes);
                assert_eq!(Some(len as u64), payload_lens.clone().nth(write));
                places[entry].push(at as u64);
            });
            assert_eq!(places, batch.payload_offsets);
        };
        check(&sample(), false);
        let data = WriteDescriptor {
            column: Column::Data(0),
            within_bytes: 0,
            len_bytes: 1536,
        };
        let piece = [
            EntryDescriptor {
                kind: EntryKind::Intent,
                stripe: 9,
                writes: EntryWrites::new(),
            },
            EntryDescriptor {
                kind: EntryKind::ParityPiece,
                stripe: 13,
                writes: vec![
                    data,
                    WriteDescriptor {
                        column: Column::Parity(1),
                        ..data
                    },
                ]
                .into(),
            },
        ];
        check(&piece, true);
    }

    #[test]
    fn any_flipped_bit_is_caught() {
        let image = encode(&sample());
        for at in [0usize, 13, 20, 33, 41, 70, 600, 4000] {
            let mut damaged = image.clone();
            damaged[at] ^= 0x10;
            let result = decode_batch(&damaged, uuid(3));
            assert!(
                matches!(result, Err(BatchError::Checksum | BatchError::NotABatch)),
                "flip at {at}: {result:?}"
            );
        }
    }

    #[test]
    fn torn_batches_and_other_groups_are_refused() {
        let entries = vec![EntryDescriptor {
            kind: EntryKind::Redo,
            stripe: 1,
            writes: vec![WriteDescriptor {
                column: Column::Data(0),
                within_bytes: 0,
                len_bytes: 8192,
            }]
            .into(),
        }];
        let image = encode(&entries);
        assert_eq!(image.len(), 12288);
        assert_eq!(
            decode_batch(&image[..4096], uuid(3)),
            Err(BatchError::NeedBytes(12288))
        );
        let mut torn = image.clone();
        torn[8192..].fill(0);
        assert_eq!(decode_batch(&torn, uuid(3)), Err(BatchError::Checksum));
        assert_eq!(decode_batch(&image, uuid(4)), Err(BatchError::NotABatch));
        assert_eq!(
            decode_batch(&[0u8; 4096], uuid(3)),
            Err(BatchError::NotABatch)
        );
    }
}
