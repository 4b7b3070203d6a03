//! Thin wrappers over the system calls the synchronous paths make. Each returns what io_uring
//! would put in a completion: a non-negative count or a negative errno; EINTR is retried.

use std::os::fd::RawFd;

use crate::driver::Operation;
use crate::error::last_errno;

/// Runs `call` until it does not fail with EINTR; maps -1 to `-errno`.
pub(crate) fn retry(mut call: impl FnMut() -> isize) -> i32 {
    loop {
        let result = call();
        if result >= 0 {
            return i32::try_from(result).expect("transfers are below 2 GiB");
        }
        let errno = last_errno();
        if errno != libc::EINTR {
            return -errno;
        }
    }
}

/// `pread(fd, buffer, len_bytes, offset_bytes)`.
///
/// # Safety
///
/// `buffer .. buffer + len_bytes` must be valid for writes.
pub(crate) unsafe fn pread(fd: RawFd, buffer: *mut u8, len_bytes: u32, offset_bytes: u64) -> i32 {
    retry(|| {
        // SAFETY: the caller guarantees the destination range; the kernel checks `fd`.
        unsafe {
            libc::pread(
                fd,
                buffer.cast(),
                len_bytes as usize,
                offset_bytes as libc::off_t,
            )
        }
    })
}

/// `pwrite(fd, buffer, len_bytes, offset_bytes)`, with `RWF_DSYNC` when `fua`.
///
/// # Safety
///
/// `buffer .. buffer + len_bytes` must be valid for reads.
pub(crate) unsafe fn pwrite(
    fd: RawFd,
    buffer: *const u8,
    len_bytes: u32,
    offset_bytes: u64,
    fua: bool,
) -> i32 {
    let iovec = libc::iovec {
        iov_base: buffer as *mut libc::c_void,
        iov_len: len_bytes as usize,
    };
    let flags = if fua { libc::RWF_DSYNC } else { 0 };
    retry(|| {
        // SAFETY: the caller guarantees the source range the iovec names; the kernel checks
        // `fd`.
        unsafe { libc::pwritev2(fd, &iovec, 1, offset_bytes as libc::off_t, flags) }
    })
}

/// `fdatasync(fd)`.
pub(crate) fn fdatasync(fd: RawFd) -> i32 {
    // SAFETY: fdatasync takes no memory; a bad descriptor gives EBADF.
    retry(|| unsafe { libc::fdatasync(fd) } as isize)
}

/// `fallocate(fd, mode, offset_bytes, len_bytes)`.
pub(crate) fn fallocate(fd: RawFd, mode: i32, offset_bytes: u64, len_bytes: u64) -> i32 {
    // SAFETY: fallocate takes no memory; a bad descriptor gives EBADF.
    retry(|| unsafe {
        libc::fallocate(
            fd,
            mode,
            offset_bytes as libc::off_t,
            len_bytes as libc::off_t,
        )
    } as isize)
}

/// `recv(fd, buffer, len_bytes, MSG_DONTWAIT)`.
///
/// # Safety
///
/// `buffer .. buffer + len_bytes` must be valid for writes.
pub(crate) unsafe fn recv_nonblocking(fd: RawFd, buffer: *mut u8, len_bytes: u32) -> i32 {
    retry(|| {
        // SAFETY: the caller guarantees the destination range.
        unsafe { libc::recv(fd, buffer.cast(), len_bytes as usize, libc::MSG_DONTWAIT) }
    })
}

/// `sendmsg` of `iovecs` without blocking and without SIGPIPE.
///
/// # Safety
///
/// Every iovec must name memory valid for reads.
pub(crate) unsafe fn sendmsg_nonblocking(fd: RawFd, iovecs: &[libc::iovec]) -> i32 {
    // SAFETY: msghdr is plain data; all-zero is "no address, no control data".
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = iovecs.as_ptr() as *mut libc::iovec;
    message.msg_iovlen = iovecs.len() as _;
    retry(|| {
        // SAFETY: `message` points at `iovecs`, which the caller guarantees.
        unsafe { libc::sendmsg(fd, &message, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) }
    })
}

/// `accept4(fd, NULL, NULL, SOCK_CLOEXEC)`.
pub(crate) fn accept(fd: RawFd) -> i32 {
    retry(|| {
        // SAFETY: no address is asked for, so no memory is passed.
        unsafe {
            libc::accept4(
                fd,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        }
        .try_into()
        .expect("a descriptor fits isize")
    })
}

/// `poll(fds, timeout_ms)`; returns the ready count or a negative errno (EINTR included, so
/// the caller can recompute its timeout).
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> i32 {
    // SAFETY: `fds` is a valid, exclusively borrowed array of its length.
    let result = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if result < 0 { -last_errno() } else { result }
}

/// Runs a file operation (Read, Write, Fsync, Fallocate) synchronously; `None` for other operations.
///
/// # Safety
///
/// The operation's memory must be valid as `Driver::submit` requires.
pub(crate) unsafe fn run_file_operation(operation: &Operation) -> Option<i32> {
    Some(match *operation {
        Operation::Read {
            fd,
            offset_bytes,
            buffer,
            len_bytes,
        } => {
            // SAFETY: the caller guarantees the destination.
            unsafe { pread(fd, buffer, len_bytes, offset_bytes) }
        }
        Operation::Write {
            fd,
            offset_bytes,
            buffer,
            len_bytes,
            fua,
        } => {
            // SAFETY: the caller guarantees the source.
            unsafe { pwrite(fd, buffer, len_bytes, offset_bytes, fua) }
        }
        Operation::Fsync { fd } => fdatasync(fd),
        Operation::Fallocate {
            fd,
            mode,
            offset_bytes,
            len_bytes,
        } => fallocate(fd, mode, offset_bytes, len_bytes),
        Operation::Recv { .. }
        | Operation::Send { .. }
        | Operation::Accept { .. }
        | Operation::PollReadable { .. }
        | Operation::PollWritable { .. }
        | Operation::UringCmd { .. } => return None,
    })
}
