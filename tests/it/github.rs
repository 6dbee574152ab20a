//! The GitHub source against the stateful fake GitHub (tests/support/fake_github.rs):
//! intake over pages, claims, landing, blocked reports, faults and trust.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use polyphony::config::model::GithubConfig;
use polyphony::domain::{CheckEvidence, Risk, SourceKind, Task, TaskState, TaskType, TokenUsage};
use polyphony::sources::github::{
    FaultPolicy, GithubClient, GithubError, GithubSettings, GithubSource, ResolvedToken,
};
use polyphony::sources::{
    Blocked, BlockedAttempt, ClaimError, ClaimInfo, Landed, Outcome, Source, SourceError,
};
use support::fake_github::{init_bare_repo, FakeGithub, FaultKind, NewIssue};
use support::git::git;

const REPO: &str = "octo/widgets";

fn fast_policy() -> FaultPolicy {
    FaultPolicy {
        max_rate_limit_wait: Duration::from_secs(10),
        secondary_limit_wait: Duration::from_secs(2),
        max_rate_limit_retries: 3,
        max_server_retries: 3,
        backoff: Duration::from_millis(20),
        request_timeout: Duration::from_secs(3),
    }
}

fn client_for(fake: &FakeGithub) -> GithubClient {
    GithubClient::new(
        fake.base_url(),
        ResolvedToken::new("GITHUB_TOKEN", fake.token()),
        fast_policy(),
    )
    .expect("client")
}

fn source_for(fake: &FakeGithub, repos: &[&str], trusted_only: bool) -> GithubSource {
    let config = GithubConfig {
        repos: repos.iter().map(|r| r.to_string()).collect(),
        trusted_only,
        ..GithubConfig::default()
    };
    let settings = GithubSettings::from_config(&config, &[]).expect("settings");
    GithubSource::new(client_for(fake), settings)
}

/// A fake with `octo/widgets` backed by a real bare repository (default branch `trunk`).
struct World {
    fake: FakeGithub,
    dir: tempfile::TempDir,
    clone_url: String,
}

async fn world() -> World {
    world_with_prefix("").await
}

async fn world_with_prefix(prefix: &str) -> World {
    let fake = FakeGithub::start_with_prefix(prefix).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let clone_url = init_bare_repo(dir.path(), "trunk");
    fake.add_repo(REPO, &clone_url, "trunk");
    World {
        fake,
        dir,
        clone_url,
    }
}

/// Push a one-commit branch to the world's bare repository, as the workspace would.
fn push_branch(w: &World, branch: &str) {
    let work = w
        .dir
        .path()
        .join(format!("push-{}", branch.replace('/', "-")));
    git(
        w.dir.path(),
        &["clone", "-q", &w.clone_url, work.to_str().expect("utf8")],
    );
    git(&work, &["checkout", "-q", "-b", branch]);
    std::fs::write(work.join("fix.txt"), "fixed\n").expect("write");
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "fix"]);
    git(&work, &["push", "-q", "origin", branch]);
}

fn evidence() -> Vec<CheckEvidence> {
    vec![
        CheckEvidence {
            name: "test".into(),
            command: "make test".into(),
            exit_code: Some(0),
            duration_ms: 4_200,
            passed: true,
            output_tail: "ok".into(),
        },
        CheckEvidence {
            name: "lint".into(),
            command: "make lint".into(),
            exit_code: Some(0),
            duration_ms: 900,
            passed: true,
            output_tail: String::new(),
        },
    ]
}

fn landed(branch: &str) -> Landed {
    Landed {
        branch: branch.into(),
        base_ref: None,
        title: String::new(),
        summary: "Made the widget spin the right way.".into(),
        agent: "claude".into(),
        attempt: 1,
        evidence: evidence(),
        turns: 9,
        tokens: TokenUsage {
            input: 12_000,
            output: 3_000,
            cached_input: 0,
        },
        cost_usd: Some(0.31),
    }
}

async fn poll_one(source: &GithubSource, number: u64) -> Task {
    let tasks = source.poll().await.expect("poll");
    let id = format!("{REPO}#{number}");
    tasks
        .into_iter()
        .find(|t| t.id == id)
        .unwrap_or_else(|| panic!("{id} not offered"))
}

fn info(attempt: u32) -> ClaimInfo {
    ClaimInfo {
        agent: "claude".into(),
        attempt,
        claimant: "home-a".into(),
    }
}

fn count_containing(bodies: &[String], needle: &str) -> usize {
    bodies.iter().filter(|b| b.contains(needle)).count()
}

