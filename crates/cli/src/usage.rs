//! Turns clap's multi-line errors into the one line the CLI promises:
//! `tessera: --chunk 3000 is not a power of two between 4K and 1M`.

use clap::CommandFactory;
use clap::error::{ContextKind, ContextValue, Error, ErrorKind};

use crate::args::Cli;

fn context_text(error: &Error, kind: ContextKind) -> Option<String> {
    match error.get(kind)? {
        ContextValue::String(text) => Some(text.clone()),
        ContextValue::Strings(texts) => Some(texts.join(", ")),
        ContextValue::StyledStr(text) => Some(text.to_string()),
        ContextValue::StyledStrs(texts) => Some(
            texts
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ContextValue::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

fn context_list(error: &Error, kind: ContextKind) -> Vec<String> {
    match error.get(kind) {
        Some(ContextValue::Strings(texts)) => texts.clone(),
        Some(ContextValue::String(text)) => vec![text.clone()],
        Some(ContextValue::StyledStrs(texts)) => texts.iter().map(ToString::to_string).collect(),
        _ => Vec::new(),
    }
}

/// The command words (`tessera dg create`) from the usage line clap attaches to its errors.
fn command_path(error: &Error) -> Vec<String> {
    // Errors that show help carry the usage in their rendered text rather than in a context.
    let usage = context_text(error, ContextKind::Usage).unwrap_or_else(|| error.to_string());
    let line = usage
        .lines()
        .find_map(|line| line.trim().strip_prefix("Usage:"))
        .unwrap_or("tessera");
    line.split_whitespace()
        .take_while(|word| {
            word.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !word.starts_with('-')
        })
        .map(str::to_string)
        .collect()
}

/// The names of the subcommands of the command at `path` (`["tessera", "pd"]`).
fn subcommands(path: &[String]) -> Vec<String> {
    let mut command = Cli::command();
    for word in path.iter().skip(1) {
        match command.find_subcommand(word) {
            Some(sub) => command = sub.clone(),
            None => return Vec::new(),
        }
    }
    command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
        .map(|sub| sub.get_name().to_string())
        .collect()
}

/// The option's name (`--chunk`) from clap's `--chunk <SIZE>`; `None` for a positional.
fn option_name(arg: &str) -> Option<&str> {
    let name = arg.split([' ', '=']).next()?;
    name.starts_with('-').then_some(name)
}

/// clap names a required group `<--a <N>|--b <M>>`; say `one of --a, --b` instead.
fn readable_group(arg: &str) -> String {
    match arg
        .strip_prefix('<')
        .and_then(|inner| inner.strip_suffix('>'))
    {
        Some(inner) if inner.contains('|') => {
            let names: Vec<&str> = inner
                .split('|')
                .filter_map(|member| member.split_whitespace().next())
                .collect();
            format!("one of {}", names.join(", "))
        }
        _ => arg.to_string(),
    }
}

/// One line (without the `tessera: ` prefix) saying what is wrong with the command line.
pub fn one_line(error: &Error) -> String {
    let path = command_path(error);
    let command = path.join(" ");
    let help = format!("see `{command} --help`");
    let arg = context_text(error, ContextKind::InvalidArg).unwrap_or_default();
    let value = context_text(error, ContextKind::InvalidValue).unwrap_or_default();
    match error.kind() {
        ErrorKind::ValueValidation => {
            let reason = std::error::Error::source(error)
                .map(ToString::to_string)
                .unwrap_or_else(|| format!("{value} is not valid"));
            match option_name(&arg) {
                Some(option) => format!("{option} {reason}"),
                None => reason,
            }
        }
        ErrorKind::InvalidValue => {
            let valid = context_list(error, ContextKind::ValidValue).join(", ");
            let shown = if value.is_empty() {
                "''".to_string()
            } else {
                value
            };
            match option_name(&arg) {
                Some(option) => format!("{option} {shown} is not one of: {valid}"),
                None => format!("{arg} {shown} is not one of: {valid}"),
            }
        }
        ErrorKind::MissingRequiredArgument => {
            let missing = context_list(error, ContextKind::InvalidArg)
                .iter()
                .map(|arg| readable_group(arg))
                .collect::<Vec<_>>()
                .join(" and ");
            format!("`{command}` needs {missing} ({help})")
        }
        ErrorKind::UnknownArgument => {
            let suggestion = context_text(error, ContextKind::SuggestedArg)
                .map(|s| format!("did you mean '{s}'? "))
                .unwrap_or_default();
            format!("unexpected argument '{arg}' for `{command}` ({suggestion}{help})")
        }
        ErrorKind::InvalidSubcommand => {
            let unknown = context_text(error, ContextKind::InvalidSubcommand).unwrap_or_default();
            let suggestion = context_text(error, ContextKind::SuggestedSubcommand)
                .map(|s| format!("did you mean '{s}'? "))
                .unwrap_or_default();
            format!(
                "unknown command '{unknown}' for `{command}` ({suggestion}commands: {})",
                subcommands(&path).join(", ")
            )
        }
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            format!(
                "`{command}` needs a command: {} ({help})",
                subcommands(&path).join(", ")
            )
        }
        ErrorKind::ArgumentConflict => {
            let prior = context_text(error, ContextKind::PriorArg).unwrap_or_default();
            format!("{arg} cannot be used with {prior} ({help})")
        }
        _ => {
            let rendered = error.to_string();
            let first = rendered
                .lines()
                .next()
                .unwrap_or("invalid command line")
                .trim_start_matches("error: ")
                .to_string();
            format!("{first} ({help})")
        }
    }
}
