//! The PR shepherd end to end (issue 15): the BUILT binary lands an issue as a pull request
//! on the stateful fake GitHub (real Docker with the offline test image, real git with a
//! local bare origin), then `daemon --exit-when-idle` looks at the pull request once and
//! runs whatever follow-up that asks for, exactly as the long-running daemon does on each
//! poll:
//!
//! - a trusted reviewer's inline comment → one new commit on the same PR branch, on top of
//!   the old head, that does what the comment says, verified; one reply in that thread
//!   naming the commit;
//! - a review requesting changes plus a conversation comment addressed to the bot → one
//!   commit, one reply each;
//! - the same comment from an untrusted user → nothing;
//! - a failing check run → a fix commit; failing the same way again → one report, no loop;
//! - a conflicting change pushed to the base → a merge commit (old head + base) with the
//!   conflict resolved, verified; with `conflicts: rebase`, one commit on the moved base
//!   (linear, force-pushed with a lease), unless a person's commit is on the branch;
//! - the follow-up limit → one hand-off comment, however often it looks;
//! - the hold label → nothing; a closed pull request → no longer watched;
//! - kill -9 between the reply and its record → after the restart, still one commit and one
//!   reply.
//!
//! The scripted agent reads its `polyphony-fake-sed` directive from the reviewer's quoted
//! comment or the check's output in the follow-up's prompt, and keeps the branch's side of
//! a merge conflict (images/test/README.md).
//!
//! Without an engine the tests fail when `CI` is set, otherwise print `SKIPPED`.

use crate::support;

use std::process::Output;

use polyphony::demo::{write_home, FIX_DIRECTIVE};
use serde_json::Value;
use support::docker::test_image as image;
use support::fake_github::{push_to_branch, FakeGithub, NewCheckRun, NewIssue};
use support::git::git;
use support::home::{output, text, Home, Origin};

const REVIEWER: &str = "alice";
const STRANGER: &str = "mallory";
/// What the reviewer asks for, as a directive the scripted agent follows.
const DOC_LINE: &str = "# add A B: prints A + B";

/// A landed pull request on the fake GitHub, and the home that landed it.
struct Scene {
    home: Home,
    fake: FakeGithub,
    origin: Origin,
    repo: String,
    issue: String,
    pr: u64,
    branch: String,
    head: String,
}

impl Scene {
    /// Lands `acme/<name>#1` ("add() subtracts") with the scripted fix; `shepherd` is
    /// config.yaml's `shepherd:` section (indented lines, may be empty).
    async fn landed(image: &str, name: &str, shepherd: &str) -> Scene {
        let origin = Origin::new();
        let fake = FakeGithub::start().await;
        let repo = format!("acme/{name}");
        fake.add_repo(&repo, &origin.url(), "main");
        fake.set_permission(&repo, REVIEWER, "write");
        fake.set_permission(&repo, STRANGER, "read");
        let n = fake.add_issue(
            &repo,
            NewIssue::new("Fix add()")
                .body(&format!(
                    "`add 2 3` prints -1.\n\npolyphony-fake: succeed\n{FIX_DIRECTIVE}\n"
                ))
                .labels(&["agent-ready"]),
        );
        let (dir, path) = Home::temp();
        write_home(&path, dir.path(), image).expect("home");
        std::fs::write(
            path.join("config.yaml"),
            format!(
                "poll_interval: 30s\nmax_concurrent_agents: 2\nevent_idle_timeout: 1m\nmax_attempts: 2\ndefault_identity: demo\negress:\n  mode: none\ncontainer:\n  image: {image}\n  deadline: 2m\n  memory: 512m\n  cpus: 1\nverify:\n  timeout: 1m\nshepherd:\n  enabled: true\n{shepherd}"
            ),
        )
        .expect("config.yaml");
        std::fs::write(
            path.join("routing.yaml"),
            "default:\n  agent: claude\n  fallback: []\n",
        )
        .expect("routing.yaml");
        let home = Home::at(dir, path, Some(&fake));
        let issue = format!("{repo}#{n}");
        let out = home.run(&["spawn", &issue]).await;
        assert!(out.status.success(), "spawn: {}", output(&out));
        let v = home.task(&issue).await;
        assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
        let pull = &v["pull"];
        let pr = pull["number"]
            .as_u64()
            .expect("the landed pull request is watched");
        let branch = pull["branch"].as_str().expect("branch").to_string();
        let mut scene = Scene {
            home,
            fake,
            origin,
            repo,
            issue,
            pr,
            branch,
            head: String::new(),
        };
        scene.head = scene.tip();
        assert_eq!(pull["head_sha"].as_str(), Some(scene.head.as_str()));
        scene
    }

