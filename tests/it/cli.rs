//! The built binary against a temporary POLYPHONY_HOME: init, config check, enqueue,
//! status, and every kind of malformed config exiting 2 with file:line and a fix.

use crate::support;

use std::path::Path;

use assert_cmd::Command;
use predicates::prelude::*;
use support::git::git;

fn polyphony(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("polyphony").unwrap();
    cmd.env("POLYPHONY_HOME", home).env_remove("RUST_LOG");
    cmd
}

fn initialised() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    polyphony(dir.path()).arg("init").assert().success();
    dir
}

/// An initialised home whose queue holds `local-1` and `local-2` (DISCOVERED, created `now`),
/// with the store open on it.
fn home_with_two_local_tasks(
    now: chrono::DateTime<chrono::Utc>,
) -> (tempfile::TempDir, polyphony::store::Store) {
    use polyphony::domain::{SourceKind, Task};
    let home = initialised();
    let store = polyphony::store::Store::open(&home.path().join("queue.db")).unwrap();
    for id in ["local-1", "local-2"] {
        let task = Task::new(
            id,
            SourceKind::Local,
            format!("local:{id}"),
            "/r",
            "Fix",
            now,
        );
        store.insert_task(&task).unwrap();
    }
    (home, store)
}

#[test]
fn init_then_config_check_succeeds() {
    let home = tempfile::tempdir().unwrap();
    let target = home.path().join("fresh");
    polyphony(&target)
        .arg("init")
        .assert()
        .success()
        .stdout(predicate::str::contains("wrote").and(predicate::str::contains("routing.yaml")));
    for f in [
        "config.yaml",
        "identities.yaml",
        "agents.yaml",
        "routing.yaml",
    ] {
        assert!(target.join(f).is_file(), "{f}");
    }
    polyphony(&target)
        .args(["config", "check"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("config OK")
                .and(predicate::str::contains("claude-stream-json")),
        );

    let out = polyphony(&target)
        .args(["config", "check", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ws = target.join("workspaces");
    assert_eq!(
        json["resolved"]["workspace_root"],
        ws.to_string_lossy().as_ref()
    );
    assert_eq!(json["resolved"]["poll_interval_seconds"], 30);
    assert_eq!(json["routing"]["default"]["agent"], "claude");
    assert_eq!(json["agents"].as_array().unwrap().len(), 4);
}

#[test]
fn home_flag_overrides_the_environment() {
    let env_home = tempfile::tempdir().unwrap();
    let flag_home = tempfile::tempdir().unwrap();
    polyphony(env_home.path())
        .args(["--home"])
        .arg(flag_home.path())
        .arg("init")
        .assert()
        .success();
    assert!(flag_home.path().join("config.yaml").exists());
    assert!(!env_home.path().join("config.yaml").exists());
}

#[test]
fn init_twice_without_force_keeps_edits() {
    let home = initialised();
    let routing = home.path().join("routing.yaml");
    std::fs::write(&routing, "# mine\ndefault:\n  agent: codex\n").unwrap();
    polyphony(home.path())
        .arg("init")
        .assert()
        .success()
        .stdout(predicate::str::contains("skipped").and(predicate::str::contains("--force")));
    assert_eq!(
        std::fs::read_to_string(&routing).unwrap(),
        "# mine\ndefault:\n  agent: codex\n"
    );
    polyphony(home.path())
        .args(["init", "--force"])
        .assert()
        .success()
        .stdout(predicate::str::contains("overwrote"));
    assert!(std::fs::read_to_string(&routing)
        .unwrap()
        .contains("bugfix-one-file"));
}

#[test]
fn enqueue_then_status_shows_discovered() {
    let home = initialised();
    let repo = tempfile::tempdir().unwrap();
    // enqueue checks a local --repo is a git repository with a commit (issue 12).
    git(repo.path(), &["init", "-q"]);
    git(
        repo.path(),
        &["commit", "-q", "--allow-empty", "-m", "init"],
    );
    let body = home.path().join("body.md");
    std::fs::write(&body, "The parser drops the last line.").unwrap();
    let out = polyphony(home.path())
        .args(["enqueue", "--repo"])
        .arg(repo.path())
        .args([
            "--type", "bugfix", "--risk", "medium", "--label", "parser", "--label", "urgent",
        ])
        .arg("--body-file")
        .arg(&body)
        .args(["--json", "Fix the parser"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["id"], "local-1");

    polyphony(home.path())
        .args([
            "enqueue",
            "--repo",
            "https://example.com/a/b.git",
            "--base",
            "develop",
            // The URL is not reachable from tests: store it unchecked.
            "--no-check",
            "Write docs",
        ])
        .assert()
        .success()
        .stdout("local-2\n");

    let out = polyphony(home.path())
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let tasks: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(tasks.len(), 2);
    let first = &tasks[1];
    assert_eq!(first["id"], "local-1");
    assert_eq!(first["state"], "DISCOVERED");
    assert_eq!(first["task_type"], "bugfix");
    assert_eq!(first["risk"], "medium");
    assert_eq!(first["labels"], serde_json::json!(["parser", "urgent"]));
    assert_eq!(first["title"], "Fix the parser");
    assert_eq!(first["source_ref"], "local:local-1");
    assert_eq!(first["attempts"], 0);
    assert_eq!(first["next_attempt_at"], serde_json::Value::Null);
    // The listing leaves the unbounded fields to `status TASK --json`.
    assert!(first.get("body").is_none(), "{first}");
    assert!(first.get("metadata").is_none(), "{first}");
    let full = |id: &str| -> serde_json::Value {
        let out = polyphony(home.path())
            .args(["status", id, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let one = full("local-1");
    assert_eq!(one["task"]["body"], "The parser drops the last line.");
    let canonical = std::fs::canonicalize(repo.path()).unwrap();
    assert_eq!(one["task"]["repo"], canonical.to_string_lossy().as_ref());
    assert_eq!(full("local-2")["task"]["base_ref"], "develop");

    polyphony(home.path())
        .arg("status")
        .assert()
        .success()
        .stdout(
            predicate::str::contains("ID")
                .and(predicate::str::contains("local-1"))
                .and(predicate::str::contains("DISCOVERED"))
                .and(predicate::str::contains("2 task(s)")),
        );
    polyphony(home.path())
        .args(["status", "--state", "landed", "--json"])
        .assert()
        .success()
        .stdout("[]\n");
    let out = polyphony(home.path())
        .args(["status", "local-1", "--json"])
        .output()
        .unwrap();
    let one: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(one["task"]["title"], "Fix the parser");
    assert_eq!(one["transitions"], serde_json::json!([]));
    polyphony(home.path())
        .args(["status", "local-9"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no task `local-9`"));
}

#[test]
fn status_on_an_empty_home_creates_nothing() {
    let home = tempfile::tempdir().unwrap();
    polyphony(home.path())
        .args(["status", "--json"])
        .assert()
        .success()
        .stdout("[]\n");
    assert!(!home.path().join("queue.db").exists());
}

#[test]
fn usage_errors_exit_2() {
    let home = initialised();
    polyphony(home.path())
        .args(["enqueue", "--repo", "/definitely/not/here", "T"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("fix:"));
    polyphony(home.path())
        .args(["enqueue", "--repo", ".", "--type", "chore", "T"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown task type"));
    polyphony(home.path()).arg("frobnicate").assert().code(2);
    polyphony(home.path()).arg("--help").assert().success();
}

/// Writes `text` into `file` of a fresh initialised home and runs `config check`:
/// it must exit 2 and print `file:line:` plus every expected part.
fn check_bad_config(file: &str, text: &str, line: usize, parts: &[&str]) {
    let home = initialised();
    std::fs::write(home.path().join(file), text).unwrap();
    let out = polyphony(home.path())
        .args(["config", "check"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
    let location = format!("{}:{line}:", home.path().join(file).display());
    assert!(
        stderr.contains(&location),
        "expected {location} in: {stderr}"
    );
    assert!(stderr.contains("— fix: "), "no fix in: {stderr}");
    for part in parts {
        assert!(stderr.contains(part), "expected `{part}` in: {stderr}");
    }
}

#[test]
fn bad_yaml() {
    check_bad_config(
        "agents.yaml",
        "agents:\n  - name: claude\n    agent_type: claude\n   bad indentation: [\n",
        4,
        &["invalid YAML", "indentation"],
    );
}

#[test]
fn unknown_field_suggests_the_nearest_name() {
    check_bad_config(
        "config.yaml",
        "poll_interval: 30s\nmax_concurent_agents: 4\n",
        2,
        &[
            "unknown field `max_concurent_agents`",
            "rename `max_concurent_agents` to `max_concurrent_agents`",
        ],
    );
}

#[test]
fn unknown_agent_in_a_rule() {
    check_bad_config(
        "routing.yaml",
        "rules:\n  - name: hard\n    match:\n      risk: high\n    agent: claud\ndefault:\n  agent: claude\n",
        5,
        &["rule `hard` names unknown agent `claud`", "use one of claude, codex, kimi, gemini"],
    );
}

#[test]
fn identity_without_a_volume() {
    check_bad_config(
        "identities.yaml",
        "identities:\n  - name: personal\n    api_keys: {}\n",
        2,
        &["identity `personal` has no volumes", "volumes"],
    );
}

#[test]
fn bad_duration() {
    check_bad_config(
        "config.yaml",
        "event_idle_timeout: 5 minutes-ish\n",
        1,
        &[
            "`event_idle_timeout` is not a valid duration",
            "30s, 5m or 1h30m",
        ],
    );
}

#[test]
fn wrong_type() {
    check_bad_config(
        "config.yaml",
        "max_concurrent_agents: lots\n",
        1,
        &["`max_concurrent_agents`", "whole number"],
    );
}

#[test]
fn duplicate_name() {
    check_bad_config(
        "agents.yaml",
        "agents:\n  - name: claude\n    agent_type: claude\n  - name: codex\n    agent_type: codex\n  - name: claude\n    agent_type: kimi\n",
        6,
        &["agent `claude` is defined twice", "unique"],
    );
}

#[test]
fn route_explain_shows_the_files_a_task_names() {
    let home = initialised();
    let repo = tempfile::tempdir().unwrap();
    let src = repo.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let session: String = (0..60)
        .map(|i| format!("fn refresh_token_{i}() {{ let lock = Mutex::new(0); }}\n"))
        .collect();
    std::fs::write(src.join("session.rs"), session).unwrap();
    std::fs::write(src.join("util.rs"), "fn refresh_token() {}\n").unwrap();
    git(repo.path(), &["init", "-q"]);
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-qm", "init"]);
    let out = polyphony(home.path())
        .args([
            "enqueue",
            "--repo",
            &repo.path().display().to_string(),
            "--type",
            "bugfix",
            "--body",
            "The token refresh in src/session.rs races; `refresh_token` is called from src/util.rs too.",
            "Fix the session refresh race",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    polyphony(home.path())
        .args(["route", &id, "--explain"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("src/session.rs (60 LOC)")
                .and(predicate::str::contains("src/util.rs"))
                .and(predicate::str::contains("refresh_token"))
                .and(predicate::str::contains("rule")),
        );
    let out = polyphony(home.path())
        .args(["route", &id, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["decision"]["agent"].is_string(), "{json}");
    polyphony(home.path())
        .args(["route", "local-99"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("polyphony status"));
}

#[test]
fn replay_reads_a_real_claude_transcript() {
    let home = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude");
    let out = polyphony(home.path())
        .args(["replay", "--agent", "claude", "--json"])
        .arg(fixtures.join("gump_write_file_success.ndjson"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"], "succeeded", "{json}");
    // A usage-limit stream is not a success: exit 1, status quota.
    let out = polyphony(home.path())
        .args(["replay", "--agent", "claude", "--json"])
        .arg(fixtures.join("usage_limit_constructed.ndjson"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"], "quota", "{json}");
    polyphony(home.path())
        .args(["replay", "--agent", "claude", "/nonexistent.ndjson"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot open transcript"));
}

#[test]
fn unsafe_settings_need_consent_then_warn_in_config_check_and_doctor() {
    // Without consent: exit 2 naming file, line, the setting and the fix.
    check_bad_config(
        "config.yaml",
        "container:\n  network: host\n",
        2,
        &["`container.network: host`", "allow_unsafe: true"],
    );
    let home = initialised();
    let config = home.path().join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text
        .replace("allow_unsafe: false", "allow_unsafe: true")
        .replace("network: bridge", "network: host");
    std::fs::write(&config, text).unwrap();
    let out = polyphony(home.path())
        .args(["config", "check", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("stdout stays JSON");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("warning: unsafe setting").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("config.yaml:"), "{stderr}");
    let out = polyphony(home.path()).arg("doctor").output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("unsafe setting (allow_unsafe)") && text.contains("network: host"),
        "{text}"
    );
}

/// A git repository with one commit (what `enqueue --repo` accepts).
fn committed_repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "r\n").unwrap();
    git(repo.path(), &["init", "-q"]);
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-qm", "init"]);
    repo
}

/// Issue 11 "Low": the home is 0700 and the store's files 0600, also for a home that
/// existed with wider permissions and a database an older version created 0644.
#[test]
fn home_and_store_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let home = initialised();
    assert_eq!(mode(home.path()), 0o700, "init leaves the home private");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let repo = committed_repo();
    let enqueue = || {
        polyphony(home.path())
            .args(["enqueue", "--repo"])
            .arg(repo.path())
            .args(["--body", "b", "Title"])
            .assert()
            .success();
    };
    enqueue();
    assert_eq!(mode(home.path()), 0o700);
    let db = home.path().join("queue.db");
    assert_eq!(mode(&db), 0o600);
    // A database an older version left 0644 (SQLite would give a new WAL that mode).
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    enqueue();
    for f in ["queue.db", "queue.db-wal", "queue.db-shm"] {
        let p = home.path().join(f);
        if p.exists() {
            assert_eq!(mode(&p), 0o600, "{f}");
        }
    }
    assert_eq!(mode(&db), 0o600);
}

/// Issue 11 "Low": a task whose title and body carry terminal escapes (a window-title OSC,
/// an OSC 8 link, a clear-screen CSI, a C1 CSI) prints none of them in `status` and
/// `route`; `--json` keeps its escaped text.
#[test]
fn status_and_route_strip_terminal_controls() {
    let home = initialised();
    let repo = committed_repo();
    let body = home.path().join("body.md");
    std::fs::write(
        &body,
        "Fix \u{1b}]8;;https://evil.example\u{1b}\\parser.rs\u{1b}]8;;\u{1b}\\ \u{9b}2J now",
    )
    .unwrap();
    polyphony(home.path())
        .args(["enqueue", "--repo"])
        .arg(repo.path())
        .args(["--label", "ok\u{1b}[8mhidden"])
        .arg("--body-file")
        .arg(&body)
        .arg("Title \u{1b}]0;pwned\u{7}\u{1b}[2Jafter")
        .assert()
        .success();
    for args in [
        vec!["status"],
        vec!["status", "local-1"],
        vec!["route", "local-1", "--explain"],
    ] {
        let out = polyphony(home.path()).args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            !text
                .chars()
                .any(|c| c == '\u{1b}' || c == '\u{7}' || c == '\u{9b}'),
            "{args:?} printed a control character: {text:?}"
        );
        assert!(!text.contains("pwned"), "{args:?}: {text}");
    }
    let out = polyphony(home.path())
        .args(["status", "local-1"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Title after"));
    let out = polyphony(home.path())
        .args(["status", "local-1", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["task"]["title"],
        "Title \u{1b}]0;pwned\u{7}\u{1b}[2Jafter"
    );
}

/// Issue 24: `retry` run by 10 processes at once makes one new generation, and only the
/// process that made it says so (exit 0, `retried`); the other nine say it was retried
/// meanwhile (exit 2, `skipped`).
#[test]
fn ten_concurrent_retries_report_only_the_one_that_happened() {
    use polyphony::domain::TaskState::{self, *};
    use polyphony::store::{BlockSettlement, Settlement, Store};
    let home = initialised();
    let repo = committed_repo();
    let out = polyphony(home.path())
        .args(["enqueue", "--repo"])
        .arg(repo.path())
        .arg("Fix it")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    {
        let store = Store::open(&home.path().join("queue.db")).unwrap();
        let now = chrono::Utc::now();
        let mut at = Discovered;
        for next in [Claimed, Routed, Provisioned, Running] {
            store.transition(&id, at, next, "setup", now).unwrap();
            at = next;
        }
        let block = Settlement {
            failures: 3,
            next_attempt_at: None,
            block: Some(BlockSettlement {
                reason: "out of attempts".into(),
                report: false,
                released: false,
            }),
        };
        let t = store
            .settle_failure(&id, at, "tests failed", &block, now)
            .unwrap();
        assert_eq!(t.state, TaskState::Blocked);
    }
    let bin = assert_cmd::cargo::cargo_bin("polyphony");
    let children: Vec<std::process::Child> = (0..10)
        .map(|_| {
            std::process::Command::new(&bin)
                .env("POLYPHONY_HOME", home.path())
                .env_remove("RUST_LOG")
                .args(["retry", &id, "--json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<std::process::Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let made: Vec<&std::process::Output> = outs.iter().filter(|o| o.status.success()).collect();
    let report = |o: &std::process::Output| {
        format!(
            "{:?}\n{}{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let all: Vec<String> = outs.iter().map(report).collect();
    assert_eq!(made.len(), 1, "{all:#?}");
    let r: serde_json::Value = serde_json::from_slice(&made[0].stdout).unwrap();
    assert_eq!(r["retried"][0]["task"], format!("{id}.2"), "{r:#}");
    for o in outs.iter().filter(|o| !o.status.success()) {
        assert_eq!(o.status.code(), Some(2), "{}", report(o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains(&format!("was retried as {id}.2")),
            "{}",
            report(o)
        );
    }
    let store = Store::open(&home.path().join("queue.db")).unwrap();
    let generations = store
        .list_tasks(None, None)
        .unwrap()
        .into_iter()
        .filter(|t| t.id.starts_with(&id))
        .count();
    assert_eq!(generations, 2, "one new generation");
}

/// Issue 29: `polyphony completions bash` is a script bash accepts.
#[test]
fn completions_are_valid_shell() {
    let home = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let out = polyphony(home.path())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains("enqueue"), "{shell} completes the verbs");
    }
    let out = polyphony(home.path())
        .args(["completions", "bash"])
        .output()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("polyphony.bash");
    std::fs::write(&file, &out.stdout).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .unwrap();
    assert!(check.status.success(), "bash -n: {check:?}");
    polyphony(home.path())
        .args(["completions", "tcsh"])
        .assert()
        .code(2);
}

/// Issue 29: the man page renders with `man -l`, with a section per verb and its examples.
#[test]
fn man_page_renders() {
    let home = tempfile::tempdir().unwrap();
    let out = polyphony(home.path()).arg("man").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("polyphony.1");
    std::fs::write(&page, &out.stdout).unwrap();
    if std::process::Command::new("man")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: man_page_renders needs `man` (Debian's man-db) to render the page");
        return;
    }
    let rendered = std::process::Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output()
        .unwrap();
    assert!(rendered.status.success(), "man -l: {rendered:?}");
    let text = String::from_utf8_lossy(&rendered.stdout);
    for verb in ["POLYPHONY SPAWN", "POLYPHONY ENQUEUE", "POLYPHONY DAEMON"] {
        assert!(text.contains(verb), "{verb} in\n{text}");
    }
    assert!(text.contains("EXIT STATUS"), "{text}");
    assert!(
        String::from_utf8_lossy(&rendered.stderr).trim().is_empty(),
        "man warns: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
}

/// Issue 29: every verb's `--help` ends with EXAMPLES (naming the verb) and EXIT STATUS,
/// a verb's own verbs (`config check`) included.
#[test]
fn every_verb_help_has_examples_and_exit_status() {
    use clap::CommandFactory as _;
    let home = tempfile::tempdir().unwrap();
    let cmd = polyphony::cli::Cli::command();
    let mut verbs: Vec<String> = Vec::new();
    for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        verbs.push(s.get_name().to_string());
        for sub in s.get_subcommands().filter(|s| !s.is_hide_set()) {
            verbs.push(format!("{} {}", s.get_name(), sub.get_name()));
        }
    }
    assert!(verbs.len() >= 15, "{verbs:?}");
    assert!(verbs.iter().any(|v| v == "config check"), "{verbs:?}");
    for verb in verbs {
        let out = polyphony(home.path())
            .args(verb.split(' '))
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "{verb} --help: {out:?}");
        let help = String::from_utf8(out.stdout).unwrap();
        let examples = help
            .split("EXAMPLES:")
            .nth(1)
            .unwrap_or_else(|| panic!("{verb} --help has no EXAMPLES:\n{help}"));
        assert!(
            examples.contains(&format!("polyphony {verb}")),
            "{verb}'s examples run {verb}:\n{help}"
        );
        assert!(help.contains("EXIT STATUS:"), "{verb}:\n{help}");
    }
}

/// Issue 29: `--version` names the commit the binary was built from.
#[test]
fn version_names_the_commit() {
    let home = tempfile::tempdir().unwrap();
    let out = polyphony(home.path()).arg("--version").output().unwrap();
    assert!(out.status.success());
    let version = String::from_utf8(out.stdout).unwrap();
    assert!(version.starts_with("polyphony 0."), "{version}");
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success());
    match head {
        Some(head) => {
            let head = String::from_utf8(head.stdout).unwrap();
            assert!(
                version.contains(&format!("(commit {})", head.trim())),
                "{version} names HEAD {head}"
            );
        }
        None => eprintln!("SKIPPED: the commit check needs the source to be a git checkout"),
    }
}

/// Issue 29: `--quiet` and `--verbose` contradict each other: a usage error.
#[test]
fn quiet_and_verbose_conflict() {
    let home = tempfile::tempdir().unwrap();
    polyphony(home.path())
        .args(["--quiet", "-v", "status"])
        .assert()
        .code(2);
}

/// Issue 29: `retry --now` runs a parked task at once: its usage-limit wait is taken as
/// over (the quota row ends now, the wait is forgotten) and its next attempt is due now;
/// a task not waiting for an attempt is refused with exit 2 and nothing changes.
#[test]
fn retry_now_makes_a_parked_task_due_and_clears_its_limit() {
    use chrono::{Duration, Utc};
    use polyphony::domain::{AgentQuota, AgentReset, QuotaWait, TaskState};
    let now = Utc::now();
    let later = now + Duration::minutes(55);
    let (home, store) = home_with_two_local_tasks(now);
    store.claim("local-1", now).unwrap().unwrap();
    store
        .transition(
            "local-1",
            TaskState::Claimed,
            TaskState::Failed,
            "parked",
            now,
        )
        .unwrap();
    store.set_retry("local-1", 0, Some(later)).unwrap();
    store
        .update_quota("personal", "claude", |_| AgentQuota {
            identity: "personal".into(),
            agent: "claude".into(),
            resets_at: later,
            reported: true,
            message: "limit".into(),
            task_id: Some("local-1".into()),
            attempt: Some(1),
            hit_at: now,
        })
        .unwrap();
    store
        .set_quota_wait(&QuotaWait {
            task_id: "local-1".into(),
            until: later,
            agent: "claude".into(),
            identity: "personal".into(),
            resets: vec![AgentReset {
                agent: "claude".into(),
                identity: "personal".into(),
                resets_at: later,
            }],
            parked_at: now,
        })
        .unwrap();

    let out = polyphony(home.path())
        .args(["retry", "--now", "local-1", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["task"], "local-1");
    assert_eq!(v["limits_cleared"][0]["agent"], "claude");
    assert_eq!(v["daemon_running"], false);
    let task = store.get_task("local-1").unwrap().unwrap();
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(task.failures, 0, "running now counts nothing");
    let due = task.next_attempt_at.expect("due");
    assert!(due <= Utc::now(), "{due}");
    assert!(store.quota_wait("local-1").unwrap().is_none());
    assert!(store.quota_out(Utc::now()).unwrap().is_empty());
    // Issue 29: who did it is in `status TASK --json` (`actions`, oldest first).
    let out = polyphony(home.path())
        .env("USER", "alice")
        .args(["status", "local-1", "--json"])
        .output()
        .unwrap();
    let detail: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let log = detail["actions"].as_array().expect("actions");
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(
        (
            log[0]["action"].as_str(),
            log[0]["via"].as_str(),
            log[0]["outcome"].as_str()
        ),
        (Some("run-now"), Some("cli"), Some("ok"))
    );
    assert!(
        log[0]["at"].is_string() && log[0]["by"].is_string(),
        "{log:?}"
    );
    // A cancel is recorded with the name given.
    polyphony(home.path())
        .args(["cancel", "local-1", "--by", "bob"])
        .assert()
        .success();
    let out = polyphony(home.path())
        .args(["status", "local-1", "--json"])
        .output()
        .unwrap();
    let detail: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let last = detail["actions"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (
            last["action"].as_str(),
            last["by"].as_str(),
            last["outcome"].as_str()
        ),
        (Some("cancel"), Some("bob"), Some("ok")),
        "{detail}"
    );

    // A DISCOVERED task has no attempt to bring forward.
    let out = polyphony(home.path())
        .args(["retry", "--now", "local-2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot run local-2 now: it is DISCOVERED"),
        "{err}"
    );
    assert_eq!(
        store.get_task("local-2").unwrap().unwrap().state,
        TaskState::Discovered
    );
}

/// Issue 24: a read-only home was reported as "cannot create the directory" (or SQLite's
/// "unable to open database file", exit 1). Every verb that opens the queue names the home,
/// says it is read-only and how to fix it, exit 2; a home to be made below a read-only
/// directory names that directory.
#[test]
fn a_read_only_home_is_reported_as_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = support::tmpfs::Tmpfs::mount(&dir.path().join("home"), "8m") else {
        return;
    };
    let home = disk.path().to_path_buf();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "init"]);
    polyphony(&home).arg("init").assert().success();
    polyphony(&home)
        .args(["enqueue", "--repo"])
        .arg(&repo)
        .arg("T")
        .assert()
        .success();
    disk.read_only();
    let repo_arg = repo.display().to_string();
    let verbs: Vec<Vec<&str>> = vec![
        vec!["status"],
        vec!["status", "--json"],
        vec!["status", "local-1"],
        vec!["enqueue", "--repo", &repo_arg, "U"],
        vec!["logs", "local-1"],
        vec!["route", "local-1"],
        vec!["retry", "local-1"],
        vec!["cleanup", "--dry-run"],
    ];
    for args in verbs {
        let out = polyphony(&home).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("Polyphony home {} is read-only", home.display()))
                && stderr.contains("fix:")
                && !stderr.contains("cannot create the directory"),
            "{args:?}: {stderr}"
        );
    }
    let below = home.join("new");
    let out = polyphony(&below)
        .args(["enqueue", "--repo", &repo_arg, "U"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{} is read-only", home.display())),
        "{stderr}"
    );
}

/// A home whose queue holds about `mib` MiB (a backup of it takes a while).
fn home_with_a_big_queue(mib: usize) -> tempfile::TempDir {
    let dir = initialised();
    let store = polyphony::store::Store::open(&dir.path().join("queue.db")).unwrap();
    for i in 0..mib {
        let mut t = support::spec::local_task(&format!("local-{i}"), chrono::Utc::now());
        t.body = format!("{i:08}").repeat(128 * 1024);
        assert!(store.insert_task(&t).unwrap());
    }
    dir
}

/// Backup temporaries, journals and breadcrumbs left in `dirs`.
fn backup_leftovers(dirs: &[&Path]) -> Vec<String> {
    let mut out = Vec::new();
    for d in dirs {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".polyphony-backup-") || name.ends_with(".pending") {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

/// Issue 24: `backup --force` onto a character device replaced the device node with a
/// regular file (as root, `/dev/full` itself). A device, FIFO, directory or symlink (to a
/// device) is refused, `--force` or not, and left exactly as it was.
#[test]
fn backup_never_replaces_a_device_fifo_directory_or_symlink() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let home = initialised();
    let repo = home.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "init"]);
    polyphony(home.path())
        .args(["enqueue", "--repo"])
        .arg(&repo)
        .arg("T")
        .assert()
        .success();
    let dir = tempfile::tempdir().unwrap();
    let chr = dir.path().join("null");
    let made = std::process::Command::new("mknod")
        .arg(&chr)
        .args(["c", "1", "3"])
        .output()
        .unwrap();
    if !made.status.success() {
        let why = String::from_utf8_lossy(&made.stderr).trim().to_string();
        if std::env::var_os("CI").is_some() {
            panic!("mknod is required under CI: {why}");
        }
        println!("SKIPPED: cannot mknod ({why})");
        return;
    }
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let sub = dir.path().join("dir");
    std::fs::create_dir(&sub).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&chr, &link).unwrap();
    for (target, kind) in [
        (&chr, "a character device"),
        (&fifo, "a FIFO"),
        (&sub, "a directory"),
        (&link, "a symlink"),
    ] {
        let before = std::fs::symlink_metadata(target).unwrap();
        let out = polyphony(home.path())
            .args(["backup", "--force"])
            .arg(target)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{kind}: {stderr}");
        assert!(
            stderr.contains(&target.display().to_string())
                && stderr.contains(kind)
                && stderr.contains("fix:"),
            "{kind}: {stderr}"
        );
        let after = std::fs::symlink_metadata(target).unwrap();
        assert_eq!(
            (before.ino(), before.mode(), before.rdev()),
            (after.ino(), after.mode(), after.rdev()),
            "{kind} untouched"
        );
    }
    assert!(std::fs::symlink_metadata(&chr)
        .unwrap()
        .file_type()
        .is_char_device());
    assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 0);
    assert!(backup_leftovers(&[dir.path(), home.path()]).is_empty());
}

/// Issue 24: SIGTERM or SIGINT during a backup of a large queue left a 145 MB temporary
/// and its journal. Now both go (and the breadcrumb), and the destination is never made.
#[test]
fn a_signal_during_a_backup_removes_its_temporary_and_journal() {
    use std::os::unix::process::ExitStatusExt;
    let home = home_with_a_big_queue(96);
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let out_dir = tempfile::tempdir().unwrap();
        let dest = out_dir.path().join("copy.db");
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("polyphony"))
            .env("POLYPHONY_HOME", home.path())
            .env_remove("RUST_LOG")
            .args(["backup"])
            .arg(&dest)
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while backup_leftovers(&[out_dir.path()]).is_empty() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "the backup never started"
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "finished before the signal"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(sig), "died of the signal: {status:?}");
        assert!(
            backup_leftovers(&[out_dir.path(), home.path()]).is_empty(),
            "left: {:?}",
            backup_leftovers(&[out_dir.path(), home.path()])
        );
        assert!(!dest.exists(), "no half backup");
    }
}

/// Issue 24: a SIGKILLed backup (the failpoint after the copy) leaves its temporary; the
/// next `cleanup` removes it, and the next `backup` removes one beside its file.
#[test]
fn backup_and_cleanup_remove_what_a_killed_backup_left() {
    use std::os::unix::process::ExitStatusExt;
    let home = home_with_a_big_queue(4);
    let out_dir = tempfile::tempdir().unwrap();
    let killed = |name: &str| {
        let out = polyphony(home.path())
            .env("POLYPHONY_FAILPOINT", "backup-copied")
            .arg("backup")
            .arg(out_dir.path().join(name))
            .output()
            .unwrap();
        assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out:?}");
        let left = backup_leftovers(&[out_dir.path(), home.path()]);
        assert!(left.len() >= 2, "a temporary and its breadcrumb: {left:?}");
    };
    killed("a.db");
    polyphony(home.path())
        .args(["cleanup"])
        .assert()
        .success()
        .stderr(predicate::str::contains("interrupted backups"));
    assert!(backup_leftovers(&[out_dir.path(), home.path()]).is_empty());

    killed("b.db");
    // Without the breadcrumb, the temporary beside the file still goes.
    for e in std::fs::read_dir(home.path()).unwrap().flatten() {
        if e.file_name().to_string_lossy().ends_with(".pending") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    polyphony(home.path())
        .arg("backup")
        .arg(out_dir.path().join("c.db"))
        .assert()
        .success()
        .stderr(predicate::str::contains("interrupted backups"));
    assert!(backup_leftovers(&[out_dir.path(), home.path()]).is_empty());
    assert!(out_dir.path().join("c.db").is_file());
}

/// Issue 29: `status` has a TITLE column, cut to fit the width (`COLUMNS`) with `…`, every
/// other column whole; a short title is shown whole.
#[test]
fn status_shows_titles_cut_to_fit() {
    let home = initialised();
    let long = "Make the parser keep the last line of every file it reads, including files \
                without a trailing newline";
    for title in [long, "Short one"] {
        polyphony(home.path())
            .args([
                "enqueue",
                "--repo",
                "https://example.com/a/b.git",
                "--no-check",
            ])
            .arg(title)
            .assert()
            .success();
    }
    let table = |columns: &str| {
        let out = polyphony(home.path())
            .env("COLUMNS", columns)
            .arg("status")
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let out = table("120");
    let lines: Vec<&str> = out.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["ID", "TITLE", "SOURCE", "STATE", "AGENT", "ATTEMPT", "AGE", "COST", "NEXT"],
        "{out}"
    );
    for line in &lines[..3] {
        assert!(
            line.chars().count() <= 120,
            "wider than 120: {line:?}\n{out}"
        );
    }
    let row = lines.iter().find(|l| l.starts_with("local-1 ")).unwrap();
    assert!(row.contains("Make the parser keep"), "{out}");
    assert!(
        row.contains('…') && !row.contains("trailing newline"),
        "{out}"
    );
    // The other columns stay whole, NEXT included.
    assert!(
        row.contains("local:local-1") && row.contains("DISCOVERED"),
        "{out}"
    );
    assert!(row.contains("no daemon: run `polyphony daemon`"), "{out}");
    let short = lines.iter().find(|l| l.starts_with("local-2 ")).unwrap();
    assert!(short.contains("Short one  "), "{out}");
    // Wide enough: the whole title.
    let wide = table("300");
    assert!(wide.contains(long), "{wide}");
}

/// Issue 29: `init --agents claude,codex` writes templates that define and route only to
/// those agents (the stock ones route web research to gemini, and define kimi); with one
/// agent, it is the default and every rule's; an unknown name is a usage error.
#[test]
fn init_agents_routes_only_to_the_named_agents() {
    let checked = |agents: &str| -> serde_json::Value {
        let home = tempfile::tempdir().unwrap();
        polyphony(home.path())
            .args(["init", "--agents", agents])
            .assert()
            .success();
        let out = polyphony(home.path())
            .args(["config", "check", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let identities = std::fs::read_to_string(home.path().join("identities.yaml")).unwrap();
        assert!(!identities.contains("gemini: ~/.gemini"), "{identities}");
        assert!(!identities.contains("kimi: ~/.kimi"), "{identities}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let named = |v: &serde_json::Value| -> Vec<String> {
        let mut all: Vec<String> = v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap().to_string())
            .collect();
        all.sort();
        all
    };
    let routed = |v: &serde_json::Value| -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        let rules = v["routing"]["rules"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for r in rules.iter().chain([&v["routing"]["default"]]) {
            out.insert(r["agent"].as_str().unwrap().to_string());
            for f in r["fallback"].as_array().unwrap() {
                out.insert(f.as_str().unwrap().to_string());
            }
        }
        out
    };
    let two = checked("claude,codex");
    assert_eq!(named(&two), ["claude", "codex"], "{}", two["agents"]);
    assert_eq!(
        routed(&two).into_iter().collect::<Vec<_>>(),
        ["claude", "codex"],
        "{}",
        two["routing"]
    );
    assert_eq!(two["routing"]["default"]["agent"], "claude");
    assert_eq!(
        two["routing"]["default"]["fallback"],
        serde_json::json!(["codex"])
    );
    assert!(
        !two["routing"]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "web-research"),
        "{}",
        two["routing"]
    );
    let one = checked("codex");
    assert_eq!(named(&one), ["codex"]);
    assert_eq!(routed(&one).into_iter().collect::<Vec<_>>(), ["codex"]);
    assert_eq!(one["routing"]["default"]["agent"], "codex");
    let home = tempfile::tempdir().unwrap();
    polyphony(home.path())
        .args(["init", "--agents", "claude,cursor"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no template agent `cursor`"));
}

/// Issue 27: `status TASK` names the machine whose daemon holds an active task's claim, in
/// its text and `--json` (`claim`), from any home on the shared store; a task at rest has
/// no claim shown.
#[test]
fn status_names_the_machine_running_a_task() {
    use chrono::Utc;
    use polyphony::domain::TaskState;
    use polyphony::store::{Owner, Store};
    let now = Utc::now();
    let (home, store) = home_with_two_local_tasks(now);
    let owner = Owner {
        machine: "build-7".into(),
        pid: 4242,
        nonce: "n1".into(),
    };
    let claimed = store
        .claim_next_owned(&owner, std::time::Duration::from_secs(60), now)
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, "local-1");
    drop(store);

    let out = polyphony(home.path())
        .args(["status", "local-1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("machine:  build-7 (daemon build-7/4242/n1, lease until"),
        "{text}"
    );
    let out = polyphony(home.path())
        .args(["status", "local-1", "--json"])
        .output()
        .unwrap();
    let detail: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(detail["task"]["state"], "CLAIMED", "{detail}");
    assert_eq!(detail["claim"]["machine"], "build-7", "{detail}");
    assert_eq!(detail["claim"]["owner"], "build-7/4242/n1", "{detail}");
    assert!(detail["claim"]["lease_until"].is_string(), "{detail}");

    // At rest: no claim, in either form.
    let store = Store::open(&home.path().join("queue.db")).unwrap();
    store
        .transition("local-1", TaskState::Claimed, TaskState::Failed, "x", now)
        .unwrap();
    drop(store);
    for id in ["local-1", "local-2"] {
        let out = polyphony(home.path())
            .args(["status", id, "--json"])
            .output()
            .unwrap();
        let detail: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(detail["claim"].is_null(), "{detail}");
        let out = polyphony(home.path())
            .args(["status", id])
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&out.stdout).contains("machine:"));
    }
}
