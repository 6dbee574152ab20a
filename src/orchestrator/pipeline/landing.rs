//! VERIFYING -> LANDED: the attempt's landing commit, then the verify stage
//! ([`verify::prove`]) and the land stage ([`land::land`]); this file records what they
//! return (the commit's sha, the evidence, the landing) and moves the task.

use std::sync::Arc;

use crate::domain::{CheckEvidence, EnvVar, RunSpec, TaskState, VolumeMount};
use crate::orchestrator::verify::first_line;
use crate::orchestrator::{land, proof, restarts, verify};
use crate::store::IntentKind;
use crate::workspace;
use crate::workspace::{Author, Workspace};

use super::{AttemptEnd, AttemptRun, Failure, Ran};

impl AttemptRun<'_> {
    /// Proof of work then landing (spec §10, issue 11): one commit, its sha recorded; the
    /// gates and each check judge that sha only, and only that sha is pushed.
    pub(super) async fn verify_and_land(&mut self, ran: Ran) -> Result<AttemptEnd, Failure> {
        let (sha, evidence) = self.verify(&ran).await?;
        self.land(&ran, sha, evidence).await
    }

    async fn verify(&mut self, ran: &Ran) -> Result<(String, Vec<CheckEvidence>), Failure> {
        let Ran { ws, spec, gate, .. } = ran;
        let gate = gate.clone();
        let Some(sha) = self.landing_commit(ws, spec).await? else {
            let evidence = vec![gate, proof::diff_gate(&[])];
            return Err(verify::verification_failure(evidence).into());
        };
        let rules = verify::GateRules {
            settings: self.orch.config.verify_for(&self.task.repo),
            check_commands: spec
                .verification
                .iter()
                .map(|c| c.command.clone())
                .collect(),
            secrets: Arc::new(self.named_secrets(&spec.env_overlay, &spec.volume_mounts)),
        };
        // The check copy belongs to the user the check container runs as (as `prepare` does
        // for the workspace); a named, non-numeric user keeps the daemon's ownership.
        let owner = spec
            .limits
            .user
            .as_deref()
            .or(self.orch.config.default_limits().user.as_deref())
            .and_then(|user| workspace::parse_owner(user).ok());
        let scrubber = self.scrubber.clone();
        let progress = self.opts.progress.clone();
        let task_id = self.task.id.clone();
        let on_check = move |e: &CheckEvidence| {
            progress.state(
                &task_id,
                TaskState::Verifying,
                &format!(
                    "{} `{}`: {}",
                    e.name,
                    e.command,
                    if e.passed { "passed" } else { "FAILED" }
                ),
            );
        };
        let checks = verify::CheckContext {
            runtime: self.orch.runtime.as_ref(),
            workspaces: self.orch.workspaces.clone(),
            ws,
            sha: &sha,
            spec,
            home_label: &self.orch.home_label,
            default_user: &self.orch.default_user,
            owner,
            scrub: scrubber.as_ref(),
            cancel: self.opts.cancel.clone(),
            on_check: &on_check,
            clock: self.orch.clock.clone(),
        };
        let evidence = verify::prove(gate, rules, checks).await?;
        Ok((sha, evidence))
    }

    /// The attempt's one landing commit: made once after the agent exited and recorded, so a
    /// verification resumed after a restart judges (and pushes) the same sha.
    async fn landing_commit(
        &mut self,
        ws: &Workspace,
        spec: &RunSpec,
    ) -> Result<Option<String>, Failure> {
        if let Some(sha) = self
            .db()
            .landing_commit_of(&self.task.id, self.attempt)
            .ok()
            .flatten()
        {
            return Ok(Some(sha));
        }
        let git = &self.orch.config.global().git;
        let author = Author {
            name: git.author_name.clone(),
            email: git.author_email.clone(),
        };
        let message = format!(
            "{}\n\nPolyphony task {} ({}), attempt {} by {}.",
            first_line(&self.task.title),
            self.task.id,
            self.task.source_ref,
            self.attempt,
            spec.agent
        );
        // Issue 24: reading the agent's working tree is handling its output; a daemon that
        // dies here, again and again, strikes the attempt (see `restarts`).
        let crumb = restarts::breadcrumb(restarts::WINDOW_COMMIT);
        self.db()
            .raise_handling(&self.task.id, self.attempt, &crumb, self.orch.now())
            .map_err(Failure::crash)?;
        crate::failpoint::hit("commit-tree");
        let max_changed_files = self
            .orch
            .config
            .verify_for(&self.task.repo)
            .max_changed_files;
        let commit = verify::commit(
            self.orch.workspaces.clone(),
            ws.clone(),
            author,
            message,
            max_changed_files,
        )
        .await?;
        if let Some(sha) = &commit.sha {
            self.db()
                .note_landing_commit(&self.task.id, self.attempt, sha, self.orch.now())
                .map_err(Failure::crash)?;
        }
        self.db()
            .clear_handling(&self.task.id, self.attempt)
            .map_err(Failure::crash)?;
        Ok(commit.sha)
    }

    /// The secrets a landing commit must not carry, by name: the env overlay's values and
    /// the sources' tokens.
    fn named_secrets(&self, overlay: &[EnvVar], mounts: &[VolumeMount]) -> verify::NamedSecrets {
        let mut pairs: Vec<(String, String)> = overlay
            .iter()
            .filter_map(|v| (self.orch.env)(&v.from_host).map(|value| (v.name.clone(), value)))
            .collect();
        pairs.extend(self.orch.sources.secrets().iter().cloned());
        for value in crate::orchestrator::secrets::credential_tokens(mounts) {
            pairs.push(("a token from the identity's credential files".into(), value));
        }
        verify::NamedSecrets::new(pairs)
    }

    /// The shepherd's part of landing (issue 15): a follow-up replies on its pull request;
    /// a GitHub task's new pull request is recorded for watching.
    async fn after_push(
        &self,
        ran: &Ran,
        sha: &str,
        branch: &str,
        pr_url: Option<&str>,
    ) -> Result<(), Failure> {
        use crate::orchestrator::shepherd::followup;
        match (&self.followup, pr_url) {
            (Some(run), _) => {
                let source = self.orch.sources.of(&self.task).map_err(Failure::crash)?;
                let summary = ran.result.final_message.as_deref();
                // What the pushed commit changed, read from our own repository (never the
                // agent's): the replies name it (issue 29).
                let changed = {
                    let (workspaces, ws, sha) = (
                        self.orch.workspaces.clone(),
                        ran.ws.clone(),
                        sha.to_string(),
                    );
                    tokio::task::spawn_blocking(move || workspaces.changes(&ws, &sha))
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .map(|changes| changes.into_iter().map(|c| c.path).collect::<Vec<_>>())
                };
                followup::post_replies(
                    source,
                    &self.store,
                    &self.task,
                    run,
                    &followup::Pushed {
                        sha,
                        summary,
                        changed: changed.as_deref(),
                    },
                    self.orch.now(),
                )
                .await
                .map_err(|e| {
                    Failure::from(verify::Refusal::failed(format!(
                        "cannot reply on the pull request: {}",
                        first_line(&e.to_string())
                    )))
                })
            }
            (None, Some(url)) => followup::record_landed(
                &self.db(),
                &self.task,
                url,
                branch,
                &ran.ws.base_ref,
                sha,
                self.orch.now(),
            )
            .map_err(Failure::crash),
            (None, None) => Ok(()),
        }
    }

    pub(super) async fn land(
        &mut self,
        ran: &Ran,
        sha: String,
        evidence: Vec<CheckEvidence>,
    ) -> Result<AttemptEnd, Failure> {
        self.land_as(ran, sha, evidence, None).await
    }

    /// [`Self::land`]; `pushed`: the branch the upstream already holds `sha` under (a lost
    /// machine's push, found by the daemon that took its task over): no push from here.
    pub(super) async fn land_as(
        &mut self,
        ran: &Ran,
        sha: String,
        evidence: Vec<CheckEvidence>,
        pushed: Option<String>,
    ) -> Result<AttemptEnd, Failure> {
        let ws = &ran.ws;
        // Push, PR, comment and labels are redone idempotently by the resumed attempt
        // until LANDED completes this intent (issue 19). The evidence is kept with it: a
        // restart lands this verified sha without verifying again, before anything else
        // (issue 24).
        self.db()
            .record_intent(
                &self.task.id,
                IntentKind::Land,
                self.attempt,
                &serde_json::json!({ "sha": sha, "branch": ws.branch, "evidence": evidence }),
                self.orch.now(),
            )
            .map_err(Failure::crash)?;
        let source = self.orch.sources.of(&self.task).map_err(Failure::crash)?;
        // A follow-up lands on its pull request's branch: no pull request of its own. A
        // source that keeps no record of its own (the local queue) lands by the push alone.
        let report_to = (self.followup.is_none() && source.reports_back()).then_some(source);
        // Issue 27: only while this daemon holds the task's lease with a margin (a daemon
        // cut off from the store, or one whose task another daemon took over, never pushes).
        // The claim, then the store's clock (a later reading only shortens what is left).
        let claim = self.db().claim_of(&self.task.id).map_err(Failure::crash)?;
        let now = self.orch.now();
        let lease_now = self.db().lease_clock(now).map_err(Failure::crash)?;
        if let Err(lost) = self
            .orch
            .leases
            .check(&self.task.id, claim.as_ref(), now, lease_now)
        {
            return Err(Failure::lease_lost(lost));
        }
        let destination = if let Some(branch) = pushed {
            let pr_url = match report_to {
                Some(source) => {
                    let landed =
                        land::landed(&branch, ws, self.attempt, Some(&ran.result), &evidence);
                    land::open_pull_request(source, &self.task, &landed).await?
                }
                None => None,
            };
            land::Destination { branch, pr_url }
        } else {
            land::land(land::Landing {
                workspaces: self.orch.workspaces.clone(),
                ws,
                sha: &sha,
                // The attempt's branch name may already exist upstream with unrelated history
                // (a reset home, another instance): push under a name of this home's instead of
                // failing the verified work. Never force.
                // A follow-up's push is a fast-forward of the pull request's branch or nothing
                // (a rebased one's: a lease on the head it read, `ws.lease`).
                fallback: match &self.followup {
                    Some(_) => ws.branch.clone(),
                    None => format!(
                        "{}-{}",
                        ws.branch,
                        &self.orch.home_label[..self.orch.home_label.len().min(6)]
                    ),
                },
                token: source.push_token().map(String::from),
                source: report_to,
                task: &self.task,
                attempt: self.attempt,
                result: Some(&ran.result),
                evidence: &evidence,
            })
            .await?
        };
        let land::Destination { branch, pr_url } = destination;
        self.after_push(ran, &sha, &branch, pr_url.as_deref())
            .await?;
        self.record_attempt(&evidence)?;
        self.db()
            .set_attempt_landing(
                &self.task.id,
                self.attempt,
                &sha,
                &branch,
                pr_url.as_deref(),
                self.orch.now(),
            )
            .map_err(Failure::crash)?;
        let short = &sha[..sha.len().min(10)];
        let reason = match &pr_url {
            Some(url) => format!("pushed {branch} ({short}); pull request {url}"),
            None => format!("pushed {branch} ({short}) to {}", ws.upstream),
        };
        let reason = self.scrubber.scrub_line(&reason).into_owned();
        let landed = self
            .db()
            .transition_completing(
                &self.task.id,
                self.state,
                TaskState::Landed,
                &reason,
                (IntentKind::Land, self.attempt),
                self.orch.now(),
            )
            .map_err(Failure::crash)?;
        self.task = landed;
        self.state = TaskState::Landed;
        self.opts
            .progress
            .state(&self.task.id, TaskState::Landed, &reason);
        Ok(AttemptEnd::Landed { branch, pr_url })
    }
}
