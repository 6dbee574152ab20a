//! The usage-limit settings of config.yaml (issue 14): `quota_default_cooldown`,
//! `quota_handoff`, `quota_return_to_preferred`. Checked at load like every other field
//! (file, line, what, fix); read through [`Config::quota_settings`].

use std::time::Duration;

use super::doc::Doc;
use super::locate::Seg;
use super::model::{GlobalConfig, QuotaHandoff};
use super::resolve::duration_at;
use super::{Config, ConfigError, ConfigErrorKind};

/// The default of `quota_default_cooldown`: long enough not to burn attempts on an agent
/// that just refused, short enough that a limit with an unknown reset costs little.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(15 * 60);

/// What the orchestrator does about usage limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaSettings {
    /// How long an agent is out when its CLI named no reset time (never "forever").
    pub default_cooldown: Duration,
    pub handoff: QuotaHandoff,
    pub return_to_preferred: bool,
}

/// Checks the quota fields of config.yaml.
pub(super) fn check(global: &GlobalConfig, doc: &Doc<'_>) -> Result<(), ConfigError> {
    duration_at(
        doc,
        &[Seg::Key("quota_default_cooldown")],
        "quota_default_cooldown",
        &global.quota_default_cooldown,
    )?;
    if QuotaHandoff::parse(&global.quota_handoff).is_none() {
        return Err(doc.error(
            ConfigErrorKind::InvalidValue,
            &[Seg::Key("quota_handoff")],
            None,
            format!(
                "`quota_handoff` is `{}`, not one of fresh, continue",
                global.quota_handoff
            ),
            "write `fresh` (the next agent starts from a fresh clone) or `continue` (it starts from the limited attempt's work)",
        ));
    }
    Ok(())
}

impl Config {
    /// The usage-limit settings (validated at load).
    pub fn quota_settings(&self) -> QuotaSettings {
        QuotaSettings {
            default_cooldown: super::values::parse_duration(&self.global.quota_default_cooldown)
                .unwrap_or(DEFAULT_COOLDOWN),
            handoff: QuotaHandoff::parse(&self.global.quota_handoff).unwrap_or_default(),
            return_to_preferred: self.global.quota_return_to_preferred,
        }
    }
}
