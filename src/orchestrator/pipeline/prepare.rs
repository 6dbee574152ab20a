//! CLAIMED -> ROUTED -> PROVISIONED: the workspace, the route and the RunSpec.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::agents::scrub::Scrubber;
use crate::config::shepherd::ConflictMode;
use crate::domain::{AttemptStatus, EnvVar, RunSpec, VolumeMount};
use crate::orchestrator::facts::gather_facts;
use crate::orchestrator::failure::FailureKind;
use crate::orchestrator::quota;
use crate::routing::{build_run_spec, RunSpecInputs};
use crate::workspace::{PrepareRequest, Workspace};
use crate::{identity, identity_policy, routing, workspace};

use super::{AttemptRun, Failure};

impl AttemptRun<'_> {
    pub(super) async fn prepare_workspace(&mut self) -> Result<Workspace, Failure> {
        let key = workspace::task_key(&self.task.id)?;
        let branch = match &self.followup {
            Some(run) => run.branch().to_string(),
            None => workspace::branch_name(
                &self.orch.config.global().git.branch_prefix,
                &key,
                self.attempt,
            ),
        };
        // A follow-up on a conflicting pull request starts from the base merged in, or with
        // `shepherd.conflicts: rebase` and a branch that is ours alone, put on top of it.
        let merge_base = self.followup.as_ref().and_then(|run| run.merge_base());
        let rebase = self.orch.config.global().shepherd.conflicts == ConflictMode::Rebase;
        let git = &self.orch.config.global().git;
        let author = workspace::Author {
            name: git.author_name.clone(),
            email: git.author_email.clone(),
        };
        let task_id = self.task.id.clone();
        let base_ref = self.task.base_ref.clone().or_else(|| {
            self.orch
                .config
                .base_ref_for(&self.task.repo)
                .map(String::from)
        });
        let owner = match &self.orch.config.default_limits().user {
            Some(user) => Some(workspace::parse_owner(user)?),
            None => None,
        };
        let req = PrepareRequest {
            repo: self.task.repo.clone(),
            task_id: self.task.id.clone(),
            attempt: self.attempt,
            base_ref,
            branch,
            token: self.token().map(String::from),
            owner,
        };
        let manager = self.orch.workspaces.clone();
        // An attempt number is reused when no attempt row was written for it (the daemon
        // died before the container existed). Its half-made directory is a leftover of that
        // run, never another attempt's work; without this every retry would fail on it.
        let leftover = self
            .orch
            .config
            .workspace_root()
            .join(&key)
            .join(self.attempt.to_string());
        let recorded = self.db().attempt(&self.task.id, self.attempt)?.is_some();
        let ws = tokio::task::spawn_blocking(move || {
            if !recorded && leftover.exists() {
                tracing::info!(path = %leftover.display(), "removing the workspace of an interrupted attempt");
                manager.remove(&leftover)?;
            }
            let mut ws = manager.prepare(&req)?;
            if let Some(base) = merge_base {
                let rebased = match rebase {
                    true => Some(manager.rebase_onto_base(&mut ws, &base, &author)?),
                    false => None,
                };
                match rebased {
                    Some(workspace::BaseRebase::Rebased { onto, conflicted }) => {
                        tracing::info!(task = %task_id, %onto, conflicted = conflicted.len(), "the pull request's changes are put on top of its base (force-with-lease push)");
                    }
                    Some(workspace::BaseRebase::Contained) => {}
                    Some(workspace::BaseRebase::NotOursAlone { foreign }) => {
                        tracing::warn!(task = %task_id, commits = %foreign.join(", "), "shepherd.conflicts is rebase, but the branch has commits not made by us: merging the base instead (no force push)");
                        manager.merge_base(&mut ws, &base)?;
                    }
                    None => {
                        manager.merge_base(&mut ws, &base)?;
                    }
                }
            }
            Ok::<_, workspace::WorkspaceError>(ws)
        })
            .await
            .map_err(Failure::crash)?
            .map_err(|e| Failure::from(e).during("cannot prepare the workspace"))?;
        // A resumed attempt finds its workspace by this record.
        self.db()
            .note_workspace(&self.task.id, self.attempt, &ws, self.orch.now())?;
        Ok(ws)
    }

    pub(super) async fn route(
        &mut self,
        ws: &Workspace,
    ) -> Result<routing::RouteDecision, Failure> {
        let task = self.task.clone();
        let dir = ws.path.clone();
        let (facts, score) =
            tokio::task::spawn_blocking(move || routing::analyze(gather_facts(&task, Some(&dir))))
                .await
                .map_err(Failure::crash)?;
        routing::facts::enrich_task(&mut self.task, &facts);
        self.db().set_task_facts(
            &self.task.id,
            self.task.task_type,
            self.task.scope,
            self.task.risk,
            self.task.context_tokens,
        )?;
        let input = routing::route_input(&self.task, &facts, &score);
        let decision = self.orch.router.route(&input);
        // Issue 12: a prompt larger than the agent's context window cannot succeed.
        let config = &self.orch.config;
        let decision = match routing::fit_context(decision, facts.context_tokens, |agent| {
            config.agent(agent).map(|a| a.context_window_tokens)
        }) {
            routing::ContextFit::Fits(d) => d,
            routing::ContextFit::Rerouted(d) => {
                tracing::info!(task = %self.task.id, "{}", d.context.as_deref().unwrap_or(""));
                d
            }
            // No attempt can pass while the text stays this long: a configuration-class
            // failure, so the task is BLOCKED at once with the reason.
            routing::ContextFit::TooLarge { reason } => {
                return Err(Failure::new(AttemptStatus::Failed, reason).of_kind(FailureKind::Config))
            }
        };
        self.chain = decision.chain().into_iter().map(String::from).collect();
        self.db()
            .note_chain(&self.task.id, &self.chain, self.orch.now())?;
        // Issue 14: an agent out of quota under the identity it would use is skipped at
        // once; with the whole chain out the task waits for the earliest reset.
        let now = (self.orch.clock)();
        let choice = quota::choose(
            &self.db(),
            &self.orch.config,
            &self.task.id,
            decision.identity.as_deref(),
            &self.chain,
            now,
        );
        self.agent = match choice.map_err(Failure::crash)? {
            quota::Choice::Agent(agent) => agent,
            quota::Choice::Park(wait) => {
                let mut parked = Failure::new(AttemptStatus::Quota, quota::park_reason(&wait, now));
                parked.wait_until = Some(wait.until);
                return Err(parked);
            }
            quota::Choice::NoAgent => {
                return Err(Failure::new(
                    AttemptStatus::Quota,
                    format!(
                        "every agent of the chain ({}) refused its login",
                        self.chain.join(", ")
                    ),
                ))
            }
        };
        Ok(decision)
    }

    /// The agents this task must not try again (they refused their login).
    pub(super) fn exhausted(&self) -> BTreeSet<String> {
        quota::refused(&self.db(), &self.task.id).unwrap_or_default()
    }
    pub(super) async fn build_spec(
        &mut self,
        decision: &routing::RouteDecision,
        ws: &Workspace,
    ) -> Result<RunSpec, Failure> {
        let config = &self.orch.config;
        let profile = config.agent(&self.agent).ok_or_else(|| {
            Failure::crash(format!("agent `{}` is not in agents.yaml", self.agent))
                .of_kind(FailureKind::Config)
        })?;
        let without = identity_policy::runs_without_identity(
            config.identities().len(),
            &[
                decision.identity.as_deref(),
                profile.identity.as_deref(),
                config.global().default_identity.as_deref(),
            ],
        );
        let mut brokered = if without {
            tracing::warn!(
                agent = %profile.name,
                "no identity is configured (identities.yaml): running the agent without credentials"
            );
            identity_policy::no_identity()
        } else {
            let ident = identity::resolve(
                decision.identity.as_deref(),
                profile,
                config.global().default_identity.as_deref(),
                config.identities(),
            )?;
            identity::broker(ident, profile.agent_type)?
        };
        // A login directory that does not exist on this host cannot be mounted (Docker
        // refuses the bind); run without it and say so: the agent then reports its own
        // authentication error, and `polyphony doctor` names the missing path. When the
        // identity gives the CLI its model credential through `api_keys` (set on this host),
        // the login files are not how it logs in (and a gateway drops them anyway): their
        // absence is no warning (the demos' homes, and any key-only login).
        let keyed = keyed_login(
            profile.agent_type,
            &brokered.env_overlay,
            self.orch.env.as_ref(),
        );
        brokered.volume_mounts.retain(|m| {
            let present = m.host_path.exists();
            if !present && keyed {
                tracing::debug!(
                    identity = %brokered.identity,
                    path = %m.host_path.display(),
                    "login file absent; the agent logs in with its api_keys credential"
                );
            } else if !present {
                tracing::warn!(
                    identity = %brokered.identity,
                    path = %m.host_path.display(),
                    "credential path does not exist; running the agent without it"
                );
            }
            present
        });
        // Cost ceiling (per identity, per UTC day): wait for tomorrow without counting.
        if let Some(ceiling) = brokered.cost_ceiling_usd_per_day {
            let now = (self.orch.clock)();
            let day_start = identity_policy::utc_day_start(now);
            let spent = self.db().cost_spent_since(&brokered.identity, day_start)?;
            if identity_policy::over_ceiling(spent, ceiling) {
                let largest = self
                    .db()
                    .largest_cost_since(&brokered.identity, day_start)
                    .ok()
                    .flatten();
                let largest = largest
                    .as_ref()
                    .map(|(task, attempt, cost)| (task.as_str(), *attempt, *cost));
                let hold =
                    identity_policy::ceiling_hold(&brokered.identity, spent, ceiling, now, largest);
                tracing::warn!(identity = %brokered.identity, spent, ceiling, "{}", hold.reason);
                let mut failure = Failure::new(AttemptStatus::Cancelled, hold.reason);
                failure.wait_until = Some(hold.until);
                return Err(failure);
            }
        }
        // The project's checks come from the BASE commit, never from the agent's branch.
        let manager = self.orch.workspaces.clone();
        let repo = self.task.repo.clone();
        // A follow-up's base commit is its pull request's head: the checks come from the
        // pull request's base branch instead.
        let base = match &self.followup {
            Some(run) => run.config_ref().to_string(),
            None => ws.base_sha.clone(),
        };
        let token = self.token().map(String::from);
        let text = tokio::task::spawn_blocking(move || {
            manager.read_at_base(&repo, Some(&base), ".polyphony.yaml", token.as_deref())
        })
        .await
        .map_err(Failure::crash)?
        .map_err(|e| Failure::from(e).during("cannot read .polyphony.yaml at the base"))?;
        let project = match text {
            Some(text) => Some(
                routing::run_spec::verification_from_polyphony_yaml(&text).map_err(|e| {
                    Failure::crash(format!("{e} (in the base branch)")).of_kind(FailureKind::Config)
                })?,
            ),
            None => None,
        };
        self.scrub_secrets_of(&brokered.env_overlay, &brokered.volume_mounts);
        build_run_spec(RunSpecInputs {
            task: &self.task,
            decision,
            profile,
            identity: &brokered,
            global: config.global(),
            attempt: self.attempt,
            workspace: ws.path.clone(),
            branch: ws.branch.clone(),
            project_verify: project.as_ref(),
        })
        .map(|mut spec| {
            // A shared clone's alternates name the mirror's object directory: the agent sees
            // it read-only at that same path (issue 18), so git inside works and can never
            // write, repack or prune the mirror.
            if let Some(objects) = &ws.mirror_objects {
                spec.volume_mounts.push(crate::domain::VolumeMount {
                    host_path: objects.clone(),
                    container_path: objects.display().to_string(),
                    read_only: true,
                });
            }
            spec
        })
        .map_err(Failure::from)
    }

    /// Records the attempt's start under its identity's daily ceiling (issue 27): in the
    /// store's writing transaction, today's finished spend plus the reservation of every
    /// attempt of the identity still running (the per-attempt cap of the daemon that started
    /// it, recorded with it), on any daemon sharing the store, must stay
    /// under the ceiling, so N daemons (or N slots of one) never start on the same
    /// remainder and the day ends within the ceiling plus one attempt. Held: the attempt
    /// waits without counting, until a running one can have ended (or tomorrow).
    pub(super) fn start_attempt(&mut self, spec: &RunSpec) -> Result<(), Failure> {
        let now = self.orch.now();
        let limit = self
            .orch
            .config
            .identity(&spec.identity)
            .and_then(|i| i.cost_ceiling_usd_per_day)
            .map(|ceiling| crate::store::DailyLimit {
                ceiling_usd: ceiling,
                since: identity_policy::utc_day_start(now),
            });
        // The cap this daemon clamps the attempt's cost to is its reservation, recorded with
        // it for every daemon's check (theirs may have other caps).
        let reserve = self.orch.config.max_cost_usd_per_attempt();
        let Some(held) = self.db().start_attempt_within(spec, now, reserve, limit)? else {
            return Ok(());
        };
        let ceiling = limit.map_or(0.0, |l| l.ceiling_usd);
        let hold = identity_policy::reserved_hold(
            &spec.identity,
            held.spent_usd,
            held.running,
            held.reserved_usd,
            ceiling,
            now,
        );
        tracing::warn!(identity = %spec.identity, spent = held.spent_usd, running = held.running, ceiling, "{}", hold.reason);
        let mut failure = Failure::new(AttemptStatus::Cancelled, hold.reason);
        failure.wait_until = Some(hold.until);
        Err(failure)
    }

    /// Scrubs, from everything stored from now on, the secrets the agent could echo: the
    /// values of its env overlay, the sources' tokens and the tokens in its credential files.
    pub(super) fn scrub_secrets_of(&mut self, overlay: &[EnvVar], mounts: &[VolumeMount]) {
        let mut secrets: Vec<String> = overlay
            .iter()
            .filter_map(|v| (self.orch.env)(&v.from_host))
            .collect();
        secrets.extend(self.orch.sources.secrets().iter().map(|(_, s)| s.clone()));
        secrets.extend(crate::orchestrator::secrets::credential_tokens(mounts));
        self.scrubber = Arc::new(Scrubber::new(secrets));
    }
}

