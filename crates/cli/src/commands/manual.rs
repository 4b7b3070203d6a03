//! `tessera man`: manual pages generated from the command-line definition, so they never
//! disagree with `--help`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;

use super::{Context, Failure};
use crate::args::Cli;

/// Prints `tessera(1)`, or writes a page for every command and subcommand into `dir`.
pub fn run(context: &mut Context<'_>, dir: Option<PathBuf>) -> Result<ExitCode, Failure> {
    let command = Cli::command();
    match dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command).render(&mut page)?;
            context.out.write_all(&page)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|error| {
                Failure::Other(format!("cannot create {}: {error}", dir.display()))
            })?;
            let written = write_pages(&command, "tessera", &dir)?;
            context.print(&format!(
                "{written} manual pages written to {}\n",
                dir.display()
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `name.1` for `command` and, recursively, `name-sub.1` for its subcommands.
fn write_pages(command: &clap::Command, name: &str, dir: &Path) -> Result<usize, Failure> {
    let command = command.clone().name(name.to_string());
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone()).render(&mut page)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, page)
        .map_err(|error| Failure::Other(format!("cannot write {}: {error}", path.display())))?;
    let mut written = 1;
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        written += write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(written)
}
