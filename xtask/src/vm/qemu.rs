//! Boots the image with `qemu-system-x86_64`, serial console on a pipe, and waits for it to
//! power off or for the time limit.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::VmError;

/// Printed by the init script after the test script; the host exits with its status.
pub const RESULT_MARKER: &str = "VM-RESULT: ";
/// Printed by the init script when the kernel command line asks only for a probe boot.
const PROBE_MARKER: &str = "VM-PROBE-OK";
/// Printed by the guest's init just before it runs the test script.
pub const SCRIPT_MARKER: &str = "VM-SCRIPT-START";
/// After the result line, how long the guest gets to power off before it is killed.
const POWER_OFF_GRACE: Duration = Duration::from_secs(15);
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accelerator {
    Kvm,
    /// QEMU's software emulation: 4-8x slower I/O, but runs any kernel anywhere.
    Tcg,
}

pub struct Machine {
    pub accelerator: Accelerator,
    pub memory: String,
    pub cpus: u32,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Raw disk images, attached as virtio disks /dev/vda, /dev/vdb, ... in order.
    pub disks: Vec<PathBuf>,
    pub kernel_command_line: String,
}

pub struct Boot {
    /// Everything the guest wrote to its serial console, line ends normalised to `\n`.
    pub console: String,
    pub timed_out: bool,
}

/// `TESSERA_VM_QEMU` or `qemu-system-x86_64` from the PATH.
pub fn qemu_program() -> Result<PathBuf, VmError> {
    if let Ok(program) = std::env::var("TESSERA_VM_QEMU") {
        return Ok(PathBuf::from(program));
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|directory| directory.join("qemu-system-x86_64"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            VmError::Unavailable(
                "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)".to_string(),
            )
        })
}

/// KVM when it can run this kernel, else software emulation. `TESSERA_VM_ACCEL=kvm|tcg`
/// decides without probing. Otherwise a probe boot with KVM decides (where /dev/kvm is usable
/// at all), remembered per host kernel, QEMU and guest kernel in `cache_file`: some hosts
/// (nested virtualisation) offer /dev/kvm but fail on stock guest kernels.
pub fn choose_accelerator(
    qemu: &Path,
    kernel: &Path,
    initrd: &Path,
    cache_file: &Path,
) -> Result<Accelerator, VmError> {
    match std::env::var("TESSERA_VM_ACCEL").as_deref() {
        Ok("kvm") => return Ok(Accelerator::Kvm),
        Ok("tcg") => return Ok(Accelerator::Tcg),
        Ok(other) => {
            return Err(VmError::Usage(format!(
                "TESSERA_VM_ACCEL={other}: want kvm or tcg"
            )));
        }
        Err(_) => {}
    }
    let kvm_usable = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if !kvm_usable {
        return Ok(Accelerator::Tcg);
    }
    let host_release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    // The kernel's size stands for its version: its path changes with every image.
    let kernel_size_bytes = fs::metadata(kernel).map_or(0, |metadata| metadata.len());
    let probe_key = format!(
        "{} {} {kernel_size_bytes}",
        host_release.trim(),
        qemu.display()
    );
    if let Ok(text) = fs::read_to_string(cache_file)
        && let Some((key, answer)) = text.trim_end().rsplit_once(' ')
        && key == probe_key
    {
        return Ok(if answer == "kvm" {
            Accelerator::Kvm
        } else {
            Accelerator::Tcg
        });
    }
    let machine = Machine {
        accelerator: Accelerator::Kvm,
        memory: "512M".to_string(),
        cpus: 1,
        kernel: kernel.to_path_buf(),
        initrd: initrd.to_path_buf(),
        disks: Vec::new(),
        kernel_command_line: "console=ttyS0 panic=-1 quiet tessera.probe".to_string(),
    };
    let boot = boot(qemu, &machine, PROBE_TIMEOUT, None, true)?;
    let accelerator = if boot.console.contains(PROBE_MARKER) {
        Accelerator::Kvm
    } else {
        Accelerator::Tcg
    };
    let answer = if accelerator == Accelerator::Kvm {
        "kvm"
    } else {
        "tcg"
    };
    eprintln!("vm: KVM probe: using {answer}");
    let _ = fs::write(cache_file, format!("{probe_key} {answer}\n"));
    Ok(accelerator)
}