    /// One look at the pull request and whatever it runs, as the daemon does each poll.
    async fn shepherd(&self) -> Output {
        let out = self.home.run(&["daemon", "--exit-when-idle"]).await;
        assert!(out.status.success(), "daemon: {}", output(&out));
        out
    }

    async fn task(&self, id: &str) -> Value {
        self.home.task(id).await
    }

    /// The PR branch's tip in the origin.
    fn tip(&self) -> String {
        git(
            &self.origin.path,
            &["rev-parse", &format!("refs/heads/{}", self.branch)],
        )
    }

    fn show(&self, rev: &str, path: &str) -> String {
        self.origin.show(&format!("{rev}:{path}"))
    }

    /// Commits made on the PR branch after `from` (its first-parent line: a merge brings
    /// the base's commits along), newest first.
    fn commits_since(&self, from: &str) -> Vec<String> {
        let range = format!("{from}..refs/heads/{}", self.branch);
        let list = git(&self.origin.path, &["rev-list", "--first-parent", &range]);
        list.lines().map(str::to_string).collect()
    }

    fn parents(&self, sha: &str) -> Vec<String> {
        git(&self.origin.path, &["rev-list", "--parents", "-n1", sha])
            .split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect()
    }

    /// An inline comment on line 5 of calc.sh (the fixed line) asking for a doc line.
    fn review_comment(&self, login: &str) -> u64 {
        self.fake.add_review_comment_as(
            &self.repo,
            self.pr,
            login,
            "calc.sh",
            5,
            &format!(
                "Please document add() above it.\n\npolyphony-fake-sed: calc.sh 1a {DOC_LINE}"
            ),
        )
    }

    /// Our replies in the PR's review threads.
    fn replies(&self) -> Vec<(u64, String)> {
        self.fake
            .review_comments(&self.repo, self.pr)
            .into_iter()
            .filter(|c| c.author == "polyphony-bot")
            .map(|c| (c.in_reply_to.unwrap_or(0), c.body))
            .collect()
    }

    fn conversation(&self) -> Vec<String> {
        self.fake.comments(&self.repo, self.pr)
    }

    fn followups(v: &Value) -> Vec<Value> {
        v["followups"].as_array().cloned().unwrap_or_default()
    }
}