#[tokio::test]
async fn poll_takes_exactly_the_labelled_issues_from_every_page() {
    // The Enterprise-style prefix also checks that octocrab keeps a base path and that the
    // `/repositories/{id}/issues` next links are followed under it.
    let w = world_with_prefix("/api/v3").await;
    let mut expected = BTreeSet::new();
    let mut i = 0u64;
    while expected.len() < 250 {
        i += 1;
        let title = format!("issue {i}");
        let new = match i % 10 {
            // PRs carrying the label: the issues API lists them too.
            0 => NewIssue::new(&title)
                .labels(&["agent-ready"])
                .pull_request(&format!("feature-{i}")),
            // Unlabelled, or labelled with something else.
            1 => NewIssue::new(&title),
            2 => NewIssue::new(&title).labels(&["bug"]),
            // Locked issues are skipped.
            3 if i < 50 => NewIssue::new(&title).labels(&["agent-ready"]).locked(),
            5 => NewIssue::new(&title).labels(&["bug", "agent-ready", "risk:high"]),
            _ => NewIssue::new(&title).labels(&["agent-ready"]),
        };
        let is_task = new.labels.iter().any(|l| l == "agent-ready")
            && new.pull_request_head.is_none()
            && !new.locked;
        let number = w.fake.add_issue(REPO, new);
        if is_task {
            expected.insert(format!("{REPO}#{number}"));
        }
    }
    // A closed labelled issue is not offered either.
    let closed = w
        .fake
        .add_issue(REPO, NewIssue::new("closed").labels(&["agent-ready"]));
    w.fake.close_issue(REPO, closed);
    assert_eq!(expected.len(), 250);

    let source = source_for(&w.fake, &[REPO], false);
    let tasks = source.poll().await.expect("poll");
    let ids: Vec<String> = tasks.iter().map(|t| t.id.clone()).collect();
    let unique: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(ids.len(), unique.len(), "duplicate tasks");
    assert_eq!(unique, expected);

    // 250 issues + the labelled PRs and locked issues: three pages of 100.
    let pages: Vec<String> = w
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.contains("/issues?"))
        .map(|r| r.path)
        .collect();
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert!(
        pages[0].starts_with("/repos/octo/widgets/issues?"),
        "{pages:?}"
    );
    assert!(pages[1].starts_with("/repositories/") && pages[1].contains("page=2"));
    assert!(pages[2].starts_with("/repositories/") && pages[2].contains("page=3"));
    assert!(pages[0].contains("labels=agent-ready") && pages[0].contains("per_page=100"));

    // Task fields come from the issue and the repository API.
    let t = tasks
        .iter()
        .find(|t| t.id == format!("{REPO}#5"))
        .expect("#5");
    assert_eq!(t.source, SourceKind::Github);
    assert_eq!(t.source_ref, "octo/widgets#5");
    assert_eq!(t.state, TaskState::Discovered);
    assert_eq!(t.title, "issue 5");
    assert_eq!(t.body, "Body of issue 5.");
    assert_eq!(t.repo, w.clone_url);
    assert_eq!(t.base_ref.as_deref(), Some("trunk"));
    assert_eq!(t.task_type, TaskType::Bugfix);
    assert_eq!(t.risk, Risk::High);
    assert_eq!(t.labels, vec!["bug", "agent-ready", "risk:high"]);
    assert_eq!(t.metadata["number"], "5");
    assert_eq!(t.metadata["author"], "octocat");
    assert!(t.metadata["html_url"].ends_with("/octo/widgets/issues/5"));
    assert!(t.metadata["node_id"].starts_with("I_"));

    // Ids are stable across polls: the store dedupes on them.
    let again: BTreeSet<String> = source
        .poll()
        .await
        .expect("second poll")
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(again, expected);
}

#[tokio::test]
async fn locked_issues_are_skipped() {
    let w = world().await;
    let locked = w.fake.add_issue(
        REPO,
        NewIssue::new("locked").labels(&["agent-ready"]).locked(),
    );
    let open = w
        .fake
        .add_issue(REPO, NewIssue::new("open").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);
    let ids: Vec<String> = source
        .poll()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(ids, vec![format!("{REPO}#{open}")]);
    assert!(!ids.contains(&format!("{REPO}#{locked}")));
}

#[tokio::test]
async fn claim_swaps_labels_comments_once_and_freezes_the_text() {
    let w = world().await;
    let n = w.fake.add_issue(
        REPO,
        NewIssue::new("Spin fix")
            .body("It spins backwards.")
            .labels(&["agent-ready", "bug"]),
    );
    let source: Arc<dyn Source> = Arc::new(source_for(&w.fake, &[REPO], false));
    let task = source.poll().await.unwrap().remove(0);

    let claimed = source.claim(&task, &info(1)).await.expect("claim");
    assert_eq!(claimed.title, "Spin fix");
    assert_eq!(claimed.body, "It spins backwards.");
    assert!(claimed.comment_id.is_some());
    assert_eq!(w.fake.issue_labels(REPO, n), vec!["bug", "agent-claimed"]);
    let comments = w.fake.comments(REPO, n);
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0].contains("<!-- polyphony:claim task=octo/widgets#1 attempt=1 by=home-a -->")
    );
    assert!(comments[0].contains("attempt 1 by agent `claude`"));

    // Later edits do not reach what was frozen; claiming the same attempt again (a restart)
    // posts nothing and changes no label.
    w.fake.edit_issue(
        REPO,
        n,
        Some("Rewritten"),
        Some("Do something else entirely."),
    );
    let again = source.claim(&task, &info(1)).await.expect("claim again");
    assert_eq!(again.comment_id, claimed.comment_id);
    assert_eq!(claimed.title, "Spin fix");
    assert_eq!(w.fake.comments(REPO, n).len(), 1);
    assert_eq!(w.fake.issue_labels(REPO, n), vec!["bug", "agent-claimed"]);
    assert_eq!(w.fake.count_requests("POST", "/comments"), 1);

    // A retry (attempt 2) of a task we hold is accepted without the ready label.
    source.claim(&task, &info(2)).await.expect("attempt 2");
    let comments = w.fake.comments(REPO, n);
    assert_eq!(comments.len(), 2);
    assert!(comments[1].contains("attempt=2 by=home-a -->"));
}

