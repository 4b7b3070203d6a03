//! Colour for states, only on a terminal (and never with `NO_COLOR` or `TERM=dumb`).

use std::io::IsTerminal;

/// Whether output goes to a person at a terminal: colour and progress bars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// Use ANSI colours.
    pub colour: bool,
}

impl Style {
    /// No colour (pipes, files, tests).
    pub const PLAIN: Style = Style { colour: false };

    /// Colour when standard output is a terminal that takes it.
    pub fn for_stdout() -> Style {
        let dumb = std::env::var_os("TERM").is_some_and(|term| term == "dumb");
        let refused = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
        Style {
            colour: std::io::stdout().is_terminal() && !dumb && !refused,
        }
    }

    /// `text` in the colour that a state name calls for: green when all is well, yellow while
    /// redundancy is reduced or being restored, red when something is lost.
    pub fn state(self, text: &str) -> String {
        let code = match text {
            "optimal" | "online" => "32",
            "degraded" | "rebuilding" | "resyncing" | "initializing" | "hot_spare" | "warning" => {
                "33"
            }
            "failed" | "missing" | "error" | "critical" => "31",
            _ => return text.to_string(),
        };
        self.paint(code, text)
    }

    /// `text` in bold.
    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_when_asked() {
        assert_eq!(Style::PLAIN.state("failed"), "failed");
        let colour = Style { colour: true };
        assert_eq!(colour.state("failed"), "\x1b[31mfailed\x1b[0m");
        assert_eq!(colour.state("optimal"), "\x1b[32moptimal\x1b[0m");
        assert_eq!(colour.state("degraded"), "\x1b[33mdegraded\x1b[0m");
        assert_eq!(colour.state("unconfigured"), "unconfigured");
    }
}
