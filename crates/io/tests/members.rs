//! Opening members: regular files and loop devices (512-byte and 4Kn), exclusivity, the
//! choice between the O_DIRECT and the buffered descriptor, and I/O through both.
//!
//! The loop-device tests need root and `losetup`; they print why and pass when either is
//! missing.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{AlignedBuffer, Rng, ScratchDir, collect, drivers};
use tessera_io::{
    Driver, IoError, MemberKind, Operation, SyncMember, ZeroMethod, create_file_member, open_member,
};

#[test]
fn file_member_size_block_size_and_descriptor_choice() {
    let scratch = ScratchDir::new();
    let path = scratch.file("member");
    create_file_member(&path, 8 << 20).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 << 20);
    // Sparse: nothing allocated yet.
    assert_eq!(
        std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&path).unwrap()),
        0
    );
    assert!(matches!(
        create_file_member(&path, 8 << 20),
        Err(IoError::Open {
            errno: libc::EEXIST,
            ..
        })
    ));
    assert_eq!(
        create_file_member(scratch.file("odd"), 1000),
        Err(IoError::BadSize { size_bytes: 1000 })
    );

    let member = open_member(&path).unwrap();
    assert_eq!(member.kind(), MemberKind::File);
    assert_eq!(member.size_bytes(), 8 << 20);
    assert_eq!(member.logical_block_bytes(), 512);
    // tmpfs accepts O_DIRECT on this kernel.
    assert!(member.direct(), "{:?}", member.fallback_reason());
    assert_eq!(member.fallback_reason(), None);
    // tmpfs cannot do non-blocking reads (RWF_NOWAIT gives EOPNOTSUPP).
    assert!(!member.nowait_io());
    let (offset_align, memory_align) = member.direct_alignment_bytes();
    assert!(offset_align >= 512 && memory_align >= 1);

    let buffer = AlignedBuffer::new(8192);
    let direct_fd = member.fd_for(0, 4096, buffer.as_slice().as_ptr());
    let buffered_fd = member.flush_fd();
    assert_ne!(direct_fd, buffered_fd);
    assert_eq!(
        member.fd_for(
            offset_align as u64,
            offset_align,
            buffer.as_slice().as_ptr()
        ),
        direct_fd
    );
    // Misaligned offset, length or memory: the buffered descriptor.
    assert_eq!(
        member.fd_for(
            offset_align as u64 / 2,
            offset_align,
            buffer.as_slice().as_ptr()
        ),
        buffered_fd
    );
    assert_eq!(
        member.fd_for(0, offset_align + 512, buffer.as_slice().as_ptr()),
        buffered_fd
    );
    if memory_align > 1 {
        let misaligned = buffer.as_slice()[1..].as_ptr();
        assert_eq!(member.fd_for(0, offset_align, misaligned), buffered_fd);
    }
}

#[test]
fn file_member_synchronous_round_trip() {
    let scratch = ScratchDir::new();
    let path = scratch.file("member");
    create_file_member(&path, 1 << 20).unwrap();
    let mut member = open_member(&path).unwrap();
    let mut aligned = AlignedBuffer::new(8192);
    Rng::new(1).fill(aligned.as_mut_slice());
    let unaligned: Vec<u8> = (0..1536u32).map(|index| (index * 7) as u8).collect();
    member.write_at(4096, aligned.as_slice()).unwrap();
    member.write_at(512 * 41, &unaligned).unwrap();
    member.flush().unwrap();

    let contents = std::fs::read(&path).unwrap();
    assert_eq!(&contents[4096..4096 + 8192], aligned.as_slice());
    assert_eq!(&contents[512 * 41..512 * 41 + 1536], unaligned.as_slice());
    let mut back = vec![0u8; 1536];
    member.read_at(512 * 41, &mut back).unwrap();
    assert_eq!(back, unaligned);
    assert_eq!(
        member.read_at((1 << 20) - 512, &mut back),
        Err(IoError::OutOfRange {
            offset_bytes: (1 << 20) - 512,
            len_bytes: 1536,
            size_bytes: 1 << 20
        })
    );
}

#[test]
fn paths_that_are_not_members_are_refused() {
    let scratch = ScratchDir::new();
    assert_eq!(
        open_member(scratch.path()).unwrap_err(),
        IoError::NotAMember {
            path: scratch.path().to_owned()
        }
    );
    assert!(matches!(
        open_member(scratch.file("missing")).unwrap_err(),
        IoError::Open {
            errno: libc::ENOENT,
            ..
        }
    ));
}

/// A loop device over a file on tmpfs, detached when dropped.
struct LoopDevice {
    path: PathBuf,
}

