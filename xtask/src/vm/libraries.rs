//! Shared libraries for the programs in an image: follow `DT_NEEDED` from the programs through
//! a pool of library files (extracted Debian packages, or the host's library directories) and
//! collect exactly the libraries that are needed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::elf;

/// Where the guest's dynamic linker finds libraries without an `ld.so.cache`.
pub const GUEST_LIBRARY_DIRECTORY: &str = "usr/lib/x86_64-linux-gnu";

/// Library directories searched first in each root, before anything else under `lib` and
/// `usr/lib` (some packages keep private libraries in subdirectories, found via RUNPATH).
const PREFERRED_DIRECTORIES: &[&str] =
    &["lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64"];
const OTHER_DIRECTORIES: &[&str] = &["lib", "usr/lib"];

/// Library files by file name (`libc.so.6`), each the real file behind any symbolic links.
#[derive(Default)]
pub struct LibraryPool {
    by_name: BTreeMap<String, PathBuf>,
}

impl LibraryPool {
    /// Indexes file-system roots (extracted packages, or `/` for the host), earlier roots and
    /// preferred directories winning when two hold the same name. `everywhere` also searches
    /// all of `lib` and `usr/lib` (for packages; the host's are too big to walk).
    pub fn index(roots: &[PathBuf], everywhere: bool) -> LibraryPool {
        let mut pool = LibraryPool::default();
        for root in roots {
            for directory in PREFERRED_DIRECTORIES {
                pool.add_directory(root, &root.join(directory), false);
            }
        }
        if everywhere {
            for root in roots {
                for directory in OTHER_DIRECTORIES {
                    pool.add_directory(root, &root.join(directory), true);
                }
            }
        }
        pool
    }

    fn add_directory(&mut self, root: &Path, directory: &Path, recursive: bool) {
        let Ok(entries) = fs::read_dir(directory) else {
            return;
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
        paths.sort();
        for path in paths {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let metadata = fs::symlink_metadata(&path);
            if metadata.as_ref().is_ok_and(|metadata| metadata.is_dir()) {
                if recursive {
                    self.add_directory(root, &path, true);
                }
                continue;
            }
            if !(name.ends_with(".so") || name.contains(".so.")) || self.by_name.contains_key(&name)
            {
                continue;
            }
            if let Some(file) = resolve_in_root(root, &path) {
                self.by_name.insert(name, file);
            }
        }
    }

    pub fn find(&self, name: &str) -> Option<&Path> {
        self.by_name.get(name).map(PathBuf::as_path)
    }
}

/// Follows symbolic links inside an extracted package, where an absolute target means "from the
/// package's root"; `None` when a link points outside what was extracted.
fn resolve_in_root(root: &Path, path: &Path) -> Option<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        let metadata = fs::symlink_metadata(&current).ok()?;
        if !metadata.file_type().is_symlink() {
            return metadata.is_file().then_some(current);
        }
        let target = fs::read_link(&current).ok()?;
        current = if target.is_absolute() {
            root.join(target.strip_prefix("/").unwrap())
        } else {
            current.parent()?.join(target)
        };
    }
    None
}

/// The libraries a set of programs needs, transitively.
#[derive(Debug, Default)]
pub struct Closure {
    /// Library name -> file to copy.
    pub libraries: BTreeMap<String, PathBuf>,
    /// Program interpreters named by the programs (`/lib64/ld-linux-x86-64.so.2`).
    pub interpreters: BTreeSet<String>,
}

/// Resolves `programs` against `pool`, skipping names in `already_present` (libraries a lower
/// layer of the image has). Reports every missing library with the file that needs it.
pub fn closure(
    programs: &[PathBuf],
    pool: &LibraryPool,
    already_present: &BTreeSet<String>,
) -> Result<Closure, String> {
    let mut result = Closure::default();
    let mut missing = Vec::new();
    let mut queue: Vec<PathBuf> = programs.to_vec();
    let mut seen = BTreeSet::new();
    while let Some(path) = queue.pop() {
        let bytes = fs::read(&path).map_err(|error| format!("{}: {error}", path.display()))?;
        let Some(linkage) =
            elf::read_linkage(&bytes).map_err(|error| format!("{}: {error}", path.display()))?
        else {
            continue;
        };
        if let Some(interpreter) = linkage.interpreter {
            result.interpreters.insert(interpreter);
        }
        for name in linkage.needed {
            if already_present.contains(&name) || !seen.insert(name.clone()) {
                continue;
            }
            match pool.find(&name) {
                Some(file) => {
                    result.libraries.insert(name, file.to_path_buf());
                    queue.push(file.to_path_buf());
                }
                None => missing.push(format!("{name} (needed by {})", path.display())),
            }
        }
    }
    if missing.is_empty() {
        Ok(result)
    } else {
        Err(format!("libraries not found: {}", missing.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool follows a package's absolute and relative links to the real file, and the
    /// preferred directory wins over a private subdirectory.
    #[test]
    fn indexes_a_package_tree() {
        let root = std::env::temp_dir().join(format!("tessera-vm-pool-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let multiarch = root.join("usr/lib/x86_64-linux-gnu");
        fs::create_dir_all(multiarch.join("private")).unwrap();
        fs::create_dir_all(root.join("lib64")).unwrap();
        fs::write(multiarch.join("libfoo.so.1.2.3"), b"real").unwrap();
        std::os::unix::fs::symlink("libfoo.so.1.2.3", multiarch.join("libfoo.so.1")).unwrap();
        std::os::unix::fs::symlink(
            "/usr/lib/x86_64-linux-gnu/libfoo.so.1.2.3",
            root.join("lib64/libbar.so.2"),
        )
        .unwrap();
        fs::write(multiarch.join("private/libfoo.so.1"), b"shadowed").unwrap();
        fs::write(multiarch.join("private/libonly.so.0"), b"private").unwrap();
        std::os::unix::fs::symlink("/nowhere/libgone.so.1", multiarch.join("libgone.so.1"))
            .unwrap();

        let pool = LibraryPool::index(std::slice::from_ref(&root), true);
        let real = multiarch.join("libfoo.so.1.2.3");
        assert_eq!(pool.find("libfoo.so.1"), Some(real.as_path()));
        assert_eq!(pool.find("libbar.so.2"), Some(real.as_path()));
        assert_eq!(
            pool.find("libonly.so.0"),
            Some(multiarch.join("private/libonly.so.0").as_path())
        );
        assert_eq!(pool.find("libgone.so.1"), None);
        fs::remove_dir_all(&root).unwrap();
    }

    /// This test binary's own libraries, resolved from the host, must match `ldd`'s answer
    /// (when `ldd` is installed): an independent resolver of the same question.
    #[test]
    fn agrees_with_ldd_on_the_test_binary() {
        let program = std::env::current_exe().unwrap();
        let Ok(output) = std::process::Command::new("ldd").arg(&program).output() else {
            eprintln!("skipping: ldd is not installed");
            return;
        };
        let expected: BTreeSet<String> = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .filter_map(|line| {
                line.split_once(" => ")
                    .map(|(name, _)| name.trim().to_string())
            })
            .collect();
        let pool = LibraryPool::index(&[PathBuf::from("/")], false);
        let closure = closure(&[program], &pool, &BTreeSet::new()).unwrap();
        // ldd shows the interpreter apart, without "=>".
        let found: BTreeSet<String> = closure
            .libraries
            .keys()
            .filter(|name| !name.starts_with("ld-linux"))
            .cloned()
            .collect();
        assert!(!expected.is_empty());
        assert_eq!(found, expected);
    }
}
