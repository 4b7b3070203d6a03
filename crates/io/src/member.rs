//! Local member devices: block devices and regular files.
//!
//! A member is opened twice. The first descriptor uses O_DIRECT (and, on a block device,
//! O_EXCL, so two drive groups, a mount or md cannot share the drive); the second is buffered,
//! for requests that do not meet O_DIRECT's alignment (the engine issues 512-byte-aligned
//! requests; a 4Kn drive needs 4096). [`MemberDevice::fd_for`] picks per request. The kernel
//! keeps the two coherent (direct reads write back dirty cached pages first, direct writes
//! invalidate them) as long as no two requests in flight overlap, which the engine's stripe
//! locks guarantee. When O_DIRECT is refused (tmpfs on old kernels, some filesystems) both
//! roles fall to one buffered descriptor and the reason is kept for the daemon to report.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::driver::{Driver, Operation};
use crate::error::{IoError, errno_text};
use crate::sync_member::{SyncMember, check_range};
use crate::sys;

/// `STATX_DIOALIGN` (Linux 6.1): ask statx for O_DIRECT alignment.
const STATX_DIOALIGN: u32 = 0x2000;
/// Logical block size reported for regular files.
const FILE_LOGICAL_BLOCK_BYTES: u32 = 512;

/// What kind of device a member is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberKind {
    /// A block device, opened exclusively.
    BlockDevice,
    /// A regular file.
    File,
}

/// How a member makes a range read as zeroes ([`MemberDevice::zero_operation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroMethod {
    /// `fallocate(FALLOC_FL_ZERO_RANGE)`: on a block device the kernel sends Write Zeroes to
    /// the drive (or writes zero pages itself when the drive has none); in a file the range
    /// becomes unwritten extents, still allocated, so later writes cannot run out of space.
    ZeroRange,
    /// `fallocate(FALLOC_FL_PUNCH_HOLE)`: tmpfs, which has no ZERO_RANGE and no allocation
    /// worth keeping (a hole reads as zeroes and holds no memory).
    PunchHole,
    /// Writing zeroes: for members that refused the other two.
    Write,
}

/// An open local member.
#[derive(Debug)]
pub struct MemberDevice {
    path: PathBuf,
    kind: MemberKind,
    /// O_DIRECT descriptor, when O_DIRECT was accepted.
    direct_file: Option<File>,
    /// Buffered descriptor (holds the exclusive claim when there is no direct one).
    buffered_file: File,
    fallback_reason: Option<String>,
    size_bytes: u64,
    logical_block_bytes: u32,
    /// O_DIRECT needs offsets and lengths in multiples of this.
    direct_offset_align_bytes: u32,
    /// O_DIRECT needs buffer addresses in multiples of this.
    direct_memory_align_bytes: u32,
    nowait_io: bool,
    zero_method: ZeroMethod,
}

impl MemberDevice {
    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Block device or file.
    pub fn kind(&self) -> MemberKind {
        self.kind
    }

    /// Whether requests that meet the alignment go through O_DIRECT.
    pub fn direct(&self) -> bool {
        self.direct_file.is_some()
    }

    /// Why O_DIRECT is off, when it is.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Logical block size: BLKSSZGET for block devices, 512 for files.
    pub fn logical_block_bytes(&self) -> u32 {
        self.logical_block_bytes
    }

    /// Whether the file can do non-blocking I/O (RWF_NOWAIT). When it cannot (tmpfs), io_uring
    /// hands every request to a kernel worker thread, and running its requests synchronously
    /// ([`crate::Driver::set_inline`]) is cheaper.
    pub fn nowait_io(&self) -> bool {
        self.nowait_io
    }

    /// (offset and length, memory) alignment an O_DIRECT request needs.
    pub fn direct_alignment_bytes(&self) -> (u32, u32) {
        (
            self.direct_offset_align_bytes,
            self.direct_memory_align_bytes,
        )
    }

    /// The descriptor for a read or write of `len_bytes` at `offset_bytes` to or from
    /// `buffer`: the O_DIRECT one when the request meets its alignment, else the buffered one.
    pub fn fd_for(&self, offset_bytes: u64, len_bytes: u32, buffer: *const u8) -> RawFd {
        match &self.direct_file {
            Some(direct)
                if offset_bytes.is_multiple_of(u64::from(self.direct_offset_align_bytes))
                    && len_bytes.is_multiple_of(self.direct_offset_align_bytes)
                    && (buffer as usize)
                        .is_multiple_of(self.direct_memory_align_bytes as usize) =>
            {
                direct.as_raw_fd()
            }
            _ => self.buffered_file.as_raw_fd(),
        }
    }

