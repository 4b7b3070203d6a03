//! The io_uring driver.
//!
//! Every operation in the kernel owns one slot of a fixed table (its index is the SQE's
//! user_data), allocated up front with as many slots as the completion queue has entries: the
//! completion queue can therefore never overflow. Operations beyond that, or that find the
//! submission queue full, wait in a backlog and are handed to the kernel as room appears; none
//! is ever dropped. Sends that the kernel completes short are resumed from their slot.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use io_uring::types::{Fd, FsyncFlags, SubmitArgs, Timespec};
use io_uring::{EnterFlags, IoUring, Probe, opcode, squeue};

use crate::driver::{Completion, Driver, Operation, SEND_PARTS_MAX, descriptor};
use crate::error::{IoError, errno_text};
use crate::sys;

/// Submission queue entries of a ring made by [`UringDriver::new`].
pub const DEFAULT_RING_ENTRIES: u32 = 256;
/// Completion queue entries, and so the most operations in the kernel at once, of a ring made
/// by [`UringDriver::new`]: room for many idle connections (each with a receive waiting) and
/// deep member queues. 16 bytes each.
pub const DEFAULT_COMPLETION_ENTRIES: u32 = 4096;

/// The largest read or write run inline on a descriptor marked so: a larger copy goes to
/// io_uring's worker threads, where it runs beside the event loop on another core (as it
/// does for fio on the same files) instead of holding the loop up.
pub const INLINE_BYTES_MAX: u32 = 32 << 10;

/// The kernel refuses registered buffers larger than 1 GiB; larger arenas use several.
const REGISTERED_BUFFER_BYTES_MAX: usize = 1 << 30;

/// How long dropping a driver waits for cancelled operations to finish.
const DROP_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// user_data of cancellation requests made when the driver is dropped (no slot has it).
const CANCEL_USER_DATA: u64 = u64::MAX;

/// Opcodes the driver uses, with the kernel version that brought each (for the message).
const REQUIRED_OPCODES: [(u8, &str); 9] = [
    (opcode::Read::CODE, "IORING_OP_READ (5.6)"),
    (opcode::Write::CODE, "IORING_OP_WRITE (5.6)"),
    (opcode::ReadFixed::CODE, "IORING_OP_READ_FIXED (5.1)"),
    (opcode::WriteFixed::CODE, "IORING_OP_WRITE_FIXED (5.1)"),
    (opcode::Fsync::CODE, "IORING_OP_FSYNC (5.1)"),
    (opcode::Recv::CODE, "IORING_OP_RECV (5.6)"),
    (opcode::SendMsg::CODE, "IORING_OP_SENDMSG (5.3)"),
    (opcode::Accept::CODE, "IORING_OP_ACCEPT (5.5)"),
    (opcode::PollAdd::CODE, "IORING_OP_POLL_ADD (5.1)"),
];

/// How a ring is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UringConfig {
    /// Submission queue entries (a power of two up to 32768): the most operations handed to
    /// the kernel per system call.
    pub entries: u32,
    /// Completion queue entries (a power of two, at least `entries`, at most 65536): the most
    /// operations in the kernel at once. Operations that may wait indefinitely (a receive on
    /// an idle connection, a poll, an accept) hold one each; beyond the limit, operations wait
    /// in the driver until others complete.
    pub completion_entries: u32,
    /// Only the thread that first uses the driver may submit (IORING_SETUP_SINGLE_ISSUER),
    /// and finished work is posted only when it waits (DEFER_TASKRUN): fewer interrupts and
    /// context switches. Falls back to cooperative task running (COOP_TASKRUN) on kernels
    /// before 6.1, and to a plain ring before 5.19.
    pub single_issuer: bool,
}

impl Default for UringConfig {
    fn default() -> Self {
        UringConfig {
            entries: DEFAULT_RING_ENTRIES,
            completion_entries: DEFAULT_COMPLETION_ENTRIES,
            single_issuer: true,
        }
    }
}

/// The setup flags a ring got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SetupMode {
    /// SINGLE_ISSUER | DEFER_TASKRUN | R_DISABLED.
    SingleIssuer,
    /// COOP_TASKRUN.
    Cooperative,
    /// No flags.
    Plain,
}

/// Why io_uring cannot be used, as a sentence for the daemon to report once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable(pub String);

