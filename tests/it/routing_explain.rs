//! `route --explain` on a task whose body names real files of a local repository shows
//! those files, their LOC and their callers — from a checkout and from a bare mirror.

use crate::support;

use chrono::TimeZone;
use polyphony::config::model::RoutingFile;
use polyphony::domain::{SourceKind, Task};
use polyphony::orchestrator::facts::gather_facts;
use polyphony::routing::explain_task;
use std::path::Path;
use support::git::{git, write};

/// A repo where `src/session.rs` (12 LOC) defines `refresh_token`, called from four other
/// files, and `src/util.rs` has 3 LOC.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut session = String::from("use std::sync::Mutex;\n\n");
    session.push_str("pub fn refresh_token(s: &Mutex<Session>) {\n");
    for i in 0..8 {
        session.push_str(&format!("    step({i});\n"));
    }
    session.push_str("}\n\n");
    session.push_str("pub struct Session;\n");
    write(root, "src/session.rs", &session);
    write(
        root,
        "src/util.rs",
        "pub fn step(_: u32) {}\n\npub fn other() {}\n// end\n",
    );
    for f in ["api", "cli", "daemon", "jobs"] {
        write(
            root,
            &format!("src/{f}.rs"),
            "fn go() { crate::session::refresh_token(&S); }\n",
        );
    }
    write(
        root,
        "src/unrelated.rs",
        "fn refresh_tokens() {} // a different word\n",
    );
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "init"]);
    dir
}

fn task(repo: &Path) -> Task {
    let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let mut t = Task::new(
        "local-7",
        SourceKind::Local,
        "local:7",
        repo.display().to_string(),
        "Token refresh races under load",
        now,
    );
    t.body =
        "`refresh_token` in src/session.rs:3 can run twice; see also util.rs and src/missing.rs."
            .into();
    t.labels = vec!["bug".into()];
    t
}

fn routing() -> RoutingFile {
    serde_yaml::from_str(
        "rules:\n  - name: docs\n    match: {task_type: docs}\n    agent: kimi\n  - name: small-bugs\n    match: {task_type: bugfix, scope: [small, medium]}\n    agent: codex\n    fallback: [claude]\ndefault: {agent: claude}\n",
    )
    .unwrap()
}

fn check_explanation(repo_dir: &Path, t: &Task) {
    let e = explain_task(t, &routing(), gather_facts(t, Some(repo_dir))).unwrap();
    let files: Vec<(&str, u64)> = e
        .facts
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.loc))
        .collect();
    assert_eq!(files, vec![("src/session.rs", 12), ("src/util.rs", 3)]);
    assert_eq!(e.facts.missing_paths, vec!["src/missing.rs"]);
    let callers = &e.facts.identifiers[0];
    assert_eq!(callers.name, "refresh_token");
    assert_eq!(
        callers.files,
        vec![
            "src/api.rs",
            "src/cli.rs",
            "src/daemon.rs",
            "src/jobs.rs",
            "src/session.rs"
        ]
    );
    assert!(e.facts.repo_checked);
    assert_eq!(e.score.cyclomatic_depth.score, 1); // 15 LOC, 2 files
    assert_eq!(e.score.fan_out.score, 1); // 5 files
                                          // token (text), session (the path src/session.rs names it)
    assert_eq!(e.score.security.score, 2, "{:?}", e.score.security);
    // race (text) + mutex (inside src/session.rs)
    assert_eq!(e.score.concurrency.score, 2, "{:?}", e.score.concurrency);
    assert_eq!(e.score.total, 6);
    assert_eq!(e.decision.rule, "small-bugs");
    assert_eq!(e.decision.skipped.len(), 1);

    let text = e.render(t, false);
    for want in [
        "src/session.rs (12 LOC)",
        "src/util.rs (3 LOC)",
        "refresh_token: 5 caller files (src/api.rs, src/cli.rs, src/daemon.rs, src/jobs.rs, src/session.rs)",
        "mentioned but not in the repository: src/missing.rs",
        "Routed by rule `small-bugs` to agent `codex` (fallback: claude)",
        "skipped rule `docs`: task_type expected docs, got bugfix",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    let json: serde_json::Value = serde_json::from_str(&e.render(t, true)).unwrap();
    assert_eq!(json["facts"]["files"][0]["loc"], 12);
    assert_eq!(
        json["facts"]["identifiers"][0]["files"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

#[test]
fn explains_from_a_checkout() {
    let dir = repo();
    check_explanation(dir.path(), &task(dir.path()));
}

#[test]
fn explains_from_a_bare_mirror_at_the_base_ref() {
    let dir = repo();
    let mirror = tempfile::tempdir().unwrap();
    let bare = mirror.path().join("app.git");
    git(
        mirror.path(),
        &[
            "clone",
            "-q",
            "--mirror",
            dir.path().to_str().unwrap(),
            "app.git",
        ],
    );
    // A later commit on the work tree must not leak into the mirror's view.
    write(dir.path(), "src/more.rs", "fn x() { refresh_token(); }\n");
    let mut t = task(dir.path());
    t.base_ref = Some("main".into());
    check_explanation(&bare, &t);

    // An unknown ref degrades to text-only scoring with a warning.
    t.base_ref = Some("no-such-branch".into());
    let facts = gather_facts(&t, Some(&bare));
    assert!(!facts.repo_checked);
    assert_eq!(facts.warnings.len(), 1, "{:?}", facts.warnings);
    assert!(
        facts.warnings[0].contains("no-such-branch"),
        "{}",
        facts.warnings[0]
    );
}

#[test]
fn a_task_without_a_repository_scores_from_its_text() {
    let t = task(Path::new("/nonexistent"));
    let facts = gather_facts(&t, None);
    assert!(!facts.repo_checked);
    let paths: Vec<&str> = facts.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, vec!["src/session.rs", "util.rs", "src/missing.rs"]);
    assert!(facts.files.iter().all(|f| !f.verified));
    let s = polyphony::routing::score(&facts);
    assert_eq!(s.cyclomatic_depth.score, 1); // 3 unverified files
                                             // token + session (from the path); race
    assert_eq!((s.security.score, s.concurrency.score), (2, 1));
    assert!(facts.context_tokens > 0);
}
