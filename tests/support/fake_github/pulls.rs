//! Pull requests in the fake: creation, reads that follow the branches and compute
//! mergeability with real git (as GitHub does, `null` on the first read after the tips
//! move), merge and close, reviews, inline review comments and their replies.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::git;
use super::json::{latest_statuses, pull_json, review_comment_json, review_json};
use super::routes::{error, json_response, validation, Refusal};
use super::state::{
    fake_sha, now, FakeState, IssueData, Mergeability, PullData, ReviewCommentData, ReviewData,
};
use super::BOT_LOGIN;

pub(super) fn create_pull(st: &mut FakeState, r: usize, body: &Value) -> Response {
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
        git::branch_sha(&st.repos[r].clone_url, &head),
        git::branch_sha(&st.repos[r].clone_url, &base),
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
            pull: Some(PullData::new(
                head,
                base,
                head_sha,
                base_sha,
                body.get("draft").and_then(Value::as_bool).unwrap_or(false),
            )),
        },
    );
    let issue = &st.repos[r].issues[&number];
    json_response(StatusCode::CREATED, pull_json(st, r, issue, None))
}

fn pull_mut(st: &mut FakeState, r: usize, number: u64) -> Option<&mut PullData> {
    st.repos[r]
        .issues
        .get_mut(&number)
        .and_then(|i| i.pull.as_mut())
}

/// A pull request by its number in the path (`None`: no such pull request).
pub(super) fn pull_number(st: &FakeState, r: usize, n: &str) -> Option<u64> {
    let number = n.parse::<u64>().ok()?;
    st.repos[r].issues.get(&number)?.pull.as_ref()?;
    Some(number)
}

/// An open pull request follows its branches: its tips are the bare repository's.
pub(super) fn sync_tips(st: &mut FakeState, r: usize, number: u64) {
    let clone_url = st.repos[r].clone_url.clone();
    let Some(issue) = st.repos[r].issues.get_mut(&number) else {
        return;
    };
    if issue.state != "open" {
        return;
    }
    let Some(pull) = issue.pull.as_mut() else {
        return;
    };
    if let Some(Some(sha)) = git::branch_sha(&clone_url, &pull.head) {
        pull.head_sha = sha;
    }
    if let Some(Some(sha)) = git::branch_sha(&clone_url, &pull.base) {
        pull.base_sha = sha;
    }
}

/// Sync every open pull request of the repository (before a list).
pub(super) fn sync_all(st: &mut FakeState, r: usize) {
    let numbers: Vec<u64> = st.repos[r]
        .issues
        .values()
        .filter(|i| i.pull.is_some() && i.state == "open")
        .map(|i| i.number)
        .collect();
    for number in numbers {
        sync_tips(st, r, number);
    }
}

/// `(mergeable, mergeable_state)` as a single read shows it: `None` when it was not
/// computed for the current tips yet (it is computed now, for the next read), or when the
/// repository has no git data, or the pull request is closed.
fn merge_view(st: &mut FakeState, r: usize, number: u64) -> Option<(bool, String)> {
    sync_tips(st, r, number);
    let clone_url = st.repos[r].clone_url.clone();
    let issue = st.repos[r].issues.get(&number)?;
    if issue.state != "open" {
        return None;
    }
    let pull = issue.pull.as_ref()?;
    let current = pull
        .mergeability
        .as_ref()
        .filter(|m| m.head_sha == pull.head_sha && m.base_sha == pull.base_sha)
        .cloned();
    let Some(m) = current else {
        let (conflicts, up_to_date) =
            match git::merge_check(&clone_url, &pull.base_sha, &pull.head_sha) {
                Some((c, u)) => (Some(c), u),
                None => (None, false),
            };
        let computed = Mergeability {
            head_sha: pull.head_sha.clone(),
            base_sha: pull.base_sha.clone(),
            conflicts,
            up_to_date,
        };
        pull_mut(st, r, number)?.mergeability = Some(computed);
        return None;
    };
    let conflicts = m.conflicts?;
    let repo = &st.repos[r];
    let checks_unsettled = latest_check_runs(repo, &pull.head_sha).iter().any(|c| {
        c.status != "completed"
            || matches!(
                c.conclusion.as_deref(),
                Some("failure" | "timed_out" | "cancelled" | "action_required")
            )
    }) || latest_statuses(&repo.statuses, &pull.head_sha)
        .iter()
        .any(|s| s.state != "success");
    Some(if conflicts {
        (false, "dirty".into())
    } else if pull.draft {
        (true, "draft".into())
    } else if !m.up_to_date {
        (true, "behind".into())
    } else if checks_unsettled {
        (true, "unstable".into())
    } else {
        (true, "clean".into())
    })
}

