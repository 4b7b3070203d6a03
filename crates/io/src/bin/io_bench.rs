//! `io-bench`: random reads at a fixed queue depth on one member file through each driver,
//! printing IOPS. The anchor (issue 7, reference.md): fio, io_uring, O_DIRECT, 4 KiB random
//! reads at QD32 on one tmpfs file reached 872k IOPS on this kind of machine.
//!
//! ```text
//! cargo run --release -p tessera-io --bin io-bench -- [--seconds 5] [--queue-depth 32]
//!     [--block-bytes 4096] [--size-mib 1024] [--file PATH] [--runs 3] [--buffered]
//!     [--ring-entries 256] [--completion-entries 4096]
//! ```
//! The file defaults to a fresh one in /dev/shm, filled with data first and removed after.
//! `--buffered` reads through the page cache instead of O_DIRECT.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tessera_io::{
    AnyDriver, Completion, Driver, MemberDevice, Operation, PollDriver, SyncMember, UringConfig,
    UringDriver, create_file_member, open_member,
};

struct Options {
    seconds: f64,
    queue_depth: usize,
    block_bytes: usize,
    size_mib: u64,
    file: Option<PathBuf>,
    runs: usize,
    buffered: bool,
    ring_entries: u32,
    completion_entries: u32,
}

