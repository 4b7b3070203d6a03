//! Shell completions and manual pages come from the command-line definition: they name every
//! command, and the shells and `groff` accept them.

use std::process::Command;

const TOP_LEVEL: [&str; 8] = ["pd", "dg", "vd", "info", "events", "bench", "serve", "man"];

fn tessera(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("tessera");
    assert!(
        output.status.success(),
        "tessera {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|output| output.status.success())
}

#[test]
fn completion_scripts_name_the_commands_and_parse() {
    let bash = tessera(&["completions", "bash"]);
    for command in TOP_LEVEL {
        assert!(bash.contains(command), "bash completion lacks {command}");
    }
    assert!(bash.contains("--tls-required") && bash.contains("--rebuild-rate"));
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), &bash).unwrap();
    let check = Command::new("bash")
        .arg("-n")
        .arg(script.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "bash -n refused the completion script: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(tessera(&["completions", shell]).contains("vd"), "{shell}");
    }
}

#[test]
fn manual_pages_cover_every_command_and_format_cleanly() {
    let page = tessera(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH tessera 1"),
        "{page}"
    );
    for command in TOP_LEVEL {
        assert!(page.contains(command), "tessera(1) lacks {command}");
    }
    let dir = tempfile::tempdir().unwrap();
    let line = tessera(&["man", "--dir", &dir.path().display().to_string()]);
    assert!(line.contains("manual pages written"), "{line}");
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for expected in [
        "tessera.1",
        "tessera-vd-set.1",
        "tessera-dg-scrub.1",
        "tessera-pd-add.1",
    ] {
        assert!(
            pages.iter().any(|page| page == expected),
            "{expected} missing: {pages:?}"
        );
    }
    if !have("groff") {
        eprintln!("SKIPPED (formatting check): groff is not installed");
        return;
    }
    for page in &pages {
        let output = Command::new("groff")
            .args(["-man", "-z", "-ww"])
            .arg(dir.path().join(page))
            .output()
            .unwrap();
        assert!(
            output.status.success() && output.stderr.is_empty(),
            "groff warns about {page}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