/// The follow-up's commit: one commit on top of the old head, carrying the doc line and the
/// fix, and a reply in the reviewer's thread naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_inline_comment_becomes_one_verified_commit_and_one_reply() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-review", "").await;
    let comment = scene.review_comment(REVIEWER);
    scene.shepherd().await;

    let v = scene.task(&scene.issue).await;
    let followups = Scene::followups(&v);
    assert_eq!(followups.len(), 1, "{v:#}");
    let id = followups[0]["task_id"].as_str().expect("id").to_string();
    let f = scene.task(&id).await;
    assert_eq!(f["task"]["state"], "LANDED", "{f:#}");
    assert_eq!(f["followup_of"]["task_id"], scene.issue.as_str());
    assert_eq!(
        f["followup_of"]["number"], v["pull"]["number"],
        "{f:#}\n{v:#}"
    );
    let evidence = f["attempts"][0]["evidence"].as_array().expect("evidence");
    assert!(
        evidence
            .iter()
            .any(|e| e["name"] == "test" && e["passed"] == true),
        "verified by the project's checks: {evidence:?}"
    );

    let commits = scene.commits_since(&scene.head);
    assert_eq!(commits.len(), 1, "one new commit: {commits:?}");
    let new = &commits[0];
    assert_eq!(
        scene.parents(new),
        vec![scene.head.clone()],
        "on top, no force"
    );
    assert_eq!(f["attempts"][0]["commit_sha"].as_str(), Some(new.as_str()));
    let calc = scene.show(new, "calc.sh");
    assert!(calc.contains(DOC_LINE) && calc.contains("a + b"), "{calc}");

    let replies = scene.replies();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].0, comment, "in the reviewer's thread");
    assert!(
        replies[0].1.contains(&new[..12]),
        "names the commit: {}",
        replies[0].1
    );
    // Issue 29: the reply says what the commit changed (the commented file, here).
    assert!(
        replies[0].1.starts_with("Addressed this comment")
            && replies[0].1.contains("It changed `calc.sh`."),
        "names what changed: {}",
        replies[0].1
    );

    // Looking again finds nothing new: the comment is handled, our reply is ours.
    scene.shepherd().await;
    assert_eq!(scene.commits_since(&scene.head).len(), 1);
    assert_eq!(scene.replies().len(), 1);
    let v = scene.task(&scene.issue).await;
    assert_eq!(Scene::followups(&v).len(), 1);
    assert_eq!(v["pull"]["followups"], 1);
    assert_eq!(v["pull"]["state"], "open");

    // `status` lists the watched pull request; `status TASK` shows it with its follow-up.
    let table = text(&scene.home.run(&["status"]).await.stdout);
    let pr = format!("{}#{} open", scene.repo, scene.pr);
    assert!(
        table.contains("watched pull requests:") && table.contains(&pr),
        "{table}"
    );
    assert!(table.contains("1 follow-up(s)"), "{table}");
    let detail = text(&scene.home.run(&["status", &scene.issue]).await.stdout);
    assert!(
        detail.contains(&format!("follow-up {id}  LANDED")),
        "{detail}"
    );
    // `status --json` summaries: the landed task carries its pull request, the follow-up
    // the pull request it works on.
    let list: Vec<Value> =
        serde_json::from_slice(&scene.home.run(&["status", "--json"]).await.stdout)
            .expect("status --json");
    let summary = |id: &str| {
        list.iter()
            .find(|t| t["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} in {list:?}"))
    };
    let landed = summary(&scene.issue);
    assert_eq!(landed["pull"]["number"], scene.pr, "{landed}");
    assert_eq!(landed["pull"]["state"], "open", "{landed}");
    assert_eq!(landed["pull"]["followups"], 1, "{landed}");
    assert_eq!(landed["pull"]["watching"], true, "{landed}");
    assert_eq!(landed["followup_of"], Value::Null, "{landed}");
    let follow = summary(&id);
    assert_eq!(follow["pull"], Value::Null, "{follow}");
    assert_eq!(
        follow["followup_of"],
        serde_json::json!({ "task_id": scene.issue, "number": scene.pr }),
        "{follow}"
    );
    assert!(scene.home.containers().is_empty(), "containers left");
}

