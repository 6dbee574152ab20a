//! The shepherd's GitHub calls (issue 15) against the stateful fake GitHub over a real bare
//! repository: pull snapshots with mergeability computed from the git data, reviews,
//! inline comments and replies, conversation comments, check runs and statuses,
//! permissions, merge and close, and conditional reads that cost `304`s.

use crate::support;

use std::time::Duration;

use polyphony::sources::github::checks::{self, CheckConclusion, StatusState};
use polyphony::sources::github::client::Repeat;
use polyphony::sources::github::collaborators::{self, Permission};
use polyphony::sources::github::feedback::{self, ReviewState, Side};
use polyphony::sources::github::pulls::{
    self, MergeMethod, MergeOutcome, MergeableState, PullState,
};
use polyphony::sources::github::{
    claim, FaultPolicy, GithubClient, GithubError, IssueRef, RepoSlug, ResolvedToken,
};
use serde_json::{json, Value};
use support::fake_github::{
    init_bare_repo, push_to_branch, FakeGithub, FaultKind, NewCheckRun, NewReviewComment,
};

const REPO: &str = "octo/widgets";
const BASE_FILE: &str = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
/// `BASE_FILE` with line 3 changed.
const CHANGED: &str = "a\nb\nC\nd\ne\nf\ng\nh\ni\nj\n";

struct World {
    fake: FakeGithub,
    client: GithubClient,
    clone_url: String,
    _dir: tempfile::TempDir,
}

/// `octo/widgets` on a real bare repository (default branch `trunk`, holding `src/lib.rs`).
async fn world() -> World {
    let fake = FakeGithub::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let clone_url = init_bare_repo(dir.path(), "trunk");
    fake.add_repo(REPO, &clone_url, "trunk");
    push_to_branch(&clone_url, "trunk", &[("src/lib.rs", BASE_FILE)], "base");
    let client = GithubClient::new(
        fake.base_url(),
        ResolvedToken::new("GITHUB_TOKEN", fake.token()),
        FaultPolicy {
            backoff: Duration::from_millis(20),
            request_timeout: Duration::from_secs(3),
            ..FaultPolicy::default()
        },
    )
    .expect("client");
    World {
        fake,
        client,
        clone_url,
        _dir: dir,
    }
}

fn slug() -> RepoSlug {
    RepoSlug::parse(REPO).expect("slug")
}

/// Push `branch` changing line 3 of `src/lib.rs` and open a pull request for it.
async fn open_pull(w: &World, branch: &str) -> IssueRef {
    open_pull_with(w, branch, CHANGED).await
}

/// Push `branch` with `src/lib.rs` as `content` and open a pull request for it.
async fn open_pull_with(w: &World, branch: &str, content: &str) -> IssueRef {
    push_to_branch(
        &w.clone_url,
        branch,
        &[("src/lib.rs", content)],
        "change line 3",
    );
    let created: Value = w
        .client
        .post_json(
            "opening a pull request",
            "/repos/octo/widgets/pulls",
            &json!({ "title": format!("Change {branch}"), "head": branch, "base": "trunk" }),
            Repeat::Never,
        )
        .await
        .expect("pull request");
    IssueRef {
        repo: slug(),
        number: created["number"].as_u64().expect("number"),
    }
}

async fn settled(w: &World, pull: &IssueRef) -> pulls::PullSnapshot {
    pulls::get_pull_settled(&w.client, pull, 3, Duration::from_millis(10))
        .await
        .expect("snapshot")
}

