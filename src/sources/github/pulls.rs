//! Pull requests the shepherd follows (issue 15): one read as a [`PullSnapshot`], merge and
//! close.
//!
//! Owns: the pull request's state as GitHub reports it (open/closed/merged, mergeability,
//! head and base, labels), read with conditional requests so an unchanged pull request costs
//! a `304`. Labels of the pull request are its issue's: `claim::add_labels` and
//! `claim::remove_label` take the same `IssueRef`.
//! Must not: decide anything about the pull request; the shepherd does.

use std::time::Duration;

use http::Method;
use serde::Deserialize;
use serde_json::json;

use super::client::{GithubClient, GithubError, Repeat};
use super::model::{Label, User};
use super::IssueRef;

/// Open or closed, as GitHub's `state` (a merged pull request is closed, with `merged`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullState {
    Open,
    Closed,
}

/// GitHub's `mergeable_state`: why a pull request can or cannot be merged now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeableState {
    /// Mergeable, checks passing (or none).
    Clean,
    /// Conflicts with the base.
    Dirty,
    /// The base moved on; merging needs the branch brought up to date first (where the
    /// repository requires it) but there are no conflicts.
    Behind,
    /// Blocked by branch protection (reviews, required checks).
    Blocked,
    /// Mergeable, but a check or status is failing or pending.
    Unstable,
    /// Mergeable, with pre-receive hooks.
    HasHooks,
    Draft,
    /// Not computed yet (GitHub computes it in the background after a read; read again).
    Unknown,
    /// A value this client does not know, as sent.
    Other(String),
}

impl MergeableState {
    pub fn parse(value: Option<&str>) -> MergeableState {
        match value.unwrap_or("unknown") {
            "clean" => MergeableState::Clean,
            "dirty" => MergeableState::Dirty,
            "behind" => MergeableState::Behind,
            "blocked" => MergeableState::Blocked,
            "unstable" => MergeableState::Unstable,
            "has_hooks" => MergeableState::HasHooks,
            "draft" => MergeableState::Draft,
            "unknown" => MergeableState::Unknown,
            other => MergeableState::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            MergeableState::Clean => "clean",
            MergeableState::Dirty => "dirty",
            MergeableState::Behind => "behind",
            MergeableState::Blocked => "blocked",
            MergeableState::Unstable => "unstable",
            MergeableState::HasHooks => "has_hooks",
            MergeableState::Draft => "draft",
            MergeableState::Unknown => "unknown",
            MergeableState::Other(s) => s,
        }
    }
}

/// A pull request as one read saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullSnapshot {
    pub number: u64,
    pub state: PullState,
    pub merged: bool,
    pub draft: bool,
    /// `None` while GitHub has not computed it (see [`MergeableState::Unknown`]).
    pub mergeable: Option<bool>,
    pub mergeable_state: MergeableState,
    pub head_sha: String,
    pub head_ref: String,
    pub base_sha: String,
    pub base_ref: String,
    /// Label names, as applied.
    pub labels: Vec<String>,
    pub author: Option<String>,
    pub html_url: Option<String>,
    pub merge_commit_sha: Option<String>,
    pub updated_at: Option<String>,
}

impl PullSnapshot {
    pub fn is_open(&self) -> bool {
        self.state == PullState::Open
    }

    pub fn has_label(&self, name: &str) -> bool {
        self.labels.iter().any(|l| l.eq_ignore_ascii_case(name))
    }
}

#[derive(Debug, Deserialize)]
struct RawPull {
    number: u64,
    #[serde(default)]
    state: String,
    #[serde(default)]
    merged: Option<bool>,
    #[serde(default)]
    merged_at: Option<String>,
    #[serde(default)]
    draft: Option<bool>,
    #[serde(default)]
    mergeable: Option<bool>,
    #[serde(default)]
    mergeable_state: Option<String>,
    head: RawRef,
    base: RawRef,
    #[serde(default)]
    labels: Vec<Label>,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    html_url: Option<String>,
    #[serde(default)]
    merge_commit_sha: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawRef {
    #[serde(rename = "ref")]
    ref_field: String,
    sha: String,
}

impl From<RawPull> for PullSnapshot {
    fn from(raw: RawPull) -> PullSnapshot {
        PullSnapshot {
            number: raw.number,
            state: if raw.state == "closed" {
                PullState::Closed
            } else {
                PullState::Open
            },
            // The list endpoint leaves `merged` out; `merged_at` says it there.
            merged: raw.merged.unwrap_or(raw.merged_at.is_some()),
            draft: raw.draft.unwrap_or(false),
            mergeable: raw.mergeable,
            mergeable_state: MergeableState::parse(raw.mergeable_state.as_deref()),
            head_sha: raw.head.sha,
            head_ref: raw.head.ref_field,
            base_sha: raw.base.sha,
            base_ref: raw.base.ref_field,
            labels: raw.labels.into_iter().map(|l| l.name).collect(),
            author: raw.user.map(|u| u.login),
            html_url: raw.html_url,
            merge_commit_sha: raw.merge_commit_sha,
            updated_at: raw.updated_at,
        }
    }
}

/// `/repos/{o}/{r}/pulls/{n}`
pub fn pull_path(pull: &IssueRef) -> String {
    format!("{}/pulls/{}", pull.repo.api_path(), pull.number)
}

/// Read the pull request (conditional: an unchanged one costs a `304`).
pub async fn get_pull(client: &GithubClient, pull: &IssueRef) -> Result<PullSnapshot, GithubError> {
    let raw: RawPull = client
        .get_json_cached(&format!("reading pull request {pull}"), &pull_path(pull))
        .await?;
    Ok(raw.into())
}

/// Read the pull request until GitHub has computed its mergeability (at most `reads`
/// reads, `pause` apart); the last read is returned either way, `Unknown` included.
pub async fn get_pull_settled(
    client: &GithubClient,
    pull: &IssueRef,
    reads: u32,
    pause: Duration,
) -> Result<PullSnapshot, GithubError> {
    let mut snapshot = get_pull(client, pull).await?;
    for _ in 1..reads.max(1) {
        if !snapshot.is_open() || snapshot.mergeable.is_some() {
            break;
        }
        tokio::time::sleep(pause).await;
        snapshot = get_pull(client, pull).await?;
    }
    Ok(snapshot)
}

/// How to merge (`merge_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeMethod {
    Merge,
    Squash,
    Rebase,
}

