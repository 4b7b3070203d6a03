//! The engine's vocabulary with the outside world: requests in, commands and replies out.

use crate::plan::Recovery;
use crate::superblock::Uuid;
use std::fmt;
use tessera_buffer::{BufferId, BufferSlice};

/// Names one member command in flight; echoed back in its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommandId(pub u64);

/// A request from a host (through a virtual drive) against the group's data space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostRequest {
    /// Chosen by the caller, echoed in the reply.
    pub id: u64,
    pub op: HostOp,
}

/// What a host asks for. Offsets and lengths are bytes of the group's data space, multiples of
/// `SECTOR_BYTES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostOp {
    /// Read; the reply carries a buffer of `len_bytes` that the caller frees.
    Read { offset_bytes: u64, len_bytes: u64 },
    /// Write the contents of `buffer` (allocated from the engine's pool, its whole length);
    /// the engine frees it. With `fua`, the reply waits until the write is durable.
    Write {
        offset_bytes: u64,
        buffer: BufferId,
        fua: bool,
    },
    /// Read the range from the group's redundancy instead of copy `copy` of it, for a client
    /// that found what a plain read returned to be wrong (a checksum above the engine). On
    /// parity levels `copy` numbers the chunks the range touches: the `copy`-th is
    /// reconstructed from the rest of its stripe and the others are read as they are (a range
    /// over two chunks has two versions to try). On mirrors the member holding copy `copy` is
    /// not read. Where there is no
    /// other source (degraded beyond it, or a region awaiting resync) the data is read as a
    /// plain read would. Nothing is rewritten; the reply carries a buffer as for `Read`. A
    /// copy the level does not have fails with `HostError::Io`.
    ReadAround {
        offset_bytes: u64,
        len_bytes: u64,
        copy: u8,
    },
    /// Make every write completed before this request durable.
    Flush,
    /// The host no longer needs the range. Whole regions become unwritten (read as zeroes);
    /// the rest is left as it is.
    Trim { offset_bytes: u64, len_bytes: u64 },
    /// Make the range read as zeroes. `may_deallocate` allows dropping whole regions instead
    /// of writing zeroes; `fast_only` refuses (with `HostError::NotFast`) when that is not
    /// possible for all of the range.
    WriteZeroes {
        offset_bytes: u64,
        len_bytes: u64,
        may_deallocate: bool,
        fast_only: bool,
        fua: bool,
    },
}

/// The answer to a host request.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub id: u64,
    /// For reads, the buffer holding the data (the caller frees it).
    pub result: Result<Option<BufferId>, HostError>,
}

/// Why a host request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostError {
    /// Offset or length not sector-aligned or beyond the group's data space.
    OutOfRange,
    /// The data cannot be read or written: the group lost more members than its redundancy,
    /// or the range holds data lost in an earlier failure (a recorded bad range).
    Io,
    /// Zeroing would not be fast (`fast_only` was set).
    NotFast,
    /// The engine is stopping and takes no new work.
    ShuttingDown,
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            HostError::OutOfRange => "request outside the group's data space or misaligned",
            HostError::Io => "data unavailable (group failed or range lost)",
            HostError::NotFast => "zeroing would not be fast",
            HostError::ShuttingDown => "the group is shutting down",
        };
        f.write_str(text)
    }
}

impl std::error::Error for HostError {}

/// How a member command failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberError {
    /// The device reported an I/O error (EIO, a short transfer): for a read, a latent sector
    /// error to be repaired from redundancy; for a write or flush, the member fails.
    Io,
    /// The device is gone (unplugged, connection lost): the member fails.
    Gone,
}

/// What a member command does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberOp {
    /// Read `buffer.len()` bytes at `offset_bytes` of the member device into `buffer`.
    Read {
        offset_bytes: u64,
        buffer: BufferSlice,
        /// `Some(id)`: the bytes are host request `id`'s alone. Once the read completes, the
        /// engine neither reads nor writes `buffer` but hands it over in the request's reply
        /// (or frees it with an error reply), so the member-I/O layer may carry the bytes to
        /// the host another way (a splice from the member to the host's socket) and leave
        /// `buffer` as it was. Set only on a host read's own pieces, never on reads whose
        /// bytes the engine computes with or writes elsewhere.
        for_host: Option<u64>,
    },
    /// Write `buffer` at `offset_bytes` of the member device. With `fua` (force unit access)
    /// it completes only once these bytes are durable; the member's other writes are not made
    /// durable by it.
    Write {
        offset_bytes: u64,
        buffer: BufferSlice,
        fua: bool,
    },
    /// Make `buffer.len()` bytes at `offset_bytes` of the member device read as zeroes.
    /// `buffer` holds zeroes, so writing it is one way; a member that can zero a range without
    /// moving data (NVMe Write Zeroes, `fallocate` on a file) may do that instead. Durable, like
    /// a write, after the next `Flush`.
    WriteZeroes {
        offset_bytes: u64,
        buffer: BufferSlice,
    },
    /// Durability barrier: every write to this member completed before it is durable when it
    /// completes.
    Flush,
}

