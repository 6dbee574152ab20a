//! Landing integrity (issue 11, "the pushed commit is the verified commit"; issue 23's
//! attacks on the agent's `.git` are in `landing_own.rs`): a hostile
//! scripted agent (images/test/fake, the `repoint-branch`, `exclude-hidden`, `fifo-index`,
//! `gitmodules`, `attr-filter`, `big-file` and `leak-secret` scenarios) drives the BUILT
//! binary through the real pipeline: real Docker, real git with a local bare origin, and the
//! stateful fake GitHub where the attack is about the orchestrator's token. Each attack must
//! fail safely: the attempt FAILED or BLOCKED with a clear reason (or, where the attack is
//! simply neutralised, exactly the verified commit lands), nothing unverified pushed, no
//! secret stored, no container left.
//!
//! Also: resuming one attempt after restarts is capped; `config check` warns about
//! unprotected check scripts; and, without Docker, the workspace layer refuses a nested
//! repository and a FIFO in the working tree, never opens one in `.git`, and writes a
//! check copy holding only the commit.
//!
//! Without an engine the Docker tests fail when `CI` is set, otherwise print `SKIPPED`.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use polyphony::demo::{write_home, write_sample_repo, FIX_DIRECTIVE};
use serde_json::Value;
use support::docker::test_image as image;
use support::fake_github::{FakeGithub, NewIssue};
use support::git::git;
use support::home::{output, text, Home};

const RUN_LIMIT: Duration = Duration::from_secs(240);
/// The secret the leaking agent's identity carries (never stored anywhere).
pub(crate) const SECRET: &str = "pp-test-secret-7f3c9a51d2e84b06";

/// The demo project (`add` subtracts, `sh test.sh` fails) as a bare origin, plus a branch
/// `evil` whose one commit only changes `.github/workflows/ci.yml`.
pub(crate) struct Origin {
    sample: support::home::Origin,
    pub(crate) path: PathBuf,
    evil: String,
}

impl Origin {
    pub(crate) fn new() -> Origin {
        let sample = support::home::Origin::new();
        let dir = sample.dir.path();
        let path = sample.path.clone();
        let work = dir.join("evil-work");
        git(
            dir,
            &["clone", "-q", &path.display().to_string(), "evil-work"],
        );
        std::fs::create_dir_all(work.join(".github/workflows")).expect("mkdir");
        std::fs::write(
            work.join(".github/workflows/ci.yml"),
            "on: push\njobs: { steal: { runs-on: ubuntu-latest, steps: [ { run: 'curl evil' } ] } }\n",
        )
        .expect("ci.yml");
        git(&work, &["checkout", "-q", "-b", "evil"]);
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", "ci: harmless"]);
        git(&work, &["push", "-q", "origin", "evil"]);
        let evil = git(&work, &["rev-parse", "HEAD"]);
        Origin { sample, path, evil }
    }

    pub(crate) fn url(&self) -> String {
        self.sample.url()
    }

    /// Branches under `polyphony/` in the origin, with their tips.
    pub(crate) fn pushed(&self) -> Vec<(String, String)> {
        git(
            &self.path,
            &[
                "for-each-ref",
                "--format=%(refname:short) %(objectname)",
                "refs/heads/polyphony/",
            ],
        )
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(b, s)| (b.to_string(), s.to_string()))
        .collect()
    }

    /// `path` at `rev` in the origin (trimmed).
    pub(crate) fn show_file(&self, rev: &str, path: &str) -> String {
        git(&self.path, &["show", &format!("{rev}:{path}")])
    }

    pub(crate) fn main_sha(&self) -> String {
        git(&self.path, &["rev-parse", "main"])
    }
}

