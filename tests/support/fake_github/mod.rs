//! A stateful fake of the GitHub REST API for tests: an in-process axum server on
//! 127.0.0.1:0 that octocrab talks to through its base URI.
//!
//! It keeps repositories (whose `clone_url` may point at a local bare repository, as a
//! `file://` URL), users, labels, issues and pull requests (which share numbers, and both
//! appear in the issues list as GitHub does), comments, issue events, collaborator
//! permissions, pull request reviews and inline review comments, check runs and commit
//! statuses. With a local bare repository the pull requests follow their branches, and
//! mergeability, diff hunks and merges are real git. Answers are complete objects in
//! GitHub's real shapes (octocrab's models are strict), lists are paginated with `Link`
//! headers whose next links have GitHub's `/repositories/{id}/…` form, every 200 GET has an
//! `ETag` (a matching `If-None-Match` gets a 304 that does not count against the rate
//! limit), a wrong token gets 401, and faults can be injected: rate limits with their
//! headers, 5xx, a 5xx after the write was applied, slow answers.
//!
//! Layout: `state` (what the fake holds, and its mutations), `routes` (the HTTP edge: auth,
//! faults, ETags, rate-limit headers, then dispatch per endpoint), `pulls` (pull requests,
//! reviews, inline comments, merge), `checks` (check runs, statuses), `git` (real git over
//! the bare repository), `json` (GitHub's object shapes). This file is the test-facing API:
//! start, set up, act as a person or CI, assert.
//!
//! Self-contained on purpose: other helpers may add files under `tests/support/`.

mod checks;
mod git;
mod json;
mod pulls;
mod routes;
mod state;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::http::Method;
use axum::Router;

use pulls::CommentSpec;
use routes::handle;
use state::{
    fake_sha, now, CheckRunData, CommentData, FakeState, Fault, IssueData, PullData, RepoData,
    Shared,
};

/// The token the fake accepts unless [`FakeGithub::set_token`] changes it.
pub const FAKE_TOKEN: &str = "ghp_fake_polyphony_test_token";
/// The user every write made with the token is attributed to.
pub const BOT_LOGIN: &str = "polyphony-bot";

/// What an injected fault does.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultKind {
    /// Primary rate limit: `status` (403 or 429) with `x-ratelimit-remaining: 0`,
    /// `x-ratelimit-reset: now + reset_in_secs`, and `retry-after` when given.
    RateLimit {
        status: u16,
        reset_in_secs: u64,
        retry_after: Option<u64>,
    },
    /// Secondary rate limit: 403 with GitHub's message and `retry-after`.
    SecondaryRateLimit { retry_after: u64 },
    /// Answer with this status (500, 502 …) without doing anything.
    Status(u16),
    /// Do the request, then answer 502 anyway (the client cannot know it worked).
    StatusAfterApplying(u16),
    /// Wait, then answer normally.
    Delay(Duration),
}

/// A request as the fake saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRequest {
    pub method: String,
    /// Path and query, without the API prefix.
    pub path: String,
    /// The status the fake answered.
    pub status: u16,
}

/// A pull request as stored, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakePull {
    pub number: u64,
    pub title: String,
    pub body: String,
    pub head: String,
    pub base: String,
    pub draft: bool,
    pub state: String,
    pub merged: bool,
    /// The branch tips (followed live while the pull request is open).
    pub head_sha: String,
    pub base_sha: String,
    pub merge_commit_sha: Option<String>,
}

/// A review as stored, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeReview {
    pub id: u64,
    pub author: String,
    pub state: String,
    pub body: String,
    pub commit_id: String,
}

/// An inline review comment as stored, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeReviewComment {
    pub id: u64,
    /// The thread's root comment, for a reply.
    pub in_reply_to: Option<u64>,
    pub author: String,
    pub body: String,
    pub path: String,
    pub line: u64,
    /// LEFT or RIGHT.
    pub side: String,
    pub diff_hunk: String,
    pub commit_id: String,
}

