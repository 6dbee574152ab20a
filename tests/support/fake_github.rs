//! A stateful fake of the GitHub REST API for tests: an in-process axum server on
//! 127.0.0.1:0 that octocrab talks to through its base URI.
//!
//! It keeps repositories (whose `clone_url` may point at a local bare repository, as a
//! `file://` URL), users, labels, issues and pull requests (which share numbers, and both
//! appear in the issues list as GitHub does), comments, issue events and collaborator
//! permissions. Answers are complete objects in GitHub's real shapes (octocrab's models are
//! strict), lists are paginated with `Link` headers whose next links have GitHub's
//! `/repositories/{id}/…` form, a wrong token gets 401, and faults can be injected: rate
//! limits with their headers, 5xx, a 5xx after the write was applied, slow answers.
//!
//! Self-contained on purpose: other helpers may add files under `tests/support/`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};

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

#[derive(Debug, Clone)]
struct Fault {
    method: Option<Method>,
    path_contains: String,
    remaining: usize,
    kind: FaultKind,
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

#[derive(Debug, Clone)]
struct LabelData {
    id: u64,
    name: String,
    color: String,
    description: Option<String>,
}

#[derive(Debug, Clone)]
struct CommentData {
    id: u64,
    body: String,
    author: String,
    created_at: String,
}

#[derive(Debug, Clone)]
struct EventData {
    id: u64,
    event: String,
    actor: String,
    label: Option<String>,
    created_at: String,
}

#[derive(Debug, Clone)]
struct PullData {
    head: String,
    base: String,
    head_sha: String,
    base_sha: String,
    draft: bool,
}

#[derive(Debug, Clone)]
struct IssueData {
    id: u64,
    number: u64,
    title: String,
    body: String,
    author: String,
    labels: Vec<String>,
    state: String,
    locked: bool,
    created_at: String,
    updated_at: String,
    closed_at: Option<String>,
    comments: Vec<CommentData>,
    events: Vec<EventData>,
    pull: Option<PullData>,
}

#[derive(Debug, Clone)]
struct RepoData {
    id: u64,
    owner: String,
    name: String,
    clone_url: String,
    default_branch: String,
    labels: BTreeMap<String, LabelData>,
    issues: BTreeMap<u64, IssueData>,
    /// login -> admin | maintain | write | triage | read
    collaborators: BTreeMap<String, String>,
    next_number: u64,
}

impl RepoData {
    fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

#[derive(Debug)]
struct FakeState {
    /// `http://127.0.0.1:PORT`
    root: String,
    /// API path prefix (`""` or `/api/v3`).
    prefix: String,
    token: String,
    users: BTreeMap<String, u64>,
    repos: Vec<RepoData>,
    next_id: u64,
    faults: Vec<Fault>,
    requests: Vec<SeenRequest>,
}

impl FakeState {
    fn api(&self) -> String {
        format!("{}{}", self.root, self.prefix)
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn ensure_user(&mut self, login: &str) -> u64 {
        if let Some(id) = self.users.get(login) {
            return *id;
        }
        let id = self.id();
        self.users.insert(login.to_string(), id);
        id
    }

    fn repo_index(&self, full_name: &str) -> usize {
        self.repos
            .iter()
            .position(|r| r.full_name() == full_name)
            .unwrap_or_else(|| panic!("fake GitHub: no repository {full_name}"))
    }

    fn ensure_label(&mut self, repo: usize, name: &str) {
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
    fn apply_label(&mut self, repo: usize, number: u64, name: &str, actor: &str) -> bool {
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

    fn drop_label(&mut self, repo: usize, number: u64, name: &str, actor: &str) -> bool {
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

type Shared = Arc<Mutex<FakeState>>;

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
        let pull = new.pull_request_head.as_ref().map(|head| PullData {
            head: head.clone(),
            base: st.repos[r].default_branch.clone(),
            head_sha: fake_sha(id),
            base_sha: fake_sha(id + 1),
            draft: false,
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
    pub fn add_comment_as(&self, repo: &str, number: u64, login: &str, body: &str) {
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
    }

    /// Pull requests of a repository, by number.
    pub fn pulls(&self, repo: &str) -> Vec<FakePull> {
        let st = self.lock();
        let r = st.repo_index(repo);
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
                })
            })
            .collect()
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

/// The sha of `branch` in a `file://` bare repo; `None` when it is missing (or the clone
/// URL is not a local repo, then the caller does not check).
fn branch_sha(clone_url: &str, branch: &str) -> Option<Option<String>> {
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

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn fake_sha(seed: u64) -> String {
    format!("{seed:040x}")
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (
        status,
        [("content-type", "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

fn error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        json!({
            "message": message,
            "documentation_url": "https://docs.github.com/rest",
            "status": status.as_u16().to_string(),
        }),
    )
}

fn epoch() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn handle(
    State(state): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path_and_query = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| uri.path().to_string());
    let (fault, prefix) = {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        let fault = st
            .faults
            .iter_mut()
            .find(|f| {
                f.remaining > 0
                    && f.method.as_ref().is_none_or(|m| *m == method)
                    && path_and_query.contains(&f.path_contains)
            })
            .map(|f| {
                f.remaining -= 1;
                f.kind.clone()
            });
        (fault, st.prefix.clone())
    };
    let stripped = path_and_query
        .strip_prefix(prefix.as_str())
        .unwrap_or("/__outside_prefix__")
        .to_string();
    let mut applied_then_fail = None;
    let response = match fault {
        Some(FaultKind::RateLimit {
            status,
            reset_in_secs,
            retry_after,
        }) => {
            let mut resp = error(
                StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN),
                "API rate limit exceeded for user ID 1. If you reach out to GitHub Support for help, please include the request ID.",
            );
            let h = resp.headers_mut();
            h.insert("x-ratelimit-limit", HeaderValue::from_static("5000"));
            h.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
            h.insert("x-ratelimit-used", HeaderValue::from_static("5000"));
            h.insert("x-ratelimit-resource", HeaderValue::from_static("core"));
            h.insert(
                "x-ratelimit-reset",
                HeaderValue::from(epoch() + reset_in_secs),
            );
            if let Some(secs) = retry_after {
                h.insert("retry-after", HeaderValue::from(secs));
            }
            Some(resp)
        }
        Some(FaultKind::SecondaryRateLimit { retry_after }) => {
            let mut resp = error(
                StatusCode::FORBIDDEN,
                "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
            );
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from(retry_after));
            Some(resp)
        }
        Some(FaultKind::Status(code)) => Some(error(
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "Server Error",
        )),
        Some(FaultKind::StatusAfterApplying(code)) => {
            applied_then_fail = Some(code);
            None
        }
        Some(FaultKind::Delay(d)) => {
            tokio::time::sleep(d).await;
            None
        }
        None => None,
    };
    let response = match response {
        Some(r) => r,
        None => {
            let authorized = {
                let st = state.lock().unwrap_or_else(|p| p.into_inner());
                let expected_bearer = format!("Bearer {}", st.token);
                let expected_token = format!("token {}", st.token);
                headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v == expected_bearer || v == expected_token)
            };
            let resp = if authorized {
                let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                route(&mut st, &method, &stripped, &body)
            } else {
                error(StatusCode::UNAUTHORIZED, "Bad credentials")
            };
            match applied_then_fail {
                Some(code) => error(
                    StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY),
                    "Server Error",
                ),
                None => resp,
            }
        }
    };
    let mut response = response;
    {
        let h = response.headers_mut();
        if !h.contains_key("x-ratelimit-remaining") {
            h.insert("x-ratelimit-limit", HeaderValue::from_static("5000"));
            h.insert("x-ratelimit-remaining", HeaderValue::from_static("4999"));
            h.insert("x-ratelimit-used", HeaderValue::from_static("1"));
            h.insert("x-ratelimit-resource", HeaderValue::from_static("core"));
            h.insert("x-ratelimit-reset", HeaderValue::from(epoch() + 3600));
        }
        h.insert(
            "x-github-api-version-selected",
            HeaderValue::from_static("2022-11-28"),
        );
    }
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    st.requests.push(SeenRequest {
        method: method.to_string(),
        path: stripped,
        status: response.status().as_u16(),
    });
    response
}

fn query_map(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Slice `items` into a page and build the `Link` header (GitHub's `/repositories/{id}/…`
/// form for next/prev/first/last).
fn paginate(
    st: &FakeState,
    repo_id: u64,
    rest: &str,
    query: &BTreeMap<String, String>,
    items: Vec<Value>,
) -> Response {
    let per_page = query
        .get("per_page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(30)
        .clamp(1, 100);
    let page = query
        .get("page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let last = items.len().div_ceil(per_page).max(1);
    let slice: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    let link_to = |n: usize| {
        let mut q: Vec<String> = query
            .iter()
            .filter(|(k, _)| k.as_str() != "page")
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        q.push(format!("page={n}"));
        format!(
            "<{}/repositories/{repo_id}{rest}?{}>",
            st.api(),
            q.join("&")
        )
    };
    let mut links = Vec::new();
    if page > 1 {
        links.push(format!("{}; rel=\"prev\"", link_to(page - 1)));
    }
    if page < last {
        links.push(format!("{}; rel=\"next\"", link_to(page + 1)));
        links.push(format!("{}; rel=\"last\"", link_to(last)));
    }
    if page > 1 {
        links.push(format!("{}; rel=\"first\"", link_to(1)));
    }
    let mut resp = json_response(StatusCode::OK, Value::Array(slice));
    if !links.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&links.join(", ")) {
            resp.headers_mut().insert("link", v);
        }
    }
    resp
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b',') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn route(st: &mut FakeState, method: &Method, path_and_query: &str, body: &Bytes) -> Response {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let query = query_map(query);
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    // `/repositories/{id}/…` (GitHub's next links) is the same resource as `/repos/o/r/…`.
    let (repo_index, rest): (Option<usize>, Vec<&str>) = match seg.as_slice() {
        ["repositories", id, rest @ ..] => (
            id.parse::<u64>()
                .ok()
                .and_then(|id| st.repos.iter().position(|r| r.id == id)),
            rest.to_vec(),
        ),
        // The token's own user (every write of this fake is authored by BOT_LOGIN).
        ["user"] if *method == Method::GET => {
            return json_response(StatusCode::OK, user_by_login(st, BOT_LOGIN))
        }
        ["repos", owner, name, rest @ ..] => (
            st.repos.iter().position(|r| {
                r.owner.eq_ignore_ascii_case(owner) && r.name.eq_ignore_ascii_case(name)
            }),
            rest.to_vec(),
        ),
        _ => return error(StatusCode::NOT_FOUND, "Not Found"),
    };
    let Some(r) = repo_index else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let parsed: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(_) => return error(StatusCode::BAD_REQUEST, "Problems parsing JSON"),
        }
    };
    let repo_id = st.repos[r].id;
    let rest_path = |parts: &[&str]| parts.iter().map(|p| format!("/{p}")).collect::<String>();
    match (method.clone(), rest.as_slice()) {
        (Method::GET, []) => json_response(StatusCode::OK, repo_json(st, r)),
        (Method::GET, ["issues"]) => {
            let state = query.get("state").map(String::as_str).unwrap_or("open");
            let wanted: Vec<String> = query
                .get("labels")
                .map(|l| {
                    l.split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_ascii_lowercase)
                        .collect()
                })
                .unwrap_or_default();
            // GitHub's default order: newest first.
            let items: Vec<Value> = st.repos[r]
                .issues
                .values()
                .rev()
                .filter(|i| state == "all" || i.state == state)
                .filter(|i| {
                    wanted
                        .iter()
                        .all(|w| i.labels.iter().any(|l| l.to_ascii_lowercase() == *w))
                })
                .map(|i| issue_json(st, r, i))
                .collect();
            paginate(st, repo_id, "/issues", &query, items)
        }
        (Method::GET, ["issues", n]) => match find_issue(st, r, n) {
            Some(i) => json_response(StatusCode::OK, issue_json(st, r, i)),
            None => error(StatusCode::NOT_FOUND, "Not Found"),
        },
        (Method::GET, ["issues", n, "comments"]) => {
            let Some(i) = find_issue(st, r, n) else {
                return error(StatusCode::NOT_FOUND, "Not Found");
            };
            let items = i
                .comments
                .iter()
                .map(|c| comment_json(st, r, i, c))
                .collect();
            paginate(st, repo_id, &rest_path(&rest), &query, items)
        }
        (Method::POST, ["issues", n, "comments"]) => {
            let Some(text) = parsed.get("body").and_then(Value::as_str) else {
                return validation("body", "missing_field");
            };
            let Some(number) = find_issue(st, r, n).map(|i| i.number) else {
                return error(StatusCode::NOT_FOUND, "Not Found");
            };
            let id = st.id();
            let comment = CommentData {
                id,
                body: text.to_string(),
                author: BOT_LOGIN.to_string(),
                created_at: now(),
            };
            let issue = st.repos[r].issues.get_mut(&number).expect("found");
            issue.comments.push(comment.clone());
            issue.updated_at = now();
            let issue = &st.repos[r].issues[&number];
            json_response(StatusCode::CREATED, comment_json(st, r, issue, &comment))
        }
        (Method::GET, ["issues", n, "events"]) => {
            let Some(i) = find_issue(st, r, n) else {
                return error(StatusCode::NOT_FOUND, "Not Found");
            };
            let items = i.events.iter().map(|e| event_json(st, r, e)).collect();
            paginate(st, repo_id, &rest_path(&rest), &query, items)
        }
        (Method::POST, ["issues", n, "labels"]) => {
            let Some(number) = find_issue(st, r, n).map(|i| i.number) else {
                return error(StatusCode::NOT_FOUND, "Not Found");
            };
            let names: Vec<String> = match parsed.get("labels") {
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
                _ => return validation("labels", "missing_field"),
            };
            for name in names {
                st.apply_label(r, number, &name, BOT_LOGIN);
            }
            json_response(StatusCode::OK, labels_of(st, r, number))
        }
        (Method::DELETE, ["issues", n, "labels", name]) => {
            let Some(number) = find_issue(st, r, n).map(|i| i.number) else {
                return error(StatusCode::NOT_FOUND, "Not Found");
            };
            if st.drop_label(r, number, name, BOT_LOGIN) {
                json_response(StatusCode::OK, labels_of(st, r, number))
            } else {
                error(StatusCode::NOT_FOUND, "Label does not exist")
            }
        }
        (Method::GET, ["pulls"]) => {
            let state = query.get("state").map(String::as_str).unwrap_or("open");
            let head = query.get("head").cloned();
            let owner = st.repos[r].owner.clone();
            let items: Vec<Value> = st.repos[r]
                .issues
                .values()
                .rev()
                .filter(|i| i.pull.is_some())
                .filter(|i| state == "all" || i.state == state)
                .filter(|i| {
                    head.as_ref().is_none_or(|h| {
                        let pull = i.pull.as_ref().expect("filtered");
                        *h == format!("{owner}:{}", pull.head)
                    })
                })
                .map(|i| pull_json(st, r, i))
                .collect();
            paginate(st, repo_id, "/pulls", &query, items)
        }
        (Method::POST, ["pulls"]) => create_pull(st, r, &parsed),
        (Method::GET, ["collaborators", login, "permission"]) => {
            let Some(user_id) = st.users.get(*login).copied() else {
                return error(StatusCode::NOT_FOUND, "Not Found");
            };
            let role = st.repos[r]
                .collaborators
                .get(*login)
                .cloned()
                .unwrap_or_else(|| "none".into());
            // `permission` is the legacy value: maintain reads as write, triage as read.
            let permission = match role.as_str() {
                "maintain" => "write",
                "triage" => "read",
                other => other,
            };
            let flags = |levels: &[&str]| levels.contains(&role.as_str());
            let mut user = user_json(st, login, user_id);
            user["permissions"] = json!({
                "admin": flags(&["admin"]),
                "maintain": flags(&["admin", "maintain"]),
                "push": flags(&["admin", "maintain", "write"]),
                "triage": flags(&["admin", "maintain", "write", "triage"]),
                "pull": flags(&["admin", "maintain", "write", "triage", "read"]),
            });
            user["role_name"] = json!(role);
            json_response(
                StatusCode::OK,
                json!({ "permission": permission, "role_name": role, "user": user }),
            )
        }
        _ => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

fn validation(field: &str, code: &str) -> Response {
    json_response(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({
            "message": "Validation Failed",
            "errors": [{"resource": "Issue", "field": field, "code": code}],
            "documentation_url": "https://docs.github.com/rest",
            "status": "422",
        }),
    )
}

fn find_issue<'a>(st: &'a FakeState, r: usize, n: &str) -> Option<&'a IssueData> {
    n.parse::<u64>()
        .ok()
        .and_then(|n| st.repos[r].issues.get(&n))
}

fn create_pull(st: &mut FakeState, r: usize, body: &Value) -> Response {
    let field = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_string);
    let (Some(title), Some(head), Some(base)) = (field("title"), field("head"), field("base"))
    else {
        return validation("head", "missing_field");
    };
    // `head` may be `owner:branch`.
    let head = head
        .split_once(':')
        .map(|(_, b)| b.to_string())
        .unwrap_or(head);
    let repo = &st.repos[r];
    let exists = repo.issues.values().any(|i| {
        i.state == "open"
            && i.pull
                .as_ref()
                .is_some_and(|p| p.head == head && p.base == base)
    });
    if exists {
        return json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({
                "message": "Validation Failed",
                "errors": [{"resource": "PullRequest", "code": "custom",
                    "message": format!("A pull request already exists for {}:{head}.", repo.owner)}],
                "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
                "status": "422",
            }),
        );
    }
    let id = st.id();
    let (head_sha, base_sha) = match (
        branch_sha(&st.repos[r].clone_url, &head),
        branch_sha(&st.repos[r].clone_url, &base),
    ) {
        (Some(None), _) => {
            return json_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({
                    "message": "Validation Failed",
                    "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}],
                    "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
                    "status": "422",
                }),
            )
        }
        (_, Some(None)) => {
            return json_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({
                    "message": "Validation Failed",
                    "errors": [{"resource": "PullRequest", "field": "base", "code": "invalid"}],
                    "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
                    "status": "422",
                }),
            )
        }
        (h, b) => (
            h.flatten().unwrap_or_else(|| fake_sha(id)),
            b.flatten().unwrap_or_else(|| fake_sha(id + 1)),
        ),
    };
    let number = st.repos[r].next_number;
    st.repos[r].next_number += 1;
    st.repos[r].issues.insert(
        number,
        IssueData {
            id,
            number,
            title,
            body: field("body").unwrap_or_default(),
            author: BOT_LOGIN.to_string(),
            labels: Vec::new(),
            state: "open".into(),
            locked: false,
            created_at: now(),
            updated_at: now(),
            closed_at: None,
            comments: Vec::new(),
            events: Vec::new(),
            pull: Some(PullData {
                head,
                base,
                head_sha,
                base_sha,
                draft: body.get("draft").and_then(Value::as_bool).unwrap_or(false),
            }),
        },
    );
    let issue = &st.repos[r].issues[&number];
    json_response(StatusCode::CREATED, pull_json(st, r, issue))
}