/// The latest check run of each name for `sha`, newest first.
pub(super) fn latest_check_runs<'a>(
    repo: &'a super::state::RepoData,
    sha: &str,
) -> Vec<&'a super::state::CheckRunData> {
    let mut seen = std::collections::BTreeSet::new();
    repo.check_runs
        .iter()
        .rev()
        .filter(|c| c.head_sha == sha)
        .filter(|c| seen.insert(c.name.clone()))
        .collect()
}

/// `GET /pulls/{n}`
pub(super) fn get(st: &mut FakeState, r: usize, number: u64) -> Response {
    let view = merge_view(st, r, number);
    let issue = &st.repos[r].issues[&number];
    let view = view.as_ref().map(|(m, s)| (*m, s.as_str()));
    json_response(StatusCode::OK, pull_json(st, r, issue, view))
}

/// `PATCH /pulls/{n}`: title, body, state (`closed` / `open`), base.
pub(super) fn update(st: &mut FakeState, r: usize, number: u64, body: &Value) -> Response {
    let field = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_string);
    sync_tips(st, r, number);
    let clone_url = st.repos[r].clone_url.clone();
    if let Some(base) = field("base") {
        if git::branch_sha(&clone_url, &base) == Some(None) {
            return validation("base", "invalid");
        }
    }
    let issue = st.repos[r].issues.get_mut(&number).expect("a pull request");
    if let Some(title) = field("title") {
        issue.title = title;
    }
    if let Some(text) = field("body") {
        issue.body = text;
    }
    match field("state").as_deref() {
        Some("closed") if issue.state == "open" => {
            issue.state = "closed".into();
            issue.closed_at = Some(now());
        }
        Some("open") if issue.state == "closed" => {
            if issue.pull.as_ref().is_some_and(|p| p.merged) {
                return validation("state", "invalid");
            }
            issue.state = "open".into();
            issue.closed_at = None;
        }
        Some("open" | "closed") | None => {}
        Some(_) => return validation("state", "invalid"),
    }
    if let Some(base) = field("base") {
        if let Some(pull) = issue.pull.as_mut() {
            pull.base = base;
        }
    }
    issue.updated_at = now();
    sync_tips(st, r, number);
    let issue = &st.repos[r].issues[&number];
    json_response(StatusCode::OK, pull_json(st, r, issue, None))
}

/// `PUT /pulls/{n}/merge`: a real merge (or squash) commit on the base branch.
pub(super) fn merge(st: &mut FakeState, r: usize, number: u64, body: &Value) -> Response {
    sync_tips(st, r, number);
    let clone_url = st.repos[r].clone_url.clone();
    let issue = &st.repos[r].issues[&number];
    let pull = issue.pull.as_ref().expect("a pull request");
    let not_mergeable = || {
        error(
            StatusCode::METHOD_NOT_ALLOWED,
            "Pull Request is not mergeable",
        )
    };
    if issue.state != "open" {
        return not_mergeable();
    }
    if let Some(sha) = body.get("sha").and_then(Value::as_str) {
        if sha != pull.head_sha {
            return error(
                StatusCode::CONFLICT,
                "Head branch was modified. Review and try the merge again.",
            );
        }
    }
    let method = body
        .get("merge_method")
        .and_then(Value::as_str)
        .unwrap_or("merge");
    let squash = match method {
        "merge" => false,
        "squash" => true,
        // Rebase merges are not simulated: say so rather than pretend.
        "rebase" => {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "Rebase merges are not supported by the fake GitHub",
            )
        }
        _ => return validation("merge_method", "invalid"),
    };
    let title = body
        .get("commit_title")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| {
            if squash {
                format!("{} (#{number})", issue.title)
            } else {
                format!(
                    "Merge pull request #{number} from {}/{}",
                    st.repos[r].owner, pull.head
                )
            }
        });
    let message = match body.get("commit_message").and_then(Value::as_str) {
        Some(m) => format!("{title}\n\n{m}"),
        None if squash => title,
        None => format!("{title}\n\n{}", issue.title),
    };
    let merged = if git::bare_dir(&clone_url).is_some() {
        match git::merge_into(
            &clone_url,
            &pull.base,
            &pull.base_sha,
            &pull.head_sha,
            squash,
            &message,
        ) {
            Some(sha) => Some(sha),
            None => return not_mergeable(),
        }
    } else {
        None
    };
    // No git data: a made-up sha, as for the pull request's own tips.
    let sha = merged.unwrap_or_else(|| fake_sha(st.id()));
    let issue = st.repos[r].issues.get_mut(&number).expect("a pull request");
    issue.state = "closed".into();
    issue.closed_at = Some(now());
    issue.updated_at = now();
    let pull = issue.pull.as_mut().expect("a pull request");
    pull.merged = true;
    pull.merged_at = Some(now());
    pull.merged_by = Some(BOT_LOGIN.to_string());
    pull.merge_commit_sha = Some(sha.clone());
    json_response(
        StatusCode::OK,
        json!({ "sha": sha, "merged": true, "message": "Pull Request successfully merged" }),
    )
}