    /// The buffered descriptor: the one whose pages a [`crate::Pipe`] can take.
    pub fn buffered_fd(&self) -> RawFd {
        self.buffered_file.as_raw_fd()
    }

    /// Both descriptors (one when O_DIRECT is off), e.g. for [`crate::Driver::set_inline`].
    pub fn descriptors(&self) -> Vec<RawFd> {
        let mut descriptors = vec![self.buffered_file.as_raw_fd()];
        descriptors.extend(self.direct_file.as_ref().map(|file| file.as_raw_fd()));
        descriptors
    }

    /// Tells `driver` how to run this member's file I/O: inline when the file cannot do
    /// non-blocking I/O (see [`MemberDevice::nowait_io`]). Call [`MemberDevice::detach_from`]
    /// before dropping the member.
    pub fn attach_to(&self, driver: &mut impl Driver) {
        for fd in self.descriptors() {
            driver.set_inline(fd, !self.nowait_io);
        }
    }

    /// Undoes [`MemberDevice::attach_to`] (descriptor numbers are reused after close).
    pub fn detach_from(&self, driver: &mut impl Driver) {
        for fd in self.descriptors() {
            driver.set_inline(fd, false);
        }
    }

    /// How this member zeroes ranges.
    pub fn zero_method(&self) -> ZeroMethod {
        self.zero_method
    }

    /// The operation that makes `len_bytes` at `offset_bytes` read as zeroes without moving
    /// data, or `None` when this member must be written with zeroes instead: always, or for
    /// this range (a block device zeroes whole logical blocks only).
    pub fn zero_operation(&self, offset_bytes: u64, len_bytes: u64) -> Option<Operation> {
        let block_bytes = u64::from(self.logical_block_bytes);
        if !offset_bytes.is_multiple_of(block_bytes) || !len_bytes.is_multiple_of(block_bytes) {
            return None;
        }
        let mode = match self.zero_method {
            ZeroMethod::ZeroRange => libc::FALLOC_FL_ZERO_RANGE,
            ZeroMethod::PunchHole => libc::FALLOC_FL_PUNCH_HOLE,
            ZeroMethod::Write => return None,
        };
        Some(Operation::Fallocate {
            fd: self.buffered_file.as_raw_fd(),
            mode: mode | libc::FALLOC_FL_KEEP_SIZE,
            offset_bytes,
            len_bytes,
        })
    }

    /// Records that the member refused its zero operation with `errno` (a file system without
    /// ZERO_RANGE, an old kernel): from now on it is written with zeroes. `true` when `errno`
    /// means that (and the caller should write the range instead), `false` for a real error.
    pub fn zeroing_refused(&mut self, errno: i32) -> bool {
        let refused = self.zero_method != ZeroMethod::Write
            && matches!(errno, libc::EOPNOTSUPP | libc::EINVAL | libc::ENODEV);
        if refused {
            self.zero_method = ZeroMethod::Write;
        }
        refused
    }

    /// The descriptor to fdatasync for the member's durability barrier (either descriptor
    /// flushes the same device or file).
    pub fn flush_fd(&self) -> RawFd {
        self.buffered_file.as_raw_fd()
    }
}

