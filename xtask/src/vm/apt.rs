//! Debian packages through the host's own apt, with a private configuration (sources, package
//! lists, status) under the VM cache: the host's sources and package state are never touched.
//! The mirror is the one the host already uses for its Debian release.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use super::VmError;
use super::spec::{DEBIAN_SUITE, KERNEL_METAPACKAGE, KERNEL_SUITE};

/// Package lists older than this are refreshed before resolving versions.
const LISTS_MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

const DEFAULT_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// One `.deb` file: what apt resolved a package name to.
#[derive(Clone, Debug)]
pub struct DebFile {
    pub package: String,
    pub version: String,
    pub file_name: String,
    pub size_bytes: u64,
}

pub struct Apt {
    directory: PathBuf,
}

impl Apt {
    /// Prepares the private configuration in `directory`.
    pub fn open(directory: &Path) -> Result<Apt, VmError> {
        let apt = Apt {
            directory: directory.to_path_buf(),
        };
        for sub in ["lists/partial", "sources.list.d", "cache"] {
            fs::create_dir_all(directory.join(sub)).map_err(VmError::io(directory))?;
        }
        let status = directory.join("status");
        if !status.exists() {
            fs::write(&status, "").map_err(VmError::io(&status))?;
        }
        let (mirror, keyring) = host_mirror()?;
        // Only the Packages index: the host's apt.conf.d may ask for more (DEP-11 metadata).
        let options = format!("[target=Packages signed-by={keyring}]");
        let sources = format!(
            "deb {options} {mirror} {DEBIAN_SUITE} main\ndeb {options} {mirror} {KERNEL_SUITE} main\n"
        );
        let path = directory.join("sources.list");
        if fs::read_to_string(&path).ok().as_deref() != Some(sources.as_str()) {
            fs::write(&path, sources).map_err(VmError::io(&path))?;
            // New sources: the old lists do not describe them.
            let _ = fs::remove_file(apt.stamp());
        }
        Ok(apt)
    }

    /// Fetches the package lists when they are missing, older than a day, or `force` is set.
    /// A failed refresh with lists already present only warns: the cached image still works.
    pub fn refresh_lists(&self, force: bool) -> Result<(), VmError> {
        let age = fs::metadata(self.stamp())
            .and_then(|metadata| metadata.modified())
            .ok()
            .and_then(|modified| SystemTime::now().duration_since(modified).ok());
        let fresh = matches!(age, Some(age) if age < LISTS_MAX_AGE);
        if fresh && !force {
            return Ok(());
        }
        eprintln!("vm: updating the Debian package lists ({DEBIAN_SUITE}, {KERNEL_SUITE})");
        match self.run("apt-get", &["update", "-qq"]) {
            Ok(_) => {
                let stamp = self.stamp();
                fs::write(&stamp, "").map_err(VmError::io(&stamp))
            }
            Err(error) if age.is_some() => {
                eprintln!("vm: warning: using the old package lists: {error}");
                Ok(())
            }
            Err(error) => Err(VmError::Unavailable(format!(
                "cannot fetch the Debian package lists: {error}"
            ))),
        }
    }

    /// Resolves the kernel, the tool packages and the library packages they depend on, in that
    /// order. Three apt runs take seconds, so the answer is remembered until the package lists
    /// change: a run with a cached image then does not call apt at all.
    pub fn image_packages(&self, tools: &[&str]) -> Result<Vec<DebFile>, VmError> {
        let lists_modified = fs::metadata(self.stamp())
            .and_then(|metadata| metadata.modified())
            .map_err(VmError::io(&self.stamp()))?;
        let header = format!(
            "lists {:?} kernel {KERNEL_METAPACKAGE}/{KERNEL_SUITE} tools {}",
            lists_modified,
            tools.join(" ")
        );
        let remembered = self.directory.join("resolved.txt");
        if let Ok(text) = fs::read_to_string(&remembered) {
            let mut lines = text.lines();
            if lines.next() == Some(header.as_str()) {
                let files: Option<Vec<DebFile>> = lines
                    .map(|line| {
                        let fields: Vec<&str> = line.split(' ').collect();
                        parse_deb_file_name(fields.first()?, fields.get(1)?)
                    })
                    .collect();
                if let Some(files) = files.filter(|files| !files.is_empty()) {
                    return Ok(files);
                }
            }
        }
        let mut specs = vec![self.kernel_package()?];
        specs.extend(tools.iter().map(|name| name.to_string()));
        specs.extend(self.library_packages(tools)?);
        let files = self.resolve(&specs)?;
        let mut text = header + "\n";
        for file in &files {
            text.push_str(&format!("{} {}\n", file.file_name, file.size_bytes));
        }
        fs::write(&remembered, text).map_err(VmError::io(&remembered))?;
        Ok(files)
    }