/// Whether the identity gives `agent` its model credential through `api_keys` (an overlay
/// entry under a name the CLI reads, whose host variable is set): its login files are then
/// not how it logs in.
fn keyed_login(
    agent: crate::domain::AgentType,
    overlay: &[EnvVar],
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> bool {
    crate::orchestrator::gateway_plan::credential_vars(agent)
        .iter()
        .any(|(name, _)| {
            overlay
                .iter()
                .any(|v| v.name == *name && env(&v.from_host).is_some_and(|s| !s.is_empty()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::AgentType;

    fn var(name: &str, from: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            from_host: from.into(),
        }
    }

    #[test]
    fn a_login_by_api_key_needs_no_login_files() {
        let set = |n: &str| (n == "DEMO_KEY").then(|| "sk-x".to_string());
        let codex = [var("OPENAI_API_KEY", "DEMO_KEY")];
        assert!(keyed_login(AgentType::Codex, &codex, &set));
        let claude = [var("ANTHROPIC_API_KEY", "DEMO_KEY")];
        assert!(keyed_login(AgentType::Claude, &claude, &set));
        // A key the CLI does not read, a host variable unset or empty: the files are the login.
        assert!(!keyed_login(AgentType::Claude, &codex, &set));
        assert!(!keyed_login(
            AgentType::Claude,
            &[var("FAKE_API_KEY", "DEMO_KEY")],
            &set
        ));
        assert!(!keyed_login(
            AgentType::Codex,
            &[var("OPENAI_API_KEY", "UNSET")],
            &set
        ));
        let empty = |_: &str| Some(String::new());
        assert!(!keyed_login(AgentType::Codex, &codex, &empty));
        assert!(!keyed_login(AgentType::Claude, &[], &set));
    }
}
