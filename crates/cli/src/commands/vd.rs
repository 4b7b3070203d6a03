//! `tessera vd ...`.

use std::process::ExitCode;

use tessera_api::CreateVd;
use tessera_api::model::{ExportUblk, SetVd};

use super::{Context, Failure};
use crate::args::VdCommand;
use crate::output;

pub fn run(context: &mut Context<'_>, command: VdCommand) -> Result<ExitCode, Failure> {
    match command {
        VdCommand::Create {
            dg,
            size,
            name,
            thin,
            compression,
            physical,
            low_space_percent,
            allow,
            read_only,
            multi_conn,
            tls_required,
            json,
        } => {
            let body = CreateVd {
                dg: context.dg_id(&dg)?,
                name,
                size_bytes: size,
                thin,
                compression,
                physical_bytes: physical,
                low_space_percent,
                allow,
                read_only,
                multi_conn,
                tls_required,
            };
            let vd = context.client.create_vd(&body)?;
            if json.json {
                context.json(&vd)?;
            } else {
                let line = format!("{}\n", vd.nbd_uri);
                context.print(&line)?;
            }
        }
        VdCommand::Set {
            name,
            allow,
            allow_any,
            read_only,
            multi_conn,
            tls_required,
            physical,
            json,
        } => {
            let body = SetVd {
                allow: (allow_any || !allow.is_empty()).then_some(allow),
                read_only,
                multi_conn,
                tls_required,
                physical_bytes: physical,
            };
            let vd = context.client.set_vd(&name, &body)?;
            if json.json {
                context.json(&vd)?;
            } else {
                let text = output::describe_vd(context.style, &vd);
                context.print(&text)?;
            }
        }
        VdCommand::List(flag) => {
            let vds = context.client.list_vds()?;
            if flag.json {
                context.json(&vds)?;
            } else {
                let text = output::list_vds(context.style, &vds);
                context.print(&text)?;
            }
        }
        VdCommand::Describe { name, json } => {
            let vd = context.client.get_vd(&name)?;
            if json.json {
                context.json(&vd)?;
            } else {
                let text = output::describe_vd(context.style, &vd);
                context.print(&text)?;
            }
        }
        VdCommand::Export {
            name,
            ublk: _,
            queues,
            queue_depth,
            json,
        } => {
            let body = ExportUblk {
                queues,
                queue_depth,
            };
            let vd = context.client.export_vd_ublk(&name, &body)?;
            if json.json {
                context.json(&vd)?;
            } else {
                let device = vd
                    .ublk
                    .as_ref()
                    .map_or("(no device)", |u| u.device.as_str());
                let line = format!("{device}\n");
                context.print(&line)?;
            }
        }
        VdCommand::Unexport { name, ublk: _ } => {
            context.client.unexport_vd_ublk(&name)?;
            let line = format!("removed the ublk device of virtual drive {name}\n");
            context.print(&line)?;
        }
        VdCommand::Delete { name, force } => {
            context.client.delete_vd(&name, force)?;
            let line = format!("deleted virtual drive {name}\n");
            context.print(&line)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
