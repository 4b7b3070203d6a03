//! Helpers for the CLI tests: run the `tessera` binary, and a fake daemon to run it against.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tessera_api::testing::FakeController;
use tessera_api::{ApiServer, Router, ServerConfig};

/// What a run of `tessera` did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts success and returns standard output.
    pub fn ok(self) -> String {
        assert_eq!(self.code, 0, "failed: {self:?}");
        assert!(self.stderr.is_empty(), "stderr: {}", self.stderr);
        self.stdout
    }

    /// Asserts a failure with `code`, nothing on standard output, and exactly one line on
    /// standard error; returns that line.
    pub fn fails(self, code: i32) -> String {
        assert_eq!(self.code, code, "{self:?}");
        assert!(self.stdout.is_empty(), "stdout: {}", self.stdout);
        assert_eq!(
            self.stderr.lines().count(),
            1,
            "not one line: {:?}",
            self.stderr
        );
        assert!(self.stderr.ends_with('\n'));
        self.stderr.trim_end().to_string()
    }
}

/// Runs `tessera` with `args`, the API socket given by `TESSERA_API_SOCKET`.
pub fn tessera(socket: &Path, args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env("TESSERA_API_SOCKET", socket)
        .env_remove("NO_COLOR")
        .output()
        .expect("tessera runs");
    Run {
        code: output.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    }
}

/// A fake daemon on a socket in its own temporary directory.
pub struct FakeDaemon {
    pub socket: PathBuf,
    pub controller: Arc<FakeController>,
    _server: ApiServer,
    _directory: tempfile::TempDir,
}

impl FakeDaemon {
    pub fn start() -> FakeDaemon {
        let directory = tempfile::tempdir().expect("temporary directory");
        let socket = directory.path().join("api.sock");
        let controller = Arc::new(FakeController::new());
        let server = ApiServer::bind_unix(
            &socket,
            ServerConfig::default(),
            Router::new(controller.clone()),
        )
        .expect("the fake daemon binds");
        FakeDaemon {
            socket,
            controller,
            _server: server,
            _directory: directory,
        }
    }

    pub fn run(&self, args: &[&str]) -> Run {
        tessera(&self.socket, args)
    }
}
