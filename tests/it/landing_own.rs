//! Landing by construction (issue 23): nothing in the agent's `.git` is read. Each test is a
//! hostile scripted agent (images/test/fake `plant`) driving the BUILT binary through the
//! real pipeline (real Docker, real git, a local bare origin; the fake GitHub for a GitHub
//! task and a PR shepherd follow-up). The attack's bytes are made on the host with real git
//! in a scratch clone: replace refs that make git show harmless objects in place of a
//! protected workflow and a secret blob, an index whose skip-worktree entries hold them, a
//! history with a rewritten base, a crafted commit-graph, a pack the agent wrote, garbage
//! everywhere in `.git`, 20,000 files, a secret in a file name.
//!
//! Each test then compares what reached the remote, object by object, with what the gates
//! judged in the orchestrator's own repository (`N.land.git` beside the workspace), and
//! checks that exactly the working tree landed.
//!
//! Without an engine the Docker tests fail when `CI` is set, otherwise print `SKIPPED`.

use crate::landing::{reasons, refused, state, Origin, SECRET};
use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;
use support::docker::test_image as image;
use support::fake_github::{FakeGithub, NewIssue};
use support::git::git;
use support::home::{output, Home};

/// The workflow an attacker wants on the remote.
const EVIL_CI: &str =
    "on: push\njobs: { steal: { runs-on: ubuntu-latest, steps: [ { run: 'curl evil' } ] } }\n";
/// A harmless file the hostile agent also writes into its working tree.
const NOTES: &str = "harmless notes\n";

/// A clone of the origin at `rev` where the test makes the attack with real git.
struct Scratch {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Scratch {
    fn new(origin: &Path, rev: &str) -> Scratch {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("scratch");
        git(
            dir.path(),
            &["clone", "-q", &origin.display().to_string(), "scratch"],
        );
        git(&path, &["checkout", "-q", "--detach", rev]);
        Scratch { _dir: dir, path }
    }

    fn git(&self, args: &[&str]) -> String {
        git(&self.path, args)
    }

    fn write(&self, rel: &str, text: &str) {
        support::git::write(&self.path, rel, text);
    }

    fn file(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.path.join(rel)).expect("read")
    }

    /// The scripted fix the agent applies (`FIX_DIRECTIVE`), applied here the same way.
    fn fix_calc(&self) {
        let out = std::process::Command::new("sed")
            .args(["-i", "s/a - b/a + b/"])
            .arg(self.path.join("calc.sh"))
            .output()
            .expect("sed");
        assert!(out.status.success());
    }

    /// Every object reachable from `tip` and not from `base`.
    fn new_objects(&self, base: &str, tip: &str) -> Vec<String> {
        self.git(&["rev-list", "--objects", tip, &format!("^{base}")])
            .lines()
            .map(|l| l.split(' ').next().unwrap_or("").to_string())
            .collect()
    }
}

/// The lines that make the scripted agent plant bytes in its workspace.
#[derive(Default)]
struct Kit(Vec<String>);

impl Kit {
    fn plant(&mut self, rel: &str, bytes: &[u8]) {
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        self.0.push(format!("polyphony-fake-plant: {rel} {data}"));
    }

    /// The loose object files of `oids`, as the scratch clone stores them.
    fn loose(&mut self, s: &Scratch, oids: &[String]) {
        for oid in oids {
            let rel = format!(".git/objects/{}/{}", &oid[..2], &oid[2..]);
            self.plant(&rel, &s.file(&rel));
        }
    }

    fn text(&self) -> String {
        let mut t = self.0.join("\n");
        t.push('\n');
        t
    }
}

/// The attack of the review that filed issue 23, made on `rev`: an index holding the evil
/// workflow and a file with the secret as skip-worktree entries (so `git add --all` keeps
/// them), the objects, and replace refs that make every reading git command see an empty
/// `.github` and a harmless blob instead. The working tree gets `notes.txt` only.
fn replace_kit(origin: &Path, rev: &str) -> Kit {
    let s = Scratch::new(origin, rev);
    let base = s.git(&["rev-parse", "HEAD"]);
    s.write("notes.txt", NOTES);
    s.fix_calc();
    s.write(".github/workflows/ci.yml", EVIL_CI);
    s.write("leak.txt", &format!("key={SECRET}\n"));
    s.git(&["add", "-A"]);
    s.git(&["commit", "-qm", "evil"]);
    let gh = s.git(&["rev-parse", "HEAD:.github"]);
    let leak = s.git(&["rev-parse", "HEAD:leak.txt"]);
    let notes = s.git(&["rev-parse", "HEAD:notes.txt"]);
    s.git(&[
        "update-index",
        "--skip-worktree",
        ".github/workflows/ci.yml",
        "leak.txt",
    ]);
    let empty = s.git(&["hash-object", "-w", "-t", "tree", "/dev/null"]);
    let mut kit = Kit::default();
    let mut objects = s.new_objects(&base, "HEAD");
    objects.push(empty.clone());
    kit.loose(&s, &objects);
    kit.plant(
        &format!(".git/refs/replace/{gh}"),
        format!("{empty}\n").as_bytes(),
    );
    kit.plant(
        &format!(".git/refs/replace/{leak}"),
        format!("{notes}\n").as_bytes(),
    );
    kit.plant(".git/index", &s.file(".git/index"));
    kit.plant("notes.txt", NOTES.as_bytes());
    kit
}

