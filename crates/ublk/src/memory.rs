//! Memory mappings: the queues' request buffers (anonymous memory) and their request
//! descriptors (mapped read-only from the character device).

use std::os::fd::RawFd;

use crate::error::{UblkError, last_errno};

/// A mapping, unmapped when dropped.
pub(crate) struct Mapping {
    pointer: *mut u8,
    len_bytes: usize,
}

// SAFETY: the mapping is plain memory; who may touch which bytes is ruled by its users
// (a tag's buffer belongs to one request at a time).
unsafe impl Send for Mapping {}
// SAFETY: as above; the type itself hands out only raw pointers.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Zeroed private memory, committed only as it is touched.
    pub fn anonymous(len_bytes: usize) -> Result<Mapping, UblkError> {
        assert!(len_bytes > 0);
        // SAFETY: a new anonymous mapping at an address the kernel picks; no memory of ours
        // is involved.
        let pointer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if pointer == libc::MAP_FAILED {
            return Err(UblkError::System("mmap of request buffers", last_errno()));
        }
        Ok(Mapping {
            pointer: pointer.cast(),
            len_bytes,
        })
    }

    /// A read-only shared mapping of `len_bytes` of `fd` at `offset_bytes`.
    pub fn read_only(fd: RawFd, offset_bytes: u64, len_bytes: usize) -> Result<Mapping, UblkError> {
        assert!(len_bytes > 0);
        // SAFETY: a new mapping of a descriptor the caller keeps open; the kernel picks the
        // address.
        let pointer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                offset_bytes as libc::off_t,
            )
        };
        if pointer == libc::MAP_FAILED {
            return Err(UblkError::System(
                "mmap of request descriptors",
                last_errno(),
            ));
        }
        Ok(Mapping {
            pointer: pointer.cast(),
            len_bytes,
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.pointer
    }

    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region `mmap` returned; nothing uses it any more (its
        // owner is being dropped).
        unsafe { libc::munmap(self.pointer.cast(), self.len_bytes) };
    }
}

/// The system's page size.
pub(crate) fn page_bytes() -> usize {
    // SAFETY: sysconf takes no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 { page as usize } else { 4096 }
}
