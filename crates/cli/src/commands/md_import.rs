//! `tessera dg import-md DEVICE...`: adopt an md array with its data in place.

use tessera_api::ImportMd;

use super::{Context, Failure};
use crate::output;

pub fn run(
    context: &mut Context<'_>,
    devices: Vec<String>,
    name: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let imported = context.client.import_md(&ImportMd { devices, name })?;
    if json {
        return context.json(&imported);
    }
    let mut text = format!(
        "adopted md array {} ({}) as drive group {} ({}) and virtual drive {}\n\n",
        imported.md_name, imported.md_uuid, imported.dg.id, imported.dg.name, imported.vd.name
    );
    text.push_str(&output::describe_dg(context.style, &imported.dg));
    text.push('\n');
    text.push_str(&output::describe_vd(context.style, &imported.vd));
    context.print(&text)
}
