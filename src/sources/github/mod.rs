//! GitHub issues as a work source (spec §2) and the GitHub half of landing.
//!
//! Owns: intake (`intake`: labelled open issues of the configured repositories, every page),
//! claims (`claim`: label swap + one claim comment), landing (`landing`: one pull request, one
//! issue comment, label swap; or the blocked report), and the client with its fault handling
//! (`client`: the transport; `error`, `environment` for token and API URL, `faults` for
//! failure classification and retry policy, `urls` for encoding and next-page links). For the
//! PR shepherd (issue 15): pull requests (`pulls`), review feedback and replies (`feedback`),
//! check runs and commit statuses (`checks`), permissions (`collaborators`), read with
//! conditional requests (`conditional`). Every write is idempotent: hidden markers in comments
//! and the head branch of the pull request are looked up before anything is created, so a
//! restart never posts twice.
//!
//! Architecture Invariant: a label swap adds the new label before it removes the old ones
//! (`agent-ready` → `agent-claimed` → `agent-landed`/`agent-blocked`), so no instant exists
//! in which an issue carries none of them (issue 19). Ownership is the earliest claim
//! marker: a claim this home left half-done (`claim_resuming`, told by a pending claim
//! intent) is finished, never taken for someone else's release.
//! Architecture Invariant: hidden markers count only in comments by the token's own user
//! (`GithubClient::viewer_login`); a redo finds the pull request by its head branch and
//! each comment by its marker (`claim::ensure_comment` lists the comments again before
//! retrying a POST whose outcome is unknown). Pagination follows `Link` URLs only on the
//! API host.
//! Architecture Invariant: one GitHub-token rule, `environment::resolve_token`: with no
//! variable named, `GITHUB_TOKEN`, else `GH_TOKEN`; with one named (an identity's
//! `github_token_env`, picked by [`token_var`]), only that one, never a fallback.
//! Architecture Invariant: the agent's final message enters a PR body only through
//! `landing::quote_agent_message` (quoted, capped, no closing keywords, @mentions or HTML
//! comments).
//! Must not: touch the store, git or Docker; log or store the token.

pub mod checks;
pub mod claim;
pub mod client;
pub mod collaborators;
pub mod conditional;
pub mod environment;
pub mod error;
pub mod etag_cache;
pub mod faults;
pub mod feedback;
pub mod intake;
pub mod landing;
pub mod model;
pub mod pulls;
pub mod urls;

use std::fmt;

use async_trait::async_trait;

pub use client::{
    resolve_api_url, resolve_token, FaultPolicy, GithubClient, GithubError, ResolvedToken,
    DEFAULT_API_URL,
};
pub use landing::{render_blocked_comment, render_evidence_table, render_pr_body};

use super::{
    Blocked, ClaimError, ClaimInfo, ClaimedTask, Landed, Polled, ReplyPlace, Reported, Source,
    SourceError,
};
use crate::config::model::{GithubConfig, RepoConfig};
use crate::config::Config;
use crate::domain::{SourceKind, Task};

/// A repository `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoSlug {
    pub owner: String,
    pub name: String,
}

impl RepoSlug {
    /// Parse `owner/name`. Names are limited to what GitHub allows, so they are safe in paths.
    pub fn parse(value: &str) -> Result<RepoSlug, GithubError> {
        let invalid = |reason: &str| GithubError::InvalidRepo {
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let (owner, name) = value
            .trim()
            .split_once('/')
            .ok_or_else(|| invalid("no `/` between owner and name"))?;
        let ok = |s: &str| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !ok(owner) || !ok(name) {
            return Err(invalid(
                "owner and name may only hold letters, digits, `-`, `_` and `.`",
            ));
        }
        Ok(RepoSlug {
            owner: owner.to_string(),
            name: name.to_string(),
        })
    }

    /// `/repos/{owner}/{name}`
    pub fn api_path(&self) -> String {
        format!("/repos/{}/{}", self.owner, self.name)
    }
}

impl fmt::Display for RepoSlug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// An issue `owner/name#N`: the stable task id and `source_ref` of a GitHub task.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IssueRef {
    pub repo: RepoSlug,
    pub number: u64,
}