    /// The versioned kernel image package behind the backports metapackage, as `name=version`.
    fn kernel_package(&self) -> Result<String, VmError> {
        let spec = format!("{KERNEL_METAPACKAGE}/{KERNEL_SUITE}");
        let text = self.run("apt-cache", &["show", &spec])?;
        let depends = text
            .lines()
            .find_map(|line| line.strip_prefix("Depends: "))
            .ok_or_else(|| VmError::Failed(format!("{spec} has no Depends line")))?;
        // "linux-image-6.12.95+deb12-cloud-amd64 (= 6.12.95-1~bpo12+1)"
        let first = depends.split(',').next().unwrap().trim();
        let (name, version) = first
            .strip_suffix(')')
            .and_then(|rest| rest.split_once(" (= "))
            .ok_or_else(|| VmError::Failed(format!("unexpected kernel dependency: {first}")))?;
        Ok(format!("{name}={version}"))
    }

    /// Every library package in the dependency closure of `packages` (Depends and Pre-Depends,
    /// no Recommends): the pool the image builder takes shared libraries from.
    fn library_packages(&self, packages: &[&str]) -> Result<Vec<String>, VmError> {
        let mut arguments = vec![
            "depends",
            "--recurse",
            "--no-recommends",
            "--no-suggests",
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
        ];
        arguments.extend_from_slice(packages);
        let text = self.run("apt-cache", &arguments)?;
        let mut libraries: Vec<String> = text
            .lines()
            .filter(|line| !line.starts_with(' ') && !line.starts_with('<'))
            .filter(|name| name.starts_with("lib") || name.starts_with("zlib"))
            .filter(|name| !name.ends_with("-perl"))
            .map(str::to_string)
            .collect();
        libraries.sort();
        libraries.dedup();
        Ok(libraries)
    }

    /// Resolves package specifications (`name`, `name=version`, `name/suite`) to files, in
    /// the order of `specs` (apt prints them in its own order).
    fn resolve(&self, specs: &[String]) -> Result<Vec<DebFile>, VmError> {
        let mut arguments = vec!["download", "--print-uris", "-qq"];
        arguments.extend(specs.iter().map(String::as_str));
        let text = self.run("apt-get", &arguments)?;
        // 'URI' file_name size SHA256:...
        let mut files = Vec::new();
        for line in text.lines().filter(|line| line.starts_with('\'')) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let parsed = (fields.len() >= 3)
                .then(|| parse_deb_file_name(fields[1], fields[2]))
                .flatten();
            files.push(parsed.ok_or_else(|| {
                VmError::Failed(format!("unexpected line from apt-get download: {line}"))
            })?);
        }
        specs
            .iter()
            .map(|spec| {
                let name = spec.split(['=', '/']).next().unwrap();
                files
                    .iter()
                    .find(|file| file.package == name)
                    .cloned()
                    .ok_or_else(|| VmError::Failed(format!("apt did not resolve {spec}")))
            })
            .collect()
    }

    /// Downloads the files not already in `directory` (the download cache).
    pub fn download(&self, files: &[DebFile], directory: &Path) -> Result<(), VmError> {
        let missing: Vec<String> = files
            .iter()
            .filter(|file| {
                let size = fs::metadata(directory.join(&file.file_name)).map(|m| m.len());
                size.ok() != Some(file.size_bytes)
            })
            .map(|file| format!("{}={}", file.package, file.version))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        fs::create_dir_all(directory).map_err(VmError::io(directory))?;
        eprintln!("vm: downloading {} Debian packages", missing.len());
        let mut arguments = vec!["download", "-qq"];
        arguments.extend(missing.iter().map(String::as_str));
        let mut command = self.command("apt-get");
        command.args(&arguments).current_dir(directory);
        run_command(command, "apt-get download").map_err(|error| {
            VmError::Unavailable(format!("cannot download Debian packages: {error}"))
        })?;
        Ok(())
    }

    fn stamp(&self) -> PathBuf {
        self.directory.join("lists-updated")
    }

    fn command(&self, program: &str) -> Command {
        let directory = self.directory.display();
        let mut command = Command::new(program);
        for option in [
            format!("Dir::Etc::sourcelist={directory}/sources.list"),
            format!("Dir::Etc::sourceparts={directory}/sources.list.d"),
            format!("Dir::State::Lists={directory}/lists"),
            format!("Dir::State::status={directory}/status"),
            format!("Dir::Cache={directory}/cache"),
            // The host may disable these caches; without them every apt run re-parses the
            // package lists (about a second each).
            "Dir::Cache::pkgcache=pkgcache.bin".to_string(),
            "Dir::Cache::srcpkgcache=srcpkgcache.bin".to_string(),
            // Downloads go to a directory of ours that the unprivileged _apt user cannot enter.
            "APT::Sandbox::User=root".to_string(),
        ] {
            command.arg("-o").arg(option);
        }
        command
    }

    fn run(&self, program: &str, arguments: &[&str]) -> Result<String, VmError> {
        let mut command = self.command(program);
        command.args(arguments);
        run_command(command, program).map_err(VmError::Unavailable)
    }
}

