//! `retention:` in config.yaml (issue 24, a daemon that runs for weeks): how long the
//! daemon keeps what finished tasks leave behind. Checked at load like every other field
//! (file, line, what, fix, bounds in `bounds.rs`); read through [`Config::retention`];
//! applied by `ops::retention` from the daemon loop.
//!
//! ```yaml
//! retention:
//!   workspaces: 24h   # a finished task's workspaces and notes, this long after it ended
//!   events: 30d       # events and transcripts of attempts that ended this long ago
//!   every: 1h         # how often the daemon applies it
//! ```
//! `never` keeps that kind forever (`every: never` turns the sweep off).

use std::time::Duration;

use super::doc::Doc;
use super::locate::Seg;
use super::{Config, ConfigError, ConfigErrorKind};

/// Defaults: a day to look at a finished task's tree, a month of logs.
pub const DEFAULT_WORKSPACES: Duration = Duration::from_secs(24 * 3600);
pub const DEFAULT_EVENTS: Duration = Duration::from_secs(30 * 24 * 3600);
pub const DEFAULT_EVERY: Duration = Duration::from_secs(3600);

/// The policy, parsed. `None`: keep forever (or, for `every`, never sweep).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    pub workspaces: Option<Duration>,
    pub events: Option<Duration>,
    pub every: Option<Duration>,
}

const NEVER: &str = "never";

fn parse(text: &str) -> Result<Option<Duration>, String> {
    if text.trim().eq_ignore_ascii_case(NEVER) {
        return Ok(None);
    }
    super::values::parse_duration(text).map(Some)
}

/// Checks `retention:`: each value a duration or `never`, within the bounds.
pub(super) fn check(global: &super::GlobalConfig, doc: &Doc<'_>) -> Result<(), ConfigError> {
    let r = &global.retention;
    for (field, text, min, max) in [
        (
            "workspaces",
            &r.workspaces,
            Duration::ZERO,
            super::bounds::MAX_RETENTION,
        ),
        (
            "events",
            &r.events,
            super::bounds::MIN_RETENTION_EVENTS,
            super::bounds::MAX_RETENTION,
        ),
        (
            "every",
            &r.every,
            super::bounds::MIN_RETENTION_EVERY,
            super::bounds::MAX_RETENTION_EVERY,
        ),
    ] {
        let path = [Seg::Key("retention"), Seg::Key(field)];
        let name = format!("retention.{field}");
        if text.trim().eq_ignore_ascii_case(NEVER) {
            continue;
        }
        let value = super::values::parse_duration(text).map_err(|e| {
            doc.error(
                ConfigErrorKind::InvalidValue,
                &path,
                None,
                format!("`{name}` is neither a duration nor `never`: {e}"),
                "write a duration with a unit, like 12h or 30d, or `never` to keep everything",
            )
        })?;
        super::bounds::duration_between(doc, &path, &name, value, min, max)?;
    }
    Ok(())
}

impl Config {
    /// The retention policy (validated at load).
    pub fn retention(&self) -> RetentionSettings {
        let r = &self.global.retention;
        RetentionSettings {
            workspaces: parse(&r.workspaces).unwrap_or(Some(DEFAULT_WORKSPACES)),
            events: parse(&r.events).unwrap_or(Some(DEFAULT_EVENTS)),
            every: parse(&r.every).unwrap_or(Some(DEFAULT_EVERY)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_and_durations() {
        assert_eq!(parse("never"), Ok(None));
        assert_eq!(parse(" Never "), Ok(None));
        assert_eq!(parse("2h"), Ok(Some(Duration::from_secs(7200))));
        assert!(parse("forever").is_err());
        assert!(parse("0s").is_err());
    }
}