/// An inline comment for [`FakeGithub::add_review_as`] and
/// [`FakeGithub::add_inline_comment_as`].
#[derive(Debug, Clone)]
pub struct NewReviewComment {
    pub path: String,
    pub line: u64,
    pub body: String,
    /// First line of a multi-line comment.
    pub start_line: Option<u64>,
    /// The base side (a deleted line) instead of the head.
    pub left: bool,
}

impl NewReviewComment {
    pub fn new(path: &str, line: u64, body: &str) -> NewReviewComment {
        NewReviewComment {
            path: path.to_string(),
            line,
            body: body.to_string(),
            start_line: None,
            left: false,
        }
    }
    pub fn left(mut self) -> NewReviewComment {
        self.left = true;
        self
    }
    pub fn start_line(mut self, line: u64) -> NewReviewComment {
        self.start_line = Some(line);
        self
    }
    fn spec(&self) -> CommentSpec {
        CommentSpec {
            body: self.body.clone(),
            path: self.path.clone(),
            line: self.line,
            start_line: self.start_line,
            side: if self.left { "LEFT" } else { "RIGHT" }.into(),
            in_reply_to: None,
            commit_id: None,
        }
    }
}

/// A check run for [`FakeGithub::set_check_run`].
#[derive(Debug, Clone)]
pub struct NewCheckRun {
    pub name: String,
    /// queued, in_progress or completed.
    pub status: String,
    /// success, failure, neutral, cancelled, skipped, timed_out, action_required (when
    /// completed).
    pub conclusion: Option<String>,
    pub title: Option<String>,
    pub summary: Option<String>,
    pub text: Option<String>,
}

impl NewCheckRun {
    /// A finished run with this conclusion.
    pub fn completed(name: &str, conclusion: &str) -> NewCheckRun {
        NewCheckRun {
            name: name.to_string(),
            status: "completed".into(),
            conclusion: Some(conclusion.to_string()),
            title: None,
            summary: None,
            text: None,
        }
    }
    /// A run still going.
    pub fn in_progress(name: &str) -> NewCheckRun {
        NewCheckRun {
            status: "in_progress".into(),
            conclusion: None,
            ..NewCheckRun::completed(name, "")
        }
    }
    /// `output.title`, `output.summary` and `output.text`.
    pub fn output(mut self, title: &str, summary: &str, text: Option<&str>) -> NewCheckRun {
        self.title = Some(title.to_string());
        self.summary = Some(summary.to_string());
        self.text = text.map(str::to_string);
        self
    }
}

/// A new issue for [`FakeGithub::add_issue`].
#[derive(Debug, Clone, Default)]
pub struct NewIssue {
    pub title: String,
    pub body: String,
    /// Author login (created if unknown); default `octocat`.
    pub author: Option<String>,
    /// Labels applied at creation, each with a `labeled` event by `labelled_by`.
    pub labels: Vec<String>,
    /// Who applied the labels; default the author.
    pub labelled_by: Option<String>,
    pub locked: bool,
    /// Make it a pull request (it then shows in the issues list with `pull_request`).
    pub pull_request_head: Option<String>,
}

