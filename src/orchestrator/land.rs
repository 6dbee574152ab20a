//! Landing (spec §10, DESIGN.md "Proof of work and landing", issue 11): push exactly the
//! verified commit, `<sha>:refs/heads/<branch>`, never force, then read the remote ref back
//! and require it to equal the sha; for a task whose source reports back (a GitHub issue),
//! report it there (open the pull request with the evidence).
//!
//! Functions take what they need and return the landed branch or a [`Refusal`]; they never
//! touch the store or the task's state (the pipeline records what comes back). Must not
//! push a ref name read from the workspace: the agent and the checks could move it.

use std::sync::Arc;

use crate::domain::{AttemptStatus, CheckEvidence, RunResult, Task};
use crate::sources::{Landed, Source};
use crate::workspace::{Workspace, WorkspaceError, WorkspaceManager};

use super::failure::FailureKind;
use super::verify::{first_line, Refusal};

/// What the land stage needs: the verified commit and where it goes.
pub struct Landing<'a> {
    pub workspaces: Arc<WorkspaceManager>,
    /// The attempt's workspace; its `branch` is the name pushed to. A caller that lands on
    /// top of an existing branch (a follow-up to an open pull request) passes a workspace
    /// whose `branch` names it: the push is a fast-forward, or with `ws.lease` (a rebased
    /// follow-up) a `--force-with-lease` to exactly that old head.
    pub ws: &'a Workspace,
    pub sha: &'a str,
    /// The name pushed to when `ws.branch` is taken upstream by unrelated history.
    pub fallback: String,
    pub token: Option<String>,
    /// Where the landing is reported (the pull request opened); `None` lands by the push
    /// alone.
    pub source: Option<&'a dyn Source>,
    pub task: &'a Task,
    pub attempt: u32,
    pub result: Option<&'a RunResult>,
    pub evidence: &'a [CheckEvidence],
}

/// Where an attempt landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The branch the remote holds the verified sha under.
    pub branch: String,
    pub pr_url: Option<String>,
}

/// The land stage: push the verified sha (read back from the remote), then report it at the
/// source (the pull request with the evidence) when there is one. Writes nothing to the
/// store.
pub async fn land(l: Landing<'_>) -> Result<Destination, Refusal> {
    let branch = push(
        l.workspaces.clone(),
        l.ws.clone(),
        l.sha.to_string(),
        l.fallback,
        l.token,
    )
    .await
    .map_err(|r| r.with_evidence(l.evidence.to_vec()))?;
    let pr_url = match l.source {
        Some(source) => {
            let landed = landed(&branch, l.ws, l.attempt, l.result, l.evidence);
            open_pull_request(source, l.task, &landed).await?
        }
        None => None,
    };
    Ok(Destination { branch, pr_url })
}

/// Pushes `sha` to the attempt's branch at the upstream; when that name is taken there by
/// unrelated history (a reset home, another instance), to `fallback` instead. Returns the
/// branch the remote now holds `sha` under, after checking it does.
pub async fn push(
    workspaces: Arc<WorkspaceManager>,
    ws: Workspace,
    sha: String,
    fallback: String,
    token: Option<String>,
) -> Result<String, Refusal> {
    let branch = ws.branch.clone();
    tokio::task::spawn_blocking(move || push_blocking(&workspaces, &ws, &sha, &fallback, token))
        .await
        .map_err(Refusal::crash)?
        .map_err(|(e, kind)| {
            Refusal::failed(format!("cannot push {branch}: {}", first_line(&e))).of_kind(kind)
        })
}

fn push_blocking(
    workspaces: &WorkspaceManager,
    ws: &Workspace,
    sha: &str,
    fallback: &str,
    token: Option<String>,
) -> Result<String, (String, FailureKind)> {
    let token = token.as_deref();
    // A leased push (a rebased follow-up) done before a kill is not redone: the lease names
    // the old head, which the remote no longer holds.
    if ws.lease.is_some() {
        if let Ok(Some(remote)) = workspaces.remote_sha(ws, &ws.branch, token) {
            if remote == sha {
                return Ok(ws.branch.clone());
            }
        }
    }
    let branch = match workspaces.push_commit(ws, sha, &ws.branch, token) {
        Err(WorkspaceError::PushRejected { reason, .. }) if is_name_taken(&reason) => {
            workspaces
                .push_commit(ws, sha, fallback, token)
                .map_err(|e| typed(&e))?;
            fallback.to_string()
        }
        Err(e) => return Err(typed(&e)),
        Ok(()) => ws.branch.clone(),
    };
    let remote = workspaces.remote_sha(ws, &branch, token).map_err(|e| {
        (
            format!("cannot read {branch} back from the remote: {e}"),
            FailureKind::from(&e),
        )
    })?;
    let other = |reason: String| Err((reason, FailureKind::Other));
    match remote {
        Some(r) if r == sha => Ok(branch),
        Some(r) => other(format!(
            "the remote's {branch} is {r}, not the verified commit {sha}"
        )),
        None => other(format!(
            "the remote has no {branch} after the push of {sha}"
        )),
    }
}

fn typed(e: &WorkspaceError) -> (String, FailureKind) {
    (e.to_string(), FailureKind::from(e))
}

/// Whether a push rejection means the branch name exists upstream with other history.
pub fn is_name_taken(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    reason.contains("non-fast-forward") || reason.contains("fetch first")
}

/// What the pull request and the landed comment say about the attempt.
pub fn landed(
    branch: &str,
    ws: &Workspace,
    attempt: u32,
    result: Option<&RunResult>,
    evidence: &[CheckEvidence],
) -> Landed {
    Landed {
        branch: branch.to_string(),
        base_ref: Some(ws.base_ref.clone()),
        title: String::new(),
        summary: result
            .and_then(|r| r.final_message.clone())
            .unwrap_or_default(),
        agent: result.map(|r| r.agent.clone()).unwrap_or_default(),
        attempt,
        evidence: evidence.to_vec(),
        turns: result.map_or(0, |r| r.turns),
        tokens: result.map(|r| r.tokens).unwrap_or_default(),
        cost_usd: result.and_then(|r| r.cost_usd),
    }
}

/// Reports the landing at the source: opens (or finds) the pull request and posts the
/// landed comment; returns its URL.
pub async fn open_pull_request(
    source: &dyn Source,
    task: &Task,
    landed: &Landed,
) -> Result<Option<String>, Refusal> {
    source
        .land(task, landed)
        .await
        .map(|reported| reported.pr_url)
        .map_err(|e| {
            Refusal::new(
                AttemptStatus::Failed,
                format!(
                    "cannot open the pull request: {}",
                    first_line(&e.to_string())
                ),
            )
            .of_kind(FailureKind::from(&e))
            .with_evidence(landed.evidence.clone())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_taken_rejections() {
        for (reason, taken) in [
            ("[rejected] (non-fast-forward)", true),
            ("[rejected] (fetch first)", true),
            ("[remote rejected] (pre-receive hook declined)", false),
            ("", false),
        ] {
            assert_eq!(is_name_taken(reason), taken, "{reason:?}");
        }
    }
}
