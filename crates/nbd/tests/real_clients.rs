//! The codecs against real NBD clients (libnbd's nbdinfo and nbdcopy, qemu-img, fio's nbd
//! engine) through the test harness, and our client against an independent server
//! (`nbdkit memory`). Each test skips with a message when its tool is missing; the project's
//! setup script installs them (libnbd-bin, qemu-utils, fio, nbdkit).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tessera_nbd::testing::{TestServer, tool_available};
use tessera_nbd::{Client, ExportFeatures, ExportInfo, NbdUri};

const MIB: u64 = 1 << 20;

fn skip_without(tool: &str) -> bool {
    if tool_available(tool) {
        return false;
    }
    eprintln!("SKIPPED: `{tool}` is not installed (the setup script installs it)");
    true
}

fn run(command: &mut Command) -> Output {
    let output = command.stdin(Stdio::null()).output().expect("tool runs");
    assert!(
        output.status.success(),
        "{command:?} failed: {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn export(name: &str, size_bytes: u64) -> ExportInfo {
    let mut export = ExportInfo::new(name, size_bytes);
    export.description = Some(format!("test export {name}"));
    export.features = ExportFeatures {
        block_status: true,
        multi_conn: true,
        cache: true,
        ..ExportFeatures::TYPICAL
    };
    export
}

/// Deterministic bytes with zero 64 KiB stretches, so holes appear in structured reads.
fn pattern(size_bytes: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut bytes = vec![0u8; size_bytes];
    for (index, chunk) in bytes.chunks_mut(8).enumerate() {
        if (index * 8 / 65536) % 3 == 1 {
            continue;
        }
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let word = state.to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    bytes
}

/// The first value of `field` in JSON text (tools differ in spacing around the colon).
fn json_field<'a>(json: &'a str, field: &str) -> &'a str {
    let key = format!("\"{field}\"");
    let start = json
        .find(&key)
        .unwrap_or_else(|| panic!("{field} missing from {json}"))
        + key.len();
    let rest = json[start..]
        .trim_start()
        .strip_prefix(':')
        .expect("a colon after the key")
        .trim_start();
    let end = rest.find([',', '\n', '}']).unwrap();
    rest[..end].trim()
}

#[test]
fn nbdinfo_shows_the_export_and_its_block_sizes() {
    if skip_without("nbdinfo") {
        return;
    }
    let server = TestServer::start(vec![export("vd0", 64 * MIB)]).unwrap();
    for uri in [server.unix_uri("vd0"), server.tcp_uri("vd0")] {
        let output = run(Command::new("nbdinfo").arg("--json").arg(uri.to_string()));
        let json = String::from_utf8(output.stdout).unwrap();
        assert_eq!(
            json_field(&json, "export-size"),
            (64 * MIB).to_string(),
            "{json}"
        );
        assert_eq!(json_field(&json, "block_size_minimum"), "512", "{json}");
        assert_eq!(json_field(&json, "block_size_preferred"), "4096", "{json}");
        assert_eq!(
            json_field(&json, "block_size_maximum"),
            "33554432",
            "{json}"
        );
        assert_eq!(json_field(&json, "is_read_only"), "false", "{json}");
        assert_eq!(json_field(&json, "can_flush"), "true", "{json}");
        assert_eq!(json_field(&json, "can_fua"), "true", "{json}");
        assert_eq!(json_field(&json, "can_trim"), "true", "{json}");
        assert_eq!(json_field(&json, "can_zero"), "true", "{json}");
        assert_eq!(json_field(&json, "can_fast_zero"), "true", "{json}");
        assert_eq!(json_field(&json, "can_multi_conn"), "true", "{json}");
        assert_eq!(json_field(&json, "can_df"), "true", "{json}");
        assert_eq!(
            json_field(&json, "description"),
            "\"test export vd0\"",
            "{json}"
        );
        assert!(json.contains("base:allocation"), "{json}");
    }
}

#[test]
fn nbdinfo_lists_every_export() {
    if skip_without("nbdinfo") {
        return;
    }
    let server = TestServer::start(vec![export("vd0", 4 * MIB), export("vd1", 8 * MIB)]).unwrap();
    let socket = server.socket_path().display().to_string();
    let output = run(Command::new("nbdinfo")
        .arg("--list")
        .arg("--json")
        .arg(format!("nbd+unix:///?socket={socket}")));
    let json = String::from_utf8(output.stdout).unwrap();
    assert!(json.contains("\"export-name\": \"vd0\""), "{json}");
    assert!(json.contains("\"export-name\": \"vd1\""), "{json}");
    assert!(json.contains(&(8 * MIB).to_string()), "{json}");
}

