//! Wrong command lines: one clear line on standard error, exit status 2, and the daemon is
//! never contacted. Also the parse of every command's arguments into their typed values.

mod common;

use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use common::tessera;
use tessera_api::{Compression, DgRef, JournalMode, RaidLevel};
use tessera_cli::args::{BenchCommand, Command, DgCommand, ParityEngine, PdCommand, VdCommand};
use tessera_cli::values::JournalChoice;
use tessera_cli::{Cli, NotRun, parse};

fn parsed(line: &str) -> Cli {
    let args = std::iter::once("tessera").chain(line.split_whitespace());
    match parse(args) {
        Ok(cli) => cli,
        Err(error) => panic!("`{line}` refused: {error:?}"),
    }
}

fn refused(line: &str) -> String {
    let args = std::iter::once("tessera").chain(line.split_whitespace());
    match parse(args) {
        Err(NotRun::Usage(message)) => message,
        other => panic!("`{line}` not refused: {other:?}"),
    }
}

#[test]
fn every_command_parses() {
    let cli = parsed("--api-socket /x/api.sock pd add /dev/nvme0n1 nbd://h:10809/e");
    assert_eq!(cli.api_socket, PathBuf::from("/x/api.sock"));
    match cli.command {
        Command::Pd(PdCommand::Add {
            paths,
            spare,
            spare_for,
            json,
        }) => {
            assert_eq!(paths, ["/dev/nvme0n1", "nbd://h:10809/e"]);
            assert!(!spare && !json && spare_for.is_none());
        }
        other => panic!("{other:?}"),
    }
    match parsed("pd add --spare-for fast /f --json").command {
        Command::Pd(PdCommand::Add {
            spare_for, json, ..
        }) => {
            assert_eq!(spare_for, Some(DgRef::Name("fast".into())));
            assert!(json);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(parsed("pd list --json").command, Command::Pd(PdCommand::List(f)) if f.json));
    assert!(matches!(
        parsed("pd describe 3").command,
        Command::Pd(PdCommand::Describe { pd: 3, .. })
    ));
    assert!(matches!(
        parsed("pd remove 3 4").command,
        Command::Pd(PdCommand::Remove { pds }) if pds == [3, 4]
    ));
    assert!(matches!(
        parsed("pd fail 2").command,
        Command::Pd(PdCommand::Fail { pd: 2, .. })
    ));
    assert!(matches!(
        parsed("pd online 2").command,
        Command::Pd(PdCommand::Online { pd: 2, .. })
    ));
    assert!(matches!(
        parsed("pd replace 2 7").command,
        Command::Pd(PdCommand::Replace { old: 2, new: 7, .. })
    ));

    match parsed("dg create --level 6 --chunk 256k --name fast --journal always_on 0 1 2 3").command
    {
        Command::Dg(DgCommand::Create {
            level,
            chunk,
            name,
            journal,
            pds,
            json,
        }) => {
            assert_eq!(level, RaidLevel::Raid6);
            assert_eq!(chunk, 262_144);
            assert_eq!(name.as_deref(), Some("fast"));
            assert_eq!(journal, Some(JournalChoice::Mode(JournalMode::AlwaysOn)));
            assert_eq!(pds, [0, 1, 2, 3]);
            assert!(!json.json);
        }
        other => panic!("{other:?}"),
    }
    match parsed("dg create --level raid10 0 1 2 3").command {
        Command::Dg(DgCommand::Create {
            level,
            chunk,
            journal,
            ..
        }) => {
            assert_eq!((level, chunk, journal), (RaidLevel::Raid10, 65_536, None));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parsed("dg create --level 5 --journal 9 0 1 2").command,
        Command::Dg(DgCommand::Create {
            journal: Some(JournalChoice::Device(9)),
            ..
        })
    ));
    assert!(matches!(
        parsed("dg list").command,
        Command::Dg(DgCommand::List(_))
    ));
    match parsed("dg describe fast --wait --poll-ms 50 --json").command {
        Command::Dg(DgCommand::Describe {
            dg,
            wait,
            poll_ms,
            json,
        }) => {
            assert_eq!(dg, DgRef::Name("fast".into()));
            assert!(wait && json.json);
            assert_eq!(poll_ms, 50);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parsed("dg delete 2 --force").command,
        Command::Dg(DgCommand::Delete {
            dg: DgRef::Id(2),
            force: true
        })
    ));
    match parsed("dg set 0 --rebuild-rate 50 --journal always_off").command {
        Command::Dg(DgCommand::Set {
            rebuild_rate,
            scrub_rate,
            journal,
            ..
        }) => {
            assert_eq!(rebuild_rate, Some(50));
            assert_eq!(scrub_rate, None);
            assert_eq!(journal, Some(JournalMode::AlwaysOff));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parsed("dg scrub 0 --repair --wait").command,
        Command::Dg(DgCommand::Scrub {
            repair: true,
            wait: true,
            poll_ms: 1000,
            ..
        })
    ));

    match parsed("vd create fast --size 1.5G --name vd9 --thin --compression zstd").command {
        Command::Vd(VdCommand::Create {
            dg,
            size,
            name,
            thin,
            compression,
            ..
        }) => {
            assert_eq!(dg, DgRef::Name("fast".into()));
            assert_eq!(size, 1_610_612_736);
            assert_eq!(name.as_deref(), Some("vd9"));
            assert!(thin);
            assert_eq!(compression, Some(Compression::Zstd));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(parsed("vd list --json").command, Command::Vd(VdCommand::List(f)) if f.json));
    assert!(matches!(
        parsed("vd describe vd0").command,
        Command::Vd(VdCommand::Describe { ref name, .. }) if name == "vd0"
    ));
    assert!(matches!(
        parsed("vd delete vd0 --force").command,
        Command::Vd(VdCommand::Delete { force: true, .. })
    ));
    assert!(matches!(parsed("info --json").command, Command::Info(f) if f.json));
    match parsed("events --since 5 --follow --json").command {
        Command::Events(args) => assert!(args.since == 5 && args.follow && args.json),
        other => panic!("{other:?}"),
    }
    match parsed("bench parity --json --kernel naive --op pq").command {
        Command::Bench(BenchCommand::Parity { json, kernel, op }) => {
            assert!(json);
            assert_eq!(
                (kernel, op),
                (vec!["naive".to_string()], vec!["pq".to_string()])
            );
        }
        other => panic!("{other:?}"),
    }
    // `gpu` names the parity engine rows.
    match parsed("bench parity --kernel gpu").command {
        Command::Bench(BenchCommand::Parity { kernel, .. }) => {
            assert_eq!(kernel, vec!["gpu".to_string()]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn serve_options_come_from_flags_then_environment_then_defaults() {
    // Flags.
    let cli = parsed(
        "serve --state-dir /s --api-socket /a.sock --nbd-socket /n.sock --nbd-listen 0.0.0.0:10809 --parity-engine gpu --http-listen 127.0.0.1:9100",
    );
    let Command::Serve(args) = cli.command else {
        panic!("not serve");
    };
    let options = tessera_cli::commands::serve_options(cli.api_socket, cli.api_token_file, args)
        .expect("options");
    assert_eq!(options.state_dir, PathBuf::from("/s"));
    assert_eq!(options.api_socket, PathBuf::from("/a.sock"));
    assert_eq!(options.nbd_socket, PathBuf::from("/n.sock"));
    assert_eq!(options.nbd_listen.as_deref(), Some("0.0.0.0:10809"));
    assert_eq!(options.parity_engine, "gpu");
    assert_eq!(options.http_listen.as_deref(), Some("127.0.0.1:9100"));
    assert_eq!(ParityEngine::Auto.name(), "auto");

    // A daemon that cannot set up its API socket exits 1, its last line naming the path (the
    // parent of the socket is a character device, so not even root can create it). Defaults
    // and the environment are shown by --help, checked below in a child process so this
    // process's environment stays untouched.
    let state = tempfile::tempdir().expect("state dir");
    let run = tessera(
        std::path::Path::new("/dev/null/api.sock"),
        &[
            "serve",
            "--state-dir",
            state.path().to_str().expect("utf-8 path"),
        ],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        run.stderr.lines().last(),
        Some(
            "tessera: serve: management API: cannot create directory /dev/null: File exists (os error 17)"
        ),
        "{run:?}"
    );

    let help = tessera(std::path::Path::new("/e/api.sock"), &["serve", "--help"]).ok();
    for expected in [
        "[env: TESSERA_STATE_DIR=]",
        "[default: /var/lib/tessera]",
        "[env: TESSERA_API_SOCKET=/e/api.sock]",
        "[default: /run/tessera/api.sock]",
        "[env: TESSERA_NBD_SOCKET=]",
        "[default: /run/tessera/nbd.sock]",
        "[env: TESSERA_NBD_LISTEN=]",
        "[env: TESSERA_PARITY_ENGINE=]",
        "[env: TESSERA_HTTP_LISTEN=]",
    ] {
        assert!(help.contains(expected), "help lacks {expected}:\n{help}");
    }
}

#[test]
fn wrong_input_is_one_line_naming_the_problem() {
    for (line, expected) in [
        (
            "dg create --level 5 --chunk 3000 0 1 2",
            "--chunk 3000 is not a power of two between 4K and 1M",
        ),
        (
            "dg create --level 5 --chunk 2M 0 1 2",
            "--chunk 2M is not a power of two between 4K and 1M",
        ),
        (
            "dg create --level 5 --chunk 64Q 0 1 2",
            "--chunk 64Q is not a size (use bytes or a K, M, G, T suffix: 4096, 64K, 10G)",
        ),
        (
            "dg create --level 7 0 1 2",
            "--level 7 is not a RAID level (0, 1, 10, 5 or 6)",
        ),
        (
            "dg create --level 5 --journal sometimes 0 1 2",
            "--journal sometimes is not a journal mode (always_on, degrade_only, always_off) or a physical drive id",
        ),
        (
            "dg create 0 1 2",
            "`tessera dg create` needs --level <LEVEL> (see `tessera dg create --help`)",
        ),
        (
            "dg create --level 5",
            "`tessera dg create` needs <PD>... (see `tessera dg create --help`)",
        ),
        (
            "dg create --level 5 0 x 2",
            "physical drive id 'x' is not a number (see `tessera pd list`)",
        ),
        (
            "dg create --level 5 --name 12 0 1 2",
            "--name name '12' is all digits, which would read as an id",
        ),
        (
            "dg set 0",
            "`tessera dg set` needs one of --rebuild-rate, --scrub-rate, --journal, --rebuild-latency-target (see `tessera dg set --help`)",
        ),
        (
            "dg set 0 --rebuild-rate 0",
            "--rebuild-rate 0 is not a percentage from 1 to 100",
        ),
        (
            "dg set 0 --rebuild-rate 101",
            "--rebuild-rate 101 is not a percentage from 1 to 100",
        ),
        (
            "dg set 0 --journal maybe",
            "--journal maybe is not a journal mode (always_on, degrade_only, always_off)",
        ),
        (
            "dg describe a/b",
            "drive group a/b: name 'a/b' contains '/'; use letters, digits, '.', '_' and '-'",
        ),
        (
            "dg describe 0 --wait --poll-ms 1",
            "--poll-ms 1 is not a number of milliseconds from 10 to 60000",
        ),
        (
            "dg frobnicate",
            "unknown command 'frobnicate' for `tessera dg` (commands: create, list, describe, delete, set, scrub, import-md)",
        ),
        (
            "dg",
            "`tessera dg` needs a command: create, list, describe, delete, set, scrub, import-md (see `tessera dg --help`)",
        ),
        (
            "",
            "`tessera` needs a command: pd, dg, vd, info, events, bench, serve, completions, man (see `tessera --help`)",
        ),
        (
            "vd create 0 --size 12Q",
            "--size 12Q is not a size (use bytes or a K, M, G, T suffix: 4096, 64K, 10G)",
        ),
        (
            "vd create 0 --size 1000",
            "--size 1000 is not a multiple of 512 bytes",
        ),
        ("vd create 0 --size 0", "--size 0 is not a positive size"),
        (
            "vd create 0",
            "`tessera vd create` needs --size <SIZE> (see `tessera vd create --help`)",
        ),
        (
            "vd create 0 --size 1G --compression lz4",
            "`tessera vd create` needs --thin (see `tessera vd create --help`)",
        ),
        (
            "vd create 0 --size 1G --thin --compression brotli",
            "--compression brotli is not a compression (none, lz4, zstd)",
        ),
        (
            "vd describe",
            "`tessera vd describe` needs <NAME> (see `tessera vd describe --help`)",
        ),
        (
            "pd describe abc",
            "physical drive id 'abc' is not a number (see `tessera pd list`)",
        ),
        (
            "pd describe 4294967296",
            "physical drive id 4294967296 is too large",
        ),
        (
            "pd add",
            "`tessera pd add` needs <PATH>... (see `tessera pd add --help`)",
        ),
        (
            "pd list --jsn",
            "unexpected argument '--jsn' for `tessera pd list` (did you mean '--json'? see `tessera pd list --help`)",
        ),
        (
            "pd replace 1",
            "`tessera pd replace` needs <NEW> (see `tessera pd replace --help`)",
        ),
        (
            "events --since x",
            "--since x is not an event sequence number",
        ),
        (
            "serve --parity-engine quantum",
            "--parity-engine quantum is not one of: cpu, gpu, auto",
        ),
        (
            "serve --nbd-listen 10809",
            "--nbd-listen 10809 is not a HOST:PORT address",
        ),
        (
            "serve --http-listen localhost",
            "--http-listen localhost is not a HOST:PORT address",
        ),
        (
            "bench parity --op pqr",
            "--op pqr is not a benchmark operation (xor, pq, pq_update, recover_1, recover_data_p, recover_data_q, recover_2data)",
        ),
    ] {
        assert_eq!(refused(line), expected, "for `tessera {line}`");
    }
}

/// Errors only the CLI's own checks see (after clap) also exit 2 before any request.
#[test]
fn wrong_input_exits_2_without_contacting_the_daemon() {
    let directory = tempfile::tempdir().unwrap();
    let socket = directory.path().join("api.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    for (args, expected) in [
        (
            &[
                "dg", "create", "--level", "5", "--chunk", "3000", "0", "1", "2",
            ][..],
            "tessera: --chunk 3000 is not a power of two between 4K and 1M",
        ),
        (
            &["dg", "create", "--level", "6", "0", "1", "2"][..],
            "tessera: raid6 needs 4 to 32 members, got 3",
        ),
        (
            &["dg", "create", "--level", "5", "0", "1", "1"][..],
            "tessera: physical drive 1 is listed twice",
        ),
        (
            &[
                "dg",
                "create",
                "--level",
                "5",
                "--journal",
                "1",
                "0",
                "1",
                "2",
            ][..],
            "tessera: physical drive 1 cannot be both a member and the journal drive",
        ),
        (
            &["pd", "add", "/a", "/b", "/a"][..],
            "tessera: /a is listed twice",
        ),
        (
            &["pd", "replace", "3", "3"][..],
            "tessera: physical drive 3 cannot replace itself",
        ),
        (
            &["pd", "remove", "3", "3"][..],
            "tessera: physical drive 3 is listed twice",
        ),
        (
            &["vd", "create", "0", "--size", "7"][..],
            "tessera: --size 7 is not a multiple of 512 bytes",
        ),
        (
            &["nonsense"][..],
            "tessera: unknown command 'nonsense' for `tessera` (commands: pd, dg, vd, info, events, bench, serve, completions, man)",
        ),
    ] {
        let line = tessera(&socket, args).fails(2);
        assert_eq!(line, expected, "for {args:?}");
    }
    let err = listener.accept().expect_err("no connection was made");
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
}

#[test]
fn help_and_version_exit_0() {
    let socket = std::path::Path::new("/nonexistent/api.sock");
    let help = tessera(socket, &["--help"]).ok();
    assert!(help.contains("Usage: tessera [OPTIONS] <COMMAND>"));
    for noun in ["pd", "dg", "vd", "info", "events", "bench", "serve"] {
        assert!(
            help.contains(&format!("  {noun} ")),
            "{noun} missing from help"
        );
    }
    let version = tessera(socket, &["--version"]).ok();
    assert_eq!(version, format!("tessera {}\n", env!("CARGO_PKG_VERSION")));
    let help = tessera(socket, &["dg", "scrub", "--help"]).ok();
    assert!(help.contains("--repair") && help.contains("--wait"));
}
