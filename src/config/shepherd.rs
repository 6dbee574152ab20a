//! `shepherd:` in config.yaml: how the daemon keeps the pull requests it opened moving
//! (issue 15; README "After the pull request"). Plain values; `orchestrator::shepherd::decide` reads them.

use serde::{Deserialize, Serialize};

/// What the shepherd acts on and how far it goes before handing a PR to people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShepherdConfig {
    /// Watch the pull requests this home opened until they are merged or closed.
    pub enabled: bool,
    /// The lowest repository permission whose holders' feedback is acted on (GitHub's
    /// `read` < `triage` < `write` < `maintain` < `admin`).
    pub trusted_permission: String,
    /// A conversation comment counts only when it contains this (or mentions the bot).
    pub trigger: String,
    /// Follow-up tasks per pull request before it is handed to people.
    pub max_followups: u32,
    /// A pull request carrying this label is left alone.
    pub hold_label: String,
    /// Check names that count; empty = every check run and commit status on the head.
    pub required_checks: Vec<String>,
    /// Merge the base in when it moved even without a conflict (repositories that require
    /// up-to-date branches).
    pub require_up_to_date: bool,
    /// How a moved base gets into the branch: a merge commit (default), or the branch's
    /// changes put on top of the base and force-pushed with a lease, only when every commit
    /// on the branch is ours.
    pub conflicts: ConflictMode,
}

/// `shepherd.conflicts`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConflictMode {
    #[default]
    Merge,
    Rebase,
}

impl Default for ShepherdConfig {
    fn default() -> Self {
        ShepherdConfig {
            enabled: true,
            trusted_permission: "write".into(),
            trigger: "/polyphony".into(),
            max_followups: 3,
            hold_label: "polyphony-hold".into(),
            required_checks: Vec::new(),
            require_up_to_date: false,
            conflicts: ConflictMode::Merge,
        }
    }
}
