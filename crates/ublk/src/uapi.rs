//! The ublk driver's user-space interface (Linux `include/uapi/linux/ublk_cmd.h`), written out
//! as Rust types: command numbers, flags, and the structures the kernel reads and writes. Only
//! what Tessera uses is here. Layouts are checked against the kernel's sizes and offsets by the
//! tests below.

/// The control device: commands that add, start, stop and delete devices.
pub const CONTROL_PATH: &str = "/dev/ublk-control";
/// Prefix of a device's character device (`/dev/ublkcN`): queues fetch requests through it.
pub const CHAR_DEVICE_PREFIX: &str = "/dev/ublkc";
/// Prefix of a device's block device (`/dev/ublkbN`): what hosts use.
pub const BLOCK_DEVICE_PREFIX: &str = "/dev/ublkb";

/// Command numbers (the `nr` of the ioctl-style encoding).
const CMD_GET_DEV_INFO: u32 = 0x02;
const CMD_ADD_DEV: u32 = 0x04;
const CMD_DEL_DEV: u32 = 0x05;
const CMD_START_DEV: u32 = 0x06;
const CMD_STOP_DEV: u32 = 0x07;
const CMD_SET_PARAMS: u32 = 0x08;
const IO_FETCH_REQ: u32 = 0x20;
const IO_COMMIT_AND_FETCH_REQ: u32 = 0x21;

/// The ioctl type letter of every ublk command.
const IOCTL_TYPE: u32 = b'u' as u32;
const IOC_READ: u32 = 2;
const IOC_READ_WRITE: u32 = 3;

/// `_IOC(direction, 'u', nr, size)`: direction in bits 30-31, size in 16-29, type in 8-15,
/// number in 0-7.
const fn encode(direction: u32, nr: u32, size_bytes: usize) -> u32 {
    assert!(size_bytes < 1 << 14);
    (direction << 30) | ((size_bytes as u32) << 16) | (IOCTL_TYPE << 8) | nr
}

const CTRL_CMD_BYTES: usize = std::mem::size_of::<CtrlCmd>();
const IO_CMD_BYTES: usize = std::mem::size_of::<IoCmd>();

/// `UBLK_U_CMD_GET_DEV_INFO`.
pub const U_CMD_GET_DEV_INFO: u32 = encode(IOC_READ, CMD_GET_DEV_INFO, CTRL_CMD_BYTES);
/// `UBLK_U_CMD_ADD_DEV`.
pub const U_CMD_ADD_DEV: u32 = encode(IOC_READ_WRITE, CMD_ADD_DEV, CTRL_CMD_BYTES);
/// `UBLK_U_CMD_DEL_DEV`.
pub const U_CMD_DEL_DEV: u32 = encode(IOC_READ_WRITE, CMD_DEL_DEV, CTRL_CMD_BYTES);
/// `UBLK_U_CMD_START_DEV`.
pub const U_CMD_START_DEV: u32 = encode(IOC_READ_WRITE, CMD_START_DEV, CTRL_CMD_BYTES);
/// `UBLK_U_CMD_STOP_DEV`.
pub const U_CMD_STOP_DEV: u32 = encode(IOC_READ_WRITE, CMD_STOP_DEV, CTRL_CMD_BYTES);
/// `UBLK_U_CMD_SET_PARAMS`.
pub const U_CMD_SET_PARAMS: u32 = encode(IOC_READ_WRITE, CMD_SET_PARAMS, CTRL_CMD_BYTES);
/// `UBLK_U_IO_FETCH_REQ`.
pub const U_IO_FETCH_REQ: u32 = encode(IOC_READ_WRITE, IO_FETCH_REQ, IO_CMD_BYTES);
/// `UBLK_U_IO_COMMIT_AND_FETCH_REQ`.
pub const U_IO_COMMIT_AND_FETCH_REQ: u32 =
    encode(IOC_READ_WRITE, IO_COMMIT_AND_FETCH_REQ, IO_CMD_BYTES);

/// A fetch completed with a request to serve.
pub const IO_RES_OK: i32 = 0;
/// A fetch completed because the device is going away: do not fetch again.
pub const IO_RES_ABORT: i32 = -libc::ENODEV;

