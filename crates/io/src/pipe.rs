//! Pipes that carry a member file's bytes to a socket without copying them through user
//! memory (splice(2)): from a file in the page cache (tmpfs, a buffered file) the pipe takes
//! references to the file's pages, and a Unix or TCP socket takes them from the pipe as they
//! are, so the only copy left is the one the receiver makes.
//!
//! Both directions are synchronous and never block: a file in the page cache is spliced
//! without waiting (the kind of file whose I/O the driver already runs inline), and a socket
//! without room says EAGAIN, which the caller answers with [`crate::Operation::PollWritable`].
//! io_uring's own splice is not used: it always hands the work to a kernel worker thread.

use crate::error::{IoError, last_errno};
use crate::sys;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The bytes of one page, to which splice works: a range straddling pages takes one slot
/// of the pipe per page it touches.
const PAGE_BYTES: usize = 4096;

/// A pipe (non-blocking at both ends), and how many bytes it can hold at least.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// What splicing a range of this many bytes into the empty pipe always fits, whatever the
    /// range's alignment (one page fewer than the pipe's size).
    room_bytes: usize,
}

impl Pipe {
    /// A pipe of `wanted_bytes` (rounded up to a power of two) where the system allows
    /// (`F_SETPIPE_SZ`; otherwise the default size stands); `room_bytes` says what it holds.
    pub fn new(wanted_bytes: usize) -> Result<Pipe, IoError> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
            return Err(IoError::from_errno("pipe2", last_errno()));
        }
        // SAFETY: pipe2 succeeded, so both descriptors are new and ours alone.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A power of two of pages, or the kernel rounds it up, past the default limit
        // (/proc/sys/fs/pipe-max-size, 1 MiB) that a process without CAP_SYS_RESOURCE meets.
        let wanted = i32::try_from(wanted_bytes.next_power_of_two()).unwrap_or(i32::MAX);
        // SAFETY: fcntl on a descriptor we own; a refusal (EPERM past pipe-max-size) leaves the
        // pipe as it was.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, wanted) };
        // SAFETY: as above.
        let size = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) };
        if size < 0 {
            return Err(IoError::from_errno("F_GETPIPE_SZ", last_errno()));
        }
        Ok(Pipe {
            read,
            write,
            room_bytes: (size as usize).saturating_sub(PAGE_BYTES),
        })
    }

    /// The most bytes [`Pipe::fill_from`] takes into the empty pipe.
    pub fn room_bytes(&self) -> usize {
        self.room_bytes
    }

    /// Splices `len_bytes` at `offset_bytes` of `file` into the (empty) pipe; an error when
    /// fewer came (the file ended, or the read failed). The file must be one whose pages are
    /// read without waiting on a device (tmpfs), as the call runs on the caller's thread.
    pub fn fill_from(
        &mut self,
        file: RawFd,
        offset_bytes: u64,
        len_bytes: usize,
    ) -> Result<(), IoError> {
        assert!(len_bytes <= self.room_bytes, "the range fits the pipe");
        let mut offset = i64::try_from(offset_bytes).expect("offsets fit i64");
        let mut moved = 0;
        while moved < len_bytes {
            let result = sys::retry(|| {
                // SAFETY: both descriptors are open; `offset` is a live i64 the kernel advances.
                unsafe {
                    libc::splice(
                        file,
                        &mut offset,
                        self.write.as_raw_fd(),
                        std::ptr::null_mut(),
                        len_bytes - moved,
                        libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
                    )
                }
            });
            match result {
                0 => return Err(IoError::from_errno("splice from a member", libc::EIO)),
                n if n > 0 => moved += n as usize,
                errno => return Err(IoError::from_errno("splice from a member", -errno)),
            }
        }
        Ok(())
    }

    /// Splices up to `len_bytes` from the pipe into `socket` without blocking: how many went,
    /// or the errno (EAGAIN: the socket's buffer is full). `socket` is a blocking socket
    /// (io_uring's receives and sends on it rely on that) with no other status flag that
    /// F_SETFL changes (no O_ASYNC, O_APPEND, O_DIRECT or O_NOATIME), as an accepted socket
    /// is: it is made non-blocking for the call, since SPLICE_F_NONBLOCK covers the pipe's
    /// end only, and blocking again after it, with no F_GETFL to learn its flags.
    pub fn drain_to(&mut self, socket: RawFd, len_bytes: usize) -> Result<usize, i32> {
        // SAFETY: fcntl on a descriptor the caller keeps open; reset below.
        if unsafe { libc::fcntl(socket, libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
            return Err(last_errno());
        }
        let result = self.splice_out(socket, len_bytes);
        // SAFETY: as above.
        unsafe { libc::fcntl(socket, libc::F_SETFL, 0) };
        result
    }

    fn splice_out(&mut self, socket: RawFd, len_bytes: usize) -> Result<usize, i32> {
        let result = sys::retry(|| {
            // SAFETY: both descriptors are open; no offsets (pipe and socket have none).
            unsafe {
                libc::splice(
                    self.read.as_raw_fd(),
                    std::ptr::null_mut(),
                    socket,
                    std::ptr::null_mut(),
                    len_bytes,
                    libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
                )
            }
        });
        usize::try_from(result).map_err(|_| -result)
    }
}

