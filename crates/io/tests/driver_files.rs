//! Both drivers against files: round trips with and without O_DIRECT, many operations in flight,
//! completions out of order, registered buffers, short reads at the end, timeouts.
//! The reference is an in-memory model of the file and the file as `std::fs::read` sees it.

mod support;

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use support::{AlignedBuffer, Rng, ScratchDir, collect, drivers};
use tessera_io::{AnyDriver, Driver, Operation, UringConfig, UringDriver};

const FILE_BYTES: usize = 1 << 20;

fn open_file(path: &Path, direct: bool) -> File {
    let flags = if direct { libc::O_DIRECT } else { 0 };
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(flags)
        .open(path)
        .unwrap()
}

/// Writes random data at random places through the driver (some with FUA), fsyncs, reads everything back
/// through the driver, and checks both against the model and against the file's contents.
fn round_trip(driver: &mut AnyDriver, path: &Path, direct: bool, seed: u64, inline: bool) {
    let file = open_file(path, direct);
    driver.set_inline(file.as_raw_fd(), inline);
    file.set_len(FILE_BYTES as u64).unwrap();
    let fd = file.as_raw_fd();
    let mut model = vec![0u8; FILE_BYTES];
    let mut rng = Rng::new(seed);
    // O_DIRECT needs 4 KiB here (the conservative alignment); buffered takes any byte.
    let unit = if direct { 4096 } else { 1 };
    let mut buffer = AlignedBuffer::new(FILE_BYTES);

    for round in 0..4 {
        // Non-overlapping extents within each round, so in-flight writes do not race.
        let mut extents = Vec::new();
        let mut position = rng.below(8 * unit as u64) as usize / unit * unit;
        while position < FILE_BYTES {
            let len = ((1 + rng.below(64 * 1024 / unit as u64)) as usize * unit)
                .min(FILE_BYTES - position);
            extents.push((position, len));
            position += len + (rng.below(4) as usize) * unit;
        }
        rng.fill(buffer.as_mut_slice());
        for (index, &(offset, len)) in extents.iter().enumerate() {
            let source = buffer.as_mut_ptr().wrapping_add(offset);
            // Some writes go with RWF_DSYNC (FUA): the same bytes must land.
            let fua = rng.below(4) == 0;
            // SAFETY: `buffer` outlives the completions collected below and is not touched
            // until then.
            unsafe {
                driver.submit(
                    index as u64,
                    Operation::Write {
                        fd,
                        offset_bytes: offset as u64,
                        buffer: source,
                        len_bytes: len as u32,
                        fua,
                    },
                );
            }
            model[offset..offset + len].copy_from_slice(&buffer.as_slice()[offset..offset + len]);
        }
        for completion in collect(driver, extents.len()) {
            let (_, len) = extents[completion.token as usize];
            assert_eq!(completion.result, len as i32, "round {round} write");
        }
        driver.submit_fsync(u64::MAX, fd);
        assert_eq!(collect(driver, 1)[0].result, 0);
    }

    assert_eq!(std::fs::read(path).unwrap(), model, "file contents");
    let mut readback = AlignedBuffer::new(FILE_BYTES);
    let piece = 12 * 4096;
    let pieces = FILE_BYTES.div_ceil(piece);
    for index in 0..pieces {
        let offset = index * piece;
        let len = piece.min(FILE_BYTES - offset);
        // SAFETY: `readback` outlives the completions and is not touched until then.
        unsafe {
            driver.submit(
                index as u64,
                Operation::Read {
                    fd,
                    offset_bytes: offset as u64,
                    buffer: readback.as_mut_ptr().wrapping_add(offset),
                    len_bytes: len as u32,
                },
            );
        }
    }
    for completion in collect(driver, pieces) {
        let offset = completion.token as usize * piece;
        assert_eq!(completion.result, piece.min(FILE_BYTES - offset) as i32);
    }
    assert!(
        readback.as_slice() == model.as_slice(),
        "read back through the driver"
    );
    driver.set_inline(fd, false);
}

#[test]
fn file_round_trips_with_and_without_o_direct() {
    let scratch = ScratchDir::new();
    for (name, mut driver) in drivers() {
        for direct in [true, false] {
            let path = scratch.file(&format!("{name}-{direct}"));
            round_trip(&mut driver, &path, direct, 7 + direct as u64, false);
            assert_eq!(driver.in_flight(), 0, "{name}");
            let path = scratch.file(&format!("{name}-{direct}-inline"));
            round_trip(&mut driver, &path, direct, 9 + direct as u64, true);
            assert_eq!(driver.in_flight(), 0, "{name}");
        }
    }
}