impl NewIssue {
    pub fn new(title: &str) -> NewIssue {
        NewIssue {
            title: title.to_string(),
            body: format!("Body of {title}."),
            ..NewIssue::default()
        }
    }
    pub fn labels(mut self, labels: &[&str]) -> NewIssue {
        self.labels = labels.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn body(mut self, body: &str) -> NewIssue {
        self.body = body.to_string();
        self
    }
    pub fn author(mut self, login: &str) -> NewIssue {
        self.author = Some(login.to_string());
        self
    }
    pub fn labelled_by(mut self, login: &str) -> NewIssue {
        self.labelled_by = Some(login.to_string());
        self
    }
    pub fn locked(mut self) -> NewIssue {
        self.locked = true;
        self
    }
    pub fn pull_request(mut self, head: &str) -> NewIssue {
        self.pull_request_head = Some(head.to_string());
        self
    }
}

/// The running fake. Dropping it stops the server.
pub struct FakeGithub {
    state: Shared,
    base_url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeGithub {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl FakeGithub {
    /// Serve the API at the root, like api.github.com.
    pub async fn start() -> FakeGithub {
        FakeGithub::start_with_prefix("").await
    }

    /// Serve the API under a path prefix, like GitHub Enterprise (`/api/v3`).
    pub async fn start_with_prefix(prefix: &str) -> FakeGithub {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let root = format!("http://{addr}");
        let mut state = FakeState {
            root: root.clone(),
            prefix: prefix.trim_end_matches('/').to_string(),
            token: FAKE_TOKEN.to_string(),
            users: BTreeMap::new(),
            repos: Vec::new(),
            next_id: 1000,
            faults: Vec::new(),
            requests: Vec::new(),
            rate_used: 0,
        };
        state.ensure_user(BOT_LOGIN);
        state.ensure_user("octocat");
        let base_url = state.api();
        let state = Arc::new(Mutex::new(state));
        let app = Router::new().fallback(handle).with_state(state.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        FakeGithub {
            state,
            base_url,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The API base URL to give the client (`GITHUB_API_URL`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The token the fake accepts.
    pub fn token(&self) -> String {
        self.lock().token.clone()
    }

    pub fn set_token(&self, token: &str) {
        self.lock().token = token.to_string();
    }

    pub fn add_user(&self, login: &str) -> u64 {
        self.lock().ensure_user(login)
    }

    /// A repository `owner/name`; `clone_url` should be a URL (`file:///…/x.git`).
    pub fn add_repo(&self, full_name: &str, clone_url: &str, default_branch: &str) -> u64 {
        let (owner, name) = full_name.split_once('/').expect("owner/name");
        let mut st = self.lock();
        st.ensure_user(owner);
        let id = st.id();
        st.repos.push(RepoData {
            id,
            owner: owner.to_string(),
            name: name.to_string(),
            clone_url: clone_url.to_string(),
            default_branch: default_branch.to_string(),
            labels: BTreeMap::new(),
            issues: BTreeMap::new(),
            collaborators: BTreeMap::from([(owner.to_string(), "admin".to_string())]),
            next_number: 1,
            check_runs: Vec::new(),
            statuses: Vec::new(),
        });
        id
    }

    pub fn add_label(&self, repo: &str, name: &str, color: &str, description: Option<&str>) {
        let mut st = self.lock();
        let r = st.repo_index(repo);
        st.ensure_label(r, name);
        let label = st.repos[r]
            .labels
            .get_mut(&name.to_ascii_lowercase())
            .expect("label just ensured");
        label.color = color.to_string();
        label.description = description.map(str::to_string);
    }

    /// Collaborator permission: `admin`, `maintain`, `write`, `triage` or `read`.
    pub fn set_permission(&self, repo: &str, login: &str, permission: &str) {
        let mut st = self.lock();
        st.ensure_user(login);
        let r = st.repo_index(repo);
        st.repos[r]
            .collaborators
            .insert(login.to_string(), permission.to_string());
    }

    /// Create an issue (or a pull request); returns its number.
    pub fn add_issue(&self, repo: &str, new: NewIssue) -> u64 {
        let mut st = self.lock();
        let r = st.repo_index(repo);
        let author = new.author.clone().unwrap_or_else(|| "octocat".into());
        st.ensure_user(&author);
        let id = st.id();
        let number = st.repos[r].next_number;
        st.repos[r].next_number += 1;
        let pull = new.pull_request_head.as_ref().map(|head| {
            PullData::new(
                head.clone(),
                st.repos[r].default_branch.clone(),
                fake_sha(id),
                fake_sha(id + 1),
                false,
            )
        });
        st.repos[r].issues.insert(
            number,
            IssueData {
                id,
                number,
                title: new.title.clone(),
                body: new.body.clone(),
                author: author.clone(),
                labels: Vec::new(),
                state: "open".into(),
                locked: new.locked,
                created_at: now(),
                updated_at: now(),
                closed_at: None,
                comments: Vec::new(),
                events: Vec::new(),
                pull,
            },
        );
        let labeller = new.labelled_by.clone().unwrap_or(author);
        for label in &new.labels {
            st.apply_label(r, number, label, &labeller);
        }
        number
    }

    /// Apply a label as `actor` (records a `labeled` event).
    pub fn label_issue(&self, repo: &str, number: u64, label: &str, actor: &str) {
        let mut st = self.lock();
        let r = st.repo_index(repo);
        st.apply_label(r, number, label, actor);
    }

    pub fn unlabel_issue(&self, repo: &str, number: u64, label: &str, actor: &str) {
        let mut st = self.lock();
        let r = st.repo_index(repo);
        st.drop_label(r, number, label, actor);
    }

    /// Edit title and/or body (as a person would after the claim).
    pub fn edit_issue(&self, repo: &str, number: u64, title: Option<&str>, body: Option<&str>) {
        let mut st = self.lock();
        let r = st.repo_index(repo);
        let issue = st.repos[r].issues.get_mut(&number).expect("issue");
        if let Some(t) = title {
            issue.title = t.to_string();
        }
        if let Some(b) = body {
            issue.body = b.to_string();
        }
        issue.updated_at = now();
    }

    pub fn close_issue(&self, repo: &str, number: u64) {
        let mut st = self.lock();
        let r = st.repo_index(repo);
        let issue = st.repos[r].issues.get_mut(&number).expect("issue");
        issue.state = "closed".into();
        issue.closed_at = Some(now());
    }

    /// Label names of an issue, in the order applied.
    pub fn issue_labels(&self, repo: &str, number: u64) -> Vec<String> {
        let st = self.lock();
        let r = st.repo_index(repo);
        st.repos[r].issues[&number].labels.clone()
    }

    /// Comment bodies of an issue, oldest first.
    pub fn comments(&self, repo: &str, number: u64) -> Vec<String> {
        let st = self.lock();
        let r = st.repo_index(repo);
        st.repos[r].issues[&number]
            .comments
            .iter()
            .map(|c| c.body.clone())
            .collect()
    }

    /// A comment by `login` (someone other than the token's user, as a rule).
    pub fn add_comment_as(&self, repo: &str, number: u64, login: &str, body: &str) -> u64 {
        let mut st = self.lock();
        st.ensure_user(login);
        let id = st.id();
        let r = st.repo_index(repo);
        let issue = st.repos[r].issues.get_mut(&number).expect("issue");
        issue.comments.push(CommentData {
            id,
            body: body.to_string(),
            author: login.to_string(),
            created_at: now(),
        });
        issue.updated_at = now();
        id
    }

    /// Pull requests of a repository, by number.
    pub fn pulls(&self, repo: &str) -> Vec<FakePull> {
        let mut st = self.lock();
        let r = st.repo_index(repo);
        pulls::sync_all(&mut st, r);
        st.repos[r]
            .issues
            .values()
            .filter_map(|i| {
                i.pull.as_ref().map(|p| FakePull {
                    number: i.number,
                    title: i.title.clone(),
                    body: i.body.clone(),
                    head: p.head.clone(),
                    base: p.base.clone(),
                    draft: p.draft,
                    state: i.state.clone(),
                    merged: p.merged,
                    head_sha: p.head_sha.clone(),
                    base_sha: p.base_sha.clone(),
                    merge_commit_sha: p.merge_commit_sha.clone(),
                })
            })
            .collect()
    }

    /// One pull request (panics when there is none: a test bug).
    pub fn pull(&self, repo: &str, number: u64) -> FakePull {
        self.pulls(repo)
            .into_iter()
            .find(|p| p.number == number)
            .unwrap_or_else(|| panic!("fake GitHub: no pull request {repo}#{number}"))
    }

    /// The clone URL of a repository (its bare repository, for `push_to_branch`).
    pub fn clone_url(&self, repo: &str) -> String {
        let st = self.lock();
        let r = st.repo_index(repo);
        st.repos[r].clone_url.clone()
    }

    /// A review by `login` on the pull request's current head: `state` APPROVED,
    /// CHANGES_REQUESTED or COMMENTED, with inline `comments` (validated as GitHub does:
    /// each line must be part of the diff, else this panics). Returns the review id.
    pub fn add_review_as(
        &self,
        repo: &str,
        number: u64,
        login: &str,
        state: &str,
        body: &str,
        comments: &[NewReviewComment],
    ) -> u64 {
        let event = match state {
            "APPROVED" => "APPROVE",
            "CHANGES_REQUESTED" => "REQUEST_CHANGES",
            "COMMENTED" => "COMMENT",
            other => panic!("fake GitHub: no review state {other}"),
        };
        let specs: Vec<CommentSpec> = comments.iter().map(NewReviewComment::spec).collect();
        let mut st = self.lock();
        let r = st.repo_index(repo);
        pulls::add_review(&mut st, r, number, login, Some(event), body, &specs)
            .unwrap_or_else(|resp| panic!("fake GitHub: review refused: {}", resp.status()))
    }

    /// A single inline comment by `login` on `line` (head side) of `path`, as its own
    /// COMMENTED review (as GitHub's "Add single comment" does). Returns the comment id.
    pub fn add_review_comment_as(
        &self,
        repo: &str,
        number: u64,
        login: &str,
        path: &str,
        line: u64,
        body: &str,
    ) -> u64 {
        self.add_inline_comment_as(repo, number, login, NewReviewComment::new(path, line, body))
    }

    /// [`FakeGithub::add_review_comment_as`] with a side or a line range.
    pub fn add_inline_comment_as(
        &self,
        repo: &str,
        number: u64,
        login: &str,
        comment: NewReviewComment,
    ) -> u64 {
        let review = self.add_review_as(repo, number, login, "COMMENTED", "", &[comment]);
        let st = self.lock();
        let r = st.repo_index(repo);
        let pull = st.repos[r].issues[&number]
            .pull
            .as_ref()
            .expect("a pull request");
        pull.review_comments
            .iter()
            .find(|c| c.review_id == review)
            .map(|c| c.id)
            .expect("the review's comment")
    }

    /// A reply by `login` in the thread of review comment `comment_id`. Returns its id.
    pub fn reply_review_comment_as(
        &self,
        repo: &str,
        number: u64,
        login: &str,
        comment_id: u64,
        body: &str,
    ) -> u64 {
        let mut st = self.lock();
        let r = st.repo_index(repo);
        let review_id = st.id();
        let spec = CommentSpec {
            body: body.to_string(),
            path: String::new(),
            line: 0,
            start_line: None,
            side: "RIGHT".into(),
            in_reply_to: Some(comment_id),
            commit_id: None,
        };
        pulls::add_review_comment(&mut st, r, number, login, review_id, &spec)
            .unwrap_or_else(|resp| panic!("fake GitHub: reply refused: {}", resp.status()))
    }

    /// Reviews of a pull request, oldest first.
    pub fn reviews(&self, repo: &str, number: u64) -> Vec<FakeReview> {
        let st = self.lock();
        let r = st.repo_index(repo);
        let pull = st.repos[r].issues[&number]
            .pull
            .as_ref()
            .expect("a pull request");
        pull.reviews
            .iter()
            .map(|v| FakeReview {
                id: v.id,
                author: v.author.clone(),
                state: v.state.clone(),
                body: v.body.clone(),
                commit_id: v.commit_id.clone(),
            })
            .collect()
    }

    /// Inline review comments of a pull request (roots and replies), oldest first.
    pub fn review_comments(&self, repo: &str, number: u64) -> Vec<FakeReviewComment> {
        let st = self.lock();
        let r = st.repo_index(repo);
        let pull = st.repos[r].issues[&number]
            .pull
            .as_ref()
            .expect("a pull request");
        pull.review_comments
            .iter()
            .map(|c| FakeReviewComment {
                id: c.id,
                in_reply_to: c.in_reply_to,
                author: c.author.clone(),
                body: c.body.clone(),
                path: c.path.clone(),
                line: c.line,
                side: c.side.clone(),
                diff_hunk: c.diff_hunk.clone(),
                commit_id: c.commit_id.clone(),
            })
            .collect()
    }

    /// A check run on `sha` (a sha or a branch name) as CI would report it; a run with the
    /// same name again is a re-run (the latest counts). Returns its id.
    pub fn set_check_run(&self, repo: &str, sha: &str, run: NewCheckRun) -> u64 {
        let mut st = self.lock();
        let r = st.repo_index(repo);
        let head_sha = checks::resolve_ref(&st, r, sha)
            .unwrap_or_else(|| panic!("fake GitHub: no commit {sha} in {repo}"));
        let id = st.id();
        let completed = run.status == "completed";
        st.repos[r].check_runs.push(CheckRunData {
            id,
            head_sha,
            name: run.name,
            status: run.status,
            conclusion: run.conclusion,
            title: run.title,
            summary: run.summary,
            text: run.text,
            started_at: now(),
            completed_at: completed.then(now),
        });
        id
    }

    /// A commit status on `sha` (a sha or a branch name) by `ci-bot`: `state` error,
    /// failure, pending or success. Returns its id.
    pub fn set_status(
        &self,
        repo: &str,
        sha: &str,
        context: &str,
        state: &str,
        description: Option<&str>,
    ) -> u64 {
        let mut st = self.lock();
        let r = st.repo_index(repo);
        let body = serde_json::json!({
            "state": state, "context": context, "description": description,
            "target_url": format!("https://ci.example.com/{context}"),
        });
        checks::add_status(&mut st, r, sha, "ci-bot", &body)
            .unwrap_or_else(|resp| panic!("fake GitHub: status refused: {}", resp.status()))
    }

    /// Requests counted against the rate limit so far (`304`s are not).
    pub fn rate_limit_used(&self) -> u64 {
        self.lock().rate_used
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.lock().requests.clone()
    }

    /// Requests with this method whose path contains `fragment`.
    pub fn count_requests(&self, method: &str, fragment: &str) -> usize {
        self.lock()
            .requests
            .iter()
            .filter(|r| r.method == method && r.path.contains(fragment))
            .count()
    }

    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    /// The next `times` requests (of `method`, if given) whose path contains
    /// `path_contains` get `kind`.
    pub fn inject(&self, method: Option<&str>, path_contains: &str, times: usize, kind: FaultKind) {
        let method = method.map(|m| Method::from_bytes(m.as_bytes()).expect("method"));
        self.lock().faults.push(Fault {
            method,
            path_contains: path_contains.to_string(),
            remaining: times,
            kind,
        });
    }
}

/// Commit `files` (path, content) on `branch` of the bare repository behind `clone_url`
/// and push it, as a person would (the branch is created from the default branch when
/// missing): "push to base", or a conflicting change. Returns the new tip.
pub fn push_to_branch(
    clone_url: &str,
    branch: &str,
    files: &[(&str, &str)],
    message: &str,
) -> String {
    git::push_to_branch(clone_url, branch, files, message)
}

/// Create a bare repository at `dir` with one commit on `branch`; returns its `file://` URL.
pub fn init_bare_repo(dir: &Path, branch: &str) -> String {
    let bare = dir.join("origin.git");
    let work = dir.join("seed");
    let git = |args: &[&str], cwd: &Path| {
        let out = Command::new("git")
            .args(args)
            .current_dir(cwd)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::create_dir_all(&work).expect("mkdir");
    git(
        &["init", "--bare", "-b", branch, bare.to_str().expect("utf8")],
        dir,
    );
    git(&["init", "-b", branch, "."], &work);
    std::fs::write(work.join("README.md"), "seed\n").expect("write");
    git(&["add", "."], &work);
    git(&["commit", "-m", "seed"], &work);
    git(&["push", bare.to_str().expect("utf8"), branch], &work);
    format!("file://{}", bare.display())
}