impl Home {
    /// A home running every agent as `claude` in the test image; `verify` is appended to
    /// config.yaml's `verify:` section. Runs log at `info` and carry the identity's secret.
    pub(crate) fn for_landing(
        image: &str,
        max_attempts: u32,
        verify: &str,
        github: Option<&FakeGithub>,
    ) -> Home {
        let (dir, path) = Home::temp();
        write_home(&path, dir.path(), image).expect("home");
        std::fs::write(
            path.join("config.yaml"),
            format!(
                "poll_interval: 30s\nmax_concurrent_agents: 2\nevent_idle_timeout: 1m\nmax_attempts: {max_attempts}\ndefault_identity: demo\negress:\n  mode: none\ncontainer:\n  image: {image}\n  deadline: 2m\n  memory: 512m\n  cpus: 1\nverify:\n  timeout: 1m\n{verify}"
            ),
        )
        .expect("config.yaml");
        std::fs::write(
            path.join("routing.yaml"),
            "default:\n  agent: claude\n  fallback: []\n",
        )
        .expect("routing.yaml");
        let logins = dir.path().join("logins");
        std::fs::write(
            path.join("identities.yaml"),
            format!(
                "identities:\n  - name: demo\n    volumes:\n      claude: {}\n    api_keys:\n      LEAKY_API_KEY: POLYPHONY_LANDING_SECRET\n",
                logins.join("claude").display()
            ),
        )
        .expect("identities.yaml");
        Home::at(dir, path, github)
            .with_env("POLYPHONY_LANDING_SECRET", SECRET)
            .with_env("RUST_LOG", "info")
            .with_run_limit(RUN_LIMIT)
    }

    /// Enqueues a local task whose agent plays `scenario` (then `extra` in the body).
    pub(crate) async fn enqueue_scenario(
        &self,
        origin: &Origin,
        scenario: &str,
        extra: &str,
    ) -> String {
        let body = format!("Fix add().\n\npolyphony-fake: {scenario}\n{FIX_DIRECTIVE}\n{extra}");
        self.enqueue(&origin.path, &body, &format!("Fix add() ({scenario})"))
            .await
    }

    /// Every file under the home (database, transcripts, logs) holding `needle`.
    pub(crate) fn files_containing(&self, needle: &str) -> Vec<PathBuf> {
        let mut hits = Vec::new();
        let mut stack = vec![self.path.clone()];
        while let Some(p) = stack.pop() {
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                if p.ends_with("workspaces") || p.ends_with("mirrors") {
                    continue;
                }
                stack.extend(
                    std::fs::read_dir(&p)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path()),
                );
            } else if meta.is_file() {
                let bytes = std::fs::read(&p).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    hits.push(p);
                }
            }
        }
        hits
    }
}

pub(crate) fn state(v: &Value) -> &str {
    v["task"]["state"].as_str().unwrap_or("")
}

/// Every attempt's reason, joined (what `status` shows the operator).
pub(crate) fn reasons(v: &Value) -> String {
    v["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a["reason"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Spawns a local task of `scenario` that must not land; returns its status.
pub(crate) async fn refused(home: &Home, origin: &Origin, scenario: &str, extra: &str) -> Value {
    let id = home.enqueue_scenario(origin, scenario, extra).await;
    let out = home.run(&["spawn", "--task", &id]).await;
    assert_eq!(out.status.code(), Some(1), "spawn: {}", output(&out));
    let v = home.task(&id).await;
    assert!(
        matches!(state(&v), "FAILED" | "BLOCKED"),
        "{scenario}: {}",
        serde_json::to_string_pretty(&v).unwrap_or_default()
    );
    assert!(
        origin.pushed().is_empty(),
        "{scenario}: nothing may be pushed: {:?}",
        origin.pushed()
    );
    assert!(home.containers().is_empty(), "{scenario}: containers left");
    v
}

// ---------------------------------------------------------------------------- tests

/// The check script (`sh test.sh`, rewritten by the agent) repoints the attempt branch at a
/// commit that only changes `.github/workflows/ci.yml`. Checks run on a clean checkout with
/// no `.git`, and the push names the verified sha: exactly that commit lands, with the
/// orchestrator's token, and the PR's branch is it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_repoints_the_branch_cannot_change_what_is_pushed() {
    let Some(image) = image().await else { return };
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = "acme/calc-repoint";
    fake.add_repo(repo, &origin.url(), "main");
    let n = fake.add_issue(
        repo,
        NewIssue::new("Fix add()")
            .body(&format!(
                "Fix add().\n\npolyphony-fake: repoint-branch\n{FIX_DIRECTIVE}\n"
            ))
            .labels(&["agent-ready"]),
    );
    let home = Home::for_landing(&image, 1, "", Some(&fake));
    let issue = format!("{repo}#{n}");
    let out = home.run(&["spawn", &issue]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));

    let v = home.task(&issue).await;
    assert_eq!(state(&v), "LANDED", "{}", reasons(&v));
    let landed_sha = v["landing"]["commit_sha"].as_str().expect("commit_sha");
    let pushed = origin.pushed();
    assert_eq!(pushed.len(), 1, "{pushed:?}");
    let (branch, tip) = &pushed[0];
    assert_eq!(
        tip, landed_sha,
        "the remote holds exactly the verified commit"
    );
    assert_ne!(tip, &origin.evil, "the repointed commit was pushed");
    assert_eq!(
        git(&origin.path, &["rev-parse", &format!("{tip}^")]),
        origin.main_sha(),
        "one commit on the base"
    );
    let changed = git(
        &origin.path,
        &["diff", "--name-only", &origin.main_sha(), tip],
    );
    assert!(!changed.contains(".github"), "{changed}");
    assert!(git(&origin.path, &["show", &format!("{tip}:calc.sh")]).contains("a + b"));
    let pulls = fake.pulls(repo);
    assert_eq!(pulls.len(), 1);
    assert_eq!(&pulls[0].head, branch);
    assert!(home.containers().is_empty(), "containers left");
}