fn issue_of(st: &FakeState, r: usize, number: u64) -> &IssueData {
    &st.repos[r].issues[&number]
}

/// Reviews as listed: submitted ones, and pending ones only to their author (the token's
/// user, here).
pub(super) fn list_reviews(st: &FakeState, r: usize, number: u64) -> Vec<Value> {
    let issue = issue_of(st, r, number);
    let pull = issue.pull.as_ref().expect("a pull request");
    pull.reviews
        .iter()
        .filter(|v| v.state != "PENDING" || v.author == BOT_LOGIN)
        .map(|v| review_json(st, r, issue, v))
        .collect()
}

/// An inline comment to add (a reply when `in_reply_to` is set; then only `body` counts).
#[derive(Debug, Clone)]
pub(super) struct CommentSpec {
    pub(super) body: String,
    pub(super) path: String,
    pub(super) line: u64,
    pub(super) start_line: Option<u64>,
    pub(super) side: String,
    pub(super) in_reply_to: Option<u64>,
    /// The commit to comment on; default the head.
    pub(super) commit_id: Option<String>,
}

impl CommentSpec {
    fn from_json(v: &Value) -> Result<CommentSpec, Refusal> {
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let body = text("body").ok_or_else(|| Box::new(validation("body", "missing_field")))?;
        let in_reply_to = v.get("in_reply_to").and_then(Value::as_u64);
        if in_reply_to.is_some() {
            return Ok(CommentSpec {
                body,
                path: String::new(),
                line: 0,
                start_line: None,
                side: "RIGHT".into(),
                in_reply_to,
                commit_id: None,
            });
        }
        let path = text("path").ok_or_else(|| Box::new(validation("path", "missing_field")))?;
        // `position` (the legacy diff offset) is not simulated: `line` is required.
        let line = v
            .get("line")
            .and_then(Value::as_u64)
            .ok_or_else(|| Box::new(validation("line", "missing_field")))?;
        let side = text("side").unwrap_or_else(|| "RIGHT".into());
        if side != "RIGHT" && side != "LEFT" {
            return Err(Box::new(validation("side", "invalid")));
        }
        Ok(CommentSpec {
            body,
            path,
            line,
            start_line: v.get("start_line").and_then(Value::as_u64),
            side,
            in_reply_to: None,
            commit_id: text("commit_id"),
        })
    }
}

fn line_not_in_diff() -> Response {
    json_response(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({
            "message": "Validation Failed",
            "errors": ["pull_request_review_thread.line must be part of the diff"],
            "documentation_url": "https://docs.github.com/rest/pulls/comments#create-a-review-comment-for-a-pull-request",
            "status": "422",
        }),
    )
}

