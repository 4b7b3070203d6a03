//! The on-disk format of a thin drive: records (a header with entries, then the stored blocks
//! packed from the record's end backwards) and checkpoint headers. All integers little-endian.
//! Decoding returns `None` for anything that does not check out: it reads what a drive holds.

use crate::codec::Codec;
use tessera_parity::checksum;

pub const RECORD_MAGIC: [u8; 8] = *b"TSTHINR2";
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"TSTHINC2";
/// The checkpoint magic of format 1, whose records had no start-up session: such a drive is
/// refused, never formatted over nor replayed with format 2's rules.
pub const CHECKPOINT_MAGIC_V1: [u8; 8] = *b"TSTHINC1";
pub const RECORD_HEADER_BYTES: usize = 80;
pub const ENTRY_BYTES: usize = 20;
/// Stored blocks start at multiples of this within a record.
pub const PAYLOAD_ALIGN: u64 = 16;
/// `next_segment` when none was claimed.
pub const NO_SEGMENT: u32 = u32::MAX;

/// Where a block's stored bytes are, and how to check and expand them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// Offset in the extent; a multiple of `PAYLOAD_ALIGN`.
    pub address_bytes: u64,
    pub stored_len: u32,
    pub codec: Codec,
    pub checksum: u32,
}

impl Location {
    /// Packs into 12 bytes (a checkpoint entry; the map keeps the 91 bits that matter):
    /// address / 16 in 44 bits, length in 13, codec in 2, then the checksum.
    pub fn pack(&self) -> [u32; 3] {
        assert!(self.address_bytes.is_multiple_of(PAYLOAD_ALIGN));
        let units = self.address_bytes / PAYLOAD_ALIGN;
        assert!(units < 1 << 44 && self.stored_len > 0 && self.stored_len < 1 << 13);
        let word = units | (u64::from(self.stored_len) << 44) | ((self.codec as u64) << 57);
        [word as u32, (word >> 32) as u32, self.checksum]
    }

    /// The inverse of `pack`; `None` for an empty slot or a bad codec.
    pub fn unpack(slot: [u32; 3]) -> Option<Location> {
        let word = u64::from(slot[0]) | (u64::from(slot[1]) << 32);
        let stored_len = ((word >> 44) & 0x1fff) as u32;
        if stored_len == 0 {
            return None;
        }
        Some(Location {
            address_bytes: (word & ((1 << 44) - 1)) * PAYLOAD_ALIGN,
            stored_len,
            codec: Codec::from_code(((word >> 57) & 3) as u8)?,
            checksum: slot[2],
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    Data = 1,
    Checkpoint = 2,
}

/// One entry of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Block `lba` is stored in this record at `offset_in_record`.
    Block {
        lba: u64,
        offset_in_record: u32,
        stored_len: u16,
        codec: Codec,
        checksum: u32,
    },
    /// Blocks `lba .. lba + count` read as zeroes from here on.
    Hole { lba: u64, count: u32 },
    /// (Checkpoint records) block `lba` is at `location`.
    Mapped { lba: u64, location: Location },
}

const ENTRY_BLOCK: u8 = 1;
const ENTRY_HOLE: u8 = 2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub store_id: u64,
    pub seq: u64,
    /// The sequence number of the record before this one in the log.
    pub prev_seq: u64,
    /// For checkpoint records, which checkpoint; 0 for data records.
    pub checkpoint_id: u64,
    /// The segment the log continues in when this record's segment is full.
    pub next_segment: u32,
    pub kind: RecordKind,
    pub record_bytes: u32,
    /// Every record up to this sequence number was durable (flushed) when this one was
    /// sealed: recovery tells a torn tail from corruption by it.
    pub durable_seq: u64,
    /// Names the start-up of the store that wrote the record (drawn at random by whoever
    /// starts it). A crashed start-up's records can share sequence numbers with the next
    /// one's, which restarts from the same last durable record; the log's chain only passes
    /// from one start-up to another at a record marked `first_of_session`.
    pub session: u64,
    /// The first record written after a start-up.
    pub first_of_session: bool,
    pub entries: Vec<Entry>,
}

fn le64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn le32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn le16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"))
}

impl RecordHeader {
    pub fn encoded_len(entries: usize) -> usize {
        RECORD_HEADER_BYTES + entries * ENTRY_BYTES
    }