/// The evil workflow committed on `rev` in `s`: returns (that commit, its tree), with the
/// scratch index holding the workflow as a skip-worktree entry (the agent's working tree
/// will not have it).
fn ci_commit(s: &Scratch) -> (String, String) {
    s.write(".github/workflows/ci.yml", EVIL_CI);
    s.git(&["add", "-A"]);
    s.git(&["commit", "-qm", "ci"]);
    s.git(&[
        "update-index",
        "--skip-worktree",
        ".github/workflows/ci.yml",
    ]);
    (
        s.git(&["rev-parse", "HEAD"]),
        s.git(&["rev-parse", "HEAD^{tree}"]),
    )
}

/// `graph` (a commit-graph file) claiming `tree` as the root tree of `commit` (sha1).
fn forge_graph_tree(graph: &[u8], commit: &str, tree: &str) -> Vec<u8> {
    assert_eq!(&graph[..4], b"CGPH");
    let chunks = graph[6] as usize;
    let (mut oidf, mut oidl, mut cdat) = (0, 0, 0);
    for i in 0..chunks {
        let at = 8 + i * 12;
        let off = u64::from_be_bytes(graph[at + 4..at + 12].try_into().unwrap()) as usize;
        match &graph[at..at + 4] {
            b"OIDF" => oidf = off,
            b"OIDL" => oidl = off,
            b"CDAT" => cdat = off,
            _ => {}
        }
    }
    let n = u32::from_be_bytes(graph[oidf + 255 * 4..oidf + 256 * 4].try_into().unwrap()) as usize;
    let want = hex::decode(commit).unwrap();
    let i = (0..n)
        .find(|i| graph[oidl + i * 20..oidl + (i + 1) * 20] == want[..])
        .expect("the base is in the graph");
    let mut out = graph.to_vec();
    out[cdat + i * 36..cdat + i * 36 + 20].copy_from_slice(&hex::decode(tree).unwrap());
    out
}

/// The orchestrator's own repository of the task's landed attempt.
fn own_repo(v: &Value) -> PathBuf {
    let ws = v["attempts"]
        .as_array()
        .and_then(|a| a.last())
        .and_then(|a| a["workspace"].as_str())
        .unwrap_or_else(|| panic!("no workspace recorded: {v:#}"));
    let own = PathBuf::from(format!("{ws}.land.git"));
    assert!(own.join("objects").is_dir(), "{}", own.display());
    own
}

/// Every object of `base..tip` in `repo`, with its type and content, in order.
fn objects(repo: &Path, base: &str, tip: &str) -> Vec<(String, String, String)> {
    git(repo, &["rev-list", "--objects", tip, &format!("^{base}")])
        .lines()
        .map(|l| {
            let oid = l.split(' ').next().unwrap_or("").to_string();
            let kind = git(repo, &["cat-file", "-t", &oid]);
            let body = git(repo, &["cat-file", "-p", &oid]);
            (oid, kind, body)
        })
        .collect()
}

/// The task landed exactly its working tree: the remote branch names the verified sha, the
/// commit's one parent is `base`, it changes exactly `changed`, no object anywhere carries
/// the workflow or the secret, and the remote holds object for object what the orchestrator's
/// repository (which the gates and the checks read) holds.
fn assert_landed_exactly(v: &Value, remote: &Path, base: &str, changed: &str) -> String {
    assert_eq!(state(v), "LANDED", "{}", reasons(v));
    let tip = v["landing"]["commit_sha"]
        .as_str()
        .expect("commit_sha")
        .to_string();
    assert_eq!(git(remote, &["rev-parse", &format!("{tip}^@")]), base);
    assert_eq!(git(remote, &["diff", "--name-only", base, &tip]), changed);
    let pushed = objects(remote, base, &tip);
    for (oid, _, body) in &pushed {
        assert!(
            !body.contains("curl evil") && !body.contains(SECRET),
            "{oid} carries the attack: {body}"
        );
    }
    let judged = objects(&own_repo(v), base, &tip);
    assert_eq!(pushed, judged, "the remote holds what the gates judged");
    let evidence = v["attempts"]
        .as_array()
        .and_then(|a| a.last())
        .map(|a| a["evidence"].clone())
        .unwrap_or_default();
    let diff = evidence
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "diff")
        .and_then(|e| e["output_tail"].as_str())
        .unwrap_or("")
        .to_string();
    assert_eq!(
        diff,
        format!("{} file(s) changed", changed.lines().count()),
        "the diff gate judged the same change"
    );
    tip
}

