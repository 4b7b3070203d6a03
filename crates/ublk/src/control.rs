//! The control device (`/dev/ublk-control`): one command at a time, each an io_uring
//! `URING_CMD` on a ring of 128-byte entries (the command structure does not fit the 16 bytes
//! of a normal entry). Commands block the calling thread until the driver answers; START_DEV
//! and STOP_DEV wait on the device's queues, so they must not run on a thread those queues
//! depend on.

use std::fs::File;
use std::os::fd::AsRawFd;

use io_uring::{IoUring, cqueue, opcode, squeue, types};

use crate::error::UblkError;
use crate::uapi::{self, CtrlCmd, DevInfo, Params};

/// An open control device.
pub struct Control {
    file: File,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
}

impl Control {
    /// Opens `/dev/ublk-control`; `NotAvailable` when the driver is not loaded.
    pub fn open() -> Result<Control, UblkError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(uapi::CONTROL_PATH)
            .map_err(|error| match error.kind() {
                std::io::ErrorKind::NotFound => UblkError::NotAvailable,
                _ => UblkError::Open(
                    uapi::CONTROL_PATH.into(),
                    error.raw_os_error().unwrap_or(libc::EIO),
                ),
            })?;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .build(4)
            .map_err(|error| {
                UblkError::System("io_uring setup", error.raw_os_error().unwrap_or(libc::EIO))
            })?;
        Ok(Control { file, ring })
    }

    /// Runs one command and returns the driver's non-negative answer.
    fn command(
        &mut self,
        name: &'static str,
        cmd_op: u32,
        command: CtrlCmd,
    ) -> Result<i32, UblkError> {
        let entry = opcode::UringCmd80::new(types::Fd(self.file.as_raw_fd()), cmd_op)
            .cmd(uapi::bytes_of(&command))
            .build()
            .user_data(1);
        // SAFETY: the buffer `command.addr` points to (if any) belongs to the caller, who keeps
        // it alive and untouched until this function returns, which is after the completion.
        unsafe {
            self.ring
                .submission()
                .push(&entry)
                .map_err(|_| UblkError::System("io_uring submission", libc::EBUSY))?;
        }
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => continue,
                Err(error) => {
                    return Err(UblkError::System(
                        "io_uring submit",
                        error.raw_os_error().unwrap_or(libc::EIO),
                    ));
                }
            }
        }
        let completion = self
            .ring
            .completion()
            .next()
            .ok_or(UblkError::System("io_uring completion", libc::EIO))?;
        if completion.result() < 0 {
            return Err(UblkError::Command(name, -completion.result()));
        }
        Ok(completion.result())
    }

    /// ADD_DEV: creates `/dev/ublkcN` with these queues, and returns the device as the driver
    /// filled it in (its id, the size it kept for buffers).
    /// `owner` goes to the device's `ublksrv_flags`, which the driver keeps for the server.
    pub fn add_device(
        &mut self,
        queues: u16,
        queue_depth: u16,
        max_io_bytes: u32,
        owner: u64,
    ) -> Result<DevInfo, UblkError> {
        let mut info = DevInfo {
            nr_hw_queues: queues,
            queue_depth,
            max_io_buf_bytes: max_io_bytes,
            dev_id: u32::MAX,
            flags: uapi::F_CMD_IOCTL_ENCODE,
            ublksrv_flags: owner,
            ..DevInfo::default()
        };
        let command = CtrlCmd {
            dev_id: u32::MAX,
            queue_id: u16::MAX,
            len: std::mem::size_of::<DevInfo>() as u16,
            addr: (&mut info as *mut DevInfo) as u64,
            ..CtrlCmd::default()
        };
        self.command("ADD_DEV", uapi::U_CMD_ADD_DEV, command)?;
        Ok(info)
    }

    /// SET_PARAMS: size, block sizes, cache and discard (before START_DEV).
    pub fn set_params(&mut self, dev_id: u32, params: &Params) -> Result<(), UblkError> {
        assert_eq!(params.len as usize, uapi::PARAMS_BYTES);
        let command = CtrlCmd {
            dev_id,
            queue_id: u16::MAX,
            len: uapi::PARAMS_BYTES as u16,
            addr: (params as *const Params) as u64,
            ..CtrlCmd::default()
        };
        self.command("SET_PARAMS", uapi::U_CMD_SET_PARAMS, command)
            .map(drop)
    }

    /// START_DEV: adds `/dev/ublkbN`. Waits until every tag of every queue has a fetch in
    /// flight, and the kernel reads the partition table through the queues.
    pub fn start_device(&mut self, dev_id: u32) -> Result<(), UblkError> {
        // SAFETY: getpid takes no arguments.
        let pid = unsafe { libc::getpid() };
        let command = CtrlCmd {
            dev_id,
            queue_id: u16::MAX,
            data: pid as u64,
            ..CtrlCmd::default()
        };
        self.command("START_DEV", uapi::U_CMD_START_DEV, command)
            .map(drop)
    }

    /// STOP_DEV: removes `/dev/ublkbN` (requests in flight are answered first) and ends the
    /// queues' fetches.
    pub fn stop_device(&mut self, dev_id: u32) -> Result<(), UblkError> {
        let command = CtrlCmd {
            dev_id,
            queue_id: u16::MAX,
            ..CtrlCmd::default()
        };
        self.command("STOP_DEV", uapi::U_CMD_STOP_DEV, command)
            .map(drop)
    }

    /// DEL_DEV: removes `/dev/ublkcN`; waits until nothing holds it open.
    pub fn delete_device(&mut self, dev_id: u32) -> Result<(), UblkError> {
        let command = CtrlCmd {
            dev_id,
            queue_id: u16::MAX,
            ..CtrlCmd::default()
        };
        self.command("DEL_DEV", uapi::U_CMD_DEL_DEV, command)
            .map(drop)
    }

    /// GET_DEV_INFO: the device as the driver sees it (its state, its server's process).
    pub fn device_info(&mut self, dev_id: u32) -> Result<DevInfo, UblkError> {
        let mut info = DevInfo::default();
        let command = CtrlCmd {
            dev_id,
            queue_id: u16::MAX,
            len: std::mem::size_of::<DevInfo>() as u16,
            addr: (&mut info as *mut DevInfo) as u64,
            ..CtrlCmd::default()
        };
        self.command("GET_DEV_INFO", uapi::U_CMD_GET_DEV_INFO, command)?;
        Ok(info)
    }
}
