//! The reference disk: what each sector may hold, given the history of host operations.
//!
//! Every sector keeps a short history of the writes that touched it, each with the logical
//! times it was submitted and acknowledged and when it became known durable (a FLUSH
//! acknowledged after it, or FUA). Concurrent operations may take effect in either order, as
//! NBD allows; anything else is a bug:
//! - a read may return the newest write acknowledged before the read was submitted, or any
//!   write concurrent with it — never a write superseded by one that completed before the read
//!   began;
//! - after a crash, a sector holds its newest known-durable value or any write after it
//!   (acknowledged or still in flight); the first read after the crash fixes which one, and
//!   later reads must agree.

use crate::pattern::WriteId;
use std::collections::BTreeSet;

/// A sector value that matches anything (trimmed: contents unspecified).
pub const ANY: WriteId = u64::MAX;
const NEVER: u64 = u64::MAX;

#[derive(Clone, Debug)]
struct Entry {
    /// One value, or several possible ones after a crash until a read fixes it.
    values: Vec<WriteId>,
    submit: u64,
    ack: u64,
    durable_at: u64,
}

pub struct Model {
    sectors: Vec<Vec<Entry>>,
    clock: u64,
    /// Sectors holding acknowledged entries not yet known durable.
    non_durable: BTreeSet<u64>,
    /// Whether reads fix ambiguous values (off for runs beyond tolerance, where a member
    /// failure may legitimately switch which surviving copy answers).
    resolve: bool,
    /// Submission time of the oldest read still in flight: history it may still return is
    /// kept.
    oldest_read: u64,
}

/// A write in flight in the model.
#[derive(Clone, Debug)]
pub struct WriteTicket {
    first_sector: u64,
    sectors: u64,
    submit: u64,
}

impl WriteTicket {
    /// The bytes the write covers: offset and length.
    pub fn byte_range(&self) -> (u64, u64) {
        let sector = crate::pattern::SECTOR_BYTES as u64;
        (self.first_sector * sector, self.sectors * sector)
    }
}

impl Model {
    pub fn new(sectors: u64, resolve: bool) -> Model {
        let initial = Entry {
            values: vec![0],
            submit: 0,
            ack: 0,
            durable_at: 0,
        };
        Model {
            sectors: vec![vec![initial]; sectors as usize],
            clock: 1,
            non_durable: BTreeSet::new(),
            resolve,
            oldest_read: u64::MAX,
        }
    }

    pub fn sector_count(&self) -> u64 {
        self.sectors.len() as u64
    }