/// More operations than the ring has slots, all submitted before one wait: none is lost, each
/// completes once with the right result.
#[test]
fn thousands_in_flight_all_complete_once() {
    let scratch = ScratchDir::new();
    for (name, mut driver) in drivers() {
        let path = scratch.file(name);
        let file = open_file(&path, true);
        file.set_len(FILE_BYTES as u64).unwrap();
        let count = 3000;
        let mut buffer = AlignedBuffer::new(count * 4096);
        for index in 0..count {
            buffer.as_mut_slice()[index * 4096..(index + 1) * 4096].fill(index as u8);
        }
        for index in 0..count {
            // SAFETY: `buffer` outlives the completions and is untouched until then.
            unsafe {
                driver.submit(
                    index as u64,
                    Operation::Write {
                        fd: file.as_raw_fd(),
                        offset_bytes: (index % 256 * 4096) as u64,
                        buffer: buffer.as_mut_ptr().wrapping_add(index * 4096),
                        len_bytes: 4096,
                        fua: false,
                    },
                );
            }
            // Same-offset writes race; only the ones of the last lap are checked below.
            if index % 256 == 255 {
                for completion in collect(&mut driver, 256) {
                    assert_eq!(completion.result, 4096, "{name}");
                }
            }
        }
        let rest = count % 256;
        let mut seen = vec![false; count];
        for completion in collect(&mut driver, rest) {
            assert!(!std::mem::replace(
                &mut seen[completion.token as usize],
                true
            ));
            assert_eq!(completion.result, 4096);
        }
        let contents = std::fs::read(&path).unwrap();
        for (block, bytes) in contents.chunks(4096).enumerate() {
            let last_lap = if block < rest {
                count - rest + block
            } else {
                count - rest - 256 + block
            };
            assert!(
                bytes.iter().all(|&byte| byte == last_lap as u8),
                "{name} block {block}"
            );
        }

        // Reads: all 3000 at once, no wait in between.
        let mut readback = AlignedBuffer::new(count * 4096);
        for index in 0..count {
            // SAFETY: as above.
            unsafe {
                driver.submit(
                    index as u64,
                    Operation::Read {
                        fd: file.as_raw_fd(),
                        offset_bytes: (index % 256 * 4096) as u64,
                        buffer: readback.as_mut_ptr().wrapping_add(index * 4096),
                        len_bytes: 4096,
                    },
                );
            }
        }
        assert_eq!(driver.in_flight(), count);
        let mut seen = vec![false; count];
        for completion in collect(&mut driver, count) {
            assert!(
                !std::mem::replace(&mut seen[completion.token as usize], true),
                "{name}"
            );
            assert_eq!(completion.result, 4096);
        }
        for index in 0..count {
            let block = index % 256;
            assert_eq!(
                &readback.as_slice()[index * 4096..(index + 1) * 4096],
                &contents[block * 4096..(block + 1) * 4096]
            );
        }
        assert_eq!(driver.in_flight(), 0);
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just created and are owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// An operation submitted first (a poll on an idle pipe) completes after ones submitted later.
#[test]
fn completions_come_out_of_submission_order() {
    let scratch = ScratchDir::new();
    for (name, mut driver) in drivers() {
        let (read_end, write_end) = pipe();
        let path = scratch.file(name);
        std::fs::write(&path, vec![5u8; 8192]).unwrap();
        let file = open_file(&path, false);
        driver.submit_poll_readable(100, read_end.as_raw_fd());
        let mut buffer = AlignedBuffer::new(8192);
        for index in 0..2u64 {
            // SAFETY: `buffer` outlives the completions.
            unsafe {
                driver.submit(
                    index,
                    Operation::Read {
                        fd: file.as_raw_fd(),
                        offset_bytes: index * 4096,
                        buffer: buffer.as_mut_ptr().wrapping_add(index as usize * 4096),
                        len_bytes: 4096,
                    },
                );
            }
        }
        let mut tokens: Vec<u64> = collect(&mut driver, 2).iter().map(|c| c.token).collect();
        tokens.sort_unstable();
        assert_eq!(tokens, [0, 1], "{name}: the reads overtake the poll");
        assert!(buffer.as_slice()[..8192].iter().all(|&byte| byte == 5));
        // SAFETY: writes one byte from a live array to the pipe.
        let written = unsafe { libc::write(write_end.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        assert_eq!(written, 1);
        let completion = collect(&mut driver, 1)[0];
        assert_eq!(completion.token, 100);
        assert!(
            completion.result & i32::from(libc::POLLIN) != 0,
            "{name}: {completion:?}"
        );
    }
}

#[test]
fn registered_buffers_are_used_for_reads_and_writes_inside_the_arena() {
    let scratch = ScratchDir::new();
    for (name, mut driver) in drivers() {
        let path = scratch.file(name);
        let file = open_file(&path, true);
        file.set_len(1 << 20).unwrap();
        let mut arena = AlignedBuffer::new(1 << 20);
        let mut outside = AlignedBuffer::new(64 * 1024);
        // SAFETY: `arena` outlives the driver (declared before it is dropped below).
        unsafe { driver.register_buffers(arena.as_mut_ptr(), 1 << 20) }.unwrap();
        let mut rng = Rng::new(3);
        rng.fill(&mut arena.as_mut_slice()[..64 * 1024]);
        rng.fill(outside.as_mut_slice());
        let expected_inside = arena.as_slice()[..64 * 1024].to_vec();
        let expected_outside = outside.as_slice().to_vec();
        // SAFETY: both buffers outlive the completions and are untouched until then.
        unsafe {
            driver.submit(
                1,
                Operation::Write {
                    fd: file.as_raw_fd(),
                    offset_bytes: 0,
                    buffer: arena.as_mut_ptr(),
                    len_bytes: 65536,
                    fua: false,
                },
            );
            driver.submit(
                2,
                Operation::Write {
                    fd: file.as_raw_fd(),
                    offset_bytes: 65536,
                    buffer: outside.as_mut_ptr(),
                    len_bytes: 65536,
                    fua: false,
                },
            );
        }
        for completion in collect(&mut driver, 2) {
            assert_eq!(completion.result, 65536, "{name}");
        }
        arena.as_mut_slice().fill(0);
        outside.as_mut_slice().fill(0);
        // SAFETY: as above; reads land at the end of the arena (still inside it).
        unsafe {
            driver.submit(
                3,
                Operation::Read {
                    fd: file.as_raw_fd(),
                    offset_bytes: 0,
                    buffer: arena.as_mut_ptr().wrapping_add((1 << 20) - 65536),
                    len_bytes: 65536,
                },
            );
            driver.submit(
                4,
                Operation::Read {
                    fd: file.as_raw_fd(),
                    offset_bytes: 65536,
                    buffer: outside.as_mut_ptr(),
                    len_bytes: 65536,
                },
            );
        }
        for completion in collect(&mut driver, 2) {
            assert_eq!(completion.result, 65536, "{name}");
        }
        assert_eq!(
            &arena.as_slice()[(1 << 20) - 65536..],
            expected_inside.as_slice()
        );
        assert_eq!(outside.as_slice(), expected_outside.as_slice());
        if let AnyDriver::Uring(uring) = &driver {
            assert_eq!(
                uring.fixed_submissions(),
                2,
                "one fixed write and one fixed read"
            );
        }
        drop(driver);
    }
}

#[test]
fn short_read_at_end_of_file_reports_the_bytes_read() {
    let scratch = ScratchDir::new();
    for (name, mut driver) in drivers() {
        let path = scratch.file(name);
        std::fs::write(&path, vec![9u8; 10_000]).unwrap();
        let file = open_file(&path, false);
        let mut buffer = AlignedBuffer::new(8192);
        // SAFETY: `buffer` outlives the completions.
        unsafe {
            driver.submit(
                1,
                Operation::Read {
                    fd: file.as_raw_fd(),
                    offset_bytes: 8192,
                    buffer: buffer.as_mut_ptr(),
                    len_bytes: 4096,
                },
            );
            driver.submit(
                2,
                Operation::Read {
                    fd: file.as_raw_fd(),
                    offset_bytes: 10_000,
                    buffer: buffer.as_mut_ptr().wrapping_add(4096),
                    len_bytes: 4096,
                },
            );
        }
        let mut completions = collect(&mut driver, 2);
        completions.sort_by_key(|completion| completion.token);
        assert_eq!(completions[0].result, 10_000 - 8192, "{name}");
        assert_eq!(completions[1].result, 0, "{name}");
        assert!(completions[0].expect_bytes(4096).is_err());
        assert!(buffer.as_slice()[..1808].iter().all(|&byte| byte == 9));
    }
}

#[test]
fn errors_come_back_as_negative_errno() {
    let scratch = ScratchDir::new();
    for (name, mut driver) in drivers() {
        let path = scratch.file(name);
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let read_only = File::open(&path).unwrap();
        driver.submit_fsync(1, 1_000_000);
        let buffer = [0u8; 16];
        // SAFETY: `buffer` outlives the completion.
        unsafe {
            driver.submit(
                2,
                Operation::Write {
                    fd: read_only.as_raw_fd(),
                    offset_bytes: 0,
                    buffer: buffer.as_ptr(),
                    len_bytes: 16,
                    fua: false,
                },
            );
        }
        let mut completions = collect(&mut driver, 2);
        completions.sort_by_key(|completion| completion.token);
        assert_eq!(
            completions[0].result,
            -libc::EBADF,
            "{name}: fsync of a closed descriptor"
        );
        assert_eq!(
            completions[1].result,
            -libc::EBADF,
            "{name}: write to a read-only file"
        );
        assert!(completions[0].value().is_err());
    }
}

#[test]
fn wait_times_out_with_no_completions() {
    for (name, mut driver) in drivers() {
        let mut out = Vec::new();
        // Nothing in flight and no timeout: returns at once.
        assert_eq!(driver.wait(&mut out, None).unwrap(), 0, "{name}");
        // Nothing in flight with a timeout: sleeps it out.
        let start = Instant::now();
        assert_eq!(
            driver
                .wait(&mut out, Some(Duration::from_millis(30)))
                .unwrap(),
            0
        );
        assert!(start.elapsed() >= Duration::from_millis(30), "{name}");
        // Something in flight that never completes.
        let (read_end, write_end) = pipe();
        driver.submit_poll_readable(7, read_end.as_raw_fd());
        let start = Instant::now();
        assert_eq!(
            driver
                .wait(&mut out, Some(Duration::from_millis(30)))
                .unwrap(),
            0
        );
        assert!(start.elapsed() >= Duration::from_millis(30), "{name}");
        assert_eq!(driver.wait(&mut out, Some(Duration::ZERO)).unwrap(), 0);
        assert!(out.is_empty());
        assert_eq!(driver.in_flight(), 1);
        drop(write_end);
        // A closed writer makes the pipe readable (POLLHUP): the poll completes.
        let completion = collect(&mut driver, 1)[0];
        assert_eq!(completion.token, 7, "{name}");
        assert!(completion.result > 0, "{name}: {completion:?}");
    }
}

/// Dropping a driver with an operation still in the kernel cancels it and returns.
#[test]
fn dropping_a_driver_with_operations_in_flight_returns() {
    for (name, mut driver) in drivers() {
        let (read_end, _write_end) = pipe();
        driver.submit_poll_readable(1, read_end.as_raw_fd());
        driver.flush_submissions().unwrap();
        let start = Instant::now();
        drop(driver);
        assert!(start.elapsed() < Duration::from_secs(5), "{name}");
    }
}

/// The daemon's pattern: make the driver and register the arena on one thread, then move it to
/// the event-loop thread, which uses and drops it (a single-issuer ring binds to the thread
/// that first waits).
#[test]
fn a_driver_made_on_one_thread_runs_on_another() {
    let scratch = ScratchDir::new();
    let path = scratch.file("moved");
    std::fs::write(&path, vec![3u8; 65536]).unwrap();
    for (name, mut driver) in drivers() {
        let mut arena = AlignedBuffer::new(65536);
        let pointer = arena.as_mut_ptr() as usize;
        // SAFETY: the arena outlives the driver, which the thread below drops before joining.
        unsafe { driver.register_buffers(arena.as_mut_ptr(), 65536) }.unwrap();
        let file = open_file(&path, true);
        let fd = file.as_raw_fd();
        let worker = std::thread::spawn(move || {
            // SAFETY: the arena stays allocated and untouched by the main thread until join.
            unsafe {
                driver.submit(
                    1,
                    Operation::Read {
                        fd,
                        offset_bytes: 0,
                        buffer: pointer as *mut u8,
                        len_bytes: 65536,
                    },
                );
            }
            let result = collect(&mut driver, 1)[0].result;
            drop(driver);
            result
        });
        assert_eq!(worker.join().unwrap(), 65536, "{name}");
        assert!(arena.as_slice().iter().all(|&byte| byte == 3), "{name}");
    }
}

/// A tiny ring (2 submission entries, 4 slots): operations beyond the slots wait in the driver,
/// including behind long-lived polls, and all complete once room appears.
#[test]
fn a_tiny_ring_queues_what_does_not_fit() {
    let config = UringConfig {
        entries: 2,
        completion_entries: 4,
        single_issuer: true,
    };
    let mut driver = AnyDriver::Uring(UringDriver::with_config(config).unwrap());
    let scratch = ScratchDir::new();
    let path = scratch.file("tiny");
    std::fs::write(
        &path,
        (0..64 * 512)
            .map(|index| (index / 512) as u8)
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let file = open_file(&path, false);

    // Three polls that stay pending hold three of the four slots.
    let pipes: Vec<(OwnedFd, OwnedFd)> = (0..3).map(|_| pipe()).collect();
    for (index, (read_end, _)) in pipes.iter().enumerate() {
        driver.submit_poll_readable(1000 + index as u64, read_end.as_raw_fd());
    }
    // Fifty reads squeeze through the one free slot.
    let mut buffer = AlignedBuffer::new(64 * 512);
    for index in 0..50u64 {
        // SAFETY: `buffer` outlives the completions.
        unsafe {
            driver.submit(
                index,
                Operation::Read {
                    fd: file.as_raw_fd(),
                    offset_bytes: index * 512,
                    buffer: buffer.as_mut_ptr().wrapping_add(index as usize * 512),
                    len_bytes: 512,
                },
            );
        }
    }
    let mut seen = [false; 50];
    for completion in collect(&mut driver, 50) {
        assert_eq!(completion.result, 512);
        assert!(!std::mem::replace(
            &mut seen[completion.token as usize],
            true
        ));
    }
    for index in 0..50 {
        assert!(
            buffer.as_slice()[index * 512..(index + 1) * 512]
                .iter()
                .all(|&byte| byte == index as u8)
        );
    }

    // A fourth poll takes the last slot; a read then waits in the driver.
    let (extra_read, extra_write) = pipe();
    driver.submit_poll_readable(1003, extra_read.as_raw_fd());
    // SAFETY: as above.
    unsafe {
        driver.submit(
            60,
            Operation::Read {
                fd: file.as_raw_fd(),
                offset_bytes: 0,
                buffer: buffer.as_mut_ptr(),
                len_bytes: 512,
            },
        );
    }
    let mut out = Vec::new();
    assert_eq!(
        driver
            .wait(&mut out, Some(Duration::from_millis(20)))
            .unwrap(),
        0
    );
    assert_eq!(driver.in_flight(), 5);
    drop(extra_write);
    let mut tokens: Vec<u64> = collect(&mut driver, 2)
        .iter()
        .map(|completion| completion.token)
        .collect();
    tokens.sort_unstable();
    assert_eq!(tokens, [60, 1003]);
    drop(pipes);
    assert_eq!(collect(&mut driver, 3).len(), 3);
    assert_eq!(driver.in_flight(), 0);
}

/// An operation run inline at submission is taken without a wait, once: `wait` does not return
/// it again.
#[test]
fn inline_completions_are_taken_without_a_wait_once() {
    let scratch = ScratchDir::new();
    for (name, mut driver) in drivers() {
        let path = scratch.file(&format!("{name}-take-ready"));
        let file = open_file(&path, false);
        file.set_len(FILE_BYTES as u64).unwrap();
        let fd = file.as_raw_fd();
        driver.set_inline(fd, true);
        let mut buffer = AlignedBuffer::new(4096);
        buffer.as_mut_slice().fill(0x5a);
        // SAFETY: `buffer` outlives the write, which runs inline (and is collected below).
        unsafe {
            driver.submit(
                7,
                Operation::Write {
                    fd,
                    offset_bytes: 8192,
                    buffer: buffer.as_mut_ptr(),
                    len_bytes: 4096,
                    fua: false,
                },
            );
        }
        let mut taken = Vec::new();
        assert_eq!(driver.take_ready(&mut taken), 1, "{name}");
        assert_eq!((taken[0].token, taken[0].result), (7, 4096), "{name}");
        assert_eq!(driver.take_ready(&mut taken), 0, "{name}: taken once");
        let mut waited = Vec::new();
        let got = driver
            .wait(&mut waited, Some(Duration::from_millis(50)))
            .unwrap();
        assert_eq!(got, 0, "{name}: wait does not return it again");
        let on_disk = std::fs::read(&path).unwrap();
        assert!(on_disk[8192..12288].iter().all(|&b| b == 0x5a), "{name}");
        driver.set_inline(fd, false);
    }
}
