//! GitHub's object shapes, rendered from the fake's state: complete objects as the real API
//! sends them (octocrab's models are strict about required fields).

use serde_json::{json, Value};

use super::state::{
    CheckRunData, CommentData, EventData, FakeState, IssueData, ReviewCommentData, ReviewData,
    StatusData,
};

pub(super) fn encode(s: &str) -> String {
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

pub(super) fn user_json(st: &FakeState, login: &str, id: u64) -> Value {
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

pub(super) fn user_by_login(st: &FakeState, login: &str) -> Value {
    let id = st.users.get(login).copied().unwrap_or(1);
    user_json(st, login, id)
}

pub(super) const REPO_URLS: &[(&str, &str)] = &[
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

pub(super) fn repo_json(st: &FakeState, r: usize) -> Value {
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

pub(super) fn label_json(st: &FakeState, r: usize, name: &str) -> Value {
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

pub(super) fn issue_json(st: &FakeState, r: usize, i: &IssueData) -> Value {
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
            "merged_at": i.pull.as_ref().and_then(|p| p.merged_at.clone()),
        });
    }
    v
}

pub(super) fn comment_json(st: &FakeState, r: usize, i: &IssueData, c: &CommentData) -> Value {
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

pub(super) fn event_json(st: &FakeState, r: usize, e: &EventData) -> Value {
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

/// A pull request; `merge` is the `(mergeable, mergeable_state)` to show (`None`: not
/// computed, `null` and `unknown` as GitHub answers before its background job ran).
pub(super) fn pull_json(
    st: &FakeState,
    r: usize,
    i: &IssueData,
    merge: Option<(bool, &str)>,
) -> Value {
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
        "merged_at": pull.merged_at,
        "merge_commit_sha": pull.merge_commit_sha,
        "assignee": null,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "author_association": "NONE",
        "auto_merge": null,
        "draft": pull.draft,
        "merged": pull.merged,
        "mergeable": merge.map(|(m, _)| m),
        "rebaseable": merge.map(|(m, _)| m),
        "mergeable_state": merge.map(|(_, s)| s).unwrap_or("unknown"),
        "merged_by": pull.merged_by.as_deref().map(|l| user_by_login(st, l)),
        "comments": i.comments.len(),
        "review_comments": pull.review_comments.len(),
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

fn author_association(st: &FakeState, r: usize, login: &str) -> &'static str {
    let repo = &st.repos[r];
    if login == repo.owner {
        "OWNER"
    } else if repo.collaborators.contains_key(login) {
        "COLLABORATOR"
    } else {
        "NONE"
    }
}

pub(super) fn review_json(st: &FakeState, r: usize, i: &IssueData, v: &ReviewData) -> Value {
    let repo = &st.repos[r];
    let api = format!("{}/repos/{}", st.api(), repo.full_name());
    let html = format!(
        "{}/{}/pull/{}#pullrequestreview-{}",
        st.root,
        repo.full_name(),
        i.number,
        v.id
    );
    let mut review = json!({
        "id": v.id,
        "node_id": format!("PRR_kwDO{}", v.id),
        "user": user_by_login(st, &v.author),
        "body": v.body,
        "state": v.state,
        "html_url": html,
        "pull_request_url": format!("{api}/pulls/{}", i.number),
        "author_association": author_association(st, r, &v.author),
        "_links": {
            "html": {"href": html},
            "pull_request": {"href": format!("{api}/pulls/{}", i.number)},
        },
        "commit_id": v.commit_id,
    });
    // A pending review has not been submitted: GitHub leaves the field out.
    if let Some(at) = &v.submitted_at {
        review["submitted_at"] = json!(at);
    }
    review
}

pub(super) fn review_comment_json(
    st: &FakeState,
    r: usize,
    i: &IssueData,
    c: &ReviewCommentData,
    line: Option<u64>,
) -> Value {
    let repo = &st.repos[r];
    let api = format!("{}/repos/{}", st.api(), repo.full_name());
    let html = format!(
        "{}/{}/pull/{}#discussion_r{}",
        st.root,
        repo.full_name(),
        i.number,
        c.id
    );
    let mut v = json!({
        "url": format!("{api}/pulls/comments/{}", c.id),
        "pull_request_review_id": c.review_id,
        "id": c.id,
        "node_id": format!("PRRC_kwDO{}", c.id),
        "diff_hunk": c.diff_hunk,
        "path": c.path,
        "position": line.map(|_| 1),
        "original_position": 1,
        "commit_id": c.commit_id,
        "original_commit_id": c.commit_id,
        "user": user_by_login(st, &c.author),
        "body": c.body,
        "created_at": c.created_at,
        "updated_at": c.created_at,
        "html_url": html,
        "pull_request_url": format!("{api}/pulls/{}", i.number),
        "author_association": author_association(st, r, &c.author),
        "_links": {
            "self": {"href": format!("{api}/pulls/comments/{}", c.id)},
            "html": {"href": html},
            "pull_request": {"href": format!("{api}/pulls/{}", i.number)},
        },
        "reactions": {
            "url": format!("{api}/pulls/comments/{}/reactions", c.id),
            "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "hooray": 0,
            "confused": 0, "heart": 0, "rocket": 0, "eyes": 0
        },
        "start_line": line.and(c.start_line),
        "original_start_line": c.start_line,
        "start_side": c.start_line.map(|_| c.side.clone()),
        "line": line,
        "original_line": c.line,
        "side": c.side,
        "subject_type": "line",
    });
    // Only replies carry the field.
    if let Some(root) = c.in_reply_to {
        v["in_reply_to_id"] = json!(root);
    }
    v
}

pub(super) fn check_run_json(st: &FakeState, r: usize, c: &CheckRunData) -> Value {
    let repo = &st.repos[r];
    let api = format!("{}/repos/{}", st.api(), repo.full_name());
    let html = format!("{}/{}/runs/{}", st.root, repo.full_name(), c.id);
    json!({
        "id": c.id,
        "name": c.name,
        "node_id": format!("CR_kwDO{}", c.id),
        "head_sha": c.head_sha,
        "external_id": "",
        "url": format!("{api}/check-runs/{}", c.id),
        "html_url": html,
        "details_url": html,
        "status": c.status,
        "conclusion": c.conclusion,
        "started_at": c.started_at,
        "completed_at": c.completed_at,
        "output": {
            "title": c.title,
            "summary": c.summary,
            "text": c.text,
            "annotations_count": 0,
            "annotations_url": format!("{api}/check-runs/{}/annotations", c.id),
        },
        "check_suite": {"id": c.id + 1},
        "app": {
            "id": 15368,
            "slug": "github-actions",
            "node_id": "MDM6QXBwMTUzNjg=",
            "owner": user_by_login(st, "github"),
            "name": "GitHub Actions",
            "description": "Automate your workflow from idea to production",
            "external_url": "https://help.github.com/en/actions",
            "html_url": "https://github.com/apps/github-actions",
            "created_at": "2018-07-30T09:30:17Z",
            "updated_at": "2019-12-10T19:04:12Z",
            "permissions": {},
            "events": [],
        },
        "pull_requests": [],
    })
}

pub(super) fn status_json(st: &FakeState, s: &StatusData) -> Value {
    json!({
        "url": format!("{}/repos/statuses/{}", st.api(), s.sha),
        "avatar_url": format!("{}/avatars/u/1?v=4", st.root),
        "id": s.id,
        "node_id": format!("SC_kwDO{}", s.id),
        "state": s.state,
        "description": s.description,
        "target_url": s.target_url,
        "context": s.context,
        "created_at": s.created_at,
        "updated_at": s.created_at,
        "creator": user_by_login(st, &s.creator),
    })
}

/// `GET /commits/{ref}/status`: the latest status per context, combined.
pub(super) fn combined_status_json(st: &FakeState, r: usize, sha: &str) -> Value {
    let repo = &st.repos[r];
    let api = format!("{}/repos/{}", st.api(), repo.full_name());
    let latest = latest_statuses(&repo.statuses, sha);
    let state = combined_state(&latest);
    let mut repository = repo_json(st, r);
    if let Value::Object(fields) = &mut repository {
        // The combined status carries a minimal repository.
        fields.retain(|k, _| !k.ends_with("_count") && k != "permissions");
    }
    json!({
        "state": state,
        "statuses": latest.iter().map(|s| status_json(st, s)).collect::<Vec<_>>(),
        "sha": sha,
        "total_count": latest.len(),
        "repository": repository,
        "commit_url": format!("{api}/commits/{sha}"),
        "url": format!("{api}/commits/{sha}/status"),
    })
}

/// The latest status of each context for `sha`, newest first (as GitHub lists them).
pub(super) fn latest_statuses<'a>(statuses: &'a [StatusData], sha: &str) -> Vec<&'a StatusData> {
    let mut seen = std::collections::BTreeSet::new();
    statuses
        .iter()
        .rev()
        .filter(|s| s.sha == sha)
        .filter(|s| seen.insert(s.context.clone()))
        .collect()
}

/// `failure` if any failed or errored, `pending` if any is pending or there is none, else
/// `success`.
pub(super) fn combined_state(latest: &[&StatusData]) -> &'static str {
    if latest
        .iter()
        .any(|s| s.state == "failure" || s.state == "error")
    {
        "failure"
    } else if latest.is_empty() || latest.iter().any(|s| s.state == "pending") {
        "pending"
    } else {
        "success"
    }
}