#[test]
fn qemu_img_convert_and_compare_round_trip() {
    if skip_without("qemu-img") {
        return;
    }
    let server = TestServer::start(vec![export("vd0", 16 * MIB)]).unwrap();
    let directory = scratch_directory("qemu");
    let source = directory.join("source.raw");
    std::fs::write(&source, pattern(16 * MIB as usize, 7)).unwrap();
    let uri = server.unix_uri("vd0").to_string();

    let info = run(Command::new("qemu-img").args(["info", "--output=json", &uri]));
    let info = String::from_utf8(info.stdout).unwrap();
    assert_eq!(
        json_field(&info, "virtual-size"),
        (16 * MIB).to_string(),
        "{info}"
    );

    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&source)
        .arg(&uri));
    run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&source)
        .arg(&uri));
    // The bytes landed where they belong, checked without going through NBD.
    assert!(*server.disk("vd0").lock().unwrap() == std::fs::read(&source).unwrap());

    // And back out again through structured reads with holes.
    let copy = directory.join("copy.raw");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(&uri)
        .arg(&copy));
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&source).unwrap());
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn nbdcopy_round_trip() {
    if skip_without("nbdcopy") {
        return;
    }
    let server = TestServer::start(vec![export("vd0", 16 * MIB)]).unwrap();
    let directory = scratch_directory("nbdcopy");
    let source = directory.join("source.raw");
    let copy = directory.join("copy.raw");
    std::fs::write(&source, pattern(16 * MIB as usize, 11)).unwrap();
    let uri = server.tcp_uri("vd0").to_string();
    run(Command::new("nbdcopy").arg(&source).arg(&uri));
    run(Command::new("nbdcopy").arg(&uri).arg(&copy));
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&source).unwrap());
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn fio_nbd_engine_verifies_random_writes() {
    if skip_without("fio") {
        return;
    }
    let server = TestServer::start(vec![export("vd0", 32 * MIB)]).unwrap();
    let directory = scratch_directory("fio");
    let output_file = directory.join("fio.json");
    let uri = server.unix_uri("vd0").to_string();
    let output = Command::new("fio")
        .args([
            "--name=verify",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randrw",
            "--bs=4k",
            "--iodepth=8",
            "--size=32m",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--output-format=json",
        ])
        .arg(format!("--output={}", output_file.display()))
        // fio leaves a verify state file in its working directory.
        .current_dir(&directory)
        .stdin(Stdio::null())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(error) => panic!("fio did not run: {error}"),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() && stderr.contains("engine nbd not loadable") {
        eprintln!("SKIPPED: fio has no nbd engine here ({stderr})");
        return;
    }
    assert!(output.status.success(), "fio failed: {stderr}");
    let json = std::fs::read_to_string(&output_file).unwrap();
    assert_eq!(json_field(&json, "error"), "0", "{json}");
    let _ = std::fs::remove_dir_all(&directory);
}

/// Our client against nbdkit's memory plugin: an independent server implementation.
#[test]
fn our_client_against_nbdkit_memory() {
    if skip_without("nbdkit") {
        return;
    }
    let directory = scratch_directory("nbdkit");
    let socket = directory.join("nbdkit.sock");
    let mut nbdkit = Command::new("nbdkit")
        .args(["--foreground", "--exit-with-parent", "-U"])
        .arg(&socket)
        .args(["memory", "size=8M"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nbdkit starts");
    wait_for_socket(&socket);
    let uri: NbdUri = format!("nbd+unix:///?socket={}", socket.display())
        .parse()
        .unwrap();
    let result = std::panic::catch_unwind(|| {
        let mut client = Client::connect(&uri).unwrap();
        assert_eq!(client.size_bytes(), 8 * MIB);
        assert!(client.details().structured_replies);
        let data = pattern(3 * MIB as usize, 5);
        client.write_at(&data, 4096, false).unwrap();
        client.flush().unwrap();
        let mut back = vec![0u8; data.len()];
        client.read_at(&mut back, 4096).unwrap();
        assert!(back == data);
        client.write_zeroes(4096, 65536, false).unwrap();
        client.trim(1 << 20, 65536).unwrap();
        let mut zeroes = vec![1u8; 65536];
        client.read_at(&mut zeroes, 4096).unwrap();
        assert!(zeroes.iter().all(|&byte| byte == 0));
        // Reading past the end: nbdkit refuses it, and the connection goes on.
        let mut past = vec![0u8; 4096];
        assert!(client.read_at(&mut past, 8 * MIB).is_err());
        client.read_at(&mut past, 0).unwrap();
        client.disconnect().unwrap();
    });
    let _ = nbdkit.kill();
    let _ = nbdkit.wait();
    let _ = std::fs::remove_dir_all(&directory);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn scratch_directory(label: &str) -> std::path::PathBuf {
    let directory =
        std::env::temp_dir().join(format!("tessera-nbd-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    directory
}

fn wait_for_socket(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn qemu_img_with_simple_replies_only_and_a_read_only_export() {
    if skip_without("qemu-img") || skip_without("nbdinfo") {
        return;
    }
    let config = tessera_nbd::HandshakeConfig {
        structured_replies: false,
        ..tessera_nbd::HandshakeConfig::default()
    };
    let mut read_only = export("ro", 4 * MIB);
    read_only.read_only = true;
    let server = TestServer::start_with(vec![export("vd0", 8 * MIB), read_only], config).unwrap();
    let directory = scratch_directory("simple");
    let source = directory.join("source.raw");
    std::fs::write(&source, pattern(8 * MIB as usize, 3)).unwrap();
    let uri = server.unix_uri("vd0").to_string();
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&source)
        .arg(&uri));
    run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&source)
        .arg(&uri));

    let ro_uri = server.unix_uri("ro").to_string();
    let json =
        String::from_utf8(run(Command::new("nbdinfo").arg("--json").arg(&ro_uri)).stdout).unwrap();
    assert_eq!(json_field(&json, "is_read_only"), "true", "{json}");
    assert_eq!(json_field(&json, "can_df"), "false", "{json}");
    let refused = Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&source)
        .arg(&ro_uri)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "writing to a read-only export must fail"
    );
    assert!(
        server
            .disk("ro")
            .lock()
            .unwrap()
            .iter()
            .all(|&byte| byte == 0)
    );
    let _ = std::fs::remove_dir_all(&directory);
}