fn labels_of(st: &FakeState, r: usize, number: u64) -> Value {
    Value::Array(
        st.repos[r].issues[&number]
            .labels
            .iter()
            .map(|name| label_json(st, r, name))
            .collect(),
    )
}

fn user_json(st: &FakeState, login: &str, id: u64) -> Value {
    let api = st.api();
    let html = &st.root;
    json!({
        "login": login,
        "id": id,
        "node_id": format!("MDQ6VXNlcj{id}"),
        "avatar_url": format!("{html}/avatars/u/{id}?v=4"),
        "gravatar_id": "",
        "url": format!("{api}/users/{login}"),
        "html_url": format!("{html}/{login}"),
        "followers_url": format!("{api}/users/{login}/followers"),
        "following_url": format!("{api}/users/{login}/following{{/other_user}}"),
        "gists_url": format!("{api}/users/{login}/gists{{/gist_id}}"),
        "starred_url": format!("{api}/users/{login}/starred{{/owner}}{{/repo}}"),
        "subscriptions_url": format!("{api}/users/{login}/subscriptions"),
        "organizations_url": format!("{api}/users/{login}/orgs"),
        "repos_url": format!("{api}/users/{login}/repos"),
        "events_url": format!("{api}/users/{login}/events{{/privacy}}"),
        "received_events_url": format!("{api}/users/{login}/received_events"),
        "type": if login.ends_with("[bot]") { "Bot" } else { "User" },
        "user_view_type": "public",
        "site_admin": false,
    })
}