/// Offset in the character device of queue 0's request descriptors.
pub const CMD_BUF_OFFSET: u64 = 0;
/// Most requests one queue may have (tags are below this).
pub const MAX_QUEUE_DEPTH: u16 = 4096;

/// Device flag: commands use the ioctl-style encoding above.
pub const F_CMD_IOCTL_ENCODE: u64 = 1 << 6;

/// Request operations (`op_flags & 0xff` of a descriptor).
pub const IO_OP_READ: u8 = 0;
pub const IO_OP_WRITE: u8 = 1;
pub const IO_OP_FLUSH: u8 = 2;
pub const IO_OP_DISCARD: u8 = 3;
pub const IO_OP_WRITE_SAME: u8 = 4;
pub const IO_OP_WRITE_ZEROES: u8 = 5;

/// Request flags (bits of `op_flags`).
pub const IO_F_FUA: u32 = 1 << 13;
/// Write zeroes: the range must stay allocated (no unmapping).
pub const IO_F_NOUNMAP: u32 = 1 << 15;

/// Block device attributes (`ParamBasic::attrs`).
pub const ATTR_READ_ONLY: u32 = 1 << 0;
pub const ATTR_VOLATILE_CACHE: u32 = 1 << 2;
pub const ATTR_FUA: u32 = 1 << 3;

/// Parameter kinds (`Params::types`).
pub const PARAM_TYPE_BASIC: u32 = 1 << 0;
pub const PARAM_TYPE_DISCARD: u32 = 1 << 1;

/// `struct ublksrv_ctrl_cmd`: a control command, carried in the SQE's command area.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtrlCmd {
    /// The device (`u32::MAX` with ADD_DEV: the kernel picks one).
    pub dev_id: u32,
    /// `u16::MAX` for commands that are not about one queue.
    pub queue_id: u16,
    /// Length of the buffer at `addr`.
    pub len: u16,
    /// A buffer the command reads or fills.
    pub addr: u64,
    /// Inline data (START_DEV: the server's process id).
    pub data: u64,
    pub dev_path_len: u16,
    pub pad: u16,
    pub reserved: u32,
}

/// `struct ublksrv_ctrl_dev_info`: what ADD_DEV asks for and GET_DEV_INFO reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevInfo {
    pub nr_hw_queues: u16,
    pub queue_depth: u16,
    /// `DEV_STATE_*`.
    pub state: u16,
    pub pad0: u16,
    /// The largest request, in bytes (one buffer per tag this size).
    pub max_io_buf_bytes: u32,
    pub dev_id: u32,
    pub ublksrv_pid: i32,
    pub pad1: u32,
    /// `F_*` flags.
    pub flags: u64,
    /// For the server's own use; the driver ignores it.
    pub ublksrv_flags: u64,
    pub owner_uid: u32,
    pub owner_gid: u32,
    pub reserved1: u64,
    pub reserved2: u64,
}

/// Device states (`DevInfo::state`).
pub const DEV_STATE_DEAD: u16 = 0;
pub const DEV_STATE_LIVE: u16 = 1;

/// `struct ublksrv_io_desc`: one request, in the descriptor area mapped from the character
/// device, indexed by tag.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoDesc {
    /// Operation in bits 0-7, flags above.
    pub op_flags: u32,
    pub nr_sectors: u32,
    pub start_sector: u64,
    /// The buffer address the server gave with its fetch.
    pub addr: u64,
}

impl IoDesc {
    pub fn op(&self) -> u8 {
        (self.op_flags & 0xff) as u8
    }
}

/// `struct ublksrv_io_cmd`: a fetch or commit, carried in the SQE's command area.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCmd {
    pub q_id: u16,
    pub tag: u16,
    /// The request's result (commit only): bytes done, or a negative errno.
    pub result: i32,
    /// The buffer for the next request of this tag.
    pub addr: u64,
}

