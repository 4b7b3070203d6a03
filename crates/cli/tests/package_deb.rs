//! The Debian package (`scripts/package-deb.sh`), built from the test binary without
//! compression: it holds the binary, the systemd unit, the configuration file as a conffile,
//! a manual page per command, the shell completions and the documentation.

use std::process::Command;

fn dpkg_deb(args: &[&str]) -> String {
    let output = Command::new("dpkg-deb")
        .args(args)
        .output()
        .expect("dpkg-deb");
    assert!(
        output.status.success(),
        "dpkg-deb {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn the_package_holds_what_a_user_of_a_storage_daemon_expects() {
    if Command::new("dpkg-deb").arg("--version").output().is_err() {
        eprintln!("SKIPPED: dpkg-deb is not installed");
        return;
    }
    let repository = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let built = Command::new(repository.join("scripts/package-deb.sh"))
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .arg(out.path())
        .env("TESSERA_DEB_COMPRESSION", "none")
        .output()
        .expect("package-deb.sh");
    assert!(
        built.status.success(),
        "package-deb.sh: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let deb = String::from_utf8(built.stdout).unwrap().trim().to_string();
    assert!(
        deb.ends_with(".deb") && std::path::Path::new(&deb).exists(),
        "{deb}"
    );

    let listing = dpkg_deb(&["-c", &deb]);
    let entries: Vec<(&str, &str)> = listing
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let mode = fields.next()?;
            Some((mode, fields.last()?))
        })
        .collect();
    let has = |path: &str| entries.iter().any(|(_, entry)| *entry == path);
    for path in [
        "./usr/bin/tessera",
        "./lib/systemd/system/tessera.service",
        "./etc/tessera/tessera.toml",
        "./usr/share/man/man1/tessera.1.gz",
        "./usr/share/man/man1/tessera-serve.1.gz",
        "./usr/share/man/man1/tessera-vd-set.1.gz",
        "./usr/share/bash-completion/completions/tessera",
        "./usr/share/zsh/vendor-completions/_tessera",
        "./usr/share/fish/vendor_completions.d/tessera.fish",
        "./usr/share/doc/tessera/README.md",
        "./usr/share/doc/tessera/copyright",
    ] {
        assert!(has(path), "{path} is not in the package:\n{listing}");
    }
    let mode = |path: &str| {
        entries
            .iter()
            .find(|(_, entry)| *entry == path)
            .map(|(mode, _)| *mode)
            .unwrap_or_else(|| panic!("{path} is not in the package"))
    };
    assert_eq!(mode("./usr/bin/tessera"), "-rwxr-xr-x", "the binary");
    assert_eq!(mode("./"), "drwxr-xr-x", "the package's root");
    assert_eq!(mode("./etc/tessera/tessera.toml"), "-rw-r--r--");
    // A page for every command the binary knows, no more, no fewer.
    let pages = tempfile::tempdir().unwrap();
    let written = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["man", "--dir"])
        .arg(pages.path())
        .output()
        .expect("tessera man");
    assert!(written.status.success());
    let mut expected: Vec<String> = std::fs::read_dir(pages.path())
        .unwrap()
        .map(|entry| {
            let name = entry.unwrap().file_name();
            format!("./usr/share/man/man1/{}.gz", name.to_string_lossy())
        })
        .collect();
    expected.sort();
    let mut shipped: Vec<String> = entries
        .iter()
        .map(|(_, entry)| entry.to_string())
        .filter(|entry| entry.starts_with("./usr/share/man/man1/") && entry.ends_with(".gz"))
        .collect();
    shipped.sort();
    assert_eq!(shipped, expected);
    assert!(
        entries.iter().all(|(_, entry)| entry.starts_with("./etc/")
            || entry.starts_with("./usr/")
            || entry.starts_with("./lib/")
            || *entry == "./"),
        "files outside /etc, /usr and /lib:\n{listing}"
    );

    let info = dpkg_deb(&["-I", &deb]);
    for field in [
        "Package: tessera",
        "Architecture: ",
        "Depends: libc6 (>= 2.",
        "Section: admin",
    ] {
        assert!(
            info.contains(field),
            "no {field:?} in the control file:\n{info}"
        );
    }
    for script in ["postinst", "prerm", "postrm"] {
        let text = dpkg_deb(&["-I", &deb, script]);
        assert!(text.starts_with("#!/bin/sh\n"), "{script}: {text}");
        assert!(text.contains("tessera.service") || text.contains("daemon-reload"));
    }
    let conffiles = dpkg_deb(&["-I", &deb, "conffiles"]);
    assert_eq!(conffiles.trim(), "/etc/tessera/tessera.toml");
    // The packaged configuration file is the repository's.
    let extracted = tempfile::tempdir().unwrap();
    dpkg_deb(&["-x", &deb, &extracted.path().display().to_string()]);
    assert_eq!(
        std::fs::read(extracted.path().join("etc/tessera/tessera.toml")).unwrap(),
        std::fs::read(repository.join("packaging/tessera.toml")).unwrap()
    );
    assert_eq!(
        std::fs::read(extracted.path().join("lib/systemd/system/tessera.service")).unwrap(),
        std::fs::read(repository.join("packaging/tessera.service")).unwrap()
    );
    // The packaged binary runs, and carries no debug information.
    let packaged = extracted.path().join("usr/bin/tessera");
    let version = Command::new(&packaged)
        .arg("--version")
        .output()
        .expect("the packaged binary runs");
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("tessera {}", env!("CARGO_PKG_VERSION"))
    );
    let sections = Command::new("objdump")
        .arg("-h")
        .arg(&packaged)
        .output()
        .expect("objdump (binutils)");
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(sections.contains(".text"), "{sections}");
    assert!(
        !sections.contains(".debug_info"),
        "not stripped:\n{sections}"
    );
}
