//! `tessera events`.

use std::process::ExitCode;
use std::time::Duration;

use super::{Context, Failure};
use crate::args::EventsArgs;
use crate::output;

pub fn run(context: &mut Context<'_>, args: EventsArgs) -> Result<ExitCode, Failure> {
    let events = context.client.events(args.since)?;
    if !args.follow {
        if args.json {
            context.json(&events)?;
        } else {
            let text = output::list_events(context.style, &events);
            context.print(&text)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Following prints each event as it arrives: JSON Lines with --json, since an array
    // cannot be streamed.
    let mut since = args.since;
    let mut batch = events;
    loop {
        for event in &batch {
            if args.json {
                let line = serde_json::to_string(event)
                    .map_err(|error| Failure::Other(format!("cannot encode JSON: {error}")))?;
                context.print(&format!("{line}\n"))?;
            } else {
                let line = output::event_line(context.style, event);
                context.print(&line)?;
            }
            since = since.max(event.seq);
        }
        context.out.flush()?;
        std::thread::sleep(Duration::from_millis(args.poll_ms));
        batch = context.client.events(since)?;
    }
}