/// A review requesting changes and a conversation comment addressed to the bot are one
/// batch: one follow-up, one commit, and one reply each in the conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_and_an_addressed_comment_get_one_commit_and_a_reply_each() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-conversation", "").await;
    scene.fake.add_review_as(
        &scene.repo,
        scene.pr,
        REVIEWER,
        "CHANGES_REQUESTED",
        &format!("Document add().\n\npolyphony-fake-sed: calc.sh 1a {DOC_LINE}"),
        &[],
    );
    scene.fake.add_comment_as(
        &scene.repo,
        scene.pr,
        REVIEWER,
        "/polyphony also mention the test\n\npolyphony-fake-sed: README.md $a Run `sh test.sh`.",
    );
    scene.shepherd().await;
    let commits = scene.commits_since(&scene.head);
    assert_eq!(commits.len(), 1, "one commit for the batch: {commits:?}");
    assert!(scene.show(&commits[0], "calc.sh").contains(DOC_LINE));
    assert!(scene
        .show(&commits[0], "README.md")
        .contains("Run `sh test.sh`."));
    let replies: Vec<String> = scene
        .conversation()
        .into_iter()
        .filter(|c| c.contains("polyphony:reply:"))
        .collect();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert!(replies
        .iter()
        .any(|r| r.starts_with("Addressed this review")));
    assert!(replies
        .iter()
        .any(|r| r.starts_with("Addressed this request")));
    assert!(replies.iter().all(|r| r.contains(&commits[0][..12])));
    assert!(
        replies
            .iter()
            .all(|r| r.contains("`calc.sh`") && r.contains("`README.md`")),
        "each reply names what the commit changed: {replies:?}"
    );
    let v = scene.task(&scene.issue).await;
    assert_eq!(Scene::followups(&v).len(), 1, "{v:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_comment_changes_nothing() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-untrusted", "").await;
    scene.review_comment(STRANGER);
    // A trusted person's conversation comment not addressed to the bot asks for nothing.
    scene
        .fake
        .add_comment_as(&scene.repo, scene.pr, REVIEWER, "LGTM once CI is green");
    scene.shepherd().await;
    let v = scene.task(&scene.issue).await;
    assert!(Scene::followups(&v).is_empty(), "{v:#}");
    assert_eq!(scene.tip(), scene.head);
    assert!(scene.replies().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_check_run_gets_a_fix_commit() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-ci", "").await;
    scene.fake.set_check_run(
        &scene.repo,
        &scene.head,
        NewCheckRun::completed("docs", "failure").output(
            "calc.sh has no usage line",
            "docs-lint: 1 file without a usage comment",
            Some(&format!(
                "calc.sh:1: missing usage line\npolyphony-fake-sed: calc.sh 1a {DOC_LINE}"
            )),
        ),
    );
    scene.shepherd().await;
    let commits = scene.commits_since(&scene.head);
    assert_eq!(commits.len(), 1, "one fix commit: {commits:?}");
    assert_eq!(scene.parents(&commits[0]), vec![scene.head.clone()]);
    assert!(scene.show(&commits[0], "calc.sh").contains(DOC_LINE));
    let v = scene.task(&scene.issue).await;
    let followups = Scene::followups(&v);
    assert_eq!(followups.len(), 1, "{v:#}");
    assert_eq!(followups[0]["state"], "LANDED");

    // The same check fails the same way on the fix: reported once, not looped on.
    let fixed = commits[0].clone();
    for _ in 0..2 {
        scene.fake.set_check_run(
            &scene.repo,
            &fixed,
            NewCheckRun::completed("docs", "failure").output("still failing", "docs-lint", None),
        );
        scene.shepherd().await;
    }
    assert_eq!(scene.tip(), fixed, "no second follow-up");
    let reports: Vec<String> = scene
        .conversation()
        .into_iter()
        .filter(|c| c.contains("fail the same way"))
        .collect();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(reports[0].contains("`docs`: failure"), "{}", reports[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_base_gets_a_verified_merge_commit() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-conflict", "").await;
    // The base changes the very line the pull request fixed.
    let moved = move_base(&scene);
    scene.shepherd().await;
    let commits = scene.commits_since(&scene.head);
    assert_eq!(commits.len(), 1, "one merge commit: {commits:?}");
    let merge = &commits[0];
    assert_eq!(
        scene.parents(merge),
        [scene.head.clone(), moved.clone()],
        "a merge of the old head and the moved base, no rebase"
    );
    let calc = scene.show(merge, "calc.sh");
    assert!(
        !calc.contains("<<<<<<<") && !calc.contains(">>>>>>>"),
        "{calc}"
    );
    assert!(calc.contains("a + b"), "the fix survives: {calc}");
    assert_eq!(
        scene.show(merge, "NEWS.md"),
        "base news\n",
        "the base's other change is merged in"
    );
    let v = scene.task(&scene.issue).await;
    let id = Scene::followups(&v)[0]["task_id"]
        .as_str()
        .expect("id")
        .to_string();
    let f = scene.task(&id).await;
    assert_eq!(f["task"]["state"], "LANDED", "{f:#}");
    let evidence = f["attempts"][0]["evidence"].as_array().expect("evidence");
    assert!(
        evidence
            .iter()
            .any(|e| e["name"] == "test" && e["passed"] == true),
        "{evidence:?}"
    );
}

/// The base's conflicting change of calc.sh's fixed line, plus an unrelated file.
fn move_base(scene: &Scene) -> String {
    push_to_branch(
        &scene.origin.url(),
        "main",
        &[(
            "calc.sh",
            "# Arithmetic helpers for the demo project.\nadd() {\n    a=$1\n    b=$2\n    echo $((a - b)) # base\n}\n",
        ), ("NEWS.md", "base news\n")],
        "base: annotate add",
    )
}

/// `conflicts: rebase` on a branch of our commits only: the new head sits on the moved
/// base with no merge commit (force-pushed with a lease), keeps the fix and the reviewer's
/// change, is verified, and the reviewer gets one reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_conflicts_rebase_our_branch_is_put_on_the_moved_base() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-rebase", "  conflicts: rebase\n").await;
    let comment = scene.review_comment(REVIEWER);
    let moved = move_base(&scene);
    scene.shepherd().await;
    let tip = scene.tip();
    assert_ne!(tip, scene.head);
    assert_eq!(
        scene.parents(&tip),
        [moved.as_str()],
        "one commit on the moved base"
    );
    let merges = git(
        &scene.origin.path,
        &["rev-list", "--merges", &format!("{moved}..{tip}")],
    );
    assert!(merges.is_empty(), "no merge commit: {merges}");
    let calc = scene.show(&tip, "calc.sh");
    assert!(
        !calc.contains("<<<<<<<") && !calc.contains(">>>>>>>"),
        "{calc}"
    );
    assert!(calc.contains("a + b"), "the fix survives: {calc}");
    assert!(calc.contains(DOC_LINE), "the reviewer's change: {calc}");
    assert_eq!(scene.show(&tip, "NEWS.md"), "base news\n");
    let replies = scene.replies();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].0, comment);
    assert!(replies[0].1.contains(&tip[..10]), "{}", replies[0].1);
    let v = scene.task(&scene.issue).await;
    let id = Scene::followups(&v)[0]["task_id"]
        .as_str()
        .expect("id")
        .to_string();
    let f = scene.task(&id).await;
    assert_eq!(f["task"]["state"], "LANDED", "{f:#}");
    let evidence = f["attempts"][0]["evidence"].as_array().expect("evidence");
    assert!(
        evidence
            .iter()
            .any(|e| e["name"] == "test" && e["passed"] == true),
        "{evidence:?}"
    );
}