    /// Writes the header and entries at the start of `record`.
    pub fn encode(&self, record: &mut [u8]) {
        let len = Self::encoded_len(self.entries.len());
        assert!(len <= record.len());
        let out = &mut record[..len];
        out.fill(0);
        out[0..8].copy_from_slice(&RECORD_MAGIC);
        out[8..16].copy_from_slice(&self.store_id.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.prev_seq.to_le_bytes());
        out[32..40].copy_from_slice(&self.checkpoint_id.to_le_bytes());
        out[40..44].copy_from_slice(&self.next_segment.to_le_bytes());
        out[44..48].copy_from_slice(&(self.entries.len() as u32).to_le_bytes());
        out[48] = self.kind as u8;
        out[49] = u8::from(self.first_of_session);
        out[52..56].copy_from_slice(&self.record_bytes.to_le_bytes());
        out[64..72].copy_from_slice(&self.durable_seq.to_le_bytes());
        out[72..80].copy_from_slice(&self.session.to_le_bytes());
        for (i, entry) in self.entries.iter().enumerate() {
            let at = RECORD_HEADER_BYTES + i * ENTRY_BYTES;
            let e = &mut out[at..at + ENTRY_BYTES];
            match *entry {
                Entry::Block {
                    lba,
                    offset_in_record,
                    stored_len,
                    codec,
                    checksum,
                } => {
                    e[0..8].copy_from_slice(&lba.to_le_bytes());
                    e[8..12].copy_from_slice(&offset_in_record.to_le_bytes());
                    e[12..14].copy_from_slice(&stored_len.to_le_bytes());
                    e[14] = codec as u8;
                    e[15] = ENTRY_BLOCK;
                    e[16..20].copy_from_slice(&checksum.to_le_bytes());
                }
                Entry::Hole { lba, count } => {
                    e[0..8].copy_from_slice(&lba.to_le_bytes());
                    e[8..12].copy_from_slice(&count.to_le_bytes());
                    e[15] = ENTRY_HOLE;
                }
                Entry::Mapped { lba, location } => {
                    e[0..8].copy_from_slice(&lba.to_le_bytes());
                    let slot = location.pack();
                    e[8..12].copy_from_slice(&slot[0].to_le_bytes());
                    e[12..16].copy_from_slice(&slot[1].to_le_bytes());
                    e[16..20].copy_from_slice(&slot[2].to_le_bytes());
                }
            }
        }
        let crc = checksum::crc32c(out);
        out[56..60].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decodes a record's header; `None` unless it is a well-formed record of `store_id` whose
    /// size is `record_bytes`.
    pub fn decode(record: &[u8], store_id: u64) -> Option<RecordHeader> {
        if record.len() < RECORD_HEADER_BYTES || record[0..8] != RECORD_MAGIC {
            return None;
        }
        if le64(record, 8) != store_id || le32(record, 52) as usize != record.len() {
            return None;
        }
        let count = le32(record, 44) as usize;
        let len = count
            .checked_mul(ENTRY_BYTES)?
            .checked_add(RECORD_HEADER_BYTES)?;
        if len > record.len() {
            return None;
        }
        let mut copy = record[..len].to_vec();
        let stored_crc = le32(&copy, 56);
        copy[56..60].fill(0);
        if checksum::crc32c(&copy) != stored_crc {
            return None;
        }
        let kind = match record[48] {
            1 => RecordKind::Data,
            2 => RecordKind::Checkpoint,
            _ => return None,
        };
        let first_of_session = match record[49] {
            0 => false,
            1 => true,
            _ => return None,
        };
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let e = &record[RECORD_HEADER_BYTES + i * ENTRY_BYTES..][..ENTRY_BYTES];
            let lba = le64(e, 0);
            let entry = match kind {
                RecordKind::Checkpoint => Entry::Mapped {
                    lba,
                    location: Location::unpack([le32(e, 8), le32(e, 12), le32(e, 16)])?,
                },
                RecordKind::Data => match e[15] {
                    ENTRY_BLOCK => {
                        let offset_in_record = le32(e, 8);
                        let stored_len = le16(e, 12);
                        let end = u64::from(offset_in_record) + u64::from(stored_len);
                        // A block is stored raw at worst, at an aligned offset: no store
                        // wrote anything else (nor does the map's slot hold it).
                        if stored_len == 0
                            || u64::from(stored_len) > crate::BLOCK_BYTES
                            || !u64::from(offset_in_record).is_multiple_of(PAYLOAD_ALIGN)
                            || end > record.len() as u64
                            || (offset_in_record as usize) < len
                        {
                            return None;
                        }
                        Entry::Block {
                            lba,
                            offset_in_record,
                            stored_len,
                            codec: Codec::from_code(e[14])?,
                            checksum: le32(e, 16),
                        }
                    }
                    ENTRY_HOLE => Entry::Hole {
                        lba,
                        count: le32(e, 8),
                    },
                    _ => return None,
                },
            };
            entries.push(entry);
        }
        Some(RecordHeader {
            store_id,
            seq: le64(record, 16),
            prev_seq: le64(record, 24),
            checkpoint_id: le64(record, 32),
            next_segment: le32(record, 40),
            kind,
            record_bytes: le32(record, 52),
            durable_seq: le64(record, 64),
            session: le64(record, 72),
            first_of_session,
            entries,
        })
    }
}

