//! Issue 12: a table of bad inputs through the built binary. Each case asserts the exit
//! code, that stderr names the field or value and says how to fix it, and that the home
//! (queue.db included) is byte-for-byte what it was before the rejected command. A second
//! test pipes every printing verb into a closed reader: it must stop quietly, never panic.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use support::git::git;

/// A home with one queued task, a git repository with a commit, a bare clone of it, an
/// empty repository, a plain directory and a foreign non-empty directory.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        let f = Fixture {
            _dir: dir,
            root: root.clone(),
            home,
        };
        f.bin().arg("init").assert().success();
        let repo = root.join("repo");
        std::fs::create_dir_all(repo.join("sub")).unwrap();
        std::fs::write(repo.join("README.md"), "hello\n").unwrap();
        git(&repo, &["init", "-q"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-qm", "init"]);
        git(&root, &["clone", "-q", "--bare", "repo", "origin.git"]);
        git(&root, &["init", "-q", "empty"]);
        std::fs::create_dir_all(root.join("plain")).unwrap();
        std::fs::create_dir_all(root.join("foreign/project")).unwrap();
        std::fs::write(root.join("foreign/notes.txt"), "mine\n").unwrap();
        std::fs::write(root.join("nul.txt"), b"a\0b").unwrap();
        std::fs::write(root.join("big.txt"), "x".repeat(256 * 1024 + 1)).unwrap();
        std::fs::write(root.join("a-file"), "not a home\n").unwrap();
        std::fs::write(root.join("bad-prompt.md"), "Do {nope}\n").unwrap();
        std::fs::write(root.join("backup.db"), "exists\n").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        f.bin()
            .args(["enqueue", "--repo"])
            .arg(&repo)
            .arg("Existing task")
            .assert()
            .success();
        f
    }

    /// The binary with this home, `HOME` inside the fixture and no colour or tokens.
    fn bin(&self) -> Command {
        let mut cmd = Command::cargo_bin("polyphony").unwrap();
        cmd.current_dir(&self.root)
            .env("POLYPHONY_HOME", &self.home)
            .env("HOME", &self.root)
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .env_remove("GITHUB_TOKEN")
            .env_remove("GH_TOKEN")
            .env_remove("GITHUB_API_URL");
        cmd
    }

    /// Replaces `{root}` and `{home}` in `s`.
    fn expand(&self, s: &str) -> String {
        s.replace("{root}", &self.root.display().to_string())
            .replace("{home}", &self.home.display().to_string())
    }
}

/// Every file under `path` (or `path` itself) with its bytes.
fn snapshot(path: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            out.insert(p.clone(), Vec::new());
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

/// One bad input.
struct Case {
    name: &'static str,
    /// Files written into the home before the baseline snapshot: (name, text).
    files: &'static [(&'static str, &'static str)],
    /// Damage queue.db before the baseline: overwrite pages mid-file, or the header.
    damage: Damage,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    code: i32,
    /// Every one must appear in stderr (after `{root}`/`{home}` expansion).
    needles: &'static [&'static str],
    /// Must not appear in stderr (a secret).
    absent: &'static [&'static str],
}

#[derive(Clone, Copy, PartialEq)]
enum Damage {
    None,
    Pages,
    /// Pages 11–15 overwritten, the header and the schema intact (issue 24).
    Pages11To15,
    Header,
}

const C: Case = Case {
    name: "",
    files: &[],
    damage: Damage::None,
    args: &[],
    env: &[],
    code: 2,
    needles: &[],
    absent: &[],
};

/// What every polyphony-made error says before its fix.
const FIX: &str = "fix:";

fn config(text: &'static str) -> &'static [(&'static str, &'static str)] {
    Box::leak(Box::new([("config.yaml", text)]))
}

/// Arguments made at run time (a table row's are `'static`).
fn leak(args: Vec<String>) -> &'static [&'static str] {
    let args: Vec<&'static str> = args
        .into_iter()
        .map(|a| &*Box::leak(a.into_boxed_str()))
        .collect();
    Box::leak(args.into_boxed_slice())
}