/// Regression (e2e `kill_9_before_the_container_exists…`): a claim that dies after the
/// label swap but before its comment left an issue labelled claimed with no owner, which
/// the retry then refused as "no longer offered". The comment now goes first, so a claim
/// cut short anywhere can be completed by the retry.
#[tokio::test]
async fn a_claim_cut_short_before_its_comment_can_be_retried() {
    let w = world().await;
    let n = w
        .fake
        .add_issue(REPO, NewIssue::new("Cut short").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);
    let task = poll_one(&source, n).await;
    w.fake.inject(
        Some("POST"),
        &format!("/issues/{n}/comments"),
        1,
        FaultKind::Status(422),
    );
    assert!(source.claim(&task, &info(1)).await.is_err());
    assert!(w.fake.comments(REPO, n).is_empty());
    assert_eq!(
        w.fake.issue_labels(REPO, n),
        vec!["agent-ready"],
        "labels change only once the claim comment exists"
    );
    source
        .claim(&task, &info(1))
        .await
        .expect("the retry claims");
    assert_eq!(w.fake.comments(REPO, n).len(), 1);
    assert_eq!(w.fake.issue_labels(REPO, n), vec!["agent-claimed"]);
}

#[tokio::test]
async fn a_second_instance_cannot_claim_an_issue_another_holds() {
    let w = world().await;
    let n = w
        .fake
        .add_issue(REPO, NewIssue::new("Shared").labels(&["agent-ready"]));
    let a = source_for(&w.fake, &[REPO], false);
    let b = source_for(&w.fake, &[REPO], false);
    // Both instances saw the issue offered before either claimed it.
    let task_a = a.poll().await.unwrap().remove(0);
    let task_b = b.poll().await.unwrap().remove(0);
    a.claim(&task_a, &info(1)).await.expect("first claim");
    let other = ClaimInfo {
        claimant: "home-b".into(),
        ..info(1)
    };
    match b.claim(&task_b, &other).await {
        Err(ClaimError::NoLongerReady { reason, .. }) => {
            assert!(reason.contains("another Polyphony instance"), "{reason}")
        }
        other => panic!("expected NoLongerReady, got {other:?}"),
    }
    // The holder's retries are still accepted.
    a.claim(&task_a, &info(2))
        .await
        .expect("attempt 2 by the holder");
    assert_eq!(w.fake.comments(REPO, n).len(), 2);
}

#[tokio::test]
async fn claim_refuses_an_issue_no_longer_offered() {
    let w = world().await;
    let unlabelled = w
        .fake
        .add_issue(REPO, NewIssue::new("a").labels(&["agent-ready"]));
    let closed = w
        .fake
        .add_issue(REPO, NewIssue::new("b").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);
    let tasks = source.poll().await.unwrap();
    w.fake
        .unlabel_issue(REPO, unlabelled, "agent-ready", "octocat");
    w.fake.close_issue(REPO, closed);
    for (number, reason) in [(unlabelled, "no longer carries"), (closed, "was closed")] {
        let task = tasks
            .iter()
            .find(|t| t.id == format!("{REPO}#{number}"))
            .unwrap();
        match source.claim(task, &info(1)).await {
            Err(ClaimError::NoLongerReady {
                task_id,
                reason: why,
            }) => {
                assert_eq!(task_id, task.id);
                assert!(why.contains(reason), "{why}");
            }
            other => panic!("expected NoLongerReady, got {other:?}"),
        }
        assert!(w.fake.comments(REPO, number).is_empty());
    }
    assert_eq!(w.fake.count_requests("POST", ""), 0);
}