    /// Advances and returns logical time.
    pub fn now(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// A write (or zeroing, or trim with `ANY`) of `values[i]` to sector `first + i` was
    /// submitted.
    pub fn write_submitted(&mut self, first_sector: u64, values: &[WriteId]) -> WriteTicket {
        let submit = self.now();
        for (i, &value) in values.iter().enumerate() {
            self.sectors[(first_sector + i as u64) as usize].push(Entry {
                values: vec![value],
                submit,
                ack: NEVER,
                durable_at: NEVER,
            });
        }
        WriteTicket {
            first_sector,
            sectors: values.len() as u64,
            submit,
        }
    }

    /// The write was acknowledged (`durable` for FUA).
    pub fn write_acked(&mut self, ticket: &WriteTicket, durable: bool) {
        let now = self.now();
        for sector in ticket.first_sector..ticket.first_sector + ticket.sectors {
            let entry = self.sectors[sector as usize]
                .iter_mut()
                .find(|entry| entry.submit == ticket.submit)
                .expect("the write's entry");
            entry.ack = now;
            if durable {
                entry.durable_at = now;
                self.prune(sector);
            } else {
                self.non_durable.insert(sector);
            }
        }
    }

    /// A FLUSH submitted at `submit` was acknowledged: writes acknowledged before it are
    /// durable.
    pub fn flush_acked(&mut self, submit: u64) {
        let now = self.now();
        let sectors: Vec<u64> = self.non_durable.iter().copied().collect();
        for sector in sectors {
            let mut pending = false;
            for entry in &mut self.sectors[sector as usize] {
                if entry.ack < submit && entry.durable_at == NEVER {
                    entry.durable_at = now;
                } else if entry.ack != NEVER && entry.durable_at == NEVER {
                    pending = true;
                }
            }
            if !pending {
                self.non_durable.remove(&sector);
            }
            self.prune(sector);
        }
    }

    /// Tells the model when the oldest read still in flight was submitted (`u64::MAX` for
    /// none).
    pub fn set_oldest_read(&mut self, submit: u64) {
        self.oldest_read = submit;
    }

    /// Drops entries that no future read or crash can return: those superseded by a durable
    /// write submitted after they were acknowledged and acknowledged itself before every read
    /// still in flight began.
    fn prune(&mut self, sector: u64) {
        let oldest_read = self.oldest_read;
        let history = &mut self.sectors[sector as usize];
        let newest_durable = history
            .iter()
            .filter(|e| e.durable_at != NEVER && e.ack < oldest_read)
            .map(|e| e.submit)
            .max()
            .unwrap_or(0);
        history.retain(|entry| entry.ack >= newest_durable);
    }

    /// A write that was refused without effect: forget it.
    pub fn write_cancelled(&mut self, ticket: &WriteTicket) {
        for sector in ticket.first_sector..ticket.first_sector + ticket.sectors {
            self.sectors[sector as usize].retain(|entry| entry.submit != ticket.submit);
        }
    }

    /// Checks a read of `sector` submitted at `submit` and answered at `ack` that returned
    /// `value`.
    pub fn check_read(
        &mut self,
        sector: u64,
        value: WriteId,
        submit: u64,
        ack: u64,
    ) -> Result<(), String> {
        let history = &mut self.sectors[sector as usize];
        let floor = history
            .iter()
            .filter(|e| e.ack < submit)
            .map(|e| e.submit)
            .max()
            .unwrap_or(0);
        // The value may match several candidates (a zero from an old state and a zero from a
        // concurrent write-zeroes): an ambiguous post-crash entry is fixed only when nothing
        // else explains the value.
        let mut matched = None;
        let mut explained_elsewhere = false;
        for (index, entry) in history.iter().enumerate() {
            let candidate = entry.submit < ack && (entry.ack >= floor);
            if candidate && (entry.values.contains(&value) || entry.values.contains(&ANY)) {
                if entry.values.len() == 1 {
                    explained_elsewhere = true;
                }
                matched.get_or_insert(index);
            }
        }
        match matched {
            Some(index) => {
                let entry = &mut history[index];
                if self.resolve
                    && !explained_elsewhere
                    && entry.values.len() > 1
                    && !entry.values.contains(&ANY)
                {
                    entry.values = vec![value];
                }
                Ok(())
            }
            None => {
                let describe = |e: &&Entry| {
                    let ack = if e.ack == NEVER {
                        "-".to_string()
                    } else {
                        e.ack.to_string()
                    };
                    format!("{:?}@{}..{ack}", e.values, e.submit)
                };
                let candidates: Vec<String> = history
                    .iter()
                    .filter(|e| e.submit < ack && (e.ack >= floor))
                    .map(|e| describe(&e))
                    .collect();
                let all: Vec<String> = history.iter().map(|e| describe(&e)).collect();
                Err(format!(
                    "sector {sector}: read (t{submit}..t{ack}) returned write {value}, allowed: {} (history: {})",
                    candidates.join(", "),
                    all.join(", ")
                ))
            }
        }
    }

    /// Whether a read of `sector` (submitted at `submit`, answered at `ack`) may return any
    /// bytes at all.
    pub fn allows_anything(&self, sector: u64, submit: u64, ack: u64) -> bool {
        let history = &self.sectors[sector as usize];
        let floor = history
            .iter()
            .filter(|e| e.ack < submit)
            .map(|e| e.submit)
            .max()
            .unwrap_or(0);
        history
            .iter()
            .any(|e| e.submit < ack && e.ack >= floor && e.values.contains(&ANY))
    }

    /// A power cut followed by the loss of members before the group came back: like `crash`,
    /// but a sector that had writes after its newest durable value may hold anything (its
    /// stripe may have been torn and the member holding it rebuilt from the rest). A write
    /// that would leave the sector as it was (zeroes over zeroes) tears its stripe all the
    /// same, so a write not yet durable counts, not only several possible values.
    pub fn crash_losing_members(&mut self) {
        let torn: Vec<bool> = self
            .sectors
            .iter()
            .map(|history| {
                let newest_durable = newest_durable_submit(history);
                history
                    .iter()
                    .any(|e| e.durable_at == NEVER && e.ack >= newest_durable)
            })
            .collect();
        self.crash();
        for (history, torn) in self.sectors.iter_mut().zip(torn) {
            if torn || history[0].values.len() > 1 {
                history[0].values = vec![ANY];
            }
        }
    }

    /// A power cut at the current time: every sector collapses to what it may hold now.
    pub fn crash(&mut self) {
        let now = self.now();
        for history in &mut self.sectors {
            let newest_durable = newest_durable_submit(history);
            let mut values: Vec<WriteId> = history
                .iter()
                .filter(|entry| entry.ack >= newest_durable)
                .flat_map(|entry| entry.values.iter().copied())
                .collect();
            values.sort_unstable();
            values.dedup();
            *history = vec![Entry {
                values,
                submit: now,
                ack: now,
                durable_at: now,
            }];
        }
        self.non_durable.clear();
    }

    /// Whether a sector has only ever held zeroes (reads of it are trivially checkable).
    pub fn is_pristine(&self, sector: u64) -> bool {
        let history = &self.sectors[sector as usize];
        history.len() == 1 && history[0].values == [0]
    }
}

/// When the newest write known durable was submitted (0: the sector's first value).
fn newest_durable_submit(history: &[Entry]) -> u64 {
    history
        .iter()
        .filter(|e| e.durable_at != NEVER)
        .map(|e| e.submit)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_semantics() {
        let mut model = Model::new(4, true);
        let w = model.write_submitted(0, &[5, 5]);
        model.write_acked(&w, false);
        let read_start = model.now();
        let read_end = model.now();
        assert!(model.check_read(0, 5, read_start, read_end).is_ok());
        assert!(
            model.check_read(0, 0, read_start, read_end).is_err(),
            "superseded initial value"
        );
        // A concurrent write may or may not be seen.
        let read_start = model.now();
        let w2 = model.write_submitted(0, &[6]);
        let read_end = model.now();
        assert!(model.check_read(0, 5, read_start, read_end).is_ok());
        assert!(model.check_read(0, 6, read_start, read_end).is_ok());
        model.write_acked(&w2, false);
        let (s, e) = (model.now(), model.now());
        assert!(model.check_read(0, 5, s, e).is_err());
    }

    #[test]
    fn crash_keeps_durable_or_later() {
        let mut model = Model::new(1, true);
        let w1 = model.write_submitted(0, &[1]);
        model.write_acked(&w1, false);
        let flush = model.now();
        model.flush_acked(flush);
        let w2 = model.write_submitted(0, &[2]);
        model.write_acked(&w2, false);
        let _w3 = model.write_submitted(0, &[3]);
        model.crash();
        let (s, e) = (model.now(), model.now());
        assert!(
            model.check_read(0, 0, s, e).is_err(),
            "older than the flushed value"
        );
        assert!(
            model.check_read(0, 3, s, e).is_ok(),
            "an in-flight write may have landed"
        );
        let (s, e) = (model.now(), model.now());
        assert!(
            model.check_read(0, 2, s, e).is_err(),
            "the first read fixed the value"
        );
        assert!(model.check_read(0, 3, s, e).is_ok());
    }

    #[test]
    fn a_crash_losing_members_frees_sectors_of_writes_not_durable_only() {
        let mut model = Model::new(3, true);
        // Sector 0: zeroes written over zeroes, in flight at the cut. Sector 1: the same
        // write, acknowledged and flushed. Sector 2: never written.
        let _in_flight = model.write_submitted(0, &[0]);
        let durable = model.write_submitted(1, &[0]);
        model.write_acked(&durable, true);
        model.crash_losing_members();
        let (s, e) = (model.now(), model.now());
        assert!(
            model.check_read(0, 7, s, e).is_ok(),
            "its stripe may be torn and the sector rebuilt from it"
        );
        assert!(model.check_read(1, 7, s, e).is_err(), "durable");
        assert!(model.check_read(2, 7, s, e).is_err(), "never written");
    }
}