/// `conflicts: rebase`, but a person pushed to the branch: it is not ours alone, so the
/// base is merged in (a merge commit, no force push), keeping the person's commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_conflicts_rebase_a_foreign_commit_falls_back_to_a_merge() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-rebase-foreign", "  conflicts: rebase\n").await;
    let theirs = push_to_branch(
        &scene.origin.url(),
        &scene.branch,
        &[("CONTRIBUTORS.md", "a person\n")],
        "a person's commit on the pull request",
    );
    let moved = move_base(&scene);
    scene.shepherd().await;
    let commits = scene.commits_since(&theirs);
    assert_eq!(commits.len(), 1, "one merge commit: {commits:?}");
    assert_eq!(
        scene.parents(&commits[0]),
        [theirs.clone(), moved.clone()],
        "a merge of the person's head and the moved base"
    );
    let calc = scene.show(&commits[0], "calc.sh");
    assert!(
        !calc.contains("<<<<<<<") && calc.contains("a + b"),
        "{calc}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_one_hand_off_comment() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-limit", "  max_followups: 0\n").await;
    scene.review_comment(REVIEWER);
    scene.shepherd().await;
    scene.review_comment(REVIEWER);
    scene.shepherd().await;
    let handoffs: Vec<String> = scene
        .conversation()
        .into_iter()
        .filter(|c| c.contains("polyphony:hand-off"))
        .collect();
    assert_eq!(handoffs.len(), 1, "{handoffs:?}");
    assert!(
        handoffs[0].contains("limit of 0 follow-up"),
        "{}",
        handoffs[0]
    );
    assert_eq!(scene.tip(), scene.head, "nothing pushed");
    assert!(scene.replies().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hold_label_stops_the_shepherd() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-hold", "").await;
    scene
        .fake
        .label_issue(&scene.repo, scene.pr, "polyphony-hold", REVIEWER);
    scene.review_comment(REVIEWER);
    scene.shepherd().await;
    let v = scene.task(&scene.issue).await;
    assert!(Scene::followups(&v).is_empty(), "{v:#}");
    assert_eq!(scene.tip(), scene.head);
    assert!(scene.replies().is_empty());
    assert!(!scene
        .conversation()
        .iter()
        .any(|c| c.contains("polyphony:hand-off")));
}

