//! What the server knows about an export, and the catalog the daemon implements to look them up.

use crate::proto::{MINIMUM_BLOCK_BYTES_MAX, PAYLOAD_BYTES_NEVER_ABUSE, TransmissionFlags};

/// Size constraints advertised with `NBD_INFO_BLOCK_SIZE` (see "Size constraints" in the spec).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSizeConstraints {
    /// Smallest addressable length and alignment: a power of two, at most 64 KiB.
    pub minimum_bytes: u32,
    /// Length and alignment for efficient I/O: a power of two, at least max(minimum, 512).
    pub preferred_bytes: u32,
    /// Largest payload of one request; at least the preferred size.
    pub maximum_payload_bytes: u32,
}

impl BlockSizeConstraints {
    /// Tessera's virtual drives: 512-byte sectors, 4 KiB preferred, 32 MiB per request.
    pub const TESSERA: Self = Self {
        minimum_bytes: 512,
        preferred_bytes: 4096,
        maximum_payload_bytes: PAYLOAD_BYTES_NEVER_ABUSE,
    };

    /// What a server assumes when no constraints were agreed: 1 byte, 4 KiB, 32 MiB.
    pub const PROTOCOL_DEFAULT: Self = Self {
        minimum_bytes: 1,
        preferred_bytes: 4096,
        maximum_payload_bytes: PAYLOAD_BYTES_NEVER_ABUSE,
    };

    /// Checks the rules the spec sets on advertised values.
    pub fn check(&self) -> Result<(), &'static str> {
        if !self.minimum_bytes.is_power_of_two() || self.minimum_bytes > MINIMUM_BLOCK_BYTES_MAX {
            return Err("minimum block size must be a power of two no larger than 64 KiB");
        }
        if !self.preferred_bytes.is_power_of_two()
            || self.preferred_bytes < self.minimum_bytes.max(512)
        {
            return Err("preferred block size must be a power of two >= max(minimum, 512)");
        }
        if self.maximum_payload_bytes < self.preferred_bytes {
            return Err("maximum payload must be at least the preferred block size");
        }
        Ok(())
    }
}

impl Default for BlockSizeConstraints {
    fn default() -> Self {
        Self::TESSERA
    }
}

/// The features an export offers, each mapping to a transmission flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportFeatures {
    /// `NBD_CMD_FLUSH` is accepted.
    pub flush: bool,
    /// `NBD_CMD_FLAG_FUA` is honoured.
    pub fua: bool,
    /// `NBD_CMD_TRIM` is accepted.
    pub trim: bool,
    /// `NBD_CMD_WRITE_ZEROES` (with NO_HOLE) is accepted.
    pub write_zeroes: bool,
    /// `NBD_CMD_FLAG_FAST_ZERO` is honoured (only offered together with write_zeroes).
    pub fast_zero: bool,
    /// FLUSH and FUA on one connection cover writes completed on every connection.
    pub multi_conn: bool,
    /// The export behaves like a rotational disk (never true for Tessera's NVMe drives).
    pub rotational: bool,
    /// `NBD_CMD_CACHE` is accepted.
    pub cache: bool,
    /// `NBD_CMD_FLAG_DF` is honoured on reads (only offered with structured replies).
    pub df: bool,
    /// The `base:allocation` metadata context can be selected for `NBD_CMD_BLOCK_STATUS`.
    pub block_status: bool,
}

impl ExportFeatures {
    /// Everything except rotational, cache and block status.
    pub const TYPICAL: Self = Self {
        flush: true,
        fua: true,
        trim: true,
        write_zeroes: true,
        fast_zero: true,
        multi_conn: false,
        rotational: false,
        cache: false,
        df: true,
        block_status: false,
    };
}

impl Default for ExportFeatures {
    fn default() -> Self {
        Self::TYPICAL
    }
}

/// An export as the server advertises it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// The canonical name (what `NBD_OPT_LIST` shows; the default export has a real name too).
    pub name: String,
    /// A description for humans, sent with `NBD_INFO_DESCRIPTION` when asked for.
    pub description: Option<String>,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Writes, trims and zeroes are refused with EPERM.
    pub read_only: bool,
    /// Optional commands and flags.
    pub features: ExportFeatures,
    /// Size constraints enforced on requests.
    pub block_size: BlockSizeConstraints,
    /// Only served over TLS (issue 11): options naming it answer `NBD_REP_ERR_TLS_REQD`.
    pub tls_required: bool,
    /// Not for this client (the daemon's access rules): options naming it answer
    /// `NBD_REP_ERR_POLICY` with this message, `NBD_OPT_EXPORT_NAME` closes the connection,
    /// and `NBD_OPT_LIST` leaves it out.
    pub refused: Option<&'static str>,
}