impl IssueRef {
    pub fn parse(value: &str) -> Result<IssueRef, GithubError> {
        let (repo, number) = value
            .rsplit_once('#')
            .ok_or_else(|| GithubError::InvalidRepo {
                value: value.to_string(),
                reason: "an issue reference needs `#N`".into(),
            })?;
        let number = number
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| GithubError::InvalidRepo {
                value: value.to_string(),
                reason: format!("`{number}` is not an issue number"),
            })?;
        Ok(IssueRef {
            repo: RepoSlug::parse(repo)?,
            number,
        })
    }

    /// `/repos/{owner}/{name}/issues/{N}`
    pub fn api_path(&self) -> String {
        format!("{}/issues/{}", self.repo.api_path(), self.number)
    }
}

impl fmt::Display for IssueRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.repo, self.number)
    }
}

/// The label names the source reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    pub ready: String,
    pub claimed: String,
    pub landed: String,
    pub blocked: String,
}

impl Labels {
    pub fn from_config(config: &GithubConfig) -> Labels {
        Labels {
            ready: config.ready_label.clone(),
            claimed: config.claimed_label.clone(),
            landed: config.landed_label.clone(),
            blocked: config.blocked_label.clone(),
        }
    }
}

/// Settings the GitHub source works with (from `GithubConfig` and the per-repo overrides).
#[derive(Debug, Clone)]
pub struct GithubSettings {
    pub repos: Vec<RepoSlug>,
    pub labels: Labels,
    pub trusted_only: bool,
    pub draft_prs: bool,
    /// Page size for list calls (GitHub allows at most 100).
    pub per_page: u32,
    /// `(glob over owner/name, base ref)`: first matching entry wins, as in `config.repos`.
    pub base_refs: Vec<(globset::GlobMatcher, Option<String>)>,
}

