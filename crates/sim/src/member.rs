//! A simulated member device: a volatile image (what reads see) over a durable image (what
//! survives a power cut), with the faults real drives have.

use crate::pattern::SECTOR_BYTES;
use crate::prng::Rng;
use std::collections::BTreeSet;
use tessera_raid::engine::MemberError;

/// Copies into `to`, which holds device bytes from `to_at`, whatever part of `from` (device
/// bytes from `from_at`) overlaps it.
pub fn copy_overlap(from_at: u64, from: &[u8], to_at: u64, to: &mut [u8]) {
    let start = from_at.max(to_at);
    let end = (from_at + from.len() as u64).min(to_at + to.len() as u64);
    if start < end {
        let len = (end - start) as usize;
        let (source, target) = ((start - from_at) as usize, (start - to_at) as usize);
        to[target..target + len].copy_from_slice(&from[source..source + len]);
    }
}

/// A write that completed but is not yet known durable.
struct Pending {
    sequence: u64,
    offset_bytes: u64,
    data: Vec<u8>,
}

pub struct SimMember {
    pub size_bytes: u64,
    volatile: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
    /// Writes completed so far (flushes make everything up to their issue point durable).
    completed_writes: u64,
    /// Sectors that fail to read until rewritten.
    pub latent_errors: BTreeSet<u64>,
    /// The device is gone: every command fails with `Gone`.
    pub gone: bool,
    /// The device fails every write with EIO (a worn-out drive).
    pub failing_writes: bool,
}

impl SimMember {
    pub fn new(size_bytes: u64) -> SimMember {
        SimMember {
            size_bytes,
            volatile: vec![0; size_bytes as usize],
            durable: vec![0; size_bytes as usize],
            pending: Vec::new(),
            completed_writes: 0,
            latent_errors: BTreeSet::new(),
            gone: false,
            failing_writes: false,
        }
    }

    fn check_range(&self, offset_bytes: u64, len: usize) {
        assert!(
            offset_bytes + len as u64 <= self.size_bytes,
            "member I/O beyond the device: {offset_bytes}+{len}"
        );
        assert_eq!(
            offset_bytes % SECTOR_BYTES as u64,
            0,
            "unaligned member I/O at {offset_bytes}"
        );
        assert_eq!(len % SECTOR_BYTES, 0, "unaligned member I/O length {len}");
    }

    pub fn read(&self, offset_bytes: u64, out: &mut [u8]) -> Result<(), MemberError> {
        self.check_range(offset_bytes, out.len());
        if self.gone {
            return Err(MemberError::Gone);
        }
        let first = offset_bytes / SECTOR_BYTES as u64;
        let last = first + (out.len() / SECTOR_BYTES) as u64;
        if self.latent_errors.range(first..last).next().is_some() {
            return Err(MemberError::Io);
        }
        let start = offset_bytes as usize;
        out.copy_from_slice(&self.volatile[start..start + out.len()]);
        Ok(())
    }

    /// A write; with `fua` it is durable on completion, and no older unflushed write can
    /// later bring back what it replaced (a drive's cache holds only the newest data).
    pub fn write(&mut self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), MemberError> {
        self.check_range(offset_bytes, data.len());
        if self.gone {
            return Err(MemberError::Gone);
        }
        if self.failing_writes {
            return Err(MemberError::Io);
        }
        let start = offset_bytes as usize;
        self.volatile[start..start + data.len()].copy_from_slice(data);
        let first = offset_bytes / SECTOR_BYTES as u64;
        let last = first + (data.len() / SECTOR_BYTES) as u64;
        let healed: Vec<u64> = self.latent_errors.range(first..last).copied().collect();
        for sector in healed {
            self.latent_errors.remove(&sector);
        }
        self.completed_writes += 1;
        if fua {
            self.durable[start..start + data.len()].copy_from_slice(data);
            for older in &mut self.pending {
                copy_overlap(offset_bytes, data, older.offset_bytes, &mut older.data);
            }
        } else {
            self.pending.push(Pending {
                sequence: self.completed_writes,
                offset_bytes,
                data: data.to_vec(),
            });
        }
        Ok(())
    }

    /// The point a flush issued now covers.
    pub fn flush_point(&self) -> u64 {
        self.completed_writes
    }

