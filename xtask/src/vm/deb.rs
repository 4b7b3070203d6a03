//! Unpacks `.deb` files with `dpkg-deb` into a cache of file trees, one per package version, so
//! each file is unpacked once however often the image is rebuilt.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::VmError;
use super::apt::DebFile;

/// The tree a `.deb` unpacks to (it exists once [`extract_all`] has returned).
pub fn root_of(roots: &Path, file: &DebFile) -> PathBuf {
    roots.join(file.file_name.trim_end_matches(".deb"))
}

/// Unpacks every file not yet in `roots`, two at a time (the machine has two cores and
/// `dpkg-deb` runs its decompressor as a second process).
pub fn extract_all(debs: &Path, roots: &Path, files: &[DebFile]) -> Result<(), VmError> {
    let pending: Vec<&DebFile> = files
        .iter()
        .filter(|file| !root_of(roots, file).exists())
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    eprintln!("vm: unpacking {} Debian packages", pending.len());
    fs::create_dir_all(roots).map_err(VmError::io(roots))?;
    let next = AtomicUsize::new(0);
    let first_error = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(file) = pending.get(index) else {
                        break;
                    };
                    if let Err(error) = extract(debs, roots, file) {
                        first_error.lock().unwrap().get_or_insert(error);
                        break;
                    }
                }
            });
        }
    });
    match first_error.into_inner().unwrap() {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// Unpacks into a temporary directory and renames it, so an interrupted run leaves no
/// half-unpacked tree behind under the final name.
fn extract(debs: &Path, roots: &Path, file: &DebFile) -> Result<(), VmError> {
    let deb = debs.join(&file.file_name);
    let target = root_of(roots, file);
    let mut partial = target.clone().into_os_string();
    partial.push(format!(".partial-{}", std::process::id()));
    let partial = PathBuf::from(partial);
    let _ = fs::remove_dir_all(&partial);
    let output = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&partial)
        .output()
        .map_err(|error| VmError::Unavailable(format!("cannot run dpkg-deb: {error}")))?;
    if !output.status.success() {
        return Err(VmError::Failed(format!(
            "dpkg-deb -x {} failed: {}",
            deb.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    match fs::rename(&partial, &target) {
        Ok(()) => Ok(()),
        // Another build unpacked the same package meanwhile.
        Err(_) if target.exists() => {
            let _ = fs::remove_dir_all(&partial);
            Ok(())
        }
        Err(error) => Err(VmError::io(&target)(error)),
    }
}
