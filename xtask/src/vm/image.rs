//! Builds the cached base image of the test VM: the backports kernel, the chosen modules, the
//! Debian programs with exactly the libraries they need, and the init script, as one initramfs
//! archive. The cache key hashes every input, so an image is rebuilt only when one changes.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::hash::Hasher;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::apt::{Apt, DebFile};
use super::libraries::{self, GUEST_LIBRARY_DIRECTORY, LibraryPool};
use super::modules::{self, ModuleInfo};
use super::spec::{self, TOOL_PACKAGES, ToolPackage};
use super::tree::{Node, Tree, merged};
use super::{Paths, VmError, deb, elf};

/// Images kept in the cache; older ones are deleted when a new one is built.
const IMAGES_KEPT: usize = 3;

/// A built image: boot `kernel` with `initrd` (plus any appended layer).
pub struct Image {
    pub key: String,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Library names in the guest's library directory, so a later layer adds only others.
    pub libraries: BTreeSet<String>,
}

impl Image {
    fn load(directory: &Path, key: &str) -> Result<Image, VmError> {
        let listing = directory.join("libraries.txt");
        let text = fs::read_to_string(&listing).map_err(VmError::io(&listing))?;
        Ok(Image {
            key: key.to_string(),
            kernel: directory.join("vmlinuz"),
            initrd: directory.join("initrd.cpio"),
            libraries: text.lines().map(str::to_string).collect(),
        })
    }
}

/// Returns the cached image for the current inputs, building it first if needed.
/// `update` refreshes the package lists even when they are less than a day old.
pub fn build(paths: &Paths, update: bool) -> Result<Image, VmError> {
    fs::create_dir_all(&paths.cache).map_err(VmError::io(&paths.cache))?;
    // One builder at a time: concurrent test processes share the cache.
    let lock_path = paths.cache.join("build.lock");
    let lock = fs::File::create(&lock_path).map_err(VmError::io(&lock_path))?;
    lock.lock().map_err(VmError::io(&lock_path))?;

    let apt = Apt::open(&paths.apt())?;
    apt.refresh_lists(update)?;
    let tool_names: Vec<&str> = TOOL_PACKAGES.iter().map(|tool| tool.package).collect();
    let files = apt.image_packages(&tool_names)?;

    let init_path = paths.workspace.join("scripts/vm/init");
    let init = fs::read(&init_path).map_err(VmError::io(&init_path))?;
    let mut manifest = spec::describe();
    for file in &files {
        manifest.push(format!("package {} {}", file.package, file.version));
    }
    let key = cache_key(&manifest, &init);
    let directory = paths.images().join(&key);
    if directory.join("initrd.cpio").exists() {
        return Image::load(&directory, &key);
    }

    let started = Instant::now();
    eprintln!("vm: building image {key}");
    apt.download(&files, &paths.debs())?;
    deb::extract_all(&paths.debs(), &paths.roots(), &files)?;
    let partial = paths
        .images()
        .join(format!("{key}.partial-{}", std::process::id()));
    let _ = fs::remove_dir_all(&partial);
    fs::create_dir_all(&partial).map_err(VmError::io(&partial))?;
    let assembled = assemble(paths, &files, init, &partial);
    let kernel_release = match assembled {
        Ok(release) => release,
        Err(error) => {
            let _ = fs::remove_dir_all(&partial);
            return Err(error);
        }
    };
    let manifest_path = partial.join("manifest.txt");
    fs::write(&manifest_path, manifest.join("\n") + "\n").map_err(VmError::io(&manifest_path))?;
    fs::rename(&partial, &directory).map_err(VmError::io(&directory))?;
    let size_bytes = fs::metadata(directory.join("initrd.cpio")).map_or(0, |m| m.len());
    eprintln!(
        "vm: built image {key} ({} MiB, kernel {kernel_release}) in {:.1} s",
        size_bytes >> 20,
        started.elapsed().as_secs_f64()
    );
    prune_old_images(&paths.images(), &key);
    Image::load(&directory, &key)
}

