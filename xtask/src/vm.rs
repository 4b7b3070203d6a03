//! `cargo xtask vm`: the scripted test VM (docs/vm.md). It builds a minimal initramfs image from
//! Debian packages (the bookworm-backports kernel with md, nbd and ublk, busybox, mdadm, fio,
//! nbd-client, file system tools), boots it with QEMU and virtio disks backed by sparse files,
//! runs a shell script inside and exits with the script's status.
//!
//! The command's own exit status: the script's status when the guest reported one; 2 for bad
//! usage; 77 when a prerequisite is missing (QEMU, the Debian mirror), so tests can skip; 1 for
//! any other failure, including a guest that never reported a result.

mod apt;
mod cpio;
mod deb;
mod elf;
mod image;
mod libraries;
mod modules;
mod payload;
mod qemu;
mod spec;
mod tree;

use std::fmt;
use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: cargo xtask vm build [--update]
       cargo xtask vm run [OPTIONS] SCRIPT [ARGUMENT]...

run options:
  --disks NxSIZE          N virtio disks of SIZE (K, M, G), sparse files; repeatable (/dev/vda...)
  --include-binary PATH   copy a host executable to /usr/local/bin (with host libraries it needs)
  --include-file HOST[:GUEST]  copy a host file (default guest path /tessera/NAME)
  --module NAME           load a kernel module before the script (repeatable)
  --memory SIZE           guest memory (default 2G)
  --cpus N                guest CPUs (default 2)
  --timeout SECONDS       kill the guest after this long (default 600)
  --kernel-log            show kernel messages on the console (no `quiet`)
  --keep                  keep the run directory (disks, initrd, console log)
  --quiet                 do not echo the console while the guest runs

environment: TESSERA_VM_CACHE (cache directory, default target/vm), TESSERA_VM_ACCEL (kvm|tcg),
TESSERA_VM_QEMU (QEMU binary), TESSERA_VM_DEBIAN_MIRROR (mirror URI)";

const EXIT_USAGE: u8 = 2;
const EXIT_UNAVAILABLE: u8 = 77;

/// Errors of the VM tooling.
#[derive(Debug)]
pub enum VmError {
    /// A prerequisite is missing on this machine (QEMU, apt, the Debian mirror): tests skip.
    Unavailable(String),
    /// The command line is wrong.
    Usage(String),
    /// Building the image or running the guest failed.
    Failed(String),
}

impl VmError {
    /// Wraps an I/O error with the path it concerns.
    fn io(path: &Path) -> impl FnOnce(io::Error) -> VmError + '_ {
        move |error| VmError::Failed(format!("{}: {error}", path.display()))
    }
}

impl fmt::Display for VmError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmError::Unavailable(message) => write!(formatter, "unavailable: {message}"),
            VmError::Usage(message) => write!(formatter, "{message}\n{USAGE}"),
            VmError::Failed(message) => write!(formatter, "{message}"),
        }
    }
}

/// Where the VM keeps its caches and runs.
pub struct Paths {
    workspace: PathBuf,
    cache: PathBuf,
}

impl Paths {
    fn new() -> Paths {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf();
        let cache = match std::env::var_os("TESSERA_VM_CACHE") {
            Some(cache) => PathBuf::from(cache),
            None => {
                let target = std::env::var_os("CARGO_TARGET_DIR")
                    .map_or_else(|| workspace.join("target"), PathBuf::from);
                target.join("vm")
            }
        };
        Paths { workspace, cache }
    }
    fn apt(&self) -> PathBuf {
        self.cache.join("apt")
    }
    fn debs(&self) -> PathBuf {
        self.cache.join("debs")
    }
    fn roots(&self) -> PathBuf {
        self.cache.join("roots")
    }
    fn images(&self) -> PathBuf {
        self.cache.join("images")
    }
    fn runs(&self) -> PathBuf {
        self.cache.join("runs")
    }
}

