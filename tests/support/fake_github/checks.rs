//! CI in the fake: check runs and commit statuses per sha, as GitHub Actions and external
//! CI would leave them, read through `GET /commits/{ref}/check-runs` and
//! `GET /commits/{ref}/status`.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::git;
use super::json::{check_run_json, combined_status_json, status_json};
use super::pulls::latest_check_runs;
use super::routes::{error, json_response, paginate_into, validation, Refusal};
use super::state::{now, FakeState, StatusData};
use super::BOT_LOGIN;

/// A ref as a commit sha: a branch of the bare repository, or a sha (as given when the
/// repository has no git data).
pub(super) fn resolve_ref(st: &FakeState, r: usize, reference: &str) -> Option<String> {
    let clone_url = &st.repos[r].clone_url;
    if git::bare_dir(clone_url).is_some() {
        return git::resolve_commit(clone_url, reference);
    }
    let is_sha = reference.len() == 40 && reference.chars().all(|c| c.is_ascii_hexdigit());
    is_sha.then(|| reference.to_string())
}

fn no_commit(reference: &str) -> Response {
    error(
        StatusCode::UNPROCESSABLE_ENTITY,
        &format!("No commit found for SHA: {reference}"),
    )
}

/// `GET /commits/{ref}/check-runs`: `filter=latest` (default: the latest run per name) or
/// `all`, `check_name`, `status`; newest first.
pub(super) fn list_check_runs(
    st: &FakeState,
    r: usize,
    reference: &str,
    rest: &str,
    query: &BTreeMap<String, String>,
) -> Response {
    let Some(sha) = resolve_ref(st, r, reference) else {
        return no_commit(reference);
    };
    let repo = &st.repos[r];
    let runs = match query.get("filter").map(String::as_str) {
        Some("all") => repo
            .check_runs
            .iter()
            .rev()
            .filter(|c| c.head_sha == sha)
            .collect(),
        _ => latest_check_runs(repo, &sha),
    };
    let items: Vec<Value> = runs
        .into_iter()
        .filter(|c| query.get("check_name").is_none_or(|n| *n == c.name))
        .filter(|c| query.get("status").is_none_or(|s| *s == c.status))
        .map(|c| check_run_json(st, r, c))
        .collect();
    let total = items.len();
    paginate_into(
        st,
        repo.id,
        rest,
        query,
        items,
        |page| json!({ "total_count": total, "check_runs": page }),
    )
}

/// `GET /commits/{ref}/status`
pub(super) fn combined_status(st: &FakeState, r: usize, reference: &str) -> Response {
    match resolve_ref(st, r, reference) {
        Some(sha) => json_response(StatusCode::OK, combined_status_json(st, r, &sha)),
        None => no_commit(reference),
    }
}

/// Record a commit status (`POST /statuses/{sha}` and the test control).
pub(super) fn add_status(
    st: &mut FakeState,
    r: usize,
    sha: &str,
    creator: &str,
    body: &Value,
) -> Result<u64, Refusal> {
    let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_string);
    let state = text("state").ok_or_else(|| Box::new(validation("state", "missing_field")))?;
    if !matches!(state.as_str(), "error" | "failure" | "pending" | "success") {
        return Err(Box::new(validation("state", "invalid")));
    }
    let Some(sha) = resolve_ref(st, r, sha) else {
        return Err(Box::new(no_commit(sha)));
    };
    st.ensure_user(creator);
    let id = st.id();
    st.repos[r].statuses.push(StatusData {
        id,
        sha,
        state,
        context: text("context").unwrap_or_else(|| "default".into()),
        description: text("description"),
        target_url: text("target_url"),
        creator: creator.to_string(),
        created_at: now(),
    });
    Ok(id)
}

/// `POST /statuses/{sha}` as the token's user.
pub(super) fn create_status(st: &mut FakeState, r: usize, sha: &str, body: &Value) -> Response {
    match add_status(st, r, sha, BOT_LOGIN, body) {
        Ok(id) => {
            let status = st.repos[r]
                .statuses
                .iter()
                .find(|s| s.id == id)
                .expect("just added");
            json_response(StatusCode::CREATED, status_json(st, status))
        }
        Err(resp) => *resp,
    }
}
