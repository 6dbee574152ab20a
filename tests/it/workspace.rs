//! Workspace manager against real git repositories: a local bare origin with history, the
//! mirror cache, clones per attempt, commit, push, cleanup (spec §6, issue 4).

use crate::support;

use polyphony::workspace::{
    branch_name, disk_usage, own_repo_path, task_key, Author, CloneMode, PrepareRequest, Workspace,
    WorkspaceError, WorkspaceManager,
};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use support::git::{git_as, write_file as write};

/// Upstream's history is written as this author.
fn git(dir: &Path, args: &[&str]) -> String {
    git_as(("Upstream Dev", "dev@example.com"), dir, args)
}

/// Runs git for the test's own setup (not the code under test), hermetically.
/// A temp dir holding `work/` (a checkout with history), `origin.git` (bare), `ws/` and
/// `mirrors/` roots.
struct Fixture {
    tmp: tempfile::TempDir,
    mgr: Arc<WorkspaceManager>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with_mode(CloneMode::default())
    }

    fn with_mode(mode: CloneMode) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        write(&work.join("README.md"), "hello\n");
        write(&work.join(".polyphony.yaml"), "from: base\n");
        write(&work.join(".gitignore"), "*.log\n");
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", "initial"]);
        for i in 0..5 {
            write(
                &work.join(format!("src/mod{i}.rs")),
                &format!("pub fn f{i}() {{}}\n"),
            );
            git(&work, &["add", "-A"]);
            git(&work, &["commit", "-qm", &format!("add mod{i}")]);
        }
        git(&work, &["tag", "v1"]);
        git(&work, &["checkout", "-qb", "develop"]);
        write(&work.join(".polyphony.yaml"), "from: develop\n");
        git(&work, &["commit", "-qam", "develop config"]);
        git(&work, &["checkout", "-q", "main"]);
        git(tmp.path(), &["clone", "-q", "--bare", "work", "origin.git"]);
        git(&work, &["remote", "add", "origin", "../origin.git"]);
        let mgr = Arc::new(
            WorkspaceManager::new(tmp.path().join("ws"), tmp.path().join("mirrors"))
                .with_clone_mode(mode),
        );
        Fixture { tmp, mgr }
    }

    fn origin(&self) -> String {
        self.tmp.path().join("origin.git").display().to_string()
    }

    fn work(&self) -> PathBuf {
        self.tmp.path().join("work")
    }

    fn request(&self, task: &str, attempt: u32) -> PrepareRequest {
        PrepareRequest {
            repo: self.origin(),
            task_id: task.into(),
            attempt,
            base_ref: None,
            branch: branch_name("polyphony/", &task_key(task).unwrap(), attempt),
            token: None,
            owner: None,
        }
    }

    fn prepare(&self, task: &str, attempt: u32) -> Workspace {
        self.mgr.prepare(&self.request(task, attempt)).unwrap()
    }

    /// A new upstream commit on main; returns its sha.
    fn upstream_commit(&self, file: &str) -> String {
        let work = self.work();
        write(&work.join(file), "new upstream content\n");
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", &format!("upstream {file}")]);
        git(&work, &["push", "-q", "origin", "main"]);
        git(&work, &["rev-parse", "HEAD"])
    }

    fn mirror(&self) -> PathBuf {
        self.mgr.mirror_path(&self.origin()).unwrap()
    }
}

fn author() -> Author {
    Author {
        name: "Polyphony".into(),
        email: "polyphony@localhost".into(),
    }
}