/// `enqueue` of the fixture's repository with `labels`.
fn enqueue_with_labels(labels: &[String]) -> &'static [&'static str] {
    let mut args = vec!["enqueue".to_string(), "--repo".into(), "{root}/repo".into()];
    for l in labels {
        args.push(format!("--label={l}"));
    }
    args.push("T".into());
    leak(args)
}

/// Issue 24: every verb that reads the queue, on a queue with pages 11–15 overwritten.
fn damaged_queue_in_every_reading_verb() -> Vec<Case> {
    let verbs: &[&'static [&'static str]] = &[
        &["status"],
        &["status", "--json"],
        &["status", "local-1"],
        &["status", "local-1", "--json"],
        &["logs", "local-1"],
        &["route", "local-1"],
        &["retry", "local-1"],
        &["retry", "--blocked"],
        &["cleanup", "--dry-run"],
        &["enqueue", "--repo", "{root}/repo", "T"],
        &["spawn", "--task", "local-1"],
        &["backup", "{root}/copy.db"],
    ];
    verbs
        .iter()
        .map(|args| Case {
            name: Box::leak(format!("pages 11-15 damaged: {}", args.join(" ")).into_boxed_str()),
            damage: Damage::Pages11To15,
            args,
            needles: &["queue.db", "damaged", "restore a backup", FIX],
            ..C
        })
        .collect()
}