fn user_by_login(st: &FakeState, login: &str) -> Value {
    let id = st.users.get(login).copied().unwrap_or(1);
    user_json(st, login, id)
}

const REPO_URLS: &[(&str, &str)] = &[
    ("forks_url", "/forks"),
    ("keys_url", "/keys{/key_id}"),
    ("collaborators_url", "/collaborators{/collaborator}"),
    ("teams_url", "/teams"),
    ("hooks_url", "/hooks"),
    ("issue_events_url", "/issues/events{/number}"),
    ("events_url", "/events"),
    ("assignees_url", "/assignees{/user}"),
    ("branches_url", "/branches{/branch}"),
    ("tags_url", "/tags"),
    ("blobs_url", "/git/blobs{/sha}"),
    ("git_tags_url", "/git/tags{/sha}"),
    ("git_refs_url", "/git/refs{/sha}"),
    ("trees_url", "/git/trees{/sha}"),
    ("statuses_url", "/statuses/{sha}"),
    ("languages_url", "/languages"),
    ("stargazers_url", "/stargazers"),
    ("contributors_url", "/contributors"),
    ("subscribers_url", "/subscribers"),
    ("subscription_url", "/subscription"),
    ("commits_url", "/commits{/sha}"),
    ("git_commits_url", "/git/commits{/sha}"),
    ("comments_url", "/comments{/number}"),
    ("issue_comment_url", "/issues/comments{/number}"),
    ("contents_url", "/contents/{+path}"),
    ("compare_url", "/compare/{base}...{head}"),
    ("merges_url", "/merges"),
    ("archive_url", "/{archive_format}{/ref}"),
    ("downloads_url", "/downloads"),
    ("issues_url", "/issues{/number}"),
    ("pulls_url", "/pulls{/number}"),
    ("milestones_url", "/milestones{/number}"),
    (
        "notifications_url",
        "/notifications{?since,all,participating}",
    ),
    ("labels_url", "/labels{/name}"),
    ("releases_url", "/releases{/id}"),
    ("deployments_url", "/deployments"),
];

