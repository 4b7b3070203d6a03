//! Scrub: every live block is read from the group and checked against its checksum, through
//! the same path as host reads, so a bad one is repaired from redundancy on the way.

use super::read::Purpose;
use super::{Phase, Store, ThinEvent};
use crate::BLOCK_BYTES;

/// Blocks per scrub read.
const SCRUB_READ_BLOCKS: u64 = 64;
/// Scrub reads in flight at once: enough to keep going, few enough to leave the group to
/// host I/O.
const SCRUB_READS_IN_FLIGHT: u32 = 2;

pub(super) struct Scrub {
    /// The next logical block to look at.
    next_lba: u64,
    in_flight: u32,
    checked_blocks: u64,
    errors_before: u64,
    repairs_before: u64,
}

/// How far a scrub is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrubProgress {
    /// Logical blocks looked at (holes included).
    pub position_blocks: u64,
    pub total_blocks: u64,
    /// Stored blocks read and checked.
    pub checked_blocks: u64,
}

impl Store {
    /// Starts a scrub; false if one is running or the store is not serving.
    pub fn start_scrub(&mut self) -> bool {
        if self.phase != Phase::Ready || self.scrub.is_some() {
            return false;
        }
        self.scrub = Some(Scrub {
            next_lba: 0,
            in_flight: 0,
            checked_blocks: 0,
            errors_before: self.stats.checksum_errors_detected,
            repairs_before: self.stats.checksum_errors_repaired,
        });
        self.pump_scrub();
        true
    }

    pub fn scrub_progress(&self) -> Option<ScrubProgress> {
        self.scrub.as_ref().map(|scrub| ScrubProgress {
            position_blocks: scrub.next_lba,
            total_blocks: self.map.blocks(),
            checked_blocks: scrub.checked_blocks,
        })
    }

    /// Issues scrub reads up to the limit; finishes the scrub when the map is covered.
    pub(super) fn pump_scrub(&mut self) {
        let blocks = self.map.blocks();
        let Some(scrub) = self.scrub.as_mut() else {
            return;
        };
        if self.phase != Phase::Ready {
            // Stopping: the scrub ends where it is once its reads are back.
            if scrub.in_flight == 0 {
                self.scrub = None;
            }
            return;
        }
        let mut reads = Vec::new();
        while scrub.in_flight + (reads.len() as u32) < SCRUB_READS_IN_FLIGHT
            && scrub.next_lba < blocks
        {
            let (mapped, run) = self.map.run(scrub.next_lba, SCRUB_READ_BLOCKS);
            if mapped {
                reads.push((scrub.next_lba, run));
                scrub.checked_blocks += run;
            }
            scrub.next_lba += run;
        }
        scrub.in_flight += reads.len() as u32;
        if scrub.in_flight == 0 && scrub.next_lba >= blocks {
            let scrub = self.scrub.take().expect("scrub running");
            self.event(ThinEvent::ScrubFinished {
                checked_blocks: scrub.checked_blocks,
                errors_detected: self.stats.checksum_errors_detected - scrub.errors_before,
                errors_repaired: self.stats.checksum_errors_repaired - scrub.repairs_before,
            });
            return;
        }
        for (lba, run) in reads {
            self.start_read(Purpose::Scrub, lba * BLOCK_BYTES, run * BLOCK_BYTES);
        }
    }

    /// A scrub read finished (its blocks were checked, and repaired where they could be).
    pub(super) fn scrub_read_done(&mut self) {
        if let Some(scrub) = self.scrub.as_mut() {
            scrub.in_flight -= 1;
        }
        self.pump_scrub();
    }
}
