//! Boots the test VM and runs scripts/vm/tests/nbd_client.sh in it (see docs/vm.md): `tessera
//! serve` inside the guest over five virtio disks (RAID5 and a hot spare), its virtual drive
//! attached to /dev/nbd0 by the kernel's own NBD client, ext4 and xfs with files through a
//! member failure and a rebuild, fsck clean, fio verify on the raw device, FLUSH and discard.
//!
//! The tessera binary comes from `cargo build --profile test -p tessera-cli` (the build
//! `cargo test` itself makes of it, so within `cargo test --workspace` that build has nothing
//! to do), or from `TESSERA_VM_BINARY` when set.
//!
//! Skips, saying why, when QEMU or the Debian packages are unavailable (`cargo xtask vm` exits
//! with 77); with `TESSERA_VM_REQUIRED=1` that is a failure instead.

use std::path::{Path, PathBuf};
use std::process::Command;

const EXIT_UNAVAILABLE: i32 = 77;

/// The tessera binary to include in the guest.
fn tessera_binary(workspace: &Path) -> PathBuf {
    if let Some(path) = std::env::var_os("TESSERA_VM_BINARY") {
        return PathBuf::from(path);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--locked", "--profile", "test"])
        .args(["-p", "tessera-cli", "--bin", "tessera"])
        .current_dir(workspace)
        .status()
        .expect("cannot run cargo");
    assert!(status.success(), "cargo build -p tessera-cli: {status}");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), PathBuf::from);
    target.join("debug").join("tessera")
}

#[test]
fn tessera_serves_the_kernel_nbd_client_in_the_vm() {
    let xtask = env!("CARGO_BIN_EXE_xtask");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let tessera = tessera_binary(workspace);
    let output = Command::new(xtask)
        .args(["vm", "run", "--disks", "5x256M", "--timeout", "400"])
        .arg("--include-binary")
        .arg(&tessera)
        .arg("scripts/vm/tests/nbd_client.sh")
        .current_dir(workspace)
        .output()
        .expect("cannot run xtask");
    let console = String::from_utf8_lossy(&output.stdout).replace("\r\n", "\n");
    let log = String::from_utf8_lossy(&output.stderr);

    if output.status.code() == Some(EXIT_UNAVAILABLE) {
        let required = std::env::var("TESSERA_VM_REQUIRED").is_ok_and(|value| value == "1");
        assert!(!required, "the test VM is unavailable:\n{log}");
        eprintln!("skipping the VM NBD client test, the test VM is unavailable:\n{log}");
        return;
    }
    let context = format!(
        "status {}\n--- console\n{console}\n--- log\n{log}",
        output.status
    );
    assert!(output.status.success(), "{context}");

    let lines: Vec<&str> = console.lines().map(str::trim_end).collect();
    let has = |expected: &str| lines.contains(&expected);
    let has_prefix = |prefix: &str| lines.iter().any(|line| line.starts_with(prefix));
    assert!(!has_prefix("FAILED: "), "{context}");
    for expected in [
        "group: RAID5 over vda-vdd, spare vde, optimal",
        "nbd0: attached, 402653184 bytes",
        "ext4: member 2 failed while mounted",
        "ext4: rebuilt onto the spare, group optimal",
        "e2fsck: clean",
        "xfs: member 1 failed while mounted",
        "xfs: member 1 back online and rebuilt, group optimal",
        "xfs_repair: clean",
        "fio verify: healthy",
        "fio verify: degraded",
        "fio verify: rebuilt",
        "discard: range reads as zeroes, data around it kept",
        "daemon: stopped cleanly",
        "NBD-CLIENT-OK",
    ] {
        assert!(has(expected), "missing {expected:?}\n{context}");
    }
    // Every file set verified, each with the files written before and during the failure.
    for what in [
        "ext4 after the failure",
        "ext4 remounted",
        "xfs degraded",
        "xfs remounted",
    ] {
        let prefix = format!("files verify: {what} (");
        let line = lines
            .iter()
            .find(|line| line.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no verification of {what}\n{context}"));
        let count: u32 = line[prefix.len()..]
            .split_whitespace()
            .next()
            .and_then(|count| count.parse().ok())
            .unwrap_or_else(|| panic!("{line}\n{context}"));
        assert_eq!(count, 40, "{line}\n{context}");
    }
    assert!(has_prefix("flush: through nbd0 ("), "{context}");
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.starts_with("VM-RESULT: "))
            .count(),
        1
    );
    assert!(has("VM-RESULT: 0"), "{context}");
}
