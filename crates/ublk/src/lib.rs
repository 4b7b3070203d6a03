//! Tessera's ublk front end: virtual drives as native block devices (`/dev/ublkbN`) through
//! the Linux ublk driver, talking to it with io_uring `URING_CMD` directly.
//!
//! - `uapi`: the driver's structures and command numbers.
//! - `control`: the control device's commands (ADD_DEV, SET_PARAMS, START_DEV, STOP_DEV,
//!   DEL_DEV, GET_DEV_INFO).
//! - `queue`: a hardware queue served by the server's own io_uring: the fetch and
//!   commit-and-fetch commands it submits, the requests their completions bring.
//! - `request`: a request handed to the server with its tag's buffer.
//! - `device`: a device's life, from creation to deletion.
//!
//! See `docs/ublk.md`.

mod control;
mod device;
mod error;
mod memory;
mod queue;
mod request;
pub mod uapi;

pub use control::Control;
pub use device::{Device, DeviceConfig, MAX_IO_BYTES, remove_abandoned};
pub use error::{UblkError, errno_text};
pub use queue::{QueueCommand, ServedQueue};
pub use request::{BlockOp, BlockRequest};

/// Whether this kernel offers ublk (the control device exists).
pub fn available() -> bool {
    std::path::Path::new(uapi::CONTROL_PATH).exists()
}