impl MergeMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            MergeMethod::Merge => "merge",
            MergeMethod::Squash => "squash",
            MergeMethod::Rebase => "rebase",
        }
    }
}

/// What `PUT /pulls/{n}/merge` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    /// Merged; the sha of the merge (or squash) commit on the base.
    Merged { sha: String },
    /// 405: not mergeable (conflicts, protection, closed without merging).
    NotMergeable { message: String },
    /// 409: the head is no longer the `expected_head` sha.
    HeadMoved { message: String },
}

#[derive(Debug, Deserialize)]
struct RawMerge {
    #[serde(default)]
    sha: Option<String>,
    #[serde(default)]
    merged: bool,
    #[serde(default)]
    message: Option<String>,
}

/// Merge the pull request; with `expected_head`, only if its head is still that sha. A
/// pull request merged already answers `Merged` with its merge commit, so a merge whose
/// answer was lost can be asked again.
pub async fn merge_pull(
    client: &GithubClient,
    pull: &IssueRef,
    method: MergeMethod,
    expected_head: Option<&str>,
) -> Result<MergeOutcome, GithubError> {
    let mut body = json!({ "merge_method": method.as_str() });
    if let Some(sha) = expected_head {
        body["sha"] = json!(sha);
    }
    let what = format!("merging pull request {pull}");
    let answer = client
        .send(
            Method::PUT,
            &format!("{}/merge", pull_path(pull)),
            Some(&body),
            // Repeating a merge is harmless: a merged pull request answers 405.
            Repeat::Safe,
            &what,
        )
        .await;
    match answer {
        Ok(answer) => {
            let raw: RawMerge = answer.json(&what)?;
            match raw.sha {
                Some(sha) if raw.merged => Ok(MergeOutcome::Merged { sha }),
                _ => Ok(MergeOutcome::NotMergeable {
                    message: raw.message.unwrap_or_default(),
                }),
            }
        }
        Err(GithubError::Api {
            status: 405,
            message,
            ..
        }) => {
            // Already merged (by us, when an earlier answer was lost, or by a person) is
            // not a refusal: say what the pull request was merged as.
            let now = get_pull(client, pull).await?;
            match now.merge_commit_sha {
                Some(sha) if now.merged => Ok(MergeOutcome::Merged { sha }),
                _ => Ok(MergeOutcome::NotMergeable { message }),
            }
        }
        Err(GithubError::Api {
            status: 409,
            message,
            ..
        }) => Ok(MergeOutcome::HeadMoved { message }),
        Err(e) => Err(e),
    }
}

/// Close the pull request without merging (safe to repeat).
pub async fn close_pull(
    client: &GithubClient,
    pull: &IssueRef,
) -> Result<PullSnapshot, GithubError> {
    let what = format!("closing pull request {pull}");
    let raw: RawPull = client
        .send(
            Method::PATCH,
            &pull_path(pull),
            Some(&json!({ "state": "closed" })),
            Repeat::Safe,
            &what,
        )
        .await?
        .json(&what)?;
    Ok(raw.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mergeable_states_round_trip() {
        for s in [
            "clean",
            "dirty",
            "behind",
            "blocked",
            "unstable",
            "has_hooks",
            "draft",
            "unknown",
            "future_value",
        ] {
            assert_eq!(MergeableState::parse(Some(s)).as_str(), s);
        }
        assert_eq!(MergeableState::parse(None), MergeableState::Unknown);
        assert_eq!(MergeableState::parse(Some("dirty")), MergeableState::Dirty);
    }

    #[test]
    fn a_listed_pull_is_merged_by_its_merged_at() {
        let raw: RawPull = serde_json::from_value(json!({
            "number": 3, "state": "closed", "merged_at": "2024-01-01T00:00:00Z",
            "head": {"ref": "h", "sha": "a"}, "base": {"ref": "main", "sha": "b"},
            "labels": [{"name": "polyphony-hold"}],
        }))
        .unwrap();
        let pull = PullSnapshot::from(raw);
        assert!(pull.merged);
        assert_eq!(pull.state, PullState::Closed);
        assert_eq!(pull.mergeable, None);
        assert_eq!(pull.mergeable_state, MergeableState::Unknown);
        assert!(pull.has_label("Polyphony-Hold"));
    }
}