#[tokio::test]
async fn landing_twice_opens_one_pull_request_and_one_comment() {
    let w = world().await;
    let n = w
        .fake
        .add_issue(REPO, NewIssue::new("Spin fix").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);
    let task = poll_one(&source, n).await;
    source.claim(&task, &info(1)).await.unwrap();
    let branch = "polyphony/octo-widgets-1-a1";
    push_branch(&w, branch);

    let outcome = Outcome::Landed(landed(branch));
    let first = source.report(&task, &outcome).await.expect("land");
    let second = source.report(&task, &outcome).await.expect("land again");
    assert!(first.created);
    assert!(!second.created);
    assert_eq!(first.pr_url, second.pr_url);
    assert_eq!(first.pr_number, second.pr_number);
    assert_eq!(first.comment_ids, second.comment_ids);

    let pulls = w.fake.pulls(REPO);
    assert_eq!(pulls.len(), 1);
    let pr = &pulls[0];
    assert_eq!(Some(pr.number), first.pr_number);
    assert_eq!(pr.head, branch);
    assert_eq!(pr.base, "trunk");
    assert_eq!(pr.title, "Spin fix");
    for part in [
        "Made the widget spin the right way.",
        "| test | `make test` | 0 | 4.2 s | ✅ passed |",
        "| claude | 1 | 9 | 15000 (12000 / 3000) | $0.31 |",
        "Closes #1",
    ] {
        assert!(pr.body.contains(part), "missing {part:?} in\n{}", pr.body);
    }
    let pr_url = first.pr_url.expect("pr url");
    assert!(
        pr_url.ends_with(&format!("/octo/widgets/pull/{}", pr.number)),
        "{pr_url}"
    );

    let comments = w.fake.comments(REPO, n);
    assert_eq!(count_containing(&comments, "polyphony:landed"), 1);
    assert_eq!(count_containing(&comments, &pr_url), 1);
    assert_eq!(w.fake.issue_labels(REPO, n), vec!["agent-landed"]);
    assert_eq!(w.fake.count_requests("POST", "/pulls"), 1);
}

#[tokio::test]
async fn lost_answers_to_posts_are_checked_not_blindly_repeated() {
    let w = world().await;
    let n = w
        .fake
        .add_issue(REPO, NewIssue::new("Spin fix").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);
    let task = poll_one(&source, n).await;
    let branch = "polyphony/octo-widgets-1-a1";
    push_branch(&w, branch);

    // The PR and the comment are created, but the answers are lost (502): the source looks
    // again and finds them instead of creating duplicates.
    w.fake.inject(
        Some("POST"),
        "/pulls",
        1,
        FaultKind::StatusAfterApplying(502),
    );
    w.fake.inject(
        Some("POST"),
        "/comments",
        1,
        FaultKind::StatusAfterApplying(502),
    );
    let report = source
        .report(&task, &Outcome::Landed(landed(branch)))
        .await
        .expect("land");
    assert_eq!(w.fake.pulls(REPO).len(), 1);
    assert_eq!(report.pr_number, Some(w.fake.pulls(REPO)[0].number));
    assert_eq!(
        count_containing(&w.fake.comments(REPO, n), "polyphony:landed"),
        1
    );
    assert_eq!(w.fake.count_requests("POST", "/pulls"), 1);
    assert_eq!(w.fake.count_requests("POST", "/comments"), 1);

    // A 500 that did nothing: the source lists the comments, sees none, and posts once more.
    let m = w
        .fake
        .add_issue(REPO, NewIssue::new("second").labels(&["agent-ready"]));
    let task = poll_one(&source, m).await;
    w.fake.clear_requests();
    w.fake.inject(
        Some("POST"),
        &format!("/issues/{m}/comments"),
        1,
        FaultKind::Status(500),
    );
    source.claim(&task, &info(1)).await.expect("claim");
    assert_eq!(w.fake.comments(REPO, m).len(), 1);
    let sequence: Vec<(String, u16)> = w
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.contains(&format!("/issues/{m}/comments")))
        .map(|r| (r.method, r.status))
        .collect();
    assert_eq!(
        sequence,
        vec![
            ("GET".to_string(), 200),
            ("POST".to_string(), 500),
            ("GET".to_string(), 200),
            ("POST".to_string(), 201),
            // The first claim of an issue reads the comments once more to confirm that no
            // other instance commented first.
            ("GET".to_string(), 200)
        ]
    );
}

#[tokio::test]
async fn blocked_report_labels_and_comments_once() {
    let w = world().await;
    let n = w
        .fake
        .add_issue(REPO, NewIssue::new("hard").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);
    let task = poll_one(&source, n).await;
    source.claim(&task, &info(1)).await.unwrap();
    let blocked = Outcome::Blocked(Blocked {
        attempts: vec![
            BlockedAttempt {
                attempt: 2,
                agent: "codex".into(),
                reason: "verification failed: test exited 1".into(),
            },
            BlockedAttempt {
                attempt: 3,
                agent: "claude".into(),
                reason: "timeout after 30m".into(),
            },
        ],
    });
    let first = source.report(&task, &blocked).await.expect("block");
    let second = source.report(&task, &blocked).await.expect("block again");
    assert!(first.created && !second.created);
    assert_eq!(first.comment_ids, second.comment_ids);
    let comments = w.fake.comments(REPO, n);
    assert_eq!(count_containing(&comments, "polyphony:blocked"), 1);
    let text = comments
        .iter()
        .find(|c| c.contains("polyphony:blocked"))
        .unwrap();
    assert!(
        text.contains("| 2 | codex | `verification failed: test exited 1` |"),
        "{text}"
    );
    assert!(
        text.contains("| 3 | claude | `timeout after 30m` |"),
        "{text}"
    );
    assert_eq!(w.fake.issue_labels(REPO, n), vec!["agent-blocked"]);
}