fn cases() -> Vec<Case> {
    let check = &["config", "check"][..];
    vec![
        // ---- roots cleanup must never treat as its own
        Case { name: "workspace_root /", files: config("workspace_root: /\n"), args: check, needles: &["`workspace_root`", "filesystem root", FIX], ..C },
        Case { name: "workspace_root $HOME", files: config("workspace_root: $HOME\n"), args: check, needles: &["`workspace_root`", "$HOME", FIX], ..C },
        Case { name: "workspace_root ~", files: config("workspace_root: ~\n"), args: check, needles: &["`workspace_root`", "home directory", FIX], ..C },
        Case { name: "mirror_root is the home", files: config("mirror_root: $POLYPHONY_HOME\n"), args: check, needles: &["`mirror_root`", "Polyphony home itself", FIX], ..C },
        Case { name: "workspace_root is transcripts/", files: config("workspace_root: $POLYPHONY_HOME/transcripts\n"), args: check, needles: &["`workspace_root`", "transcripts", FIX], ..C },
        Case { name: "workspace_root foreign non-empty", files: config("workspace_root: $HOME/foreign\n"), args: check, needles: &["`workspace_root`", "foreign", "did not create", "touch"], ..C },
        Case { name: "mirror_root foreign non-empty", files: config("mirror_root: $HOME/foreign\n"), args: check, needles: &["`mirror_root`", "did not create", FIX], ..C },
        Case { name: "cleanup with workspace_root /", files: config("workspace_root: /\n"), args: &["cleanup", "--all", "--dry-run"], needles: &["`workspace_root`", FIX], ..C },
        Case { name: "daemon with workspace_root /", files: config("workspace_root: /\n"), args: &["daemon"], needles: &["`workspace_root`", FIX], ..C },
        // ---- values that would only fail after an agent run
        Case { name: "empty author_name", files: config("git:\n  author_name: ''\n"), args: check, needles: &["`git.author_name`", "empty", FIX], ..C },
        Case { name: "empty author_email", files: config("git:\n  author_email: ' '\n"), args: check, needles: &["`git.author_email`", FIX], ..C },
        Case { name: "branch_prefix ..", files: config("git:\n  branch_prefix: 'a..b/'\n"), args: check, needles: &["`git.branch_prefix`", "..", "check-ref-format"], ..C },
        Case { name: "branch_prefix leading dash", files: config("git:\n  branch_prefix: '-x/'\n"), args: check, needles: &["`git.branch_prefix`", "`-`", FIX], ..C },
        Case { name: "branch_prefix space", files: config("git:\n  branch_prefix: 'a b/'\n"), args: check, needles: &["`git.branch_prefix`", "space", FIX], ..C },
        Case { name: "branch_prefix .lock", files: config("git:\n  branch_prefix: 'x.lock/'\n"), args: check, needles: &["`git.branch_prefix`", ".lock", FIX], ..C },
        Case { name: "branch_prefix colon", files: config("git:\n  branch_prefix: 'a:b/'\n"), args: check, needles: &["`git.branch_prefix`", "`:`", FIX], ..C },
        Case { name: "protected_paths glob", files: config("verify:\n  protected_paths: ['a[']\n"), args: check, needles: &["`verify.protected_paths`", "a[", "glob"], ..C },
        Case { name: "repo protected_paths glob", files: config("repos:\n  - repo: '*'\n    verify:\n      protected_paths: ['{a']\n"), args: check, needles: &["repos[0].verify.protected_paths", "{a", FIX], ..C },
        Case { name: "container.image spaces", files: config("container:\n  image: 'My Image'\n"), args: check, needles: &["`container.image`", "My Image", "image reference"], ..C },
        Case { name: "container.image uppercase", files: config("container:\n  image: 'Worker:1'\n"), args: check, needles: &["`container.image`", "Worker", FIX], ..C },
        Case { name: "container.image empty tag", files: config("container:\n  image: 'worker:'\n"), args: check, needles: &["`container.image`", FIX], ..C },
        Case { name: "verify.image digest", files: config("verify:\n  image: 'w@sha256:xyz'\n"), args: check, needles: &["`verify.image`", "digest", FIX], ..C },
        Case { name: "repos image", files: config("repos:\n  - repo: '*'\n    image: 'a//b'\n"), args: check, needles: &["`repos[0].image`", FIX], ..C },
        Case { name: "prompt_template missing", files: config("prompt_template: $HOME/nope.md\n"), args: check, needles: &["`prompt_template`", "nope.md", FIX], ..C },
        Case { name: "prompt_template bad placeholder", files: config("prompt_template: $HOME/bad-prompt.md\n"), args: check, needles: &["`prompt_template`", "{nope}", FIX], ..C },
        Case { name: "max_attempts -1", files: config("max_attempts: -1\n"), args: check, needles: &["`max_attempts`", "must be positive", FIX], ..C },
        Case { name: "max_attempts NaN", files: config("max_attempts: .nan\n"), args: check, needles: &["`max_attempts`", "not a number", FIX], ..C },
        Case { name: "cpus NaN", files: config("container:\n  cpus: .nan\n"), args: check, needles: &["`container.cpus`", "not a number", FIX], ..C },
        Case { name: "max_concurrent_agents -1", files: config("max_concurrent_agents: -1\n"), args: check, needles: &["`max_concurrent_agents`", "must be positive", FIX], ..C },
        Case { name: "max_body_bytes 0", files: config("max_body_bytes: 0\n"), args: check, needles: &["`max_body_bytes`", FIX], ..C },
        Case { name: "poll_interval without unit", files: config("poll_interval: 30\n"), args: check, needles: &["`poll_interval`", "no unit", FIX], ..C },
        Case { name: "literal secret in api_keys", files: &[("identities.yaml", "identities:\n  - name: p\n    volumes:\n      claude: ~/.claude\n    api_keys:\n      ANTHROPIC_API_KEY: sk-ant-SECRET123\n")], args: check, needles: &["api_keys", "***", FIX], absent: &["sk-ant-SECRET123"], ..C },
        Case { name: "home is a file", args: &["--home", "{root}/a-file", "status"], needles: &["--home", "a file", FIX], ..C },
        Case { name: "POLYPHONY_HOME is a file", args: &["status"], env: &[("POLYPHONY_HOME", "{root}/a-file")], needles: &["POLYPHONY_HOME", "a file", FIX], ..C },
        // ---- unsafe settings however spelled (issue 24): refused without allow_unsafe
        Case { name: "container.user 00", files: config("container:\n  user: '00'\n"), args: check, needles: &["config.yaml", "`container.user", "root", "allow_unsafe", FIX], ..C },
        Case { name: "container.user 00:00", files: config("container:\n  user: '00:00'\n"), args: check, needles: &["config.yaml", "`container.user", "root", "allow_unsafe"], ..C },
        Case { name: "container.user 000:0", files: config("container:\n  user: '000:0'\n"), args: check, needles: &["config.yaml", "`container.user", "root", "allow_unsafe"], ..C },
        Case { name: "container.user out of range", files: config("container:\n  user: '4294967296'\n"), args: check, needles: &["config.yaml", "`container.user`", "4294967296", "largest id", FIX], ..C },
        Case { name: "container.user gid out of range", files: config("container:\n  user: '1000:99999999999'\n"), args: check, needles: &["`container.user`", "gid", "largest id", FIX], ..C },
        Case { name: "container.user not numeric", files: config("container:\n  user: 'root'\n"), args: check, needles: &["`container.user`", "not a number", FIX], ..C },
        Case { name: "volume with ..", files: &[("identities.yaml", "identities:\n  - name: personal\n    volumes:\n      claude: ~/../../../../../../etc\n")], args: check, needles: &["identities.yaml", "volume `claude`", "system directory", "allow_unsafe", FIX], ..C },
        Case { name: "volume //etc", files: &[("identities.yaml", "identities:\n  - name: personal\n    volumes:\n      claude: //etc\n")], args: check, needles: &["identities.yaml", "volume `claude`", "system directory", "allow_unsafe"], ..C },
        Case { name: "volume with a newline", files: &[("identities.yaml", "identities:\n  - name: personal\n    volumes:\n      claude: \"/tmp/a\\nb\"\n")], args: check, needles: &["identities.yaml", "volume `claude`", "newline", FIX], ..C },
        Case { name: "volume symlinked to /etc", files: &[("identities.yaml", "identities:\n  - name: personal\n    volumes:\n      claude: ~/etc-link\n")], args: check, needles: &["identities.yaml", "volume `claude`", "symlink", "system directory", "allow_unsafe"], ..C },
        // ---- absurd values refused with the bound (issue 24)
        Case { name: "max_concurrent_agents 1000000000", files: config("max_concurrent_agents: 1000000000\n"), args: check, needles: &["config.yaml", "`max_concurrent_agents`", "1024", FIX], ..C },
        Case { name: "container.deadline 999999999999h", files: config("container:\n  deadline: 999999999999h\n"), args: check, needles: &["config.yaml", "`container.deadline`", "30 days", FIX], ..C },
        Case { name: "event_idle_timeout 999999999999h", files: config("event_idle_timeout: 999999999999h\n"), args: check, needles: &["config.yaml", "`event_idle_timeout`", "30 days", FIX], ..C },
        Case { name: "verify.timeout 999999999999h", files: config("verify:\n  timeout: 999999999999h\n"), args: check, needles: &["config.yaml", "`verify.timeout`", "30 days", FIX], ..C },
        Case { name: "quota_default_cooldown 100000000h", files: config("quota_default_cooldown: 100000000h\n"), args: check, needles: &["config.yaml", "`quota_default_cooldown`", "31 days", FIX], ..C },
        Case { name: "max_body_bytes 1000000000000", files: config("max_body_bytes: 1000000000000\n"), args: check, needles: &["config.yaml", "`max_body_bytes`", "16777216", FIX], ..C },
        Case { name: "max_workspace_size 1k", files: config("container:\n  max_workspace_size: 1k\n"), args: check, needles: &["config.yaml", "`container.max_workspace_size`", "1m", FIX], ..C },
        Case { name: "verify.test empty", files: config("verify:\n  test: ''\n"), args: check, needles: &["config.yaml", "`verify.test`", "empty", FIX], ..C },
        Case { name: "repo verify.lint empty", files: config("repos:\n  - repo: '*'\n    verify:\n      lint: ' '\n"), args: check, needles: &["config.yaml", "`repos[0].verify.lint`", "empty", FIX], ..C },
        Case { name: "trusted_permission god", files: config("shepherd:\n  trusted_permission: god\n"), args: check, needles: &["config.yaml", "`shepherd.trusted_permission`", "god", "maintain", FIX], ..C },
        Case { name: "shepherd.trigger empty", files: config("shepherd:\n  trigger: ''\n"), args: check, needles: &["config.yaml", "`shepherd.trigger`", "every comment", FIX], ..C },
        Case { name: "shepherd.trigger newline", files: config("shepherd:\n  trigger: \"/poly\\nphony\"\n"), args: check, needles: &["config.yaml", "`shepherd.trigger`", "newline", FIX], ..C },
        Case { name: "shepherd.hold_label empty", files: config("shepherd:\n  hold_label: ''\n"), args: check, needles: &["config.yaml", "`shepherd.hold_label`", "empty", FIX], ..C },
        Case { name: "http.token_env empty", files: config("http:\n  token_env: ''\n"), args: check, needles: &["config.yaml", "`http.token_env`", "variable name", FIX], ..C },
        Case { name: "http.token_env BAD NAME", files: config("http:\n  token_env: 'BAD NAME'\n"), args: check, needles: &["config.yaml", "`http.token_env`", "BAD NAME", FIX], ..C },
        Case { name: "http.max_streams 0", files: config("http:\n  max_streams: 0\n"), args: check, needles: &["config.yaml", "`http.max_streams`", "1..=", FIX], ..C },
        Case { name: "http.max_streams_per_client 0", files: config("http:\n  max_streams_per_client: 0\n"), args: check, needles: &["config.yaml", "`http.max_streams_per_client`", "1..=", FIX], ..C },
        // ---- enqueue: nothing stored
        Case { name: "empty title", args: &["enqueue", "--repo", "{root}/repo", " "], needles: &["title", "empty", FIX], ..C },
        Case { name: "multi-line title", args: &["enqueue", "--repo", "{root}/repo", "line one\nline two"], needles: &["title", "one line", FIX], ..C },
        Case { name: "title over 256 chars", args: &["enqueue", "--repo", "{root}/repo", "{long-title}"], needles: &["title", "257", "256", FIX], ..C },
        Case { name: "body with NUL", args: &["enqueue", "--repo", "{root}/repo", "--body-file", "{root}/nul.txt", "T"], needles: &["body", "NUL", FIX], ..C },
        Case { name: "body above the default limit", args: &["enqueue", "--repo", "{root}/repo", "--body-file", "{root}/big.txt", "T"], needles: &["262145 bytes", "262144", "max_body_bytes"], ..C },
        Case { name: "body above a configured limit", files: config("max_body_bytes: 10\n"), args: &["enqueue", "--repo", "{root}/repo", "--body", "eleven chars", "T"], needles: &["12 bytes", "limit of 10", "max_body_bytes"], ..C },
        Case { name: "body-file missing", args: &["enqueue", "--repo", "{root}/repo", "--body-file", "{root}/nope.md", "T"], needles: &["--body-file", "nope.md", FIX], ..C },
        Case { name: "body-file is a directory", args: &["enqueue", "--repo", "{root}/repo", "--body-file", "{root}/plain", "T"], needles: &["--body-file", "plain", FIX], ..C },
        Case { name: "repo missing", args: &["enqueue", "--repo", "{root}/missing", "T"], needles: &["--repo", "missing", FIX], ..C },
        Case { name: "repo not a git repository", args: &["enqueue", "--repo", "{root}/plain", "T"], needles: &["plain", "not a git repository", FIX], ..C },
        Case { name: "repo is a subdirectory", args: &["enqueue", "--repo", "{root}/repo/sub", "T"], needles: &["repo/sub", "not a git repository", FIX], ..C },
        Case { name: "repo without commits", args: &["enqueue", "--repo", "{root}/empty", "T"], needles: &["empty", "no commits", FIX], ..C },
        Case { name: "base missing locally", args: &["enqueue", "--repo", "{root}/repo", "--base", "nope", "T"], needles: &["`nope`", "does not resolve", FIX], ..C },
        Case { name: "base missing in a URL", args: &["enqueue", "--repo", "file://{root}/origin.git", "--base", "nope", "T"], needles: &["`nope`", "origin.git", FIX], ..C },
        Case { name: "URL that does not answer", args: &["enqueue", "--repo", "file://{root}/nowhere.git", "T"], needles: &["nowhere.git", "ls-remote", "--no-check"], ..C },
        Case { name: "base starting with -", args: &["enqueue", "--repo", "{root}/repo", "--base=--upload-pack=x", "T"], needles: &["--base", "--upload-pack=x", "`-`"], ..C },
        Case { name: "repo starting with -", args: &["enqueue", "--repo=-oops", "T"], needles: &["--repo", "-oops", "`-`"], ..C },
        Case { name: "label starting with -", args: &["enqueue", "--repo", "{root}/repo", "--label=-x", "T"], needles: &["--label", "-x", FIX], ..C },
        Case { name: "empty label", args: &["enqueue", "--repo", "{root}/repo", "--label", " ", "T"], needles: &["--label", "empty", FIX], ..C },
        Case { name: "URL with user and password", args: &["enqueue", "--repo", "https://bob:hunter2@example.com/a/b.git", "T"], needles: &["https://***@example.com/a/b.git", "credentials", FIX], absent: &["hunter2"], ..C },
        Case { name: "URL with a token as user", args: &["enqueue", "--repo", "https://ghp_TOKEN42@github.com/a/b.git", "T"], needles: &["***@github.com", "credentials", FIX], absent: &["ghp_TOKEN42"], ..C },
        Case { name: "unknown task type", args: &["enqueue", "--repo", "{root}/repo", "--type", "chore", "T"], needles: &["--type", "chore"], ..C },
        Case { name: "unknown risk", args: &["enqueue", "--repo", "{root}/repo", "--risk", "extreme", "T"], needles: &["--risk", "extreme"], ..C },
        Case { name: "unknown scope", args: &["enqueue", "--repo", "{root}/repo", "--scope", "huge", "T"], needles: &["--scope", "huge"], ..C },
        Case { name: "body and body-file", args: &["enqueue", "--repo", "{root}/repo", "--body", "a", "--body-file", "{root}/nul.txt", "T"], needles: &["--body", "cannot be used with"], ..C },
        // ---- looking things up
        Case { name: "status of an unknown task", args: &["status", "local-99"], needles: &["local-99", "polyphony status"], ..C },
        Case { name: "status with a bad state", args: &["status", "--state", "DONE"], needles: &["--state", "DONE"], ..C },
        Case { name: "status with a negative limit", args: &["status", "--limit", "-1"], needles: &["-1"], ..C },
        Case { name: "logs of an unknown task", args: &["logs", "local-99"], needles: &["local-99", "polyphony status"], ..C },
        Case { name: "route of an unknown task", args: &["route", "local-99"], needles: &["local-99", "polyphony status"], ..C },
        Case { name: "replay of a directory", args: &["replay", "--agent", "claude", "{root}/plain"], needles: &["plain", "transcript", FIX], ..C },
        Case { name: "replay of a missing file", args: &["replay", "--agent", "claude", "{root}/nope.ndjson"], needles: &["nope.ndjson", FIX], ..C },
        Case { name: "replay with an unknown agent", args: &["replay", "--agent", "claudia", "{root}/nul.txt"], needles: &["--agent", "claudia"], ..C },
        Case { name: "unknown verb", args: &["frobnicate"], needles: &["frobnicate"], ..C },
        // ---- backup
        Case { name: "backup over an existing file", args: &["backup", "{root}/backup.db"], needles: &["backup.db", "already exists", "--force"], ..C },
        Case { name: "backup into a missing directory", args: &["backup", "{root}/no/such/dir/b.db"], needles: &["no/such/dir", "does not exist", FIX], ..C },
        Case { name: "backup onto the queue itself", args: &["backup", "--force", "{home}/queue.db"], needles: &["queue.db", "queue database itself", FIX], ..C },
        // ---- a damaged queue.db: said, and nothing more written
        Case { name: "damaged pages: status", damage: Damage::Pages, args: &["status"], needles: &["queue.db", "damaged", "restore a backup"], ..C },
        Case { name: "damaged pages: status TASK", damage: Damage::Pages, args: &["status", "local-1"], needles: &["queue.db", "damaged", "restore a backup"], ..C },
        Case { name: "damaged pages: enqueue", damage: Damage::Pages, args: &["enqueue", "--repo", "{root}/repo", "T"], needles: &["queue.db", "damaged", "restore a backup"], ..C },
        Case { name: "damaged pages: backup", damage: Damage::Pages, args: &["backup", "{root}/copy.db"], needles: &["queue.db", "damaged", "recover"], ..C },
        Case { name: "not a database: status", damage: Damage::Header, args: &["status"], needles: &["queue.db", "damaged", "not a database", "restore a backup"], ..C },
        Case { name: "not a database: enqueue", damage: Damage::Header, args: &["enqueue", "--repo", "{root}/repo", "T"], needles: &["queue.db", "damaged", "restore a backup"], ..C },
        Case { name: "not a database: logs", damage: Damage::Header, args: &["logs", "local-1"], needles: &["queue.db", "damaged", "restore a backup"], ..C },
        // ---- issue 24: enqueue's limits live in config.yaml; labels are bounded
        Case { name: "enqueue with a broken config.yaml", files: config("max_body_bytes: [\n"), args: &["enqueue", "--repo", "{root}/repo", "T"], needles: &["config.yaml", FIX], ..C },
        Case { name: "enqueue with an invalid config value", files: config("max_attempts: -1\n"), args: &["enqueue", "--repo", "{root}/repo", "T"], needles: &["config.yaml", "`max_attempts`", FIX], ..C },
        Case { name: "65 labels", args: enqueue_with_labels(&(0..65).map(|i| format!("l{i}")).collect::<Vec<_>>()), needles: &["65 labels", "--label", "64", FIX], ..C },
        Case { name: "400 KB of labels", args: enqueue_with_labels(&vec!["x".repeat(10_000); 40]), needles: &["--label", "400000 bytes", "4096", FIX], ..C },
        Case { name: "labels over 4096 bytes", args: enqueue_with_labels(&vec!["y".repeat(2049); 2]), needles: &["--label", "4098 bytes", "4096", FIX], ..C },
        // ---- issue 24: the agent deadline bound in agents.yaml
        Case { name: "agents.yaml deadline 999999999999h", files: &[("agents.yaml", "agents:\n  - name: claude\n    agent_type: claude\n    deadline: 999999999999h\n")], args: check, needles: &["agents.yaml", "deadline", "30 days", FIX], ..C },
    ]
    .into_iter()
    .chain(damaged_queue_in_every_reading_verb())
    .collect()
}