/// Runs a command and returns its standard output, or a message with its standard error.
fn run_command(mut command: Command, name: &str) -> Result<String, String> {
    let output = command
        .output()
        .map_err(|error| format!("cannot run {name}: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "{name} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// "busybox-static_1%3a1.35.0-4+deb12u1+b1_amd64.deb" -> package, version "1:1.35.0-4+deb12u1+b1".
fn parse_deb_file_name(file_name: &str, size: &str) -> Option<DebFile> {
    let stem = file_name.strip_suffix(".deb")?;
    let mut parts = stem.split('_');
    let (package, version, _architecture) = (parts.next()?, parts.next()?, parts.next()?);
    Some(DebFile {
        package: package.to_string(),
        version: version.replace("%3a", ":"),
        file_name: file_name.to_string(),
        size_bytes: size.parse().ok()?,
    })
}

/// The mirror and keyring of the host's source for the Debian release the image uses.
/// `TESSERA_VM_DEBIAN_MIRROR` overrides the mirror.
fn host_mirror() -> Result<(String, String), VmError> {
    if let Ok(mirror) = std::env::var("TESSERA_VM_DEBIAN_MIRROR") {
        return Ok((mirror, DEFAULT_KEYRING.to_string()));
    }
    let mut texts = Vec::new();
    if let Ok(text) = fs::read_to_string("/etc/apt/sources.list") {
        texts.push(("list", text));
    }
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
        paths.sort();
        for path in paths {
            let kind = match path.extension().and_then(|extension| extension.to_str()) {
                Some("list") => "list",
                Some("sources") => "sources",
                _ => continue,
            };
            if let Ok(text) = fs::read_to_string(&path) {
                texts.push((kind, text));
            }
        }
    }
    for (kind, text) in &texts {
        let found = if *kind == "list" {
            find_in_one_line_sources(text)
        } else {
            find_in_deb822_sources(text)
        };
        if let Some((mirror, keyring)) = found {
            return Ok((
                mirror,
                keyring.unwrap_or_else(|| DEFAULT_KEYRING.to_string()),
            ));
        }
    }
    Err(VmError::Unavailable(format!(
        "no apt source for Debian {DEBIAN_SUITE} on this host; set TESSERA_VM_DEBIAN_MIRROR"
    )))
}

/// `deb [signed-by=K] URI bookworm main ...`
fn find_in_one_line_sources(text: &str) -> Option<(String, Option<String>)> {
    for line in text.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("deb ") else {
            continue;
        };
        let (options, rest) = match rest.trim_start().strip_prefix('[') {
            Some(bracketed) => bracketed.split_once(']')?,
            None => ("", rest),
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() >= 3 && fields[1] == DEBIAN_SUITE && fields[2..].contains(&"main") {
            let keyring = options
                .split_whitespace()
                .find_map(|option| option.strip_prefix("signed-by="))
                .map(str::to_string);
            return Some((fields[0].to_string(), keyring));
        }
    }
    None
}

/// deb822 paragraphs: `Types: deb`, `URIs:`, `Suites:`, `Components:`, `Signed-By:`.
fn find_in_deb822_sources(text: &str) -> Option<(String, Option<String>)> {
    for paragraph in text.split("\n\n") {
        let field = |name: &str| {
            paragraph
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(|value| value.trim().to_string())
        };
        let has = |name: &str, word: &str| {
            field(name).is_some_and(|value| value.split_whitespace().any(|item| item == word))
        };
        if has("Types:", "deb")
            && has("Suites:", DEBIAN_SUITE)
            && has("Components:", "main")
            && !has("Enabled:", "no")
        {
            let mirror = field("URIs:")?.split_whitespace().next()?.to_string();
            let keyring = field("Signed-By:").filter(|value| value.starts_with('/'));
            return Some((mirror, keyring));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_deb_file_names() {
        let file =
            parse_deb_file_name("busybox-static_1%3a1.35.0-4+deb12u1+b1_amd64.deb", "928188")
                .unwrap();
        assert_eq!(file.package, "busybox-static");
        assert_eq!(file.version, "1:1.35.0-4+deb12u1+b1");
        assert_eq!(file.size_bytes, 928188);
        assert!(parse_deb_file_name("not-a-deb.txt", "1").is_none());
    }

    #[test]
    fn finds_the_mirror_in_both_source_formats() {
        let one_line = "# comment\ndeb http://m.example/debian-security bookworm-security main\n\
                        deb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main contrib\n";
        assert_eq!(
            find_in_one_line_sources(one_line),
            Some((
                "http://m.example/debian".to_string(),
                Some("/k.gpg".to_string())
            ))
        );
        let deb822 = "Types: deb\nURIs: http://m.example/debian-security\nSuites: bookworm-security\n\
                      Components: main\n\nTypes: deb\nURIs: http://m.example/debian\n\
                      Suites: bookworm bookworm-updates\nComponents: main\n\
                      Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n";
        assert_eq!(
            find_in_deb822_sources(deb822),
            Some((
                "http://m.example/debian".to_string(),
                Some("/usr/share/keyrings/debian-archive-keyring.gpg".to_string())
            ))
        );
        assert_eq!(find_in_deb822_sources("Types: deb\nSuites: trixie\n"), None);
    }
}
