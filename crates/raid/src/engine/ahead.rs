//! Resync ahead of the cursor. After an unclean shutdown, parity of a region awaiting resync is
//! never used to reconstruct data, so a read answered there would fail if the member holding
//! that data were lost before the resync got to it (and a thin drive whose log was built on
//! such a read would lose the log after it). A read of a parity-level stripe awaiting resync
//! therefore first resyncs that stripe (parity from data, under the stripe lock) and is then
//! served as in a synced region. The background resync skips stripes already done.

use super::host::ReadPiece;
use super::stripe::{Kind, StripeOp};
use super::{Engine, Key, OpId};
use crate::geometry::Column;

/// A read piece waiting for its stripe's resync.
pub(super) struct WaitingRead {
    request: Key,
    piece: ReadPiece,
    group_offset_bytes: u64,
    around: Option<u8>,
}

impl Engine {
    /// Whether a read piece must wait for its stripe to be resynced first: a parity level, a
    /// stripe awaiting resync, and every data column of it readable (parity is made from the
    /// data, for the parity columns present; with a data column missing the stripe cannot be
    /// made whole, so resync would leave it as it is).
    pub(super) fn needs_resync_ahead(&self, piece: &ReadPiece) -> bool {
        if self.geometry.parity_chunks() == 0
            || self.regions.stripe_in_sync(piece.region, piece.stripe)
        {
            return false;
        }
        (0..self.geometry.data_chunks()).all(|index| {
            self.column_reader(piece.stripe, Column::Data(index))
                .is_some()
        })
    }

    /// Queues the piece behind a resync of its stripe (one resync per stripe, however many
    /// reads wait for it).
    pub(super) fn resync_ahead(
        &mut self,
        request: Key,
        piece: ReadPiece,
        group_offset_bytes: u64,
        around: Option<u8>,
    ) {
        let waiting = WaitingRead {
            request,
            piece,
            group_offset_bytes,
            around,
        };
        if let Some((_, reads)) = self.resync_ahead.get_mut(&piece.stripe) {
            reads.push(waiting);
            return;
        }
        let op = StripeOp::new(piece.stripe, piece.region, Kind::Resync);
        let id = self.start_stripe_op(Box::new(op));
        self.resync_ahead.insert(piece.stripe, (id, vec![waiting]));
    }

    /// Whether `id` is the resync run ahead of the cursor for `stripe`.
    pub(super) fn is_resync_ahead(&self, stripe: u64, id: OpId) -> bool {
        self.resync_ahead
            .get(&stripe)
            .is_some_and(|(ahead, _)| *ahead == id)
    }

    /// The stripe's resync finished: its waiting reads go on, served directly now (or, if the
    /// stripe had to be skipped, as reads of a region awaiting resync always were).
    pub(super) fn resync_ahead_done(&mut self, stripe: u64, region: u64, skipped: bool) {
        let (_, reads) = self
            .resync_ahead
            .remove(&stripe)
            .expect("a resync ahead has its entry");
        if !skipped {
            self.regions.mark_stripe_synced(region, stripe);
            self.counters.resynced_stripes += 1;
            self.counters.resynced_ahead_stripes += 1;
        }
        for read in reads {
            self.route_read_piece(
                read.request,
                read.piece,
                read.group_offset_bytes,
                read.around,
                false,
            );
        }
    }
}
