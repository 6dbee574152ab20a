//! What the fake holds: users, repositories with their labels, issues, pull requests,
//! comments, events and collaborators; injected faults and the requests seen. Mutations
//! that GitHub does as one step (a label with its event) are methods here.

use std::collections::BTreeMap;
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
    /// The branch tips as last seen; open pull requests follow their branches in the bare
    /// repository (see `pulls::sync_tips`), closed ones keep what they had.
    pub(super) head_sha: String,
    pub(super) base_sha: String,
    pub(super) draft: bool,
    pub(super) merged: bool,
    pub(super) merged_at: Option<String>,
    pub(super) merged_by: Option<String>,
    pub(super) merge_commit_sha: Option<String>,
    /// Mergeability computed for these tips; GitHub computes it in the background after a
    /// read, so the first read after the tips move answers `null` (see `pulls::get_pull`).
    pub(super) mergeability: Option<Mergeability>,
    pub(super) reviews: Vec<ReviewData>,
    pub(super) review_comments: Vec<ReviewCommentData>,
}

impl PullData {
    pub(super) fn new(
        head: String,
        base: String,
        head_sha: String,
        base_sha: String,
        draft: bool,
    ) -> PullData {
        PullData {
            head,
            base,
            head_sha,
            base_sha,
            draft,
            merged: false,
            merged_at: None,
            merged_by: None,
            merge_commit_sha: None,
            mergeability: None,
            reviews: Vec::new(),
            review_comments: Vec::new(),
        }
    }
}

/// What real git said about merging `head_sha` into `base_sha`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mergeability {
    pub(super) head_sha: String,
    pub(super) base_sha: String,
    /// `None` when the repository is not a local bare one (nothing to compute from).
    pub(super) conflicts: Option<bool>,
    /// The base tip is an ancestor of the head.
    pub(super) up_to_date: bool,
}

#[derive(Debug, Clone)]
pub(super) struct ReviewData {
    pub(super) id: u64,
    pub(super) author: String,
    /// APPROVED | CHANGES_REQUESTED | COMMENTED | DISMISSED | PENDING
    pub(super) state: String,
    pub(super) body: String,
    pub(super) commit_id: String,
    pub(super) submitted_at: Option<String>,
}

#[derive(Debug, Clone)]
pub(super) struct ReviewCommentData {
    pub(super) id: u64,
    pub(super) review_id: u64,
    pub(super) in_reply_to: Option<u64>,
    pub(super) author: String,
    pub(super) body: String,
    pub(super) path: String,
    pub(super) line: u64,
    pub(super) start_line: Option<u64>,
    /// LEFT | RIGHT
    pub(super) side: String,
    pub(super) diff_hunk: String,
    pub(super) commit_id: String,
    pub(super) created_at: String,
}

#[derive(Debug, Clone)]
pub(super) struct CheckRunData {
    pub(super) id: u64,
    pub(super) head_sha: String,
    pub(super) name: String,
    /// queued | in_progress | completed
    pub(super) status: String,
    pub(super) conclusion: Option<String>,
    pub(super) title: Option<String>,
    pub(super) summary: Option<String>,
    pub(super) text: Option<String>,
    pub(super) started_at: String,
    pub(super) completed_at: Option<String>,
}

#[derive(Debug, Clone)]
pub(super) struct StatusData {
    pub(super) id: u64,
    pub(super) sha: String,
    /// error | failure | pending | success
    pub(super) state: String,
    pub(super) context: String,
    pub(super) description: Option<String>,
    pub(super) target_url: Option<String>,
    pub(super) creator: String,
    pub(super) created_at: String,
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
    /// Check runs of every sha, oldest first (a re-run is a new run; the latest per name
    /// counts).
    pub(super) check_runs: Vec<CheckRunData>,
    /// Commit statuses of every sha, oldest first (the latest per context counts).
    pub(super) statuses: Vec<StatusData>,
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
    /// Requests counted against the rate limit (a `304` is not, as on GitHub).
    pub(super) rate_used: u64,
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
