//! Durations in configuration files: written as milliseconds (`heartbeat_interval = 300`),
//! read as milliseconds or as strings with a unit (`"300ms"`, `"2s"`, `"5m"`, `"1h"`).

use std::time::Duration;

/// `#[serde(with = "tenure_core::duration::millis")]` on a `Duration` field: written as
/// milliseconds, read as milliseconds or as a string with a unit.
pub mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// A duration as milliseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Millis(u64),
        Text(String),
    }

    /// Milliseconds, or a string with a unit.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Millis(ms) => Ok(Duration::from_millis(ms)),
            Raw::Text(t) => super::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// Parse `"300ms"`, `"2s"`, `"5m"`, `"1h"` or a bare number of milliseconds.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (examples: 300ms, 2s, 5m)"))?;
    let d = match unit.trim() {
        "" | "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" | "h" => {
            let per = if unit.trim() == "m" { 60 } else { 3600 };
            let secs = (n.checked_mul(per)).ok_or_else(|| format!("{s:?} is too long"))?;
            Duration::from_secs(secs)
        }
        u => return Err(format!("unknown unit {u:?} in {s:?} (use ms, s, m or h)")),
    };
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_milliseconds_are_read() {
        assert_eq!(parse("300"), Ok(Duration::from_millis(300)));
        assert_eq!(parse("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse("1.5s").is_err());
        assert!(parse("2d").is_err());
    }

    #[test]
    fn a_duration_too_long_is_refused_not_wrapped() {
        assert!(parse("6000000000000000h").unwrap_err().contains("too long"));
        assert!(parse("400000000000000000m").is_err());
        assert_eq!(
            parse("18446744073709551615s"),
            Ok(Duration::from_secs(u64::MAX))
        );
    }
}
