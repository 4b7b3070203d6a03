//! The daemon's own small state: which device paths it manages, under which ids, and which
//! virtual drives it exports as ublk block devices (devices of this host, made again when the
//! daemon starts). Everything about groups and virtual drives lives in the members'
//! superblocks.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One physical drive the daemon manages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriveRecord {
    pub id: u32,
    pub path: String,
    #[serde(default)]
    pub spare: bool,
    #[serde(default)]
    pub spare_for: Option<u32>,
}

/// A virtual drive exported as a ublk block device, as `vd export --ublk` asked for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UblkExportRecord {
    pub vd: String,
    #[serde(default)]
    pub queues: Option<u16>,
    #[serde(default)]
    pub queue_depth: Option<u16>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    #[serde(default)]
    pub drives: Vec<DriveRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ublk_exports: Vec<UblkExportRecord>,
}

/// The state directory (`--state-dir`).
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    pub fn open(dir: &Path) -> Result<StateDir, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create state directory {}: {e}", dir.display()))?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
    }

    fn file(&self) -> PathBuf {
        self.dir.join("drives.json")
    }

    pub fn load(&self) -> Result<StateFile, String> {
        match std::fs::read(self.file()) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("state file {} is damaged: {e}", self.file().display())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(StateFile::default()),
            Err(error) => Err(format!("cannot read {}: {error}", self.file().display())),
        }
    }

    /// Replaces the state file atomically (write a temporary file, sync it, rename).
    pub fn save(&self, state: &StateFile) -> Result<(), String> {
        let temporary = self.dir.join("drives.json.tmp");
        let bytes = serde_json::to_vec_pretty(state).expect("state serializes");
        let result = (|| -> std::io::Result<()> {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            std::fs::rename(&temporary, self.file())?;
            std::fs::File::open(&self.dir)?.sync_all()
        })();
        result.map_err(|e| format!("cannot write {}: {e}", self.file().display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = StateDir::open(dir.path()).unwrap();
        assert_eq!(state_dir.load().unwrap(), StateFile::default());
        let state = StateFile {
            drives: vec![DriveRecord {
                id: 3,
                path: "/dev/x".into(),
                spare: true,
                spare_for: None,
            }],
            ublk_exports: vec![UblkExportRecord {
                vd: "db".into(),
                queues: Some(2),
                queue_depth: None,
            }],
        };
        state_dir.save(&state).unwrap();
        assert_eq!(state_dir.load().unwrap(), state);
        std::fs::write(dir.path().join("drives.json"), b"{not json").unwrap();
        assert!(state_dir.load().unwrap_err().contains("damaged"));
    }

    #[test]
    fn a_state_file_without_exports_loads() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = StateDir::open(dir.path()).unwrap();
        let old = br#"{"drives": [{"id": 0, "path": "/dev/x"}]}"#;
        std::fs::write(dir.path().join("drives.json"), old).unwrap();
        let state = state_dir.load().unwrap();
        assert_eq!(state.drives.len(), 1);
        assert!(state.ublk_exports.is_empty());
    }
}