/// `send(MSG_DONTWAIT | MSG_NOSIGNAL)` of `bytes`: how many went, or the errno (EAGAIN: the
/// socket's buffer is full).
pub fn send_nonblocking(socket: RawFd, bytes: &[u8]) -> Result<usize, i32> {
    let part = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: the one part is `bytes`, live for the duration of the call.
    let result = unsafe { sys::sendmsg_nonblocking(socket, &[part]) };
    usize::try_from(result).map_err(|_| -result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    fn file_with(bytes: &[u8]) -> std::fs::File {
        let mut file = tempfile_in_shm();
        file.write_all(bytes).expect("write");
        file
    }

    fn tempfile_in_shm() -> std::fs::File {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        };
        let path = format!(
            "{dir}/tessera-pipe-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create");
        std::fs::remove_file(&path).expect("unlink");
        file
    }

    #[test]
    fn a_file_range_reaches_the_socket_as_it_is_in_the_file() {
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let file = file_with(&bytes);
        let (ours, mut theirs) = UnixStream::pair().expect("socketpair");
        let mut pipe = Pipe::new(128 * 1024).expect("pipe");
        assert!(pipe.room_bytes() >= 65_536);
        // Unaligned at both ends, so that the range straddles one page more than its length.
        let (offset, len) = (4_095u64, 65_536usize);
        pipe.fill_from(file.as_raw_fd(), offset, len).expect("fill");
        let mut moved = 0;
        while moved < len {
            moved += pipe.drain_to(ours.as_raw_fd(), len - moved).expect("drain");
        }
        let mut received = vec![0; len];
        theirs.read_exact(&mut received).expect("receive");
        assert_eq!(received, bytes[offset as usize..offset as usize + len]);
    }

    #[test]
    fn a_range_past_the_end_of_the_file_is_an_error() {
        let file = file_with(&[1; 10_000]);
        let mut pipe = Pipe::new(65_536).expect("pipe");
        assert!(pipe.fill_from(file.as_raw_fd(), 8_192, 4_096).is_err());
    }

    #[test]
    fn a_full_socket_says_eagain_instead_of_blocking() {
        let file = file_with(&vec![9; 1 << 20]);
        let (ours, _theirs) = UnixStream::pair().expect("socketpair");
        let mut pipe = Pipe::new(65_536).expect("pipe");
        let chunk = pipe.room_bytes().min(32_768);
        let mut result = Ok(0);
        // Nobody reads the other end: the socket's buffer fills within a few megabytes.
        for round in 0..4096u64 {
            pipe.fill_from(file.as_raw_fd(), (round * chunk as u64) % (1 << 19), chunk)
                .expect("fill");
            result = pipe.drain_to(ours.as_raw_fd(), chunk);
            match result {
                Ok(n) if n == chunk => {}
                _ => break,
            }
        }
        assert!(
            matches!(result, Err(libc::EAGAIN)) || matches!(result, Ok(n) if n < chunk),
            "the socket filled up: {result:?}"
        );
        assert_eq!(
            send_nonblocking(ours.as_raw_fd(), &[0; 4096]),
            Err(libc::EAGAIN)
        );
    }
}