fn command(qemu: &Path, machine: &Machine) -> Command {
    let mut command = Command::new(qemu);
    command.args([
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
    ]);
    match machine.accelerator {
        Accelerator::Kvm => command.args(["-accel", "kvm", "-cpu", "host"]),
        Accelerator::Tcg => command.args(["-accel", "tcg,thread=multi", "-cpu", "max"]),
    };
    command
        .args(["-m", &machine.memory, "-smp", &machine.cpus.to_string()])
        .arg("-kernel")
        .arg(&machine.kernel)
        .arg("-initrd")
        .arg(&machine.initrd)
        .args(["-append", &machine.kernel_command_line])
        // qboot (shipped with QEMU) boots the kernel directly and, unlike the default
        // SeaBIOS, writes nothing to the serial console.
        .args(["-bios", "qboot.rom"])
        .args(["-serial", "stdio", "-monitor", "none"]);
    for (index, disk) in machine.disks.iter().enumerate() {
        let mut drive = std::ffi::OsString::from("file=");
        drive.push(disk);
        // Flushes reach the host page cache, not its disk: the host never crashes mid-test.
        drive.push(format!(
            ",format=raw,if=none,id=disk{index},cache=unsafe,discard=unmap"
        ));
        command.arg("-drive").arg(drive);
        command.arg("-device").arg(format!(
            "virtio-blk-pci,drive=disk{index},serial=tessera-disk{index}"
        ));
    }
    command
}

/// Boots and waits. `echo` receives the console output as it arrives. `quiet_errors` keeps
/// QEMU's own error output off the terminal (for the probe).
pub fn boot(
    qemu: &Path,
    machine: &Machine,
    timeout: Duration,
    mut echo: Option<&mut (dyn Write + Send)>,
    quiet_errors: bool,
) -> Result<Boot, VmError> {
    let mut command = command(qemu, machine);
    command.stdin(Stdio::null()).stdout(Stdio::piped());
    if quiet_errors {
        command.stderr(Stdio::null());
    }
    let mut child = command.spawn().map_err(VmError::io(qemu))?;
    let mut stdout = child.stdout.take().unwrap();
    let result_seen = AtomicBool::new(false);

    let (console, timed_out) = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut console = Vec::new();
            let mut chunk = [0u8; 8192];
            loop {
                match stdout.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(count) => {
                        console.extend_from_slice(&chunk[..count]);
                        // Scan only the tail: a marker may straddle two reads.
                        let tail = console.len().saturating_sub(count + RESULT_MARKER.len());
                        if contains(&console[tail..], RESULT_MARKER.as_bytes())
                            || contains(&console[tail..], PROBE_MARKER.as_bytes())
                        {
                            result_seen.store(true, Ordering::Relaxed);
                        }
                        if let Some(echo) = echo.as_mut() {
                            let _ = echo.write_all(&chunk[..count]);
                            let _ = echo.flush();
                        }
                    }
                }
            }
            console
        });
        let timed_out = wait(&mut child, timeout, &result_seen);
        (reader.join().unwrap_or_default(), timed_out)
    });
    let console = String::from_utf8_lossy(&console).replace("\r\n", "\n");
    Ok(Boot {
        console,
        timed_out: timed_out?,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Waits for QEMU to exit: until `timeout`, or for a short grace once the result is out.
/// Returns whether it had to be killed for the time limit.
fn wait(child: &mut Child, timeout: Duration, result_seen: &AtomicBool) -> Result<bool, VmError> {
    let started = Instant::now();
    let mut result_seen_at = None;
    loop {
        if child
            .try_wait()
            .map_err(|error| VmError::Failed(error.to_string()))?
            .is_some()
        {
            return Ok(false);
        }
        if result_seen_at.is_none() && result_seen.load(Ordering::Relaxed) {
            result_seen_at = Some(Instant::now());
        }
        let grace_over = result_seen_at.is_some_and(|at| at.elapsed() > POWER_OFF_GRACE);
        if started.elapsed() > timeout || grace_over {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(!grace_over);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
