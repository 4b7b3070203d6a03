//! `tessera pd ...`.

use std::process::ExitCode;

use tessera_api::{CreatePd, DgRef, PdView, ReplacePd};

use super::{Context, Failure};
use crate::args::PdCommand;
use crate::output;

pub fn run(context: &mut Context<'_>, command: PdCommand) -> Result<ExitCode, Failure> {
    match command {
        PdCommand::Add {
            paths,
            spare,
            spare_for,
            json,
        } => add(context, &paths, spare, spare_for.as_ref(), json)?,
        PdCommand::List(flag) => {
            let pds = context.client.list_pds()?;
            if flag.json {
                context.json(&pds)?;
            } else {
                let text = output::list_pds(context.style, &pds);
                context.print(&text)?;
            }
        }
        PdCommand::Describe { pd, json } => {
            let view = context.client.get_pd(pd)?;
            show(context, &view, json.json)?;
        }
        PdCommand::Remove { pds } => remove(context, &pds)?,
        PdCommand::Fail { pd, json } => {
            let view = context.client.fail_pd(pd)?;
            if json.json {
                context.json(&view)?;
            } else {
                report_state(context, &view)?;
            }
        }
        PdCommand::Online { pd, json } => {
            let view = context.client.online_pd(pd)?;
            if json.json {
                context.json(&view)?;
            } else {
                report_state(context, &view)?;
            }
        }
        PdCommand::Replace { old, new, json } => {
            if old == new {
                return Err(Failure::Usage(format!(
                    "physical drive {old} cannot replace itself"
                )));
            }
            let dg = context.client.replace_pd(old, &ReplacePd { new_pd: new })?;
            if json.json {
                context.json(&dg)?;
            } else {
                let line = format!("{}\n", output::dg_progress_line(&dg));
                context.print(&line)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn show(context: &mut Context<'_>, view: &PdView, json: bool) -> Result<(), Failure> {
    if json {
        context.json(view)
    } else {
        let text = output::describe_pd(context.style, view);
        context.print(&text)
    }
}

/// Adds every path, or none: if one is refused, the drives added before it are removed again.
fn add(
    context: &mut Context<'_>,
    paths: &[String],
    spare: bool,
    spare_for: Option<&DgRef>,
    json: bool,
) -> Result<(), Failure> {
    for (index, path) in paths.iter().enumerate() {
        if paths[..index].contains(path) {
            return Err(Failure::Usage(format!("{path} is listed twice")));
        }
    }
    let spare_for = spare_for.map(|dg| context.dg_id(dg)).transpose()?;
    let mut added: Vec<PdView> = Vec::new();
    for path in paths {
        let body = CreatePd {
            path: path.clone(),
            spare: spare || spare_for.is_some(),
            spare_for,
        };
        match context.client.create_pd(&body) {
            Ok(view) => added.push(view),
            Err(error) => {
                let undone: Vec<String> = added
                    .iter()
                    .filter(|view| context.client.delete_pd(view.id).is_ok())
                    .map(|view| view.id.to_string())
                    .collect();
                let note = if undone.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (removed again the drives added before it: {})",
                        undone.join(", ")
                    )
                };
                return Err(Failure::Other(format!("cannot add {path}: {error}{note}")));
            }
        }
    }
    if json {
        context.json(&added)
    } else {
        let ids: String = added.iter().map(|view| format!("{}\n", view.id)).collect();
        context.print(&ids)
    }
}

/// Removes every drive, after checking that all of them can be removed.
fn remove(context: &mut Context<'_>, pds: &[u32]) -> Result<(), Failure> {
    for (index, id) in pds.iter().enumerate() {
        if pds[..index].contains(id) {
            return Err(Failure::Usage(format!(
                "physical drive {id} is listed twice"
            )));
        }
    }
    for id in pds {
        let view = context.client.get_pd(*id)?;
        if let Some(dg) = view.dg {
            return Err(Failure::Other(format!(
                "physical drive {id} is a member of drive group {dg}; nothing was removed"
            )));
        }
    }
    for id in pds {
        context.client.delete_pd(*id)?;
        let line = format!("removed physical drive {id}\n");
        context.print(&line)?;
    }
    Ok(())
}

/// `physical drive 3: failed` and, for a member, its group's state.
fn report_state(context: &mut Context<'_>, view: &PdView) -> Result<(), Failure> {
    let mut line = format!(
        "physical drive {}: {}",
        view.id,
        context.style.state(view.state.name())
    );
    if let Some(dg) = view.dg {
        let group = context.client.get_dg(&DgRef::Id(dg))?;
        line.push_str(&format!(
            "; drive group {} ({}): {}",
            group.id,
            group.name,
            context.style.state(group.state.name())
        ));
    }
    line.push('\n');
    context.print(&line)
}