/// One operation in the kernel.
struct Slot {
    /// Whether an operation owns the slot.
    busy: bool,
    token: u64,
    operation: Operation,
    /// For sends: bytes already sent by earlier, short completions.
    sent_bytes: u64,
    /// For sends: what the kernel reads, kept here so it stays put until completion.
    iovecs: [libc::iovec; SEND_PARTS_MAX],
    message: libc::msghdr,
}

/// An io_uring instance with its slot table and backlog. Make it anywhere (and register the
/// arena there); in single-issuer mode (the default) the thread that first waits or flushes
/// owns it for good: only that thread may use it afterwards, and it should drop it, since
/// dropping waits for operations still in the kernel.
pub struct UringDriver {
    ring: IoUring,
    /// Boxed so the iovecs and message headers of sends never move while the kernel uses them.
    slots: Box<[Slot]>,
    free_slots: Vec<u32>,
    /// Operations not yet in the submission queue, in submission order.
    backlog: VecDeque<(u64, Operation)>,
    /// Slots of short sends whose remainder must be queued again.
    resume: Vec<u32>,
    /// Completions (user_data, result) taken from the ring and not yet processed.
    reaped: Vec<(u64, i32)>,
    /// Start and length of each registered buffer; the index is the buffer index.
    registered: Vec<(usize, usize)>,
    /// Completions known before the next `wait`: operations run inline, and those reaped by
    /// `flush_submissions`.
    ready: Vec<Completion>,
    /// Indexed by descriptor: file operations on it run synchronously at submission.
    inline_fds: Vec<bool>,
    /// False until the first use enables a ring made disabled (single-issuer mode).
    enabled: bool,
    mode: SetupMode,
    /// Cancellations issued by `drop`.
    cancels_in_flight: usize,
    /// Reads and writes submitted as READ_FIXED / WRITE_FIXED.
    fixed_submissions: u64,
    /// How long `wait` looks for completions before it sleeps (`Driver::set_busy_poll`).
    busy_poll: Duration,
    /// Whether the next wait busy-polls: the last busy poll found something, or the last
    /// sleep ended within the window (so a poll would have).
    busy_poll_armed: bool,
    /// Looks at the ring that busy polls made so far.
    busy_polls: u64,
}

// SAFETY: the raw pointers the driver holds (in slots and the backlog) are only handed to the
// kernel; `Driver::submit`'s contract keeps the memory valid whichever thread waits, and the
// ring itself may be used from any one thread at a time.
unsafe impl Send for UringDriver {}

impl UringDriver {
    /// A ring with the default configuration.
    pub fn new() -> Result<UringDriver, Unavailable> {
        Self::with_config(UringConfig::default())
    }

