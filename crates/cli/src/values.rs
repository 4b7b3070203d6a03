//! Parsers for argument values. Each error is the rest of one sentence: the caller prefixes the
//! option's name (`--chunk 3000 is not a power of two ...`); errors of positional arguments
//! are whole sentences.

use tessera_api::{Compression, DgRef, JournalMode, RaidLevel, validate_name};
use tessera_raid::geometry::{MAX_CHUNK_BYTES, MIN_CHUNK_BYTES, SECTOR_BYTES};

use crate::units::{format_size_short, parse_size};

/// `--journal`: a mode, or a dedicated physical drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalChoice {
    /// A journal mode with the journal on the members.
    Mode(JournalMode),
    /// A dedicated journal drive (mode `always_on`).
    Device(u32),
}

/// A physical drive path or URI.
pub fn pd_path(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("a physical drive path cannot be empty".to_string());
    }
    Ok(text.to_string())
}

/// A physical drive id (positional).
pub fn pd_id(text: &str) -> Result<u32, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "physical drive id '{}' is not a number (see `tessera pd list`)",
            text.escape_default()
        ));
    }
    text.parse()
        .map_err(|_| format!("physical drive id {text} is too large"))
}

/// A drive group id or name (positional or `--spare-for`).
pub fn dg_ref(text: &str) -> Result<DgRef, String> {
    DgRef::parse(text).map_err(|reason| format!("drive group {}: {reason}", quoted(text)))
}

/// A drive group or virtual drive name.
pub fn name(text: &str) -> Result<String, String> {
    validate_name(text)?;
    Ok(text.to_string())
}

/// `--level`.
pub fn level(text: &str) -> Result<RaidLevel, String> {
    RaidLevel::parse(text)
        .ok_or_else(|| format!("{} is not a RAID level (0, 1, 10, 5 or 6)", quoted(text)))
}

/// `--chunk`.
pub fn chunk(text: &str) -> Result<u64, String> {
    let bytes = parse_size(text)?;
    if !bytes.is_power_of_two() || !(MIN_CHUNK_BYTES..=MAX_CHUNK_BYTES).contains(&bytes) {
        return Err(format!(
            "{text} is not a power of two between {} and {}",
            format_size_short(MIN_CHUNK_BYTES),
            format_size_short(MAX_CHUNK_BYTES)
        ));
    }
    Ok(bytes)
}

/// `--size` of a virtual drive.
pub fn vd_size(text: &str) -> Result<u64, String> {
    let bytes = parse_size(text)?;
    if bytes == 0 {
        return Err(format!("{text} is not a positive size"));
    }
    if !bytes.is_multiple_of(SECTOR_BYTES) {
        return Err(format!("{text} is not a multiple of {SECTOR_BYTES} bytes"));
    }
    Ok(bytes)
}

/// `--rebuild-rate`, `--scrub-rate`.
pub fn rate(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(rate) if (1..=100).contains(&rate) => Ok(rate),
        _ => Err(format!(
            "{} is not a percentage from 1 to 100",
            quoted(text)
        )),
    }
}

/// `events --since`: an event sequence number.
pub fn sequence(text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("{} is not an event sequence number", quoted(text)))
}

/// `--poll-ms`.
pub fn poll_ms(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(ms) if (10..=60_000).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "{} is not a number of milliseconds from 10 to 60000",
            quoted(text)
        )),
    }
}

fn journal_modes() -> String {
    JournalMode::ALL.map(JournalMode::name).join(", ")
}

/// `dg set --journal`.
pub fn journal_mode(text: &str) -> Result<JournalMode, String> {
    JournalMode::parse(text).ok_or_else(|| {
        format!(
            "{} is not a journal mode ({})",
            quoted(text),
            journal_modes()
        )
    })
}

/// `dg create --journal`: a mode or a physical drive id.
pub fn journal_choice(text: &str) -> Result<JournalChoice, String> {
    if let Some(mode) = JournalMode::parse(text) {
        return Ok(JournalChoice::Mode(mode));
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return pd_id(text).map(JournalChoice::Device);
    }
    Err(format!(
        "{} is not a journal mode ({}) or a physical drive id",
        quoted(text),
        journal_modes()
    ))
}

/// `vd create --compression`.
/// An export access rule, in its canonical form.
pub fn access_rule(text: &str) -> Result<String, String> {
    text.parse::<tessera_api::model::AccessRule>()
        .map(|rule| rule.to_string())
}

/// The longest busy-poll window, in microseconds (0.1 s).
const BUSY_POLL_US_MAX: u32 = 100_000;

/// A busy-poll window in microseconds, from the command line.
pub fn busy_poll_us(text: &str) -> Result<u32, String> {
    let value = text
        .parse::<u32>()
        .map_err(|_| format!("{text:?} is not a whole number of microseconds"))?;
    busy_poll_us_in_range(value)
}

/// A busy-poll window within the limit.
pub fn busy_poll_us_in_range(value: u32) -> Result<u32, String> {
    if value > BUSY_POLL_US_MAX {
        return Err(format!(
            "{value} is above the limit, {BUSY_POLL_US_MAX} (0.1 s)"
        ));
    }
    Ok(value)
}