/// Runs a local task whose agent plays `plant` with `kit` and `extra` lines.
async fn spawn_planted(home: &Home, origin: &Origin, kit: &Kit, extra: &str) -> Value {
    let id = home
        .enqueue_scenario(origin, "plant", &format!("{}{extra}", kit.text()))
        .await;
    let out = home.run(&["spawn", "--task", &id]).await;
    let v = home.task(&id).await;
    assert!(
        out.status.success() || state(&v) != "LANDED",
        "spawn: {}",
        output(&out)
    );
    v
}

// ---------------------------------------------------------------------------- tests

/// Replace refs hide the workflow (a protected path) and the secret blob from every reading
/// git command, while `pack-objects` would send the real ones (the review's attack). Today
/// the agent's `.git` is not read at all: its index, objects and replace refs never reach
/// the landing commit, and exactly the working tree lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_refs_on_a_protected_path_and_a_secret_blob_change_nothing() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let kit = replace_kit(&origin.path, "main");
    let home = Home::for_landing(&image, 1, "", None);
    let v = spawn_planted(&home, &origin, &kit, "").await;
    assert_landed_exactly(&v, &origin.path, &origin.main_sha(), "calc.sh\nnotes.txt");
    assert!(home.files_containing(SECRET).is_empty());
    assert!(home.containers().is_empty(), "containers left");
}

/// The same attack on a GitHub task through the fake: the pull request's head is the
/// verified commit, and the remote holds nothing the gates did not judge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_refs_on_a_github_task_open_a_pull_request_of_the_working_tree_only() {
    let Some(image) = image().await else { return };
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    let repo = "acme/calc-replace";
    fake.add_repo(repo, &origin.url(), "main");
    let kit = replace_kit(&origin.path, "main");
    let n = fake.add_issue(
        repo,
        NewIssue::new("Fix add()")
            .body(&format!(
                "Fix add().\n\npolyphony-fake: plant\n{}\n{}",
                polyphony::demo::FIX_DIRECTIVE,
                kit.text()
            ))
            .labels(&["agent-ready"]),
    );
    let home = Home::for_landing(&image, 1, "", Some(&fake));
    let issue = format!("{repo}#{n}");
    let out = home.run(&["spawn", &issue]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));
    let v = home.task(&issue).await;
    let tip = assert_landed_exactly(&v, &origin.path, &origin.main_sha(), "calc.sh\nnotes.txt");
    let pulls = fake.pulls(repo);
    assert_eq!(pulls.len(), 1);
    assert_eq!(
        git(&origin.path, &["rev-parse", &pulls[0].head]),
        tip,
        "the pull request's branch is the verified commit"
    );
}

/// The agent rewrites history: a replace ref swaps the base commit for one whose tree
/// already has the workflow, its own branch and HEAD point there, and its index holds the
/// workflow. The landing commit's parent is the base recorded at prepare and its tree is
/// the working tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_history_with_a_rewritten_base_changes_nothing() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let s = Scratch::new(&origin.path, "main");
    let base = s.git(&["rev-parse", "HEAD"]);
    let (ci, evil_tree) = ci_commit(&s);
    let fake_base = s.git(&["commit-tree", &evil_tree, "-m", "base"]);
    let mut kit = Kit::default();
    let mut objs = s.new_objects(&base, &ci);
    objs.push(fake_base.clone());
    kit.loose(&s, &objs);
    kit.plant(
        &format!(".git/refs/replace/{base}"),
        format!("{fake_base}\n").as_bytes(),
    );
    kit.plant(".git/refs/heads/agent", format!("{fake_base}\n").as_bytes());
    kit.plant(".git/HEAD", b"ref: refs/heads/agent\n");
    kit.plant(".git/index", &s.file(".git/index"));
    let home = Home::for_landing(&image, 1, "", None);
    let v = spawn_planted(&home, &origin, &kit, "").await;
    assert_landed_exactly(&v, &origin.path, &base, "calc.sh");
}

