//! NBD over TLS with real clients: a drive made `--tls-required` refuses plaintext clients
//! (`NBD_REP_ERR_TLS_REQD`), serves nbdinfo, nbdcopy and qemu-io over STARTTLS with the data
//! intact, refuses clients that do not trust the server's certificate, and checks client
//! certificates against the configured CA when clients present one.

mod daemon;
use daemon::certs::{make_ca, sign};
use daemon::{Daemon, have, nbdinfo_opens};
use std::path::Path;
use std::process::Command;
use tessera_nbd::{Client, ClientError};

#[test]
fn tls_required_drives_serve_real_clients_over_starttls_only() {
    for tool in ["openssl", "nbdinfo", "nbdcopy", "qemu-io"] {
        if !have(tool) {
            eprintln!("SKIPPED: {tool} is not installed (scripts/setup.sh installs it)");
            return;
        }
    }
    let keys = tempfile::tempdir().unwrap();
    let trusted = keys.path().join("trusted");
    let stranger = keys.path().join("stranger");
    make_ca(&trusted, "/CN=Tessera test CA");
    sign(
        &trusted,
        "server",
        "/CN=localhost",
        "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n",
    );
    sign(
        &trusted,
        "client",
        "/CN=backup-host",
        "subjectAltName=DNS:backup-host\nextendedKeyUsage=clientAuth\n",
    );
    make_ca(&stranger, "/CN=Someone else");
    sign(
        &stranger,
        "client",
        "/CN=intruder",
        "extendedKeyUsage=clientAuth\n",
    );

    let cert = trusted.join("server-cert.pem").display().to_string();
    let key = trusted.join("server-key.pem").display().to_string();
    let ca = trusted.join("ca-cert.pem").display().to_string();
    let daemon = Daemon::start_with(&[
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca,
    ]);
    let ids = daemon.add_file_drives(3, 64 << 20);
    let mut args = vec!["dg", "create", "--level", "5", "--chunk", "64K"];
    args.extend(ids.iter().map(String::as_str));
    daemon.ok(&args);
    let vd = daemon.json(&[
        "vd",
        "create",
        "0",
        "--size",
        "16M",
        "--name",
        "secret",
        "--tls-required",
    ]);
    assert_eq!(vd["access"]["tls_required"], true, "{vd:#}");
    daemon.ok(&["vd", "create", "0", "--size", "4M", "--name", "plain"]);
    let socket = daemon.nbd_socket().display().to_string();

    // Plaintext: the TLS-only drive is refused, the other served.
    match Client::connect_str(&daemon.uri("secret")) {
        Err(ClientError::Handshake(error)) => {
            assert!(error.to_string().contains("TLS"), "{error}");
        }
        other => panic!("plaintext client let in: {:?}", other.map(|_| ())),
    }
    assert!(
        !nbdinfo_opens(&daemon.uri("secret")),
        "nbdinfo read a TLS-only drive in plaintext"
    );
    assert!(nbdinfo_opens(&daemon.uri("plain")));

    // Over TLS, trusting the server's CA (libnbd reads ca-cert.pem, and client-cert.pem /
    // client-key.pem when present, from tls-certificates).
    let tls_uri = |drive: &str, dir: &Path| {
        format!(
            "nbds+unix:///{drive}?socket={socket}&tls-certificates={}",
            dir.display()
        )
    };
    let client_dir = keys.path().join("client");
    std::fs::create_dir_all(&client_dir).unwrap();
    std::fs::copy(trusted.join("ca-cert.pem"), client_dir.join("ca-cert.pem")).unwrap();
    assert!(
        nbdinfo_opens(&tls_uri("secret", &client_dir)),
        "nbdinfo over TLS refused"
    );

    // Data through TLS: nbdcopy in and out, compared byte for byte.
    let pattern: Vec<u8> = (0..8u32 << 20).map(|i| (i * 31 % 251) as u8).collect();
    let source = keys.path().join("pattern.bin");
    let back = keys.path().join("back.bin");
    std::fs::write(&source, &pattern).unwrap();
    daemon::sh(
        "nbdcopy",
        &[
            &source.display().to_string(),
            &tls_uri("secret", &client_dir),
        ],
    );
    daemon::sh(
        "nbdcopy",
        &[&tls_uri("secret", &client_dir), &back.display().to_string()],
    );
    let copied = std::fs::read(&back).unwrap();
    assert_eq!(
        &copied[..pattern.len()],
        &pattern[..],
        "data changed over TLS"
    );

    // qemu's own TLS stack, with a client certificate the server verifies.
    std::fs::copy(
        trusted.join("client-cert.pem"),
        client_dir.join("client-cert.pem"),
    )
    .unwrap();
    std::fs::copy(
        trusted.join("client-key.pem"),
        client_dir.join("client-key.pem"),
    )
    .unwrap();
    let image = format!(
        "driver=nbd,server.type=unix,server.path={socket},export=secret,tls-creds=tls0,\
         tls-hostname=localhost"
    );
    let qemu = Command::new("qemu-io")
        .args([
            "--object",
            &format!(
                "tls-creds-x509,id=tls0,endpoint=client,dir={}",
                client_dir.display()
            ),
            "--image-opts",
            &image,
            "-c",
            "write -P 0x5a 12M 1M",
            "-c",
            "read -P 0x5a 12M 1M",
        ])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&qemu.stdout).to_string() + &String::from_utf8_lossy(&qemu.stderr);
    assert!(
        qemu.status.success() && !text.contains("fail") && !text.contains("Pattern verification"),
        "qemu-io over TLS: {text}"
    );

    // A client that does not trust the server's certificate gives up (qemu checks the chain;
    // libnbd 1.14 does not check it over a Unix socket).
    let other_dir = keys.path().join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    std::fs::copy(stranger.join("ca-cert.pem"), other_dir.join("ca-cert.pem")).unwrap();
    let refused = Command::new("qemu-img")
        .args([
            "info",
            "--object",
            &format!(
                "tls-creds-x509,id=tls0,endpoint=client,dir={}",
                other_dir.display()
            ),
            "--image-opts",
            &image,
        ])
        .output()
        .unwrap();
    assert!(
        !refused.status.success()
            && String::from_utf8_lossy(&refused.stderr).contains("known issuer"),
        "qemu-img trusted a certificate from an unknown CA: {}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // A client certificate from another CA is refused by the server (qemu presents the
    // client-cert.pem it finds; the server's verifier fails the TLS handshake).
    let intruder_dir = keys.path().join("intruder");
    std::fs::create_dir_all(&intruder_dir).unwrap();
    std::fs::copy(
        trusted.join("ca-cert.pem"),
        intruder_dir.join("ca-cert.pem"),
    )
    .unwrap();
    std::fs::copy(
        stranger.join("client-cert.pem"),
        intruder_dir.join("client-cert.pem"),
    )
    .unwrap();
    std::fs::copy(
        stranger.join("client-key.pem"),
        intruder_dir.join("client-key.pem"),
    )
    .unwrap();
    let intruder = Command::new("qemu-img")
        .args([
            "info",
            "--object",
            &format!(
                "tls-creds-x509,id=tls0,endpoint=client,dir={}",
                intruder_dir.display()
            ),
            "--image-opts",
            &image,
        ])
        .output()
        .unwrap();
    assert!(
        !intruder.status.success(),
        "a client certificate from an unknown CA was accepted: {}",
        String::from_utf8_lossy(&intruder.stdout)
    );

    // A drive for one client certificate only: `tls:NAME` matches a verified certificate valid
    // for NAME. Without a certificate (nbdinfo with only the CA) or in plaintext: refused.
    daemon.ok(&[
        "vd",
        "create",
        "0",
        "--size",
        "4M",
        "--name",
        "backup",
        "--allow",
        "tls:backup-host",
    ]);
    let ca_only = keys.path().join("ca-only");
    std::fs::create_dir_all(&ca_only).unwrap();
    std::fs::copy(trusted.join("ca-cert.pem"), ca_only.join("ca-cert.pem")).unwrap();
    assert!(
        !nbdinfo_opens(&tls_uri("backup", &ca_only)),
        "no certificate, yet admitted"
    );
    assert!(
        !nbdinfo_opens(&daemon.uri("backup")),
        "plaintext admitted by a TLS rule"
    );
    let backup_image = image.replace("export=secret", "export=backup");
    let named = Command::new("qemu-img")
        .args([
            "info",
            "--object",
            &format!(
                "tls-creds-x509,id=tls0,endpoint=client,dir={}",
                client_dir.display()
            ),
            "--image-opts",
            &backup_image,
        ])
        .output()
        .unwrap();
    assert!(
        named.status.success(),
        "the client certificate for backup-host was refused: {}",
        String::from_utf8_lossy(&named.stderr)
    );

    // The data written over TLS reads back over TLS after all this.
    let again = keys.path().join("again.bin");
    daemon::sh(
        "nbdcopy",
        &[
            &tls_uri("secret", &client_dir),
            &again.display().to_string(),
        ],
    );
    assert_eq!(
        &std::fs::read(&again).unwrap()[..pattern.len()],
        &pattern[..]
    );
}

#[test]
fn a_daemon_without_a_certificate_refuses_starttls() {
    if !have("nbdinfo") {
        eprintln!("SKIPPED: nbdinfo is not installed");
        return;
    }
    let daemon = Daemon::start();
    daemon.group_with_vd("5", 3, 64 << 20, "plain", 8 << 20);
    let socket = daemon.nbd_socket().display().to_string();
    assert!(nbdinfo_opens(&daemon.uri("plain")));
    // nbds:// insists on TLS; the daemon answers STARTTLS with NBD_REP_ERR_POLICY.
    assert!(!nbdinfo_opens(&format!(
        "nbds+unix:///plain?socket={socket}&tls-verify-peer=false"
    )));
}