impl SyncMember for MemberDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&mut self, offset_bytes: u64, buffer: &mut [u8]) -> Result<(), IoError> {
        check_range(offset_bytes, buffer.len(), self.size_bytes)?;
        let fd = self.fd_for(offset_bytes, buffer.len() as u32, buffer.as_ptr());
        let mut done = 0;
        while done < buffer.len() {
            let piece = (buffer.len() - done).min(1 << 30) as u32;
            // SAFETY: the destination is the unread tail of `buffer`, exclusively borrowed.
            let result = unsafe {
                sys::pread(
                    fd,
                    buffer[done..].as_mut_ptr(),
                    piece,
                    offset_bytes + done as u64,
                )
            };
            match result {
                0 => break,
                moved if moved > 0 => done += moved as usize,
                errno => return Err(IoError::from_errno("pread", -errno)),
            }
        }
        short_transfer_check(buffer.len(), done)
    }

    fn write_at(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), IoError> {
        check_range(offset_bytes, data.len(), self.size_bytes)?;
        let fd = self.fd_for(offset_bytes, data.len() as u32, data.as_ptr());
        let mut done = 0;
        while done < data.len() {
            let piece = (data.len() - done).min(1 << 30) as u32;
            // SAFETY: the source is the unwritten tail of `data`.
            let result = unsafe {
                sys::pwrite(
                    fd,
                    data[done..].as_ptr(),
                    piece,
                    offset_bytes + done as u64,
                    false,
                )
            };
            match result {
                0 => break,
                moved if moved > 0 => done += moved as usize,
                errno => return Err(IoError::from_errno("pwrite", -errno)),
            }
        }
        short_transfer_check(data.len(), done)
    }

    fn flush(&mut self) -> Result<(), IoError> {
        match sys::fdatasync(self.flush_fd()) {
            0 => Ok(()),
            errno => Err(IoError::from_errno("fdatasync", -errno)),
        }
    }
}

fn short_transfer_check(expected: usize, actual: usize) -> Result<(), IoError> {
    if actual == expected {
        Ok(())
    } else {
        Err(IoError::ShortTransfer {
            expected_bytes: expected as u64,
            actual_bytes: actual as u64,
        })
    }
}

/// Opens a block device or regular file as a member: O_DIRECT when accepted, exclusive for
/// block devices, plus a buffered descriptor for unaligned requests.
pub fn open_member(path: impl AsRef<Path>) -> Result<MemberDevice, IoError> {
    let path = path.as_ref();
    let open_error = |error: std::io::Error| match error.raw_os_error() {
        Some(libc::EBUSY) => IoError::Busy {
            path: path.to_owned(),
        },
        errno => IoError::Open {
            path: path.to_owned(),
            errno: errno.unwrap_or(libc::EIO),
        },
    };
    let metadata = std::fs::metadata(path).map_err(open_error)?;
    let kind = if metadata.file_type().is_block_device() {
        MemberKind::BlockDevice
    } else if metadata.file_type().is_file() {
        MemberKind::File
    } else {
        return Err(IoError::NotAMember {
            path: path.to_owned(),
        });
    };
    // O_EXCL without O_CREAT means "exclusive open" for block devices only.
    let exclusive = if kind == MemberKind::BlockDevice {
        libc::O_EXCL
    } else {
        0
    };
    let open = |flags: i32| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags | libc::O_CLOEXEC)
            .open(path)
    };

    let (direct_file, buffered_file, fallback_reason) = match open(libc::O_DIRECT | exclusive) {
        Ok(direct) => {
            let buffered = open(0).map_err(open_error)?;
            (Some(direct), buffered, None)
        }
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            let buffered = open(exclusive).map_err(open_error)?;
            let reason = format!(
                "O_DIRECT refused for {}: {}; using buffered I/O",
                path.display(),
                errno_text(libc::EINVAL)
            );
            (None, buffered, Some(reason))
        }
        Err(error) => return Err(open_error(error)),
    };
    // Both descriptors must name the object that was inspected (no rename in between).
    let opened = buffered_file.metadata().map_err(open_error)?;
    if opened.dev() != metadata.dev() || opened.ino() != metadata.ino() {
        return Err(IoError::Open {
            path: path.to_owned(),
            errno: libc::ESTALE,
        });
    }
    if let Some(direct) = &direct_file {
        let direct_metadata = direct.metadata().map_err(open_error)?;
        assert_eq!(
            (direct_metadata.dev(), direct_metadata.ino()),
            (opened.dev(), opened.ino())
        );
    }

    let fd = buffered_file.as_raw_fd();
    let (size_bytes, logical_block_bytes) = match kind {
        MemberKind::BlockDevice => (block_device_size(fd, path)?, logical_block_size(fd, path)?),
        MemberKind::File => (opened.len(), FILE_LOGICAL_BLOCK_BYTES),
    };
    let (direct_offset_align_bytes, direct_memory_align_bytes) = match direct_alignment(fd) {
        Some(alignment) => alignment,
        // Without statx's answer: the logical block for devices; for files the filesystem's
        // block size, which is what O_DIRECT needs on every common filesystem.
        None => match kind {
            MemberKind::BlockDevice => (logical_block_bytes, logical_block_bytes),
            MemberKind::File => {
                let block = (opened.blksize() as u32).max(FILE_LOGICAL_BLOCK_BYTES);
                (block, block)
            }
        },
    };
    let nowait_io = supports_nowait(fd);
    let zero_method = match kind {
        MemberKind::BlockDevice => ZeroMethod::ZeroRange,
        MemberKind::File if on_tmpfs(fd) => ZeroMethod::PunchHole,
        MemberKind::File => ZeroMethod::ZeroRange,
    };
    assert!(direct_offset_align_bytes.is_power_of_two());
    assert!(direct_memory_align_bytes.is_power_of_two());
    Ok(MemberDevice {
        path: path.to_owned(),
        kind,
        direct_file,
        buffered_file,
        fallback_reason,
        size_bytes,
        logical_block_bytes,
        direct_offset_align_bytes,
        direct_memory_align_bytes,
        nowait_io,
        zero_method,
    })
}

