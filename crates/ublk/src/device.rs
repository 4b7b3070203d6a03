//! A ublk device from creation to deletion: ADD_DEV, SET_PARAMS, the queues handed to the
//! server, START_DEV; and STOP_DEV, the queues' end, DEL_DEV.

use std::fs::File;
use std::sync::Arc;

use crate::control::Control;
use crate::error::UblkError;
use crate::queue::{ServedQueue, open_when_present};
use crate::uapi::{self, ParamBasic, ParamDiscard, Params};

/// Largest request the device takes (the block layer splits larger ones).
pub const MAX_IO_BYTES: u32 = 512 * 1024;
/// Largest discard or write-zeroes request.
const MAX_DISCARD_BYTES: u64 = 1 << 30;

/// What a device looks like to hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Hardware queues.
    pub queues: u16,
    /// Requests in flight per queue.
    pub queue_depth: u16,
    /// Size in bytes (a multiple of 512).
    pub size_bytes: u64,
    /// Refuse writes.
    pub read_only: bool,
    /// Marks the device as this server's (the driver keeps it for servers' own use), so that
    /// `remove_abandoned` can find devices a crashed server left behind.
    pub owner: u64,
}

impl DeviceConfig {
    /// Checks the settings against the driver's limits.
    pub fn validate(&self) -> Result<(), UblkError> {
        if self.queues == 0 || self.queues > 64 {
            return Err(UblkError::Invalid(format!(
                "queues must be 1 to 64 (asked for {})",
                self.queues
            )));
        }
        if self.queue_depth == 0 || self.queue_depth > 1024 {
            return Err(UblkError::Invalid(format!(
                "queue depth must be 1 to 1024 (asked for {})",
                self.queue_depth
            )));
        }
        if self.size_bytes == 0 || !self.size_bytes.is_multiple_of(512) {
            return Err(UblkError::Invalid(format!(
                "the device size must be a positive multiple of 512 bytes (it is {})",
                self.size_bytes
            )));
        }
        Ok(())
    }

    /// The parameters SET_PARAMS gives the driver: 512-byte logical blocks, 4 KiB physical
    /// ones, a volatile write cache with FUA (so flushes and FUA writes reach the server),
    /// and discard and write-zeroes.
    pub fn params(&self, max_io_bytes: u32) -> Params {
        let attrs = uapi::ATTR_VOLATILE_CACHE
            | uapi::ATTR_FUA
            | if self.read_only {
                uapi::ATTR_READ_ONLY
            } else {
                0
            };
        Params {
            len: uapi::PARAMS_BYTES as u32,
            types: uapi::PARAM_TYPE_BASIC | uapi::PARAM_TYPE_DISCARD,
            basic: ParamBasic {
                attrs,
                logical_bs_shift: 9,
                physical_bs_shift: 12,
                io_opt_shift: 12,
                io_min_shift: 12,
                max_sectors: max_io_bytes >> 9,
                chunk_sectors: 0,
                dev_sectors: self.size_bytes >> 9,
                virt_boundary_mask: 0,
            },
            discard: ParamDiscard {
                discard_alignment: 0,
                discard_granularity: 4096,
                max_discard_sectors: (MAX_DISCARD_BYTES >> 9) as u32,
                max_write_zeroes_sectors: (MAX_DISCARD_BYTES >> 9) as u32,
                max_discard_segments: 1,
                reserved0: 0,
            },
        }
    }
}

/// A started ublk device. `remove` (or dropping it) stops and deletes it.
pub struct Device {
    id: u32,
    control: Control,
    queues: u16,
    /// `/dev/ublkcN`, shared with the queues; closed before DEL_DEV, which waits until the
    /// server has dropped the queues too.
    char_device: Option<Arc<File>>,
    removed: bool,
}

impl Device {
    /// Creates and starts `/dev/ublkbN`. `serve` gets the device's queues and must submit
    /// each queue's initial fetches on the thread that will submit all its commands, and
    /// return once they are submitted (or fail); START_DEV then waits for them. Requests
    /// arrive while this runs (the kernel reads the partition table), so the queues must be
    /// served by another thread than this one. On failure nothing is left behind, once the
    /// server has dropped the queues it took (their fetches end with the device).
    pub fn create(
        config: DeviceConfig,
        serve: impl FnOnce(Vec<ServedQueue>) -> Result<(), UblkError>,
    ) -> Result<Device, UblkError> {
        config.validate()?;
        let mut control = Control::open()?;
        let info = control.add_device(
            config.queues,
            config.queue_depth,
            MAX_IO_BYTES,
            config.owner,
        )?;
        let mut device = Device {
            id: info.dev_id,
            control,
            queues: 0,
            char_device: None,
            removed: false,
        };
        // The driver may round the buffer size down (to whole pages) and keep fewer queues
        // (at most one per CPU): serve what it kept.
        let max_io_bytes = info.max_io_buf_bytes.min(MAX_IO_BYTES);
        let config = DeviceConfig {
            queues: info.nr_hw_queues.clamp(1, config.queues),
            queue_depth: info.queue_depth.clamp(1, config.queue_depth),
            ..config
        };
        if let Err(error) = device.start(config, max_io_bytes, serve) {
            let _ = device.remove();
            return Err(error);
        }
        Ok(device)
    }