/// With `verify.protect_check_scripts`, the same attack is refused at the gate: the agent
/// rewrote `test.sh`, which the check runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_check_scripts_refuse_a_rewritten_check() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::for_landing(&image, 1, "  protect_check_scripts: true\n", None);
    let v = refused(&home, &origin, "repoint-branch", "").await;
    let why = reasons(&v);
    assert!(
        why.contains("protected-paths") && why.contains("test.sh"),
        "{why}"
    );
}

/// The agent's fix lives in a file its `.git/info/exclude` lists. That file is the agent's
/// `.git`, which is never read (issue 23): the fix is part of the working tree, so it is
/// committed, judged by the checks on the clean checkout, and lands in plain sight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_listed_in_info_exclude_is_committed_and_judged() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::for_landing(&image, 1, "", None);
    let id = home.enqueue_scenario(&origin, "exclude-hidden", "").await;
    let out = home.run(&["spawn", "--task", &id]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));
    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED", "{}", reasons(&v));
    let tip = v["landing"]["commit_sha"].as_str().expect("commit_sha");
    let changed = git(
        &origin.path,
        &["diff", "--name-only", &origin.main_sha(), tip],
    );
    assert_eq!(
        changed, ".fix.sh\nPOLYPHONY_FAKE.md\ncalc.sh",
        "the excluded fix is in the commit"
    );
    assert!(git(&origin.path, &["show", &format!("{tip}:.fix.sh")]).contains("$1 + $2"));
}

/// Issue 11: a FIFO at `.git/index` once hung host-side git forever. Issue 23 reads nothing
/// in `.git`, so the FIFO is never opened: both the FIFO task and the next one land, each
/// with exactly its verified commit, and the daemon exits when idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_git_is_never_opened_and_the_daemon_carries_on() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::for_landing(&image, 1, "", None);
    let fifo = home.enqueue_scenario(&origin, "fifo-index", "").await;
    let good = home.enqueue_scenario(&origin, "succeed", "").await;
    let out = home.run(&["daemon", "--exit-when-idle"]).await;
    assert!(out.status.success(), "daemon: {}", output(&out));
    let mut landed = Vec::new();
    for id in [&fifo, &good] {
        let v = home.task(id).await;
        assert_eq!(state(&v), "LANDED", "{}", reasons(&v));
        landed.push(
            v["landing"]["commit_sha"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
    }
    let mut pushed: Vec<String> = origin.pushed().into_iter().map(|(_, s)| s).collect();
    pushed.sort();
    landed.sort();
    assert_eq!(pushed, landed, "exactly the verified commits");
    assert!(home.containers().is_empty(), "containers left");
}

/// `.gitmodules` and `.gitattributes` filter changes are refused by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submodule_and_filter_attribute_changes_are_refused() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::for_landing(&image, 1, "", None);
    let v = refused(&home, &origin, "gitmodules", "").await;
    let why = reasons(&v);
    assert!(
        why.contains("submodules") && why.contains(".gitmodules"),
        "{why}"
    );
    let v = refused(&home, &origin, "attr-filter", "").await;
    let why = reasons(&v);
    assert!(
        why.contains("attributes") && why.contains(".gitattributes"),
        "{why}"
    );
}

