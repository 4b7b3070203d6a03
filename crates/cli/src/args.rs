//! The command line, as clap derives it: nouns (`pd`, `dg`, `vd`) then verbs. Values are parsed
//! and checked here (see `values`), so a wrong argument never reaches the daemon.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use tessera_api::{Compression, DgRef, JournalMode, RaidLevel};

use crate::values::{self, JournalChoice};

/// Default management socket (also `TESSERA_API_SOCKET`).
pub const DEFAULT_API_SOCKET: &str = "/run/tessera/api.sock";
/// Default NBD socket (also `TESSERA_NBD_SOCKET`).
pub const DEFAULT_NBD_SOCKET: &str = "/run/tessera/nbd.sock";
/// Default state directory (also `TESSERA_STATE_DIR`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/tessera";

/// Tessera: software RAID for NVMe drives, in user space.
///
/// Physical drives (pd) are pooled into drive groups (dg) protected by RAID 0, 1, 10, 5 or 6;
/// virtual drives (vd) are carved from drive groups and served over NBD. `tessera serve` runs
/// the daemon; every other command talks to it through its API socket.
///
/// Sizes take binary suffixes: 4096, 64K, 10G, 2T. Exit status: 0 done, 1 refused or failed by
/// the daemon (or the daemon unreachable), 2 wrong command line (nothing was changed).
#[derive(Debug, Parser)]
#[command(name = "tessera", version, max_term_width = 100)]
pub struct Cli {
    /// The daemon's management API socket.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "TESSERA_API_SOCKET",
        default_value = DEFAULT_API_SOCKET
    )]
    pub api_socket: PathBuf,

    /// Reach the daemon over TCP instead, at its `serve --api-listen` address
    /// (https://HOST:PORT); needs --api-token-file and --api-ca.
    #[arg(long, global = true, value_name = "URL", env = "TESSERA_API_URL")]
    pub api_url: Option<String>,

    /// With --api-url: the file holding the daemon's API token.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "TESSERA_API_TOKEN_FILE"
    )]
    pub api_token_file: Option<PathBuf>,

    /// With --api-url: the CA certificates (PEM) trusted to sign the daemon's certificate.
    #[arg(long, global = true, value_name = "PEM", env = "TESSERA_API_CA")]
    pub api_ca: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