pub fn main(arguments: &[String]) -> ExitCode {
    let result = match arguments.first().map(String::as_str) {
        Some("build") => build_command(&arguments[1..]),
        Some("run") => RunOptions::parse(&arguments[1..]).and_then(|options| run(&options)),
        _ => Err(VmError::Usage("expected `build` or `run`".to_string())),
    };
    match result {
        Ok(status) => ExitCode::from(status),
        Err(error) => {
            eprintln!("xtask vm: {error}");
            ExitCode::from(match error {
                VmError::Unavailable(_) => EXIT_UNAVAILABLE,
                VmError::Usage(_) => EXIT_USAGE,
                VmError::Failed(_) => 1,
            })
        }
    }
}

fn build_command(arguments: &[String]) -> Result<u8, VmError> {
    let update = match arguments {
        [] => false,
        [flag] if flag == "--update" => true,
        _ => {
            return Err(VmError::Usage(format!(
                "unexpected arguments: {arguments:?}"
            )));
        }
    };
    let paths = Paths::new();
    let image = image::build(&paths, update)?;
    println!("image {}", image.key);
    println!("kernel {}", image.kernel.display());
    println!("initrd {}", image.initrd.display());
    Ok(0)
}

struct RunOptions {
    script: PathBuf,
    arguments: Vec<String>,
    disk_sizes_bytes: Vec<u64>,
    binaries: Vec<PathBuf>,
    files: Vec<(PathBuf, String)>,
    modules: Vec<String>,
    memory: String,
    cpus: u32,
    timeout: Duration,
    kernel_log: bool,
    keep: bool,
    quiet: bool,
}

impl RunOptions {
    fn parse(arguments: &[String]) -> Result<RunOptions, VmError> {
        let usage = |message: String| VmError::Usage(message);
        let mut options = RunOptions {
            script: PathBuf::new(),
            arguments: Vec::new(),
            disk_sizes_bytes: Vec::new(),
            binaries: Vec::new(),
            files: Vec::new(),
            modules: spec::BOOT_MODULES
                .iter()
                .map(|name| name.to_string())
                .collect(),
            memory: "2G".to_string(),
            cpus: 2,
            timeout: Duration::from_secs(600),
            kernel_log: false,
            keep: false,
            quiet: false,
        };
        let mut rest = arguments.iter();
        while let Some(argument) = rest.next() {
            let mut value = || {
                rest.next()
                    .cloned()
                    .ok_or_else(|| usage(format!("{argument} needs a value")))
            };
            match argument.as_str() {
                "--disks" => {
                    let text = value()?;
                    let (count, size) = match text.split_once('x') {
                        Some((count, size)) => (count.parse().ok(), parse_size_bytes(size)),
                        None => (Some(1), parse_size_bytes(&text)),
                    };
                    let (Some(count), Some(size)) = (count, size) else {
                        return Err(usage(format!("--disks {text}: expected NxSIZE like 4x1G")));
                    };
                    options
                        .disk_sizes_bytes
                        .extend(std::iter::repeat_n(size, count));
                }
                "--include-binary" => options.binaries.push(PathBuf::from(value()?)),
                "--include-file" => {
                    let text = value()?;
                    let (host, guest) = match text.split_once(':') {
                        Some((host, guest)) => (PathBuf::from(host), guest.to_string()),
                        None => {
                            let name = Path::new(&text).file_name().ok_or_else(|| {
                                usage(format!("--include-file {text}: not a file name"))
                            })?;
                            (
                                PathBuf::from(&text),
                                format!("tessera/{}", name.to_string_lossy()),
                            )
                        }
                    };
                    options
                        .files
                        .push((host, guest.trim_start_matches('/').to_string()));
                }
                "--module" => options.modules.push(value()?),
                "--memory" => options.memory = value()?,
                "--cpus" => {
                    let text = value()?;
                    options.cpus = text
                        .parse()
                        .map_err(|_| usage(format!("--cpus {text}: not a number")))?;
                }
                "--timeout" => {
                    let text = value()?;
                    let seconds: u64 = text
                        .parse()
                        .map_err(|_| usage(format!("--timeout {text}: not a number")))?;
                    options.timeout = Duration::from_secs(seconds);
                }
                "--kernel-log" => options.kernel_log = true,
                "--keep" => options.keep = true,
                "--quiet" => options.quiet = true,
                flag if flag.starts_with("--") => {
                    return Err(usage(format!("unknown option {flag}")));
                }
                script => {
                    options.script = PathBuf::from(script);
                    options.arguments = rest.cloned().collect();
                    break;
                }
            }
        }
        if options.script.as_os_str().is_empty() {
            return Err(usage("no script given".to_string()));
        }
        if !options.script.is_file() {
            let shown = options.script.display();
            return Err(usage(format!("no such script: {shown}")));
        }
        Ok(options)
    }
}