/// A crafted `commit-graph` claims the base's tree already holds the workflow (which the
/// agent's index carries): git would diff against the forged tree. Not read: the base's
/// real tree is the diff's other side, and the workflow, absent from the working tree, is
/// not in the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crafted_commit_graph_changes_nothing() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let s = Scratch::new(&origin.path, "main");
    let base = s.git(&["rev-parse", "HEAD"]);
    let (ci, evil_tree) = ci_commit(&s);
    s.git(&["commit-graph", "write", "--reachable"]);
    let graph = forge_graph_tree(&s.file(".git/objects/info/commit-graph"), &base, &evil_tree);
    let mut kit = Kit::default();
    kit.loose(&s, &s.new_objects(&base, &ci));
    kit.plant(".git/objects/info/commit-graph", &graph);
    kit.plant(".git/index", &s.file(".git/index"));
    let home = Home::for_landing(&image, 1, "", None);
    let v = spawn_planted(&home, &origin, &kit, "").await;
    assert_landed_exactly(&v, &origin.path, &base, "calc.sh");
}

/// A pack the agent wrote (the workflow's objects) and an index naming them: neither is
/// read; the commit is the working tree, so the attempt lands without the workflow
/// (yesterday's code committed the index and the protected-path gate refused it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_and_a_pack_the_agent_wrote_are_not_read() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let s = Scratch::new(&origin.path, "main");
    let base = s.git(&["rev-parse", "HEAD"]);
    let (ci, _) = ci_commit(&s);
    let list = s.new_objects(&base, &ci).join("\n");
    let packs = s.path.join("agent-pack");
    let mut child = std::process::Command::new("git")
        .arg("pack-objects")
        .arg(&packs)
        .current_dir(&s.path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("pack-objects");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{list}\n").as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("pack-objects");
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut kit = Kit::default();
    for ext in ["pack", "idx"] {
        let bytes = std::fs::read(format!("{}-{name}.{ext}", packs.display())).expect("pack");
        kit.plant(&format!(".git/objects/pack/pack-{name}.{ext}"), &bytes);
    }
    kit.plant(".git/index", &s.file(".git/index"));
    let home = Home::for_landing(&image, 1, "", None);
    let v = spawn_planted(&home, &origin, &kit, "").await;
    assert_landed_exactly(&v, &origin.path, &base, "calc.sh");
}

/// The regression proof by construction: random bytes over every file of the agent's
/// `.git` (refs, config, HEAD, objects, packs, index, commit-graph, alternates, replace
/// refs). The right tree still lands, exactly as if `.git` were pristine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_agents_git_still_lands_the_working_tree() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let mut kit = Kit::default();
    kit.plant("notes.txt", NOTES.as_bytes());
    let home = Home::for_landing(&image, 1, "", None);
    let v = spawn_planted(&home, &origin, &kit, "polyphony-fake-garble: yes\n").await;
    let tip = assert_landed_exactly(&v, &origin.path, &origin.main_sha(), "calc.sh\nnotes.txt");
    assert_eq!(origin.show_file(&tip, "notes.txt"), NOTES.trim_end());
}

/// A file named after the identity's API key is refused like a file holding it: BLOCKED at
/// once, the variable named, the value (and the name) stored nowhere, nothing pushed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_a_file_name_blocks_the_task() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let home = Home::for_landing(&image, 3, "", None);
    let v = refused(
        &home,
        &origin,
        "plant",
        "polyphony-fake-name-of: LEAKY_API_KEY\n",
    )
    .await;
    assert_eq!(state(&v), "BLOCKED", "{v:#}");
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(1), "no retry");
    let why = reasons(&v);
    assert!(
        why.contains("LEAKY_API_KEY") && why.contains("the name notes-"),
        "{why}"
    );
    assert!(!why.contains(SECRET), "{why}");
    let hits = home.files_containing(SECRET);
    assert!(hits.is_empty(), "the secret reached {hits:?}");
}