    /// A ring set up as `config` asks, falling back to what the kernel supports.
    pub fn with_config(config: UringConfig) -> Result<UringDriver, Unavailable> {
        let entries = config.entries;
        let completion_entries = config.completion_entries;
        assert!(
            entries.is_power_of_two() && entries <= 32768,
            "bad ring size {entries}"
        );
        assert!(
            completion_entries.is_power_of_two()
                && completion_entries >= entries
                && completion_entries <= 65536,
            "bad completion queue size {completion_entries}"
        );
        let build = |mode: SetupMode| {
            let mut builder = IoUring::builder();
            builder.setup_cqsize(completion_entries);
            match mode {
                SetupMode::SingleIssuer => {
                    builder
                        .setup_single_issuer()
                        .setup_defer_taskrun()
                        .setup_r_disabled();
                }
                SetupMode::Cooperative => {
                    builder.setup_coop_taskrun();
                }
                SetupMode::Plain => {}
            }
            builder.build(entries)
        };
        let modes: &[SetupMode] = if config.single_issuer {
            &[
                SetupMode::SingleIssuer,
                SetupMode::Cooperative,
                SetupMode::Plain,
            ]
        } else {
            &[SetupMode::Cooperative, SetupMode::Plain]
        };
        let mut last_error = None;
        let mut made = None;
        for &mode in modes {
            match build(mode) {
                Ok(ring) => {
                    made = Some((ring, mode));
                    break;
                }
                // EINVAL: a flag this kernel does not know; try the next mode.
                Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
                    last_error = Some(error)
                }
                Err(error) => return Err(unavailable("io_uring_setup", &error)),
            }
        }
        let Some((ring, mode)) = made else {
            return Err(unavailable(
                "io_uring_setup",
                &last_error.expect("a mode was tried"),
            ));
        };
        let params = ring.params();
        if !params.is_feature_nodrop() || !params.is_feature_ext_arg() {
            return Err(Unavailable(
                "io_uring unavailable: the kernel lacks IORING_FEAT_EXT_ARG (Linux 5.11)".into(),
            ));
        }
        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|error| unavailable("IORING_REGISTER_PROBE", &error))?;
        for (code, name) in REQUIRED_OPCODES {
            if !probe.is_supported(code) {
                return Err(Unavailable(format!(
                    "io_uring unavailable: the kernel lacks {name}"
                )));
            }
        }
        let slot_count = params.cq_entries() as usize;
        let slots = (0..slot_count)
            .map(|_| Slot {
                busy: false,
                token: 0,
                operation: Operation::PollReadable { fd: -1 },
                sent_bytes: 0,
                iovecs: [libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                }; SEND_PARTS_MAX],
                // SAFETY: msghdr is plain data; all-zero is an empty header.
                message: unsafe { std::mem::zeroed() },
            })
            .collect();
        Ok(UringDriver {
            ring,
            slots,
            free_slots: (0..slot_count as u32).rev().collect(),
            backlog: VecDeque::new(),
            resume: Vec::new(),
            reaped: Vec::with_capacity(slot_count),
            registered: Vec::new(),
            ready: Vec::new(),
            inline_fds: Vec::new(),
            enabled: mode != SetupMode::SingleIssuer,
            mode,
            cancels_in_flight: 0,
            fixed_submissions: 0,
            busy_poll: Duration::ZERO,
            busy_poll_armed: true,
            busy_polls: 0,
        })
    }

    /// The setup flags the ring got, for reports: "single issuer, deferred task running",
    /// "cooperative task running" or "plain".
    pub fn setup_description(&self) -> &'static str {
        match self.mode {
            SetupMode::SingleIssuer => "single issuer, deferred task running",
            SetupMode::Cooperative => "cooperative task running",
            SetupMode::Plain => "plain",
        }
    }

    /// Submission queue entries of the ring.
    pub fn ring_entries(&self) -> u32 {
        self.ring.params().sq_entries()
    }

    /// Reads and writes that used the registered arena (READ_FIXED / WRITE_FIXED) so far.
    pub fn fixed_submissions(&self) -> u64 {
        self.fixed_submissions
    }

    /// Looks at the ring that busy polls made so far: what shows that a wait polled rather
    /// than slept, whatever share of the CPU the thread got meanwhile.
    pub fn busy_polls(&self) -> u64 {
        self.busy_polls
    }

    /// Operations in the kernel.
    fn slots_in_use(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    /// The registered buffer holding all of `pointer .. pointer + len_bytes`, if any; counts
    /// the fixed submissions it enables.
    fn fixed_buffer(&mut self, pointer: usize, len_bytes: u32) -> Option<u16> {
        let end = pointer.checked_add(len_bytes as usize)?;
        let index = self
            .registered
            .iter()
            .position(|&(start, len)| pointer >= start && end <= start + len)?;
        self.fixed_submissions += 1;
        Some(u16::try_from(index).expect("at most 65535 registered buffers"))
    }

    /// The SQE for the operation in `slot`, its user_data set.
    fn prepare(&mut self, slot_index: u32) -> squeue::Entry {
        let operation = self.slots[slot_index as usize].operation;
        let entry = match operation {
            Operation::Read {
                fd,
                offset_bytes,
                buffer,
                len_bytes,
            } => match self.fixed_buffer(buffer as usize, len_bytes) {
                Some(index) => opcode::ReadFixed::new(Fd(fd), buffer, len_bytes, index)
                    .offset(offset_bytes)
                    .build(),
                None => opcode::Read::new(Fd(fd), buffer, len_bytes)
                    .offset(offset_bytes)
                    .build(),
            },
            Operation::Write {
                fd,
                offset_bytes,
                buffer,
                len_bytes,
                fua,
            } => {
                let rw_flags = if fua { libc::RWF_DSYNC } else { 0 };
                match self.fixed_buffer(buffer as usize, len_bytes) {
                    Some(index) => opcode::WriteFixed::new(Fd(fd), buffer, len_bytes, index)
                        .offset(offset_bytes)
                        .rw_flags(rw_flags)
                        .build(),
                    None => opcode::Write::new(Fd(fd), buffer, len_bytes)
                        .offset(offset_bytes)
                        .rw_flags(rw_flags)
                        .build(),
                }
            }
            Operation::Fsync { fd } => opcode::Fsync::new(Fd(fd))
                .flags(FsyncFlags::DATASYNC)
                .build(),
            Operation::Fallocate {
                fd,
                mode,
                offset_bytes,
                len_bytes,
            } => opcode::Fallocate::new(Fd(fd), len_bytes)
                .offset(offset_bytes)
                .mode(mode)
                .build(),
            Operation::Recv {
                fd,
                buffer,
                len_bytes,
            } => opcode::Recv::new(Fd(fd), buffer, len_bytes).build(),
            Operation::Send { fd, parts } => {
                let slot = &mut self.slots[slot_index as usize];
                let used = parts.iovecs_after(slot.sent_bytes, &mut slot.iovecs);
                slot.message.msg_iov = slot.iovecs.as_mut_ptr();
                slot.message.msg_iovlen = used as _;
                // MSG_WAITALL makes the kernel itself retry short sends on stream sockets.
                let flags = (libc::MSG_NOSIGNAL | libc::MSG_WAITALL) as u32;
                opcode::SendMsg::new(Fd(fd), &slot.message)
                    .flags(flags)
                    .build()
            }
            Operation::Accept { fd } => {
                opcode::Accept::new(Fd(fd), std::ptr::null_mut(), std::ptr::null_mut())
                    .flags(libc::SOCK_CLOEXEC)
                    .build()
            }
            Operation::PollReadable { fd } => {
                opcode::PollAdd::new(Fd(fd), libc::POLLIN as u32).build()
            }
            Operation::PollWritable { fd } => {
                opcode::PollAdd::new(Fd(fd), libc::POLLOUT as u32).build()
            }
            Operation::UringCmd { fd, cmd_op, cmd } => {
                opcode::UringCmd16::new(Fd(fd), cmd_op).cmd(cmd).build()
            }
        };
        entry.user_data(u64::from(slot_index))
    }

    /// Pushes an entry if the submission queue has room.
    fn try_push(&mut self, entry: &squeue::Entry) -> bool {
        // SAFETY: every pointer in the entry is either the caller's (valid until completion by
        // `submit`'s contract) or points into `self.slots`, which is boxed and outlives the
        // operation (drop waits for operations to finish).
        unsafe { self.ring.submission().push(entry).is_ok() }
    }

    /// Moves resumed sends and backlog operations into the submission queue while there is
    /// room in it and free slots.
    fn fill_submission_queue(&mut self) {
        while let Some(&slot_index) = self.resume.last() {
            let entry = self.prepare(slot_index);
            if !self.try_push(&entry) {
                return;
            }
            self.resume.pop();
        }
        while !self.backlog.is_empty() && !self.free_slots.is_empty() {
            if self.ring.submission().is_full() {
                return;
            }
            let (token, operation) = self.backlog.pop_front().expect("backlog is not empty");
            let slot_index = self.free_slots.pop().expect("a slot is free");
            let slot = &mut self.slots[slot_index as usize];
            assert!(!slot.busy);
            slot.busy = true;
            slot.token = token;
            slot.operation = operation;
            slot.sent_bytes = 0;
            let entry = self.prepare(slot_index);
            assert!(self.try_push(&entry), "the submission queue had room");
        }
    }

    /// Whether work waits in the driver for room in the kernel's queues.
    fn has_waiting_work(&self) -> bool {
        !self.resume.is_empty() || (!self.backlog.is_empty() && !self.free_slots.is_empty())
    }

    /// One io_uring_enter: submits the submission queue and waits for `want` completions or
    /// the timeout. ETIME and EINTR are not errors (the caller looks at what completed).
    fn enter(&mut self, want: usize, timeout: Option<Duration>) -> Result<(), IoError> {
        if !self.enabled {
            // A ring made disabled binds its single issuer to the thread that enables it: the
            // thread that first uses the driver, not the one that made it.
            self.ring
                .submitter()
                .register_enable_rings()
                .map_err(|error| {
                    IoError::from_errno("IORING_REGISTER_ENABLE_RINGS", os_errno(&error))
                })?;
            self.enabled = true;
        }
        let to_submit = self.ring.submission().len() as u32;
        // GETEVENTS always: with deferred task running it is what posts finished work.
        let mut flags = EnterFlags::GETEVENTS;
        let timespec;
        let arguments;
        let argument = match timeout {
            Some(timeout) if want > 0 => {
                timespec = Timespec::from(timeout);
                arguments = SubmitArgs::new().timespec(&timespec);
                flags |= EnterFlags::EXT_ARG;
                Some(&arguments)
            }
            _ => None,
        };
        // SAFETY: `to_submit` entries are in the submission queue; `argument` is a valid
        // io_uring_getevents_arg (SubmitArgs is its transparent wrapper) passed only with
        // EXT_ARG, and `timespec` outlives the call.
        let result = unsafe {
            self.ring
                .submitter()
                .enter(to_submit, want as u32, flags.bits(), argument)
        };
        match result {
            Ok(_) => Ok(()),
            Err(error) => match os_errno(&error) {
                // EBUSY/EAGAIN: the kernel wants completions reaped first; the caller reaps.
                libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN => Ok(()),
                errno => Err(IoError::from_errno("io_uring_enter", errno)),
            },
        }
    }

    /// `wait`'s blocking part, for a call that found nothing ready: busy polls if armed, then
    /// sleeps until a completion or the timeout (none: until a completion, unless nothing is in
    /// flight).
    fn sleep_for_completions(
        &mut self,
        out: &mut Vec<Completion>,
        start_len: usize,
        timeout: Option<Duration>,
    ) -> Result<(), IoError> {
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        self.poll_before_sleeping(out, start_len, deadline)?;
        // Timed only when a short sleep would re-arm the busy poll.
        let sleep_started =
            (!self.busy_poll.is_zero() && out.len() == start_len).then(Instant::now);
        while out.len() == start_len {
            if self.slots_in_use() == 0 && timeout.is_none() {
                // Nothing could ever complete.
                break;
            }
            let remaining =
                deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()));
            if remaining == Some(Duration::ZERO) {
                break;
            }
            self.enter(1, remaining)?;
            self.reap(out);
            self.pump(out)?;
        }
        if let Some(started) = sleep_started
            && out.len() > start_len
            && started.elapsed() <= self.busy_poll
        {
            self.busy_poll_armed = true;
        }
        Ok(())
    }

    /// While nothing has completed, enters without waiting (which, with deferred task
    /// running, is also what posts finished work) until something does, the busy-poll
    /// window closes, or `deadline` passes. Only while polling pays: a poll that finds
    /// nothing disarms it until a sleep ends within the window again. Where completions
    /// take longer than the window (an idle daemon; a machine whose other threads need
    /// the CPU the poll would take, as under emulation) the driver then sleeps as if it
    /// never polled.
    fn poll_before_sleeping(
        &mut self,
        out: &mut Vec<Completion>,
        start_len: usize,
        deadline: Option<Instant>,
    ) -> Result<(), IoError> {
        if self.busy_poll.is_zero()
            || !self.busy_poll_armed
            || out.len() > start_len
            || self.slots_in_use() == 0
        {
            return Ok(());
        }
        let mut until = Instant::now() + self.busy_poll;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        while out.len() == start_len && Instant::now() < until {
            self.busy_polls += 1;
            self.enter(0, None)?;
            self.reap(out);
            self.pump(out)?;
            // Another thread of this core (the client, a kernel worker) may be what the
            // poll waits for: it runs first.
            std::thread::yield_now();
        }
        self.busy_poll_armed = out.len() > start_len;
        Ok(())
    }

    /// Hands everything the queues can take to the kernel, making room by submitting as often
    /// as needed; completions found on the way go to `out`.
    fn pump(&mut self, out: &mut Vec<Completion>) -> Result<(), IoError> {
        self.fill_submission_queue();
        while self.has_waiting_work() {
            self.enter(0, None)?;
            self.reap(out);
            self.fill_submission_queue();
        }
        Ok(())
    }

    /// Takes completions from the ring: finished operations go to `out`, their slots are freed,
    /// short sends are queued for resumption.
    fn reap(&mut self, out: &mut Vec<Completion>) {
        self.reaped.clear();
        self.reaped.extend(
            self.ring
                .completion()
                .map(|cqe| (cqe.user_data(), cqe.result())),
        );
        for index in 0..self.reaped.len() {
            let (user_data, result) = self.reaped[index];
            if user_data == CANCEL_USER_DATA {
                self.cancels_in_flight -= 1;
                continue;
            }
            let slot_index = u32::try_from(user_data).expect("user_data is a slot index");
            let slot = &mut self.slots[slot_index as usize];
            assert!(slot.busy, "a completion for a free slot");
            if let Operation::Send { parts, .. } = slot.operation
                && result >= 0
            {
                slot.sent_bytes += result as u64;
                // A send that made progress but is not done goes again; one that made none
                // (the peer takes nothing more) completes short.
                if result > 0 && slot.sent_bytes < parts.total_bytes() {
                    self.resume.push(slot_index);
                    continue;
                }
                let total = i32::try_from(slot.sent_bytes).expect("a send is below 2 GiB");
                out.push(Completion {
                    token: slot.token,
                    result: total,
                });
            } else {
                out.push(Completion {
                    token: slot.token,
                    result,
                });
            }
            slot.busy = false;
            self.free_slots.push(slot_index);
        }
    }
}