fn repo_json(st: &FakeState, r: usize) -> Value {
    let repo = &st.repos[r];
    let api = format!("{}/repos/{}", st.api(), repo.full_name());
    let html = format!("{}/{}", st.root, repo.full_name());
    let open_issues = repo.issues.values().filter(|i| i.state == "open").count();
    let mut v = json!({
        "id": repo.id,
        "node_id": format!("R_kgDO{}", repo.id),
        "name": repo.name,
        "full_name": repo.full_name(),
        "private": false,
        "owner": user_by_login(st, &repo.owner),
        "html_url": html,
        "description": format!("Fake repository {}", repo.full_name()),
        "fork": false,
        "url": api,
    });
    let more = json!({
        "created_at": "2024-01-02T03:04:05Z",
        "updated_at": "2024-01-02T03:04:05Z",
        "pushed_at": "2024-01-02T03:04:05Z",
        "git_url": format!("git://fake.invalid/{}.git", repo.full_name()),
        "ssh_url": format!("git@fake.invalid:{}.git", repo.full_name()),
        "clone_url": repo.clone_url,
        "svn_url": html,
        "homepage": null,
        "size": 1,
        "stargazers_count": 0,
        "watchers_count": 0,
        "language": "Rust",
        "has_issues": true,
        "has_projects": true,
        "has_downloads": true,
        "has_wiki": true,
        "has_pages": false,
        "has_discussions": false,
        "forks_count": 0,
        "mirror_url": null,
        "archived": false,
        "disabled": false,
        "open_issues_count": open_issues,
        "license": null,
        "allow_forking": true,
        "is_template": false,
        "web_commit_signoff_required": false,
        "topics": [],
        "visibility": "public",
        "forks": 0,
        "open_issues": open_issues,
        "watchers": 0,
        "default_branch": repo.default_branch,
        "permissions": {"admin": true, "maintain": true, "push": true, "triage": true, "pull": true},
        "network_count": 0,
        "subscribers_count": 1,
    });
    if let (Value::Object(into), Value::Object(from)) = (&mut v, more) {
        into.extend(from);
    }
    for (key, suffix) in REPO_URLS {
        v[*key] = json!(format!("{api}{suffix}"));
    }
    v
}