#[tokio::test]
async fn rate_limits_wait_for_the_reset_and_succeed() {
    let w = world().await;
    w.fake
        .add_issue(REPO, NewIssue::new("a").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);

    for kind in [
        FaultKind::RateLimit {
            status: 429,
            reset_in_secs: 1,
            retry_after: Some(1),
        },
        // Primary limit as GitHub sends it: 403, remaining 0, reset; no retry-after.
        FaultKind::RateLimit {
            status: 403,
            reset_in_secs: 0,
            retry_after: None,
        },
        FaultKind::SecondaryRateLimit { retry_after: 1 },
    ] {
        w.fake.clear_requests();
        w.fake.inject(Some("GET"), "/issues?", 1, kind.clone());
        let started = Instant::now();
        let tasks = source
            .poll()
            .await
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let waited = started.elapsed();
        assert_eq!(tasks.len(), 1, "{kind:?}");
        assert!(
            waited >= Duration::from_millis(900),
            "{kind:?} waited only {waited:?}"
        );
        assert!(
            waited < Duration::from_secs(5),
            "{kind:?} waited {waited:?}"
        );
        let statuses: Vec<u16> = w
            .fake
            .requests()
            .into_iter()
            .filter(|r| r.path.contains("/issues?"))
            .map(|r| r.status)
            .collect();
        assert_eq!(statuses.len(), 2, "{kind:?}");
        assert!(
            matches!(statuses[0], 403 | 429) && statuses[1] == 200,
            "{statuses:?}"
        );
    }

    // A reset further away than the client waits: a typed error at once, not a hang.
    w.fake.inject(
        Some("GET"),
        "/issues?",
        1,
        FaultKind::RateLimit {
            status: 403,
            reset_in_secs: 3600,
            retry_after: None,
        },
    );
    let started = Instant::now();
    let polled = source.poll().await;
    match polled.as_ref().map_err(|e| e.tracker::<GithubError>()) {
        Err(Some(GithubError::RateLimited { wait_secs, .. })) => {
            assert!(*wait_secs > 3000, "{wait_secs}")
        }
        _ => panic!("expected RateLimited, got {polled:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn server_errors_and_slow_answers_on_gets_are_retried() {
    let w = world().await;
    w.fake
        .add_issue(REPO, NewIssue::new("a").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);

    w.fake.inject(
        Some("GET"),
        "/repos/octo/widgets",
        2,
        FaultKind::Status(500),
    );
    w.fake
        .inject(Some("GET"), "/issues?", 1, FaultKind::Status(502));
    assert_eq!(source.poll().await.expect("poll after 5xx").len(), 1);
    let failed = w.fake.requests().iter().filter(|r| r.status >= 500).count();
    assert_eq!(failed, 3);

    // Slow but within the timeout: fine. Slower than the timeout: the GET is sent again.
    w.fake.inject(
        Some("GET"),
        "/issues?",
        1,
        FaultKind::Delay(Duration::from_millis(300)),
    );
    assert_eq!(source.poll().await.expect("slow poll").len(), 1);
    w.fake.inject(
        Some("GET"),
        "/issues?",
        1,
        FaultKind::Delay(Duration::from_secs(4)),
    );
    let started = Instant::now();
    assert_eq!(source.poll().await.expect("timed-out poll").len(), 1);
    assert!(started.elapsed() >= Duration::from_secs(3));

    // Persistent 5xx: bounded, then a typed error.
    w.fake.inject(
        Some("GET"),
        "/repos/octo/widgets",
        10,
        FaultKind::Status(503),
    );
    let polled = source.poll().await;
    match polled.as_ref().map_err(|e| e.tracker::<GithubError>()) {
        Err(Some(GithubError::Server {
            status: 503,
            attempts,
            ..
        })) => {
            assert_eq!(*attempts, 4)
        }
        _ => panic!("expected Server, got {polled:?}"),
    }
}

#[tokio::test]
async fn a_wrong_token_is_a_clear_config_error() {
    let w = world().await;
    w.fake.set_token("the-real-one");
    let client = GithubClient::from_env(
        Some("WORK_GH_TOKEN"),
        |var| match var {
            "GITHUB_API_URL" => Some(w.fake.base_url().to_string()),
            "WORK_GH_TOKEN" => Some("ghp_wrong_and_secret".to_string()),
            _ => None,
        },
        fast_policy(),
    )
    .expect("client");
    assert_eq!(client.token_var(), "WORK_GH_TOKEN");
    let settings = GithubSettings::from_config(
        &GithubConfig {
            repos: vec![REPO.into()],
            ..GithubConfig::default()
        },
        &[],
    )
    .unwrap();
    let source = GithubSource::new(client, settings);
    let err = source.poll().await.expect_err("401");
    assert!(
        matches!(
            err.tracker::<GithubError>(),
            Some(GithubError::Unauthorized { .. })
        ),
        "{err:?}"
    );
    assert!(err.is_config_error());
    let text = err.to_string();
    assert!(
        text.contains("WORK_GH_TOKEN") && text.contains("401"),
        "{text}"
    );
    assert!(
        !text.contains("ghp_wrong_and_secret"),
        "token leaked: {text}"
    );
    assert!(!format!("{err:?}").contains("ghp_wrong_and_secret"));
    // A 401 is not retried.
    assert_eq!(w.fake.requests().len(), 1);
}

#[tokio::test]
async fn an_unknown_repository_is_a_clear_config_error() {
    let w = world().await;
    let source = source_for(&w.fake, &["octo/missing"], false);
    let err = source.poll().await.expect_err("404");
    assert!(
        matches!(
            err.tracker::<GithubError>(),
            Some(GithubError::NotFound { .. })
        ),
        "{err:?}"
    );
    assert!(err.is_config_error());
    assert!(err.to_string().contains("octo/missing"), "{err}");

    // One bad repository among good ones is still reported (config errors always are).
    w.fake
        .add_issue(REPO, NewIssue::new("a").labels(&["agent-ready"]));
    let mixed = source_for(&w.fake, &[REPO, "octo/missing"], false);
    let (tasks, errors) = mixed.poll_all().await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(errors.len(), 1);
    assert!(mixed.poll().await.is_err());
}

#[tokio::test]
async fn trusted_only_takes_issues_labelled_by_writers() {
    let w = world().await;
    for (login, permission) in [
        ("reader", "read"),
        ("writer", "write"),
        ("maintainer", "maintain"),
        ("triager", "triage"),
    ] {
        w.fake.set_permission(REPO, login, permission);
    }
    w.fake.add_user("stranger");
    let by = |login: &str| NewIssue::new(&format!("by {login}")).author("stranger");
    let by_reader = w.fake.add_issue(
        REPO,
        by("reader").labels(&["agent-ready"]).labelled_by("reader"),
    );
    let by_writer = w.fake.add_issue(
        REPO,
        by("writer").labels(&["agent-ready"]).labelled_by("writer"),
    );
    let by_maintainer = w.fake.add_issue(
        REPO,
        by("maintainer")
            .labels(&["agent-ready"])
            .labelled_by("maintainer"),
    );
    let by_triager = w.fake.add_issue(
        REPO,
        by("triager")
            .labels(&["agent-ready"])
            .labelled_by("triager"),
    );
    let by_stranger = w
        .fake
        .add_issue(REPO, by("stranger").labels(&["agent-ready"]));
    let by_owner = w.fake.add_issue(
        REPO,
        by("owner").labels(&["agent-ready"]).labelled_by("octo"),
    );
    // Labelled by a writer, then removed and re-applied by a reader: the last one counts.
    let relabelled = w.fake.add_issue(
        REPO,
        by("relabel").labels(&["agent-ready"]).labelled_by("writer"),
    );
    w.fake
        .unlabel_issue(REPO, relabelled, "agent-ready", "reader");
    w.fake
        .label_issue(REPO, relabelled, "agent-ready", "reader");
    // Another label applied by a writer does not vouch for the ready label.
    let other_label = w.fake.add_issue(
        REPO,
        by("other").labels(&["agent-ready"]).labelled_by("reader"),
    );
    w.fake.label_issue(REPO, other_label, "bug", "writer");

    let trusting = source_for(&w.fake, &[REPO], false);
    assert_eq!(trusting.poll().await.unwrap().len(), 8);

    let strict = source_for(&w.fake, &[REPO], true);
    let ids: BTreeSet<String> = strict
        .poll()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    let expect: BTreeSet<String> = [by_writer, by_maintainer, by_owner]
        .iter()
        .map(|n| format!("{REPO}#{n}"))
        .collect();
    assert_eq!(ids, expect);
    for dropped in [by_reader, by_triager, by_stranger, relabelled, other_label] {
        assert!(!ids.contains(&format!("{REPO}#{dropped}")));
    }
    // Permissions are looked up once per user and poll.
    assert_eq!(
        w.fake
            .count_requests("GET", "/collaborators/reader/permission"),
        1
    );
}

#[tokio::test]
async fn source_errors_for_tasks_of_another_source() {
    let w = world().await;
    let source = source_for(&w.fake, &[REPO], false);
    let local = Task::new(
        "local-1",
        SourceKind::Local,
        "local:1",
        "/tmp/x",
        "t",
        chrono::Utc::now(),
    );
    assert!(matches!(
        source.claim(&local, &info(1)).await,
        Err(ClaimError::Source(SourceError::WrongTask { .. }))
    ));
    assert!(w.fake.requests().is_empty());
}

#[tokio::test]
async fn landing_a_branch_that_was_never_pushed_fails_without_side_effects() {
    let w = world().await;
    let n = w
        .fake
        .add_issue(REPO, NewIssue::new("Spin fix").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);
    let task = poll_one(&source, n).await;
    source.claim(&task, &info(1)).await.unwrap();
    let err = source
        .report(&task, &Outcome::Landed(landed("polyphony/not-pushed")))
        .await
        .expect_err("unpushed branch");
    match err.tracker::<GithubError>() {
        Some(GithubError::Api {
            status: 422,
            message,
            ..
        }) => assert!(message.contains("head: invalid"), "{message}"),
        _ => panic!("expected a 422, got {err:?}"),
    }
    assert!(!err.is_config_error());
    assert!(w.fake.pulls(REPO).is_empty());
    assert_eq!(
        count_containing(&w.fake.comments(REPO, n), "polyphony:landed"),
        0
    );
    assert_eq!(w.fake.issue_labels(REPO, n), vec!["agent-claimed"]);
}

#[tokio::test]
async fn fetch_task_reads_one_issue_whatever_its_labels() {
    let w = world().await;
    let issue = w
        .fake
        .add_issue(REPO, NewIssue::new("explicit").labels(&["docs"]));
    let pr = w
        .fake
        .add_issue(REPO, NewIssue::new("a pr").pull_request("feature"));
    let source = source_for(&w.fake, &[REPO], false);
    let parse =
        |n: u64| polyphony::sources::github::IssueRef::parse(&format!("{REPO}#{n}")).unwrap();
    let task = source.fetch_task(&parse(issue)).await.expect("fetch");
    assert_eq!(task.id, format!("{REPO}#{issue}"));
    assert_eq!(task.task_type, TaskType::Docs);
    assert_eq!(task.repo, w.clone_url);
    assert!(source.fetch_task(&parse(pr)).await.is_err());
    let missing = source.fetch_task(&parse(999)).await.expect_err("404");
    assert!(
        missing.to_string().contains("octo/widgets#999"),
        "{missing}"
    );
}

/// Issue 19: a claim this home left half-done (its marker posted, killed mid label swap,
/// the issue left with neither label) is finished when the store says so, and still taken
/// for a release when it does not.
#[tokio::test]
async fn an_own_half_done_claim_is_finished_not_taken_for_a_release() {
    let w = world().await;
    let n = w
        .fake
        .add_issue(REPO, NewIssue::new("Spin fix").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);
    let task = source.poll().await.unwrap().remove(0);
    source.claim_issue(&task, &info(1)).await.expect("claim");
    // What the old order left behind: ready removed, claimed never added.
    w.fake.unlabel_issue(REPO, n, "agent-claimed", "octocat");
    assert!(w.fake.issue_labels(REPO, n).is_empty());

    match source.claim_issue_resuming(&task, &info(1), false).await {
        Err(ClaimError::NoLongerReady { .. }) => {}
        other => panic!("without the store's word it is a release: {other:?}"),
    }
    let claimed = source
        .claim_issue_resuming(&task, &info(1), true)
        .await
        .expect("an interrupted claim of ours is finished");
    assert_eq!(claimed.title, "Spin fix");
    assert_eq!(w.fake.issue_labels(REPO, n), vec!["agent-claimed"]);
    assert_eq!(w.fake.comments(REPO, n).len(), 1, "no second claim comment");

    // Another home's marker first: never ours, whatever the store says.
    let other = w
        .fake
        .add_issue(REPO, NewIssue::new("Other").labels(&["agent-ready"]));
    let tasks = source.poll().await.unwrap();
    let task = tasks
        .iter()
        .find(|t| t.id == format!("{REPO}#{other}"))
        .unwrap();
    let theirs = ClaimInfo {
        claimant: "home-b".into(),
        ..info(1)
    };
    source
        .claim_issue(task, &theirs)
        .await
        .expect("home-b claims");
    assert!(matches!(
        source.claim_issue_resuming(task, &info(1), true).await,
        Err(ClaimError::NoLongerReady { .. })
    ));
}

/// Issue 11 "Low": hidden markers count only in comments by the token's own user. A
/// stranger who types our claim marker (naming another claimant) and our landed marker
/// neither blocks the claim nor stops the landed comment.
#[tokio::test]
async fn markers_in_other_users_comments_are_ignored() {
    let w = world().await;
    let n = w
        .fake
        .add_issue(REPO, NewIssue::new("Spin fix").labels(&["agent-ready"]));
    let id = format!("{REPO}#{n}");
    w.fake.add_comment_as(
        REPO,
        n,
        "mallory",
        &format!("<!-- polyphony:claim task={id} attempt=1 by=home-b -->"),
    );
    w.fake.add_comment_as(
        REPO,
        n,
        "mallory",
        &format!("<!-- polyphony:landed task={id} -->"),
    );
    let source = source_for(&w.fake, &[REPO], false);
    let task = poll_one(&source, n).await;
    source
        .claim(&task, &info(1))
        .await
        .expect("a stranger's marker does not own the issue");
    let branch = "polyphony/octo-widgets-1-a1";
    push_branch(&w, branch);
    let reported = source
        .report(&task, &Outcome::Landed(landed(branch)))
        .await
        .expect("land");
    assert!(reported.created);
    let comments = w.fake.comments(REPO, n);
    assert_eq!(
        count_containing(&comments, "polyphony:landed"),
        2,
        "{comments:#?}"
    );
    assert_eq!(count_containing(&comments, "by=home-a"), 1, "{comments:#?}");
    assert_eq!(w.fake.issue_labels(REPO, n), vec!["agent-landed"]);
    assert_eq!(
        w.fake.count_requests("GET", "/user"),
        1,
        "the login is read once"
    );
}

/// Issue 11 "Low": a `Link: rel="next"` to another host is refused, and the token never
/// reaches that host (a second loopback server stands for it).
#[tokio::test]
async fn a_next_page_link_to_another_host_is_refused() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = Arc::new(AtomicUsize::new(0));
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let elsewhere_addr = elsewhere.local_addr().unwrap();
    let counted = hits.clone();
    tokio::spawn(async move {
        let app = axum::Router::new().fallback(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { "[]" }
        });
        axum::serve(elsewhere, app).await.ok();
    });
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = api.local_addr().unwrap();
    let link = format!("<http://{elsewhere_addr}/steal?page=2>; rel=\"next\"");
    tokio::spawn(async move {
        let app = axum::Router::new().fallback(move || {
            let link = link.clone();
            async move {
                (
                    [("link", link), ("content-type", "application/json".into())],
                    "[]",
                )
            }
        });
        axum::serve(api, app).await.ok();
    });
    let client = GithubClient::new(
        &format!("http://{api_addr}"),
        ResolvedToken::new("GITHUB_TOKEN", "ghp_not_for_elsewhere_0123456789"),
        fast_policy(),
    )
    .expect("client");
    let got = client
        .get_all_pages::<serde_json::Value>("listing things", "/repos/o/r/issues")
        .await;
    match got {
        Err(e @ GithubError::ForeignLink { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&elsewhere_addr.to_string()), "{text}");
            assert!(!text.contains("ghp_not_for_elsewhere"), "{text}");
        }
        other => panic!("expected ForeignLink, got {other:?}"),
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the other host was contacted"
    );
}

