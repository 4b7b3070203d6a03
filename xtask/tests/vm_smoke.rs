//! Boots the test VM and runs scripts/vm/tests/smoke.sh in it (see docs/vm.md): md RAID5 over
//! four virtio disks with ext4 on it, nbd and ublk present, the Debian tools and an included
//! host binary working. About 20 s under software emulation once the image is cached; the first
//! run also downloads and unpacks the Debian packages.
//!
//! Skips, saying why, when QEMU or the Debian packages are unavailable (`cargo xtask vm` exits
//! with 77); with `TESSERA_VM_REQUIRED=1` that is a failure instead.

mod vm_common;

#[test]
fn smoke_script_passes_in_the_vm() {
    let binary = std::path::PathBuf::from(env!("CARGO_BIN_EXE_xtask"));
    let Some(run) = vm_common::run(
        "smoke",
        "4x512M",
        300,
        &binary,
        "scripts/vm/tests/smoke.sh",
        &["xtask"],
    ) else {
        return;
    };
    let context = &run.context;
    // The bookworm-backports kernel, not Debian 12's own 6.1.
    let kernel = run
        .lines
        .iter()
        .find_map(|line| line.strip_prefix("kernel: "))
        .unwrap_or_else(|| panic!("no kernel line\n{context}"));
    assert!(kernel.starts_with("6.12."), "kernel {kernel}\n{context}");
    assert!(run.has("ublk-control: present"), "{context}");
    assert!(run.has("nbd0: present"), "{context}");
    assert!(
        run.lines.iter().any(|line| line.starts_with("fio-3.")),
        "{context}"
    );
    // The included host binary ran inside the guest (xtask prints its usage).
    assert!(
        run.lines
            .iter()
            .any(|line| line.starts_with("host binary xtask says: usage: cargo xtask")),
        "{context}"
    );
    // Four members, none missing: md lists each as vdX[slot].
    let mdstat = run
        .lines
        .iter()
        .find(|line| line.starts_with("md0 : active raid5"))
        .unwrap_or_else(|| panic!("no active RAID5\n{context}"));
    for member in ["vda[0]", "vdb[1]", "vdc[2]", "vdd[3]"] {
        assert!(mdstat.contains(member), "{mdstat}\n{context}");
    }
    assert!(run.has("fio verify: ok"), "{context}");
    assert!(run.has("file: identical after remount"), "{context}");
    assert!(run.has("e2fsck: clean"), "{context}");
    assert!(run.has("SMOKE-OK"), "{context}");
    run.assert_one_success();
}