/// 20,000 new files: past `verify.max_changed_files` the attempt is refused before a file
/// is read, naming the count and the setting; under it the change lands, verified in
/// seconds (the review measured 79.6 s with one `git cat-file` per file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_files_are_refused_past_the_cap_and_land_under_it() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let kit = Kit::default();
    let many = "polyphony-fake-many: 20000\n";

    let capped = Home::for_landing(&image, 1, "  max_changed_files: 1000\n", None);
    let v = refused(&capped, &origin, "plant", many).await;
    let why = reasons(&v);
    assert!(
        why.contains("20000 files") && why.contains("verify.max_changed_files (1000)"),
        "{why}"
    );

    let home = Home::for_landing(&image, 1, "", None);
    let started = Instant::now();
    let v = spawn_planted(&home, &origin, &kit, many).await;
    let took = started.elapsed();
    assert_eq!(state(&v), "LANDED", "{}", reasons(&v));
    let tip = v["landing"]["commit_sha"].as_str().expect("sha");
    let count = git(
        &origin.path,
        &["diff", "--name-only", &origin.main_sha(), tip],
    )
    .lines()
    .count();
    assert_eq!(count, 20_001);
    let judged = objects(&own_repo(&v), &origin.main_sha(), tip).len();
    let pushed = objects(&origin.path, &origin.main_sha(), tip).len();
    assert_eq!(judged, pushed);
    println!("20,000-file attempt landed in {took:?} (agent, checks and push included)");
    assert!(took < Duration::from_secs(180), "{took:?}");
}

/// A PR shepherd follow-up whose agent plants the same attack on the pull request's head:
/// the one new commit on the PR branch is the follow-up's working tree, judged in the
/// orchestrator's repository, and exactly that reaches the pull request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_pushes_only_its_verified_working_tree() {
    let Some(image) = image().await else { return };
    let origin = Origin::new();
    let fake = FakeGithub::start().await;
    let repo = "acme/calc-follow";
    fake.add_repo(repo, &origin.url(), "main");
    fake.set_permission(repo, "alice", "write");
    let n = fake.add_issue(
        repo,
        NewIssue::new("Fix add()")
            .body(&format!(
                "Fix add().\n\npolyphony-fake: succeed\n{}\n",
                polyphony::demo::FIX_DIRECTIVE
            ))
            .labels(&["agent-ready"]),
    );
    let home = Home::for_landing(&image, 1, "", Some(&fake));
    std::fs::write(
        home.path.join("config.yaml"),
        format!(
            "{}shepherd:\n  enabled: true\n",
            std::fs::read_to_string(home.path.join("config.yaml")).expect("config")
        ),
    )
    .expect("config.yaml");
    let issue = format!("{repo}#{n}");
    let out = home.run(&["spawn", &issue]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));
    let v = home.task(&issue).await;
    assert_eq!(state(&v), "LANDED", "{}", reasons(&v));
    let pr = v["pull"]["number"].as_u64().expect("watched");
    let branch = v["pull"]["branch"].as_str().expect("branch").to_string();
    let head = git(
        &origin.path,
        &["rev-parse", &format!("refs/heads/{branch}")],
    );

    // The kit is made on the PR head; the agent also does what the reviewer asks.
    let s = Scratch::new(&origin.path, &head);
    let base = s.git(&["rev-parse", "HEAD"]);
    s.write("notes.txt", NOTES);
    s.write(".github/workflows/ci.yml", EVIL_CI);
    s.write("leak.txt", &format!("key={SECRET}\n"));
    s.git(&["add", "-A"]);
    s.git(&["commit", "-qm", "evil"]);
    let gh = s.git(&["rev-parse", "HEAD:.github"]);
    s.git(&[
        "update-index",
        "--skip-worktree",
        ".github/workflows/ci.yml",
        "leak.txt",
    ]);
    let empty = s.git(&["hash-object", "-w", "-t", "tree", "/dev/null"]);
    let mut kit = Kit::default();
    let mut objs = s.new_objects(&base, "HEAD");
    objs.push(empty.clone());
    kit.loose(&s, &objs);
    kit.plant(
        &format!(".git/refs/replace/{gh}"),
        format!("{empty}\n").as_bytes(),
    );
    kit.plant(".git/index", &s.file(".git/index"));
    kit.plant("notes.txt", NOTES.as_bytes());
    fake.add_review_comment_as(
        repo,
        pr,
        "alice",
        "calc.sh",
        5,
        &format!(
            "Please document add().\n\npolyphony-fake: plant\npolyphony-fake-sed: calc.sh 1a # add A B\n{}",
            kit.text()
        ),
    );
    let out = home.run(&["daemon", "--exit-when-idle"]).await;
    assert!(out.status.success(), "daemon: {}", output(&out));
    let v = home.task(&issue).await;
    let id = v["followups"][0]["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a follow-up: {v:#}"))
        .to_string();
    let f = home.task(&id).await;
    let tip = assert_landed_exactly(&f, &origin.path, &head, "calc.sh\nnotes.txt");
    assert_eq!(
        git(
            &origin.path,
            &["rev-parse", &format!("refs/heads/{branch}")]
        ),
        tip,
        "the pull request's branch moved to exactly the verified commit"
    );
    assert!(origin.show_file(&tip, "calc.sh").contains("# add A B"));
    assert!(home.files_containing(SECRET).is_empty());
}
