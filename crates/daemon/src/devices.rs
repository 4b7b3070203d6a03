//! Physical drives as the daemon holds them: a local file or block device, an in-memory test
//! device, or a remote NBD export; opened by path or URI, and probed for a superblock.

use std::os::fd::RawFd;
use std::time::Duration;
use tessera_api::model::PdKind;
use tessera_buffer::BufferPool;
use tessera_io::{MemberDevice, MemberKind, MemoryMember, RemoteMember, SyncMember};
use tessera_nbd::NbdUri;
use tessera_raid::superblock::{
    SUPERBLOCK_BYTES, SUPERBLOCK_OFFSETS, Superblock, SuperblockError, newest_copy,
};

/// How a drive is reached.
pub enum Handle {
    Local(MemberDevice),
    Memory(MemoryMember),
    Remote(RemoteMember),
}

pub struct Device {
    pub path: String,
    pub kind: PdKind,
    pub size_bytes: u64,
    pub handle: Handle,
}

/// What a probe of a drive found.
pub enum Probe {
    /// A Tessera member: its newest valid superblock.
    Member(Box<Superblock>),
    /// No Tessera superblock (a blank or foreign drive).
    Blank,
    /// Tessera magic, but no valid copy (damaged, or a newer format): left untouched.
    Damaged(SuperblockError),
}

impl Device {
    /// Opens `path`: `nbd://…`/`nbd+unix://…` (a remote export), `memory://SIZE` (an in-memory
    /// test drive of SIZE bytes, K/M/G suffixes allowed), or a file or block device.
    pub fn open(path: &str) -> Result<Device, String> {
        if path.starts_with("nbd://") || path.starts_with("nbd+unix://") || path.starts_with("nbds")
        {
            let uri: NbdUri = path.parse().map_err(|e| format!("{path}: {e}"))?;
            let remote = RemoteMember::connect(&uri).map_err(|e| format!("{path}: {e}"))?;
            return Ok(Device {
                path: path.into(),
                kind: PdKind::Nbd,
                size_bytes: remote.size_bytes(),
                handle: Handle::Remote(remote),
            });
        }
        if let Some(size) = path.strip_prefix("memory://") {
            let size_bytes = parse_size(size).ok_or_else(|| {
                format!("{path}: memory drives are memory://SIZE, e.g. memory://1G")
            })?;
            let member = MemoryMember::new(size_bytes).map_err(|e| format!("{path}: {e}"))?;
            return Ok(Device {
                path: path.into(),
                kind: PdKind::Memory,
                size_bytes,
                handle: Handle::Memory(member),
            });
        }
        let member = tessera_io::open_member(path).map_err(|e| format!("{path}: {e}"))?;
        let kind = match member.kind() {
            MemberKind::BlockDevice => PdKind::Block,
            _ => PdKind::File,
        };
        Ok(Device {
            path: path.into(),
            kind,
            size_bytes: member.size_bytes(),
            handle: Handle::Local(member),
        })
    }

    /// Reads `len` bytes at `offset_bytes`, synchronously (probing and start-up only).
    pub fn read_sync(&mut self, offset_bytes: u64, len: usize) -> Result<Vec<u8>, String> {
        let mut pool = BufferPool::new(len);
        let buffer = pool.alloc(len).expect("fresh pool");
        let pointer = pool.as_mut_ptr(pool.full(buffer));
        match &mut self.handle {
            Handle::Local(device) => {
                let fd = device.fd_for(offset_bytes, len as u32, pointer);
                read_exact_at(fd, pointer, len, offset_bytes)
                    .map_err(|e| format!("{}: {e}", self.path))?;
            }
            Handle::Memory(member) => {
                member
                    .read_at(offset_bytes, pool.slice_mut(buffer))
                    .map_err(|e| format!("{}: {e}", self.path))?;
            }
            Handle::Remote(remote) => {
                // SAFETY: the pool outlives the wait below, which takes the completion before
                // the buffer is touched again.
                unsafe { remote.submit_read(0, offset_bytes, pointer, len as u32) };
                let completion = wait_remote(remote).map_err(|e| format!("{}: {e}", self.path))?;
                if completion < 0 {
                    return Err(format!(
                        "{}: read failed: {}",
                        self.path,
                        tessera_io::errno_text(-completion)
                    ));
                }
            }
        }
        Ok(pool.slice(buffer).to_vec())
    }

