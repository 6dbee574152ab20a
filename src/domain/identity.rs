//! A named credential bundle (spec §3.2, §7).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Named credentials an agent runs with. Holds *where* secrets live, never their values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    pub name: String,
    /// Agent type (`claude`, `codex`, …) -> host directory holding that CLI's login
    /// (e.g. `~/.claude`). Mounted read-only at a staging path in the container.
    pub volumes: BTreeMap<String, PathBuf>,
    /// Container variable -> HOST variable whose value it takes at container creation,
    /// e.g. `ANTHROPIC_API_KEY: WORK_ANTHROPIC_KEY`. Values are never stored.
    pub api_keys: BTreeMap<String, String>,
    /// Host variable holding the GitHub token for this identity; `None` means
    /// `GITHUB_TOKEN`, then `GH_TOKEN`.
    pub github_token_env: Option<String>,
    /// Spend per UTC day after which the scheduler holds this identity's tasks.
    pub cost_ceiling_usd_per_day: Option<f64>,
    /// Agent types whose login directory is staged whole; the others get only the files
    /// their CLI authenticates with (`identity::credential_files`).
    #[serde(default)]
    pub whole_directory: Vec<String>,
}