/// Makes queue.db big enough to damage mid-file, then damages it.
fn damage(f: &Fixture, how: Damage) {
    if how == Damage::None {
        return;
    }
    let db = f.home.join("queue.db");
    if matches!(how, Damage::Pages | Damage::Pages11To15) {
        // Twenty more tasks with long bodies: pages past the first few hold rows.
        for i in 0..20 {
            f.bin()
                .args(["enqueue", "--repo"])
                .arg(f.root.join("repo"))
                .args([
                    "--body",
                    &"lorem ipsum ".repeat(800),
                    &format!("filler {i}"),
                ])
                .assert()
                .success();
        }
    }
    let mut bytes = std::fs::read(&db).unwrap();
    let (start, len) = match how {
        Damage::Header => (0, 100),
        Damage::Pages11To15 => (4096 * 10, 4096 * 5),
        _ => (4096 * 3, bytes.len() - 4096 * 4),
    };
    for b in &mut bytes[start..start + len] {
        *b = 0xA5;
    }
    std::fs::write(&db, bytes).unwrap();
}

#[test]
fn bad_inputs_are_refused_with_the_field_and_the_fix_and_change_nothing() {
    let cases = cases();
    assert!(cases.len() >= 60, "only {} cases", cases.len());
    // Every case has a fixture of its own: they run on a few threads (mostly waiting on
    // the processes they start), and failures are reported in the table's order.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let found = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(case) = cases.get(i) else { break };
                if let Some(failure) = run_case(case) {
                    found
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((i, failure));
                }
            });
        }
    });
    let mut found = found.into_inner().unwrap_or_else(|p| p.into_inner());
    found.sort();
    let failures: Vec<String> = found.into_iter().map(|(_, f)| f).collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// One case on a fixture of its own: what is wrong with the outcome, if anything.