    /// Completes a flush issued at `point`: every write completed by then becomes durable.
    pub fn flush(&mut self, point: u64) -> Result<(), MemberError> {
        if self.gone {
            return Err(MemberError::Gone);
        }
        if self.failing_writes {
            return Err(MemberError::Io);
        }
        let (durable, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.sequence <= point);
        for write in durable {
            let start = write.offset_bytes as usize;
            self.durable[start..start + write.data.len()].copy_from_slice(&write.data);
        }
        self.pending = rest;
        Ok(())
    }

    /// A power cut: each unflushed write is lost, kept, or torn at sector granularity (in
    /// completion order, so a kept later write wins over an earlier one). `in_flight` are
    /// writes issued but not completed, which may also have reached the media.
    pub fn crash(&mut self, rng: &mut Rng, in_flight: Vec<(u64, Vec<u8>)>) {
        let mut writes: Vec<(u64, Vec<u8>)> = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|p| (p.offset_bytes, p.data))
            .collect();
        writes.extend(in_flight);
        for (offset_bytes, data) in writes {
            let fate = rng.below(3);
            for (i, sector) in data.chunks_exact(SECTOR_BYTES).enumerate() {
                let keep = match fate {
                    0 => false,
                    1 => true,
                    _ => rng.chance(500_000),
                };
                if keep {
                    let start = offset_bytes as usize + i * SECTOR_BYTES;
                    self.durable[start..start + SECTOR_BYTES].copy_from_slice(sector);
                }
            }
        }
        self.volatile.copy_from_slice(&self.durable);
    }

    /// Flips one bit of the device, volatile and durable alike (silent media corruption).
    pub fn flip_bit(&mut self, offset_bytes: u64, bit: u8) {
        let at = offset_bytes as usize;
        self.volatile[at] ^= 1 << bit;
        self.durable[at] ^= 1 << bit;
    }

    /// The volatile contents (for checkers).
    pub fn contents(&self) -> &[u8] {
        &self.volatile
    }

    /// The durable contents (what an assembly after a crash reads).
    pub fn durable_contents(&self) -> &[u8] {
        &self.durable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_makes_completed_writes_durable() {
        let mut member = SimMember::new(8192);
        member.write(0, &[1; 512], false).unwrap();
        let point = member.flush_point();
        member.write(512, &[2; 512], false).unwrap();
        member.flush(point).unwrap();
        assert_eq!(member.durable_contents()[0], 1);
        assert_eq!(
            member.durable_contents()[512],
            0,
            "written after the flush was issued"
        );
        let mut out = [0u8; 512];
        member.read(512, &mut out).unwrap();
        assert_eq!(out[0], 2);
    }

    #[test]
    fn latent_errors_heal_on_write() {
        let mut member = SimMember::new(8192);
        member.latent_errors.insert(3);
        let mut out = [0u8; 1024];
        assert_eq!(member.read(1024, &mut out), Err(MemberError::Io));
        member.write(1536, &[5; 512], false).unwrap();
        assert!(member.read(1024, &mut out).is_ok());
    }

    #[test]
    fn crash_keeps_durable_and_some_of_the_rest() {
        let mut rng = Rng::new(1);
        let mut member = SimMember::new(4096);
        member.write(0, &[1; 512], false).unwrap();
        member.flush(member.flush_point()).unwrap();
        member.write(0, &[2; 512], false).unwrap();
        member.crash(&mut rng, Vec::new());
        let mut out = [0u8; 512];
        member.read(0, &mut out).unwrap();
        assert!(out[0] == 1 || out[0] == 2);
    }

    #[test]
    fn a_fua_write_survives_any_crash_and_older_writes_cannot_undo_it() {
        for seed in 0..64 {
            let mut rng = Rng::new(seed);
            let mut member = SimMember::new(4096);
            // Unflushed, overlapping the FUA write's first sector and the sector after it.
            member.write(0, &[1; 1024], false).unwrap();
            member.write(512, &[2; 512], true).unwrap();
            member.write(1024, &[3; 512], false).unwrap();
            assert!(member.durable_contents()[512..1024].iter().all(|&b| b == 2));
            member.crash(&mut rng, Vec::new());
            let mut out = [0u8; 1536];
            member.read(0, &mut out).unwrap();
            assert!(out[..512].iter().all(|&b| b == 0 || b == 1), "seed {seed}");
            assert!(out[512..1024].iter().all(|&b| b == 2), "seed {seed}");
            assert!(out[1024..].iter().all(|&b| b == 0 || b == 3), "seed {seed}");
        }
    }
}
