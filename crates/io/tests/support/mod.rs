//! Helpers shared by the integration tests: both drivers, aligned buffers, scratch files on
//! tmpfs, seeded data.

#![allow(dead_code)]

use std::alloc::Layout;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tessera_io::{AnyDriver, Completion, Driver, DriverChoice, open_driver};

/// Both drivers, named, for tests that must hold for each.
pub fn drivers() -> Vec<(&'static str, AnyDriver)> {
    let uring = open_driver(DriverChoice::Uring).expect("io_uring works on the test machine");
    let poll = open_driver(DriverChoice::Poll).expect("poll always works");
    vec![("io_uring", uring.driver), ("poll", poll.driver)]
}

/// Waits until `count` completions have arrived (panics after 10 s without progress).
pub fn collect(driver: &mut AnyDriver, count: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    while out.len() < count {
        let got = driver
            .wait(&mut out, Some(Duration::from_secs(10)))
            .expect("wait");
        assert!(
            got > 0,
            "no completion within 10 s ({} of {count})",
            out.len()
        );
    }
    assert_eq!(out.len(), count, "more completions than operations");
    out
}

/// A zeroed, 4 KiB-aligned heap buffer (what O_DIRECT needs).
pub struct AlignedBuffer {
    pointer: *mut u8,
    layout: Layout,
}

impl AlignedBuffer {
    pub fn new(len_bytes: usize) -> AlignedBuffer {
        let layout = Layout::from_size_align(len_bytes.max(4096), 4096).unwrap();
        // SAFETY: the layout has a non-zero size.
        let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!pointer.is_null());
        AlignedBuffer { pointer, layout }
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.pointer
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation is live, initialised (zeroed) and `layout.size()` long.
        unsafe { std::slice::from_raw_parts(self.pointer, self.layout.size()) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.pointer, self.layout.size()) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.pointer, self.layout) }
    }
}

/// A scratch directory on tmpfs, removed when dropped.
pub struct ScratchDir {
    path: PathBuf,
}

static SCRATCH_COUNTER: AtomicU64 = AtomicU64::new(0);

impl ScratchDir {
    pub fn new() -> ScratchDir {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = base.join(format!(
            "tessera-io-test-{}-{}",
            std::process::id(),
            SCRATCH_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        ScratchDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A small seeded generator (xorshift64*), so failures replay.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    pub fn fill(&mut self, bytes: &mut [u8]) {
        for byte in bytes {
            *byte = self.next() as u8;
        }
    }
}
