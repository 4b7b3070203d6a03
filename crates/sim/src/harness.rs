//! A synchronous driver for one engine over in-memory members: every member command completes
//! the moment it is emitted. For focused tests (scrub repair, recovery cases) and the engine
//! micro-benchmark, where the simulator's faults and timing are not wanted.

use std::sync::Arc;
use tessera_raid::engine::{
    Command, CreateSpec, Engine, EngineConfig, GroupEvent, HostError, HostOp, HostRequest, MemberOp,
};
use tessera_raid::geometry::Level;
use tessera_raid::superblock::{JournalMode, Uuid};

pub struct Harness {
    pub engine: Engine,
    pub members: Vec<Vec<u8>>,
    /// (member, 512-byte sector) that fail to read until written.
    pub latent_errors: std::collections::BTreeSet<(usize, u64)>,
    pub events: Vec<GroupEvent>,
    now_us: u64,
    next_id: u64,
    /// Replies seen by `drain`, by request id.
    replies: Vec<(u64, HostReply)>,
}

/// What a host request completed with: read data, or nothing for writes and flushes.
pub type HostReply = Result<Option<Vec<u8>>, HostError>;

impl Harness {
    /// A new group over `members` in-memory members of `member_bytes` each.
    pub fn new(
        level: Level,
        members: usize,
        chunk_bytes: u64,
        member_bytes: u64,
        config: EngineConfig,
        parity: Arc<dyn tessera_parity::Kernel>,
    ) -> Harness {
        Harness::with_journal(
            level,
            members,
            chunk_bytes,
            member_bytes,
            config,
            parity,
            JournalMode::AlwaysOff,
        )
    }

    /// A group for focused tests: 16 MiB in-memory members, a 16 MiB buffer pool, and the
    /// naive parity arithmetic (the reference the kernels are checked against).
    pub fn for_test(level: Level, members: usize, chunk_bytes: u64) -> Harness {
        let config = EngineConfig {
            pool_bytes: 16 << 20,
            ..EngineConfig::default()
        };
        Harness::new(
            level,
            members,
            chunk_bytes,
            16 << 20,
            config,
            Arc::new(tessera_parity::Naive),
        )
    }

    /// Like `new`, with a journal mode.
    pub fn with_journal(
        level: Level,
        members: usize,
        chunk_bytes: u64,
        member_bytes: u64,
        config: EngineConfig,
        parity: Arc<dyn tessera_parity::Kernel>,
        journal_mode: JournalMode,
    ) -> Harness {
        Harness::create(
            level,
            members,
            chunk_bytes,
            member_bytes,
            config,
            parity,
            journal_mode,
            false,
        )
    }