/// An event severity name.
pub fn severity(text: &str) -> Result<String, String> {
    match text {
        "info" | "warning" | "error" | "critical" => Ok(text.to_string()),
        other => Err(format!(
            "{other:?} is not one of: info, warning, error, critical"
        )),
    }
}

/// `on` or `off`.
pub fn on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{text:?} is not on or off")),
    }
}

pub fn compression(text: &str) -> Result<Compression, String> {
    Compression::parse(text).ok_or_else(|| {
        format!(
            "{} is not a compression ({})",
            quoted(text),
            Compression::ALL.map(Compression::name).join(", ")
        )
    })
}

/// `bench parity --kernel`: a kernel this CPU runs.
pub fn kernel(text: &str) -> Result<String, String> {
    // `gpu` selects the parity engine rows (the CPU engine beside every GPU adapter).
    if text == "gpu" {
        return Ok(text.to_string());
    }
    tessera_parity::kernel_by_name(text)
        .map(|kernel| kernel.name().to_string())
        .map_err(|error| format!("{}: {error} (or gpu for the engine rows)", quoted(text)))
}

/// `bench parity --op`.
pub fn bench_op(text: &str) -> Result<String, String> {
    let names: Vec<&str> = tessera_parity_bench::Op::ALL
        .iter()
        .map(|op| op.name())
        .collect();
    if names.contains(&text) {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{} is not a benchmark operation ({})",
            quoted(text),
            names.join(", ")
        ))
    }
}

/// `--nbd-listen`, `--http-listen`: `HOST:PORT` (an IPv6 host in brackets).
pub fn listen_address(text: &str) -> Result<String, String> {
    let invalid = || format!("{} is not a HOST:PORT address", quoted(text));
    let (host, port) = text.rsplit_once(':').ok_or_else(invalid)?;
    let host_ok = !host.is_empty()
        && (host.starts_with('[') && host.ends_with(']') || !host.contains(':'))
        && !host.contains(char::is_whitespace);
    let port_ok =
        !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok();
    if host_ok && port_ok {
        Ok(text.to_string())
    } else {
        Err(invalid())
    }
}

/// `text` as typed, or quoted when it is empty or holds spaces or odd characters.
fn quoted(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '\'' && c != '"');
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.escape_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes() {
        assert_eq!(chunk("64K"), Ok(65_536));
        assert_eq!(chunk("4k"), Ok(4096));
        assert_eq!(chunk("1M"), Ok(1 << 20));
        assert_eq!(chunk("4096"), Ok(4096));
        assert_eq!(
            chunk("3000"),
            Err("3000 is not a power of two between 4K and 1M".to_string())
        );
        assert!(chunk("2K").is_err());
        assert!(chunk("2M").is_err());
        assert!(chunk("lots").unwrap_err().contains("is not a size"));
    }

    #[test]
    fn other_values() {
        assert_eq!(level("raid6"), Ok(RaidLevel::Raid6));
        assert_eq!(
            level("7"),
            Err("7 is not a RAID level (0, 1, 10, 5 or 6)".to_string())
        );
        assert_eq!(vd_size("1G"), Ok(1 << 30));
        assert_eq!(
            vd_size("1000"),
            Err("1000 is not a multiple of 512 bytes".to_string())
        );
        assert_eq!(vd_size("0"), Err("0 is not a positive size".to_string()));
        assert_eq!(rate("100"), Ok(100));
        assert!(rate("0").is_err() && rate("101").is_err() && rate("x").is_err());
        assert_eq!(pd_id("12"), Ok(12));
        assert!(pd_id("-1").is_err() && pd_id("4294967296").is_err() && pd_id("").is_err());
        assert_eq!(dg_ref("3"), Ok(DgRef::Id(3)));
        assert_eq!(dg_ref("fast"), Ok(DgRef::Name("fast".to_string())));
        assert!(
            dg_ref("a b")
                .unwrap_err()
                .starts_with("drive group 'a b': ")
        );
        assert_eq!(
            journal_choice("always_on"),
            Ok(JournalChoice::Mode(JournalMode::AlwaysOn))
        );
        assert_eq!(journal_choice("4"), Ok(JournalChoice::Device(4)));
        assert!(journal_choice("sometimes").is_err());
        assert_eq!(compression("lz4"), Ok(Compression::Lz4));
        assert_eq!(
            listen_address("0.0.0.0:10809"),
            Ok("0.0.0.0:10809".to_string())
        );
        assert_eq!(listen_address("[::1]:80"), Ok("[::1]:80".to_string()));
        assert_eq!(listen_address("localhost:9"), Ok("localhost:9".to_string()));
        for bad in ["10809", ":80", "host:", "host:99999", "::1:80", "a b:1"] {
            assert!(listen_address(bad).is_err(), "{bad}");
        }
        assert_eq!(kernel("naive"), Ok("naive".to_string()));
        assert!(kernel("avx9").is_err());
        assert_eq!(bench_op("pq"), Ok("pq".to_string()));
        assert!(bench_op("pqr").is_err());
        assert_eq!(poll_ms("50"), Ok(50));
        assert!(poll_ms("5").is_err());
    }
}
