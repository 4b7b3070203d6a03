//! `tessera man`: manual pages generated from the command-line definition, so they never
//! disagree with `--help`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;

use super::{Context, Failure};
use crate::args::Cli;

/// Where `tessera serve` finds its settings and puts its sockets (the FILES section of
/// tessera(1) and tessera-serve(1)).
const FILES: &str = r#".SH FILES
.TP
\fI/etc/tessera/tessera.toml\fR
Settings of \fBtessera serve\fR, one key per option (\fBstate_dir\fR, \fBnbd_listen\fR,
\fBevent_hook\fR, ...). Read when it exists, or where \fB\-\-config\fR or \fBTESSERA_CONFIG\fR
says; an option on the command line or in the environment wins over it.
.TP
\fI/run/tessera/api.sock\fR, \fI/run/tessera/nbd.sock\fR
The management API and the NBD server.
.TP
\fI/var/lib/tessera\fR
The daemon's small state: which drives to probe at start.
.SH SEE ALSO
\fI/usr/share/doc/tessera/operations.md\fR: the service, the configuration file, alerts.
"#;

/// Prints `tessera(1)`, or writes a page for every command and subcommand into `dir`.
pub fn run(context: &mut Context<'_>, dir: Option<PathBuf>) -> Result<ExitCode, Failure> {
    let command = for_manual();
    match dir {
        None => context.out.write_all(&page(&command)?)?,
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|error| {
                Failure::Other(format!("cannot create {}: {error}", dir.display()))
            })?;
            let written = write_pages(&command, &dir)?;
            context.print(&format!(
                "{written} manual pages written to {}\n",
                dir.display()
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The command as the manual describes it: built, so that every subcommand knows its full
/// name (`tessera pd add` in its synopsis, `tessera-pd-add` as its page), and without clap's
/// `help` subcommands, which have no page to point to.
fn for_manual() -> clap::Command {
    fn without_help(command: clap::Command) -> clap::Command {
        command
            .disable_help_subcommand(true)
            .mut_subcommands(without_help)
    }
    let mut command = without_help(Cli::command());
    command.build();
    command
}

/// One page in roff; the daemon's pages say where its files are.
fn page(command: &clap::Command) -> Result<Vec<u8>, Failure> {
    let mut page = Vec::new();
    // Subcommands have no version of their own: every page names the package's.
    clap_mangen::Man::new(command.clone())
        .source(format!("tessera {}", env!("CARGO_PKG_VERSION")))
        .render(&mut page)?;
    if matches!(command.get_name(), "tessera" | "serve") {
        page.extend_from_slice(FILES.as_bytes());
    }
    Ok(page)
}

/// Writes `tessera.1` for `command` and, recursively, `tessera-sub.1` for its subcommands;
/// returns how many pages it wrote.
fn write_pages(command: &clap::Command, dir: &Path) -> Result<usize, Failure> {
    let name = command
        .get_display_name()
        .unwrap_or_else(|| command.get_name());
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, page(command)?)
        .map_err(|error| Failure::Other(format!("cannot write {}: {error}", path.display())))?;
    let mut written = 1;
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        written += write_pages(sub, dir)?;
    }
    Ok(written)
}
