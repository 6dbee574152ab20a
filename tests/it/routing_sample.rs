//! The shipped config-examples/routing.yaml routes a table of realistic tasks, gathered and scored against
//! a real git repository, to the agents its comments promise.

use crate::support;

use chrono::TimeZone;
use polyphony::config::model::RoutingFile;
use polyphony::domain::{SourceKind, Task};
use polyphony::orchestrator::facts::gather_facts;
use polyphony::routing::{explain_task, Router};
use std::path::Path;
use support::git::{git, write};

fn lines(n: usize, line: &str) -> String {
    (0..n).map(|i| format!("{line} // {i}\n")).collect()
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "src/parser.rs",
        &lines(20, "let x = parse_line(input);"),
    );
    for m in ["orders", "users", "billing", "audit", "search", "export"] {
        write(
            root,
            &format!("src/store/{m}.rs"),
            &lines(30, "let conn = open_store();"),
        );
    }
    write(
        root,
        "src/pool.rs",
        &format!(
            "use std::sync::Mutex;\n{}",
            lines(80, "let guard = self.slots.lock().unwrap();")
        ),
    );
    write(root, "docs/guide.md", "# Guide\n\nHow to configure.\n");
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "init"]);
    dir
}

fn task(title: &str, body: &str, labels: &[&str], repo: &Path) -> Task {
    let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let mut t = Task::new(
        "local-1",
        SourceKind::Local,
        "local:1",
        repo.display().to_string(),
        title,
        now,
    );
    t.body = body.into();
    t.labels = labels.iter().map(|s| s.to_string()).collect();
    t
}

#[test]
fn sample_tasks_reach_the_promised_agents() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config-examples/routing.yaml"),
    )
    .unwrap();
    let routing: RoutingFile = serde_yaml::from_str(&text).unwrap();
    Router::compile(&routing, &["claude", "codex", "kimi", "gemini"]).expect("sample compiles");

    let dir = repo();
    let r = dir.path();
    let cases = [
        (
            task(
                "Parser drops the last line",
                "Off-by-one in `src/parser.rs` when the input has no trailing newline.",
                &["bug"],
                r,
            ),
            "bugfix-one-file",
            "codex",
        ),
        (
            task(
                "Split the store into a crate",
                "Move every module under src/store/ behind a `Store` trait.",
                &["refactor", "risk:high"],
                r,
            ),
            "refactor-high-risk",
            "claude",
        ),
        (
            task(
                "Which OAuth library should we adopt?",
                "Compare the maintained options and their licences.",
                &["research"],
                r,
            ),
            "web-research",
            "gemini",
        ),
        (
            task(
                "Document the configuration",
                "Explain every key in docs/guide.md.",
                &["documentation"],
                r,
            ),
            "docs",
            // Was kimi: the templates route nothing to kimi, which cannot run (issue 29).
            "claude",
        ),
        (
            task(
                "Bound the connection pool",
                "Add a semaphore to src/pool.rs so waiters cannot deadlock on the slot Mutex.",
                &["enhancement"],
                r,
            ),
            "complex-feature",
            "claude",
        ),
        (
            task("Tidy up", "Rename a variable.", &[], r),
            "default",
            "claude",
        ),
    ];
    for (t, rule, agent) in cases {
        let e = explain_task(&t, &routing, gather_facts(&t, Some(r))).unwrap();
        assert_eq!(
            (e.decision.rule.as_str(), e.decision.agent.as_str()),
            (rule, agent),
            "{}\n{}",
            t.title,
            e.render(&t, false)
        );
    }
}

#[test]
fn the_concurrency_heavy_feature_scores_on_concurrency() {
    let dir = repo();
    let t = task(
        "Bound the connection pool",
        "Add a semaphore to src/pool.rs so waiters cannot deadlock on the slot Mutex.",
        &["enhancement"],
        dir.path(),
    );
    let routing: RoutingFile = serde_yaml::from_str("default: {agent: claude}\n").unwrap();
    let e = explain_task(&t, &routing, gather_facts(&t, Some(dir.path()))).unwrap();
    assert_eq!(e.score.concurrency.score, 2, "{:?}", e.score.concurrency);
    assert_eq!(e.score.cyclomatic_depth.score, 2); // 81 LOC
    assert_eq!(e.facts.files[0].path, "src/pool.rs");
    assert_eq!(e.facts.files[0].loc, 81);
}