/// "512M" -> 536870912; binary units, a bare number is bytes.
fn parse_size_bytes(text: &str) -> Option<u64> {
    let (number, multiplier) = match text.chars().last()? {
        'K' | 'k' => (&text[..text.len() - 1], 1u64 << 10),
        'M' | 'm' => (&text[..text.len() - 1], 1 << 20),
        'G' | 'g' => (&text[..text.len() - 1], 1 << 30),
        'T' | 't' => (&text[..text.len() - 1], 1 << 40),
        _ => (text, 1),
    };
    number
        .parse::<u64>()
        .ok()?
        .checked_mul(multiplier)
        .filter(|&size| size > 0)
}

fn run(options: &RunOptions) -> Result<u8, VmError> {
    let qemu = qemu::qemu_program()?;
    let paths = Paths::new();
    let image = image::build(&paths, false)?;

    let run_directory = paths.runs().join(format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis())
    ));
    remove_abandoned_runs(&paths.runs());
    fs::create_dir_all(&run_directory).map_err(VmError::io(&run_directory))?;
    let result = run_in(options, &paths, &image, &qemu, &run_directory);
    if options.keep {
        let marker = run_directory.join("kept");
        fs::write(&marker, "").map_err(VmError::io(&marker))?;
        eprintln!("vm: kept {}", run_directory.display());
    } else {
        let _ = fs::remove_dir_all(&run_directory);
    }
    result
}

/// Deletes run directories left by runs that were interrupted (their process is gone) and not
/// asked to keep them; each holds a copy of the image.
fn remove_abandoned_runs(runs: &Path) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next() else {
            continue;
        };
        let alive = Path::new("/proc").join(pid).exists();
        if !alive && !entry.path().join("kept").exists() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

