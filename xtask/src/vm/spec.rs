//! What goes into the test VM image. Changing anything here changes the image's cache key.

/// Bump when the builder lays out the image differently, so cached images are rebuilt.
pub const BUILDER_FORMAT: u32 = 2;

/// Debian release the user space comes from.
pub const DEBIAN_SUITE: &str = "bookworm";

/// Debian 12's own kernel (6.1) lacks ublk; the backports kernel (6.12) has ublk, nbd and md.
pub const KERNEL_SUITE: &str = "bookworm-backports";

/// The generic flavour. The cloud flavour is a third of the size and has every driver needed,
/// but under QEMU 7.2's software emulation it crashed early in boot in most runs (double
/// fault in `kmem_cache_alloc`, general protection fault in `do_sync_core`), while the generic
/// kernel booted every time; see docs/vm.md.
pub const KERNEL_METAPACKAGE: &str = "linux-image-amd64";

/// Kernel modules copied into the image, with what they depend on (from `modules.dep`).
/// A test script loads them with `modprobe`.
pub const MODULES: &[&str] = &[
    "virtio_blk",
    "loop",
    "null_blk",
    "nbd",
    "ublk_drv",
    "md_mod",
    "raid0",
    "raid1",
    "raid10",
    "raid456",
    "dm_mod",
    "ext4",
    "xfs",
    // ext4 and xfs checksums ask the crypto API for "crc32c" at run time (a soft dependency,
    // absent from `depends=`), which loads this module through its alias crypto-crc32c.
    "crc32c_generic",
];

/// Modules loaded before the test script runs (passed per run, so not part of the image key).
pub const BOOT_MODULES: &[&str] = &["virtio_blk"];

/// A Debian package and the files taken from it; shared libraries come separately (`apt.rs`
/// collects every library package these depend on, and only the libraries the programs need
/// are copied).
pub struct ToolPackage {
    pub package: &'static str,
    /// Program names, looked up in the package's bin and sbin directories.
    pub programs: &'static [&'static str],
    /// Other files, by their path in the package.
    pub files: &'static [&'static str],
}

pub const TOOL_PACKAGES: &[ToolPackage] = &[
    ToolPackage {
        // The shell, coreutils-like applets, modprobe, mount, ip; static, so no libraries.
        package: "busybox-static",
        programs: &["busybox"],
        files: &[],
    },
    ToolPackage {
        package: "mdadm",
        programs: &["mdadm"],
        files: &[],
    },
    ToolPackage {
        package: "fio",
        programs: &["fio"],
        files: &[],
    },
    ToolPackage {
        package: "nbd-client",
        programs: &["nbd-client"],
        files: &[],
    },
    ToolPackage {
        package: "e2fsprogs",
        programs: &[
            "mke2fs",
            "mkfs.ext4",
            "e2fsck",
            "fsck.ext4",
            "tune2fs",
            "dumpe2fs",
            "resize2fs",
            "debugfs",
        ],
        files: &["etc/mke2fs.conf"],
    },
    ToolPackage {
        // Not xfs_scrub: it alone would pull in 35 MB of ICU.
        package: "xfsprogs",
        programs: &[
            "mkfs.xfs",
            "xfs_repair",
            "xfs_db",
            "xfs_io",
            "xfs_growfs",
            "xfs_admin",
            "xfs_info",
            "xfs_spaceman",
        ],
        files: &[],
    },
];

/// The manifest lines that describe this file's choices, for the cache key.
pub fn describe() -> Vec<String> {
    let mut lines = vec![
        format!("builder-format {BUILDER_FORMAT}"),
        format!("suite {DEBIAN_SUITE}"),
        format!("kernel {KERNEL_METAPACKAGE}/{KERNEL_SUITE}"),
        format!("modules {}", MODULES.join(" ")),
    ];
    for tool in TOOL_PACKAGES {
        lines.push(format!(
            "tool {} programs {} files {}",
            tool.package,
            tool.programs.join(" "),
            tool.files.join(" ")
        ));
    }
    lines
}
