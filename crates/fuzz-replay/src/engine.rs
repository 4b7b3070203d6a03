//! Engine assembly from whatever superblocks the drives hold (`Engine::assemble`), then its
//! start-up over member drives whose bitmap blocks and command results also come from the
//! input, a few host requests and an orderly stop.
//!
//! Input layout (short inputs read as zeroes past their end):
//!
//! | bytes | meaning |
//! |---|---|
//! | 1 | number of devices offered, 1 + n % 4 |
//! | 4 × 4 | per device: which member it is, how many generations stale, a record to change, flags |
//! | 64 | the tape: member command results, bitmap block contents, host requests |
//! | rest | one superblock image (zero-padded to 16 KiB, its checksum made valid) |
//!
//! Every device's superblock is derived from the one image and must itself decode, as the
//! daemon only ever offers superblocks that decoded.

use crate::metadata::sealed_superblock;
use std::sync::Arc;
use tessera_raid::bitmap::{self, BLOCK_BYTES};
use tessera_raid::engine::{
    Command, DeviceProbe, Engine, EngineConfig, GroupState, HostOp, HostRequest, MemberCommand,
    MemberError, MemberOp,
};
use tessera_raid::superblock::{
    MAX_MEMBER_RECORDS, MemberRecord, MemberRecordState, Superblock, Uuid,
};

const DEVICES_MAX: usize = 4;
const DEVICE_BYTES: usize = 4;
const TAPE_BYTES: usize = 64;
const TAPE_OFFSET: usize = 1 + DEVICES_MAX * DEVICE_BYTES;
const IMAGE_OFFSET: usize = TAPE_OFFSET + TAPE_BYTES;
/// Bounds the work per input: engine commands carried out and clock ticks.
const STEPS_MAX: usize = 5_000;
/// A small arena: start-up, a few requests and rebuild or resync steps fit.
const POOL_BYTES: usize = 8 << 20;
/// Host requests submitted once the engine has started, at most.
const HOST_REQUESTS_MAX: u8 = 4;

/// The `engine_assemble` target.
pub fn assemble(data: &[u8]) {
    let byte = |at: usize| data.get(at).copied().unwrap_or(0);
    let image = sealed_superblock(data.get(IMAGE_OFFSET..).unwrap_or(&[]));
    let Ok(base) = Superblock::decode(&image) else {
        return;
    };
    let devices = 1 + usize::from(byte(0)) % DEVICES_MAX;
    let probes: Vec<DeviceProbe> = (0..devices)
        .filter_map(|device| {
            let at = 1 + device * DEVICE_BYTES;
            let knobs = [byte(at), byte(at + 1), byte(at + 2), byte(at + 3)];
            device_superblock(&base, device, knobs)
        })
        .map(|superblock| DeviceProbe { superblock })
        .collect();
    let offered = probes.len();
    let config = EngineConfig {
        pool_bytes: POOL_BYTES,
        ..EngineConfig::default()
    };
    let Ok((mut engine, mapping)) =
        Engine::assemble(probes, config, Arc::new(tessera_parity::Scalar))
    else {
        return;
    };
    assert_eq!(mapping.len(), offered, "one mapping entry per device");
    let tape_end = IMAGE_OFFSET.min(data.len());
    let tape = Tape {
        bytes: data.get(TAPE_OFFSET..tape_end).unwrap_or(&[]),
    };
    Drive::new(engine.superblock(), tape).run(&mut engine);
}

/// The superblock one device holds: the base image seen from member `knobs[0]`, `knobs[1]`
/// generations stale, with one member record changed (a stale or diverging view) and flags
/// (bit 0: flip `clean`, bit 1: another group). `None` if that does not decode.
fn device_superblock(base: &Superblock, device: usize, knobs: [u8; 4]) -> Option<Superblock> {
    let [member, stale, record, flags] = knobs;
    let mut superblock = base.clone();
    let listed = superblock.members.len();
    let member = usize::from(member) % (listed + 1);
    if member < listed {
        superblock.member_uuid = superblock.members[member].uuid;
    } else {
        // A device the base image does not list: a spare from this device's own point of view.
        if listed == MAX_MEMBER_RECORDS {
            return None;
        }
        let uuid = Uuid([0xe0 | u8::try_from(device).expect("few devices"); 16]);
        superblock.member_uuid = uuid;
        superblock.members.push(MemberRecord {
            uuid,
            size_bytes: base
                .data_offset_bytes
                .saturating_add(base.member_data_bytes),
            role: None,
            state: MemberRecordState::Spare,
            rebuild_position_bytes: 0,
            replacing: false,
        });
    }
    superblock.generation = base.generation.saturating_sub(u64::from(stale));
    if let Some(changed) = superblock
        .members
        .get_mut(usize::from(record & 0x3f) % listed.max(1))
    {
        match record >> 6 {
            1 => changed.state = MemberRecordState::Failed,
            2 => changed.state = MemberRecordState::Active,
            3 => {
                changed.state = MemberRecordState::Rebuilding;
                changed.rebuild_position_bytes = 0;
            }
            _ => {}
        }
    }
    if flags & 1 != 0 {
        superblock.clean = !superblock.clean;
    }
    if flags & 2 != 0 {
        superblock.group_uuid.0[15] ^= 1;
    }
    Superblock::decode(&superblock.encode()).ok()
}

/// Input bytes consumed one decision at a time; zeroes once used up (zero means: succeed,
/// nothing special), so a short tape gives a plain healthy start-up.
struct Tape<'a> {
    bytes: &'a [u8],
}

impl Tape<'_> {
    fn next(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&byte, rest)) => {
                self.bytes = rest;
                byte
            }
            None => 0,
        }
    }

    fn next_u16(&mut self) -> u16 {
        u16::from_le_bytes([self.next(), self.next()])
    }
}