impl ExportInfo {
    /// An export with typical features and Tessera's block sizes.
    pub fn new(name: impl Into<String>, size_bytes: u64) -> Self {
        Self {
            name: name.into(),
            description: None,
            size_bytes,
            read_only: false,
            features: ExportFeatures::TYPICAL,
            block_size: BlockSizeConstraints::TESSERA,
            tls_required: false,
            refused: None,
        }
    }

    /// The transmission flags for this export; DF needs structured replies.
    pub fn transmission_flags(&self, structured_replies: bool) -> TransmissionFlags {
        let features = &self.features;
        let mut flags = TransmissionFlags::HAS_FLAGS;
        let mut set = |condition: bool, flag: TransmissionFlags| {
            if condition {
                flags = flags | flag;
            }
        };
        set(self.read_only, TransmissionFlags::READ_ONLY);
        set(features.flush, TransmissionFlags::SEND_FLUSH);
        set(features.fua, TransmissionFlags::SEND_FUA);
        set(features.rotational, TransmissionFlags::ROTATIONAL);
        set(features.trim, TransmissionFlags::SEND_TRIM);
        set(features.write_zeroes, TransmissionFlags::SEND_WRITE_ZEROES);
        set(
            features.df && structured_replies,
            TransmissionFlags::SEND_DF,
        );
        set(features.multi_conn, TransmissionFlags::CAN_MULTI_CONN);
        set(features.cache, TransmissionFlags::SEND_CACHE);
        set(
            features.fast_zero && features.write_zeroes,
            TransmissionFlags::SEND_FAST_ZERO,
        );
        flags
    }
}

/// The exports a server offers; implemented by the daemon (one export per virtual drive).
pub trait ExportCatalog {
    /// The export called `name`; the empty name asks for the default export, if there is one.
    fn lookup(&self, name: &str) -> Option<ExportInfo>;
    /// The canonical names of all exports, for `NBD_OPT_LIST`.
    fn list(&self) -> Vec<String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tessera_block_sizes_follow_the_spec_rules() {
        assert_eq!(BlockSizeConstraints::TESSERA.check(), Ok(()));
        assert_eq!(BlockSizeConstraints::PROTOCOL_DEFAULT.check(), Ok(()));
        let bad_minimum = BlockSizeConstraints {
            minimum_bytes: 3,
            ..BlockSizeConstraints::TESSERA
        };
        assert!(bad_minimum.check().is_err());
        let huge_minimum = BlockSizeConstraints {
            minimum_bytes: 1 << 17,
            preferred_bytes: 1 << 17,
            maximum_payload_bytes: 1 << 20,
        };
        assert!(huge_minimum.check().is_err());
        let small_preferred = BlockSizeConstraints {
            preferred_bytes: 256,
            ..BlockSizeConstraints::PROTOCOL_DEFAULT
        };
        assert!(small_preferred.check().is_err());
        let small_maximum = BlockSizeConstraints {
            maximum_payload_bytes: 1024,
            ..BlockSizeConstraints::TESSERA
        };
        assert!(small_maximum.check().is_err());
    }

    #[test]
    fn transmission_flags_are_built_from_features() {
        let mut export = ExportInfo::new("disk", 1 << 20);
        // HAS_FLAGS|FLUSH|FUA|TRIM|WRITE_ZEROES|FAST_ZERO = 0x0001|0x0004|0x0008|0x0020|0x0040|0x0800.
        assert_eq!(export.transmission_flags(false).0, 0x086d);
        // DF only once structured replies are on.
        assert_eq!(export.transmission_flags(true).0, 0x08ed);
        export.read_only = true;
        export.features = ExportFeatures {
            write_zeroes: false,
            multi_conn: true,
            cache: true,
            ..ExportFeatures::TYPICAL
        };
        // FAST_ZERO disappears without WRITE_ZEROES; READ_ONLY, MULTI_CONN and CACHE appear.
        assert_eq!(
            export.transmission_flags(false).0,
            0x0001 | 0x0002 | 0x0004 | 0x0008 | 0x0020 | 0x0100 | 0x0400
        );
    }
}