impl MemberOp {
    /// A `WriteZeroes` as the plain write of its zero buffer; other operations as they are:
    /// for members that have no cheaper way to zero a range.
    pub fn zeroes_as_write(self) -> MemberOp {
        match self {
            MemberOp::WriteZeroes {
                offset_bytes,
                buffer,
            } => MemberOp::Write {
                offset_bytes,
                buffer,
                fua: false,
            },
            op => op,
        }
    }
}

/// A member command: carry it out and report `Engine::complete(id, result)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberCommand {
    pub id: CommandId,
    /// The engine's member index.
    pub member: usize,
    pub op: MemberOp,
}

/// Names one parity computation handed out; echoed back in `Engine::compute_done`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ComputeId(pub u64);

/// Full-stripe parity arithmetic handed to the environment (with
/// `EngineConfig::offload_parity`), so that it can be batched with others and sent to the
/// fastest parity engine (a GPU). Carry it out on the buffers and report
/// `Engine::compute_done(id)`; the engine keeps every buffer named live and untouched until
/// then, as for member I/O. `Engine::run_compute` does it with the engine's own kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeCommand {
    pub id: ComputeId,
    pub job: ComputeJob,
}

/// What a handed-out computation does. Every slice has the same length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComputeJob {
    /// P (`parity` holds one slice) or P and Q (two) of the data chunks, given in position
    /// order (Q coefficient 2^i for `data[i]`).
    Parity {
        data: Vec<BufferSlice>,
        parity: Vec<BufferSlice>,
    },
    /// The lost data chunks that `recovery` names are written into their slices of `data` (the
    /// others are read), from the surviving chunks and the parity the recovery uses.
    Recover {
        recovery: Recovery,
        data: Vec<BufferSlice>,
        p: Option<BufferSlice>,
        q: Option<BufferSlice>,
    },
}

impl ComputeJob {
    /// Bytes of data chunks the job stands for (lost ones included): the unit of parity
    /// throughput.
    pub fn data_bytes(&self) -> u64 {
        let data = match self {
            ComputeJob::Parity { data, .. } | ComputeJob::Recover { data, .. } => data,
        };
        data.iter().map(|slice| slice.len() as u64).sum()
    }
}

/// What the engine asks of its environment.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Member(MemberCommand),
    Reply(Reply),
    Event(GroupEvent),
    /// Parity work to carry out (only with `EngineConfig::offload_parity`).
    Compute(ComputeCommand),
}

/// Something an operator should hear about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupEvent {
    /// The group's state changed.
    StateChanged { from: GroupState, to: GroupState },
    /// A member failed and holds no data until rebuilt.
    MemberFailed {
        member: usize,
        uuid: Uuid,
        reason: FailReason,
    },
    /// A member is being rebuilt into a role.
    RebuildStarted { member: usize, role: usize },
    /// A rebuild finished; the member is in sync.
    RebuildFinished { member: usize, role: usize },
    /// A read error was repaired by rewriting data recovered from redundancy.
    ReadErrorRepaired {
        member: usize,
        offset_bytes: u64,
        len_bytes: u64,
    },
    /// Data of the group lost beyond redundancy; reads of the range fail.
    DataLost { offset_bytes: u64, len_bytes: u64 },
    /// Resync after an unclean shutdown finished.
    ResyncFinished { regions: u64 },
    /// The engine finished starting and serves requests.
    Started,
    /// A scrub ended.
    ScrubFinished(crate::engine::ScrubResult),
    /// The journal was replayed at assembly; `complete` is false when some of it could not be
    /// read or applied (the group then falls back to resync).
    JournalReplayed { entries: u64, complete: bool },
}

/// Why a member failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailReason {
    WriteError,
    FlushError,
    Gone,
    /// Failed by an administrator.
    Admin,
    /// Absent when the group was assembled.
    Missing,
}

impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            FailReason::WriteError => "write error",
            FailReason::FlushError => "flush error",
            FailReason::Gone => "device gone",
            FailReason::Admin => "failed by administrator",
            FailReason::Missing => "missing at assembly",
        };
        f.write_str(text)
    }
}

/// The state of a drive group, as operators see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// Writing its initial metadata or reading its bitmap; requests wait.
    Starting,
    Optimal,
    /// Redundancy is reduced (a member failed or is missing), data is intact.
    Degraded,
    /// A member is being rebuilt.
    Rebuilding,
    /// Parity or mirrors are being made consistent after an unclean shutdown.
    Resyncing,
    /// More members lost than the redundancy: every request fails.
    Failed,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Starting => "initializing",
            GroupState::Optimal => "optimal",
            GroupState::Degraded => "degraded",
            GroupState::Rebuilding => "rebuilding",
            GroupState::Resyncing => "resyncing",
            GroupState::Failed => "failed",
        }
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Tunables of one engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Size of the buffer arena.
    pub pool_bytes: usize,
    /// How long a partial-stripe write that continues a sequential stream waits for the rest of
    /// its stripe.
    pub coalesce_window_us: u64,
    /// How long a dirty region stays idle before its write-intent bit is cleared.
    pub dirty_clear_delay_us: u64,
    /// Stripes rebuilt (or scrubbed) at once, at most.
    pub rebuild_window: usize,
    /// Chunk bytes rebuilt (or chunks of stripes scrubbed) at once, at most: with large chunks
    /// fewer stripes are in flight, so the arena is not filled by background work. At least
    /// one stripe always goes.
    pub rebuild_window_bytes: u64,
    /// Stripes resynced at once.
    pub resync_window: usize,
    /// Rebuild progress is recorded in the superblock at least this often (member bytes).
    pub rebuild_checkpoint_bytes: u64,
    /// Hand full-stripe parity work (full-stripe writes, rebuild, resync, scrub) out as
    /// `Command::Compute` instead of computing it inline; read-modify-write updates and
    /// degraded host reads always stay inline. Changeable with `Engine::set_offload_parity`.
    pub offload_parity: bool,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            pool_bytes: 64 << 20,
            coalesce_window_us: 200,
            dirty_clear_delay_us: 2_000_000,
            rebuild_window: 4,
            rebuild_window_bytes: u64::MAX,
            resync_window: 4,
            rebuild_checkpoint_bytes: 64 << 20,
            offload_parity: false,
        }
    }
}

/// Why an administrative request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminError {
    /// The group has no such role.
    NoSuchRole(usize),
    /// The group has failed; it takes no changes.
    GroupFailed,
    /// The device is smaller than a member's metadata plus data area.
    TooSmall { size_bytes: u64, needed_bytes: u64 },
    /// A rebuild is already running; one at a time.
    RebuildRunning,
    /// The device is already a member.
    AlreadyMember,
    /// The member table is full.
    TooManyMembers,
    /// The buffer pool has no room right now for the new member's superblock buffer; the
    /// request may be retried once I/O drains.
    PoolFull,
    /// No member has that index (or it holds no role).
    NoSuchMember(usize),
    /// The member is not failed.
    NotFailed(usize),
    /// Another member already holds the role.
    RoleTaken(usize),
    /// A scrub is already running.
    ScrubRunning,
    /// The operation needs every member in sync.
    NotOptimal,
    /// A value outside what the setting accepts.
    BadValue(&'static str),
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminError::NoSuchRole(role) => write!(f, "the group has no role {role}"),
            AdminError::GroupFailed => write!(f, "the group has failed"),
            AdminError::TooSmall {
                size_bytes,
                needed_bytes,
            } => {
                write!(
                    f,
                    "device of {size_bytes} bytes is smaller than the {needed_bytes} bytes a member needs"
                )
            }
            AdminError::RebuildRunning => write!(f, "a rebuild is already running"),
            AdminError::AlreadyMember => write!(f, "the device is already a member"),
            AdminError::TooManyMembers => write!(f, "the member table is full"),
            AdminError::PoolFull => {
                write!(
                    f,
                    "the buffer pool is full right now; retry when I/O drains"
                )
            }
            AdminError::NoSuchMember(member) => write!(f, "no member {member} with a role"),
            AdminError::NotFailed(member) => write!(f, "member {member} is not failed"),
            AdminError::RoleTaken(role) => write!(f, "role {role} is held by another member"),
            AdminError::ScrubRunning => write!(f, "a scrub is already running"),
            AdminError::NotOptimal => write!(f, "the group is not optimal"),
            AdminError::BadValue(what) => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for AdminError {}
