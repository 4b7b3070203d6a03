//! What every VM test runner does: build the tessera binary for the guest, boot the test VM
//! with a script through `cargo xtask vm run`, skip when the VM is unavailable, and check the
//! outcome the guest reported.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `cargo xtask vm` exits with this when QEMU or the Debian packages are unavailable.
const EXIT_UNAVAILABLE: i32 = 77;

/// The console of a finished VM run.
pub struct VmRun {
    /// Console lines, trailing white space (and carriage returns) removed.
    pub lines: Vec<String>,
    /// Status, console and log together, for assertion messages.
    pub context: String,
}

impl VmRun {
    /// Whether a console line is exactly `expected`.
    #[allow(dead_code)]
    pub fn has(&self, expected: &str) -> bool {
        self.lines.iter().any(|line| line == expected)
    }

    /// Whether a console line ends with `expected` (fio's progress output can share a line
    /// with what follows it).
    #[allow(dead_code)]
    pub fn has_ending(&self, expected: &str) -> bool {
        self.lines.iter().any(|line| line.ends_with(expected))
    }

    /// Whether a console line starts with `prefix`.
    #[allow(dead_code)]
    pub fn has_prefix(&self, prefix: &str) -> bool {
        self.lines.iter().any(|line| line.starts_with(prefix))
    }

    /// The guest reported exactly one result, and it is success.
    pub fn assert_one_success(&self) {
        let results: Vec<&String> = self
            .lines
            .iter()
            .filter(|line| line.starts_with("VM-RESULT: "))
            .collect();
        assert_eq!(results.len(), 1, "{}", self.context);
        assert_eq!(results[0], "VM-RESULT: 0", "{}", self.context);
    }
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// The tessera binary to include in the guest: `TESSERA_VM_BINARY` when set, else the one
/// `cargo test --workspace` builds (tessera-cli's integration tests need it). The same command
/// makes sure it is there: under `cargo test --workspace` it has nothing to do, where a build
/// of `-p tessera-cli` alone would unify another feature set and compile the daemon and its
/// dependencies again (and the next full run would compile them back).
#[allow(dead_code)]
pub fn tessera_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("TESSERA_VM_BINARY") {
        return PathBuf::from(path);
    }
    let workspace = workspace();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["test", "--workspace", "--no-run", "--quiet", "--locked"])
        .current_dir(&workspace)
        .status()
        .expect("cannot run cargo");
    assert!(
        status.success(),
        "cargo test --workspace --no-run: {status}"
    );
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), PathBuf::from)
        .join("debug")
        .join("tessera")
}

/// Boots the VM with `disks` (e.g. "5x256M"), `binary` included, and runs `script` with
/// `script_args`; `None` when the VM is unavailable here (a failure instead with
/// `TESSERA_VM_REQUIRED=1`). Asserts that the run itself succeeded.
pub fn run(
    what: &str,
    disks: &str,
    timeout_seconds: u32,
    binary: &Path,
    script: &str,
    script_args: &[&str],
) -> Option<VmRun> {
    let xtask = env!("CARGO_BIN_EXE_xtask");
    let mut args: Vec<OsString> = ["vm", "run", "--disks", disks, "--timeout"]
        .iter()
        .map(OsString::from)
        .collect();
    args.push(timeout_seconds.to_string().into());
    // The helpers the guest scripts source, as /tessera/lib.sh.
    args.push("--include-file".into());
    args.push("scripts/vm/tests/lib.sh".into());
    args.push("--include-binary".into());
    args.push(binary.into());
    args.push(script.into());
    args.extend(script_args.iter().map(OsString::from));
    let output = Command::new(xtask)
        .args(&args)
        .current_dir(workspace())
        .output()
        .expect("cannot run xtask");
    let console = String::from_utf8_lossy(&output.stdout).replace("\r\n", "\n");
    let log = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(EXIT_UNAVAILABLE) {
        let required = std::env::var("TESSERA_VM_REQUIRED").is_ok_and(|value| value == "1");
        assert!(!required, "the test VM is unavailable:\n{log}");
        eprintln!("skipping the VM {what} test, the test VM is unavailable:\n{log}");
        return None;
    }
    let context = format!(
        "status {}\n--- console\n{console}\n--- log\n{log}",
        output.status
    );
    assert!(output.status.success(), "{context}");
    Some(VmRun {
        lines: console
            .lines()
            .map(|line| line.trim_end().to_string())
            .collect(),
        context,
    })
}
