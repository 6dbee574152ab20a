//! Issue intake: open issues carrying the ready label become DISCOVERED tasks (spec §2).
//!
//! Owns: listing every page of labelled open issues, dropping pull requests (the issues API
//! lists them too) and locked issues, the optional `trusted_only` check (who applied the
//! ready label, and may they write?), and the label -> task facts mapping.
//! Must not: dedupe (the store refuses a known id; ids here are stable `owner/repo#N`), or
//! change anything on GitHub.

use std::collections::HashMap;

use super::model::{Issue, Repository};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::client::{encode_component, GithubClient, GithubError};
use super::{GithubSettings, IssueRef, RepoSlug};
use crate::domain::{Risk, SourceKind, Task, TaskType};

/// Facts about the repository every task of it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFacts {
    pub clone_url: String,
    pub default_branch: String,
}

/// `GET /repos/{o}/{r}`: the clone URL comes from the API (spec §2), never guessed.
pub async fn repo_facts(client: &GithubClient, repo: &RepoSlug) -> Result<RepoFacts, GithubError> {
    let what = format!("reading repository {repo}");
    let info: Repository = client.get_json(&what, &repo.api_path()).await?;
    let clone_url = info
        .clone_url
        .map(|u| u.to_string())
        .ok_or_else(|| GithubError::Decode {
            what: what.clone(),
            message: "the repository has no clone_url".into(),
        })?;
    Ok(RepoFacts {
        clone_url,
        default_branch: info.default_branch.unwrap_or_else(|| "main".into()),
    })
}

/// Offered issues of `repo`, as tasks.
pub async fn poll_repo(
    client: &GithubClient,
    settings: &GithubSettings,
    repo: &RepoSlug,
    now: DateTime<Utc>,
) -> Result<Vec<Task>, GithubError> {
    let facts = repo_facts(client, repo).await?;
    let ready = &settings.labels.ready;
    let path = format!(
        "{}/issues?state=open&labels={}&per_page={}",
        repo.api_path(),
        encode_component(ready),
        settings.per_page.clamp(1, 100)
    );
    let issues: Vec<Issue> = client
        .get_all_pages(&format!("listing issues of {repo} labelled {ready}"), &path)
        .await?;
    let mut permissions = HashMap::new();
    let mut tasks = Vec::new();
    for issue in issues {
        if !is_offered(&issue, ready) {
            continue;
        }
        if settings.trusted_only
            && !labelled_by_writer(client, repo, issue.number, ready, &mut permissions).await?
        {
            tracing::info!(
                repo = %repo,
                issue = issue.number,
                "skipping issue: `{ready}` was not applied by a user with write access"
            );
            continue;
        }
        tasks.push(task_from_issue(repo, &facts, settings, &issue, now));
    }
    Ok(tasks)
}

/// One issue as a task, whatever its labels (an explicit `spawn owner/repo#N`).
pub async fn fetch_task(
    client: &GithubClient,
    settings: &GithubSettings,
    issue: &IssueRef,
    now: DateTime<Utc>,
) -> Result<Task, GithubError> {
    let facts = repo_facts(client, &issue.repo).await?;
    let found: Issue = client
        .get_json(&format!("reading issue {issue}"), &issue.api_path())
        .await?;
    if found.pull_request.is_some() {
        return Err(GithubError::InvalidRepo {
            value: issue.to_string(),
            reason: "this is a pull request, not an issue".into(),
        });
    }
    Ok(task_from_issue(&issue.repo, &facts, settings, &found, now))
}

/// Open, unlocked, not a pull request, carrying the ready label (the server filters on the
/// label already; checking again costs nothing and guards against a proxy that does not).
fn is_offered(issue: &Issue, ready: &str) -> bool {
    issue.pull_request.is_none()
        && !issue.locked
        && issue.is_open()
        && issue
            .labels
            .iter()
            .any(|l| l.name.eq_ignore_ascii_case(ready))
}

fn task_from_issue(
    repo: &RepoSlug,
    facts: &RepoFacts,
    settings: &GithubSettings,
    issue: &Issue,
    now: DateTime<Utc>,
) -> Task {
    let id = format!("{repo}#{}", issue.number);
    let mut task = Task::new(
        id.clone(),
        SourceKind::Github,
        id,
        facts.clone_url.clone(),
        issue.title.clone(),
        now,
    );
    task.body = issue.body.clone().unwrap_or_default();
    task.labels = issue.labels.iter().map(|l| l.name.clone()).collect();
    task.base_ref = Some(
        settings
            .configured_base_ref(repo)
            .unwrap_or_else(|| facts.default_branch.clone()),
    );
    let facts_from_labels = classify_labels(&task.labels);
    task.task_type = facts_from_labels.task_type;
    task.risk = facts_from_labels.risk;
    task.requires_web = facts_from_labels.requires_web;
    // A rough first estimate (4 characters a token); routing refines it with the files
    // the issue mentions.
    task.context_tokens = ((task.title.len() + task.body.len()) / 4) as u64;
    let meta = [
        ("repo", repo.to_string()),
        ("number", issue.number.to_string()),
        ("html_url", issue.html_url.clone().unwrap_or_default()),
        ("node_id", issue.node_id.clone().unwrap_or_default()),
        (
            "author",
            issue
                .user
                .as_ref()
                .map(|u| u.login.clone())
                .unwrap_or_default(),
        ),
    ];
    task.metadata = meta.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    task
}

