//! Parsing of the scalar value formats the YAML files use: durations (`30s`, `1h30m`),
//! memory sizes (`4g`, `512m`) and paths with `~` and `$VAR`.
//!
//! Pure: the environment is passed in as a lookup function, so nothing here reads the
//! process environment, the disk or the clock.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Parses a humantime duration such as `30s`, `5m`, `1h30m` or `2h 15m`.
///
/// A bare number is refused: `30` could mean seconds or minutes, and guessing wrong
/// would silently make a timeout 60 times too short or too long.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("empty duration".into());
    }
    if trimmed.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("`{trimmed}` has no unit"));
    }
    let duration = humantime::parse_duration(trimmed).map_err(|e| format!("`{trimmed}`: {e}"))?;
    if duration.is_zero() {
        return Err(format!("`{trimmed}` is zero"));
    }
    Ok(duration)
}

/// Parses a memory size into bytes: `512m`, `4g`, `4GiB`, `1.5g`, `65536` (bytes).
/// Units are binary (`k` = 1024), as Docker's `--memory` reads them.
pub fn parse_memory(text: &str) -> Result<i64, String> {
    let trimmed = text.trim();
    let bytes = bytes_of(trimmed)?;
    // Docker refuses limits under 6 MiB; anything smaller is a typo such as `4` for `4g`.
    if bytes < 6.0 * 1024.0 * 1024.0 {
        return Err(format!("`{trimmed}` is below Docker's 6m minimum"));
    }
    if bytes > i64::MAX as f64 {
        return Err(format!("`{trimmed}` is too large"));
    }
    Ok(bytes as i64)
}

/// `12.5m` -> bytes (k, m, g, t with or without `b`/`ib`; a bare number is bytes).
fn bytes_of(trimmed: &str) -> Result<f64, String> {
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{trimmed}` does not start with a number"))?;
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => return Err(format!("`{trimmed}` has unknown unit `{other}`")),
    };
    Ok(value * multiplier)
}

/// A byte size like `64m` or `512k` with no engine minimum (output and workspace caps,
/// `verify.max_file_size`);
/// at least 1 KiB, so a bare `4` meant as `4g` is still caught.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let bytes = bytes_of(trimmed)?;
    if bytes < 1024.0 {
        return Err(format!("`{trimmed}` is below the 1k minimum"));
    }
    if bytes > i64::MAX as f64 {
        return Err(format!("`{trimmed}` is too large"));
    }
    Ok(bytes as u64)
}

/// Expands `~` and `$VAR`/`${VAR}` in a path and makes it absolute against `base`.
///
/// `lookup` answers environment variables; callers make `POLYPHONY_HOME` resolve to the
/// home in use even when the variable is not exported, so defaults like
/// `$POLYPHONY_HOME/workspaces` follow `--home`.
pub fn expand_path(
    text: &str,
    base: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, String> {
    if text.trim().is_empty() {
        return Err("empty path".into());
    }
    let home = || lookup("HOME");
    let expanded = shellexpand::full_with_context(
        text,
        home,
        // shellexpand leaves an unknown `$VAR` in place when the context answers `None`;
        // a path with a literal `$NOPE` in it is always a mistake, so refuse it.
        |var: &str| -> Result<Option<String>, &str> { lookup(var).map(Some).ok_or("not set") },
    )
    .map_err(|e| format!("`{text}`: variable ${} is not set", e.var_name))?;
    if expanded.starts_with('~') {
        return Err(format!("`{text}`: `~` needs HOME to be set"));
    }
    let path = PathBuf::from(expanded.as_ref());
    Ok(if path.is_absolute() {
        path
    } else {
        base.join(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_duration(text: &str, expected: Result<u64, &str>) {
        match (parse_duration(text), expected) {
            (Ok(d), Ok(secs)) => assert_eq!(d.as_secs(), secs, "{text}"),
            (Err(e), Err(part)) => assert!(e.contains(part), "{text}: {e}"),
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn durations() {
        check_duration("30s", Ok(30));
        check_duration("5m", Ok(300));
        check_duration("1h30m", Ok(5400));
        check_duration("1h 30m", Ok(5400));
        check_duration(" 2h ", Ok(7200));
        check_duration("1day", Ok(86400));
        check_duration("30", Err("no unit"));
        check_duration("", Err("empty"));
        check_duration("0s", Err("zero"));
        check_duration("5 minutes please", Err("5 minutes please"));
        check_duration("30x", Err("30x"));
    }

    fn check_memory(text: &str, expected: Result<i64, &str>) {
        match (parse_memory(text), expected) {
            (Ok(b), Ok(want)) => assert_eq!(b, want, "{text}"),
            (Err(e), Err(part)) => assert!(e.contains(part), "{text}: {e}"),
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn sizes() {
        for (text, want) in [
            ("10m", Ok(10 * 1024 * 1024)),
            ("512k", Ok(512 * 1024)),
            ("1048576", Ok(1_048_576)),
            ("1.5k", Ok(1536)),
        ] {
            assert_eq!(parse_size(text), want, "{text}");
        }
        for bad in ["", "m", "10x", "0"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn memory() {
        const MIB: i64 = 1024 * 1024;
        check_memory("512m", Ok(512 * MIB));
        check_memory("4g", Ok(4096 * MIB));
        check_memory("4GiB", Ok(4096 * MIB));
        check_memory("1.5g", Ok(1536 * MIB));
        check_memory("8388608", Ok(8 * MIB));
        check_memory("4", Err("6m minimum"));
        check_memory("4x", Err("unknown unit"));
        check_memory("g", Err("number"));
    }

    fn env(var: &str) -> Option<String> {
        match var {
            "HOME" => Some("/home/op".into()),
            "POLYPHONY_HOME" => Some("/srv/poly".into()),
            "DATA" => Some("/data".into()),
            _ => None,
        }
    }

    fn check_path(text: &str, expected: Result<&str, &str>) {
        match (expand_path(text, Path::new("/base"), &env), expected) {
            (Ok(p), Ok(want)) => assert_eq!(p, PathBuf::from(want), "{text}"),
            (Err(e), Err(part)) => assert!(e.contains(part), "{text}: {e}"),
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn paths() {
        check_path("~/.claude", Ok("/home/op/.claude"));
        check_path("$POLYPHONY_HOME/workspaces", Ok("/srv/poly/workspaces"));
        check_path("${DATA}/mirrors", Ok("/data/mirrors"));
        check_path("/abs/path", Ok("/abs/path"));
        check_path("relative/dir", Ok("/base/relative/dir"));
        check_path("$NOPE/x", Err("$NOPE is not set"));
        check_path("  ", Err("empty"));
    }
}