/// Add an inline comment by `author` to review `review_id` (validated as GitHub does: the
/// line must be part of the diff; a reply joins its thread's root). Returns its id.
pub(super) fn add_review_comment(
    st: &mut FakeState,
    r: usize,
    number: u64,
    author: &str,
    review_id: u64,
    spec: &CommentSpec,
) -> Result<u64, Refusal> {
    sync_tips(st, r, number);
    st.ensure_user(author);
    let clone_url = st.repos[r].clone_url.clone();
    let pull = issue_of(st, r, number)
        .pull
        .as_ref()
        .expect("a pull request");
    let data = match spec.in_reply_to {
        Some(parent) => {
            let Some(parent) = pull.review_comments.iter().find(|c| c.id == parent) else {
                return Err(Box::new(error(StatusCode::NOT_FOUND, "Not Found")));
            };
            ReviewCommentData {
                id: 0,
                review_id,
                in_reply_to: Some(parent.in_reply_to.unwrap_or(parent.id)),
                author: author.to_string(),
                body: spec.body.clone(),
                path: parent.path.clone(),
                line: parent.line,
                start_line: parent.start_line,
                side: parent.side.clone(),
                diff_hunk: parent.diff_hunk.clone(),
                commit_id: parent.commit_id.clone(),
                created_at: now(),
            }
        }
        None => {
            let commit = spec
                .commit_id
                .clone()
                .unwrap_or_else(|| pull.head_sha.clone());
            let hunk = if git::bare_dir(&clone_url).is_some() {
                match git::diff_hunk(
                    &clone_url,
                    &pull.base_sha,
                    &commit,
                    &spec.path,
                    spec.line,
                    spec.side == "LEFT",
                ) {
                    Some(hunk) => hunk,
                    None => return Err(Box::new(line_not_in_diff())),
                }
            } else {
                format!("@@ -0,0 +1,{0} @@\n+line {0}", spec.line)
            };
            ReviewCommentData {
                id: 0,
                review_id,
                in_reply_to: None,
                author: author.to_string(),
                body: spec.body.clone(),
                path: spec.path.clone(),
                line: spec.line,
                start_line: spec.start_line,
                side: spec.side.clone(),
                diff_hunk: hunk,
                commit_id: commit,
                created_at: now(),
            }
        }
    };
    let id = st.id();
    let issue = st.repos[r].issues.get_mut(&number).expect("a pull request");
    issue.updated_at = now();
    issue
        .pull
        .as_mut()
        .expect("a pull request")
        .review_comments
        .push(ReviewCommentData { id, ..data });
    Ok(id)
}

/// Add a review by `author` with its inline comments: `event` APPROVE, REQUEST_CHANGES or
/// COMMENT (none: PENDING). Returns its id.
pub(super) fn add_review(
    st: &mut FakeState,
    r: usize,
    number: u64,
    author: &str,
    event: Option<&str>,
    body: &str,
    comments: &[CommentSpec],
) -> Result<u64, Refusal> {
    let state = match event {
        Some("APPROVE") => "APPROVED",
        Some("REQUEST_CHANGES") => "CHANGES_REQUESTED",
        Some("COMMENT") => "COMMENTED",
        None | Some("") => "PENDING",
        Some(_) => return Err(Box::new(validation("event", "invalid"))),
    };
    // GitHub wants a body for these two (unless inline comments carry the review).
    if matches!(state, "CHANGES_REQUESTED" | "COMMENTED") && body.is_empty() && comments.is_empty()
    {
        return Err(Box::new(json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({
                "message": "Unprocessable Entity",
                "errors": [format!("Review Can not {} without a body", if state == "COMMENTED" { "comment" } else { "request changes" })],
                "documentation_url": "https://docs.github.com/rest/pulls/reviews#create-a-review-for-a-pull-request",
                "status": "422",
            }),
        )));
    }
    sync_tips(st, r, number);
    st.ensure_user(author);
    let id = st.id();
    // Every comment is checked before anything is stored: a review is all or nothing.
    let mut added = Vec::new();
    for spec in comments {
        match add_review_comment(st, r, number, author, id, spec) {
            Ok(cid) => added.push(cid),
            Err(resp) => {
                if let Some(pull) = pull_mut(st, r, number) {
                    pull.review_comments.retain(|c| !added.contains(&c.id));
                }
                return Err(resp);
            }
        }
    }
    let pull = pull_mut(st, r, number).expect("a pull request");
    let commit_id = pull.head_sha.clone();
    pull.reviews.push(ReviewData {
        id,
        author: author.to_string(),
        state: state.to_string(),
        body: body.to_string(),
        commit_id,
        submitted_at: (state != "PENDING").then(now),
    });
    if let Some(issue) = st.repos[r].issues.get_mut(&number) {
        issue.updated_at = now();
    }
    Ok(id)
}

