//! A real block device on a Tessera virtual drive, thick and thin (nbdfuse + losetup): ext4
//! made, mounted, filled with a directory tree; a member fails; after unmounting, fsck finds
//! the filesystem clean and, mounted again, every file compares equal.

mod daemon;
use daemon::{Daemon, have, sh};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

struct Cleanup {
    steps: Vec<Vec<String>>,
    fuse: Option<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for step in self.steps.iter().rev() {
            let _ = Command::new(&step[0]).args(&step[1..]).output();
        }
        if let Some(mut fuse) = self.fuse.take() {
            let _ = fuse.kill();
            let _ = fuse.wait();
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn ext4_on_a_virtual_drive_survives_a_member_failure() {
    ext4_survives_a_member_failure(false);
}

/// The same on a thin drive (compressed, overcommitted: 512 MiB seen over 288 MiB of group).
#[test]
fn ext4_on_a_thin_virtual_drive_survives_a_member_failure() {
    ext4_survives_a_member_failure(true);
}

fn ext4_survives_a_member_failure(thin: bool) {
    if !is_root() {
        eprintln!("SKIPPED: mounting needs root");
        return;
    }
    for tool in [
        "nbdfuse",
        "losetup",
        "mkfs.ext4",
        "fsck.ext4",
        "mount",
        "umount",
        "fusermount3",
    ] {
        if !have(tool) {
            return;
        }
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: no /dev/fuse");
        return;
    }
    let daemon = Daemon::start();
    let uri = if thin {
        let dg = daemon.group("5", 4, 96 << 20);
        daemon.ok(&[
            "vd", "create", &dg, "--size", "512M", "--name", "fs", "--thin",
        ]);
        daemon.uri("fs")
    } else {
        daemon.group_with_vd("5", 4, 96 << 20, "fs", 192 << 20)
    };
    let fuse_dir = daemon.path("fuse");
    let mount_dir = daemon.path("mnt");
    std::fs::create_dir_all(&fuse_dir).unwrap();
    std::fs::create_dir_all(&mount_dir).unwrap();
    let mut cleanup = Cleanup {
        steps: Vec::new(),
        fuse: None,
    };
    let fuse = Command::new("nbdfuse")
        .arg(&fuse_dir)
        .arg(&uri)
        .spawn()
        .expect("nbdfuse");
    cleanup.fuse = Some(fuse);
    cleanup.steps.push(vec![
        "fusermount3".into(),
        "-u".into(),
        fuse_dir.display().to_string(),
    ]);
    let image = fuse_dir.join("nbd");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !image.exists() {
        assert!(Instant::now() < deadline, "nbdfuse did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let loop_device = sh(
        "losetup",
        &[
            "--find",
            "--show",
            "--direct-io=off",
            &image.display().to_string(),
        ],
    )
    .trim()
    .to_string();
    cleanup
        .steps
        .push(vec!["losetup".into(), "-d".into(), loop_device.clone()]);
    sh("mkfs.ext4", &["-q", "-F", &loop_device]);
    let mount = mount_dir.display().to_string();
    sh("mount", &[&loop_device, &mount]);
    cleanup.steps.push(vec!["umount".into(), mount.clone()]);

    // A directory tree with files of many sizes.
    let source = daemon.path("tree");
    let mut rng = 0x9e37_79b9u64;
    for dir in 0..8 {
        let path = source.join(format!("dir{dir}"));
        std::fs::create_dir_all(&path).unwrap();
        for file in 0..24 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let len = (rng % 400_000) as usize;
            let data: Vec<u8> = (0..len).map(|i| (i as u64 ^ rng) as u8).collect();
            std::fs::write(path.join(format!("f{file}")), data).unwrap();
        }
    }
    sh(
        "cp",
        &[
            "-a",
            &source.display().to_string(),
            &format!("{mount}/tree"),
        ],
    );
    sh("sync", &[]);

    let group = daemon.json(&["vd", "describe", "fs"])["dg"].to_string();
    let member = daemon.group_members(&group)[1]["pd"].to_string();
    daemon.ok(&["pd", "fail", &member]);
    assert_eq!(
        daemon.json(&["dg", "describe", &group])["state"],
        "degraded"
    );

    sh("umount", &[&mount]);
    cleanup.steps.pop();
    let fsck = Command::new("fsck.ext4")
        .args(["-n", "-f", &loop_device])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "fsck found problems:\n{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    sh("mount", &[&loop_device, &mount]);
    cleanup.steps.push(vec!["umount".into(), mount.clone()]);
    sh(
        "diff",
        &[
            "-r",
            &source.display().to_string(),
            &format!("{mount}/tree"),
        ],
    );
    let files = sh("find", &[&format!("{mount}/tree"), "-type", "f"])
        .lines()
        .count();
    assert_eq!(files, 8 * 24, "every file is on the filesystem");
    eprintln!("ext4 on {loop_device}: {files} files verified after a member failure and fsck");
}
