//! Where things live in a thin drive's extent of the group's data space.
//!
//! ```text
//! | checkpoint slot 0 | checkpoint slot 1 | segment 0 | segment 1 | ... |
//!   one record each       records_per_segment records each
//! ```
//! A record is a whole number of the group's stripes, so every write of one is a full-stripe
//! write. Records are numbered from 0 across segments: record `r` is in segment
//! `r / records_per_segment`.

/// Records aim at this size: large enough to amortize their header and a member command,
/// small enough to fill quickly under a light load.
const RECORD_TARGET_BYTES: u64 = 256 << 10;

/// Segments (the unit of cleaning and allocation) aim at this size.
const SEGMENT_TARGET_BYTES: u64 = 1 << 20;

/// Fewer segments than this leave no room to clean.
pub const MIN_SEGMENTS: u64 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub extent_bytes: u64,
    pub record_bytes: u64,
    pub records_per_segment: u64,
    pub segments: u64,
}

impl Layout {
    /// The layout of an extent of `extent_bytes` on a group whose full stripe holds
    /// `stripe_bytes` of data.
    pub fn new(extent_bytes: u64, stripe_bytes: u64) -> Result<Layout, String> {
        if stripe_bytes == 0 || !stripe_bytes.is_multiple_of(crate::BLOCK_BYTES) {
            return Err(format!(
                "a stripe of {stripe_bytes} bytes is not a whole number of blocks"
            ));
        }
        let record_bytes = RECORD_TARGET_BYTES.div_ceil(stripe_bytes) * stripe_bytes;
        if record_bytes > u32::MAX as u64 / 2 {
            return Err(format!("a stripe of {stripe_bytes} bytes is too large"));
        }
        let records_per_segment = (SEGMENT_TARGET_BYTES / record_bytes).max(1);
        let segment_bytes = record_bytes * records_per_segment;
        let segments = extent_bytes.saturating_sub(2 * record_bytes) / segment_bytes;
        if segments < MIN_SEGMENTS {
            return Err(format!(
                "{extent_bytes} bytes hold {segments} segments of {segment_bytes} bytes; a thin \
                 drive needs at least {MIN_SEGMENTS}"
            ));
        }
        if segments >= u32::MAX as u64 {
            return Err("too many segments".into());
        }
        Ok(Layout {
            extent_bytes,
            record_bytes,
            records_per_segment,
            segments,
        })
    }

    pub fn segment_bytes(&self) -> u64 {
        self.record_bytes * self.records_per_segment
    }

    pub fn records(&self) -> u64 {
        self.segments * self.records_per_segment
    }

    /// Offset of checkpoint slot 0 or 1.
    pub fn slot_offset(&self, slot: u64) -> u64 {
        assert!(slot < 2);
        slot * self.record_bytes
    }

    pub fn record_offset(&self, record: u64) -> u64 {
        assert!(
            record < self.records(),
            "record {record} outside the extent"
        );
        (2 + record) * self.record_bytes
    }

    /// The record an address (extent offset) falls in.
    pub fn record_at(&self, offset_bytes: u64) -> u64 {
        assert!(
            offset_bytes >= 2 * self.record_bytes,
            "address in the checkpoint slots"
        );
        offset_bytes / self.record_bytes - 2
    }

    pub fn segment_of(&self, record: u64) -> u64 {
        record / self.records_per_segment
    }

    pub fn first_record(&self, segment: u64) -> u64 {
        segment * self.records_per_segment
    }

    /// Usable bytes: the segments.
    pub fn data_bytes(&self) -> u64 {
        self.segments * self.segment_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_whole_stripes_and_fit() {
        for stripe in [4096u64, 12288, 65536, 196608, 262144, 1 << 20, 3 << 20] {
            let layout = Layout::new(1 << 30, stripe).unwrap();
            assert_eq!(layout.record_bytes % stripe, 0);
            assert!(layout.record_bytes >= RECORD_TARGET_BYTES);
            let last = layout.records() - 1;
            assert!(layout.record_offset(last) + layout.record_bytes <= layout.extent_bytes);
            assert_eq!(layout.record_at(layout.record_offset(last) + 5), last);
            assert_eq!(layout.segment_of(layout.first_record(3)), 3);
        }
        assert!(Layout::new(1 << 20, 65536).is_err());
        assert!(Layout::new(1 << 30, 1000).is_err());
    }
}
