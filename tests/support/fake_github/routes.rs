//! The HTTP edge of the fake: authentication, injected faults, rate-limit headers and the
//! request log (`handle`), then dispatch to one handler per endpoint (`route`), with
//! GitHub's pagination.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::json::{
    comment_json, encode, event_json, issue_json, label_json, pull_json, repo_json, user_by_login,
    user_json,
};
use super::state::{epoch, now, CommentData, FakeState, IssueData, Shared};
use super::{checks, pulls};
use super::{FaultKind, SeenRequest, BOT_LOGIN};

/// A refused request's answer (boxed: a `Response` is large).
pub(super) type Refusal = Box<Response>;

pub(super) fn json_response(status: StatusCode, body: Value) -> Response {
    (
        status,
        [("content-type", "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

pub(super) fn error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        json!({
            "message": message,
            "documentation_url": "https://docs.github.com/rest",
            "status": status.as_u16().to_string(),
        }),
    )
}

pub(super) async fn handle(
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
    // An ETag on every 200 GET (over the body and its `Link`); a matching `If-None-Match`
    // gets a bodiless 304, which GitHub does not count against the rate limit.
    if method == Method::GET && response.status() == StatusCode::OK {
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        let etag = etag_of(&bytes, parts.headers.get("link"));
        let matched = headers
            .get("if-none-match")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
        response = if matched {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            Response::from_parts(parts, axum::body::Body::from(bytes))
        };
        if let Ok(v) = HeaderValue::from_str(&etag) {
            response.headers_mut().insert("etag", v);
        }
    }
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    if response.status() != StatusCode::NOT_MODIFIED {
        st.rate_used += 1;
    }
    {
        let used = st.rate_used;
        let h = response.headers_mut();
        if !h.contains_key("x-ratelimit-remaining") {
            h.insert("x-ratelimit-limit", HeaderValue::from_static("5000"));
            h.insert(
                "x-ratelimit-remaining",
                HeaderValue::from(5000u64.saturating_sub(used)),
            );
            h.insert("x-ratelimit-used", HeaderValue::from(used));
            h.insert("x-ratelimit-resource", HeaderValue::from_static("core"));
            h.insert("x-ratelimit-reset", HeaderValue::from(epoch() + 3600));
        }
        h.insert(
            "x-github-api-version-selected",
            HeaderValue::from_static("2022-11-28"),
        );
    }
    st.requests.push(SeenRequest {
        method: method.to_string(),
        path: stripped,
        status: response.status().as_u16(),
    });
    response
}

/// A weak validator over what a GET answered.
fn etag_of(body: &[u8], link: Option<&HeaderValue>) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    link.map(HeaderValue::as_bytes).hash(&mut hasher);
    format!("W/\"{:016x}\"", hasher.finish())
}

pub(super) fn query_map(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub(super) fn percent_decode(s: &str) -> String {
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
pub(super) fn paginate(
    st: &FakeState,
    repo_id: u64,
    rest: &str,
    query: &BTreeMap<String, String>,
    items: Vec<Value>,
) -> Response {
    paginate_into(st, repo_id, rest, query, items, Value::Array)
}

/// [`paginate`] for lists GitHub wraps in an object (`{"total_count", "check_runs"}`):
/// `wrap` builds the body from the page.
pub(super) fn paginate_into(
    st: &FakeState,
    repo_id: u64,
    rest: &str,
    query: &BTreeMap<String, String>,
    items: Vec<Value>,
    wrap: impl FnOnce(Vec<Value>) -> Value,
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
    let mut resp = json_response(StatusCode::OK, wrap(slice));
    if !links.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&links.join(", ")) {
            resp.headers_mut().insert("link", v);
        }
    }
    resp
}

pub(super) fn route(
    st: &mut FakeState,
    method: &Method,
    path_and_query: &str,
    body: &Bytes,
) -> Response {
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
            pulls::sync_all(st, r);
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
                .map(|i| pull_json(st, r, i, None))
                .collect();
            paginate(st, repo_id, "/pulls", &query, items)
        }
        (Method::POST, ["pulls"]) => pulls::create_pull(st, r, &parsed),
        (method, ["pulls", n, tail @ ..]) => {
            let Some(number) = pulls::pull_number(st, r, n) else {
                return error(StatusCode::NOT_FOUND, "Not Found");
            };
            match (method, tail) {
                (Method::GET, []) => pulls::get(st, r, number),
                (Method::PATCH, []) => pulls::update(st, r, number, &parsed),
                (Method::PUT, ["merge"]) => pulls::merge(st, r, number, &parsed),
                (Method::GET, ["merge"]) => {
                    let merged = st.repos[r].issues[&number]
                        .pull
                        .as_ref()
                        .is_some_and(|p| p.merged);
                    if merged {
                        StatusCode::NO_CONTENT.into_response()
                    } else {
                        error(StatusCode::NOT_FOUND, "Not Found")
                    }
                }
                (Method::GET, ["reviews"]) => {
                    let items = pulls::list_reviews(st, r, number);
                    paginate(st, repo_id, &rest_path(&rest), &query, items)
                }
                (Method::POST, ["reviews"]) => pulls::create_review(st, r, number, &parsed),
                (Method::GET, ["comments"]) => {
                    let items = pulls::list_review_comments(st, r, number);
                    paginate(st, repo_id, &rest_path(&rest), &query, items)
                }
                (Method::POST, ["comments"]) => {
                    pulls::create_review_comment(st, r, number, &parsed)
                }
                (Method::POST, ["comments", id, "replies"]) => {
                    pulls::reply(st, r, number, id, &parsed)
                }
                _ => error(StatusCode::NOT_FOUND, "Not Found"),
            }
        }
        (Method::GET, ["commits", reference, "check-runs"]) => {
            checks::list_check_runs(st, r, reference, &rest_path(&rest), &query)
        }
        (Method::GET, ["commits", reference, "status"]) => {
            checks::combined_status(st, r, reference)
        }
        (Method::POST, ["statuses", sha]) => checks::create_status(st, r, sha, &parsed),
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

pub(super) fn validation(field: &str, code: &str) -> Response {
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

pub(super) fn find_issue<'a>(st: &'a FakeState, r: usize, n: &str) -> Option<&'a IssueData> {
    n.parse::<u64>()
        .ok()
        .and_then(|n| st.repos[r].issues.get(&n))
}

pub(super) fn labels_of(st: &FakeState, r: usize, number: u64) -> Value {
    Value::Array(
        st.repos[r].issues[&number]
            .labels
            .iter()
            .map(|name| label_json(st, r, name))
            .collect(),
    )
}
