//! Boots the test VM and runs scripts/vm/tests/ublk.sh in it (see docs/vm.md and
//! docs/ublk.md): `tessera serve` inside the guest over five virtio disks (RAID5 and a hot
//! spare), its virtual drive exported as /dev/ublkb0 through the kernel's ublk driver; fio
//! verify, flush, write zeroes and discard on the raw device; ext4 and xfs with files through
//! a member failure and a rebuild, fsck clean; a thin drive beside it as /dev/ublkb1; the
//! device removed by unexport, by daemon shutdown (and made again at the next start) and by a
//! forced delete. About 90 s under software emulation.
//!
//! The tessera binary is the one `cargo test --workspace` builds (`vm_common::tessera_binary`),
//! or `TESSERA_VM_BINARY` when set.
//!
//! Skips, saying why, when QEMU or the Debian packages are unavailable (`cargo xtask vm` exits
//! with 77); with `TESSERA_VM_REQUIRED=1` that is a failure instead.

mod vm_common;

#[test]
fn virtual_drive_as_a_ublk_block_device_in_the_vm() {
    let binary = vm_common::tessera_binary();
    let Some(run) = vm_common::run(
        "ublk",
        "5x256M",
        400,
        &binary,
        "scripts/vm/tests/ublk.sh",
        &[],
    ) else {
        return;
    };
    let context = &run.context;
    assert!(
        !run.lines.iter().any(|line| line.contains("FAILED: ")),
        "{context}"
    );
    for expected in [
        "group: RAID5 over vda-vdd, spare vde, optimal",
        "refused: export of a missing drive",
        "ublkb0: 402653184 bytes, 2 queues, write back with FUA",
        "refused: a second export",
        "fio verify: random and sequential ok",
        "flush: reaches the device",
        "write zeroes: reads back zeroes",
        "discard: whole regions read back zeroes",
        "ext4: member 2 failed while mounted",
        "ext4: rebuilt onto the spare, group optimal",
        "e2fsck: clean",
        "xfs: member 1 failed while mounted",
        "xfs: member 1 back online and rebuilt, group optimal",
        "xfs_repair: clean",
        "fio verify: after the rebuilds ok",
        "thin: 2 queues for 8 asked, fio verify, discard, ext4 and e2fsck through /dev/ublkb1",
        "files verify: thin drive (16 files)",
        "read-only: writes refused while set, accepted after",
        "unexport: /dev/ublkb0 and /dev/ublkc0 removed",
        "refused: delete of an exported drive",
        "shutdown: device removed, daemon exited 0",
        "restart: /dev/ublkb0 exported again with its data",
        "delete --force: device removed with the drive",
        "crash: the abandoned device deleted, the drive exported again at start",
        "unexported: not exported again at start",
        "dg delete --force: the drive's device removed first",
        "UBLK-OK",
    ] {
        assert!(run.has_ending(expected), "missing {expected:?}\n{context}");
    }
    // Every file set verified, with the files written before and during the failure.
    for what in [
        "ext4 after the failure",
        "ext4 remounted",
        "xfs degraded",
        "xfs remounted",
    ] {
        let expected = format!("files verify: {what} (32 files)");
        assert!(run.has_ending(&expected), "missing {expected:?}\n{context}");
    }
    run.assert_one_success();
}