fn label_json(st: &FakeState, r: usize, name: &str) -> Value {
    let repo = &st.repos[r];
    let label = repo.labels.get(&name.to_ascii_lowercase());
    let (id, color, description) = label
        .map(|l| (l.id, l.color.clone(), l.description.clone()))
        .unwrap_or((1, "ededed".into(), None));
    json!({
        "id": id,
        "node_id": format!("LA_kwDO{id}"),
        "url": format!("{}/repos/{}/labels/{}", st.api(), repo.full_name(), encode(name)),
        "name": name,
        "color": color,
        "default": matches!(name, "bug" | "documentation" | "enhancement"),
        "description": description,
    })
}

fn issue_json(st: &FakeState, r: usize, i: &IssueData) -> Value {
    let repo = &st.repos[r];
    let api = format!("{}/repos/{}", st.api(), repo.full_name());
    let html = format!("{}/{}", st.root, repo.full_name());
    let n = i.number;
    let mut v = json!({
        "url": format!("{api}/issues/{n}"),
        "repository_url": api,
        "labels_url": format!("{api}/issues/{n}/labels{{/name}}"),
        "comments_url": format!("{api}/issues/{n}/comments"),
        "events_url": format!("{api}/issues/{n}/events"),
        "html_url": if i.pull.is_some() { format!("{html}/pull/{n}") } else { format!("{html}/issues/{n}") },
        "id": i.id,
        "node_id": if i.pull.is_some() { format!("PR_kwDO{}", i.id) } else { format!("I_kwDO{}", i.id) },
        "number": n,
        "title": i.title,
        "user": user_by_login(st, &i.author),
        "labels": i.labels.iter().map(|l| label_json(st, r, l)).collect::<Vec<_>>(),
        "state": i.state,
        "locked": i.locked,
        "assignee": null,
        "assignees": [],
        "milestone": null,
        "comments": i.comments.len(),
        "created_at": i.created_at,
        "updated_at": i.updated_at,
        "closed_at": i.closed_at,
        "author_association": if i.author == repo.owner { "OWNER" } else { "NONE" },
        "active_lock_reason": if i.locked { json!("too heated") } else { Value::Null },
        "body": i.body,
        "reactions": {
            "url": format!("{api}/issues/{n}/reactions"),
            "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "hooray": 0,
            "confused": 0, "heart": 0, "rocket": 0, "eyes": 0
        },
        "timeline_url": format!("{api}/issues/{n}/timeline"),
        "performed_via_github_app": null,
        "state_reason": if i.state == "closed" { json!("completed") } else { Value::Null },
    });
    if i.pull.is_some() {
        v["draft"] = json!(i.pull.as_ref().is_some_and(|p| p.draft));
        v["pull_request"] = json!({
            "url": format!("{api}/pulls/{n}"),
            "html_url": format!("{html}/pull/{n}"),
            "diff_url": format!("{html}/pull/{n}.diff"),
            "patch_url": format!("{html}/pull/{n}.patch"),
            "merged_at": null,
        });
    }
    v
}