/// `trusted_only`: the LAST `labeled` event for the ready label must be by a user whose
/// collaborator permission is admin, maintain or write. Events and permissions are read as
/// raw JSON: octocrab's typed models drop the label and reject `write`/`read`/`none`.
async fn labelled_by_writer(
    client: &GithubClient,
    repo: &RepoSlug,
    number: u64,
    ready: &str,
    permissions: &mut HashMap<String, bool>,
) -> Result<bool, GithubError> {
    let path = format!("{}/issues/{number}/events?per_page=100", repo.api_path());
    let events: Vec<Value> = client
        .get_all_pages(&format!("reading events of {repo}#{number}"), &path)
        .await?;
    let Some(login) = last_labeller(&events, ready) else {
        return Ok(false);
    };
    if let Some(known) = permissions.get(&login) {
        return Ok(*known);
    }
    let path = format!(
        "{}/collaborators/{}/permission",
        repo.api_path(),
        encode_component(&login)
    );
    let what = format!("reading the permission of {login} on {repo}");
    let permission = match client.get_json::<Value>(&what, &path).await {
        Ok(answer) => answer
            .get("permission")
            .and_then(Value::as_str)
            .unwrap_or("none")
            .to_string(),
        // Not a collaborator (or no such user any more): no write access.
        Err(GithubError::NotFound { .. }) => "none".to_string(),
        Err(e) => return Err(e),
    };
    let trusted = matches!(permission.as_str(), "admin" | "maintain" | "write");
    permissions.insert(login, trusted);
    Ok(trusted)
}

/// Login of whoever applied `label` last, from raw issue events.
pub fn last_labeller(events: &[Value], label: &str) -> Option<String> {
    events
        .iter()
        .filter(|e| e.get("event").and_then(Value::as_str) == Some("labeled"))
        .filter(|e| {
            e.pointer("/label/name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.eq_ignore_ascii_case(label))
        })
        .filter_map(|e| e.pointer("/actor/login").and_then(Value::as_str))
        .next_back()
        .map(str::to_string)
}

/// What labels say about a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelFacts {
    pub task_type: TaskType,
    pub risk: Risk,
    pub requires_web: bool,
}

/// Labels -> task type (first label that names one), risk (highest `risk:*`), and
/// `needs-web`. Case-insensitive. The routing layer has a richer classifier; this one only
/// fills the task's defaults at intake.
pub fn classify_labels(labels: &[String]) -> LabelFacts {
    let mut task_type = None;
    let mut risk = None;
    let mut requires_web = false;
    for label in labels {
        let label = label.trim().to_ascii_lowercase();
        let kind = match label.as_str() {
            "bug" | "bugfix" => Some(TaskType::Bugfix),
            "enhancement" | "feature" => Some(TaskType::Feature),
            "documentation" | "docs" => Some(TaskType::Docs),
            "refactor" => Some(TaskType::Refactor),
            "research" => Some(TaskType::Research),
            "migration" => Some(TaskType::Migration),
            "review" => Some(TaskType::Review),
            _ => None,
        };
        task_type = task_type.or(kind);
        if let Some(level) = label.strip_prefix("risk:") {
            if let Ok(level) = level.parse::<Risk>() {
                risk = risk.max(Some(level));
            }
        }
        requires_web |= label == "needs-web";
    }
    LabelFacts {
        task_type: task_type.unwrap_or_default(),
        risk: risk.unwrap_or_default(),
        requires_web,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(labels: &[&str], task_type: TaskType, risk: Risk, requires_web: bool) {
        let labels: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            classify_labels(&labels),
            LabelFacts {
                task_type,
                risk,
                requires_web
            },
            "{labels:?}"
        );
    }

    #[test]
    fn labels_map_to_task_facts() {
        use Risk::*;
        use TaskType::*;
        check(&[], Feature, Low, false);
        check(&["agent-ready"], Feature, Low, false);
        check(&["bug"], Bugfix, Low, false);
        check(&["Bug"], Bugfix, Low, false);
        check(&["enhancement"], Feature, Low, false);
        check(&["feature"], Feature, Low, false);
        check(&["documentation"], Docs, Low, false);
        check(&["docs"], Docs, Low, false);
        check(&["refactor"], Refactor, Low, false);
        check(&["research"], Research, Low, false);
        check(&["migration"], Migration, Low, false);
        check(&["review"], Review, Low, false);
        check(&["docs", "bug"], Docs, Low, false);
        check(&["risk:high"], Feature, High, false);
        check(&["risk:medium"], Feature, Medium, false);
        check(
            &["risk:low", "risk:high", "risk:medium"],
            Feature,
            High,
            false,
        );
        check(&["risk:extreme"], Feature, Low, false);
        check(&["needs-web"], Feature, Low, true);
        check(&["bug", "risk:medium", "needs-web"], Bugfix, Medium, true);
    }

    #[test]
    fn last_labeller_takes_the_last_matching_event() {
        let labeled = |login: &str, label: &str| json!({"event": "labeled", "actor": {"login": login}, "label": {"name": label}});
        let events = vec![
            labeled("alice", "agent-ready"),
            json!({"event": "unlabeled", "actor": {"login": "bob"}, "label": {"name": "agent-ready"}}),
            labeled("mallory", "agent-ready"),
            labeled("carol", "bug"),
            json!({"event": "some_future_event", "actor": null}),
        ];
        assert_eq!(
            last_labeller(&events, "agent-ready").as_deref(),
            Some("mallory")
        );
        assert_eq!(
            last_labeller(&events, "Agent-Ready").as_deref(),
            Some("mallory")
        );
        assert_eq!(last_labeller(&events, "bug").as_deref(), Some("carol"));
        assert_eq!(last_labeller(&events, "docs"), None);
        assert_eq!(last_labeller(&[], "agent-ready"), None);
    }
}