/// Carries out the engine's commands as member drives would, with results from the tape.
struct Drive<'a> {
    tape: Tape<'a>,
    group_tag: u64,
    bitmap_offset_bytes: u64,
    bitmap_slot_bytes: u64,
    now_us: u64,
    next_request_id: u64,
    submitted: bool,
    stopping: bool,
}

impl<'a> Drive<'a> {
    fn new(superblock: Superblock, tape: Tape<'a>) -> Drive<'a> {
        Drive {
            tape,
            group_tag: u64::from_le_bytes(superblock.group_uuid.0[..8].try_into().expect("8")),
            bitmap_offset_bytes: superblock.bitmap_offset_bytes,
            bitmap_slot_bytes: superblock.bitmap_slot_bytes,
            now_us: 0,
            next_request_id: 1,
            submitted: false,
            stopping: false,
        }
    }

    fn run(&mut self, engine: &mut Engine) {
        for _ in 0..STEPS_MAX {
            if let Some(command) = engine.poll() {
                match command {
                    Command::Member(command) => self.carry_out(engine, command),
                    Command::Reply(reply) => {
                        if let Ok(Some(buffer)) = reply.result {
                            engine.pool_mut().free(buffer);
                        }
                    }
                    Command::Event(_) => {}
                    Command::Compute(command) => {
                        engine.run_compute(&command.job);
                        engine.compute_done(command.id);
                    }
                }
                continue;
            }
            if engine.is_stopped() {
                return;
            }
            let started = engine.state() != GroupState::Starting;
            if started && !self.submitted {
                self.submitted = true;
                self.submit_requests(engine);
            } else if started && engine.is_idle() && !self.stopping {
                self.stopping = true;
                engine.stop();
            } else if let Some(deadline_us) = engine.next_deadline_us() {
                self.now_us = self.now_us.max(deadline_us);
                engine.tick(self.now_us);
            } else if !engine.is_idle() {
                // Background work paced by time (rebuild, resync) with no timer armed.
                self.now_us += 1_000;
                engine.tick(self.now_us);
            } else {
                return;
            }
        }
    }

    fn carry_out(&mut self, engine: &mut Engine, command: MemberCommand) {
        if let MemberOp::Read {
            offset_bytes,
            buffer,
            ..
        } = command.op
        {
            let contents = self.read_contents(offset_bytes, buffer.len());
            engine
                .pool_mut()
                .bytes_mut(buffer)
                .copy_from_slice(&contents);
        }
        let result = match self.tape.next() {
            0xfe => Err(MemberError::Io),
            0xff => Err(MemberError::Gone),
            _ => Ok(()),
        };
        engine.complete(command.id, result);
    }

    /// What a member read finds: a bitmap block (valid, for another block, blank or garbage)
    /// inside the bitmap slots, zeroes elsewhere.
    fn read_contents(&mut self, offset_bytes: u64, len_bytes: usize) -> Vec<u8> {
        let slots_end = self
            .bitmap_offset_bytes
            .saturating_add(self.bitmap_slot_bytes.saturating_mul(2));
        if len_bytes != BLOCK_BYTES
            || offset_bytes < self.bitmap_offset_bytes
            || offset_bytes >= slots_end
            || self.bitmap_slot_bytes == 0
        {
            return vec![0; len_bytes];
        }
        let within_slot = (offset_bytes - self.bitmap_offset_bytes) % self.bitmap_slot_bytes;
        let block = u32::try_from(within_slot / BLOCK_BYTES as u64).unwrap_or(u32::MAX);
        let choice = self.tape.next();
        let sequence = u64::from(self.tape.next());
        let written: Vec<u8> = (0..8).map(|_| self.tape.next()).collect();
        let dirty: Vec<u8> = (0..8).map(|_| self.tape.next()).collect();
        match choice % 4 {
            0 => bitmap::encode_block(self.group_tag, block, sequence, &written, &dirty),
            1 => bitmap::encode_block(
                self.group_tag,
                block.wrapping_add(1),
                sequence,
                &written,
                &dirty,
            ),
            2 => vec![0; len_bytes],
            _ => vec![choice; len_bytes],
        }
    }

    /// A few host requests with sizes and places from the tape, some out of range.
    fn submit_requests(&mut self, engine: &mut Engine) {
        let count = self.tape.next() % (HOST_REQUESTS_MAX + 1);
        let data_bytes = engine.data_bytes().max(1);
        for _ in 0..count {
            let kind = self.tape.next();
            let offset_bytes = (u64::from(self.tape.next_u16()) * 4096) % data_bytes;
            let len_bytes = (1 + u64::from(self.tape.next() % 16)) * 4096;
            let op = match kind % 5 {
                0 => HostOp::Read {
                    offset_bytes,
                    len_bytes,
                },
                1 => {
                    let Some(buffer) = engine.alloc_host_buffer(len_bytes as usize) else {
                        continue;
                    };
                    engine.pool_mut().slice_mut(buffer).fill(kind);
                    HostOp::Write {
                        offset_bytes,
                        buffer,
                        fua: kind & 0x80 != 0,
                    }
                }
                2 => HostOp::Flush,
                3 => HostOp::Trim {
                    offset_bytes,
                    len_bytes,
                },
                _ => HostOp::WriteZeroes {
                    offset_bytes,
                    len_bytes,
                    may_deallocate: kind & 0x20 != 0,
                    fast_only: kind & 0x40 != 0,
                    fua: kind & 0x80 != 0,
                },
            };
            let id = self.next_request_id;
            self.next_request_id += 1;
            engine.submit(HostRequest { id, op });
        }
    }
}