#[test]
fn clone_branch_commit_push_round_trip() {
    let fx = Fixture::with_mode(CloneMode::Dissociate);
    let ws = fx.prepare("owner/repo#42", 1);
    let key = task_key("owner/repo#42").unwrap();
    let root = fx.tmp.path().join("ws").canonicalize().unwrap();
    assert_eq!(ws.path, root.join(&key).join("1"));
    assert_eq!(ws.branch, format!("polyphony/{key}-a1"));
    assert_eq!(ws.base_ref, "main");
    assert_eq!(ws.base_sha, git(&fx.work(), &["rev-parse", "main"]));
    assert!(ws.used_mirror && ws.mirror_note.is_none());
    assert_eq!(
        git(&ws.path, &["symbolic-ref", "--short", "HEAD"]),
        ws.branch
    );
    // origin is the real upstream, not the mirror.
    assert_eq!(git(&ws.path, &["remote", "get-url", "origin"]), fx.origin());
    assert!(!ws.path.join(".git/objects/info/alternates").exists());

    write(&ws.path.join("src/new.rs"), "pub fn new() {}\n");
    std::fs::remove_file(ws.path.join("src/mod0.rs")).unwrap();
    write(&ws.path.join("debug.log"), "ignored\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "polyphony: owner/repo#42 attempt 1",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert!(out.created_commit && !out.empty);
    assert_eq!(out.changed_paths, vec!["src/mod0.rs", "src/new.rs"]);
    let tip = out.sha.unwrap();
    fx.mgr.push(&ws, None, None).unwrap();

    let origin = fx.tmp.path().join("origin.git");
    let log = git(&origin, &["log", "--format=%H %an <%ae> %s", &ws.branch]);
    let first = log.lines().next().unwrap();
    assert_eq!(
        first,
        format!("{tip} Polyphony <polyphony@localhost> polyphony: owner/repo#42 attempt 1")
    );
    assert_eq!(
        git(&origin, &["rev-parse", &format!("{}^", ws.branch)]),
        ws.base_sha
    );
}

#[test]
fn second_attempt_on_warm_mirror_fetches_only_new_objects() {
    let fx = Fixture::new();
    fx.prepare("t", 1);
    let mirror = fx.mirror();
    let ino = std::fs::metadata(&mirror).unwrap().ino();
    let packs = |m: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(m.join("objects/pack"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".pack"))
            .collect();
        v.sort();
        v
    };
    let packs_before = packs(&mirror);
    let loose_before = count_loose(&mirror);

    let new_sha = fx.upstream_commit("fresh.txt");
    let ws2 = fx.prepare("t", 2);
    assert_eq!(ws2.base_sha, new_sha);
    assert!(ws2.used_mirror);
    // Same mirror directory (not re-cloned), old packs untouched, only the new commit's
    // handful of objects (commit, tree, blob) added.
    assert_eq!(std::fs::metadata(&mirror).unwrap().ino(), ino);
    let packs_after = packs(&mirror);
    assert!(packs_before.iter().all(|p| packs_after.contains(p)));
    let added_loose = count_loose(&mirror) - loose_before;
    let added_packs = packs_after.len() - packs_before.len();
    assert!(
        (added_loose == 3 && added_packs == 0) || (added_loose == 0 && added_packs == 1),
        "loose +{added_loose}, packs +{added_packs}"
    );
    assert_eq!(git(&mirror, &["rev-parse", "main"]), new_sha);
}

fn count_loose(repo: &Path) -> u64 {
    let out = git(repo, &["count-objects", "-v"]);
    out.lines()
        .find_map(|l| l.strip_prefix("count: "))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn dissociated_clone_survives_mirror_deletion() {
    let fx = Fixture::with_mode(CloneMode::Dissociate);
    let ws = fx.prepare("t", 1);
    std::fs::remove_dir_all(fx.mirror()).unwrap();
    git(&ws.path, &["fsck", "--full", "--strict"]);
    let log = git(&ws.path, &["log", "--format=%s"]);
    assert_eq!(log.lines().count(), 6);
    assert!(log.ends_with("initial"));
    // A later attempt rebuilds the mirror.
    let ws2 = fx.prepare("t", 2);
    assert!(ws2.used_mirror);
}

#[test]
fn four_concurrent_attempts_on_one_repo() {
    let fx = Fixture::new();
    // Cold mirror: the first use races too.
    let handles: Vec<_> = (1..=4)
        .map(|attempt| {
            let mgr = Arc::clone(&fx.mgr);
            let req = fx.request("concurrent", attempt);
            std::thread::spawn(move || mgr.prepare(&req))
        })
        .collect();
    let mut paths = Vec::new();
    for h in handles {
        let ws = h.join().unwrap().unwrap();
        assert!(ws.used_mirror, "{:?}", ws.mirror_note);
        git(&ws.path, &["fsck", "--full"]);
        paths.push(ws.path);
    }
    paths.sort();
    paths.dedup();
    assert_eq!(paths.len(), 4);
    let mirrors: Vec<_> = std::fs::read_dir(fx.tmp.path().join("mirrors"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".git"))
        .collect();
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
}

#[test]
fn base_ref_branch_tag_commit_and_missing() {
    let fx = Fixture::new();
    let cases = [
        ("develop", git(&fx.work(), &["rev-parse", "develop"])),
        (
            "refs/heads/develop",
            git(&fx.work(), &["rev-parse", "develop"]),
        ),
        ("v1", git(&fx.work(), &["rev-parse", "v1^{commit}"])),
        ("main~2", git(&fx.work(), &["rev-parse", "main~2"])),
    ];
    for (i, (base, sha)) in cases.iter().enumerate() {
        let mut req = fx.request("bases", i as u32 + 1);
        req.base_ref = Some(base.to_string());
        let ws = fx.mgr.prepare(&req).unwrap();
        assert_eq!(&ws.base_sha, sha, "{base}");
        assert_eq!(&ws.base_ref, base);
        assert_eq!(git(&ws.path, &["rev-parse", "HEAD"]), *sha);
    }
    let mut req = fx.request("bases", 9);
    req.base_ref = Some("no-such-branch".into());
    let err = fx.mgr.prepare(&req).unwrap_err();
    assert!(
        matches!(err, WorkspaceError::BaseRefNotFound { .. }),
        "{err}"
    );
    // Nothing half-built is left, so the same attempt can be prepared again.
    let dir = fx.tmp.path().join("ws").join("bases").join("9");
    assert!(!dir.exists());
    req.base_ref = None;
    fx.mgr.prepare(&req).unwrap();
}

#[test]
fn existing_attempt_dir_and_escaping_paths_are_refused() {
    let fx = Fixture::new();
    let ws = fx.prepare("../../etc", 1);
    let root = fx.tmp.path().join("ws").canonicalize().unwrap();
    assert_eq!(ws.path.parent().unwrap().parent().unwrap(), root);
    assert!(ws.path.starts_with(&root));

    let err = fx.mgr.prepare(&fx.request("../../etc", 1)).unwrap_err();
    assert!(matches!(err, WorkspaceError::AlreadyExists { .. }), "{err}");

    // A key directory planted as a symlink to elsewhere is refused.
    let outside = fx.tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("planted")).unwrap();
    let err = fx.mgr.prepare(&fx.request("planted", 1)).unwrap_err();
    assert!(matches!(err, WorkspaceError::OutsideRoot { .. }), "{err}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);

    for bad in ["a\0b", "a\nb", ""] {
        let err = fx.mgr.prepare(&fx.request_raw(bad)).unwrap_err();
        assert!(matches!(err, WorkspaceError::InvalidTaskId { .. }), "{err}");
    }
}

impl Fixture {
    fn request_raw(&self, task: &str) -> PrepareRequest {
        PrepareRequest {
            repo: self.origin(),
            task_id: task.into(),
            attempt: 1,
            base_ref: None,
            branch: "polyphony/x-a1".into(),
            token: None,
            owner: None,
        }
    }
}

#[test]
fn sanitization_table_keys_stay_inside_the_root() {
    let fx = Fixture::new();
    let long = "x".repeat(300);
    let ids = [
        "owner/repo#42",
        "..",
        "../../etc",
        "tâche/日本",
        &long,
        "a/b",
        "a_b",
    ];
    let mut keys = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let ws = fx.prepare(id, i as u32 + 1);
        let key = task_key(id).unwrap();
        assert!(key.len() <= 89, "{key}");
        assert_eq!(ws.path.parent().unwrap().file_name().unwrap(), key.as_str());
        keys.push(key);
    }
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), ids.len(), "collision in {keys:?}");
}

