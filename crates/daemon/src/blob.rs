//! What the daemon keeps in a group's superblock configuration blob: the group's id and its
//! virtual-drive table. JSON, so it can grow without a format change; decoded defensively, since
//! it comes from a drive.

use serde::{Deserialize, Serialize};
use tessera_api::model::{Compression, VdAccessView, canonical_rules};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdRecord {
    pub name: String,
    /// The drive's extent of the group's data space: a thick drive's blocks, or the space a
    /// thin drive's log lives in.
    pub offset_bytes: u64,
    pub size_bytes: u64,
    /// Who may connect; left out of the blob while open to all (the superblock's space is small).
    #[serde(default, skip_serializing_if = "is_open")]
    pub access: VdAccessView,
    /// Present for thin drives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thin: Option<ThinRecord>,
}

/// What a thin drive adds to its record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinRecord {
    /// The size hosts see; it may exceed the extent (overcommit).
    pub logical_bytes: u64,
    pub compression: Compression,
    /// Tells this drive's log records from stale bytes of an earlier drive in the extent.
    pub store_id: u64,
    /// A low-space event is raised when free space falls below this share of the extent.
    #[serde(default = "default_low_space_percent")]
    pub low_space_percent: u8,
}

fn default_low_space_percent() -> u8 {
    10
}

impl VdRecord {
    /// The part of a group range that falls in this drive's extent, as (offset within the
    /// extent, length); None outside it.
    fn overlap(&self, offset_bytes: u64, len_bytes: u64) -> Option<(u64, u64)> {
        let start = offset_bytes.max(self.offset_bytes);
        let stop = (offset_bytes + len_bytes).min(self.offset_bytes + self.size_bytes);
        (start < stop).then(|| (start - self.offset_bytes, stop - start))
    }

    /// The part of a lost group range that falls in this thick drive, as (offset within the
    /// drive, length). None for a thin drive (its extent holds a log, not host offsets) or a
    /// range outside the drive.
    pub fn lost_range(&self, offset_bytes: u64, len_bytes: u64) -> Option<(u64, u64)> {
        self.overlap(offset_bytes, len_bytes)
            .filter(|_| self.thin.is_none())
    }

    /// The size hosts see.
    pub fn host_bytes(&self) -> u64 {
        self.thin
            .as_ref()
            .map_or(self.size_bytes, |thin| thin.logical_bytes)
    }
}