fn comment_json(st: &FakeState, r: usize, i: &IssueData, c: &CommentData) -> Value {
    let repo = &st.repos[r];
    let api = format!("{}/repos/{}", st.api(), repo.full_name());
    let html = format!("{}/{}", st.root, repo.full_name());
    json!({
        "url": format!("{api}/issues/comments/{}", c.id),
        "html_url": format!("{html}/issues/{}#issuecomment-{}", i.number, c.id),
        "issue_url": format!("{api}/issues/{}", i.number),
        "id": c.id,
        "node_id": format!("IC_kwDO{}", c.id),
        "user": user_by_login(st, &c.author),
        "created_at": c.created_at,
        "updated_at": c.created_at,
        "author_association": if c.author == repo.owner { "OWNER" } else { "NONE" },
        "body": c.body,
        "reactions": {
            "url": format!("{api}/issues/comments/{}/reactions", c.id),
            "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "hooray": 0,
            "confused": 0, "heart": 0, "rocket": 0, "eyes": 0
        },
        "performed_via_github_app": null,
    })
}

fn event_json(st: &FakeState, r: usize, e: &EventData) -> Value {
    let repo = &st.repos[r];
    let mut v = json!({
        "id": e.id,
        "node_id": format!("LE_lADO{}", e.id),
        "url": format!("{}/repos/{}/issues/events/{}", st.api(), repo.full_name(), e.id),
        "actor": user_by_login(st, &e.actor),
        "event": e.event,
        "commit_id": null,
        "commit_url": null,
        "created_at": e.created_at,
        "performed_via_github_app": null,
    });
    if let Some(label) = &e.label {
        let color = repo
            .labels
            .get(&label.to_ascii_lowercase())
            .map(|l| l.color.clone())
            .unwrap_or_else(|| "ededed".into());
        // Issue events carry a short label: name and color only.
        v["label"] = json!({ "name": label, "color": color });
    }
    v
}

