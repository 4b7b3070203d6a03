//! A real daemon for end-to-end tests: `tessera serve` in a temporary directory with file
//! members, driven through the `tessera` command, plus helpers for the external NBD clients.

#![allow(dead_code)]

pub mod certs;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub const TESSERA: &str = env!("CARGO_BIN_EXE_tessera");

pub struct Daemon {
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    /// Extra `tessera serve` arguments, kept for restarts.
    extra_args: Vec<String>,
    /// Started as the systemd unit does, with `--config FILE` alone.
    config: Option<PathBuf>,
}

impl Daemon {
    /// Starts a daemon with its state and sockets in a fresh temporary directory.
    pub fn start() -> Daemon {
        Daemon::start_with(&[])
    }

    /// Starts a daemon like `start`, with extra `tessera serve` arguments.
    pub fn start_with(extra_args: &[&str]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("tessera-e2e-")
            .tempdir_in(scratch_root())
            .expect("temp dir");
        let mut daemon = Daemon {
            dir,
            child: None,
            extra_args: extra_args.iter().map(|arg| arg.to_string()).collect(),
            config: None,
        };
        daemon.launch();
        daemon
    }

    /// Starts a daemon as the systemd unit does, `tessera serve --config FILE` and nothing
    /// else: the file names the state directory and sockets (in a fresh temporary directory),
    /// then holds `settings` (more TOML lines, `{dir}` standing for that directory).
    pub fn start_with_config(settings: &str) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("tessera-e2e-")
            .tempdir_in(scratch_root())
            .expect("temp dir");
        let config = dir.path().join("tessera.toml");
        let text = format!(
            "state_dir = \"{}\"\napi_socket = \"{}\"\nnbd_socket = \"{}\"\n{settings}",
            dir.path().join("state").display(),
            dir.path().join("api.sock").display(),
            dir.path().join("nbd.sock").display(),
            settings = settings.replace("{dir}", &dir.path().display().to_string()),
        );
        std::fs::write(&config, text).expect("configuration file");
        let mut daemon = Daemon {
            dir,
            child: None,
            extra_args: Vec::new(),
            config: Some(config),
        };
        daemon.launch();
        daemon
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn api_socket(&self) -> PathBuf {
        self.path("api.sock")
    }