/// Whether the file lives on tmpfs (or shmem), whose only zeroing is a punched hole.
fn on_tmpfs(fd: RawFd) -> bool {
    // SAFETY: statfs is plain old data; zeroes are a valid value for every field.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `stat` is a valid destination; the kernel checks `fd`.
    let result = unsafe { libc::fstatfs(fd, &mut stat) };
    result == 0 && stat.f_type == libc::TMPFS_MAGIC
}

/// Whether reads with RWF_NOWAIT are accepted: the kernel refuses them with EOPNOTSUPP, before
/// looking at the offset or the data, on files that cannot do non-blocking I/O.
fn supports_nowait(fd: RawFd) -> bool {
    let mut byte = 0u8;
    let iovec = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    // SAFETY: one iovec naming one byte on the stack; `fd` is the buffered descriptor.
    let result = unsafe { libc::preadv2(fd, &iovec, 1, 0, libc::RWF_NOWAIT) };
    !(result < 0 && crate::error::last_errno() == libc::EOPNOTSUPP)
}

fn block_device_size(fd: RawFd, path: &Path) -> Result<u64, IoError> {
    let mut size_bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 to the pointer, which points at `size_bytes`.
    let result = unsafe { libc::ioctl(fd, libc::_IOR::<u64>(0x12, 114), &mut size_bytes) };
    if result < 0 {
        return Err(IoError::Open {
            path: path.to_owned(),
            errno: crate::error::last_errno(),
        });
    }
    Ok(size_bytes)
}

fn logical_block_size(fd: RawFd, path: &Path) -> Result<u32, IoError> {
    let mut block_bytes: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int to the pointer, which points at `block_bytes`.
    let result = unsafe { libc::ioctl(fd, libc::BLKSSZGET, &mut block_bytes) };
    if result < 0 {
        return Err(IoError::Open {
            path: path.to_owned(),
            errno: crate::error::last_errno(),
        });
    }
    u32::try_from(block_bytes)
        .ok()
        .filter(|bytes| bytes.is_power_of_two())
        .ok_or(IoError::Open {
            path: path.to_owned(),
            errno: libc::EINVAL,
        })
}

/// O_DIRECT (offset, memory) alignment from statx, when the kernel and filesystem tell it.
fn direct_alignment(fd: RawFd) -> Option<(u32, u32)> {
    // SAFETY: statx is plain data; all-zero is a valid value to be overwritten.
    let mut statx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty path with AT_EMPTY_PATH names `fd`; statx writes into `statx`.
    let result = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            STATX_DIOALIGN,
            &mut statx,
        )
    };
    if result < 0 || statx.stx_mask & STATX_DIOALIGN == 0 {
        return None;
    }
    let offset = statx.stx_dio_offset_align;
    let memory = statx.stx_dio_mem_align;
    (offset.is_power_of_two() && memory.is_power_of_two()).then_some((offset, memory))
}

/// Creates a sparse regular file of `size_bytes` (a positive multiple of 512) to use as a
/// member; refuses to overwrite an existing file.
pub fn create_file_member(path: impl AsRef<Path>, size_bytes: u64) -> Result<(), IoError> {
    let path = path.as_ref();
    if size_bytes == 0 || !size_bytes.is_multiple_of(512) {
        return Err(IoError::BadSize { size_bytes });
    }
    let to_error = |error: std::io::Error| IoError::Open {
        path: path.to_owned(),
        errno: error.raw_os_error().unwrap_or(libc::EIO),
    };
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(to_error)?;
    file.set_len(size_bytes).map_err(to_error)
}
