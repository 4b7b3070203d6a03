//! `tessera dg ...`.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use tessera_api::{CreateDg, DgRef, DgState, DgView, JournalMode, RaidLevel, ScrubDg, UpdateDg};
use tessera_raid::geometry::{Level, MAX_MEMBERS};

use super::{Context, Failure};
use crate::args::DgCommand;
use crate::output;
use crate::progress::Progress;
use crate::units::format_unix_ms;
use crate::values::JournalChoice;

pub fn run(context: &mut Context<'_>, command: DgCommand) -> Result<ExitCode, Failure> {
    match command {
        DgCommand::Create {
            level,
            chunk,
            name,
            journal,
            pds,
            json,
        } => {
            check_members(level, &pds)?;
            let (journal, journal_pd) = match journal {
                None => (None, None),
                Some(JournalChoice::Mode(mode)) => (Some(mode), None),
                Some(JournalChoice::Device(pd)) => {
                    if pds.contains(&pd) {
                        return Err(Failure::Usage(format!(
                            "physical drive {pd} cannot be both a member and the journal drive"
                        )));
                    }
                    (Some(JournalMode::AlwaysOn), Some(pd))
                }
            };
            let body = CreateDg {
                level,
                chunk_bytes: Some(chunk),
                pds,
                name,
                journal,
                journal_pd,
            };
            let dg = context.client.create_dg(&body)?;
            show(context, &dg, json.json)?;
        }
        DgCommand::ImportMd {
            devices,
            name,
            json,
        } => super::md_import::run(context, devices, name, json.json)?,
        DgCommand::List(flag) => {
            let dgs = context.client.list_dgs()?;
            if flag.json {
                context.json(&dgs)?;
            } else {
                let text = output::list_dgs(context.style, &dgs);
                context.print(&text)?;
            }
        }
        DgCommand::Describe {
            dg,
            wait,
            poll_ms,
            json,
        } => {
            let mut view = context.client.get_dg(&dg)?;
            if wait {
                view = follow(context, &dg, view, poll_ms, json.json, busy)?;
            }
            show(context, &view, json.json)?;
            if wait && view.state == DgState::Failed {
                return Ok(ExitCode::from(1));
            }
        }
        DgCommand::Delete { dg, force } => {
            context.client.delete_dg(&dg, force)?;
            let line = format!("deleted drive group {dg}\n");
            context.print(&line)?;
        }
        DgCommand::Set {
            dg,
            rebuild_rate,
            scrub_rate,
            rebuild_latency_target,
            journal,
            json,
        } => {
            let body = UpdateDg {
                rebuild_rate_percent: rebuild_rate,
                scrub_rate_percent: scrub_rate,
                journal,
                rebuild_latency_target_us: rebuild_latency_target,
            };
            let view = context.client.update_dg(&dg, &body)?;
            if json.json {
                context.json(&view)?;
            } else {
                let mut line = format!(
                    "drive group {} ({}): rebuild rate {}%",
                    view.id, view.name, view.rebuild_rate_percent
                );
                if let Some(rate) = view.scrub_rate_percent {
                    line.push_str(&format!(", scrub rate {rate}%"));
                }
                line.push_str(&format!(", journal {}\n", view.journal.mode));
                context.print(&line)?;
            }
        }
        DgCommand::Scrub {
            dg,
            repair,
            wait,
            poll_ms,
            json,
        } => return scrub(context, &dg, repair, wait, poll_ms, json.json),
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses member lists the level cannot take, before asking the daemon.
fn check_members(level: RaidLevel, pds: &[u32]) -> Result<(), Failure> {
    for (index, pd) in pds.iter().enumerate() {
        if pds[..index].contains(pd) {
            return Err(Failure::Usage(format!(
                "physical drive {pd} is listed twice"
            )));
        }
    }
    let minimum = Level::from_number(level.number())
        .expect("every API level is an engine level")
        .min_members();
    if pds.len() < minimum || pds.len() > MAX_MEMBERS {
        return Err(Failure::Usage(format!(
            "{level} needs {minimum} to {MAX_MEMBERS} members, got {}",
            pds.len()
        )));
    }
    Ok(())
}

fn show(context: &mut Context<'_>, view: &DgView, json: bool) -> Result<(), Failure> {
    if json {
        context.json(view)
    } else {
        let text = output::describe_dg(context.style, view);
        context.print(&text)
    }
}

/// Whether background work that `dg describe --wait` follows is still running.
fn busy(view: &DgView) -> bool {
    view.rebuild.is_some()
        || view.scrub.is_some()
        || matches!(
            view.state,
            DgState::Rebuilding | DgState::Resyncing | DgState::Initializing
        )
}

fn scrubbing(view: &DgView) -> bool {
    view.scrub.is_some()
}

/// Polls the group while `running` says so, showing progress; returns its final view. With
/// `json`, progress goes to standard error so standard output stays one JSON document.
fn follow(
    context: &mut Context<'_>,
    dg: &DgRef,
    mut view: DgView,
    poll_ms: u64,
    json: bool,
    running: fn(&DgView) -> bool,
) -> Result<DgView, Failure> {
    let stderr = io::stderr();
    let terminal = if json {
        io::IsTerminal::is_terminal(&stderr)
    } else {
        context.terminal
    };
    let mut progress = Progress::new(terminal);
    let mut stderr = stderr.lock();
    while running(&view) {
        let out: &mut dyn Write = if json { &mut stderr } else { &mut *context.out };
        progress.update(out, &view)?;
        std::thread::sleep(Duration::from_millis(poll_ms));
        view = context.client.get_dg(dg)?;
    }
    let out: &mut dyn Write = if json { &mut stderr } else { &mut *context.out };
    progress.finish(out)?;
    Ok(view)
}

fn scrub(
    context: &mut Context<'_>,
    dg: &DgRef,
    repair: bool,
    wait: bool,
    poll_ms: u64,
    json: bool,
) -> Result<ExitCode, Failure> {
    let started = context.client.scrub_dg(dg, &ScrubDg { repair })?;
    let mode = if repair { "repair" } else { "check" };
    if !wait {
        if json {
            context.json(&started)?;
        } else {
            let line = format!(
                "scrub ({mode}) of drive group {} ({}) started\n",
                started.id, started.name
            );
            context.print(&line)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let view = follow(context, dg, started, poll_ms, json, scrubbing)?;
    if json {
        context.json(&view)?;
    }
    let Some(result) = &view.last_scrub else {
        return Err(Failure::Other(format!(
            "the scrub of drive group {} ended without a result",
            view.id
        )));
    };
    if !json {
        let line = format!(
            "scrub ({mode}) of drive group {} ({}) {} {}: {} mismatches, {} repaired, {} unrecoverable\n",
            view.id,
            view.name,
            if result.completed {
                "finished"
            } else {
                "stopped"
            },
            format_unix_ms(result.finished_unix_ms),
            result.mismatches,
            result.repaired,
            result.unrecoverable
        );
        context.print(&line)?;
    }
    Ok(if result.completed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
