//! Names of drive groups and virtual drives, and how a path names a drive group.

use std::fmt;

/// Longest name of a drive group or virtual drive, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Checks a drive group or virtual drive name: 1 to 64 of `A-Z a-z 0-9 . _ -`, starting with a
/// letter or digit, and not all digits (so `/v1/dgs/7` always means the group with id 7).
/// Virtual drive names are NBD export names and appear in URIs and paths; this keeps them safe
/// in all three without quoting.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a name cannot be empty".to_string());
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "name '{}…' is longer than {MAX_NAME_BYTES} bytes",
            name.chars().take(16).collect::<String>()
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if let Some(bad) = name.chars().find(|&c| !allowed(c)) {
        return Err(format!(
            "name '{}' contains {bad:?}; use letters, digits, '.', '_' and '-'",
            name.escape_default()
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!("name '{name}' must start with a letter or a digit"));
    }
    if name.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "name '{name}' is all digits, which would read as an id"
        ));
    }
    Ok(())
}

/// How a request names a drive group: by id (all digits) or by name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DgRef {
    /// The group's numeric id.
    Id(u32),
    /// The group's name.
    Name(String),
}

impl DgRef {
    /// Reads an id-or-name path segment. All digits is an id (names are never all digits).
    pub fn parse(text: &str) -> Result<DgRef, String> {
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse::<u32>()
                .map(DgRef::Id)
                .map_err(|_| format!("drive group id {text} is out of range"));
        }
        validate_name(text)?;
        Ok(DgRef::Name(text.to_string()))
    }

    /// Whether this names the group with `id` and `name`.
    pub fn matches(&self, id: u32, name: &str) -> bool {
        match self {
            DgRef::Id(wanted) => *wanted == id,
            DgRef::Name(wanted) => wanted == name,
        }
    }
}

impl fmt::Display for DgRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DgRef::Id(id) => write!(f, "{id}"),
            DgRef::Name(name) => f.write_str(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accepted_and_refused() {
        for good in ["vd0", "dg-fast", "a", "0a", "x.y_z-1", &"n".repeat(64)] {
            assert_eq!(validate_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "7",
            "0042",
            "-x",
            ".x",
            "_x",
            "a b",
            "a/b",
            "é",
            &"n".repeat(65),
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn dg_ref_reads_ids_and_names() {
        assert_eq!(DgRef::parse("0"), Ok(DgRef::Id(0)));
        assert_eq!(DgRef::parse("4294967295"), Ok(DgRef::Id(u32::MAX)));
        assert!(DgRef::parse("4294967296").is_err());
        assert_eq!(DgRef::parse("dg0"), Ok(DgRef::Name("dg0".to_string())));
        assert!(DgRef::parse("").is_err());
        assert!(DgRef::parse("a/b").is_err());
        assert!(DgRef::Id(3).matches(3, "x"));
        assert!(!DgRef::Id(3).matches(4, "3"));
        assert!(DgRef::Name("x".into()).matches(9, "x"));
    }
}