fn run_case(case: &Case) -> Option<String> {
    let f = Fixture::new();
    for (name, text) in case.files {
        std::fs::write(f.home.join(name), text).unwrap();
    }
    damage(&f, case.damage);
    let before_home = snapshot(&f.home);
    let args: Vec<String> = case
        .args
        .iter()
        .map(|a| {
            if *a == "{long-title}" {
                "t".repeat(257)
            } else {
                f.expand(a)
            }
        })
        .collect();
    let mut cmd = f.bin();
    for (k, v) in case.env {
        cmd.env(k, f.expand(v));
    }
    let out = cmd
        .args(&args)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut problems = Vec::new();
    if out.status.code() != Some(case.code) {
        problems.push(format!(
            "exit {:?}, expected {}",
            out.status.code(),
            case.code
        ));
    }
    for needle in case.needles {
        let needle = f.expand(needle);
        if !stderr.contains(&needle) {
            problems.push(format!("stderr lacks {needle:?}"));
        }
    }
    for secret in case.absent {
        if stderr.contains(secret) || String::from_utf8_lossy(&out.stdout).contains(secret) {
            problems.push(format!("the output shows {secret:?}"));
        }
    }
    if stderr.contains("panicked") {
        problems.push("panicked".into());
    }
    if snapshot(&f.home) != before_home {
        problems.push("the home changed".into());
    }
    if problems.is_empty() {
        None
    } else {
        Some(format!(
            "{}: {}\n    stderr: {}",
            case.name,
            problems.join("; "),
            stderr.trim()
        ))
    }
}

