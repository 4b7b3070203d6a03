//! Boots the test VM and runs scripts/vm/tests/nbd_client.sh in it (see docs/vm.md): `tessera
//! serve` inside the guest over five virtio disks (RAID5 and a hot spare), its virtual drive
//! attached to /dev/nbd0 by the kernel's own NBD client, ext4 and xfs with files through a
//! member failure and a rebuild, fsck clean, fio verify on the raw device, FLUSH and discard.
//!
//! The tessera binary is the one `cargo test --workspace` builds (`vm_common::tessera_binary`),
//! or `TESSERA_VM_BINARY` when set.
//!
//! Skips, saying why, when QEMU or the Debian packages are unavailable (`cargo xtask vm` exits
//! with 77); with `TESSERA_VM_REQUIRED=1` that is a failure instead.

mod vm_common;

#[test]
fn tessera_serves_the_kernel_nbd_client_in_the_vm() {
    let binary = vm_common::tessera_binary();
    let Some(run) = vm_common::run(
        "NBD client",
        "5x256M",
        400,
        &binary,
        "scripts/vm/tests/nbd_client.sh",
        &[],
    ) else {
        return;
    };
    let context = &run.context;
    assert!(!run.has_prefix("FAILED: "), "{context}");
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
        assert!(run.has(expected), "missing {expected:?}\n{context}");
    }
    // Every file set verified, each with the files written before and during the failure.
    for what in [
        "ext4 after the failure",
        "ext4 remounted",
        "xfs degraded",
        "xfs remounted",
    ] {
        let prefix = format!("files verify: {what} (");
        let line = run
            .lines
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
    assert!(run.has_prefix("flush: through nbd0 ("), "{context}");
    run.assert_one_success();
}