impl LoopDevice {
    /// Attaches `backing` with the given logical block size, or says why it cannot.
    fn attach(backing: &Path, sector_bytes: u32) -> Result<LoopDevice, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let output = Command::new("losetup")
            .args(["-f", "--show", "--sector-size", &sector_bytes.to_string()])
            .arg(backing)
            .output()
            .map_err(|error| format!("losetup: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "losetup: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        Ok(LoopDevice { path })
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}

fn check_loop_device(sector_bytes: u32) {
    let scratch = ScratchDir::new();
    let backing = scratch.file("backing");
    let size_bytes: u64 = 16 << 20;
    create_file_member(&backing, size_bytes).unwrap();
    let device = match LoopDevice::attach(&backing, sector_bytes) {
        Ok(device) => device,
        Err(reason) => {
            eprintln!("skipping the loop-device test ({sector_bytes}-byte sectors): {reason}");
            return;
        }
    };
    let member = open_member(&device.path).unwrap();
    assert_eq!(member.kind(), MemberKind::BlockDevice);
    assert_eq!(member.size_bytes(), size_bytes);
    assert_eq!(member.logical_block_bytes(), sector_bytes);
    assert!(member.direct(), "{:?}", member.fallback_reason());
    assert_eq!(member.direct_alignment_bytes().0, sector_bytes);
    assert!(member.nowait_io(), "block devices take RWF_NOWAIT");

    // A second exclusive open of the same device is refused.
    assert_eq!(
        open_member(&device.path).unwrap_err(),
        IoError::Busy {
            path: device.path.clone()
        }
    );

    // An engine-style 512-byte-aligned request goes buffered on a 4Kn device.
    let mut buffer = AlignedBuffer::new(64 * 1024);
    let pointer = buffer.as_mut_ptr();
    let direct_fd = member.fd_for(0, 4096, pointer);
    assert_ne!(direct_fd, member.flush_fd());
    let small_fd = member.fd_for(512, 512, pointer);
    if sector_bytes == 4096 {
        assert_eq!(small_fd, member.flush_fd());
    } else {
        assert_eq!(small_fd, direct_fd);
    }

    // Writes through both descriptors, a flush, and reads back, with each driver.
    for (name, mut driver) in drivers() {
        let mut rng = Rng::new(u64::from(sector_bytes));
        rng.fill(buffer.as_mut_slice());
        let expected = buffer.as_slice()[..64 * 1024].to_vec();
        let requests: [(u64, usize, usize); 3] = [
            (0, 0, 32 * 1024),
            (1 << 20, 32 * 1024, 512),
            ((1 << 20) + 4096 + 512, 32 * 1024 + 512, 16 * 1024 - 512),
        ];
        for (token, &(offset, at, len)) in requests.iter().enumerate() {
            let source = pointer.wrapping_add(at);
            let fd = member.fd_for(offset, len as u32, source);
            // SAFETY: `buffer` outlives the completions and is untouched until then.
            unsafe {
                driver.submit(
                    token as u64,
                    Operation::Write {
                        fd,
                        offset_bytes: offset,
                        buffer: source,
                        len_bytes: len as u32,
                        fua: false,
                    },
                );
            }
        }
        for completion in collect(&mut driver, 3) {
            assert_eq!(
                completion.result, requests[completion.token as usize].2 as i32,
                "{name}"
            );
        }
        driver.submit_fsync(9, member.flush_fd());
        assert_eq!(collect(&mut driver, 1)[0].result, 0, "{name}");

        buffer.as_mut_slice().fill(0);
        for (token, &(offset, at, len)) in requests.iter().enumerate() {
            let destination = pointer.wrapping_add(at);
            let fd = member.fd_for(offset, len as u32, destination);
            // SAFETY: as above.
            unsafe {
                driver.submit(
                    token as u64,
                    Operation::Read {
                        fd,
                        offset_bytes: offset,
                        buffer: destination,
                        len_bytes: len as u32,
                    },
                );
            }
        }
        for completion in collect(&mut driver, 3) {
            assert_eq!(
                completion.result, requests[completion.token as usize].2 as i32,
                "{name}"
            );
        }
        for &(_, at, len) in &requests {
            assert_eq!(
                &buffer.as_slice()[at..at + len],
                &expected[at..at + len],
                "{name}"
            );
        }
    }
    // Zeroing by ZERO_RANGE on the block device (the kernel's Write Zeroes, or its own zero
    // pages when the loop driver has none), over part of the first write.
    let mut member = member;
    assert_eq!(member.zero_method(), ZeroMethod::ZeroRange);
    let (_, mut driver) = drivers().remove(0);
    assert!(zero_through(&mut driver, &mut member, 8192, 8192));
    // Less than a logical block is written instead (a 4Kn device refuses it).
    assert_eq!(
        member.zero_operation(512, 1024).is_none(),
        sector_bytes == 4096
    );
    // The backing file, read independently, holds what was written and zeroed.
    drop(member);
    let contents = std::fs::read(&backing).unwrap();
    let mut rng = Rng::new(u64::from(sector_bytes));
    let mut expected = vec![0u8; 64 * 1024];
    rng.fill(&mut expected);
    expected[8192..16384].fill(0);
    assert_eq!(&contents[..32 * 1024], &expected[..32 * 1024]);
    assert_eq!(
        &contents[1 << 20..(1 << 20) + 512],
        &expected[32 * 1024..32 * 1024 + 512]
    );
}

#[test]
fn loop_device_with_512_byte_sectors() {
    check_loop_device(512);
}

#[test]
fn loop_device_with_4096_byte_sectors() {
    check_loop_device(4096);
}

/// The file system `path` is on, as `stat -f` names it (the test's own reference, not the
/// member code's `fstatfs`).
fn file_system_type(path: &Path) -> String {
    let output = Command::new("stat")
        .args(["-f", "--format=%T"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Zeroes `len` bytes at `offset` of `member` through `driver` the member's way (falling back
/// to a write of zeroes when it refuses), then makes it durable. `true` when no data moved.
fn zero_through(
    driver: &mut tessera_io::AnyDriver,
    member: &mut tessera_io::MemberDevice,
    offset: u64,
    len: usize,
) -> bool {
    let zeroes = AlignedBuffer::new(len);
    if let Some(operation) = member.zero_operation(offset, len as u64) {
        // SAFETY: a Fallocate names no memory.
        unsafe { driver.submit(1, operation) };
        let result = collect(driver, 1)[0].result;
        if result == 0 {
            driver.submit_fsync(2, member.flush_fd());
            assert_eq!(collect(driver, 1)[0].result, 0);
            return true;
        }
        assert!(member.zeroing_refused(-result), "zeroing failed: {result}");
        assert_eq!(member.zero_method(), ZeroMethod::Write);
    }
    let fd = member.fd_for(offset, len as u32, zeroes.as_slice().as_ptr());
    // SAFETY: `zeroes` outlives the completion collected below.
    unsafe {
        driver.submit(
            3,
            Operation::Write {
                fd,
                offset_bytes: offset,
                buffer: zeroes.as_slice().as_ptr(),
                len_bytes: len as u32,
                fua: true,
            },
        );
    }
    assert_eq!(collect(driver, 1)[0].result, len as i32);
    false
}

/// A member's range zeroed its way reads back as zeroes, and nothing around it moves; on
/// tmpfs by a punched hole, elsewhere by ZERO_RANGE.
#[test]
fn zeroing_a_range_leaves_zeroes_there_and_nothing_else_changed() {
    let tmpfs = ScratchDir::new();
    let disk = std::env::temp_dir().join(format!("tessera-io-zero-{}", std::process::id()));
    std::fs::create_dir_all(&disk).unwrap();
    for directory in [tmpfs.path(), disk.as_path()] {
        let path = directory.join("member");
        let _ = std::fs::remove_file(&path);
        let size_bytes = 4 << 20;
        let mut model = vec![0u8; size_bytes];
        Rng::new(7).fill(&mut model);
        std::fs::write(&path, &model).unwrap();
        let mut member = open_member(&path).unwrap();
        let file_system = file_system_type(directory);
        let expected_method = if file_system == "tmpfs" {
            ZeroMethod::PunchHole
        } else {
            ZeroMethod::ZeroRange
        };
        // These have the operation; others may refuse it and be written instead.
        let must_zero = ["tmpfs", "ext2/ext3", "xfs"].contains(&file_system.as_str());
        assert_eq!(member.zero_method(), expected_method, "{}", path.display());
        let mut extents = vec![(64 * 1024, 256 * 1024), (1 << 20, 1 << 20)];
        for (name, mut driver) in drivers() {
            let (offset, len) = extents.pop().unwrap();
            let zeroed = zero_through(&mut driver, &mut member, offset, len);
            assert!(
                zeroed || !must_zero,
                "{name}: {file_system} refused zeroing"
            );
            model[offset as usize..offset as usize + len].fill(0);
            let contents = std::fs::read(&path).unwrap();
            assert!(contents == model, "{name} on {}", path.display());
        }
    }
    let _ = std::fs::remove_dir_all(&disk);
}

#[test]
fn only_a_refusal_turns_zeroing_into_writes() {
    let scratch = ScratchDir::new();
    let path = scratch.file("member");
    create_file_member(&path, 1 << 20).unwrap();
    let mut member = open_member(&path).unwrap();
    assert_ne!(member.zero_method(), ZeroMethod::Write);
    // A device error is an error, not a refusal.
    assert!(!member.zeroing_refused(libc::EIO));
    assert!(member.zero_operation(0, 4096).is_some());
    assert!(member.zeroing_refused(libc::EOPNOTSUPP));
    assert_eq!(member.zero_method(), ZeroMethod::Write);
    assert!(member.zero_operation(0, 4096).is_none());
    // Already writing: nothing more to fall back to.
    assert!(!member.zeroing_refused(libc::EOPNOTSUPP));
}
