//! Member I/O for Tessera: the only code that makes system calls on member devices and on the
//! data plane's sockets.
//!
//! **Architecture invariant:** the RAID engine above is sans-I/O. It emits member reads, writes
//! and flushes; the daemon's event loop (one thread per core) turns them into [`Operation`]s on
//! its [`Driver`], together with the NBD sockets' receives and sends, and hands the
//! [`Completion`]s back.
//!
//! - [`Driver`]: asynchronous operations keyed by caller tokens, submitted in batches.
//!   [`UringDriver`] (io_uring: batched submission, registered buffers, a fixed slot table so
//!   the completion queue never overflows) and [`PollDriver`] (poll(2) for sockets,
//!   synchronous file I/O) implement it; [`open_driver`] picks one and says why it fell back.
//! - Members: [`open_member`] opens a block device (exclusively) or a file with O_DIRECT and a
//!   buffered twin for unaligned requests ([`MemberDevice::fd_for`] picks per request), and
//!   finds out whether the file can do non-blocking I/O: tmpfs cannot, so io_uring would hand
//!   each of its requests to a kernel worker thread, and [`MemberDevice::attach_to`] makes the
//!   driver run them inline instead; [`MemoryMember`] is an in-memory device;
//!   [`RemoteMember`] is an NBD export served by its own sender and receiver threads, which
//!   wake the event loop through an eventfd.
//! - [`Pipe`]: splice(2) from a member file in the page cache to a socket, so that a host
//!   read's bytes skip the engine's buffers (the daemon's NBD path for tmpfs-like members).
//! - Errors are values: [`IoError`], with "device gone" told apart.
//!
//! Tests: `cargo test -p tessera-io` (a few seconds). The loop-device tests need root and
//! `losetup`, the nbdkit tests need `nbdkit`; each skips with a message when it cannot run.
//! Benchmark: `cargo run --release -p tessera-io --bin io-bench` (see its `--help`): 4 KiB
//! random reads at QD32 on a tmpfs file through each driver configuration.

mod driver;
mod error;
mod member;
mod memory;
mod pipe;
mod poll;
mod remote;
mod select;
mod sync_member;
mod sys;
mod uring;
mod wake;

pub use driver::{Completion, Driver, Operation, SEND_PARTS_MAX, SendParts};
pub use error::{IoError, errno_means_gone, errno_text};
pub use member::{MemberDevice, MemberKind, ZeroMethod, create_file_member, open_member};
pub use memory::MemoryMember;
pub use pipe::{Pipe, send_nonblocking};
pub use poll::PollDriver;
pub use remote::{GONE_ERRNO, RemoteMember};
pub use select::{AnyDriver, DriverChoice, DriverKind, OpenedDriver, open_driver};
pub use sync_member::SyncMember;
pub use uring::{
    DEFAULT_COMPLETION_ENTRIES, DEFAULT_RING_ENTRIES, INLINE_BYTES_MAX, Unavailable, UringConfig,
    UringDriver,
};
pub use wake::EventFd;
