//! Boots the test VM and runs scripts/vm/tests/md_import.sh in it (see docs/vm.md and
//! docs/md-import.md): an md RAID5 with ext4 and files, stopped and adopted in place by
//! `tessera dg import-md`, attached with the kernel's NBD client, files verified, a member
//! failed and rebuilt onto a spare, e2fsck clean; then an md RAID6 adopted with one member left
//! out and that member rebuilt as a spare; last an md RAID1 adopted, written to under Tessera
//! and handed back to md, which assembles it with every file intact; then md RAID0 and RAID10
//! (near 2) adopted with their files verified and e2fsck clean. About a minute and a half under
//! software emulation.
//!
//! The tessera binary is the one `cargo test --workspace` builds (`vm_common::tessera_binary`),
//! or `TESSERA_VM_BINARY` when set.
//!
//! Skips, saying why, when QEMU or the Debian packages are unavailable (`cargo xtask vm` exits
//! with 77); with `TESSERA_VM_REQUIRED=1` that is a failure instead.

mod vm_common;

#[test]
fn tessera_adopts_md_arrays_in_the_vm() {
    let binary = vm_common::tessera_binary();
    let Some(run) = vm_common::run(
        "md import",
        "5x128M",
        300,
        &binary,
        "scripts/vm/tests/md_import.sh",
        &[],
    ) else {
        return;
    };
    let context = &run.context;
    assert!(!run.has_prefix("FAILED: "), "{context}");
    assert!(run.has_prefix("md: RAID5 over vda-vdd, "), "{context}");
    assert!(
        run.has_prefix("adopted md array mdtest (")
            && run
                .lines
                .iter()
                .any(|line| line.ends_with("as drive group 0 (mdtest) and virtual drive mdtest")),
        "{context}"
    );
    for expected in [
        "md: ext4 with 48 files, stopped",
        "import: md superblocks kept at 36 KiB",
        "files verify: adopted (48 files)",
        "rebuild: member 2 failed, spare vde taking over",
        "files verify: degraded (48 files)",
        "rebuild: done, group optimal",
        "e2fsck: clean",
        "files verify: rebuilt (48 files)",
        "daemon: stopped cleanly",
        "files verify: raid6 degraded (48 files)",
        "rebuild6: vdc added back as a spare and rebuilt, group optimal",
        "e2fsck6: clean",
        "files verify: raid6 rebuilt (48 files)",
        "import1: RAID1 adopted, files written under Tessera",
        "files verify: back under md (49 files)",
        "back1: md assembles the array again, e2fsck clean, every file verifies",
        "files verify: raid0 adopted (48 files)",
        "files verify: raid10 adopted (48 files)",
        "MD-IMPORT-OK",
    ] {
        assert!(run.has(expected), "missing {expected:?}\n{context}");
    }
    // The virtual drives have exactly md's array sizes (the script compares them).
    assert!(
        run.has_prefix("import: virtual drive mdtest of ")
            && run.has_prefix("import6: virtual drive mdsix of "),
        "{context}"
    );
    // RAID10 with mdadm's default chunk, whose data offset leaves no room for a journal.
    for expected in [
        "import0: RAID0 over vda-vdd, chunk 64K, ",
        "import10: RAID10 over vda-vdd, chunk 512K, ",
    ] {
        assert!(run.has_prefix(expected), "missing {expected:?}\n{context}");
    }
    run.assert_one_success();
}