/// A file above `verify.max_file_size` is refused, naming the file and its size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_over_the_size_limit_is_refused() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::for_landing(&image, 1, "  max_file_size: 1m\n", None);
    let v = refused(&home, &origin, "big-file", "polyphony-fake-size: 2097152\n").await;
    let why = reasons(&v);
    assert!(why.contains("big.bin (2097152 bytes)"), "{why}");
}

/// The agent writes its identity's API key into a file: the task is BLOCKED at once (no
/// retry although max_attempts is 3), the reason names the variable, and the value is in
/// no stored file, log or branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_the_diff_blocks_the_task_without_retry() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::for_landing(&image, 3, "", None);
    let id = home
        .enqueue_scenario(
            &origin,
            "leak-secret",
            "polyphony-fake-echo: LEAKY_API_KEY\n",
        )
        .await;
    let out = home.run(&["spawn", "--task", &id]).await;
    assert_eq!(out.status.code(), Some(1), "spawn: {}", output(&out));
    assert!(!text(&out.stdout).contains(SECRET) && !text(&out.stderr).contains(SECRET));
    let v = home.task(&id).await;
    assert_eq!(state(&v), "BLOCKED", "{v:#}");
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(1), "no retry");
    let why = reasons(&v);
    assert!(
        why.contains("LEAKY_API_KEY") && why.contains("leak.txt"),
        "{why}"
    );
    assert!(!why.contains(SECRET));
    assert!(origin.pushed().is_empty(), "{:?}", origin.pushed());
    let hits = home.files_containing(SECRET);
    assert!(hits.is_empty(), "the secret reached {hits:?}");
    assert!(home.containers().is_empty(), "containers left");
}

// ------------------------------------------------------------- workspace layer, no Docker

fn prepared(
    dir: &Path,
) -> (
    polyphony::workspace::WorkspaceManager,
    polyphony::workspace::Workspace,
) {
    let origin = write_sample_repo(dir).expect("sample repo");
    let manager = polyphony::workspace::WorkspaceManager::new(dir.join("ws"), dir.join("mirrors"));
    let ws = manager
        .prepare(&polyphony::workspace::PrepareRequest {
            repo: origin.display().to_string(),
            task_id: "local-1".into(),
            attempt: 1,
            base_ref: None,
            branch: "polyphony/local-1-a1".into(),
            token: None,
            owner: None,
        })
        .expect("prepare");
    (manager, ws)
}

fn author() -> polyphony::workspace::Author {
    polyphony::workspace::Author {
        name: "Polyphony".into(),
        email: "p@example.invalid".into(),
    }
}