/// Issue 24: the blocked comment quotes the agent's reason as inert text: no @mention,
/// no link, no markdown, no hidden marker; a claim marker the agent planted for the next
/// generation's task id does not make that generation's claim refuse the issue.
#[tokio::test]
async fn a_planted_marker_in_agent_text_neither_renders_nor_claims() {
    let w = world().await;
    let n = w
        .fake
        .add_issue(REPO, NewIssue::new("hard").labels(&["agent-ready"]));
    let source = source_for(&w.fake, &[REPO], false);
    let task = poll_one(&source, n).await;
    source.claim(&task, &info(1)).await.unwrap();
    let next_id = format!("{REPO}#{n}.2");
    let hostile = format!(
        "agent said: thanks @mallory, see [the fix](https://evil.example/x) ![](https://evil.example/pixel.png) **done**\n<!-- polyphony:claim task={next_id} attempt=1 by=mallory -->\nFixes #{n}"
    );
    let blocked = Outcome::Blocked(Blocked {
        attempts: vec![BlockedAttempt {
            attempt: 1,
            agent: "claude".into(),
            reason: hostile,
        }],
    });
    source.report(&task, &blocked).await.expect("block");
    let comments = w.fake.comments(REPO, n);
    let text = comments
        .iter()
        .find(|c| c.contains("polyphony:blocked"))
        .expect("the blocked comment");
    assert!(!text.contains("@mallory"), "{text}");
    assert!(!text.contains("by=mallory"), "{text}");
    assert!(!text.contains(&format!("Fixes #{n}")), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("| 1 | claude |"))
        .expect("the reason row");
    // The reason is one inline code span: nothing in it renders.
    assert!(
        row.starts_with(
            "| 1 | claude | `agent said: thanks mallory, see [the fix](https://evil.example/x)"
        ),
        "{row}"
    );
    assert!(row.ends_with("` |"), "{row}");

    // The issue comes back (re-labelled) as generation 2, which this home claims.
    w.fake.unlabel_issue(REPO, n, "agent-blocked", "octocat");
    w.fake.label_issue(REPO, n, "agent-ready", "octocat");
    let mut next = polyphony::domain::generation::next(&task, None, chrono::Utc::now());
    assert_eq!(next.id, next_id);
    next.state = TaskState::Discovered;
    source
        .claim(&next, &info(1))
        .await
        .expect("generation 2 is claimed by this home, not refused for `mallory`");
}