impl GithubSettings {
    /// Validate the configured repositories (`owner/name`) and override globs.
    pub fn from_config(
        config: &GithubConfig,
        overrides: &[RepoConfig],
    ) -> Result<GithubSettings, GithubError> {
        let repos = config
            .repos
            .iter()
            .map(|r| RepoSlug::parse(r))
            .collect::<Result<Vec<_>, _>>()?;
        let base_refs = overrides
            .iter()
            .map(|o| {
                globset::Glob::new(&o.repo)
                    .map(|g| (g.compile_matcher(), o.base_ref.clone()))
                    .map_err(|e| GithubError::InvalidRepo {
                        value: o.repo.clone(),
                        reason: format!("not a valid glob in `repos`: {e}"),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(GithubSettings {
            repos,
            labels: Labels::from_config(config),
            trusted_only: config.trusted_only,
            draft_prs: config.draft_prs,
            per_page: 100,
            base_refs,
        })
    }

    /// The configured base ref for `repo`, if its first matching override sets one.
    pub fn configured_base_ref(&self, repo: &RepoSlug) -> Option<String> {
        let name = repo.to_string();
        self.base_refs
            .iter()
            .find(|(glob, _)| glob.is_match(&name))
            .and_then(|(_, base)| base.clone())
    }
}

/// GitHub issues as a [`Source`].
#[derive(Debug, Clone)]
pub struct GithubSource {
    client: GithubClient,
    settings: GithubSettings,
    /// The token pushes to GitHub remotes take (`git push` over HTTPS).
    push_token: Option<ResolvedToken>,
}

impl GithubSource {
    pub fn new(client: GithubClient, settings: GithubSettings) -> GithubSource {
        GithubSource {
            client,
            settings,
            push_token: None,
        }
    }

    /// The token pushes of GitHub tasks take.
    pub fn with_push_token(mut self, token: Option<ResolvedToken>) -> GithubSource {
        self.push_token = token;
        self
    }

    pub fn client(&self) -> &GithubClient {
        &self.client
    }

    pub fn settings(&self) -> &GithubSettings {
        &self.settings
    }

    /// Offered issues of one repository as DISCOVERED tasks.
    pub async fn poll_repo(&self, repo: &RepoSlug) -> Result<Vec<Task>, GithubError> {
        intake::poll_repo(&self.client, &self.settings, repo, chrono::Utc::now()).await
    }

    /// Offered issues of every configured repository. Partial: a repository that failed
    /// does not hide the others' tasks.
    pub async fn poll_all(&self) -> (Vec<Task>, Vec<(RepoSlug, GithubError)>) {
        let mut tasks = Vec::new();
        let mut errors = Vec::new();
        for repo in &self.settings.repos {
            match self.poll_repo(repo).await {
                Ok(found) => tasks.extend(found),
                Err(e) => errors.push((repo.clone(), e)),
            }
        }
        (tasks, errors)
    }

    /// One issue as a DISCOVERED task, whatever its labels (for `polyphony spawn owner/repo#N`).
    pub async fn fetch_task(&self, issue: &IssueRef) -> Result<Task, GithubError> {
        intake::fetch_task(&self.client, &self.settings, issue, chrono::Utc::now()).await
    }

    /// Claim the issue behind `task` (see [`claim::claim_issue`]).
    pub async fn claim_issue(
        &self,
        task: &Task,
        info: &ClaimInfo,
    ) -> Result<ClaimedTask, ClaimError> {
        self.claim_issue_resuming(task, info, false).await
    }

    /// Claim the issue behind `task`, finishing a claim this home left half-done (see
    /// [`claim::claim_issue_resuming`]).
    pub async fn claim_issue_resuming(
        &self,
        task: &Task,
        info: &ClaimInfo,
        resuming: bool,
    ) -> Result<ClaimedTask, ClaimError> {
        let issue = issue_of(task)?;
        claim::claim_issue_resuming(
            &self.client,
            &self.settings.labels,
            &issue,
            &task.id,
            info,
            resuming,
        )
        .await
    }

    /// Open (or find) the pull request, comment once, label landed.
    pub async fn land(&self, task: &Task, landed: &super::Landed) -> Result<Reported, SourceError> {
        let issue = issue_of(task)?;
        Ok(landing::land(&self.client, &self.settings, &issue, task, landed).await?)
    }

    /// Comment the reasons once, label blocked.
    pub async fn block(
        &self,
        task: &Task,
        blocked: &super::Blocked,
    ) -> Result<Reported, SourceError> {
        let issue = issue_of(task)?;
        Ok(landing::block(
            &self.client,
            &self.settings.labels,
            &issue,
            &task.id,
            blocked,
        )
        .await?)
    }
}

impl GithubSource {
    /// Say the task was cancelled and release the claim (see [`landing::cancelled`]).
    pub async fn cancelled(&self, task: &Task, reason: &str) -> Result<Reported, SourceError> {
        let issue = issue_of(task)?;
        Ok(landing::cancelled(
            &self.client,
            &self.settings.labels,
            &issue,
            &task.id,
            reason,
        )
        .await?)
    }

    /// Offer the issue behind a BLOCKED task again (`polyphony retry`): the ready label
    /// on, the blocked and claimed labels off, as a person re-labelling it would. Safe to
    /// repeat.
    pub async fn offer_again(&self, task: &Task) -> Result<(), SourceError> {
        let issue = issue_of(task)?;
        let labels = &self.settings.labels;
        claim::add_labels(&self.client, &issue, &[labels.ready.as_str()]).await?;
        claim::remove_label(&self.client, &issue, &labels.blocked).await?;
        claim::remove_label(&self.client, &issue, &labels.claimed).await?;
        Ok(())
    }
}

fn issue_of(task: &Task) -> Result<IssueRef, SourceError> {
    if task.source != SourceKind::Github {
        return Err(SourceError::WrongTask {
            task_id: task.id.clone(),
            source_kind: SourceKind::Github,
            reason: format!("it comes from the {} source", task.source),
        });
    }
    IssueRef::parse(&task.source_ref).map_err(|e| SourceError::WrongTask {
        task_id: task.id.clone(),
        source_kind: SourceKind::Github,
        reason: e.to_string(),
    })
}

#[async_trait]
impl Source for GithubSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Github
    }

    fn name(&self) -> &'static str {
        "GitHub"
    }

    fn reports_back(&self) -> bool {
        true
    }

    async fn poll_each(&self) -> Polled {
        let (tasks, errors) = self.poll_all().await;
        Polled {
            tasks,
            errors: errors
                .into_iter()
                .map(|(repo, e)| (repo.to_string(), e.into()))
                .collect(),
            places: self.settings.repos.len(),
        }
    }

    async fn fetch(&self, reference: &str) -> Result<Task, SourceError> {
        let issue = IssueRef::parse(reference)?;
        Ok(self.fetch_task(&issue).await?)
    }

    async fn claim_resuming(
        &self,
        task: &Task,
        info: &ClaimInfo,
        resuming: bool,
    ) -> Result<ClaimedTask, ClaimError> {
        GithubSource::claim_issue_resuming(self, task, info, resuming).await
    }

    async fn land(&self, task: &Task, landed: &Landed) -> Result<Reported, SourceError> {
        GithubSource::land(self, task, landed).await
    }

    async fn block(&self, task: &Task, blocked: &Blocked) -> Result<Reported, SourceError> {
        GithubSource::block(self, task, blocked).await
    }

    async fn cancelled(&self, task: &Task, reason: &str) -> Result<Reported, SourceError> {
        GithubSource::cancelled(self, task, reason).await
    }

    /// On the pull request the follow-up works on: a reply in the review thread, or an
    /// issue comment in its conversation.
    async fn reply(
        &self,
        task: &Task,
        place: ReplyPlace,
        marker: &str,
        body: &str,
    ) -> Result<u64, SourceError> {
        let pull = issue_of(task)?;
        let (id, _) = match place {
            ReplyPlace::Thread(thread) => {
                feedback::ensure_review_reply(&self.client, &pull, thread, marker, body).await?
            }
            ReplyPlace::Conversation => {
                claim::ensure_comment(&self.client, &pull, marker, body, None).await?
            }
        };
        Ok(id)
    }

    async fn offer_again(&self, task: &Task) -> Result<(), SourceError> {
        GithubSource::offer_again(self, task).await
    }

    fn push_token(&self) -> Option<&str> {
        self.push_token.as_ref().map(|t| t.secret())
    }
}

/// The variable the default identity names for its GitHub token, if any.
pub fn token_var(config: &Config) -> Option<String> {
    let identity = match config.global().default_identity.as_deref() {
        Some(name) => config.identity(name),
        None if config.identities().len() == 1 => config.identities().first(),
        None => None,
    };
    identity.and_then(|i| i.github_token_env.clone())
}

/// The GitHub source of a home, from its configuration and `env`: present when GitHub is
/// configured (repos to poll) or a token is available. Without repos to poll a client that
/// cannot be built only matters for GitHub tasks, which then fail with [`not_configured`].
pub fn from_config(
    config: &Config,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> anyhow::Result<(Option<GithubSource>, Option<ResolvedToken>)> {
    let var = token_var(config);
    let token = resolve_token(var.as_deref(), env).ok();
    if config.global().github.repos.is_empty() && token.is_none() {
        return Ok((None, None));
    }
    match GithubClient::from_env(var.as_deref(), env, FaultPolicy::default()) {
        Ok(client) => {
            let settings =
                GithubSettings::from_config(&config.global().github, &config.global().repos)?;
            let source = GithubSource::new(client, settings).with_push_token(token.clone());
            Ok((Some(source), token))
        }
        Err(e) if config.global().github.repos.is_empty() => {
            tracing::debug!(error = %e, "no GitHub client");
            Ok((None, token))
        }
        Err(e) => Err(e.into()),
    }
}

/// A GitHub source from the configuration and the process environment, without Docker
/// (for verbs that only talk to GitHub); an error when no client can be built.
pub fn source_from_env(config: &Config) -> anyhow::Result<GithubSource> {
    let var = token_var(config);
    let client = GithubClient::from_env(
        var.as_deref(),
        |n| std::env::var(n).ok(),
        FaultPolicy::default(),
    )?;
    let settings = GithubSettings::from_config(&config.global().github, &config.global().repos)?;
    Ok(GithubSource::new(client, settings))
}

/// Why a GitHub task cannot be handled: what is actually wrong (a bad GITHUB_API_URL, an
/// unusable token, the unset variable a named identity needs) when building the client
/// again shows it (issues 11, 12), else that no token was found.
pub fn not_configured(
    var: Option<&str>,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> anyhow::Error {
    if let Err(e) = GithubClient::from_env(var, env, FaultPolicy::default()) {
        if !matches!(e, GithubError::MissingToken { .. }) {
            return anyhow::Error::new(e);
        }
    }
    anyhow::Error::new(crate::error::UsageError::new(
        "GitHub is not configured: no token was found",
        "export GITHUB_TOKEN (or GH_TOKEN, or the variable your identity's \
         github_token_env names); set GITHUB_API_URL for GitHub Enterprise",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_slugs_parse() {
        for (input, ok) in [
            ("octo/widgets", true),
            (" octo/widgets.rs ", true),
            ("a-b_c/d.e", true),
            ("octo", false),
            ("/widgets", false),
            ("octo/", false),
            ("octo/../x", false),
            ("octo/wid gets", false),
            ("../x", false),
        ] {
            assert_eq!(RepoSlug::parse(input).is_ok(), ok, "{input}");
        }
        let err = RepoSlug::parse("octo").unwrap_err();
        assert!(err.is_config_error());
        assert!(err.to_string().contains("`octo`"), "{err}");
    }

    #[test]
    fn issue_refs_round_trip() {
        let issue = IssueRef::parse("octo/widgets#42").unwrap();
        assert_eq!(issue.number, 42);
        assert_eq!(issue.to_string(), "octo/widgets#42");
        assert_eq!(issue.api_path(), "/repos/octo/widgets/issues/42");
        for bad in [
            "octo/widgets",
            "octo/widgets#",
            "octo/widgets#0",
            "octo/widgets#x",
            "w#1",
        ] {
            assert!(IssueRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn base_ref_overrides_first_match_wins() {
        let config = GithubConfig {
            repos: vec!["octo/widgets".into()],
            ..GithubConfig::default()
        };
        let over = |repo: &str, base: Option<&str>| RepoConfig {
            repo: repo.into(),
            base_ref: base.map(str::to_string),
            verify: None,
            image: None,
            egress: None,
        };
        let settings = GithubSettings::from_config(
            &config,
            &[
                over("octo/gadgets", Some("dev")),
                over("octo/*", Some("main")),
                over("*", Some("never")),
            ],
        )
        .unwrap();
        let slug = |s: &str| RepoSlug::parse(s).unwrap();
        assert_eq!(
            settings
                .configured_base_ref(&slug("octo/gadgets"))
                .as_deref(),
            Some("dev")
        );
        assert_eq!(
            settings
                .configured_base_ref(&slug("octo/widgets"))
                .as_deref(),
            Some("main")
        );
        assert_eq!(
            settings.configured_base_ref(&slug("other/x")).as_deref(),
            Some("never")
        );
        let none = GithubSettings::from_config(&config, &[over("octo/*", None)]).unwrap();
        assert_eq!(none.configured_base_ref(&slug("octo/widgets")), None);
    }
}
