//! `push`: send the attempt branch to the upstream. https authenticates as `x-access-token` via
//! the askpass script (token only in the child's environment); local paths and `file://` need
//! nothing. A rejected ref is an error, never a silent success.
//!
//! Pushes FROM the orchestrator's own repository (`own.rs`, issue 23), never from the
//! workspace: what `pack-objects` sends is read from the same objects the gates judged,
//! with no replace refs or agent-written packs anywhere in reach. Must not read the
//! destination from the workspace: it pushes to the upstream recorded at prepare.

use super::key::scrub;
use super::upstream::resolve_upstream;
use super::{Workspace, WorkspaceError, WorkspaceManager};

impl WorkspaceManager {
    /// Pushes the landing commit `commit_once` made (`refs/heads/{ws.branch}` of the
    /// orchestrator's repository; no force) to `remote` (a URL or path; `None` = the
    /// upstream recorded at prepare time).
    pub fn push(
        &self,
        ws: &Workspace,
        remote: Option<&str>,
        token: Option<&str>,
    ) -> Result<(), WorkspaceError> {
        self.push_as(ws, remote, &ws.branch, token)
    }

    /// Pushes the attempt branch to `remote_branch` at the remote (no force): used when the
    /// attempt's own name is already taken there by unrelated history.
    pub fn push_as(
        &self,
        ws: &Workspace,
        remote: Option<&str>,
        remote_branch: &str,
        token: Option<&str>,
    ) -> Result<(), WorkspaceError> {
        let refspec = format!("refs/heads/{}:refs/heads/{remote_branch}", ws.branch);
        self.push_refspec(ws, remote, &refspec, remote_branch, None, token)
    }

    /// Pushes one refspec from the orchestrator's repository to `remote` (`None` = the upstream recorded at
    /// prepare time); `remote_branch` names the destination in errors. No force, except a
    /// `lease`: the remote branch is replaced only while it still names that sha.
    pub(super) fn push_refspec(
        &self,
        ws: &Workspace,
        remote: Option<&str>,
        refspec: &str,
        remote_branch: &str,
        lease: Option<&str>,
        token: Option<&str>,
    ) -> Result<(), WorkspaceError> {
        let target = match remote {
            Some(r) if r != "origin" => resolve_upstream(r)?,
            _ => ws.upstream.clone(),
        };
        let askpass = self.askpass()?;
        let (out, op, token) = self
            .own_repo(ws)?
            .git("push")
            .args(["push", "--porcelain", "--no-verify"])
            .args(lease.map(|sha| lease_option(remote_branch, sha)))
            .args(["--", &target, refspec])
            .token(&askpass, token, &target)
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        // Porcelain: `<flag>\t<from>:<to>\t<summary>`; `!` = rejected by the remote or a hook.
        if let Some(line) = stdout.lines().find(|l| l.starts_with('!')) {
            let summary = line.splitn(3, '\t').nth(2).unwrap_or(line);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let detail: Vec<&str> = stderr
                .lines()
                .filter(|l| {
                    l.starts_with("remote:") || l.starts_with("hint:") || l.starts_with("error:")
                })
                .take(6)
                .collect();
            let reason = if detail.is_empty() {
                summary.to_string()
            } else {
                format!("{summary}; {}", detail.join(" | "))
            };
            return Err(WorkspaceError::PushRejected {
                branch: remote_branch.to_string(),
                remote: scrub(&target, token),
                reason: scrub(&reason, token),
            });
        }
        if !out.status.success() {
            return Err(super::git::git_error(&op, &out, token));
        }
        tracing::info!(branch = %remote_branch, remote = %scrub(&target, token), "pushed");
        Ok(())
    }
}

/// The `--force-with-lease` option replacing `refs/heads/<branch>` only while it names `sha`.
pub fn lease_option(branch: &str, sha: &str) -> String {
    format!("--force-with-lease=refs/heads/{branch}:{sha}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_lease_names_the_full_ref_and_the_expected_sha() {
        assert_eq!(
            super::lease_option("polyphony/x-1", "abc"),
            "--force-with-lease=refs/heads/polyphony/x-1:abc"
        );
    }
}