fn os_errno(error: &std::io::Error) -> i32 {
    error.raw_os_error().unwrap_or(libc::EIO)
}

fn unavailable(call: &str, error: &std::io::Error) -> Unavailable {
    match error.raw_os_error() {
        Some(errno) => Unavailable(format!(
            "io_uring unavailable: {call}: {}",
            errno_text(errno)
        )),
        None => Unavailable(format!("io_uring unavailable: {call}: {error}")),
    }
}

impl Driver for UringDriver {
    unsafe fn submit(&mut self, token: u64, operation: Operation) {
        if self.inline_fds.get(descriptor(&operation) as usize) == Some(&true)
            && transfer_bytes(&operation) <= INLINE_BYTES_MAX
        {
            // SAFETY: the caller upholds `submit`'s contract for the operation's memory.
            if let Some(result) = unsafe { sys::run_file_operation(&operation) } {
                self.ready.push(Completion { token, result });
                return;
            }
        }
        if let Operation::Send { parts, .. } = &operation {
            assert!(
                parts.total_bytes() <= i32::MAX as u64,
                "a send is below 2 GiB"
            );
        }
        self.backlog.push_back((token, operation));
        self.fill_submission_queue();
    }

    fn flush_submissions(&mut self) -> Result<(), IoError> {
        // Completions met while making room are kept for the next wait.
        let mut ready = std::mem::take(&mut self.ready);
        let result = self.pump(&mut ready).and_then(|()| self.enter(0, None));
        self.ready = ready;
        result
    }