#[tokio::test]
async fn mergeability_is_computed_from_the_git_data_after_a_first_unknown_read() {
    let w = world().await;
    let pull = open_pull(&w, "feature").await;
    let first = pulls::get_pull(&w.client, &pull).await.expect("read");
    assert_eq!(first.state, PullState::Open);
    assert!(!first.merged);
    assert_eq!(
        first.mergeable, None,
        "GitHub computes it after the first read"
    );
    assert_eq!(first.mergeable_state, MergeableState::Unknown);
    assert_eq!(
        (first.head_ref.as_str(), first.base_ref.as_str()),
        ("feature", "trunk")
    );
    assert_eq!(first.head_sha, w.fake.pull(REPO, pull.number).head_sha);

    let second = pulls::get_pull(&w.client, &pull).await.expect("read");
    assert_eq!(second.mergeable, Some(true));
    assert_eq!(second.mergeable_state, MergeableState::Clean);

    // The base moves without touching the file: behind, still mergeable.
    let base = push_to_branch(&w.clone_url, "trunk", &[("README.md", "moved\n")], "docs");
    let moved = settled(&w, &pull).await;
    assert_eq!(moved.base_sha, base);
    assert_eq!(
        (moved.mergeable, moved.mergeable_state),
        (Some(true), MergeableState::Behind)
    );

    // The base changes the same line: conflicts.
    push_to_branch(
        &w.clone_url,
        "trunk",
        &[("src/lib.rs", &CHANGED.replace('C', "X"))],
        "clash",
    );
    let dirty = settled(&w, &pull).await;
    assert_eq!(
        (dirty.mergeable, dirty.mergeable_state),
        (Some(false), MergeableState::Dirty)
    );

    // A new commit on the head follows the branch.
    let head = push_to_branch(&w.clone_url, "feature", &[("new.txt", "x\n")], "more");
    assert_eq!(settled(&w, &pull).await.head_sha, head);
}

#[tokio::test]
async fn check_runs_and_statuses_are_read_with_their_output_and_make_the_pull_unstable() {
    let w = world().await;
    let pull = open_pull(&w, "feature").await;
    let head = settled(&w, &pull).await.head_sha;
    w.fake
        .set_check_run(REPO, &head, NewCheckRun::in_progress("build"));
    w.fake.set_check_run(
        REPO,
        &head,
        NewCheckRun::completed("build", "failure").output(
            "2 tests failed",
            "test_a and test_b failed",
            Some("assertion failed at src/lib.rs:3"),
        ),
    );
    w.fake
        .set_check_run(REPO, &head, NewCheckRun::completed("lint", "success"));
    w.fake
        .set_status(REPO, &head, "ci/legacy", "failure", Some("red"));

    let runs = checks::check_runs_for(&w.client, &slug(), &head)
        .await
        .expect("runs");
    assert_eq!(runs.len(), 2, "the latest run per name: {runs:?}");
    let build = runs.iter().find(|r| r.name == "build").expect("build");
    assert!(build.failed());
    assert_eq!(build.conclusion, Some(CheckConclusion::Failure));
    assert_eq!(build.title.as_deref(), Some("2 tests failed"));
    assert_eq!(build.summary.as_deref(), Some("test_a and test_b failed"));
    assert_eq!(
        build.text.as_deref(),
        Some("assertion failed at src/lib.rs:3")
    );
    assert_eq!(build.head_sha, head);
    assert!(!runs
        .iter()
        .find(|r| r.name == "lint")
        .expect("lint")
        .failed());

    let combined = checks::combined_status(&w.client, &slug(), &head)
        .await
        .expect("status");
    assert_eq!(combined.sha, head);
    assert_eq!(combined.state, StatusState::Failure);
    assert_eq!(combined.statuses.len(), 1);
    assert_eq!(combined.statuses[0].context, "ci/legacy");
    assert_eq!(combined.statuses[0].description.as_deref(), Some("red"));
    assert_eq!(
        settled(&w, &pull).await.mergeable_state,
        MergeableState::Unstable
    );

    // A re-run that passes, and a green status: clean again. A branch name is a ref too.
    w.fake
        .set_check_run(REPO, &head, NewCheckRun::completed("build", "success"));
    w.fake.set_status(REPO, &head, "ci/legacy", "success", None);
    let runs = checks::check_runs_for(&w.client, &slug(), "feature")
        .await
        .expect("runs");
    assert!(runs.iter().all(|r| !r.failed()), "{runs:?}");
    let combined = checks::combined_status(&w.client, &slug(), "feature")
        .await
        .expect("status");
    assert_eq!(combined.state, StatusState::Success);
    assert_eq!(
        settled(&w, &pull).await.mergeable_state,
        MergeableState::Clean
    );

    // No status at all is pending, as on GitHub.
    let other = push_to_branch(&w.clone_url, "other", &[("o.txt", "o\n")], "o");
    let none = checks::combined_status(&w.client, &slug(), &other)
        .await
        .expect("status");
    assert_eq!((none.state, none.statuses.len()), (StatusState::Pending, 0));
}

