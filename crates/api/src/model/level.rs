//! RAID levels on the wire: `"raid5"` in answers; `5` or `"raid5"` accepted in requests.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A RAID level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RaidLevel {
    /// Striping, no redundancy.
    Raid0,
    /// Mirroring over every member.
    Raid1,
    /// Striped mirrors ("near 2").
    Raid10,
    /// Striping with one parity chunk per stripe.
    Raid5,
    /// Striping with two parity chunks (P and Q) per stripe.
    Raid6,
}

impl RaidLevel {
    /// Every level, in the order the CLI lists them.
    pub const ALL: [RaidLevel; 5] = [
        RaidLevel::Raid0,
        RaidLevel::Raid1,
        RaidLevel::Raid10,
        RaidLevel::Raid5,
        RaidLevel::Raid6,
    ];

    /// The level's number (`10` for RAID10).
    pub fn number(self) -> u32 {
        match self {
            RaidLevel::Raid0 => 0,
            RaidLevel::Raid1 => 1,
            RaidLevel::Raid10 => 10,
            RaidLevel::Raid5 => 5,
            RaidLevel::Raid6 => 6,
        }
    }

    /// The level with this number.
    pub fn from_number(number: u32) -> Option<RaidLevel> {
        RaidLevel::ALL
            .into_iter()
            .find(|level| level.number() == number)
    }

    /// Reads `5`, `raid5` or `RAID5`.
    pub fn parse(text: &str) -> Option<RaidLevel> {
        let lower = text.to_ascii_lowercase();
        let digits = lower.strip_prefix("raid").unwrap_or(&lower);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().and_then(RaidLevel::from_number)
    }
}

impl fmt::Display for RaidLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raid{}", self.number())
    }
}

impl Serialize for RaidLevel {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The two spellings a request may use.
#[derive(Deserialize)]
#[serde(untagged)]
enum LevelSpelling {
    Number(u64),
    Text(String),
}

impl<'de> Deserialize<'de> for RaidLevel {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let level = match LevelSpelling::deserialize(deserializer)? {
            LevelSpelling::Number(number) => {
                u32::try_from(number).ok().and_then(RaidLevel::from_number)
            }
            LevelSpelling::Text(text) => RaidLevel::parse(&text),
        };
        level.ok_or_else(|| {
            serde::de::Error::custom("unknown RAID level (expected 0, 1, 10, 5 or 6)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_read_and_written() {
        for (text, level) in [
            ("0", RaidLevel::Raid0),
            ("raid1", RaidLevel::Raid1),
            ("RAID10", RaidLevel::Raid10),
            ("5", RaidLevel::Raid5),
            ("raid6", RaidLevel::Raid6),
        ] {
            assert_eq!(RaidLevel::parse(text), Some(level), "{text}");
        }
        for bad in ["", "raid", "2", "raid-5", "+5", "05x", "raid4"] {
            assert_eq!(RaidLevel::parse(bad), None, "{bad}");
        }
        assert_eq!(
            serde_json::to_string(&RaidLevel::Raid10).unwrap(),
            r#""raid10""#
        );
        let from_number: RaidLevel = serde_json::from_str("6").unwrap();
        assert_eq!(from_number, RaidLevel::Raid6);
        let from_text: RaidLevel = serde_json::from_str(r#""raid0""#).unwrap();
        assert_eq!(from_text, RaidLevel::Raid0);
        assert!(serde_json::from_str::<RaidLevel>("3").is_err());
        assert!(serde_json::from_str::<RaidLevel>("-1").is_err());
        assert!(serde_json::from_str::<RaidLevel>("true").is_err());
    }
}