    fn take_ready(&mut self, out: &mut Vec<Completion>) -> usize {
        let taken = self.ready.len();
        out.append(&mut self.ready);
        taken
    }

    fn wait(
        &mut self,
        out: &mut Vec<Completion>,
        timeout: Option<Duration>,
    ) -> Result<usize, IoError> {
        let start_len = out.len();
        out.append(&mut self.ready);
        self.pump(out)?;
        self.reap(out);
        if out.len() == start_len && timeout == Some(Duration::ZERO) {
            // An enter with GETEVENTS is what posts deferred completions.
            self.enter(0, None)?;
            self.reap(out);
        }
        // The clock is read only by a call that may sleep: at depth, most calls find
        // completions waiting, and a reading each cost a percent of the data plane's CPU.
        if out.len() == start_len && timeout != Some(Duration::ZERO) {
            self.sleep_for_completions(out, start_len, timeout)?;
        }
        // Operations queued after the last enter (behind freed slots) go now.
        if !self.ring.submission().is_empty() {
            self.enter(0, None)?;
            self.reap(out);
        }
        Ok(out.len() - start_len)
    }

    fn in_flight(&self) -> usize {
        self.slots_in_use() + self.backlog.len() + self.ready.len()
    }

    fn set_busy_poll(&mut self, window: Duration) {
        self.busy_poll = window;
    }