/// A nested repository the agent left in its tree (git would record it as a submodule,
/// reading its `.git`): refused at the commit, naming the directory; nothing is read from it.
#[test]
fn an_embedded_repository_is_refused_at_the_commit() {
    let dir = tempfile::tempdir().expect("tmp");
    let (manager, ws) = prepared(dir.path());
    let nested = ws.path.join("vendor/lib");
    std::fs::create_dir_all(&nested).expect("mkdir");
    git(&nested, &["init", "-q"]);
    std::fs::write(nested.join("x"), "x").expect("w");
    git(&nested, &["add", "x"]);
    git(&nested, &["commit", "-qm", "x"]);
    let err = manager
        .commit_once(
            &ws,
            &author(),
            "land",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .expect_err("refused");
    assert!(
        err.to_string()
            .contains("vendor/lib holds a nested repository"),
        "{err}"
    );
}

/// Issue 11 once hung on a FIFO at `.git/index`; issue 23 reads nothing in `.git`, so that
/// FIFO is never opened and the right tree lands at once. A FIFO in the working tree itself
/// is refused without blocking, naming it.
#[test]
fn a_fifo_in_git_is_never_opened_and_one_in_the_tree_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let (manager, ws) = prepared(dir.path());
    let mkfifo = |p: &Path| {
        let c = std::ffi::CString::new(p.display().to_string()).expect("path");
        // SAFETY: mkfifo(3) on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    };
    let index = ws.path.join(".git/index");
    std::fs::remove_file(&index).expect("rm index");
    mkfifo(&index);
    std::fs::write(ws.path.join("notes.txt"), "n\n").expect("w");
    let started = std::time::Instant::now();
    let out = manager
        .commit_once(
            &ws,
            &author(),
            "land",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .expect("commit");
    assert_eq!(out.changed_paths, ["notes.txt"]);
    mkfifo(&ws.path.join("pipe"));
    let err = manager
        .commit_once(
            &ws,
            &author(),
            "land",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .expect_err("refused");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(err.to_string().contains("/pipe\": it is a FIFO"), "{err}");
}

/// The clean checkout holds the commit's files only: no `.git`, nothing the working tree's
/// `.gitignore` ignores. `.git/info/exclude` is the agent's `.git` and is not read (issue
/// 23): a file it lists is part of the working tree, so it lands and is judged.
#[test]
fn the_check_copy_holds_only_the_commit() {
    let dir = tempfile::tempdir().expect("tmp");
    let (manager, ws) = prepared(dir.path());
    std::fs::write(ws.path.join("calc.sh"), "add() { echo $(($1 + $2)); }\n").expect("w");
    std::fs::write(ws.path.join(".hidden"), "x").expect("w");
    std::fs::write(ws.path.join(".git/info/exclude"), "/.hidden\n").expect("w");
    std::fs::write(ws.path.join(".gitignore"), "target/\n").expect("w");
    std::fs::create_dir_all(ws.path.join("target")).expect("mkdir");
    std::fs::write(ws.path.join("target/build.o"), "artefact").expect("w");
    let sha = manager
        .commit_once(
            &ws,
            &author(),
            "land",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .expect("commit")
        .sha
        .expect("sha");
    // The agent's branch moving afterwards changes nothing: the copy is of the sha.
    git(
        &ws.path,
        &[
            "update-ref",
            "refs/heads/polyphony/local-1-a1",
            &ws.base_sha,
        ],
    );
    let dest = dir.path().join("ws").join("copy");
    manager.checkout(&ws, &sha, &dest, None).expect("checkout");
    assert!(!dest.join(".git").exists());
    assert!(!dest.join("target").exists(), "an ignored build artefact");
    assert_eq!(
        std::fs::read_to_string(dest.join(".hidden")).expect(".hidden"),
        "x"
    );
    assert!(std::fs::read_to_string(dest.join("calc.sh"))
        .expect("calc.sh")
        .contains("$1 + $2"));
    assert!(dest.join("test.sh").exists());
}

/// `config check` warns when a verify command runs a repository file the agent may change,
/// and is quiet once the file is protected (or `protect_check_scripts` is set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_warns_about_unprotected_check_scripts() {
    for (verify, warns) in [
        ("  test: sh test.sh\n  lint: make lint\n", true),
        (
            "  test: sh test.sh\n  lint: make lint\n  protected_paths: ['.github/**', test.sh, Makefile]\n",
            false,
        ),
        ("  test: sh test.sh\n  protect_check_scripts: true\n", false),
    ] {
        let home = Home::for_landing("img:1", 1, verify, None);
        let out = home.run(&["config", "check"]).await;
        assert!(out.status.success(), "{}", output(&out));
        let err = text(&out.stderr);
        assert_eq!(
            err.contains("verify.test runs `test.sh`, which the agent may change"),
            warns,
            "{verify}: {err}"
        );
        assert_eq!(err.contains("verify.lint runs `Makefile`"), warns, "{err}");
    }
}

/// Issue 24 (replacing issue 11's cap on every resume): killing the daemon with -9 while an
/// attempt runs is never the attempt's doing. Five kills of a running (here: endless) agent
/// resume the same attempt five times; nothing is given up, no failure is counted, the
/// attempt is still the one running, and a SIGTERM after them counts nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_while_an_attempt_runs_never_count_against_it() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::for_landing(&image, 1, "", None);
    let id = home.enqueue_scenario(&origin, "hang", "").await;
    let events = || -> i64 {
        home.db()
            .query_row(
                "SELECT COUNT(*) FROM events WHERE task_id = ?1 AND attempt = 1",
                [&id],
                |r| r.get(0),
            )
            .unwrap_or(0)
    };
    // Round 0 runs the attempt; rounds 1-5 resume it (the old cap gave it up at round 4).
    let mut seen = 0;
    for round in 0..=5u32 {
        let mut daemon = home.start(&["daemon"]);
        let started = std::time::Instant::now();
        loop {
            let v = home.task(&id).await;
            assert!(
                matches!(
                    state(&v),
                    "DISCOVERED" | "CLAIMED" | "ROUTED" | "PROVISIONED" | "RUNNING"
                ),
                "round {round}: {}\n{v:#}",
                reasons(&v)
            );
            // Killed once this daemon stored output of its own (it re-attached).
            if state(&v) == "RUNNING"
                && events() > seen + 1
                && !home.containers_where("status=running").is_empty()
            {
                seen = events();
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "round {round}: {v:#}\n{}",
                daemon.log()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // SIGKILL: the container stays and the next daemon re-attaches to it.
        daemon.child.start_kill().expect("kill -9");
        let _ = daemon.child.wait().await;
    }
    let v = home.task(&id).await;
    assert_eq!(state(&v), "RUNNING", "{v:#}");
    assert_eq!(v["task"]["failures"], 0, "{v:#}");
    let attempts = v["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "{attempts:#?}");
    assert!(attempts[0]["status"].is_null(), "{attempts:#?}");
    let strikes: Option<String> = home
        .db()
        .query_row(
            "SELECT value FROM kv WHERE key = ?1",
            [format!("strikes:{id}:1")],
            |r| r.get(0),
        )
        .ok();
    assert_eq!(strikes, None, "a kill from outside is no strike");
    // A clean stop ends the run and leaves no container.
    let mut last = home.start(&["daemon"]);
    home.wait_for(&id, Duration::from_secs(30), &|| last.log(), |v| {
        state(v) == "RUNNING"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    last.signal(libc::SIGTERM);
    let status = last.wait(Duration::from_secs(60)).await;
    assert!(status.success(), "{}", last.log());
    // A shutdown is not a failure either (it leaves the attempt for the next start).
    let v = home.task(&id).await;
    assert_eq!(v["task"]["failures"], 0, "{v:#}");
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(1), "{v:#}");
}

/// Issue 27: with the queue on a PostgreSQL server (`POLYPHONY_STORE_URL`), the daemon
/// claims, runs, verifies and lands a local task, and `status` and `logs` read it back
/// from the server: the home holds no queue.db. Needs the test server
/// (`POLYPHONY_TEST_PG_URL`, scripts/pg-test-cluster.sh): SKIPPED without, failing with `CI`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_on_a_postgresql_store_lands_and_status_and_logs_read_it_back() {
    // The admin connection blocks: off the test's runtime.
    let pg =
        tokio::task::spawn_blocking(|| crate::store_contract::postgres("daemon_on_postgresql"))
            .await
            .expect("create the test database");
    let Some(pg) = pg else { return };
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let url = pg.handle.to_string();
    let home = Home::for_landing(&image, 1, "", None).with_env("POLYPHONY_STORE_URL", &url);
    let id = home.enqueue_scenario(&origin, "succeed", "").await;
    let out = home.run(&["daemon", "--exit-when-idle"]).await;
    assert!(out.status.success(), "daemon: {}", output(&out));
    let v = home.task(&id).await;
    assert_eq!(state(&v), "LANDED", "{}", reasons(&v));
    let sha = v["landing"]["commit_sha"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert_eq!(
        origin
            .pushed()
            .into_iter()
            .map(|(_, s)| s)
            .collect::<Vec<_>>(),
        vec![sha],
        "exactly the verified commit"
    );
    let listed = home.tasks().await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["state"], "LANDED");
    assert_eq!(listed[0]["agent"], "claude");
    let logs = home.run(&["logs", &id]).await;
    assert!(logs.status.success(), "logs: {}", output(&logs));
    assert!(
        !text(&logs.stdout).trim().is_empty(),
        "logs printed nothing"
    );
    assert!(
        !home.path.join("queue.db").exists(),
        "a verb opened the home's SQLite file instead of the server"
    );
    // The server holds it: another connection reads the same task.
    let store = pg.handle.open().expect("the server");
    assert_eq!(
        store.get_task(&id).unwrap().map(|t| t.state),
        Some(polyphony::domain::TaskState::Landed)
    );
    assert!(store.event_count(&id, 1).unwrap() > 0, "events stored");
    drop(store);
    assert!(home.containers().is_empty(), "containers left");
}
