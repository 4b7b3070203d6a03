//! The per-run layer appended to the cached image: the test script and its arguments, the
//! modules to load, host binaries (with any host libraries the image lacks) and extra files.
//! Host binaries change on every build, so they live here and never force an image rebuild;
//! the layer is small and uncompressed, and writing it takes milliseconds.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::VmError;
use super::libraries::{self, GUEST_LIBRARY_DIRECTORY, LibraryPool};
use super::tree::{Node, Tree, merged};

/// Where the init script finds its instructions.
pub const SCRIPT_PATH: &str = "tessera/test.sh";
pub const CONFIG_PATH: &str = "tessera/run.conf";

pub struct Payload<'a> {
    pub script: &'a Path,
    pub arguments: &'a [String],
    pub modules: &'a [String],
    /// Host executables, copied to /usr/local/bin.
    pub binaries: &'a [PathBuf],
    /// (host file, guest path) pairs.
    pub files: &'a [(PathBuf, String)],
}

/// Builds the layer's tree. `image_libraries` are the library names the image already has.
pub fn tree(payload: &Payload<'_>, image_libraries: &BTreeSet<String>) -> Result<Tree, VmError> {
    let mut tree = Tree::default();
    let script = fs::read(payload.script).map_err(VmError::io(payload.script))?;
    tree.add(
        SCRIPT_PATH,
        Node::File {
            permissions: 0o755,
            contents: script,
        },
    );
    let mut config = format!(
        "TESSERA_MODULES={}\nset --",
        shell_quote(&payload.modules.join(" "))
    );
    for argument in payload.arguments {
        config.push(' ');
        config.push_str(&shell_quote(argument));
    }
    config.push('\n');
    tree.add(
        CONFIG_PATH,
        Node::File {
            permissions: 0o644,
            contents: config.into_bytes(),
        },
    );

    for binary in payload.binaries {
        let name = binary
            .file_name()
            .ok_or_else(|| VmError::Usage(format!("not a file: {}", binary.display())))?;
        if !binary.is_file() {
            return Err(VmError::Usage(format!(
                "no such binary: {}",
                binary.display()
            )));
        }
        let guest = format!("usr/local/bin/{}", name.to_string_lossy());
        tree.add(&guest, Node::HostFile(binary.clone()));
    }
    // The host is Debian too, so its libraries fit the image's C library.
    let host = LibraryPool::index(&[PathBuf::from("/")], false);
    let closure =
        libraries::closure(payload.binaries, &host, image_libraries).map_err(VmError::Failed)?;
    for (name, file) in closure.libraries {
        tree.add(
            &format!("{GUEST_LIBRARY_DIRECTORY}/{name}"),
            Node::HostFile(file),
        );
    }
    for interpreter in closure.interpreters {
        let name = interpreter.rsplit('/').next().unwrap_or(&interpreter);
        if !image_libraries.contains(name) {
            return Err(VmError::Failed(format!(
                "the image has no program interpreter {interpreter}"
            )));
        }
    }
    for (source, guest) in payload.files {
        if !source.is_file() {
            return Err(VmError::Usage(format!(
                "no such file: {}",
                source.display()
            )));
        }
        tree.add(&merged(guest), Node::HostFile(source.clone()));
    }
    Ok(tree)
}

/// Single-quotes a word for the guest's shell.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_words_for_the_shell() {
        assert_eq!(shell_quote("plain"), "'plain'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