    fn set_inline(&mut self, fd: RawFd, inline: bool) {
        let index = usize::try_from(fd).expect("descriptors are non-negative");
        if index >= self.inline_fds.len() {
            self.inline_fds.resize(index + 1, false);
        }
        self.inline_fds[index] = inline;
    }

    unsafe fn register_buffers(
        &mut self,
        pointer: *mut u8,
        len_bytes: usize,
    ) -> Result<(), IoError> {
        assert!(self.registered.is_empty(), "one buffer arena per driver");
        assert!(len_bytes > 0);
        let mut iovecs = Vec::new();
        let mut offset = 0;
        while offset < len_bytes {
            let piece = (len_bytes - offset).min(REGISTERED_BUFFER_BYTES_MAX);
            iovecs.push(libc::iovec {
                iov_base: pointer.wrapping_add(offset).cast(),
                iov_len: piece,
            });
            offset += piece;
        }
        assert!(
            iovecs.len() <= usize::from(u16::MAX),
            "arena too large to register"
        );
        // SAFETY: the caller keeps the arena allocated until the driver is dropped, and the
        // ring (which holds the registration) is dropped with the driver.
        unsafe { self.ring.submitter().register_buffers(&iovecs) }.map_err(|error| {
            IoError::from_errno(
                "IORING_REGISTER_BUFFERS",
                error.raw_os_error().unwrap_or(libc::EIO),
            )
        })?;
        self.registered = iovecs
            .iter()
            .map(|iovec| (iovec.iov_base as usize, iovec.iov_len))
            .collect();
        Ok(())
    }
}