/// Writes `vmlinuz`, `initrd.cpio`, `libraries.txt` and `contents.txt` into `directory` from
/// the unpacked packages (`files`: kernel, tools, libraries); returns the kernel release.
fn assemble(
    paths: &Paths,
    files: &[DebFile],
    init: Vec<u8>,
    directory: &Path,
) -> Result<String, VmError> {
    let (kernel_file, rest) = files.split_first().unwrap();
    let (tool_files, library_files) = rest.split_at(TOOL_PACKAGES.len());
    let root = |file: &DebFile| deb::root_of(&paths.roots(), file);

    let mut tree = skeleton(init);
    let busybox = root(&tool_files[0]).join("bin/busybox");
    let mut programs = Vec::new();
    for (tool, file) in TOOL_PACKAGES.iter().zip(tool_files) {
        assert_eq!(tool.package, file.package);
        add_tool(&mut tree, tool, &root(file), &mut programs)?;
    }
    add_busybox_applets(&mut tree, &busybox)?;

    // Library packages first: a tool package's copy of a library is the fallback.
    let mut library_roots: Vec<PathBuf> = library_files.iter().map(root).collect();
    library_roots.extend(tool_files.iter().map(root));
    let pool = LibraryPool::index(&library_roots, true);
    let closure = libraries::closure(&programs, &pool, &BTreeSet::new())
        .map_err(|error| VmError::Failed(format!("{error}; add the package to spec.rs")))?;
    for (name, file) in &closure.libraries {
        tree.add(
            &format!("{GUEST_LIBRARY_DIRECTORY}/{name}"),
            Node::HostFile(file.clone()),
        );
    }
    for interpreter in &closure.interpreters {
        let name = interpreter.rsplit('/').next().unwrap();
        if !closure.libraries.contains_key(name) {
            return Err(VmError::Failed(format!(
                "interpreter {interpreter} not found"
            )));
        }
        let target = format!("/{GUEST_LIBRARY_DIRECTORY}/{name}");
        tree.add(&merged(interpreter), Node::Symlink(target));
    }

    let kernel_root = root(kernel_file);
    let kernel_release = add_kernel_modules(&mut tree, &kernel_root, &busybox)?;
    let vmlinuz = kernel_root.join(format!("boot/vmlinuz-{kernel_release}"));
    fs::copy(&vmlinuz, directory.join("vmlinuz")).map_err(VmError::io(&vmlinuz))?;

    let archive_path = directory.join("initrd.cpio");
    let archive = fs::File::create(&archive_path).map_err(VmError::io(&archive_path))?;
    let mut archive = tree
        .write_cpio(BufWriter::with_capacity(1 << 20, archive))
        .map_err(VmError::io(&archive_path))?;
    archive.flush().map_err(VmError::io(&archive_path))?;
    let library_listing: String = closure
        .libraries
        .keys()
        .map(|name| format!("{name}\n"))
        .collect();
    for (name, text) in [
        ("libraries.txt", library_listing),
        ("contents.txt", tree.listing()),
    ] {
        let path = directory.join(name);
        fs::write(&path, text).map_err(VmError::io(&path))?;
    }
    Ok(kernel_release)
}

/// Hash of the manifest (the spec and every package version) and the init script. Rust's
/// SipHash with fixed keys: stable for a given toolchain, which is all a cache needs.
fn cache_key(manifest: &[String], init: &[u8]) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    for line in manifest {
        hasher.write(line.as_bytes());
        hasher.write_u8(b'\n');
    }
    hasher.write(init);
    format!("{:016x}", hasher.finish())
}