/// `struct ublk_param_basic`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamBasic {
    /// `ATTR_*`.
    pub attrs: u32,
    pub logical_bs_shift: u8,
    pub physical_bs_shift: u8,
    pub io_opt_shift: u8,
    pub io_min_shift: u8,
    /// Largest request, in 512-byte sectors.
    pub max_sectors: u32,
    pub chunk_sectors: u32,
    /// Device size, in 512-byte sectors.
    pub dev_sectors: u64,
    pub virt_boundary_mask: u64,
}

/// `struct ublk_param_discard`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamDiscard {
    pub discard_alignment: u32,
    pub discard_granularity: u32,
    pub max_discard_sectors: u32,
    pub max_write_zeroes_sectors: u32,
    /// The driver takes one range per discard.
    pub max_discard_segments: u16,
    pub reserved0: u16,
}

/// The start of `struct ublk_params`: its header and the two parameter kinds Tessera sets.
/// `len` says how much of it the kernel reads, so the later kinds need not be here.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Params {
    /// Bytes of parameters given: `PARAMS_BYTES`.
    pub len: u32,
    /// `PARAM_TYPE_*` present.
    pub types: u32,
    pub basic: ParamBasic,
    pub discard: ParamDiscard,
}

/// The bytes of `Params` the kernel reads: up to the end of the discard parameters (the rest
/// of the Rust structure is padding).
pub const PARAMS_BYTES: usize =
    std::mem::offset_of!(Params, discard) + std::mem::size_of::<ParamDiscard>();

/// Bytes a queue's descriptor area takes at most in the character device's address space:
/// queue `q`'s descriptors are mapped at `CMD_BUF_OFFSET + q * this`.
pub fn max_descriptor_area_bytes(page_bytes: usize) -> usize {
    round_up(
        usize::from(MAX_QUEUE_DEPTH) * std::mem::size_of::<IoDesc>(),
        page_bytes,
    )
}

/// Bytes to map for a queue of `depth` descriptors.
pub fn descriptor_area_bytes(depth: u16, page_bytes: usize) -> usize {
    round_up(
        usize::from(depth) * std::mem::size_of::<IoDesc>(),
        page_bytes,
    )
}

fn round_up(value: usize, multiple: usize) -> usize {
    value.div_ceil(multiple) * multiple
}

/// A structure of integers without padding bytes, so that all its bytes are initialized.
///
/// # Safety
/// Only for `repr(C)` structures whose size is the sum of their fields' sizes.
pub unsafe trait Plain: Copy {}

// SAFETY: 4 + 2 + 2 + 8 + 8 + 2 + 2 + 4 = 32 bytes, its size (checked by the tests).
unsafe impl Plain for CtrlCmd {}
// SAFETY: 2 + 2 + 4 + 8 = 16 bytes, its size (checked by the tests).
unsafe impl Plain for IoCmd {}