fn pull_json(st: &FakeState, r: usize, i: &IssueData) -> Value {
    let repo = &st.repos[r];
    let pull = i.pull.as_ref().expect("a pull request");
    let api = format!("{}/repos/{}", st.api(), repo.full_name());
    let html = format!("{}/{}", st.root, repo.full_name());
    let n = i.number;
    let owner = user_by_login(st, &repo.owner);
    let repo_value = repo_json(st, r);
    let refs = json!({
        "head": {
            "label": format!("{}:{}", repo.owner, pull.head),
            "ref": pull.head,
            "sha": pull.head_sha,
            "user": owner,
            "repo": repo_value,
        },
        "base": {
            "label": format!("{}:{}", repo.owner, pull.base),
            "ref": pull.base,
            "sha": pull.base_sha,
            "user": owner,
            "repo": repo_value,
        },
        "_links": {
            "self": {"href": format!("{api}/pulls/{n}")},
            "html": {"href": format!("{html}/pull/{n}")},
            "issue": {"href": format!("{api}/issues/{n}")},
            "comments": {"href": format!("{api}/issues/{n}/comments")},
            "review_comments": {"href": format!("{api}/pulls/{n}/comments")},
            "review_comment": {"href": format!("{api}/pulls/comments{{/number}}")},
            "commits": {"href": format!("{api}/pulls/{n}/commits")},
            "statuses": {"href": format!("{api}/statuses/{}", pull.head_sha)},
        },
    });
    let mut v = json!({
        "url": format!("{api}/pulls/{n}"),
        "id": i.id,
        "node_id": format!("PR_kwDO{}", i.id),
        "html_url": format!("{html}/pull/{n}"),
        "diff_url": format!("{html}/pull/{n}.diff"),
        "patch_url": format!("{html}/pull/{n}.patch"),
        "issue_url": format!("{api}/issues/{n}"),
        "commits_url": format!("{api}/pulls/{n}/commits"),
        "review_comments_url": format!("{api}/pulls/{n}/comments"),
        "review_comment_url": format!("{api}/pulls/comments{{/number}}"),
        "comments_url": format!("{api}/issues/{n}/comments"),
        "statuses_url": format!("{api}/statuses/{}", pull.head_sha),
        "number": n,
        "state": i.state,
        "locked": i.locked,
        "title": i.title,
        "user": user_by_login(st, &i.author),
        "body": i.body,
        "labels": i.labels.iter().map(|l| label_json(st, r, l)).collect::<Vec<_>>(),
        "milestone": null,
        "active_lock_reason": null,
    });
    let tail = json!({
        "created_at": i.created_at,
        "updated_at": i.updated_at,
        "closed_at": i.closed_at,
        "merged_at": null,
        "merge_commit_sha": null,
        "assignee": null,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "author_association": "NONE",
        "auto_merge": null,
        "draft": pull.draft,
        "merged": false,
        "mergeable": null,
        "rebaseable": null,
        "mergeable_state": "unknown",
        "merged_by": null,
        "comments": i.comments.len(),
        "review_comments": 0,
        "maintainer_can_modify": false,
        "commits": 1,
        "additions": 1,
        "deletions": 0,
        "changed_files": 1,
    });
    for extra in [refs, tail] {
        if let (Value::Object(into), Value::Object(from)) = (&mut v, extra) {
            into.extend(from);
        }
    }
    v
}