#[test]
fn non_fast_forward_push_is_rejected() {
    let fx = Fixture::new();
    let ws1 = fx.prepare("race", 1);
    let mut req = fx.request("race", 2);
    req.branch = ws1.branch.clone();
    let ws2 = fx.mgr.prepare(&req).unwrap();

    write(&ws1.path.join("one.txt"), "1\n");
    fx.mgr
        .commit_once(
            &ws1,
            &author(),
            "attempt one",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    fx.mgr.push(&ws1, None, None).unwrap();

    write(&ws2.path.join("two.txt"), "2\n");
    fx.mgr
        .commit_once(
            &ws2,
            &author(),
            "attempt two",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    let err = fx.mgr.push(&ws2, Some("origin"), None).unwrap_err();
    match &err {
        WorkspaceError::PushRejected { reason, .. } => {
            assert!(
                reason.contains("non-fast-forward") || reason.contains("fetch first"),
                "{reason}"
            )
        }
        other => panic!("expected PushRejected, got {other}"),
    }
    let origin = fx.tmp.path().join("origin.git");
    assert_eq!(
        git(&origin, &["log", "-1", "--format=%s", &ws1.branch]),
        "attempt one"
    );
}

#[test]
fn pre_receive_hook_rejection_is_an_error() {
    let fx = Fixture::new();
    let origin = fx.tmp.path().join("origin.git");
    let hook = origin.join("hooks/pre-receive");
    write(
        &hook,
        "#!/bin/sh\necho 'policy: no pushes today' >&2\nexit 1\n",
    );
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let ws = fx.prepare("hooked", 1);
    write(&ws.path.join("x.txt"), "x\n");
    fx.mgr
        .commit_once(
            &ws,
            &author(),
            "x",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    let err = fx.mgr.push(&ws, None, None).unwrap_err();
    assert!(matches!(err, WorkspaceError::PushRejected { .. }), "{err}");
    assert!(err.to_string().contains("policy: no pushes today"), "{err}");
}

/// A tiny HTTP server that answers every request with 401 Basic and records the
/// Authorization headers it saw.
fn auth_recorder() -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(8) {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.strip_prefix("Authorization: ") {
                    let _ = tx.send(v.trim().to_string());
                }
                line.clear();
            }
            let _ = stream.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    (format!("http://127.0.0.1:{port}/owner/repo.git"), rx)
}

fn base64(input: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn token_authenticates_as_x_access_token_and_never_leaks() {
    const TOKEN: &str = "ghp_SuperSecretToken123";
    let fx = Fixture::new();
    let (url, seen) = auth_recorder();
    let mut req = fx.request("secret", 1);
    req.repo = url.clone();
    req.token = Some(TOKEN.into());
    let err = fx.mgr.prepare(&req).unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(!text.contains(TOKEN), "{text}");
    let headers: Vec<String> = seen.try_iter().collect();
    let expected = format!(
        "Basic {}",
        base64(format!("x-access-token:{TOKEN}").as_bytes())
    );
    assert!(headers.contains(&expected), "server saw {headers:?}");
    // Nothing on disk holds the token: no half-built workspace or mirror is left.
    assert!(!grep_dir(fx.tmp.path(), TOKEN), "token found on disk");

    // An https URL that cannot connect: the error names the URL, never the token.
    let mut req = fx.request("secret", 2);
    req.repo = "https://127.0.0.1:1/owner/repo.git".into();
    req.token = Some(TOKEN.into());
    let err = fx.mgr.prepare(&req).unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(
        !text.contains(TOKEN) && text.contains("127.0.0.1"),
        "{text}"
    );

    // Push with a token to a failing remote: same.
    let ws = fx.prepare("secret", 3);
    write(&ws.path.join("f"), "f\n");
    fx.mgr
        .commit_once(
            &ws,
            &author(),
            "f",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    let (url, seen) = auth_recorder();
    let err = fx.mgr.push(&ws, Some(&url), Some(TOKEN)).unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(!text.contains(TOKEN), "{text}");
    assert!(seen.try_iter().any(|h| h == expected));
    assert!(!grep_dir(fx.tmp.path(), TOKEN), "token found on disk");
}

fn grep_dir(dir: &Path, needle: &str) -> bool {
    let out = Command::new("grep")
        .args(["-r", "-a", "-l", "-F", needle])
        .arg(dir)
        .output()
        .unwrap();
    !out.stdout.is_empty()
}

#[test]
fn read_at_base_reads_the_base_not_the_branch() {
    let fx = Fixture::new();
    let ws = fx.prepare("cfg", 1);
    write(&ws.path.join(".polyphony.yaml"), "from: agent\n");
    fx.mgr
        .commit_once(
            &ws,
            &author(),
            "agent edits config",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    fx.mgr.push(&ws, None, None).unwrap();
    let origin = fx.origin();
    let read = |base: Option<&str>, path: &str| fx.mgr.read_at_base(&origin, base, path, None);
    assert_eq!(
        read(Some(&ws.base_sha), ".polyphony.yaml")
            .unwrap()
            .as_deref(),
        Some("from: base\n")
    );
    assert_eq!(
        read(None, ".polyphony.yaml").unwrap().as_deref(),
        Some("from: base\n")
    );
    assert_eq!(
        read(Some("develop"), ".polyphony.yaml").unwrap().as_deref(),
        Some("from: develop\n")
    );
    assert_eq!(read(Some("main"), "missing.yaml").unwrap(), None);
    assert!(
        read(Some("main"), "src").is_err(),
        "a directory is not a file"
    );
    assert!(matches!(
        read(Some("nope"), ".polyphony.yaml").unwrap_err(),
        WorkspaceError::BaseRefNotFound { .. }
    ));
    // Reading works on a cold mirror too (it is created on demand).
    let fresh = WorkspaceManager::new(fx.tmp.path().join("ws2"), fx.tmp.path().join("m2"));
    assert_eq!(
        fresh
            .read_at_base(&origin, None, ".polyphony.yaml", None)
            .unwrap()
            .as_deref(),
        Some("from: base\n")
    );
}

/// Issue 23: the landing commit is the working tree on the base, made in the orchestrator's
/// repository; the agent's own commits, branches and HEAD never land and are never read.
#[test]
fn commit_once_takes_the_working_tree_whatever_the_agent_committed() {
    let fx = Fixture::new();
    let parent =
        |ws: &Workspace, sha: &str| git(&own_repo_path(ws), &["rev-parse", &format!("{sha}^@")]);
    // Nothing changed.
    let ws = fx.prepare("commits", 1);
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "nothing",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert!(out.empty && !out.created_commit && out.sha.is_none() && out.changed_paths.is_empty());

    // The agent committed one file itself and left another uncommitted: one commit of both,
    // straight on the base.
    let ws = fx.prepare("commits", 2);
    write(&ws.path.join("agent_committed.txt"), "a\n");
    git(&ws.path, &["add", "agent_committed.txt"]);
    git(&ws.path, &["commit", "-qm", "agent's own commit"]);
    write(&ws.path.join("left_over.txt"), "b\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "rest",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert!(out.created_commit && !out.empty);
    assert_eq!(
        out.changed_paths,
        vec!["agent_committed.txt", "left_over.txt"]
    );
    let sha = out.sha.unwrap();
    assert_eq!(parent(&ws, &sha), ws.base_sha);
    assert_eq!(
        git(&own_repo_path(&ws), &["rev-parse", ws.branch.as_str()]),
        sha
    );

    // Everything committed by the agent: the same, one commit on the base.
    let ws = fx.prepare("commits", 3);
    write(&ws.path.join("README.md"), "changed\n");
    git(&ws.path, &["commit", "-qam", "agent"]);
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "rest",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert!(out.created_commit && !out.empty);
    assert_eq!(out.changed_paths, vec!["README.md"]);
    assert_eq!(parent(&ws, &out.sha.unwrap()), ws.base_sha);

    // Changed then reverted by the agent: empty.
    let ws = fx.prepare("commits", 4);
    write(&ws.path.join("README.md"), "changed\n");
    git(&ws.path, &["commit", "-qam", "agent"]);
    write(&ws.path.join("README.md"), "hello\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "revert",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert!(!out.created_commit && out.empty && out.sha.is_none());

    // The agent wandered off to another branch: its files are what counts.
    let ws = fx.prepare("commits", 5);
    git(&ws.path, &["checkout", "-qb", "agent-branch"]);
    write(&ws.path.join("elsewhere.txt"), "e\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "elsewhere",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert_eq!(out.changed_paths, vec!["elsewhere.txt"]);

    // A deleted tracked file is a deletion; an ignored new file is not taken.
    let ws = fx.prepare("commits", 6);
    std::fs::remove_file(ws.path.join("README.md")).unwrap();
    write(&ws.path.join(".gitignore"), "*.o\n");
    write(&ws.path.join("build.o"), "artefact\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "delete",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert_eq!(out.changed_paths, vec![".gitignore", "README.md"]);
    let changes = fx.mgr.changes(&ws, out.sha.as_deref().unwrap()).unwrap();
    assert_eq!(changes[1].status, 'D');
}

#[test]
fn hostile_git_config_and_hooks_are_ignored() {
    let fx = Fixture::new();
    let ws = fx.prepare("hostile", 1);
    let marker = fx.tmp.path().join("hook-ran");
    for hook in ["pre-commit", "commit-msg", "post-commit", "pre-push"] {
        let p = ws.path.join(".git/hooks").join(hook);
        write(&p, &format!("#!/bin/sh\ntouch {}\n", marker.display()));
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    // The agent points origin at its own repository and adds an fsmonitor command.
    git(fx.tmp.path(), &["init", "-q", "--bare", "evil.git"]);
    let evil = fx.tmp.path().join("evil.git");
    git(
        &ws.path,
        &["remote", "set-url", "origin", &evil.display().to_string()],
    );
    git(
        &ws.path,
        &[
            "config",
            "core.fsmonitor",
            &format!("touch {}; false", marker.display()),
        ],
    );
    write(&ws.path.join("x.txt"), "x\n");
    fx.mgr
        .commit_once(
            &ws,
            &author(),
            "x",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    fx.mgr.push(&ws, None, None).unwrap();
    assert!(
        !marker.exists(),
        "a hook or fsmonitor from the workspace ran on the host"
    );
    assert!(
        git(&evil, &["for-each-ref"]).is_empty(),
        "pushed to the agent's remote"
    );
    let origin = fx.tmp.path().join("origin.git");
    assert_eq!(git(&origin, &["log", "-1", "--format=%s", &ws.branch]), "x");

    // A symlink inside .git is never followed: nothing in .git is read (issue 23).
    let ws = fx.prepare("hostile", 2);
    std::os::unix::fs::symlink("/etc", ws.path.join(".git/objects/ee")).unwrap();
    write(&ws.path.join("y.txt"), "y\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "y",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert_eq!(out.changed_paths, vec!["y.txt"]);
}

#[test]
fn failed_mirror_fetch_falls_back_to_upstream() {
    let fx = Fixture::new();
    fx.prepare("fallback", 1);
    // Break the mirror's fetch (its recorded upstream disappears).
    git(
        &fx.mirror(),
        &["config", "remote.origin.url", "/nonexistent/repo.git"],
    );
    let new_sha = fx.upstream_commit("after.txt");
    let ws = fx.prepare("fallback", 2);
    assert!(!ws.used_mirror);
    assert!(
        ws.mirror_note
            .as_deref()
            .unwrap()
            .contains("cloned from upstream"),
        "{:?}",
        ws.mirror_note
    );
    assert_eq!(ws.base_sha, new_sha);
    git(&ws.path, &["fsck", "--full"]);
}

#[test]
fn remove_frees_bytes_and_stays_inside_the_root() {
    let fx = Fixture::new();
    let ws = fx.prepare("cleanup", 1);
    // The orchestrator's own repository beside the attempt goes with it (issue 23).
    let own = own_repo_path(&ws);
    // So does a check checkout a killed daemon left beside it (issue 24).
    let check = ws.path.with_file_name("1.check-2");
    std::fs::create_dir_all(check.join("src")).unwrap();
    write(&check.join("src/lib.rs"), "fn main() {}\n");
    let usage = disk_usage(&ws.path) + disk_usage(&own) + disk_usage(&check);
    assert!(usage > disk_usage(&ws.path));
    assert_eq!(fx.mgr.remove(&ws.path).unwrap(), usage);
    assert!(!ws.path.exists() && !own.exists() && !check.exists());
    assert!(
        !ws.path.parent().unwrap().exists(),
        "empty task dir is removed too"
    );
    assert_eq!(fx.mgr.remove(&ws.path).unwrap(), 0, "already gone");

    let root = fx.tmp.path().join("ws");
    let victim = fx.tmp.path().join("work");
    for bad in [
        root.clone(),
        victim.clone(),
        root.join("../work"),
        PathBuf::from("/"),
    ] {
        let err = fx.mgr.remove(&bad).unwrap_err();
        assert!(
            matches!(err, WorkspaceError::OutsideRoot { .. }),
            "{bad:?}: {err}"
        );
    }
    std::os::unix::fs::symlink(&victim, root.join("link")).unwrap();
    assert!(fx.mgr.remove(&root.join("link")).is_err());
    assert!(victim.join("README.md").exists());
}

#[test]
fn workspace_is_chowned_to_the_container_user() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIPPED: chown to another uid needs root");
        return;
    }
    let fx = Fixture::new();
    let mut req = fx.request("owned", 1);
    req.owner = Some((12345, 23456));
    let ws = fx.mgr.prepare(&req).unwrap();
    for p in [
        ws.path.clone(),
        ws.path.join("README.md"),
        ws.path.join(".git/HEAD"),
        ws.path.join("src"),
    ] {
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.uid(), m.gid()), (12345, 23456), "{}", p.display());
    }
    // Host-side git still works on a workspace owned by someone else.
    write(&ws.path.join("z.txt"), "z\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "z",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert_eq!(out.changed_paths, vec!["z.txt"]);
    fx.mgr.push(&ws, None, None).unwrap();
}

// ---- issue 18: clones that borrow the mirror's objects ------------------------------------

/// Objects stored in `repo` itself, loose and packed (alternates not counted).
fn local_objects(repo: &Path) -> u64 {
    let out = git(repo, &["count-objects", "-v"]);
    ["count: ", "in-pack: "]
        .iter()
        .map(|k| {
            out.lines()
                .find_map(|l| l.strip_prefix(k))
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

/// A bare repository that never saw the mirror or the origin's objects.
fn fresh_remote(fx: &Fixture, name: &str) -> PathBuf {
    git(fx.tmp.path(), &["init", "-q", "--bare", name]);
    fx.tmp.path().join(name)
}

#[test]
fn shared_clone_borrows_the_mirror_and_pushes_complete_branches() {
    let fx = Fixture::new();
    let ws = fx.prepare("shared", 1);
    let objects = fx.mirror().join("objects").canonicalize().unwrap();
    assert_eq!(ws.mirror_objects.as_deref(), Some(objects.as_path()));
    assert_eq!(
        std::fs::read_to_string(ws.path.join(".git/objects/info/alternates")).unwrap(),
        format!("{}\n", objects.display())
    );
    assert_eq!(git(&ws.path, &["remote", "get-url", "origin"]), fx.origin());
    assert_eq!(ws.base_sha, git(&fx.work(), &["rev-parse", "main"]));
    assert_eq!(local_objects(&ws.path), 0, "no object was copied");
    git(&ws.path, &["fsck", "--full", "--strict"]);

    write(&ws.path.join("src/shared.rs"), "pub fn shared() {}\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "shared change",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    let tip = out.sha.unwrap();
    // The new commit lives in the orchestrator's repository, never in the mirror or the
    // workspace.
    assert!(local_objects(&own_repo_path(&ws)) > 0);
    assert_eq!(local_objects(&ws.path), 0);
    let probe = Command::new("git")
        .args(["--git-dir"])
        .arg(fx.mirror())
        .args(["cat-file", "-e", &tip])
        .output()
        .unwrap();
    assert!(
        !probe.status.success(),
        "the commit was written to the mirror"
    );

    // A remote that never saw the mirror gets a complete branch.
    let remote = fresh_remote(&fx, "elsewhere.git");
    fx.mgr
        .push(&ws, Some(&remote.display().to_string()), None)
        .unwrap();
    git(&remote, &["fsck", "--full", "--strict", "--no-dangling"]);
    assert_eq!(git(&remote, &["rev-parse", &ws.branch]), tip);
    assert_eq!(
        git(&remote, &["rev-list", "--count", &ws.branch]),
        "7",
        "the whole history reached the new remote"
    );
    assert!(!remote.join("objects/info/alternates").exists());

    // Removing the workspace leaves the mirror intact.
    fx.mgr.remove(&ws.path).unwrap();
    git(&fx.mirror(), &["fsck", "--full", "--strict"]);
    assert_eq!(git(&fx.mirror(), &["rev-parse", "main"]), ws.base_sha);
}

/// The agent points its alternates at another repository: nothing reads them (issue 23);
/// the orchestrator's repository borrows the mirror recorded at prepare.
#[test]
fn agent_rewritten_alternates_are_never_read() {
    let fx = Fixture::new();
    let ws = fx.prepare("alt", 1);
    let evil = fresh_remote(&fx, "evil.git");
    write(
        &ws.path.join(".git/objects/info/alternates"),
        &format!("{}/objects\n", evil.display()),
    );
    write(&ws.path.join("a.txt"), "a\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "a",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert_eq!(out.changed_paths, vec!["a.txt"]);
    assert_eq!(
        std::fs::read_to_string(own_repo_path(&ws).join("objects/info/alternates")).unwrap(),
        format!("{}\n", ws.mirror_objects.as_ref().unwrap().display())
    );
    fx.mgr.push(&ws, None, None).unwrap();
    git(&fx.tmp.path().join("origin.git"), &["fsck", "--full"]);
}

#[test]
fn shared_workspace_survives_mirror_fetch_and_gc() {
    let fx = Fixture::new();
    let mut req = fx.request("live", 1);
    req.base_ref = Some("develop".into());
    let ws = fx.mgr.prepare(&req).unwrap();
    let develop = ws.base_sha.clone();

    // Upstream drops `develop` and rewrites main while the attempt runs; the next attempt's
    // prepare fetches the mirror with --prune, and the mirror is garbage-collected.
    let work = fx.work();
    git(&work, &["push", "-q", "origin", ":develop"]);
    git(&work, &["reset", "-q", "--hard", "HEAD~2"]);
    write(&work.join("rewritten.txt"), "history rewritten\n");
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "rewrite"]);
    git(&work, &["push", "-q", "--force", "origin", "main"]);
    let origin = fx.tmp.path().join("origin.git");
    git(&origin, &["gc", "-q", "--prune=now"]);
    // An operator's aggressive settings must not matter while workspaces borrow.
    git(&fx.mirror(), &["config", "gc.pruneExpire", "now"]);
    let other = fx.prepare("other", 1);
    assert!(other.used_mirror);
    let gc = fx.mgr.gc_mirror(&fx.origin()).unwrap();
    assert_eq!(gc.live_workspaces, 2);
    assert!(!gc.pruned);
    // Even an aggressive auto-gc through the fetch path keeps everything.
    git(&fx.mirror(), &["config", "gc.auto", "1"]);
    fx.prepare("third", 1);

    // The live workspace is whole: its base, its stale remote-tracking refs, its checkout.
    git(&ws.path, &["fsck", "--full", "--strict"]);
    assert_eq!(git(&ws.path, &["rev-parse", "HEAD"]), develop);
    git(&ws.path, &["log", "--all", "--oneline"]);
    write(&ws.path.join("during.txt"), "d\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "during gc",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    let remote = fresh_remote(&fx, "after-gc.git");
    fx.mgr
        .push(&ws, Some(&remote.display().to_string()), None)
        .unwrap();
    git(&remote, &["fsck", "--full", "--strict"]);
    assert_eq!(git(&remote, &["rev-parse", &ws.branch]), out.sha.unwrap());

    // With no workspace left, gc may prune again.
    for dir in ["live", "other", "third"] {
        let path = fx.tmp.path().join("ws").join(dir).join("1");
        fx.mgr.remove(&path).unwrap();
    }
    let gc = fx.mgr.gc_mirror(&fx.origin()).unwrap();
    assert_eq!(gc.live_workspaces, 0);
    assert!(gc.pruned);
    git(&fx.mirror(), &["fsck", "--full", "--strict"]);
    let probe = Command::new("git")
        .arg("--git-dir")
        .arg(fx.mirror())
        .args(["cat-file", "-e", &develop])
        .output()
        .unwrap();
    assert!(
        !probe.status.success(),
        "the dropped branch's commit is pruned once nothing borrows it"
    );
}

/// A fixture whose upstream holds a 3 MB file, with the workspace root on a tmpfs of `size`
/// (`None` after SKIPPED: the test cannot mount).
fn full_disk_fixture(
    size: &str,
) -> Option<(Fixture, support::tmpfs::Tmpfs, Arc<WorkspaceManager>)> {
    let fx = Fixture::new();
    let work = fx.work();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(work.join("big.bin"), &big).unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "a 3 MB file"]);
    git(&work, &["push", "-q", "origin", "main"]);
    let disk = support::tmpfs::Tmpfs::mount(&fx.tmp.path().join("small"), size)?;
    let mgr = Arc::new(WorkspaceManager::new(
        disk.path().join("ws"),
        fx.tmp.path().join("mirrors"),
    ));
    Some((fx, disk, mgr))
}

/// Every path under `dir`, relative, sorted (what a refusal must leave unchanged).
fn tree_listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Issue 24: git's parallel checkout exits 0 after failing to write a file on a full disk;
/// prepare used to hand the agent a tree without it (and the landing commit deleted it).
#[test]
fn a_checkout_the_full_disk_cut_short_is_refused_and_leaves_nothing() {
    let Some((fx, disk, mgr)) = full_disk_fixture("1m") else {
        return;
    };
    let err = mgr.prepare(&fx.request("full", 1)).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, WorkspaceError::DiskFull { .. }),
        "a full disk is typed: {err:?}"
    );
    assert!(text.contains("big.bin"), "names the lost file: {text}");
    assert!(
        text.contains(&disk.path().display().to_string()),
        "names the place: {text}"
    );
    assert!(text.contains("free space there"), "says the fix: {text}");
    let left = tree_listing(&disk.path().join("ws"));
    assert!(
        !left
            .iter()
            .any(|p| p.ends_with("/1") || p.ends_with("1.land.git")),
        "no half-made attempt is left: {left:?}"
    );

    // With room (the floor is 64 MiB above the checkout), the same request is complete.
    disk.resize("80m");
    let ws = mgr.prepare(&fx.request("full", 1)).unwrap();
    assert_eq!(
        std::fs::metadata(ws.path.join("big.bin")).unwrap().len(),
        3_000_000
    );
}

/// Issue 24: the floor is checked after the checkout, before any agent: a tree that fits
/// but leaves the agent no room is refused too.
#[test]
fn a_checkout_that_leaves_no_room_is_refused() {
    let Some((fx, disk, mgr)) = full_disk_fixture("20m") else {
        return;
    };
    let err = mgr.prepare(&fx.request("tight", 1)).unwrap_err();
    assert!(matches!(&err, WorkspaceError::DiskFull { .. }), "{err:?}");
    assert!(
        err.to_string().contains("64.0 MiB"),
        "names the floor: {err}"
    );
    drop(disk);
}

/// Issue 24: the checks' checkout and the landing commit on a full disk are `DiskFull`,
/// never a checked tree missing files or a commit of what the disk lost.
#[test]
fn the_check_checkout_and_the_commit_refuse_a_full_disk() {
    let Some((fx, disk, _)) = full_disk_fixture("1m") else {
        return;
    };
    let ws = fx.prepare("check-full", 1);
    write(&ws.path.join("new.txt"), "x\n");
    let out = fx
        .mgr
        .commit_once(
            &ws,
            &author(),
            "work",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    let sha = out.sha.unwrap();
    let dest = disk.path().join("check");
    let err = fx.mgr.checkout(&ws, &sha, &dest, None).unwrap_err();
    assert!(matches!(&err, WorkspaceError::DiskFull { .. }), "{err:?}");
    drop(disk);

    // The agent's run filled the workspace's disk: its tree is not committed.
    let Some((fx, disk, mgr)) = full_disk_fixture("80m") else {
        return;
    };
    let ws = mgr.prepare(&fx.request("commit-full", 1)).unwrap();
    let filler = disk.path().join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![7u8; 1 << 20];
    while f.write_all(&chunk).is_ok() {}
    drop(f);
    let err = mgr
        .commit_once(
            &ws,
            &author(),
            "work",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap_err();
    assert!(matches!(&err, WorkspaceError::DiskFull { .. }), "{err:?}");
    assert!(
        git(&own_repo_path(&ws), &["for-each-ref", "refs/heads"]).is_empty(),
        "nothing was committed"
    );
    std::fs::remove_file(&filler).unwrap();
    let out = mgr
        .commit_once(
            &ws,
            &author(),
            "work",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
        .unwrap();
    assert!(
        out.empty,
        "the tree is whole again: {:?}",
        out.changed_paths
    );
}

/// The lock files a git killed with the daemon leaves (issue 24 makes git die with it, by
/// SIGKILL, which leaves `<file>.lock` behind; so does a power loss) are a dead run's
/// wherever no live git can hold them, and never fail or slow the next attempt: in the
/// mirror under its exclusive lock (before, every later attempt fell back to a clone from
/// upstream), in the check checkout's index (before, the resumed verification failed,
/// counting a failure for a kill) and in the orchestrator's repository at the landing
/// commit (before, the commit failed).
#[test]
fn lock_files_a_killed_git_left_never_fail_the_next_run() {
    let fx = Fixture::new();
    fx.prepare("locks", 1);
    let mirror = fx.mirror();
    for stale in ["refs/heads/main.lock", "packed-refs.lock", "shallow.lock"] {
        write(&mirror.join(stale), "");
    }
    let new_sha = fx.upstream_commit("after-kill.txt");
    let ws = fx.prepare("locks", 2);
    assert!(ws.used_mirror, "{:?}", ws.mirror_note);
    assert_eq!(ws.base_sha, new_sha);
    assert_eq!(git(&mirror, &["rev-parse", "main"]), new_sha);
    assert!(!mirror.join("refs/heads/main.lock").exists());

    write(&ws.path.join("new.txt"), "x\n");
    let own = own_repo_path(&ws);
    write(&own.join(format!("refs/heads/{}.lock", ws.branch)), "");
    let commit = || {
        fx.mgr.commit_once(
            &ws,
            &author(),
            "work",
            polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
        )
    };
    let sha = commit().expect("the commit after a kill").sha.unwrap();

    let dest = ws.path.with_file_name("2.check-1");
    // What a read-tree killed with the daemon left beside the checkout's index.
    write(&dest.with_extension("index.lock"), "");
    fx.mgr
        .checkout(&ws, &sha, &dest, None)
        .expect("the check's checkout after a kill");
    assert_eq!(
        std::fs::read_to_string(dest.join("new.txt")).unwrap(),
        "x\n"
    );
}
