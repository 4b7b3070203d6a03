//! Test certificates made with `openssl`: a CA and the certificates it signs.

use std::path::Path;
use std::process::Command;

/// `openssl` with arguments, in `dir`; panics with its output on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA in `dir` (ca-cert.pem, ca-key.pem) and a certificate it signs, named `name`.
pub fn make_ca(dir: &Path, subject: &str) {
    std::fs::create_dir_all(dir).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca-key.pem",
            "-out",
            "ca-cert.pem",
            "-days",
            "2",
            "-subj",
            subject,
        ],
    );
}

pub fn sign(dir: &Path, name: &str, subject: &str, extensions: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}-key.pem"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            subject,
        ],
    );
    std::fs::write(dir.join(format!("{name}.ext")), extensions).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca-cert.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            &format!("{name}-cert.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}