/// What a checkpoint slot says: where the newest complete checkpoint starts in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointHeader {
    pub store_id: u64,
    pub checkpoint_id: u64,
    /// The log position (record number) where the checkpoint's records begin; recovery rolls
    /// forward from here.
    pub start_record: u64,
    pub start_seq: u64,
    /// The sequence number before `start_seq` (the first record's `prev_seq`).
    pub start_prev_seq: u64,
    pub checkpoint_records: u32,
    pub logical_bytes: u64,
    pub record_bytes: u32,
    pub records_per_segment: u32,
}

pub const CHECKPOINT_HEADER_BYTES: usize = 80;

impl CheckpointHeader {
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..CHECKPOINT_HEADER_BYTES];
        out.fill(0);
        out[0..8].copy_from_slice(&CHECKPOINT_MAGIC);
        out[8..16].copy_from_slice(&self.store_id.to_le_bytes());
        out[16..24].copy_from_slice(&self.checkpoint_id.to_le_bytes());
        out[24..32].copy_from_slice(&self.start_record.to_le_bytes());
        out[32..40].copy_from_slice(&self.start_seq.to_le_bytes());
        out[40..48].copy_from_slice(&self.start_prev_seq.to_le_bytes());
        out[48..52].copy_from_slice(&self.checkpoint_records.to_le_bytes());
        out[52..60].copy_from_slice(&self.logical_bytes.to_le_bytes());
        out[60..64].copy_from_slice(&self.record_bytes.to_le_bytes());
        out[64..68].copy_from_slice(&self.records_per_segment.to_le_bytes());
        let crc = checksum::crc32c(&out[..76]);
        out[76..80].copy_from_slice(&crc.to_le_bytes());
    }

    /// Whether `bytes` start like a header of store `store_id`, intact or not, in this
    /// format or format 1.
    pub fn names_store(bytes: &[u8], store_id: u64) -> bool {
        Self::magic_of_store(bytes, store_id)
            .is_some_and(|magic| magic == CHECKPOINT_MAGIC || magic == CHECKPOINT_MAGIC_V1)
    }

    /// Whether `bytes` start like a format 1 header of store `store_id`.
    pub fn is_format_1(bytes: &[u8], store_id: u64) -> bool {
        Self::magic_of_store(bytes, store_id) == Some(CHECKPOINT_MAGIC_V1)
    }

    /// The magic of a header-sized block that names store `store_id`.
    fn magic_of_store(bytes: &[u8], store_id: u64) -> Option<[u8; 8]> {
        if bytes.len() < CHECKPOINT_HEADER_BYTES || le64(bytes, 8) != store_id {
            return None;
        }
        bytes[0..8].try_into().ok()
    }

    /// Any store's checkpoint header (the caller checks `store_id`); `None` if damaged.
    pub fn decode(bytes: &[u8]) -> Option<CheckpointHeader> {
        if bytes.len() < CHECKPOINT_HEADER_BYTES || bytes[0..8] != CHECKPOINT_MAGIC {
            return None;
        }
        if checksum::crc32c(&bytes[..76]) != le32(bytes, 76) {
            return None;
        }
        Some(CheckpointHeader {
            store_id: le64(bytes, 8),
            checkpoint_id: le64(bytes, 16),
            start_record: le64(bytes, 24),
            start_seq: le64(bytes, 32),
            start_prev_seq: le64(bytes, 40),
            checkpoint_records: le32(bytes, 48),
            logical_bytes: le64(bytes, 52),
            record_bytes: le32(bytes, 60),
            records_per_segment: le32(bytes, 64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: RecordKind, entries: Vec<Entry>) -> RecordHeader {
        RecordHeader {
            store_id: 7,
            seq: 10,
            prev_seq: 9,
            checkpoint_id: 0,
            next_segment: 3,
            kind,
            record_bytes: 8192,
            durable_seq: 4,
            session: 0x5e55_1000,
            first_of_session: true,
            entries,
        }
    }

    #[test]
    fn location_packs_into_twelve_bytes() {
        let location = Location {
            address_bytes: (1 << 40) + 4096 * 3 + 16,
            stored_len: 4096,
            codec: Codec::Zstd,
            checksum: 0xdead_beef,
        };
        assert_eq!(Location::unpack(location.pack()), Some(location));
        assert_eq!(Location::unpack([0, 0, 5]), None);
    }

    #[test]
    fn records_round_trip_and_damage_is_refused() {
        let data = header(
            RecordKind::Data,
            vec![
                Entry::Block {
                    lba: 5,
                    offset_in_record: 4096,
                    stored_len: 100,
                    codec: Codec::Lz4,
                    checksum: 1,
                },
                Entry::Hole { lba: 9, count: 4 },
            ],
        );
        let mut record = vec![0u8; 8192];
        data.encode(&mut record);
        assert_eq!(RecordHeader::decode(&record, 7), Some(data.clone()));
        assert_eq!(RecordHeader::decode(&record, 8), None);
        assert_eq!(RecordHeader::decode(&record[..4096], 7), None);
        for at in [0usize, 20, 47, 64, 70, 100] {
            let mut damaged = record.clone();
            damaged[at] ^= 4;
            assert_eq!(RecordHeader::decode(&damaged, 7), None, "byte {at}");
        }
        // No store stores a block in more than a block's bytes.
        let oversized = header(
            RecordKind::Data,
            vec![Entry::Block {
                lba: 5,
                offset_in_record: 1024,
                stored_len: 4097,
                codec: Codec::Raw,
                checksum: 1,
            }],
        );
        oversized.encode(&mut record);
        assert_eq!(RecordHeader::decode(&record, 7), None);
        let unaligned = header(
            RecordKind::Data,
            vec![Entry::Block {
                lba: 5,
                offset_in_record: 1032,
                stored_len: 100,
                codec: Codec::Lz4,
                checksum: 1,
            }],
        );
        unaligned.encode(&mut record);
        assert_eq!(RecordHeader::decode(&record, 7), None);
        let mapped = header(
            RecordKind::Checkpoint,
            vec![Entry::Mapped {
                lba: 1 << 33,
                location: Location {
                    address_bytes: 1 << 20,
                    stored_len: 17,
                    codec: Codec::Raw,
                    checksum: 3,
                },
            }],
        );
        mapped.encode(&mut record);
        assert_eq!(RecordHeader::decode(&record, 7), Some(mapped));
    }

    #[test]
    fn checkpoint_headers_round_trip() {
        let header = CheckpointHeader {
            store_id: 1,
            checkpoint_id: 2,
            start_record: 3,
            start_seq: 4,
            start_prev_seq: 5,
            checkpoint_records: 6,
            logical_bytes: 7,
            record_bytes: 8,
            records_per_segment: 9,
        };
        let mut bytes = vec![0u8; 512];
        header.encode(&mut bytes);
        assert_eq!(CheckpointHeader::decode(&bytes), Some(header));
        bytes[30] ^= 1;
        assert_eq!(CheckpointHeader::decode(&bytes), None);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut state = 1u64;
        for len in [0usize, 63, 64, 100, 4096, 8192] {
            for _ in 0..200 {
                let mut bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1);
                        (state >> 33) as u8
                    })
                    .collect();
                if len >= 8 {
                    bytes[..8].copy_from_slice(&RECORD_MAGIC);
                }
                let _ = RecordHeader::decode(&bytes, 0);
                let _ = CheckpointHeader::decode(&bytes);
            }
        }
    }
}