/// `POST /pulls/{n}/reviews` as the token's user.
pub(super) fn create_review(st: &mut FakeState, r: usize, number: u64, body: &Value) -> Response {
    let comments = match body.get("comments") {
        Some(Value::Array(items)) => {
            match items
                .iter()
                .map(CommentSpec::from_json)
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(specs) => specs,
                Err(resp) => return *resp,
            }
        }
        _ => Vec::new(),
    };
    let text = body.get("body").and_then(Value::as_str).unwrap_or("");
    let event = body.get("event").and_then(Value::as_str);
    match add_review(st, r, number, BOT_LOGIN, event, text, &comments) {
        Ok(id) => {
            let issue = issue_of(st, r, number);
            let review = issue
                .pull
                .as_ref()
                .and_then(|p| p.reviews.iter().find(|v| v.id == id))
                .expect("just added");
            json_response(StatusCode::OK, review_json(st, r, issue, review))
        }
        Err(resp) => *resp,
    }
}

/// Review comments as listed: oldest first.
pub(super) fn list_review_comments(st: &mut FakeState, r: usize, number: u64) -> Vec<Value> {
    sync_tips(st, r, number);
    let clone_url = &st.repos[r].clone_url;
    let issue = issue_of(st, r, number);
    let pull = issue.pull.as_ref().expect("a pull request");
    pull.review_comments
        .iter()
        .map(|c| {
            let line = current_line(clone_url, pull, c);
            review_comment_json(st, r, issue, c, line)
        })
        .collect()
}

/// Where a comment sits on the pull request's current diff: its line while the hunk above
/// it is unchanged, `None` (outdated, as GitHub shows it) once a push changed that hunk.
fn current_line(clone_url: &str, pull: &PullData, c: &ReviewCommentData) -> Option<u64> {
    if c.commit_id == pull.head_sha || git::bare_dir(clone_url).is_none() {
        return Some(c.line);
    }
    let now = git::diff_hunk(
        clone_url,
        &pull.base_sha,
        &pull.head_sha,
        &c.path,
        c.line,
        c.side == "LEFT",
    );
    (now.as_deref() == Some(c.diff_hunk.as_str())).then_some(c.line)
}

fn comment_created(st: &FakeState, r: usize, number: u64, id: u64) -> Response {
    let issue = issue_of(st, r, number);
    let comment = issue
        .pull
        .as_ref()
        .and_then(|p| p.review_comments.iter().find(|c| c.id == id))
        .expect("just added");
    json_response(
        StatusCode::CREATED,
        review_comment_json(st, r, issue, comment, Some(comment.line)),
    )
}

/// `POST /pulls/{n}/comments` as the token's user (a single comment is its own review).
pub(super) fn create_review_comment(
    st: &mut FakeState,
    r: usize,
    number: u64,
    body: &Value,
) -> Response {
    let spec = match CommentSpec::from_json(body) {
        Ok(spec) => spec,
        Err(resp) => return *resp,
    };
    let review_id = st.id();
    match add_review_comment(st, r, number, BOT_LOGIN, review_id, &spec) {
        Ok(id) => comment_created(st, r, number, id),
        Err(resp) => *resp,
    }
}

/// `POST /pulls/{n}/comments/{id}/replies` as the token's user.
pub(super) fn reply(
    st: &mut FakeState,
    r: usize,
    number: u64,
    parent: &str,
    body: &Value,
) -> Response {
    let Some(text) = body.get("body").and_then(Value::as_str) else {
        return validation("body", "missing_field");
    };
    let Ok(parent) = parent.parse::<u64>() else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let spec = CommentSpec {
        body: text.to_string(),
        path: String::new(),
        line: 0,
        start_line: None,
        side: "RIGHT".into(),
        in_reply_to: Some(parent),
        commit_id: None,
    };
    let review_id = st.id();
    match add_review_comment(st, r, number, BOT_LOGIN, review_id, &spec) {
        Ok(id) => comment_created(st, r, number, id),
        Err(resp) => *resp,
    }
}