/// Directories, device node, usr-merge links, user database and the init script.
fn skeleton(init: Vec<u8>) -> Tree {
    let mut tree = Tree::default();
    for (path, permissions) in [
        ("dev", 0o755),
        ("proc", 0o555),
        ("sys", 0o555),
        ("run", 0o755),
        ("tmp", 0o1777),
        ("mnt", 0o755),
        ("root", 0o700),
        ("usr/bin", 0o755),
        ("usr/sbin", 0o755),
        ("usr/lib64", 0o755),
        ("usr/local/bin", 0o755),
    ] {
        tree.add(path, Node::Directory { permissions });
    }
    // The kernel opens /dev/console for init before anything is mounted.
    tree.add("dev/console", Node::CharacterDevice { major: 5, minor: 1 });
    for top in ["bin", "sbin", "lib", "lib64"] {
        tree.add(top, Node::Symlink(format!("usr/{top}")));
    }
    for (path, contents) in [
        ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
        ("etc/group", "root:x:0:\n"),
        ("etc/hostname", "tessera-vm\n"),
    ] {
        let contents = contents.as_bytes().to_vec();
        tree.add(
            path,
            Node::File {
                permissions: 0o644,
                contents,
            },
        );
    }
    // e2fsprogs and others look for mounted file systems here.
    tree.add("etc/mtab", Node::Symlink("/proc/self/mounts".to_string()));
    tree.add(
        "init",
        Node::File {
            permissions: 0o755,
            contents: init,
        },
    );
    tree
}

/// Adds a tool package's programs and files; collects the programs' real files in `programs`
/// for the library search.
fn add_tool(
    tree: &mut Tree,
    tool: &ToolPackage,
    root: &Path,
    programs: &mut Vec<PathBuf>,
) -> Result<(), VmError> {
    for name in tool.programs {
        let found = ["sbin", "bin", "usr/sbin", "usr/bin"]
            .iter()
            .map(|directory| format!("{directory}/{name}"))
            .find(|path| fs::symlink_metadata(root.join(path)).is_ok())
            .ok_or_else(|| {
                VmError::Failed(format!("package {} has no program {name}", tool.package))
            })?;
        let source = root.join(&found);
        match fs::read_link(&source) {
            // mkfs.ext4 -> mke2fs: keep the link, the program reads its own name.
            Ok(target) => {
                let target = target.to_string_lossy().into_owned();
                if target.contains('/') || !tool.programs.contains(&target.as_str()) {
                    return Err(VmError::Failed(format!(
                        "{found} in {} links to {target}, which is not in its program list",
                        tool.package
                    )));
                }
                tree.add(&merged(&found), Node::Symlink(target));
            }
            Err(_) => {
                tree.add(&merged(&found), Node::HostFile(source.clone()));
                programs.push(source);
            }
        }
    }
    for file in tool.files {
        let source = root.join(file);
        if !source.is_file() {
            return Err(VmError::Failed(format!(
                "package {} has no {file}",
                tool.package
            )));
        }
        tree.add(&merged(file), Node::HostFile(source));
    }
    Ok(())
}

/// A link for every busybox applet whose name no real program has taken, made at build time
/// (the static busybox runs on the host) so the image's contents listing shows them.
fn add_busybox_applets(tree: &mut Tree, busybox: &Path) -> Result<(), VmError> {
    let output = Command::new(busybox)
        .arg("--list-full")
        .output()
        .map_err(VmError::io(busybox))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !text.contains("bin/sh") {
        return Err(VmError::Failed(format!(
            "{} --list-full failed",
            busybox.display()
        )));
    }
    for path in text.lines().filter(|path| path.contains('/')) {
        tree.add(&merged(path), Node::Symlink("/usr/bin/busybox".to_string()));
    }
    Ok(())
}

