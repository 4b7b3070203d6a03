//! Sizes, durations and times, read from and written for humans. Sizes are binary: K is 1024.

/// Reads a size: plain bytes (`4096`) or a number with a binary suffix `K`, `M`, `G`, `T` or
/// `P` (any case, optionally followed by `iB` or `B`: `64K`, `64k`, `64KiB`, `1.5G`). The result
/// must be a whole number of bytes that fits in 64 bits.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let invalid =
        || format!("{text} is not a size (use bytes or a K, M, G, T suffix: 4096, 64K, 10G)");
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(digits_end);
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        _ => return Err(invalid()),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(invalid());
    }
    let too_large = || format!("{text} is too large");
    let whole: u64 = whole.parse().map_err(|_| too_large())?;
    let mut bytes = whole.checked_mul(1 << shift).ok_or_else(too_large)?;
    if !fraction.is_empty() {
        // fraction / 10^digits of a unit, exactly: it must come out as whole bytes.
        if fraction.len() > 18 {
            return Err(invalid());
        }
        let numerator: u128 = fraction.parse::<u128>().map_err(|_| invalid())? << shift;
        let denominator = 10u128.pow(fraction.len() as u32);
        if !numerator.is_multiple_of(denominator) {
            return Err(format!("{text} is not a whole number of bytes"));
        }
        let extra = u64::try_from(numerator / denominator).map_err(|_| too_large())?;
        bytes = bytes.checked_add(extra).ok_or_else(too_large)?;
    }
    Ok(bytes)
}

/// Writes a size with a binary unit and one decimal: `512 B`, `1.0 KiB`, `931.5 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    // Move up while the value would print as 1024.0 or more.
    while value >= 1023.95 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Writes a size compactly for chunk sizes: `64K`, `1M`, or bytes when not a whole unit.
pub fn format_size_short(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Writes a duration in seconds: `45 s`, `3 min 20 s`, `2 h 05 min`.
pub fn format_duration(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} min {:02} s", seconds / 60, seconds % 60),
        _ => format!("{} h {:02} min", seconds / 3600, seconds % 3600 / 60),
    }
}

/// Writes a Unix time in milliseconds as UTC: `2023-11-14 22:13:20Z`.
pub fn format_unix_ms(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000;
    let days = (seconds / 86_400) as i64;
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read() {
        for (text, bytes) in [
            ("0", 0),
            ("4096", 4096),
            ("64K", 65_536),
            ("64k", 65_536),
            ("64KiB", 65_536),
            ("64KB", 65_536),
            ("1M", 1_048_576),
            ("10G", 10_737_418_240),
            ("2T", 2_199_023_255_552),
            ("1P", 1_125_899_906_842_624),
            ("1.5G", 1_610_612_736),
            ("0.5K", 512),
            ("512B", 512),
            ("16383P", 16383 << 50),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in [
            "", "K", "1X", "-1", "1.", ".5K", "1.2.3K", "1 0K", "1.1K", "0.1", "abc",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_size("16384P"), Err("16384P is too large".to_string()));
        assert_eq!(
            parse_size("18446744073709551616"),
            Err("18446744073709551616 is too large".to_string())
        );
        assert_eq!(
            parse_size("12Q"),
            Err("12Q is not a size (use bytes or a K, M, G, T suffix: 4096, 64K, 10G)".to_string())
        );
    }

    #[test]
    fn sizes_are_written() {
        for (bytes, text) in [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (1536, "1.5 KiB"),
            (1 << 30, "1.0 GiB"),
            ((1 << 30) - 1, "1.0 GiB"),
            (1_000_204_886_016, "931.5 GiB"),
            ((1 << 40) + (1 << 39), "1.5 TiB"),
            (u64::MAX, "16.0 EiB"),
        ] {
            assert_eq!(format_size(bytes), text, "{bytes}");
        }
        assert_eq!(format_size_short(65_536), "64K");
        assert_eq!(format_size_short(1 << 20), "1M");
        assert_eq!(format_size_short(3 << 30), "3G");
        assert_eq!(format_size_short(1536), "1536");
        assert_eq!(format_size_short(512), "512");
    }

    #[test]
    fn durations_and_times_are_written() {
        assert_eq!(format_duration(0), "0 s");
        assert_eq!(format_duration(59), "59 s");
        assert_eq!(format_duration(200), "3 min 20 s");
        assert_eq!(format_duration(7500), "2 h 05 min");
        // Reference values from `date -u -d @SECONDS`.
        assert_eq!(format_unix_ms(0), "1970-01-01 00:00:00Z");
        assert_eq!(format_unix_ms(1_700_000_000_000), "2023-11-14 22:13:20Z");
        assert_eq!(format_unix_ms(951_782_400_000), "2000-02-29 00:00:00Z");
        assert_eq!(format_unix_ms(4_102_444_799_999), "2099-12-31 23:59:59Z");
    }
}
