//! The file tree of an initramfs layer, kept in memory (file contents stay on disk until the
//! archive is written) and written out as one cpio archive in a deterministic order.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::cpio::CpioWriter;

pub enum Node {
    Directory {
        permissions: u32,
    },
    /// A file copied from the host, keeping its permission bits.
    HostFile(PathBuf),
    File {
        permissions: u32,
        contents: Vec<u8>,
    },
    Symlink(String),
    CharacterDevice {
        major: u32,
        minor: u32,
    },
}

/// Paths are relative (`usr/bin/fio`). The image is "usr-merged": `bin`, `sbin`, `lib` and
/// `lib64` are symbolic links into `usr`, so every path added goes through [`merged`].
#[derive(Default)]
pub struct Tree {
    nodes: BTreeMap<String, Node>,
}

/// Debian 12 packages still ship files in `/bin`, `/lib`...; place them under `/usr`.
pub fn merged(path: &str) -> String {
    let path = path.trim_start_matches("./").trim_start_matches('/');
    for top in ["bin/", "sbin/", "lib/", "lib64/"] {
        if path.starts_with(top) {
            return format!("usr/{path}");
        }
    }
    path.to_string()
}

impl Tree {
    /// Adds a node, creating missing parent directories. Adding a path twice keeps the first
    /// node, so what is added first (real programs) wins over later fallbacks (busybox applets).
    pub fn add(&mut self, path: &str, node: Node) {
        assert!(!path.is_empty() && !path.starts_with('/') && !path.ends_with('/'));
        let mut parent = String::new();
        for component in path.split('/').take(path.split('/').count() - 1) {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(component);
            match self.nodes.get(&parent) {
                None => {
                    let directory = Node::Directory { permissions: 0o755 };
                    self.nodes.insert(parent.clone(), directory);
                }
                Some(Node::Directory { .. }) => {}
                Some(_) => panic!("{path}: parent {parent} is not a directory"),
            }
        }
        self.nodes.entry(path.to_string()).or_insert(node);
    }

    /// One line per entry, for the image's contents listing.
    pub fn listing(&self) -> String {
        let mut text = String::new();
        for (path, node) in &self.nodes {
            let line = match node {
                Node::Directory { .. } => format!("{path}/\n"),
                Node::HostFile(source) => format!("{path} <- {}\n", source.display()),
                Node::File { contents, .. } => format!("{path} ({} bytes)\n", contents.len()),
                Node::Symlink(target) => format!("{path} -> {target}\n"),
                Node::CharacterDevice { major, minor } => format!("{path} c {major}:{minor}\n"),
            };
            text.push_str(&line);
        }
        text
    }

    /// Writes the tree as a newc archive; parents sort before their children.
    pub fn write_cpio<W: Write>(&self, output: W) -> io::Result<W> {
        let mut writer = CpioWriter::new(output);
        for (path, node) in &self.nodes {
            match node {
                Node::Directory { permissions } => writer.directory(path, *permissions)?,
                Node::HostFile(source) => {
                    let contents = fs::read(source).map_err(|error| {
                        io::Error::new(error.kind(), format!("{}: {error}", source.display()))
                    })?;
                    let permissions = fs::metadata(source)?.permissions().mode() & 0o7777;
                    writer.file(path, permissions, &contents)?;
                }
                Node::File {
                    permissions,
                    contents,
                } => writer.file(path, *permissions, contents)?,
                Node::Symlink(target) => writer.symlink(path, target)?,
                Node::CharacterDevice { major, minor } => {
                    writer.character_device(path, *major, *minor)?
                }
            }
        }
        writer.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_the_top_level_directories_into_usr() {
        assert_eq!(merged("./sbin/mdadm"), "usr/sbin/mdadm");
        assert_eq!(
            merged("/lib64/ld-linux-x86-64.so.2"),
            "usr/lib64/ld-linux-x86-64.so.2"
        );
        assert_eq!(merged("usr/bin/fio"), "usr/bin/fio");
        assert_eq!(merged("etc/mke2fs.conf"), "etc/mke2fs.conf");
        assert_eq!(merged("library/x"), "library/x");
    }

    #[test]
    fn creates_parents_and_keeps_the_first_node() {
        let mut tree = Tree::default();
        tree.add("usr/bin/sh", Node::Symlink("busybox".to_string()));
        tree.add("usr/bin/sh", Node::Symlink("dash".to_string()));
        assert_eq!(tree.listing(), "usr/\nusr/bin/\nusr/bin/sh -> busybox\n");
    }

    #[test]
    #[should_panic(expected = "is not a directory")]
    fn refuses_a_path_through_a_symbolic_link() {
        let mut tree = Tree::default();
        tree.add("lib", Node::Symlink("usr/lib".to_string()));
        tree.add("lib/modules", Node::Directory { permissions: 0o755 });
    }
}