/// The bytes of a command structure, to place in an SQE's command area.
pub fn bytes_of<T: Plain, const N: usize>(value: &T) -> [u8; N] {
    assert!(std::mem::size_of::<T>() <= N);
    let mut out = [0u8; N];
    // SAFETY: `T: Plain` has no padding, so every byte read is initialized; the copy stays
    // within both objects since `size_of::<T>() <= N`.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (value as *const T).cast::<u8>(),
            out.as_mut_ptr(),
            std::mem::size_of::<T>(),
        )
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn structure_sizes_match_the_kernel() {
        assert_eq!(size_of::<CtrlCmd>(), 32);
        assert_eq!(size_of::<DevInfo>(), 64);
        assert_eq!(size_of::<IoDesc>(), 24);
        assert_eq!(size_of::<IoCmd>(), 16);
        assert_eq!(size_of::<ParamBasic>(), 32);
        assert_eq!(size_of::<ParamDiscard>(), 20);
        assert_eq!(PARAMS_BYTES, 60);
    }

    #[test]
    fn field_offsets_match_the_kernel() {
        assert_eq!(offset_of!(CtrlCmd, queue_id), 4);
        assert_eq!(offset_of!(CtrlCmd, len), 6);
        assert_eq!(offset_of!(CtrlCmd, addr), 8);
        assert_eq!(offset_of!(CtrlCmd, data), 16);
        assert_eq!(offset_of!(CtrlCmd, dev_path_len), 24);
        assert_eq!(offset_of!(DevInfo, max_io_buf_bytes), 8);
        assert_eq!(offset_of!(DevInfo, dev_id), 12);
        assert_eq!(offset_of!(DevInfo, ublksrv_pid), 16);
        assert_eq!(offset_of!(DevInfo, flags), 24);
        assert_eq!(offset_of!(DevInfo, ublksrv_flags), 32);
        assert_eq!(offset_of!(DevInfo, owner_uid), 40);
        assert_eq!(offset_of!(DevInfo, reserved1), 48);
        assert_eq!(offset_of!(IoDesc, nr_sectors), 4);
        assert_eq!(offset_of!(IoDesc, start_sector), 8);
        assert_eq!(offset_of!(IoDesc, addr), 16);
        assert_eq!(offset_of!(IoCmd, tag), 2);
        assert_eq!(offset_of!(IoCmd, result), 4);
        assert_eq!(offset_of!(IoCmd, addr), 8);
        assert_eq!(offset_of!(ParamBasic, logical_bs_shift), 4);
        assert_eq!(offset_of!(ParamBasic, io_min_shift), 7);
        assert_eq!(offset_of!(ParamBasic, max_sectors), 8);
        assert_eq!(offset_of!(ParamBasic, chunk_sectors), 12);
        assert_eq!(offset_of!(ParamBasic, dev_sectors), 16);
        assert_eq!(offset_of!(ParamBasic, virt_boundary_mask), 24);
        assert_eq!(offset_of!(ParamDiscard, max_write_zeroes_sectors), 12);
        assert_eq!(offset_of!(ParamDiscard, max_discard_segments), 16);
        assert_eq!(offset_of!(Params, basic), 8);
        assert_eq!(offset_of!(Params, discard), 40);
    }

    #[test]
    fn command_numbers_match_the_kernel() {
        // _IOR('u', 2, 32 bytes) and _IOWR('u', n, 32 bytes) for control commands,
        // _IOWR('u', n, 16 bytes) for queue commands.
        assert_eq!(U_CMD_GET_DEV_INFO, 0x8020_7502);
        assert_eq!(U_CMD_ADD_DEV, 0xc020_7504);
        assert_eq!(U_CMD_DEL_DEV, 0xc020_7505);
        assert_eq!(U_CMD_START_DEV, 0xc020_7506);
        assert_eq!(U_CMD_STOP_DEV, 0xc020_7507);
        assert_eq!(U_CMD_SET_PARAMS, 0xc020_7508);
        assert_eq!(U_IO_FETCH_REQ, 0xc010_7520);
        assert_eq!(U_IO_COMMIT_AND_FETCH_REQ, 0xc010_7521);
        assert_eq!(IO_RES_ABORT, -19);
    }

    #[test]
    fn descriptor_areas_are_whole_pages() {
        assert_eq!(max_descriptor_area_bytes(4096), 4096 * 24);
        assert_eq!(descriptor_area_bytes(1, 4096), 4096);
        assert_eq!(descriptor_area_bytes(128, 4096), 4096);
        assert_eq!(descriptor_area_bytes(256, 4096), 8192);
    }

    #[test]
    fn commands_encode_little_endian_fields_in_place() {
        let command = IoCmd {
            q_id: 3,
            tag: 0x0102,
            result: -5,
            addr: 0x1122_3344_5566_7788,
        };
        let bytes: [u8; 16] = bytes_of(&command);
        assert_eq!(&bytes[0..2], &3u16.to_ne_bytes());
        assert_eq!(&bytes[2..4], &0x0102u16.to_ne_bytes());
        assert_eq!(&bytes[4..8], &(-5i32).to_ne_bytes());
        assert_eq!(&bytes[8..16], &0x1122_3344_5566_7788u64.to_ne_bytes());
        let control: [u8; 80] = bytes_of(&CtrlCmd {
            dev_id: 7,
            queue_id: u16::MAX,
            ..CtrlCmd::default()
        });
        assert_eq!(&control[0..4], &7u32.to_ne_bytes());
        assert_eq!(&control[4..6], &[0xff, 0xff]);
        assert!(control[32..].iter().all(|&b| b == 0));
    }
}