fn run_in(
    options: &RunOptions,
    paths: &Paths,
    image: &image::Image,
    qemu: &Path,
    run_directory: &Path,
) -> Result<u8, VmError> {
    // The run's initrd: the cached image with this run's layer appended.
    let layer = payload::tree(
        &payload::Payload {
            script: &options.script,
            arguments: &options.arguments,
            modules: &options.modules,
            binaries: &options.binaries,
            files: &options.files,
        },
        &image.libraries,
    )?;
    let initrd = run_directory.join("initrd.cpio");
    fs::copy(&image.initrd, &initrd).map_err(VmError::io(&initrd))?;
    let file = fs::OpenOptions::new()
        .append(true)
        .open(&initrd)
        .map_err(VmError::io(&initrd))?;
    let mut writer = layer
        .write_cpio(BufWriter::new(file))
        .map_err(VmError::io(&initrd))?;
    writer.flush().map_err(VmError::io(&initrd))?;

    let mut disks = Vec::new();
    for (index, size_bytes) in options.disk_sizes_bytes.iter().enumerate() {
        let path = run_directory.join(format!("disk{index}.raw"));
        let file = fs::File::create(&path).map_err(VmError::io(&path))?;
        file.set_len(*size_bytes).map_err(VmError::io(&path))?;
        disks.push(path);
    }

    let accelerator = qemu::choose_accelerator(
        qemu,
        &image.kernel,
        &image.initrd,
        &paths.cache.join("accelerator-probe.txt"),
    )?;
    let mut kernel_command_line = "console=ttyS0 panic=-1".to_string();
    if !options.kernel_log {
        kernel_command_line.push_str(" quiet");
    }
    let machine = qemu::Machine {
        accelerator,
        memory: options.memory.clone(),
        cpus: options.cpus,
        kernel: image.kernel.clone(),
        initrd,
        disks,
        kernel_command_line,
    };
    eprintln!(
        "vm: booting ({accelerator:?}, {} CPUs, {} memory, {} disks)",
        options.cpus,
        options.memory,
        machine.disks.len()
    );
    let mut attempt = 1;
    let (boot, elapsed_seconds) = loop {
        let started = Instant::now();
        let mut stdout = io::stdout();
        let echo: Option<&mut (dyn Write + Send)> = if options.quiet {
            None
        } else {
            Some(&mut stdout)
        };
        let boot = qemu::boot(qemu, &machine, options.timeout, echo, false)?;
        let elapsed_seconds = started.elapsed().as_secs_f64();
        if attempt < BOOT_ATTEMPTS && !boot.timed_out && kernel_died_before_script(&boot.console) {
            // Software emulation occasionally trips over the kernel's own live code patching
            // (an int3 oops while static keys flip on another vCPU). The test script never ran
            // and the disks are untouched, so booting again loses nothing.
            eprintln!(
                "vm: the guest kernel panicked before the test script started (attempt \
                 {attempt} of {BOOT_ATTEMPTS}); booting again"
            );
            attempt += 1;
            continue;
        }
        break (boot, elapsed_seconds);
    };
    let log = run_directory.join("console.log");
    fs::write(&log, &boot.console).map_err(VmError::io(&log))?;

    if boot.timed_out {
        return Err(VmError::Failed(format!(
            "the guest did not finish within {} s",
            options.timeout.as_secs()
        )));
    }
    let status = guest_status(&boot.console).ok_or_else(|| {
        VmError::Failed("the guest stopped without reporting a result".to_string())
    })?;
    eprintln!("vm: guest script exited with status {status} after {elapsed_seconds:.1} s");
    Ok(status)
}

/// How many times one run boots the guest while its kernel panics before the test script.
const BOOT_ATTEMPTS: u32 = 5;

/// Whether the guest kernel panicked before init announced the test script.
fn kernel_died_before_script(console: &str) -> bool {
    let script_started = console
        .lines()
        .any(|line| line.trim() == qemu::SCRIPT_MARKER);
    !script_started && console.contains("Kernel panic")
}

/// The status on the last `VM-RESULT: N` line.
fn guest_status(console: &str) -> Option<u8> {
    console
        .lines()
        .filter_map(|line| line.trim().strip_prefix(qemu::RESULT_MARKER))
        .next_back()
        .and_then(|status| status.trim().parse::<u32>().ok())
        .map(|status| u8::try_from(status).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size_bytes("1G"), Some(1 << 30));
        assert_eq!(parse_size_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_size_bytes("4096"), Some(4096));
        assert_eq!(parse_size_bytes("0"), None);
        assert_eq!(parse_size_bytes("G"), None);
        assert_eq!(parse_size_bytes("1.5G"), None);
    }

    #[test]
    fn reads_the_last_result_line() {
        assert_eq!(guest_status("boot\nVM-RESULT: 0\n"), Some(0));
        assert_eq!(
            guest_status("VM-RESULT: 3\nmore\nVM-RESULT: 4\n[ 1.0] reboot"),
            Some(4)
        );
        assert_eq!(guest_status("no result here\n"), None);
        assert_eq!(guest_status("VM-RESULT: 300\n"), Some(1));
    }

    #[test]
    fn a_panic_counts_as_a_failed_boot_only_before_the_script_starts() {
        let oops = "[ 2.1] Oops: int3\n[ 2.1] Kernel panic - not syncing: Fatal exception\n";
        assert!(kernel_died_before_script(oops));
        assert!(!kernel_died_before_script(&format!(
            "{}\n{oops}",
            qemu::SCRIPT_MARKER
        )));
        assert!(!kernel_died_before_script("[ 2.1] reboot: Power down\n"));
    }
}