    pub fn nbd_socket(&self) -> PathBuf {
        self.path("nbd.sock")
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("daemon.log"))
            .expect("log file");
        let mut command = Command::new(TESSERA);
        match &self.config {
            Some(config) => command.arg("serve").arg("--config").arg(config),
            // An empty configuration: an /etc/tessera/tessera.toml of this machine's would
            // otherwise fill in what the flags leave out.
            None => command
                .args(["serve", "--config", "/dev/null", "--state-dir"])
                .arg(self.path("state"))
                .arg("--api-socket")
                .arg(self.api_socket())
                .arg("--nbd-socket")
                .arg(self.nbd_socket()),
        };
        // Only what the test gives: no settings from the environment of the test run.
        for variable in [
            "TESSERA_CONFIG",
            "TESSERA_API_SOCKET",
            "TESSERA_NBD_SOCKET",
            "TESSERA_API_LISTEN",
            "TESSERA_API_TOKEN_FILE",
        ] {
            command.env_remove(variable);
        }
        let child = command
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start tessera serve");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(self.api_socket()).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("daemon did not start; log:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("daemon.log")).unwrap_or_default()
    }

    /// Stops the daemon with SIGTERM and waits for a clean exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child we own.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Some(status) = child.try_wait().expect("wait") {
                    assert!(
                        status.success(),
                        "daemon exited with {status}; log:\n{}",
                        self.log()
                    );
                    return;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("daemon did not stop within 60 s; log:\n{}", self.log());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Kills the daemon without warning (a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// Runs `tessera ARGS --api-socket ...`, returning the output.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(TESSERA)
            .args(args)
            .env("TESSERA_API_SOCKET", self.api_socket())
            .output()
            .expect("run tessera")
    }

    /// Runs a command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "tessera {args:?} failed: {}{}\ndaemon log:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            self.log()
        );
        String::from_utf8(output.stdout).expect("utf-8 output")
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&self.ok(&args)).expect("JSON output")
    }

    /// Creates `count` sparse member files of `size` bytes and adds them; returns their ids.
    pub fn add_file_drives(&self, count: usize, size_bytes: u64) -> Vec<String> {
        let start = std::fs::read_dir(self.dir.path())
            .map(|d| d.count())
            .unwrap_or(0);
        let paths: Vec<String> = (0..count)
            .map(|i| {
                let path = self.path(&format!("pd-{}-{i}.img", start));
                let file = std::fs::File::create(&path).expect("member file");
                file.set_len(size_bytes).expect("size member file");
                path.display().to_string()
            })
            .collect();
        let mut args = vec!["pd", "add"];
        args.extend(paths.iter().map(String::as_str));
        self.ok(&args)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// A group (64 KiB chunks) over `members` new file drives; returns its id.
    pub fn group(&self, level: &str, members: usize, member_bytes: u64) -> String {
        let ids = self.add_file_drives(members, member_bytes);
        let mut args = vec!["dg", "create", "--level", level, "--chunk", "64K"];
        args.extend(ids.iter().map(String::as_str));
        self.json(&args)["id"].to_string()
    }

    /// A group over new file drives and one virtual drive spanning `vd_bytes`; returns the URI.
    pub fn group_with_vd(
        &self,
        level: &str,
        members: usize,
        member_bytes: u64,
        vd_name: &str,
        vd_bytes: u64,
    ) -> String {
        let dg = self.group(level, members, member_bytes);
        let size = vd_bytes.to_string();
        self.ok(&["vd", "create", &dg, "--size", &size, "--name", vd_name]);
        self.uri(vd_name)
    }

    pub fn uri(&self, vd: &str) -> String {
        format!("nbd+unix:///{vd}?socket={}", self.nbd_socket().display())
    }

    /// The value of one series of the daemon's Prometheus metrics (`GET /metrics` on the API
    /// socket), e.g. `tessera_dg_host_write_bytes_total{dg="0"}`; `None` if it is not there.
    pub fn metric(&self, series: &str) -> Option<u64> {
        let text = tessera_api::Client::new(self.api_socket())
            .metrics()
            .unwrap_or_else(|e| panic!("GET /metrics: {e}\ndaemon log:\n{}", self.log()));
        text.lines().find_map(|line| {
            let value = line.strip_prefix(series)?.strip_prefix(' ')?;
            Some(value.trim().parse::<f64>().ok()? as u64)
        })
    }

    /// Polls `dg describe DG --json` until `done` holds (60 s at most).
    pub fn wait_for_group(
        &self,
        dg: &str,
        what: &str,
        mut done: impl FnMut(&serde_json::Value) -> bool,
    ) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let group = self.json(&["dg", "describe", dg]);
            if done(&group) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}: {group:#}\ndaemon log:\n{}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub fn group_members(&self, dg: &str) -> Vec<serde_json::Value> {
        self.json(&["dg", "describe", dg])["members"]
            .as_array()
            .expect("members")
            .clone()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(mut child) = self.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            eprintln!("daemon log:\n{}", self.log());
        } else {
            self.stop();
        }
    }
}

/// Where test files go: a tmpfs when there is one (fast, and O_DIRECT works there).
pub fn scratch_root() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Whether an external tool is installed; prints why a test is skipped when it is not.
pub fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("SKIPPED: {tool} is not installed (scripts/setup.sh installs it)");
    }
    found
}

/// Waits for a child process to exit, at most `timeout`; kills it and returns `None` when it
/// does not.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs an external command that must succeed; returns stdout.
pub fn sh(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// fio through its nbd engine, writing with crc32c verification and reading everything back.
pub fn fio_verify(uri: &str, size: &str, extra: &[&str], output_dir: &Path) {
    let output = output_dir.join(format!("fio-{}.json", std::process::id()));
    let mut args = vec![
        "--name=verify".to_string(),
        "--ioengine=nbd".into(),
        format!("--uri={uri}"),
        format!("--size={size}"),
        "--rw=randwrite".into(),
        "--bsrange=4k-128k".into(),
        "--iodepth=16".into(),
        "--verify=crc32c".into(),
        "--verify_fatal=1".into(),
        "--verify_state_save=0".into(),
        "--do_verify=1".into(),
        "--output-format=json".into(),
        format!("--output={}", output.display()),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sh("fio", &args);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&output).expect("fio output"))
            .expect("fio JSON");
    let job = &report["jobs"][0];
    assert_eq!(job["error"], 0, "fio reported an error: {job}");
    assert!(
        job["write"]["io_bytes"].as_u64().unwrap_or(0) > 0,
        "fio wrote nothing"
    );
    assert!(
        job["read"]["io_bytes"].as_u64().unwrap_or(0) > 0,
        "fio verified nothing"
    );
}

/// Whether `nbdinfo URI` opens the export (a real client's view of access and TLS rules).
#[allow(dead_code)]
pub fn nbdinfo_opens(uri: &str) -> bool {
    Command::new("nbdinfo")
        .arg(uri)
        .output()
        .expect("nbdinfo")
        .status
        .success()
}
