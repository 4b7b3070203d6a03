//! Shell completions and manual pages come from the command-line definition: they name every
//! command, and the shells and `groff` accept them.

use std::process::Command;

const TOP_LEVEL: [&str; 9] = [
    "pd",
    "dg",
    "vd",
    "info",
    "events",
    "bench",
    "serve",
    "completions",
    "man",
];

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
    // Bash itself completes with the script: what an operator sees after pressing Tab.
    let complete = |line: &str| bash_completions(script.path(), line);
    let top = complete("tessera ");
    for command in TOP_LEVEL {
        assert!(top.iter().any(|word| word == command), "{command}: {top:?}");
    }
    assert_eq!(complete("tessera dg sc"), ["scrub"]);
    assert_eq!(complete("tessera vd set db --tls-r"), ["--tls-required"]);
    assert!(complete("tessera serve --event-hook-s").contains(&"--event-hook-severity".into()));
    assert!(complete("tessera completions ").contains(&"fish".into()));
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(tessera(&["completions", shell]).contains("vd"), "{shell}");
    }
}

/// The words bash offers for the last word of `line`, by the completion function in `script`.
fn bash_completions(script: &std::path::Path, line: &str) -> Vec<String> {
    // COMP_WORDS as bash splits the line (a trailing space starts an empty word); the function
    // takes (command, current word, previous word).
    let program = r#"
        source "$1"
        read -ra COMP_WORDS <<< "$2"
        [[ "$2" == *" " ]] && COMP_WORDS+=("")
        COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
        COMP_LINE="$2"
        COMP_POINT=${#2}
        _tessera tessera "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let output = Command::new("bash")
        .args(["-c", program, "complete"])
        .arg(script)
        .arg(line)
        .output()
        .expect("bash");
    assert!(
        output.status.success(),
        "completing {line:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("UTF-8")
        .lines()
        .filter(|word| !word.is_empty())
        .map(str::to_string)
        .collect()
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
    // A subcommand's synopsis is what to type; the daemon's page says where its files are.
    let read = |page: &str| std::fs::read_to_string(dir.path().join(page)).unwrap();
    assert!(read("tessera-pd-add.1").contains("\\fBtessera pd add\\fR"));
    let serve = read("tessera-serve.1");
    assert!(serve.contains(".SH FILES") && serve.contains("/etc/tessera/tessera.toml"));
    assert!(!pages.iter().any(|page| page.contains("help")), "{pages:?}");
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
    if !have("man") {
        eprintln!("SKIPPED (man check): man is not installed");
        return;
    }
    // As `man` renders it for a reader: no warnings, and the commands are in the text.
    let output = Command::new("man")
        .args(["--warnings", "-l"])
        .arg(dir.path().join("tessera.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.is_empty(),
        "man warns: {stderr}"
    );
    let text = String::from_utf8_lossy(&output.stdout);
    for command in TOP_LEVEL {
        assert!(
            text.contains(&format!("tessera-{command}(1)")),
            "the rendered page does not point to tessera-{command}(1)"
        );
    }
}
