//! A task: one unit of work from a source (spec §3.1).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::state::TaskState;

/// Where a task came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// A labelled GitHub issue; `source_ref` is `owner/repo#N`.
    Github,
    /// The local SQLite queue (`polyphony enqueue`); `source_ref` is `local:<id>`.
    Local,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Github => "github",
            SourceKind::Local => "local",
        }
    }

    /// The kind as a sentence names it ("a GitHub task").
    pub fn title(self) -> &'static str {
        match self {
            SourceKind::Github => "GitHub",
            SourceKind::Local => "local",
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SourceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "github" => Ok(SourceKind::Github),
            "local" => Ok(SourceKind::Local),
            other => Err(format!(
                "unknown source `{other}` (expected github or local)"
            )),
        }
    }
}

/// What kind of change a task asks for. Derived from labels for GitHub issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskType {
    Bugfix,
    #[default]
    Feature,
    Docs,
    Refactor,
    Research,
    Migration,
    Review,
}

impl TaskType {
    pub const ALL: [TaskType; 7] = [
        TaskType::Bugfix,
        TaskType::Feature,
        TaskType::Docs,
        TaskType::Refactor,
        TaskType::Research,
        TaskType::Migration,
        TaskType::Review,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::Bugfix => "bugfix",
            TaskType::Feature => "feature",
            TaskType::Docs => "docs",
            TaskType::Refactor => "refactor",
            TaskType::Research => "research",
            TaskType::Migration => "migration",
            TaskType::Review => "review",
        }
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        TaskType::ALL
            .into_iter()
            .find(|t| t.as_str() == lower)
            .ok_or_else(|| {
                format!(
                    "unknown task type `{s}` (expected one of bugfix, feature, docs, refactor, research, migration, review)"
                )
            })
    }
}

/// How much damage a wrong change could do.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    #[default]
    Low,
    Medium,
    High,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Risk {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "low" => Ok(Risk::Low),
            "medium" => Ok(Risk::Medium),
            "high" => Ok(Risk::High),
            other => Err(format!(
                "unknown risk `{other}` (expected low, medium or high)"
            )),
        }
    }
}

/// How much of the repository a task touches: `small` is 0–1 files, `medium` 2–4,
/// `large` 5 or more (the file-count bands of spec §5.1).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    #[default]
    Small,
    Medium,
    Large,
}

impl Scope {
    pub fn from_file_count(files: usize) -> Scope {
        match files {
            0..=1 => Scope::Small,
            2..=4 => Scope::Medium,
            _ => Scope::Large,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Small => "small",
            Scope::Medium => "medium",
            Scope::Large => "large",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "small" => Ok(Scope::Small),
            "medium" => Ok(Scope::Medium),
            "large" => Ok(Scope::Large),
            other => Err(format!(
                "unknown scope `{other}` (expected small, medium or large)"
            )),
        }
    }
}

/// A unit of work (spec §3.1 plus what a real pipeline needs).
///
/// `title` and `body` are frozen when the task is claimed: later edits at the source
/// never change what the agent is told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Stable id: `owner/repo#N` for GitHub issues, `local-<n>` for the local queue.
    pub id: String,
    pub title: String,
    pub body: String,
    pub source: SourceKind,
    /// The reference at the source: `owner/repo#42`, or `local:<id>`.
    pub source_ref: String,
    /// Where to clone from: a URL (`https://…`, `file://…`) or a local path.
    pub repo: String,
    /// Branch or ref to start from; `None` means the repository's default branch.
    pub base_ref: Option<String>,
    pub state: TaskState,
    pub task_type: TaskType,
    pub scope: Scope,
    pub risk: Risk,
    /// Estimated tokens of context the task needs (title, body, mentioned files).
    pub context_tokens: u64,
    pub requires_web: bool,
    pub labels: Vec<String>,
    /// Free-form facts a source attaches (issue number, node id, html url, …).
    pub metadata: BTreeMap<String, String>,
    /// Attempts started so far (1-based numbering; 0 before the first).
    pub attempts: u32,
    /// Failed attempts that count against `max_attempts` (quota fallbacks do not).
    pub failures: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When a FAILED task may be retried (backoff), if it will be.
    pub next_attempt_at: Option<DateTime<Utc>>,
}

impl Task {
    /// A freshly discovered task with defaults for everything the source did not say.
    pub fn new(
        id: impl Into<String>,
        source: SourceKind,
        source_ref: impl Into<String>,
        repo: impl Into<String>,
        title: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Task {
        Task {
            id: id.into(),
            title: title.into(),
            body: String::new(),
            source,
            source_ref: source_ref.into(),
            repo: repo.into(),
            base_ref: None,
            state: TaskState::Discovered,
            task_type: TaskType::default(),
            scope: Scope::default(),
            risk: Risk::default(),
            context_tokens: 0,
            requires_web: false,
            labels: Vec::new(),
            metadata: BTreeMap::new(),
            attempts: 0,
            failures: 0,
            created_at: now,
            updated_at: now,
            next_attempt_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_parse_their_names() {
        for t in TaskType::ALL {
            assert_eq!(t.as_str().parse::<TaskType>(), Ok(t));
        }
        assert_eq!("HIGH".parse::<Risk>(), Ok(Risk::High));
        assert_eq!("medium".parse::<Scope>(), Ok(Scope::Medium));
        assert!("huge".parse::<Scope>().is_err());
        assert_eq!("github".parse::<SourceKind>(), Ok(SourceKind::Github));
    }

    #[test]
    fn scope_bands_follow_the_file_counts() {
        assert_eq!(Scope::from_file_count(0), Scope::Small);
        assert_eq!(Scope::from_file_count(1), Scope::Small);
        assert_eq!(Scope::from_file_count(2), Scope::Medium);
        assert_eq!(Scope::from_file_count(4), Scope::Medium);
        assert_eq!(Scope::from_file_count(5), Scope::Large);
    }
}