    /// Writes zeroes over both superblock copies (a drive leaving Tessera for good).
    pub fn erase_superblocks(&mut self) -> Result<(), String> {
        let zeroes = vec![0u8; SUPERBLOCK_BYTES];
        for offset in SUPERBLOCK_OFFSETS {
            self.write_sync(offset, &zeroes)?;
        }
        Ok(())
    }

    /// Writes `data` at `offset_bytes` and flushes, synchronously (import and erasure only).
    pub fn write_sync(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), String> {
        let mut pool = BufferPool::new(data.len());
        let buffer = pool.alloc(data.len()).expect("fresh pool");
        pool.slice_mut(buffer).copy_from_slice(data);
        let pointer = pool.as_mut_ptr(pool.full(buffer));
        match &mut self.handle {
            Handle::Local(device) => {
                let fd = device.fd_for(offset_bytes, data.len() as u32, pointer);
                write_all_at(fd, pointer, data.len(), offset_bytes)
                    .map_err(|e| format!("{}: {e}", self.path))?;
                // SAFETY: fdatasync on a descriptor the device keeps open.
                if unsafe { libc::fdatasync(device.flush_fd()) } != 0 {
                    return Err(format!(
                        "{}: flush failed: {}",
                        self.path,
                        std::io::Error::last_os_error()
                    ));
                }
            }
            Handle::Memory(member) => member
                .write_at(offset_bytes, data)
                .map_err(|e| format!("{}: {e}", self.path))?,
            Handle::Remote(remote) => {
                // SAFETY: the pool outlives the wait, which takes the completion first.
                unsafe { remote.submit_write(0, offset_bytes, pointer, data.len() as u32, false) };
                let result = wait_remote(remote).map_err(|e| format!("{}: {e}", self.path))?;
                if result < 0 {
                    return Err(format!(
                        "{}: write failed: {}",
                        self.path,
                        tessera_io::errno_text(-result)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Looks for a Tessera superblock.
    pub fn probe(&mut self) -> Result<Probe, String> {
        let minimum = SUPERBLOCK_OFFSETS[1] + SUPERBLOCK_BYTES as u64;
        if self.size_bytes < minimum {
            return Ok(Probe::Blank);
        }
        let a = self.read_sync(SUPERBLOCK_OFFSETS[0], SUPERBLOCK_BYTES)?;
        let b = self.read_sync(SUPERBLOCK_OFFSETS[1], SUPERBLOCK_BYTES)?;
        Ok(match newest_copy(&a, &b) {
            Ok(superblock) => Probe::Member(Box::new(superblock)),
            Err(SuperblockError::NotTessera) => match Superblock::decode(&b) {
                Err(SuperblockError::NotTessera) => Probe::Blank,
                Err(error) => Probe::Damaged(error),
                Ok(_) => unreachable!("newest_copy would have taken copy B"),
            },
            Err(error) => Probe::Damaged(error),
        })
    }
}

fn read_exact_at(fd: RawFd, pointer: *mut u8, len: usize, offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        // SAFETY: `pointer + done .. pointer + len` lies in a live buffer owned by the caller.
        let n = unsafe {
            libc::pread(
                fd,
                pointer.add(done).cast(),
                len - done,
                (offset + done as u64) as libc::off_t,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "short read",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

fn write_all_at(fd: RawFd, pointer: *const u8, len: usize, offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        // SAFETY: `pointer + done .. pointer + len` lies in a live buffer owned by the caller.
        let n = unsafe {
            libc::pwrite(
                fd,
                pointer.add(done).cast(),
                len - done,
                (offset + done as u64) as libc::off_t,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        done += n as usize;
    }
    Ok(())
}

/// Waits for the one outstanding request of a remote member, for up to 30 s.
fn wait_remote(remote: &RemoteMember) -> Result<i32, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut completions = Vec::new();
    loop {
        if remote.take_completions(&mut completions) > 0 {
            return Ok(completions[0].result);
        }
        if std::time::Instant::now() > deadline {
            return Err("no answer from the remote drive within 30 s".into());
        }
        let mut poll = libc::pollfd {
            fd: remote.wake_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, waited on for at most 100 ms.
        unsafe { libc::poll(&mut poll, 1, 100) };
    }
}

/// `4096`, `64K`, `1M`, `2G`, `1T` (binary units).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = match text.chars().last()?.to_ascii_uppercase() {
        'K' => (&text[..text.len() - 1], 10),
        'M' => (&text[..text.len() - 1], 20),
        'G' => (&text[..text.len() - 1], 30),
        'T' => (&text[..text.len() - 1], 40),
        _ => (text, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}
