//! What the fake holds: users, repositories with their labels, issues, pull requests,
//! comments, events and collaborators; injected faults and the requests seen. Mutations
//! that GitHub does as one step (a label with its event) are methods here.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use axum::http::Method;

use super::{FaultKind, SeenRequest};

#[derive(Debug, Clone)]
pub(super) struct Fault {
    pub(super) method: Option<Method>,
    pub(super) path_contains: String,
    pub(super) remaining: usize,
    pub(super) kind: FaultKind,
}

#[derive(Debug, Clone)]
pub(super) struct LabelData {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) color: String,
    pub(super) description: Option<String>,
}

#[derive(Debug, Clone)]
pub(super) struct CommentData {
    pub(super) id: u64,
    pub(super) body: String,
    pub(super) author: String,
    pub(super) created_at: String,
}

#[derive(Debug, Clone)]
pub(super) struct EventData {
    pub(super) id: u64,
    pub(super) event: String,
    pub(super) actor: String,
    pub(super) label: Option<String>,
    pub(super) created_at: String,
}

#[derive(Debug, Clone)]
pub(super) struct PullData {
    pub(super) head: String,
    pub(super) base: String,
    pub(super) head_sha: String,
    pub(super) base_sha: String,
    pub(super) draft: bool,
}

#[derive(Debug, Clone)]
pub(super) struct IssueData {
    pub(super) id: u64,
    pub(super) number: u64,
    pub(super) title: String,
    pub(super) body: String,
    pub(super) author: String,
    pub(super) labels: Vec<String>,
    pub(super) state: String,
    pub(super) locked: bool,
    pub(super) created_at: String,
    pub(super) updated_at: String,
    pub(super) closed_at: Option<String>,
    pub(super) comments: Vec<CommentData>,
    pub(super) events: Vec<EventData>,
    pub(super) pull: Option<PullData>,
}

#[derive(Debug, Clone)]
pub(super) struct RepoData {
    pub(super) id: u64,
    pub(super) owner: String,
    pub(super) name: String,
    pub(super) clone_url: String,
    pub(super) default_branch: String,
    pub(super) labels: BTreeMap<String, LabelData>,
    pub(super) issues: BTreeMap<u64, IssueData>,
    /// login -> admin | maintain | write | triage | read
    pub(super) collaborators: BTreeMap<String, String>,
    pub(super) next_number: u64,
}

impl RepoData {
    pub(super) fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

#[derive(Debug)]
pub(super) struct FakeState {
    /// `http://127.0.0.1:PORT`
    pub(super) root: String,
    /// API path prefix (`""` or `/api/v3`).
    pub(super) prefix: String,
    pub(super) token: String,
    pub(super) users: BTreeMap<String, u64>,
    pub(super) repos: Vec<RepoData>,
    pub(super) next_id: u64,
    pub(super) faults: Vec<Fault>,
    pub(super) requests: Vec<SeenRequest>,
}

impl FakeState {
    pub(super) fn api(&self) -> String {
        format!("{}{}", self.root, self.prefix)
    }

    pub(super) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(super) fn ensure_user(&mut self, login: &str) -> u64 {
        if let Some(id) = self.users.get(login) {
            return *id;
        }
        let id = self.id();
        self.users.insert(login.to_string(), id);
        id
    }

    pub(super) fn repo_index(&self, full_name: &str) -> usize {
        self.repos
            .iter()
            .position(|r| r.full_name() == full_name)
            .unwrap_or_else(|| panic!("fake GitHub: no repository {full_name}"))
    }

    pub(super) fn ensure_label(&mut self, repo: usize, name: &str) {
        let key = name.to_ascii_lowercase();
        if !self.repos[repo].labels.contains_key(&key) {
            let id = self.id();
            self.repos[repo].labels.insert(
                key,
                LabelData {
                    id,
                    name: name.to_string(),
                    color: "ededed".into(),
                    description: None,
                },
            );
        }
    }

    /// Add a label to an issue with a `labeled` event (no-op if present).
    pub(super) fn apply_label(
        &mut self,
        repo: usize,
        number: u64,
        name: &str,
        actor: &str,
    ) -> bool {
        self.ensure_label(repo, name);
        self.ensure_user(actor);
        let canonical = self.repos[repo].labels[&name.to_ascii_lowercase()]
            .name
            .clone();
        let event_id = self.id();
        let issue = self.repos[repo]
            .issues
            .get_mut(&number)
            .expect("issue exists");
        if issue.labels.iter().any(|l| l.eq_ignore_ascii_case(name)) {
            return false;
        }
        issue.labels.push(canonical.clone());
        issue.updated_at = now();
        issue.events.push(EventData {
            id: event_id,
            event: "labeled".into(),
            actor: actor.to_string(),
            label: Some(canonical),
            created_at: now(),
        });
        true
    }

    pub(super) fn drop_label(&mut self, repo: usize, number: u64, name: &str, actor: &str) -> bool {
        let event_id = self.id();
        let issue = self.repos[repo]
            .issues
            .get_mut(&number)
            .expect("issue exists");
        let Some(pos) = issue
            .labels
            .iter()
            .position(|l| l.eq_ignore_ascii_case(name))
        else {
            return false;
        };
        let removed = issue.labels.remove(pos);
        issue.updated_at = now();
        issue.events.push(EventData {
            id: event_id,
            event: "unlabeled".into(),
            actor: actor.to_string(),
            label: Some(removed),
            created_at: now(),
        });
        true
    }
}

pub(super) type Shared = Arc<Mutex<FakeState>>;

/// The sha of `branch` in a `file://` bare repo; `None` when it is missing (or the clone
/// URL is not a local repo, then the caller does not check).
pub(super) fn branch_sha(clone_url: &str, branch: &str) -> Option<Option<String>> {
    let path = clone_url.strip_prefix("file://")?;
    if !Path::new(path).exists() {
        return None;
    }
    let out = Command::new("git")
        .args(["--git-dir", path, "rev-parse", "--verify", "--quiet"])
        .arg(format!("refs/heads/{branch}"))
        .output()
        .ok()?;
    Some(
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()),
    )
}

pub(super) fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(super) fn fake_sha(seed: u64) -> String {
    format!("{seed:040x}")
}

pub(super) fn epoch() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