/// Adds the chosen modules, what they depend on, and index files for `modprobe`; returns the
/// kernel release. Modules are stored uncompressed (unpacked once into the kernel's cache
/// tree): busybox `modprobe` would otherwise first hand the compressed file to the kernel,
/// which logs an error, and then decompress it slowly under emulation.
fn add_kernel_modules(tree: &mut Tree, root: &Path, busybox: &Path) -> Result<String, VmError> {
    let modules_root = root.join("lib/modules");
    let releases: Vec<String> = fs::read_dir(&modules_root)
        .map_err(VmError::io(&modules_root))?
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    let [release] = releases.as_slice() else {
        return Err(VmError::Failed(format!(
            "expected one kernel in {}",
            root.display()
        )));
    };
    let directory = modules_root.join(release);
    let mut available = BTreeMap::new();
    list_modules(&directory, "kernel", &mut available)?;
    let builtin_path = directory.join("modules.builtin");
    let builtin_text = fs::read_to_string(&builtin_path).map_err(VmError::io(&builtin_path))?;
    let builtin: BTreeSet<String> = builtin_text.lines().map(modules::module_name).collect();

    let unpacked = root.join("tessera-unpacked-modules");
    let mut collected: BTreeMap<String, ModuleInfo> = BTreeMap::new();
    let mut files = Vec::new();
    let mut queue: Vec<String> = spec::MODULES
        .iter()
        .map(|name| modules::module_name(name))
        .collect();
    while let Some(name) = queue.pop() {
        if collected.contains_key(&name) || builtin.contains(&name) {
            continue;
        }
        let packed: &String = available
            .get(&name)
            .ok_or_else(|| VmError::Failed(format!("kernel {release} has no module {name}")))?;
        let path = packed.trim_end_matches(".xz").to_string();
        let file = unpacked.join(&path);
        if !file.exists() {
            unpack_module(busybox, &directory.join(packed), &file)?;
        }
        let bytes = fs::read(&file).map_err(VmError::io(&file))?;
        let section = elf::section(&bytes, ".modinfo")
            .map_err(|error| VmError::Failed(format!("{}: {error}", file.display())))?
            .unwrap_or_default();
        let (depends, aliases) = modules::parse_modinfo(section);
        queue.extend(depends.iter().cloned());
        files.push((path.clone(), file));
        collected.insert(
            name,
            ModuleInfo {
                path,
                depends,
                aliases,
            },
        );
    }
    let (dep, alias) = modules::index_files(&collected).map_err(VmError::Failed)?;

    let guest = format!("usr/lib/modules/{release}");
    for (path, file) in files {
        tree.add(&format!("{guest}/{path}"), Node::HostFile(file));
    }
    for (name, text) in [
        ("modules.dep", dep),
        ("modules.alias", alias),
        ("modules.builtin", builtin_text),
    ] {
        let contents = text.into_bytes();
        tree.add(
            &format!("{guest}/{name}"),
            Node::File {
                permissions: 0o644,
                contents,
            },
        );
    }
    Ok(release.clone())
}

/// Module name -> path relative to `directory`, for every `.ko` or `.ko.xz` under `sub`.
fn list_modules(
    directory: &Path,
    sub: &str,
    available: &mut BTreeMap<String, String>,
) -> Result<(), VmError> {
    let path = directory.join(sub);
    for entry in fs::read_dir(&path).map_err(VmError::io(&path))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let relative = format!("{sub}/{name}");
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            list_modules(directory, &relative, available)?;
        } else if name.ends_with(".ko") || name.ends_with(".ko.xz") {
            available.insert(modules::module_name(&name), relative);
        }
    }
    Ok(())
}

/// Decompresses one `.ko.xz` with the image's own busybox (no xz tool needed on the host).
fn unpack_module(busybox: &Path, packed: &Path, target: &Path) -> Result<(), VmError> {
    if packed.extension().is_none_or(|extension| extension != "xz") {
        fs::create_dir_all(target.parent().unwrap()).map_err(VmError::io(target))?;
        fs::copy(packed, target).map_err(VmError::io(packed))?;
        return Ok(());
    }
    let output = Command::new(busybox)
        .args(["xz", "-dc"])
        .arg(packed)
        .output()
        .map_err(VmError::io(busybox))?;
    if !output.status.success() || output.stdout.is_empty() {
        return Err(VmError::Failed(format!(
            "cannot decompress {}",
            packed.display()
        )));
    }
    fs::create_dir_all(target.parent().unwrap()).map_err(VmError::io(target))?;
    let partial = target.with_extension("partial");
    fs::write(&partial, &output.stdout).map_err(VmError::io(&partial))?;
    fs::rename(&partial, target).map_err(VmError::io(target))
}

/// Keeps the newest few images (by modification time) besides `current`.
fn prune_old_images(images: &Path, current: &str) {
    let Ok(entries) = fs::read_dir(images) else {
        return;
    };
    let mut others: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|entry| entry.file_name() != current)
        .filter_map(|entry| {
            let modified = entry.metadata().ok()?.modified().ok()?;
            Some((modified, entry.path()))
        })
        .collect();
    others.sort();
    others.reverse();
    for (_, path) in others.into_iter().skip(IMAGES_KEPT - 1) {
        let _ = fs::remove_dir_all(path);
    }
}