/// Closed (or merged) ends watching: later feedback asks for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pull_request_is_no_longer_watched() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-closed", "").await;
    scene.fake.close_issue(&scene.repo, scene.pr);
    scene.shepherd().await;
    let v = scene.task(&scene.issue).await;
    assert_eq!(v["pull"]["state"], "closed", "{v:#}");
    assert_eq!(v["pull"]["watching"], false, "{v:#}");
    scene.review_comment(REVIEWER);
    scene.shepherd().await;
    let v = scene.task(&scene.issue).await;
    assert!(Scene::followups(&v).is_empty(), "{v:#}");
    assert_eq!(scene.tip(), scene.head);
    let table = text(&scene.home.run(&["status"]).await.stdout);
    assert!(!table.contains("watched pull requests:"), "{table}");
}

/// kill -9 after the reply was posted but before it was recorded: the restarted daemon
/// resumes the follow-up's landing, pushes nothing new and finds its reply by its marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_follow_up_duplicates_nothing() {
    let Some(image) = image().await else { return };
    let scene = Scene::landed(&image, "calc-kill", "").await;
    scene.review_comment(REVIEWER);
    let mut cmd = scene.home.cmd(&["daemon", "--exit-when-idle"]);
    cmd.env("POLYPHONY_FAILPOINT", "followup-reply");
    let out = scene
        .home
        .finish(cmd, &["daemon", "--exit-when-idle"])
        .await;
    assert_eq!(out.status.code(), None, "killed: {}", output(&out));
    assert_eq!(
        scene.commits_since(&scene.head).len(),
        1,
        "pushed before the kill"
    );
    assert_eq!(scene.replies().len(), 1, "replied before the kill");

    scene.shepherd().await;
    let commits = scene.commits_since(&scene.head);
    assert_eq!(commits.len(), 1, "no second commit: {commits:?}");
    let replies = scene.replies();
    assert_eq!(replies.len(), 1, "no second reply: {replies:?}");
    let v = scene.task(&scene.issue).await;
    let followups = Scene::followups(&v);
    assert_eq!(followups.len(), 1, "{v:#}");
    assert_eq!(followups[0]["state"], "LANDED", "{v:#}");
    assert!(scene.home.containers().is_empty(), "containers left");
}