    fn start(
        &mut self,
        config: DeviceConfig,
        max_io_bytes: u32,
        serve: impl FnOnce(Vec<ServedQueue>) -> Result<(), UblkError>,
    ) -> Result<(), UblkError> {
        if max_io_bytes < 4096 {
            return Err(UblkError::Invalid(format!(
                "the ublk driver keeps only {max_io_bytes} bytes per request"
            )));
        }
        self.control
            .set_params(self.id, &config.params(max_io_bytes))?;
        let path = format!("{}{}", uapi::CHAR_DEVICE_PREFIX, self.id);
        let char_device = Arc::new(open_when_present(&path)?);
        self.char_device = Some(char_device.clone());
        let queues = (0..config.queues)
            .map(|queue| {
                ServedQueue::open(
                    char_device.clone(),
                    queue,
                    config.queue_depth,
                    max_io_bytes as usize,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.queues = config.queues;
        serve(queues)?;
        self.control.start_device(self.id)
    }

    /// Hardware queues the driver kept (at most one per CPU, whatever was asked).
    pub fn queues(&self) -> u16 {
        self.queues
    }

    /// The device number N of `/dev/ublkbN`.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// `/dev/ublkbN`.
    pub fn block_path(&self) -> String {
        format!("{}{}", uapi::BLOCK_DEVICE_PREFIX, self.id)
    }

    /// Whether the driver reports the device live.
    pub fn is_live(&mut self) -> Result<bool, UblkError> {
        Ok(self.control.device_info(self.id)?.state == uapi::DEV_STATE_LIVE)
    }

    /// Stops the block device (requests in flight are answered by the server first; then the
    /// driver aborts the queues' fetches, which finishes them) and deletes the device, which
    /// waits until the server has dropped its queues. Every step runs even if one fails; the
    /// first error is returned.
    pub fn remove(&mut self) -> Result<(), UblkError> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let stopped = self.control.stop_device(self.id);
        self.char_device = None;
        let deleted = self.control.delete_device(self.id);
        stopped.and(deleted)
    }
}

/// Deletes the devices marked `owner` whose server died without deleting them (the kernel
/// removed their block device, `/dev/ublkcN` stays until DEL_DEV): stopped, with no server
/// process and nobody holding `/dev/ublkcN`. The caller must not be creating a device with
/// the same mark meanwhile (one being set up looks the same until it opens `/dev/ublkcN`).
/// Returns the device numbers deleted.
pub fn remove_abandoned(owner: u64) -> Result<Vec<u32>, UblkError> {
    let mut control = Control::open()?;
    let mut removed = Vec::new();
    for id in char_device_ids() {
        let Ok(info) = control.device_info(id) else {
            continue;
        };
        // The driver forgets a dead server's process id (-1).
        let serverless = info.ublksrv_pid <= 0 || !process_exists(info.ublksrv_pid);
        if info.ublksrv_flags != owner || info.state != uapi::DEV_STATE_DEAD || !serverless {
            continue;
        }
        // A server being set up holds `/dev/ublkcN` open (the driver allows one open).
        let path = format!("{}{}", uapi::CHAR_DEVICE_PREFIX, id);
        let unused = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .is_ok();
        if unused && control.delete_device(id).is_ok() {
            removed.push(id);
        }
    }
    Ok(removed)
}

/// N of every `/dev/ublkcN`.
fn char_device_ids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/dev") else {
        return Vec::new();
    };
    let prefix = uapi::CHAR_DEVICE_PREFIX.trim_start_matches("/dev/");
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name();
            name.to_str()?.strip_prefix(prefix)?.parse().ok()
        })
        .collect()
}

fn process_exists(pid: i32) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

impl Drop for Device {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> DeviceConfig {
        DeviceConfig {
            queues: 2,
            queue_depth: 64,
            size_bytes: 1 << 30,
            read_only: false,
            owner: 7,
        }
    }

    #[test]
    fn parameters_describe_the_drive() {
        let params = config().params(MAX_IO_BYTES);
        assert_eq!(params.len, 60);
        assert_eq!(params.basic.dev_sectors, 1 << 21);
        assert_eq!(params.basic.max_sectors, 1024);
        assert_eq!(params.basic.logical_bs_shift, 9);
        assert_ne!(params.basic.attrs & uapi::ATTR_VOLATILE_CACHE, 0);
        assert_ne!(params.basic.attrs & uapi::ATTR_FUA, 0);
        assert_eq!(params.basic.attrs & uapi::ATTR_READ_ONLY, 0);
        assert_eq!(params.discard.max_discard_segments, 1);
        assert_eq!(params.discard.discard_granularity, 4096);
        let read_only = DeviceConfig {
            read_only: true,
            ..config()
        };
        assert_ne!(
            read_only.params(MAX_IO_BYTES).basic.attrs & uapi::ATTR_READ_ONLY,
            0
        );
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        assert!(config().validate().is_ok());
        for bad in [
            DeviceConfig {
                queues: 0,
                ..config()
            },
            DeviceConfig {
                queue_depth: 0,
                ..config()
            },
            DeviceConfig {
                queue_depth: 4096,
                ..config()
            },
            DeviceConfig {
                size_bytes: 1000,
                ..config()
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(UblkError::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_kernel_without_ublk_gets_a_clear_error() {
        if std::path::Path::new(uapi::CONTROL_PATH).exists() {
            return;
        }
        let error = Device::create(config(), |_| unreachable!("no queues without the driver"))
            .err()
            .expect("no ublk here");
        assert_eq!(error, UblkError::NotAvailable);
        assert!(error.to_string().contains("ublk_drv"), "{error}");
    }
}