fn parse_options() -> Options {
    let mut options = Options {
        seconds: 5.0,
        queue_depth: 32,
        block_bytes: 4096,
        size_mib: 1024,
        file: None,
        runs: 3,
        buffered: false,
        ring_entries: tessera_io::DEFAULT_RING_ENTRIES,
        completion_entries: tessera_io::DEFAULT_COMPLETION_ENTRIES,
    };
    let mut arguments = std::env::args().skip(1);
    while let Some(argument) = arguments.next() {
        let mut value = || {
            arguments
                .next()
                .unwrap_or_else(|| usage(&format!("{argument} needs a value")))
        };
        match argument.as_str() {
            "--seconds" => {
                options.seconds = value().parse().unwrap_or_else(|_| usage("bad --seconds"))
            }
            "--queue-depth" => {
                options.queue_depth = value()
                    .parse()
                    .unwrap_or_else(|_| usage("bad --queue-depth"))
            }
            "--block-bytes" => {
                options.block_bytes = value()
                    .parse()
                    .unwrap_or_else(|_| usage("bad --block-bytes"))
            }
            "--size-mib" => {
                options.size_mib = value().parse().unwrap_or_else(|_| usage("bad --size-mib"))
            }
            "--file" => options.file = Some(PathBuf::from(value())),
            "--runs" => options.runs = value().parse().unwrap_or_else(|_| usage("bad --runs")),
            "--buffered" => options.buffered = true,
            "--ring-entries" => {
                options.ring_entries = value()
                    .parse()
                    .unwrap_or_else(|_| usage("bad --ring-entries"))
            }
            "--completion-entries" => {
                options.completion_entries = value()
                    .parse()
                    .unwrap_or_else(|_| usage("bad --completion-entries"))
            }
            "--help" | "-h" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if options.block_bytes == 0
        || !options.block_bytes.is_multiple_of(512)
        || options.queue_depth == 0
    {
        usage("--block-bytes must be a positive multiple of 512 and --queue-depth positive");
    }
    options
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("io-bench: {problem}");
    }
    eprintln!(
        "usage: io-bench [--seconds S] [--queue-depth N] [--block-bytes B] [--size-mib M] \
         [--file PATH] [--runs R] [--buffered] [--ring-entries N] [--completion-entries N]"
    );
    std::process::exit(if problem.is_empty() { 0 } else { 2 })
}

/// A 4 KiB-aligned arena of `queue_depth` blocks.
struct Arena {
    pointer: *mut u8,
    layout: std::alloc::Layout,
}

impl Arena {
    fn new(len_bytes: usize) -> Arena {
        let layout = std::alloc::Layout::from_size_align(len_bytes, 4096).expect("valid layout");
        // SAFETY: the layout's size is non-zero (queue depth and block size are positive).
        let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!pointer.is_null(), "out of memory");
        Arena { pointer, layout }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; drivers using it are dropped first.
        unsafe { std::alloc::dealloc(self.pointer, self.layout) }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Runs random reads for the configured time; returns IOPS.
fn run(driver: &mut AnyDriver, member: &MemberDevice, arena: &Arena, options: &Options) -> f64 {
    let blocks = member.size_bytes() / options.block_bytes as u64;
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let submit = |driver: &mut AnyDriver, slot: usize, rng: &mut Rng| {
        let offset_bytes = rng.next() % blocks * options.block_bytes as u64;
        let buffer = arena.pointer.wrapping_add(slot * options.block_bytes);
        let len_bytes = options.block_bytes as u32;
        let fd = if options.buffered {
            member.flush_fd()
        } else {
            member.fd_for(offset_bytes, len_bytes, buffer)
        };
        // SAFETY: slot `slot` of the arena is used by this read only, until its completion;
        // the arena outlives the driver's use of it (all reads are reaped before returning).
        unsafe {
            driver.submit(
                slot as u64,
                Operation::Read {
                    fd,
                    offset_bytes,
                    buffer,
                    len_bytes,
                },
            )
        };
    };
    for slot in 0..options.queue_depth {
        submit(driver, slot, &mut rng);
    }
    let mut completions: Vec<Completion> = Vec::with_capacity(options.queue_depth);
    let duration = Duration::from_secs_f64(options.seconds);
    let start = Instant::now();
    let mut done: u64 = 0;
    loop {
        completions.clear();
        driver.wait(&mut completions, None).expect("wait");
        for completion in &completions {
            assert_eq!(
                completion.result, options.block_bytes as i32,
                "read failed: {completion:?}"
            );
        }
        done += completions.len() as u64;
        if start.elapsed() >= duration {
            break;
        }
        for completion in &completions {
            submit(driver, completion.token as usize, &mut rng);
        }
    }
    let elapsed = start.elapsed();
    while driver.in_flight() > 0 {
        completions.clear();
        driver.wait(&mut completions, None).expect("wait");
    }
    done as f64 / elapsed.as_secs_f64()
}

fn main() {
    let options = parse_options();
    let (path, remove_after) = match &options.file {
        Some(path) => (path.clone(), false),
        None => {
            let path = PathBuf::from(format!("/dev/shm/tessera-io-bench-{}", std::process::id()));
            let size_bytes = options.size_mib << 20;
            create_file_member(&path, size_bytes).expect("create the member file");
            let mut member = open_member(&path).expect("open the member file");
            let chunk: Vec<u8> = (0..1 << 20)
                .map(|index: u32| (index * 31 + 7) as u8)
                .collect();
            for offset in (0..size_bytes).step_by(1 << 20) {
                member
                    .write_at(offset, &chunk)
                    .expect("fill the member file");
            }
            (path, true)
        }
    };
    let member = open_member(&path).expect("open the member");
    println!(
        "io-bench: {} KiB random reads, queue depth {}, {} s per run, {} runs, {} ({} MiB), \
         O_DIRECT {}, non-blocking I/O {}",
        options.block_bytes / 1024,
        options.queue_depth,
        options.seconds,
        options.runs,
        path.display(),
        member.size_bytes() >> 20,
        if member.direct() { "on" } else { "off" },
        if member.nowait_io() {
            "yes"
        } else {
            "no (io_uring punts to workers)"
        },
    );
    let arena = Arena::new(options.queue_depth * options.block_bytes);
    // (name, io_uring single issuer (None: the poll driver), registered arena, run inline)
    let configurations: [(&str, Option<bool>, bool, bool); 6] = [
        (
            "io_uring single issuer, registered buffers",
            Some(true),
            true,
            false,
        ),
        (
            "io_uring single issuer, plain buffers",
            Some(true),
            false,
            false,
        ),
        (
            "io_uring cooperative, registered buffers",
            Some(false),
            true,
            false,
        ),
        (
            "io_uring cooperative, plain buffers",
            Some(false),
            false,
            false,
        ),
        ("io_uring, member set inline", Some(true), true, true),
        ("poll fallback (synchronous pread)", None, false, false),
    ];
    println!("| driver | IOPS per run | median IOPS |");
    println!("|---|---|---|");
    for (name, single_issuer, register, inline) in configurations {
        let mut results = Vec::new();
        for _ in 0..options.runs {
            let mut driver = match single_issuer {
                Some(single_issuer) => {
                    let config = UringConfig {
                        entries: options.ring_entries,
                        completion_entries: options.completion_entries,
                        single_issuer,
                    };
                    AnyDriver::Uring(UringDriver::with_config(config).expect("io_uring"))
                }
                None => AnyDriver::Poll(PollDriver::new()),
            };
            if register {
                // SAFETY: `arena` outlives `driver`, which is dropped at the end of this loop
                // iteration.
                unsafe { driver.register_buffers(arena.pointer, arena.layout.size()) }
                    .expect("register the arena");
            }
            for fd in member.descriptors() {
                driver.set_inline(fd, inline);
            }
            results.push(run(&mut driver, &member, &arena, &options));
            if let AnyDriver::Uring(uring) = &driver {
                assert_eq!(uring.fixed_submissions() > 0, register && !inline);
            }
        }
        let runs: Vec<String> = results
            .iter()
            .map(|iops| format!("{:.0}k", iops / 1000.0))
            .collect();
        results.sort_by(f64::total_cmp);
        println!(
            "| {name} | {} | {:.0}k |",
            runs.join(" / "),
            results[results.len() / 2] / 1000.0
        );
    }
    if let Ok(ring) = UringDriver::new() {
        println!(
            "(default ring: {} entries, {})",
            ring.ring_entries(),
            ring.setup_description()
        );
    }
    drop(member);
    if remove_after {
        let _ = std::fs::remove_file(&path);
    }
}