/// Issue 12: `status | head -1` panicked with exit 101. Every printing verb writes into a
/// pipe whose reader is already closed: it must end without a panic or a message.
#[test]
fn printing_verbs_stop_quietly_on_a_closed_stdout() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let f = Fixture::new();
    let transcript = f.root.join("t.ndjson");
    std::fs::write(&transcript, "{\"type\":\"system\",\"subtype\":\"init\"}\n").unwrap();
    let t = transcript.display().to_string();
    let repo = f.root.join("repo").display().to_string();
    let verbs: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["--version"],
        vec!["config", "check"],
        vec!["config", "check", "--json"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["status", "local-1"],
        vec!["status", "local-1", "--json"],
        vec!["enqueue", "--repo", &repo, "Piped"],
        vec!["route", "local-1"],
        vec!["route", "local-1", "--explain"],
        vec!["route", "local-1", "--json"],
        vec!["replay", "--agent", "claude", &t],
        vec!["replay", "--agent", "claude", "--json", &t],
        vec!["logs", "local-1"],
        vec!["init", "--force"],
        vec!["cleanup", "--dry-run"],
        vec!["cleanup", "--dry-run", "--json"],
        vec!["doctor"],
        vec!["doctor", "--json"],
    ];
    let mut failures = Vec::new();
    for args in &verbs {
        let mut fds = [0; 2];
        // SAFETY: a fresh pipe; both ends are owned right below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (reader, writer) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        drop(reader);
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("polyphony"))
            .current_dir(&f.root)
            .env("POLYPHONY_HOME", &f.home)
            .env("HOME", &f.root)
            .env_remove("RUST_LOG")
            .args(args)
            .stdout(std::process::Stdio::from(writer))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(101)
            || stderr.contains("panicked")
            || stderr.contains("Broken pipe")
        {
            failures.push(format!("{args:?}: {:?} {stderr}", out.status));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