impl Drop for UringDriver {
    /// Cancels what is still in the kernel and waits for it, so no operation outlives the
    /// slots and buffers it uses.
    fn drop(&mut self) {
        let in_kernel: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|index| self.slots[*index as usize].busy && !self.resume.contains(index))
            .collect();
        if in_kernel.is_empty() {
            return;
        }
        for slot_index in in_kernel {
            let entry = opcode::AsyncCancel::new(u64::from(slot_index))
                .build()
                .user_data(CANCEL_USER_DATA);
            while !self.try_push(&entry) {
                if self.enter(0, None).is_err() {
                    return;
                }
            }
            self.cancels_in_flight += 1;
        }
        self.backlog.clear();
        let deadline = Instant::now() + DROP_DRAIN_TIMEOUT;
        let mut discarded = Vec::new();
        while self.slots_in_use() > self.resume.len() || self.cancels_in_flight > 0 {
            let now = Instant::now();
            if now >= deadline || self.enter(1, Some(deadline - now)).is_err() {
                return;
            }
            self.reap(&mut discarded);
            discarded.clear();
        }
    }
}

/// Bytes a read or write moves (0 for other operations).
fn transfer_bytes(operation: &Operation) -> u32 {
    match *operation {
        Operation::Read { len_bytes, .. } | Operation::Write { len_bytes, .. } => len_bytes,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::{AnyDriver, DriverChoice, DriverKind, open_driver};

    #[test]
    fn the_fallback_reason_names_the_call_and_the_errno() {
        let error = std::io::Error::from_raw_os_error(libc::EPERM);
        assert_eq!(
            unavailable("io_uring_setup", &error).0,
            "io_uring unavailable: io_uring_setup: Operation not permitted (os error 1)"
        );
    }

    #[test]
    fn auto_picks_io_uring_here_and_poll_is_always_available() {
        let auto = open_driver(DriverChoice::Auto).unwrap();
        assert_eq!(
            auto.driver.kind(),
            DriverKind::Uring,
            "{:?}",
            auto.fallback_reason
        );
        assert_eq!(auto.fallback_reason, None);
        if let AnyDriver::Uring(uring) = &auto.driver {
            assert_eq!(
                uring.setup_description(),
                "single issuer, deferred task running"
            );
            assert_eq!(uring.ring_entries(), DEFAULT_RING_ENTRIES);
            assert_eq!(uring.slots.len(), DEFAULT_COMPLETION_ENTRIES as usize);
        }
        let poll = open_driver(DriverChoice::Poll).unwrap();
        assert_eq!(poll.driver.kind(), DriverKind::Poll);
    }
}