    /// Like `with_journal` (mode `always_on`), with a dedicated journal device of
    /// `member_bytes` as the member after the last role.
    pub fn with_journal_device(
        level: Level,
        members: usize,
        chunk_bytes: u64,
        member_bytes: u64,
        config: EngineConfig,
        parity: Arc<dyn tessera_parity::Kernel>,
    ) -> Harness {
        Harness::create(
            level,
            members,
            chunk_bytes,
            member_bytes,
            config,
            parity,
            JournalMode::AlwaysOn,
            true,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn create(
        level: Level,
        members: usize,
        chunk_bytes: u64,
        member_bytes: u64,
        config: EngineConfig,
        parity: Arc<dyn tessera_parity::Kernel>,
        journal_mode: JournalMode,
        journal_device: bool,
    ) -> Harness {
        let spec = CreateSpec {
            journal_device: journal_device.then_some((Uuid([0xee; 16]), member_bytes)),
            ..group_spec(
                "harness",
                level,
                chunk_bytes,
                members,
                member_bytes,
                journal_mode,
            )
        };
        let engine = Engine::create(spec, config, parity).expect("harness group");
        let mut harness = Harness {
            engine,
            members: (0..members + usize::from(journal_device))
                .map(|_| vec![0u8; member_bytes as usize])
                .collect(),
            latent_errors: Default::default(),
            events: Vec::new(),
            now_us: 0,
            next_id: 1,
            replies: Vec::new(),
        };
        harness.settle();
        harness
    }

    /// Assembles the group again from member images (`None`: the member is absent), as after
    /// a power cut, and lets it start.
    pub fn assemble(
        images: Vec<Option<Vec<u8>>>,
        config: EngineConfig,
        parity: Arc<dyn tessera_parity::Kernel>,
    ) -> Harness {
        let mut harness = Harness::assemble_unstarted(images, config, parity);
        harness.settle();
        harness
    }

    /// Like `assemble`, leaving the start-up commands (such as journal replay) in the engine's
    /// queue for the caller to carry out.
    pub fn assemble_unstarted(
        images: Vec<Option<Vec<u8>>>,
        config: EngineConfig,
        parity: Arc<dyn tessera_parity::Kernel>,
    ) -> Harness {
        let mut probes = Vec::new();
        let mut present = Vec::new();
        for (index, image) in images.iter().enumerate() {
            let Some(image) = image else { continue };
            let copy = |i: usize| {
                let at = tessera_raid::superblock::SUPERBLOCK_OFFSETS[i] as usize;
                &image[at..at + tessera_raid::superblock::SUPERBLOCK_BYTES]
            };
            if let Ok(superblock) = tessera_raid::superblock::newest_copy(copy(0), copy(1)) {
                probes.push(tessera_raid::engine::DeviceProbe { superblock });
                present.push(index);
            }
        }
        let (engine, mapping) = Engine::assemble(probes, config, parity).expect("assembly");
        let count = engine.superblock().members.len();
        let mut members = vec![Vec::new(); count];
        let mut images = images;
        for (probe, member) in mapping.into_iter().enumerate() {
            let member = member.expect("every probe is a member");
            members[member] = images[present[probe]].take().expect("present image");
        }
        Harness {
            engine,
            members,
            latent_errors: Default::default(),
            events: Vec::new(),
            now_us: 0,
            next_id: 1,
            replies: Vec::new(),
        }
    }

    /// Fills `buffer` from member `member`'s image at `offset_bytes`, as a fault-free read
    /// would; returns the filled bytes.
    pub fn read_member_image(
        &mut self,
        member: usize,
        offset_bytes: u64,
        buffer: tessera_buffer::BufferSlice,
    ) -> &mut [u8] {
        read_image(
            self.engine.pool_mut(),
            &self.members[member],
            offset_bytes,
            buffer,
        )
    }

    /// Carries out every command the engine has until it has none; returns replies seen.
    pub fn drain(&mut self) -> usize {
        let mut replies = 0;
        while let Some(command) = self.engine.poll() {
            match command {
                Command::Member(command) => {
                    let sectors = |offset: u64, len: usize| {
                        (command.member, offset / 512)
                            ..(command.member, (offset + len as u64).div_ceil(512))
                    };
                    let result = match command.op.zeroes_as_write() {
                        MemberOp::Read {
                            offset_bytes,
                            buffer,
                            ..
                        } => {
                            if self
                                .latent_errors
                                .range(sectors(offset_bytes, buffer.len()))
                                .next()
                                .is_some()
                            {
                                Err(tessera_raid::engine::MemberError::Io)
                            } else {
                                self.read_member_image(command.member, offset_bytes, buffer);
                                Ok(())
                            }
                        }
                        // Every write is durable here: the harness has no power cuts.
                        MemberOp::Write {
                            offset_bytes,
                            buffer,
                            ..
                        } => {
                            let len = write_image(
                                self.engine.pool(),
                                &mut self.members[command.member],
                                offset_bytes,
                                buffer,
                            );
                            let healed: Vec<_> = self
                                .latent_errors
                                .range(sectors(offset_bytes, len))
                                .copied()
                                .collect();
                            for sector in healed {
                                self.latent_errors.remove(&sector);
                            }
                            Ok(())
                        }
                        MemberOp::Flush => Ok(()),
                        MemberOp::WriteZeroes { .. } => unreachable!("taken as a write"),
                    };
                    self.engine.complete(command.id, result);
                }
                Command::Reply(reply) => {
                    replies += 1;
                    let result = reply.result.map(|buffer| {
                        buffer.map(|buffer| {
                            let data = self.engine.pool().slice(buffer).to_vec();
                            self.engine.pool_mut().free(buffer);
                            data
                        })
                    });
                    self.replies.push((reply.id, result));
                }
                Command::Event(event) => self.events.push(event),
                Command::Compute(command) => {
                    self.engine.run_compute(&command.job);
                    self.engine.compute_done(command.id);
                }
            }
        }
        replies
    }

    /// Runs until the engine is idle and its background work is done, advancing time.
    pub fn settle(&mut self) {
        for _ in 0..10_000_000 {
            self.drain();
            if self.engine.is_idle() && !self.engine.has_background_work() {
                return;
            }
            self.now_us = self
                .engine
                .next_deadline_us()
                .map_or(self.now_us + 1000, |deadline| deadline.max(self.now_us + 1));
            self.engine.tick(self.now_us);
        }
        panic!("the engine did not settle: {}", self.engine.debug_summary());
    }

    /// Advances time by `us` (ticking as it goes).
    pub fn advance(&mut self, us: u64) {
        self.now_us += us;
        self.engine.tick(self.now_us);
        self.drain();
    }

    /// Lets `us` pass without a tick, as an event loop busy with other work does, and tells
    /// the engine the time before the next event.
    pub fn pass_time_untold(&mut self, us: u64) {
        self.now_us += us;
        self.engine.advance_clock(self.now_us);
    }

    /// Submits a request without waiting for it; returns its id.
    pub fn submit(&mut self, op: HostOp) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.engine.submit(HostRequest { id, op });
        id
    }

    /// Whether request `id` was answered (its reply is kept for `write`/`read` to take).
    pub fn answered(&self, id: u64) -> bool {
        self.replies.iter().any(|(reply, _)| *reply == id)
    }

    /// Takes the reply to request `id`, if `drain` has seen it.
    pub fn take_reply(&mut self, id: u64) -> Option<HostReply> {
        let at = self.replies.iter().position(|(reply, _)| *reply == id)?;
        Some(self.replies.remove(at).1)
    }

    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// Submits a write without waiting for it (the caller carries out the commands).
    pub fn submit_write(&mut self, offset_bytes: u64, data: &[u8]) -> u64 {
        let buffer = self
            .engine
            .alloc_host_buffer(data.len())
            .expect("host buffer");
        self.engine
            .pool_mut()
            .slice_mut(buffer)
            .copy_from_slice(data);
        let id = self.next_id;
        self.next_id += 1;
        self.engine.submit(HostRequest {
            id,
            op: HostOp::Write {
                offset_bytes,
                buffer,
                fua: false,
            },
        });
        id
    }

    fn request(&mut self, op: HostOp) -> HostReply {
        let id = self.submit(op);
        for _ in 0..1_000_000 {
            self.drain();
            if let Some(at) = self.replies.iter().position(|(reply, _)| *reply == id) {
                return self.replies.remove(at).1;
            }
            self.now_us += 10;
            self.engine.tick(self.now_us);
        }
        panic!("request {id} not answered: {}", self.engine.debug_summary());
    }

    pub fn write(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), HostError> {
        let buffer = self
            .engine
            .alloc_host_buffer(data.len())
            .expect("host buffer");
        self.engine
            .pool_mut()
            .slice_mut(buffer)
            .copy_from_slice(data);
        self.request(HostOp::Write {
            offset_bytes,
            buffer,
            fua: false,
        })
        .map(|_| ())
    }

    pub fn read(&mut self, offset_bytes: u64, len_bytes: u64) -> Result<Vec<u8>, HostError> {
        self.request(HostOp::Read {
            offset_bytes,
            len_bytes,
        })
        .map(|data| data.expect("read data"))
    }

    pub fn read_around(
        &mut self,
        offset_bytes: u64,
        len_bytes: u64,
        copy: u8,
    ) -> Result<Vec<u8>, HostError> {
        self.request(HostOp::ReadAround {
            offset_bytes,
            len_bytes,
            copy,
        })
        .map(|data| data.expect("read data"))
    }

    pub fn flush(&mut self) -> Result<(), HostError> {
        self.request(HostOp::Flush).map(|_| ())
    }

    /// Where a member's data area starts.
    pub fn data_offset_bytes(&self) -> u64 {
        self.engine.superblock().data_offset_bytes
    }
}

/// A member read carried out on an in-memory image: its bytes at `offset_bytes` into the
/// buffer, which is returned.
pub fn read_image<'a>(
    pool: &'a mut tessera_buffer::BufferPool,
    image: &[u8],
    offset_bytes: u64,
    buffer: tessera_buffer::BufferSlice,
) -> &'a mut [u8] {
    let start = offset_bytes as usize;
    let out = pool.bytes_mut(buffer);
    out.copy_from_slice(&image[start..start + out.len()]);
    out
}

/// A member write carried out on an in-memory image; how many bytes it wrote.
pub fn write_image(
    pool: &tessera_buffer::BufferPool,
    image: &mut [u8],
    offset_bytes: u64,
    buffer: tessera_buffer::BufferSlice,
) -> usize {
    let start = offset_bytes as usize;
    let data = pool.bytes(buffer);
    image[start..start + data.len()].copy_from_slice(data);
    data.len()
}

/// A new group of `members` members of `member_bytes` each, numbered from 1, as the harness
/// and the closed loop make them: default regions, a 1 MiB journal area, rebuilds unpaced.
pub fn group_spec(
    name: &str,
    level: Level,
    chunk_bytes: u64,
    members: usize,
    member_bytes: u64,
    journal_mode: JournalMode,
) -> CreateSpec {
    CreateSpec {
        group_uuid: Uuid([9; 16]),
        name: name.into(),
        level,
        chunk_bytes,
        members: (0..members)
            .map(|i| (Uuid([i as u8 + 1; 16]), member_bytes))
            .collect(),
        created_unix_seconds: 0,
        region_bytes: None,
        journal_bytes: Some(1 << 20),
        journal_mode,
        journal_device: None,
        rebuild_rate_percent: 100,
        config: Vec::new(),
    }
}