/// The nouns, and the commands that stand alone.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Physical drives: block devices, files or remote NBD exports.
    #[command(subcommand)]
    Pd(PdCommand),
    /// Drive groups: RAID over physical drives.
    #[command(subcommand)]
    Dg(DgCommand),
    /// Virtual drives: volumes carved from a drive group, served over NBD.
    #[command(subcommand)]
    Vd(VdCommand),
    /// The daemon's version, parity kernels and engines with their speeds, and I/O driver.
    Info(JsonFlag),
    /// The daemon's event log: state changes and operation results.
    Events(EventsArgs),
    /// Benchmarks that need no daemon.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Run the daemon in the foreground (logs to stderr; stops cleanly on SIGTERM or SIGINT).
    Serve(ServeArgs),
    /// Print a shell completion script (e.g. `tessera completions bash > /etc/bash_completion.d/tessera`).
    Completions {
        /// The shell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or write one page per command into a directory.
    Man {
        /// Write tessera.1, tessera-pd.1, tessera-pd-add.1, ... into this directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// `--json`.
#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print the API object(s) as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tessera pd ...`.
#[derive(Debug, Subcommand)]
pub enum PdCommand {
    /// Add physical drives; prints the new ids, one per line.
    Add {
        /// Block devices, files, or remote exports (nbd://HOST:PORT/NAME,
        /// nbd+unix:///NAME?socket=PATH).
        #[arg(value_name = "PATH", required = true, value_parser = values::pd_path)]
        paths: Vec<String>,
        /// Add as hot spares (global unless --spare-for).
        #[arg(long)]
        spare: bool,
        /// Add as hot spares dedicated to this drive group (id or name).
        #[arg(long, value_name = "DG", value_parser = values::dg_ref)]
        spare_for: Option<DgRef>,
        /// Print the new drives as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List physical drives.
    List(JsonFlag),
    /// Show one physical drive.
    Describe {
        /// The drive's id.
        #[arg(value_name = "PD", value_parser = values::pd_id)]
        pd: u32,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Forget physical drives that are in no drive group.
    Remove {
        /// The drives' ids.
        #[arg(value_name = "PD", required = true, value_parser = values::pd_id)]
        pds: Vec<u32>,
    },
    /// Take a physical drive offline as a failure would (maintenance, failure drills).
    Fail {
        /// The drive's id.
        #[arg(value_name = "PD", value_parser = values::pd_id)]
        pd: u32,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Bring an administratively failed drive back; it is rebuilt.
    Online {
        /// The drive's id.
        #[arg(value_name = "PD", value_parser = values::pd_id)]
        pd: u32,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Replace member OLD with drive NEW: a rebuild if OLD failed, else a proactive copy.
    Replace {
        /// The member to replace.
        #[arg(value_name = "OLD", value_parser = values::pd_id)]
        old: u32,
        /// The drive that takes its place (unconfigured or a hot spare).
        #[arg(value_name = "NEW", value_parser = values::pd_id)]
        new: u32,
        #[command(flatten)]
        json: JsonFlag,
    },
}

/// `tessera dg ...`.
#[derive(Debug, Subcommand)]
pub enum DgCommand {
    /// Create a drive group from unconfigured physical drives (members in role order).
    Create {
        /// RAID level: 0, 1, 10, 5 or 6.
        #[arg(long, value_name = "LEVEL", value_parser = values::level)]
        level: RaidLevel,
        /// Chunk size: a power of two from 4K to 1M.
        #[arg(long, value_name = "SIZE", default_value = "64K", value_parser = values::chunk)]
        chunk: u64,
        /// The group's name (default: dg<ID>).
        #[arg(long, value_name = "NAME", value_parser = values::name)]
        name: Option<String>,
        /// Write-hole journal: always_on, degrade_only (default) or always_off; or the id of
        /// a physical drive to hold it (mode always_on).
        #[arg(long, value_name = "MODE|PD", value_parser = values::journal_choice)]
        journal: Option<JournalChoice>,
        /// Member drives, in role order.
        #[arg(value_name = "PD", required = true, value_parser = values::pd_id)]
        pds: Vec<u32>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// List drive groups.
    List(JsonFlag),
    /// Show a drive group: state, members and roles, sizes, rebuild and scrub progress.
    Describe {
        /// The group's id or name.
        #[arg(value_name = "DG", value_parser = values::dg_ref)]
        dg: DgRef,
        /// Follow a running rebuild or scrub until it ends, then describe the group.
        #[arg(long)]
        wait: bool,
        /// With --wait: milliseconds between polls of the daemon.
        #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = values::poll_ms)]
        poll_ms: u64,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Delete a drive group (refused while it has virtual drives, unless --force).
    Delete {
        /// The group's id or name.
        #[arg(value_name = "DG", value_parser = values::dg_ref)]
        dg: DgRef,
        /// Delete its virtual drives too.
        #[arg(long)]
        force: bool,
    },
    /// Change a drive group's settings.
    #[command(group(ArgGroup::new("setting").required(true).multiple(true)
        .args(["rebuild_rate", "scrub_rate", "journal", "rebuild_latency_target"])))]
    Set {
        /// The group's id or name.
        #[arg(value_name = "DG", value_parser = values::dg_ref)]
        dg: DgRef,
        /// Share of member bandwidth for rebuilds, 1 to 100 (percent).
        #[arg(long, value_name = "N", value_parser = values::rate)]
        rebuild_rate: Option<u32>,
        /// Share of member bandwidth for scrubs, 1 to 100 (percent).
        #[arg(long, value_name = "N", value_parser = values::rate)]
        scrub_rate: Option<u32>,
        /// Adapt the rebuild rate so host requests take this long on average (microseconds;
        /// 0 returns to the fixed rate).
        #[arg(long, value_name = "US")]
        rebuild_latency_target: Option<u32>,
        /// Journal mode: always_on, degrade_only or always_off.
        #[arg(long, value_name = "MODE", value_parser = values::journal_mode)]
        journal: Option<JournalMode>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Check parity (or mirrors) of every stripe; with --repair, fix mismatches.
    Scrub {
        /// The group's id or name.
        #[arg(value_name = "DG", value_parser = values::dg_ref)]
        dg: DgRef,
        /// Repair mismatches instead of only counting them.
        #[arg(long)]
        repair: bool,
        /// Show progress until the scrub ends (exit status 1 if it stopped early).
        #[arg(long)]
        wait: bool,
        /// With --wait: milliseconds between polls of the daemon.
        #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = values::poll_ms)]
        poll_ms: u64,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Adopt an existing Linux md array (metadata 1.2; RAID 0/1/10/5/6, md's default layouts)
    /// with its data in place: a drive group over its devices and one virtual drive holding
    /// the array's contents. The array must be stopped and clean (docs/md-import.md).
    ImportMd {
        /// The array's member devices, in any order (md's roles decide); a missing member
        /// within redundancy becomes a failed member to rebuild.
        #[arg(value_name = "DEVICE", required = true)]
        devices: Vec<String>,
        /// The name of the group and of its virtual drive (default: md's array name, when it
        /// is a valid, free name).
        #[arg(long, value_name = "NAME", value_parser = values::name)]
        name: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
}

/// `tessera vd ...`.
#[derive(Debug, Subcommand)]
pub enum VdCommand {
    /// Create a virtual drive in a drive group; prints its NBD URI.
    Create {
        /// The group's id or name.
        #[arg(value_name = "DG", value_parser = values::dg_ref)]
        dg: DgRef,
        /// Size seen by hosts (a multiple of 512 bytes).
        #[arg(long, value_name = "SIZE", value_parser = values::vd_size)]
        size: u64,
        /// Its name, also the NBD export name (default: vd<N>).
        #[arg(long, value_name = "NAME", value_parser = values::name)]
        name: Option<String>,
        /// Thin: log-structured, compressed, thin-provisioned, checksummed.
        #[arg(long)]
        thin: bool,
        /// Compression of a thin drive.
        #[arg(long, value_name = "ALGORITHM", requires = "thin", value_parser = values::compression)]
        compression: Option<Compression>,
        /// The group space a thin drive's log takes (default: the largest free extent). The
        /// size seen by hosts may exceed it.
        #[arg(long, value_name = "SIZE", requires = "thin", value_parser = values::vd_size)]
        physical: Option<u64>,
        /// Raise a low-space event when a thin drive's free space falls below this percent of
        /// its capacity (default 10).
        #[arg(long, value_name = "PERCENT", requires = "thin", value_parser = clap::value_parser!(u8).range(1..=90))]
        low_space_percent: Option<u8>,
        /// Only these clients may connect (repeatable; any match admits): uid:N or gid:N for
        /// the NBD Unix socket, net:ADDRESS/PREFIX for TCP, tls:NAME for a TLS client
        /// certificate valid for NAME. Default: every client.
        #[arg(long = "allow", value_name = "RULE", value_parser = values::access_rule)]
        allow: Vec<String>,
        /// Export the drive read-only.
        #[arg(long)]
        read_only: bool,
        /// Let several clients write at once (default: one writer; later clients read only).
        #[arg(long)]
        multi_conn: bool,
        /// Serve it only over TLS (needs `tessera serve --tls-cert`).
        #[arg(long)]
        tls_required: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Change who may connect to a virtual drive, and how (connections the new settings no
    /// longer allow are closed), or grow a thin drive's physical space.
    #[command(group(ArgGroup::new("change").required(true).multiple(true)
        .args(["allow", "allow_any", "read_only", "multi_conn", "tls_required", "physical"])))]
    Set {
        /// The drive's name.
        #[arg(value_name = "NAME", value_parser = values::name)]
        name: String,
        /// Replace the access rules with these (repeatable): uid:N, gid:N, net:ADDRESS/PREFIX,
        /// tls:NAME.
        #[arg(long = "allow", value_name = "RULE", value_parser = values::access_rule,
              conflicts_with = "allow_any")]
        allow: Vec<String>,
        /// Remove every access rule: every client may connect.
        #[arg(long)]
        allow_any: bool,
        /// Read-only: on or off.
        #[arg(long, value_name = "on|off", value_parser = values::on_off)]
        read_only: Option<bool>,
        /// Several writers at once: on or off.
        #[arg(long, value_name = "on|off", value_parser = values::on_off)]
        multi_conn: Option<bool>,
        /// Only over TLS: on or off.
        #[arg(long, value_name = "on|off", value_parser = values::on_off)]
        tls_required: Option<bool>,
        /// Thin drives: grow the physical space to SIZE (never shrinks; needs free group space
        /// right after the drive's). Writes refused for lack of space succeed again.
        #[arg(long, value_name = "SIZE", value_parser = values::vd_size)]
        physical: Option<u64>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// List virtual drives.
    List(JsonFlag),
    /// Show a virtual drive: size, group, NBD URI.
    Describe {
        /// The drive's name.
        #[arg(value_name = "NAME", value_parser = values::name)]
        name: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Export a virtual drive as a local block device, /dev/ublkbN, through the kernel's ublk
    /// driver (Linux 6.0 or later, module ublk_drv); prints the device. Every drive is served
    /// over NBD already.
    Export {
        /// The drive's name.
        #[arg(value_name = "NAME", value_parser = values::name)]
        name: String,
        /// Through ublk (the one kind of export to create).
        #[arg(long, required = true)]
        ublk: bool,
        /// Hardware queues, all served by the daemon's data-plane thread (default: one per CPU, at
        /// most 4).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
        queues: Option<u16>,
        /// Requests in flight per queue (default 64).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
        queue_depth: Option<u16>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Remove a virtual drive's ublk block device (its requests in flight finish first).
    Unexport {
        /// The drive's name.
        #[arg(value_name = "NAME", value_parser = values::name)]
        name: String,
        /// The ublk device.
        #[arg(long, required = true)]
        ublk: bool,
    },
    /// Delete a virtual drive (refused while a client is connected or it is exported over
    /// ublk, unless --force).
    Delete {
        /// The drive's name.
        #[arg(value_name = "NAME", value_parser = values::name)]
        name: String,
        /// Delete even with clients connected (they are disconnected).
        #[arg(long)]
        force: bool,
    },
}

/// `tessera events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only events after this sequence number.
    #[arg(long, value_name = "SEQ", default_value_t = 0, value_parser = values::sequence)]
    pub since: u64,
    /// Keep printing new events as they happen (with --json: one object per line).
    #[arg(long)]
    pub follow: bool,
    /// With --follow: milliseconds between polls of the daemon.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = values::poll_ms)]
    pub poll_ms: u64,
    /// Print the events as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// `tessera bench ...`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Every parity kernel this CPU runs, against Intel ISA-L on the same buffers (about a
    /// minute).
    Parity {
        /// Print the rows as a JSON array.
        #[arg(long)]
        json: bool,
        /// Only this kernel (repeatable; `gpu`: the parity engines, the CPU beside every GPU
        /// adapter; default: every kernel this CPU runs, then the engines).
        #[arg(long, value_name = "NAME", value_parser = values::kernel)]
        kernel: Vec<String>,
        /// Only this operation (repeatable; default: all).
        #[arg(long, value_name = "OP", value_parser = values::bench_op)]
        op: Vec<String>,
    },
}

/// Which engine computes parity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ParityEngine {
    /// SIMD kernels on the CPU.
    Cpu,
    /// A GPU through Vulkan compute.
    Gpu,
    /// Whichever finishes each batch first, by start-up calibration.
    Auto,
}

impl ParityEngine {
    /// The name the daemon takes.
    pub fn name(self) -> &'static str {
        match self {
            ParityEngine::Cpu => "cpu",
            ParityEngine::Gpu => "gpu",
            ParityEngine::Auto => "auto",
        }
    }
}

/// `tessera serve`. The management socket is the global `--api-socket`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Read settings from this TOML file (default: /etc/tessera/tessera.toml when it exists);
    /// options on the command line (or in the environment) win over the file.
    #[arg(long, value_name = "FILE", env = "TESSERA_CONFIG")]
    pub config: Option<PathBuf>,
    /// The options given on the command line or in the environment (filled in by `parse`), so
    /// that the configuration file does not override them.
    #[arg(skip)]
    pub explicit: Vec<String>,
    /// Directory for the daemon's small state (the member paths to probe at start).
    #[arg(long, value_name = "DIR", env = "TESSERA_STATE_DIR", default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Unix socket of the NBD server.
    #[arg(long, value_name = "PATH", env = "TESSERA_NBD_SOCKET", default_value = DEFAULT_NBD_SOCKET)]
    pub nbd_socket: PathBuf,
    /// Also serve NBD over TCP on this address (HOST:PORT; the NBD port is 10809).
    #[arg(long, value_name = "ADDR", env = "TESSERA_NBD_LISTEN", value_parser = values::listen_address)]
    pub nbd_listen: Option<String>,
    /// Which engine computes parity.
    #[arg(
        long,
        value_name = "ENGINE",
        env = "TESSERA_PARITY_ENGINE",
        default_value = "auto"
    )]
    pub parity_engine: ParityEngine,
    /// Serve /metrics and the dashboard over HTTP on this address (HOST:PORT; read-only).
    #[arg(long, value_name = "ADDR", env = "TESSERA_HTTP_LISTEN", value_parser = values::listen_address)]
    pub http_listen: Option<String>,
    /// Also serve the whole management API over TCP on this address (HOST:PORT), over TLS
    /// (--tls-cert, --tls-key) and only to clients presenting the token in --api-token-file.
    #[arg(long, value_name = "ADDR", env = "TESSERA_API_LISTEN", value_parser = values::listen_address)]
    pub api_listen: Option<String>,
    /// Offer NBD over TLS (NBD_OPT_STARTTLS) with this certificate chain (PEM); drives made
    /// `--tls-required` are then served only over TLS.
    #[arg(
        long,
        value_name = "PEM",
        env = "TESSERA_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(
        long,
        value_name = "PEM",
        env = "TESSERA_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Run this command (through /bin/sh -c) for every event at or above
    /// --event-hook-severity: the event as one JSON line on its standard input, and in
    /// TESSERA_EVENT_SEQ, _KIND, _SEVERITY and _MESSAGE (for mail or paging).
    #[arg(long, value_name = "COMMAND", env = "TESSERA_EVENT_HOOK")]
    pub event_hook: Option<String>,
    /// The least severity handed to the event hook: info, warning, error or critical.
    #[arg(
        long,
        value_name = "LEVEL",
        env = "TESSERA_EVENT_HOOK_SEVERITY",
        default_value = "warning",
        value_parser = values::severity
    )]
    pub event_hook_severity: String,
    /// Microseconds the data plane keeps looking for finished I/O before it sleeps: a
    /// request at queue depth 1 then waits for no wake-up (0 turns it off; costs CPU only
    /// while I/O is due within the window).
    #[arg(
        long,
        value_name = "MICROSECONDS",
        env = "TESSERA_BUSY_POLL_US",
        default_value_t = 50,
        value_parser = values::busy_poll_us
    )]
    pub busy_poll_us: u32,
    /// Verify client certificates against these CAs (PEM) when clients present one.
    #[arg(
        long,
        value_name = "PEM",
        env = "TESSERA_TLS_CLIENT_CA",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,
}