#[tokio::test]
async fn reviews_and_inline_comments_carry_the_line_and_the_diff_hunk() {
    let w = world().await;
    let pull = open_pull(&w, "feature").await;
    let head = settled(&w, &pull).await.head_sha;
    let review = w.fake.add_review_as(
        REPO,
        pull.number,
        "alice",
        "CHANGES_REQUESTED",
        "Please rename.",
        &[NewReviewComment::new("src/lib.rs", 3, "`C` should be `c2`")],
    );
    w.fake
        .add_review_as(REPO, pull.number, "bob", "APPROVED", "", &[]);

    let reviews = feedback::list_reviews(&w.client, &pull)
        .await
        .expect("reviews");
    assert_eq!(reviews.len(), 2);
    assert_eq!(reviews[0].id, review);
    assert_eq!(reviews[0].author.as_deref(), Some("alice"));
    assert_eq!(reviews[0].state, ReviewState::ChangesRequested);
    assert_eq!(reviews[0].body, "Please rename.");
    assert_eq!(reviews[0].commit_id.as_deref(), Some(head.as_str()));
    assert!(reviews[0].submitted_at.is_some());
    assert_eq!(reviews[1].state, ReviewState::Approved);

    let comments = feedback::list_review_comments(&w.client, &pull)
        .await
        .expect("comments");
    assert_eq!(comments.len(), 1);
    let c = &comments[0];
    assert_eq!(c.review_id, Some(review));
    assert_eq!(
        (c.path.as_str(), c.line, c.side),
        ("src/lib.rs", Some(3), Some(Side::Right))
    );
    assert_eq!(c.in_reply_to_id, None);
    assert_eq!(c.commit_id, head);
    assert_eq!(c.body, "`C` should be `c2`");
    assert_eq!(
        c.diff_hunk, "@@ -1,6 +1,6 @@\n a\n b\n-c\n+C",
        "cut at the line"
    );

    // A deleted line is commented on the base side.
    let left = w.fake.add_inline_comment_as(
        REPO,
        pull.number,
        "alice",
        NewReviewComment::new("src/lib.rs", 3, "why drop c?").left(),
    );
    let comments = feedback::list_review_comments(&w.client, &pull)
        .await
        .expect("comments");
    let c = comments
        .iter()
        .find(|c| c.id == left)
        .expect("left comment");
    assert_eq!(
        (c.side, c.diff_hunk.as_str()),
        (Some(Side::Left), "@@ -1,6 +1,6 @@\n a\n b\n-c")
    );

    // A line outside the diff is refused, as on GitHub.
    let refused = w
        .client
        .post_json::<Value>(
            "commenting outside the diff",
            &format!("/repos/{REPO}/pulls/{}/comments", pull.number),
            &json!({ "body": "x", "path": "src/lib.rs", "line": 9, "side": "RIGHT", "commit_id": head }),
            Repeat::Never,
        )
        .await;
    assert!(
        matches!(refused, Err(GithubError::Api { status: 422, .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_comment_whose_hunk_a_push_changed_is_outdated() {
    let w = world().await;
    let pull = open_pull(&w, "feature").await;
    let id = w
        .fake
        .add_review_comment_as(REPO, pull.number, "alice", "src/lib.rs", 3, "rename");
    let line_of = || async {
        let comments = feedback::list_review_comments(&w.client, &pull)
            .await
            .expect("comments");
        let c = comments.into_iter().find(|c| c.id == id).expect("comment");
        (c.line, c.original_line)
    };
    // A push elsewhere leaves the hunk as it was: the comment keeps its line.
    push_to_branch(
        &w.clone_url,
        "feature",
        &[("other.txt", "x\n")],
        "elsewhere",
    );
    assert_eq!(line_of().await, (Some(3), Some(3)));
    // A push that rewrites the commented line: outdated, the original line stays.
    push_to_branch(
        &w.clone_url,
        "feature",
        &[("src/lib.rs", &CHANGED.replace('C', "c2"))],
        "renamed",
    );
    assert_eq!(line_of().await, (None, Some(3)));
}

#[tokio::test]
async fn a_reply_lands_once_in_its_thread_even_when_its_answer_is_lost() {
    let w = world().await;
    let pull = open_pull(&w, "feature").await;
    let root = w
        .fake
        .add_review_comment_as(REPO, pull.number, "alice", "src/lib.rs", 3, "rename");
    let theirs = w
        .fake
        .reply_review_comment_as(REPO, pull.number, "alice", root, "also docs");
    let marker = "<!-- polyphony:reply:1 -->";

    // The first POST is applied, then answered 502: the client looks before trying again.
    w.fake.inject(
        Some("POST"),
        "/replies",
        1,
        FaultKind::StatusAfterApplying(502),
    );
    let (id, posted) = feedback::ensure_review_reply(
        &w.client,
        &pull,
        theirs,
        marker,
        &format!("Renamed in abc123.\n{marker}"),
    )
    .await
    .expect("reply");
    assert!(!posted, "the lost POST had landed; found, not posted again");
    let (again, posted_again) =
        feedback::ensure_review_reply(&w.client, &pull, root, marker, "again")
            .await
            .expect("reply");
    assert_eq!((again, posted_again), (id, false));

    let stored = w.fake.review_comments(REPO, pull.number);
    let ours: Vec<_> = stored
        .iter()
        .filter(|c| c.author == "polyphony-bot")
        .collect();
    assert_eq!(ours.len(), 1, "{stored:?}");
    assert_eq!(
        ours[0].in_reply_to,
        Some(root),
        "a reply to a reply joins the thread's root"
    );
    assert_eq!(ours[0].path, "src/lib.rs");

    let listed = feedback::list_review_comments(&w.client, &pull)
        .await
        .expect("list");
    let reply = listed.iter().find(|c| c.id == id).expect("reply listed");
    assert_eq!(reply.thread_id(), root);
    assert_eq!(reply.author.as_deref(), Some("polyphony-bot"));

    // The plain reply call posts every time.
    let plain = feedback::reply_to_review_comment(&w.client, &pull, root, "plain")
        .await
        .expect("plain");
    assert_eq!(plain.in_reply_to_id, Some(root));
}

#[tokio::test]
async fn conversation_comments_are_read_after_an_id_and_posted_as_the_bot() {
    let w = world().await;
    let pull = open_pull(&w, "feature").await;
    let first = w.fake.add_comment_as(REPO, pull.number, "alice", "hello");
    let second = w
        .fake
        .add_comment_as(REPO, pull.number, "alice", "/polyphony fix the typo");
    let all = feedback::list_issue_comments(&w.client, &pull, None)
        .await
        .expect("all");
    assert_eq!(
        all.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![first, second]
    );
    let newer = feedback::list_issue_comments(&w.client, &pull, Some(first))
        .await
        .expect("newer");
    assert_eq!(newer.len(), 1);
    assert_eq!(newer[0].body, "/polyphony fix the typo");
    assert_eq!(newer[0].author.as_deref(), Some("alice"));

    let ours = feedback::comment_on_pull(&w.client, &pull, "Handing over.")
        .await
        .expect("post");
    assert_eq!(ours.author.as_deref(), Some("polyphony-bot"));
    assert!(ours.id > second);
    assert_eq!(
        w.fake
            .comments(REPO, pull.number)
            .last()
            .map(String::as_str),
        Some("Handing over.")
    );
}

#[tokio::test]
async fn permissions_are_read_by_level_and_an_unknown_user_is_not_found() {
    let w = world().await;
    w.fake.set_permission(REPO, "alice", "write");
    w.fake.set_permission(REPO, "mia", "maintain");
    w.fake.set_permission(REPO, "tom", "triage");
    w.fake.add_user("eve");
    let repo = slug();
    let of = |login: &'static str| collaborators::permission_of(&w.client, &repo, login);
    assert_eq!(of("alice").await.expect("alice"), Permission::Write);
    assert_eq!(of("mia").await.expect("mia"), Permission::Maintain);
    assert_eq!(of("tom").await.expect("tom"), Permission::Triage);
    assert_eq!(of("eve").await.expect("eve"), Permission::None);
    assert_eq!(of("octo").await.expect("owner"), Permission::Admin);
    assert!(matches!(
        of("nobody").await,
        Err(GithubError::NotFound { .. })
    ));
    assert!(of("mia").await.expect("mia").at_least(Permission::Write));
    assert!(!of("tom").await.expect("tom").at_least(Permission::Write));
}

#[tokio::test]
async fn unchanged_reads_cost_304s_that_do_not_count_against_the_rate_limit() {
    let w = world().await;
    let pull = open_pull(&w, "feature").await;
    let head = settled(&w, &pull).await.head_sha;
    w.fake
        .add_review_comment_as(REPO, pull.number, "alice", "src/lib.rs", 3, "rename");
    w.fake
        .set_check_run(REPO, &head, NewCheckRun::completed("build", "success"));
    w.fake.set_permission(REPO, "alice", "write");
    let poll = || async {
        (
            pulls::get_pull(&w.client, &pull).await.expect("pull"),
            feedback::list_reviews(&w.client, &pull)
                .await
                .expect("reviews"),
            feedback::list_review_comments(&w.client, &pull)
                .await
                .expect("comments"),
            feedback::list_issue_comments(&w.client, &pull, None)
                .await
                .expect("issue comments"),
            checks::check_runs_for(&w.client, &slug(), &head)
                .await
                .expect("runs"),
            checks::combined_status(&w.client, &slug(), &head)
                .await
                .expect("status"),
            collaborators::permission_of(&w.client, &slug(), "alice")
                .await
                .expect("permission"),
        )
    };
    let first = poll().await;
    w.fake.clear_requests();
    let used = w.fake.rate_limit_used();
    let second = poll().await;
    assert_eq!(first, second, "a 304 answers what the 200 said");
    let seen = w.fake.requests();
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert!(seen.iter().all(|r| r.status == 304), "{seen:?}");
    assert_eq!(w.fake.rate_limit_used(), used, "304s are free");

    // Something new: that list is read again (200), the rest stays 304.
    w.fake.add_review_as(
        REPO,
        pull.number,
        "alice",
        "CHANGES_REQUESTED",
        "one more",
        &[],
    );
    w.fake.clear_requests();
    let third = poll().await;
    assert_eq!(third.1.len(), second.1.len() + 1);
    let fresh: Vec<_> = w
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.status == 200)
        .collect();
    assert!(
        fresh.iter().any(|r| r.path.contains("/reviews")),
        "{fresh:?}"
    );
    assert_eq!(w.fake.rate_limit_used(), used + fresh.len() as u64);
}

#[tokio::test]
async fn merge_makes_a_real_merge_commit_and_close_closes() {
    let w = world().await;
    let pull = open_pull(&w, "feature").await;
    // Changes the same line from the same base: conflicts once `feature` is merged.
    let clash = open_pull_with(&w, "clash", &CHANGED.replace('C', "Z")).await;
    let head = settled(&w, &pull).await.head_sha;

    let moved = pulls::merge_pull(
        &w.client,
        &pull,
        MergeMethod::Merge,
        Some("0".repeat(40).as_str()),
    )
    .await
    .expect("merge");
    assert!(matches!(moved, MergeOutcome::HeadMoved { .. }), "{moved:?}");

    let merged = pulls::merge_pull(&w.client, &pull, MergeMethod::Merge, Some(&head))
        .await
        .expect("merge");
    let MergeOutcome::Merged { sha } = merged else {
        panic!("not merged: {merged:?}");
    };
    let parents = std::process::Command::new("git")
        .args(["--git-dir", w.clone_url.trim_start_matches("file://")])
        .args(["rev-list", "--parents", "-n1", "refs/heads/trunk"])
        .output()
        .expect("git");
    let parents = String::from_utf8_lossy(&parents.stdout).to_string();
    assert!(
        parents.starts_with(&sha),
        "trunk is the merge commit: {parents}"
    );
    assert!(
        parents.trim_end().ends_with(&head),
        "the head is its second parent: {parents}"
    );
    let after = pulls::get_pull(&w.client, &pull).await.expect("read");
    assert!(after.merged);
    assert_eq!(after.state, PullState::Closed);
    assert_eq!(after.merge_commit_sha.as_deref(), Some(sha.as_str()));
    let again = pulls::merge_pull(&w.client, &pull, MergeMethod::Merge, None)
        .await
        .expect("merge");
    assert_eq!(
        again,
        MergeOutcome::Merged { sha: sha.clone() },
        "merged already"
    );

    // A conflicting pull request is not mergeable; closing it closes it, once or twice.
    let refused = pulls::merge_pull(&w.client, &clash, MergeMethod::Squash, None)
        .await
        .expect("merge");
    assert!(
        matches!(refused, MergeOutcome::NotMergeable { .. }),
        "{refused:?}"
    );
    let closed = pulls::close_pull(&w.client, &clash).await.expect("close");
    assert_eq!((closed.state, closed.merged), (PullState::Closed, false));
    pulls::close_pull(&w.client, &clash)
        .await
        .expect("close again");
    assert_eq!(w.fake.pull(REPO, clash.number).state, "closed");
}

#[tokio::test]
async fn labels_on_the_pull_request_are_its_issue_labels() {
    let w = world().await;
    let pull = open_pull(&w, "feature").await;
    claim::add_labels(&w.client, &pull, &["polyphony-hold"])
        .await
        .expect("label");
    let snapshot = pulls::get_pull(&w.client, &pull).await.expect("read");
    assert!(
        snapshot.has_label("polyphony-hold"),
        "{:?}",
        snapshot.labels
    );
    claim::remove_label(&w.client, &pull, "polyphony-hold")
        .await
        .expect("unlabel");
    assert!(!pulls::get_pull(&w.client, &pull)
        .await
        .expect("read")
        .has_label("polyphony-hold"));
    assert!(w.fake.issue_labels(REPO, pull.number).is_empty());
}

#[tokio::test]
async fn a_missing_pull_request_is_not_found() {
    let w = world().await;
    let missing = IssueRef {
        repo: slug(),
        number: 99,
    };
    assert!(matches!(
        pulls::get_pull(&w.client, &missing).await,
        Err(GithubError::NotFound { .. })
    ));
    assert!(matches!(
        feedback::list_reviews(&w.client, &missing).await,
        Err(GithubError::NotFound { .. })
    ));
}

#[tokio::test]
async fn a_rate_limit_past_the_wait_is_typed() {
    let w = world().await;
    let pull = open_pull(&w, "feature").await;
    w.fake.inject(
        Some("GET"),
        "/pulls/",
        1,
        FaultKind::RateLimit {
            status: 403,
            reset_in_secs: 3600,
            retry_after: None,
        },
    );
    let limited = pulls::get_pull(&w.client, &pull).await;
    assert!(
        matches!(limited, Err(GithubError::RateLimited { .. })),
        "{limited:?}"
    );
}