fn is_open(access: &VdAccessView) -> bool {
    *access == VdAccessView::default()
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupConfig {
    pub dg_id: u32,
    #[serde(default)]
    pub virtual_drives: Vec<VdRecord>,
}

impl GroupConfig {
    /// Where lost group data lies in the virtual drives, for the operator: a thick drive's
    /// byte range, or the log of a thin drive (whose blocks there fail their reads). Empty
    /// outside every drive.
    pub fn where_lost(&self, offset_bytes: u64, len_bytes: u64) -> Vec<String> {
        self.virtual_drives
            .iter()
            .filter_map(|vd| {
                let (start, len) = vd.overlap(offset_bytes, len_bytes)?;
                Some(match vd.thin {
                    Some(_) => format!("the log of thin virtual drive {}", vd.name),
                    None => format!("virtual drive {} at {start}+{len}", vd.name),
                })
            })
            .collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("group config serializes")
    }

    /// Decodes and checks a blob against the group's data size: virtual drives inside the
    /// group, not overlapping, names unique.
    pub fn decode(bytes: &[u8], data_bytes: u64) -> Result<GroupConfig, String> {
        let config: GroupConfig =
            serde_json::from_slice(bytes).map_err(|e| format!("configuration is damaged: {e}"))?;
        let mut extents: Vec<(u64, u64)> = Vec::new();
        for (i, vd) in config.virtual_drives.iter().enumerate() {
            let end = vd
                .offset_bytes
                .checked_add(vd.size_bytes)
                .filter(|&end| end <= data_bytes);
            let Some(end) = end else {
                return Err(format!("virtual drive {} lies outside the group", vd.name));
            };
            if config.virtual_drives[..i]
                .iter()
                .any(|other| other.name == vd.name)
            {
                return Err(format!("virtual drive name {} appears twice", vd.name));
            }
            canonical_rules(&vd.access.allow)
                .map_err(|error| format!("virtual drive {}: {error}", vd.name))?;
            if let Some(thin) = &vd.thin
                && (thin.logical_bytes == 0 || !thin.logical_bytes.is_multiple_of(4096))
            {
                return Err(format!(
                    "thin virtual drive {} has a logical size of {} bytes",
                    vd.name, thin.logical_bytes
                ));
            }
            extents.push((vd.offset_bytes, end));
        }
        extents.sort_unstable();
        if extents.windows(2).any(|pair| pair[0].1 > pair[1].0) {
            return Err("virtual drives overlap".into());
        }
        Ok(config)
    }

    /// The extents of the virtual drives, `(start, end)`, in order.
    fn taken(&self) -> Vec<(u64, u64)> {
        let mut taken: Vec<(u64, u64)> = self
            .virtual_drives
            .iter()
            .map(|vd| (vd.offset_bytes, vd.offset_bytes + vd.size_bytes))
            .collect();
        taken.sort_unstable();
        taken
    }

    /// The first gap of `size_bytes` (at `align_bytes`) in a data space of `data_bytes`.
    pub fn find_space(&self, size_bytes: u64, align_bytes: u64, data_bytes: u64) -> Option<u64> {
        let mut candidate = 0u64;
        for (start, end) in self.taken() {
            if candidate + size_bytes <= start {
                return Some(candidate);
            }
            candidate = candidate.max(end.div_ceil(align_bytes) * align_bytes);
        }
        (candidate.checked_add(size_bytes)? <= data_bytes).then_some(candidate)
    }

    /// The largest gap (start aligned to `align_bytes`): where a thin drive takes all the
    /// space left by default. `(offset, size)`.
    pub fn largest_space(&self, align_bytes: u64, data_bytes: u64) -> Option<(u64, u64)> {
        let mut taken = self.taken();
        taken.push((data_bytes, data_bytes));
        let mut best: Option<(u64, u64)> = None;
        let mut candidate = 0u64;
        for (start, end) in taken {
            if start > candidate && best.is_none_or(|(_, size)| start - candidate > size) {
                best = Some((candidate, start - candidate));
            }
            candidate = candidate.max(end.div_ceil(align_bytes) * align_bytes);
        }
        best
    }

    /// Bytes not used by any virtual drive.
    pub fn free_bytes(&self, data_bytes: u64) -> u64 {
        data_bytes
            - self
                .virtual_drives
                .iter()
                .map(|vd| vd.size_bytes)
                .sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vd(name: &str, offset: u64, size: u64) -> VdRecord {
        VdRecord {
            access: VdAccessView::default(),
            name: name.into(),
            offset_bytes: offset,
            size_bytes: size,
            thin: None,
        }
    }

    #[test]
    fn placement_and_checks() {
        let mut config = GroupConfig {
            dg_id: 1,
            virtual_drives: vec![vd("a", 0, 100), vd("b", 300, 100)],
        };
        assert_eq!(config.find_space(100, 100, 1000), Some(100));
        assert_eq!(config.find_space(250, 100, 1000), Some(400));
        assert_eq!(config.find_space(700, 100, 1000), None);
        assert_eq!(config.free_bytes(1000), 800);
        assert_eq!(config.largest_space(100, 1000), Some((400, 600)));
        assert_eq!(config.largest_space(300, 1000), Some((600, 400)));
        assert_eq!(GroupConfig::default().largest_space(1, 10), Some((0, 10)));
        let decoded = GroupConfig::decode(&config.encode(), 1000).unwrap();
        assert_eq!(decoded, config);
        config.virtual_drives.push(vd("c", 350, 10));
        assert!(
            GroupConfig::decode(&config.encode(), 1000)
                .unwrap_err()
                .contains("overlap")
        );
        assert!(GroupConfig::decode(b"{\"dg_id\":1,\"virtual_drives\":[{\"name\":\"x\",\"offset_bytes\":990,\"size_bytes\":20}]}", 1000).is_err());
        assert!(GroupConfig::decode(b"\xff", 1000).is_err());
    }

    #[test]
    fn lost_data_is_placed_in_the_drives_it_falls_in() {
        let mut thin = vd("t", 1000, 500);
        thin.thin = Some(ThinRecord {
            logical_bytes: 4000,
            compression: Compression::Lz4,
            store_id: 7,
            low_space_percent: 10,
        });
        let config = GroupConfig {
            dg_id: 1,
            virtual_drives: vec![vd("a", 0, 100), vd("b", 300, 100), thin],
        };
        assert_eq!(config.where_lost(310, 20), vec!["virtual drive b at 10+20"]);
        assert_eq!(
            config.where_lost(50, 300),
            vec!["virtual drive a at 50+50", "virtual drive b at 0+50"]
        );
        assert_eq!(
            config.where_lost(1200, 512),
            vec!["the log of thin virtual drive t"]
        );
        assert!(config.where_lost(100, 200).is_empty(), "between drives");
        assert_eq!(config.virtual_drives[1].lost_range(250, 100), Some((0, 50)));
        assert_eq!(
            config.virtual_drives[1].lost_range(390, 100),
            Some((90, 10))
        );
        assert_eq!(
            config.virtual_drives[1].lost_range(400, 100),
            None,
            "just past it"
        );
        assert_eq!(config.virtual_drives[2].lost_range(1200, 512), None, "thin");
    }

    #[test]
    fn access_is_kept_only_when_set_and_bad_rules_are_damage() {
        let open = GroupConfig {
            dg_id: 1,
            virtual_drives: vec![vd("a", 0, 100)],
        };
        // Blobs written before access rules existed decode to open drives.
        assert_eq!(
            open.encode(),
            br#"{"dg_id":1,"virtual_drives":[{"name":"a","offset_bytes":0,"size_bytes":100}]}"#
        );
        let mut guarded = open.clone();
        guarded.virtual_drives[0].access = VdAccessView {
            allow: vec!["uid:1000".into(), "net:10.0.0.0/8".into()],
            read_only: true,
            multi_conn: false,
            tls_required: true,
        };
        assert_eq!(
            GroupConfig::decode(&guarded.encode(), 1000).unwrap(),
            guarded
        );
        guarded.virtual_drives[0]
            .access
            .allow
            .push("uid:nobody".into());
        assert!(
            GroupConfig::decode(&guarded.encode(), 1000)
                .unwrap_err()
                .contains("uid:nobody")
        );
    }
}
