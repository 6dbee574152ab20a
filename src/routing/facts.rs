//! Task facts (spec §5.1 inputs): what a task's text mentions, looked up in the repository.
//!
//! The extraction (paths, identifiers, labels) is pure; the lookup is a thin IO shell over
//! either a plain directory (walked on disk, `.git`, `target` and `node_modules` skipped)
//! or a bare mirror at a ref (the git CLI: `ls-tree`, `cat-file`, `grep`, argv only, no
//! shell). Scoring itself is `routing::scoring`.
//!
//! Decisions, so the score can be explained:
//! - Paths: tokens with a `/` whose last segment has an extension (or that end in `/`, a
//!   directory), or bare names with a known source extension (`main.rs`, `Cargo.toml`). A
//!   `:LINE` or `#L10` suffix is dropped. A path not found as given is looked up as a path
//!   suffix (`routing/mod.rs` finds `src/routing/mod.rs`), taking up to
//!   [`MAX_SUFFIX_MATCHES`] files. A directory contributes every file below it.
//! - Identifiers: backticked words, CamelCase (two humps or more), lowerCamel and
//!   snake_case/SCREAMING_CASE words, 3+ characters, at most [`MAX_IDENTIFIERS`].
//!   Callers of an identifier = files containing it as a whole word (like `git grep -w`).
//! - Keywords are counted in the task text AND in the mentioned files' contents (a file
//!   full of locks makes the change concurrency-sensitive even if the issue is terse).
//! - Without a repository the mentioned paths still count as (unverified) files with 0 LOC,
//!   so a task scores from its text alone; lookup failures become `warnings`, never errors.
//! - Labels: see [`classify_labels`]. context_tokens = (chars of title + body + bytes of
//!   the mentioned files) / 4, rounded up.

use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::scoring::{keywords_in, Category, FileFact, FileKeywords, IdentifierFact, TaskFacts};
use crate::domain::{Risk, Task, TaskType};

/// At most this many identifiers are looked up.
pub const MAX_IDENTIFIERS: usize = 20;
/// A path found only as a suffix is taken when it matches at most this many files.
pub const MAX_SUFFIX_MATCHES: usize = 5;
/// Files larger than this are counted but not read (LOC 0, no keywords).
pub const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;

/// Extensions a slash-less token needs to count as a file name.
const SOURCE_EXTENSIONS: &[&str] = &[
    "rs",
    "py",
    "js",
    "mjs",
    "cjs",
    "ts",
    "tsx",
    "jsx",
    "go",
    "java",
    "kt",
    "kts",
    "c",
    "h",
    "cc",
    "cpp",
    "cxx",
    "hpp",
    "rb",
    "php",
    "cs",
    "swift",
    "scala",
    "sh",
    "bash",
    "zsh",
    "toml",
    "yaml",
    "yml",
    "json",
    "md",
    "rst",
    "sql",
    "html",
    "css",
    "scss",
    "lua",
    "ex",
    "exs",
    "erl",
    "hs",
    "ml",
    "txt",
    "cfg",
    "ini",
    "lock",
    "proto",
    "tf",
    "vue",
    "svelte",
    "dart",
    "gradle",
    "xml",
    "mod",
    "sum",
    "nix",
    "zig",
    "r",
    "pl",
    "dockerfile",
];

/// Words that look like identifiers but would only add noise to caller counts.
const STOP_WORDS: &[&str] = &[
    "self",
    "Self",
    "mut",
    "pub",
    "let",
    "use",
    "impl",
    "struct",
    "enum",
    "return",
    "true",
    "false",
    "None",
    "Some",
    "null",
    "the",
    "and",
    "for",
    "new",
    "GitHub",
    "GitLab",
    "JavaScript",
    "TypeScript",
    "PostgreSQL",
    "MySQL",
    "SQLite",
    "YouTube",
    "LinkedIn",
    "macOS",
    "iOS",
    "README",
    "TODO",
    "FIXME",
];

/// What a task's text mentions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mentions {
    /// Strong path candidates (extension or trailing `/`).
    pub paths: Vec<String>,
    /// Slash tokens without an extension (`src/routing`): used only when the repo has them.
    pub weak_paths: Vec<String>,
    pub identifiers: Vec<String>,
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("static regex is valid"))
}

/// Extracts paths and identifiers from a task's text. Pure.
pub fn extract_mentions(text: &str) -> Mentions {
    static BACKTICK: OnceLock<Regex> = OnceLock::new();
    static IDENT: OnceLock<Regex> = OnceLock::new();
    static CAMEL: OnceLock<Regex> = OnceLock::new();
    static LOWER_CAMEL: OnceLock<Regex> = OnceLock::new();
    static SNAKE: OnceLock<Regex> = OnceLock::new();
    let mut m = Mentions::default();
    // Membership sets beside the ordered lists: a long body mentions thousands of paths.
    let mut seen_paths: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut seen_weak: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut idents: Vec<String> = Vec::new();
    let mut prose = String::with_capacity(text.len());

    // Path candidates from every whitespace-delimited token (backticks included).
    for raw in text.split(|c: char| c.is_whitespace() || "`()[]{}<>\"',;|*".contains(c)) {
        match classify_path(raw) {
            PathCandidate::Strong(p) => {
                if seen_paths.insert(p.clone()) {
                    m.paths.push(p);
                }
            }
            PathCandidate::Weak(p) => {
                if seen_weak.insert(p.clone()) {
                    m.weak_paths.push(p);
                }
            }
            PathCandidate::No => {
                prose.push_str(raw);
                prose.push(' ');
            }
        }
    }

    let backtick = re(&BACKTICK, r"`([^`\n]+)`");
    let ident = re(&IDENT, r"[A-Za-z_][A-Za-z0-9_]*");
    for cap in backtick.captures_iter(text) {
        let inner = &cap[1];
        if inner.contains('/') || !matches!(classify_path(inner.trim()), PathCandidate::No) {
            continue;
        }
        for w in ident.find_iter(inner) {
            idents.push(w.as_str().to_string());
        }
    }
    let camel = re(&CAMEL, r"\b[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+\b");
    let lower_camel = re(&LOWER_CAMEL, r"\b[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b");
    let snake = re(&SNAKE, r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b");
    for r in [camel, lower_camel, snake] {
        for w in r.find_iter(&prose) {
            idents.push(w.as_str().to_string());
        }
    }
    for id in idents {
        let id = id.trim_matches('_').to_string();
        if id.len() >= 3
            && !STOP_WORDS.contains(&id.as_str())
            && m.identifiers.len() < MAX_IDENTIFIERS
        {
            push_unique(&mut m.identifiers, id);
        }
    }
    m
}

fn push_unique(v: &mut Vec<String>, s: String) {
    if !v.contains(&s) {
        v.push(s);
    }
}

enum PathCandidate {
    Strong(String),
    Weak(String),
    No,
}

fn classify_path(raw: &str) -> PathCandidate {
    static LINE_SUFFIX: OnceLock<Regex> = OnceLock::new();
    let t = raw.trim_end_matches(['.', ':', '!', '?']);
    let t = re(&LINE_SUFFIX, r"(:\d+(:\d+)?|#L\d+(-L?\d+)?)$").replace(t, "");
    let t = t.trim_start_matches("./").trim_start_matches('/');
    if t.is_empty()
        || t.contains("://")
        || t.starts_with("www.")
        || t.contains(['@', '#', '=', '\\', '~', '$', '%', '&'])
        || t.starts_with('-')
        || !t.chars().any(|c| c.is_ascii_alphabetic())
        || !t
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/-+".contains(c))
        || t.contains("..")
    {
        return PathCandidate::No;
    }
    let last = t.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    let ext = last
        .rsplit_once('.')
        .map(|(stem, ext)| (stem, ext.to_ascii_lowercase()));
    let has_ext = |known_only: bool| match &ext {
        Some((stem, ext)) => {
            !stem.is_empty()
                && (1..=10).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && ext.chars().any(|c| c.is_ascii_alphabetic())
                && (!known_only || SOURCE_EXTENSIONS.contains(&ext.as_str()))
        }
        None => false,
    };
    let special = matches!(
        last,
        "Makefile" | "Dockerfile" | "Justfile" | "Rakefile" | "Gemfile"
    );
    if t.contains('/') {
        if t.ends_with('/') || has_ext(false) || special {
            PathCandidate::Strong(t.to_string())
        } else {
            PathCandidate::Weak(t.to_string())
        }
    } else if has_ext(true) || special {
        PathCandidate::Strong(t.to_string())
    } else {
        PathCandidate::No
    }
}

/// Labels -> (task type, risk, requires_web). Pure; the GitHub source uses it too.
///
/// Matching is case-insensitive and ignores a `type:`/`type/`/`kind:`/`kind/` prefix.
/// Task type: the first label that names one wins — bug/bugfix/fix → bugfix,
/// enhancement/feature → feature, documentation/docs → docs, refactor/refactoring,
/// research/spike, migration, review. Risk: `risk:high|medium|low` (also `risk/…`,
/// `risk-…`, `risk: …`), the highest wins. requires_web: a `needs-web`, `requires-web`,
/// `web` or `web-access` label, or a research label (research means reading the web).
pub fn classify_labels<S: AsRef<str>>(labels: &[S]) -> (Option<TaskType>, Option<Risk>, bool) {
    let mut task_type = None;
    let mut risk: Option<Risk> = None;
    let mut web = false;
    for label in labels {
        let l = label.as_ref().trim().to_ascii_lowercase();
        let bare = ["type:", "type/", "kind:", "kind/"]
            .iter()
            .find_map(|p| l.strip_prefix(p))
            .unwrap_or(&l)
            .trim();
        let t = match bare {
            "bug" | "bugfix" | "fix" => Some(TaskType::Bugfix),
            "enhancement" | "feature" => Some(TaskType::Feature),
            "documentation" | "docs" => Some(TaskType::Docs),
            "refactor" | "refactoring" => Some(TaskType::Refactor),
            "research" | "spike" => Some(TaskType::Research),
            "migration" => Some(TaskType::Migration),
            "review" => Some(TaskType::Review),
            _ => None,
        };
        if t == Some(TaskType::Research) {
            web = true;
        }
        if task_type.is_none() {
            task_type = t;
        }
        if matches!(bare, "needs-web" | "requires-web" | "web" | "web-access") {
            web = true;
        }
        let r = ["risk:", "risk/", "risk-"]
            .iter()
            .find_map(|p| l.strip_prefix(p))
            .and_then(|v| v.trim().parse::<Risk>().ok());
        if let Some(r) = r {
            risk = Some(risk.map_or(r, |old| old.max(r)));
        }
    }
    (task_type, risk, web)
}

/// Where to look things up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepoSnapshot {
    /// A checked-out directory, read as it is on disk.
    Dir(PathBuf),
    /// A bare repository (mirror) at a ref.
    Git { git_dir: PathBuf, rev: String },
}

impl RepoSnapshot {
    /// A bare repository becomes `Git` at `rev` (default `HEAD`); anything else `Dir`.
    pub fn detect(path: &Path, rev: Option<&str>) -> RepoSnapshot {
        let bare = path.join("HEAD").is_file()
            && path.join("objects").is_dir()
            && path.join("refs").is_dir()
            && !path.join(".git").exists();
        if bare {
            RepoSnapshot::Git {
                git_dir: path.to_path_buf(),
                rev: rev.unwrap_or("HEAD").to_string(),
            }
        } else {
            RepoSnapshot::Dir(path.to_path_buf())
        }
    }

    fn describe(&self) -> String {
        match self {
            RepoSnapshot::Dir(d) => d.display().to_string(),
            RepoSnapshot::Git { git_dir, rev } => format!("{} at {rev}", git_dir.display()),
        }
    }

    /// Every file, repository-relative, `/`-separated, sorted.
    fn list_files(&self) -> Result<Vec<String>, String> {
        match self {
            RepoSnapshot::Dir(root) => {
                let mut out = Vec::new();
                walk(root, root, &mut out)?;
                out.sort();
                Ok(out)
            }
            RepoSnapshot::Git { git_dir, rev } => {
                let tree = format!("{rev}^{{tree}}");
                let out = git(git_dir, &["ls-tree", "-r", "-z", "--name-only", &tree])?;
                let mut files: Vec<String> = out
                    .split(|b| *b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect();
                files.sort();
                Ok(files)
            }
        }
    }

    /// Size and (when small enough) contents of a file.
    fn read(&self, path: &str) -> Result<(u64, Option<Vec<u8>>), String> {
        match self {
            RepoSnapshot::Dir(root) => {
                let p = root.join(path);
                let len = std::fs::metadata(&p)
                    .map_err(|e| format!("cannot stat {}: {e}", p.display()))?
                    .len();
                if len > MAX_FILE_BYTES {
                    return Ok((len, None));
                }
                let bytes =
                    std::fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                Ok((len, Some(bytes)))
            }
            RepoSnapshot::Git { git_dir, rev } => {
                let object = format!("{rev}:{path}");
                let size = git(git_dir, &["cat-file", "-s", &object])?;
                let len: u64 = String::from_utf8_lossy(&size)
                    .trim()
                    .parse()
                    .map_err(|_| format!("git cat-file -s {object} printed no size"))?;
                if len > MAX_FILE_BYTES {
                    return Ok((len, None));
                }
                Ok((len, Some(git(git_dir, &["cat-file", "blob", &object])?)))
            }
        }
    }

    /// For each identifier, the files containing it as a whole word, sorted.
    fn references(&self, idents: &[String], all: &[String]) -> Result<Vec<Vec<String>>, String> {
        let RepoSnapshot::Dir(root) = self else {
            return idents
                .iter()
                .map(|i| self.files_referencing(i, all))
                .collect();
        };
        let words = idents
            .iter()
            .map(|i| {
                regex::bytes::Regex::new(&format!(r"(?-u)\b{}\b", regex::escape(i)))
                    .map_err(|e| format!("identifier `{i}`: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut out = vec![Vec::new(); idents.len()];
        if idents.is_empty() {
            return Ok(out);
        }
        // One read per file, every identifier tested against it.
        for f in all {
            let p = root.join(f);
            let Ok(meta) = std::fs::metadata(&p) else {
                continue;
            };
            if meta.len() > MAX_FILE_BYTES {
                continue;
            }
            let Ok(bytes) = std::fs::read(&p) else {
                continue;
            };
            if is_binary(&bytes) {
                continue;
            }
            for (word, files) in words.iter().zip(out.iter_mut()) {
                if word.is_match(&bytes) {
                    files.push(f.clone());
                }
            }
        }
        Ok(out)
    }

    /// Files containing `ident` as a whole word at the ref, sorted (git grep -w).
    fn files_referencing(&self, ident: &str, all: &[String]) -> Result<Vec<String>, String> {
        match self {
            RepoSnapshot::Dir(_) => self
                .references(&[ident.to_string()], all)
                .map(|mut v| v.pop().unwrap_or_default()),
            RepoSnapshot::Git { git_dir, rev } => {
                // Exit status 1 means "no match", not failure.
                let out = Command::new("git")
                    .arg("--git-dir")
                    .arg(git_dir)
                    .args(["grep", "-l", "-w", "-F", "-I", "-z", "-e", ident, rev, "--"])
                    .output()
                    .map_err(|e| format!("cannot run git: {e}"))?;
                match out.status.code() {
                    Some(0) => {}
                    Some(1) => return Ok(Vec::new()),
                    _ => {
                        return Err(format!(
                            "git grep {ident} in {} failed: {}",
                            git_dir.display(),
                            String::from_utf8_lossy(&out.stderr).trim()
                        ))
                    }
                }
                let prefix = format!("{rev}:");
                let mut files: Vec<String> = out
                    .stdout
                    .split(|b| *b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        let s = String::from_utf8_lossy(s);
                        s.strip_prefix(&prefix).unwrap_or(&s).to_string()
                    })
                    .collect();
                files.sort();
                Ok(files)
            }
        }
    }
}

fn git(git_dir: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {} in {} failed: {}",
            args.join(" "),
            git_dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let name = entry.file_name();
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if matches!(name.to_str(), Some(".git" | "target" | "node_modules")) {
                continue;
            }
            walk(root, &path, out)?;
        } else if kind.is_file() {
            if let Ok(rel) = path.strip_prefix(root) {
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
    }
    Ok(())
}

fn is_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(8192).any(|b| *b == 0)
}

/// Non-blank lines.
pub fn count_loc(bytes: &[u8]) -> u64 {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| l.iter().any(|b| !b.is_ascii_whitespace()))
        .count() as u64
}

/// Resolves mentioned paths against the repository's file list. Pure.
/// Returns (files, missing strong paths).
pub fn resolve_paths(m: &Mentions, all: &[String]) -> (Vec<String>, Vec<String>) {
    let mut found: Vec<String> = Vec::new();
    let mut missing = Vec::new();
    let lookup = |p: &str| -> Vec<String> {
        let dir = p.trim_end_matches('/');
        if all.binary_search(&dir.to_string()).is_ok() && !p.ends_with('/') {
            return vec![dir.to_string()];
        }
        let prefix = format!("{dir}/");
        let under: Vec<String> = all
            .iter()
            .filter(|f| f.starts_with(&prefix))
            .cloned()
            .collect();
        if !under.is_empty() {
            return under;
        }
        let suffix = format!("/{dir}");
        let by_suffix: Vec<String> = all
            .iter()
            .filter(|f| f.ends_with(&suffix))
            .cloned()
            .collect();
        if by_suffix.len() <= MAX_SUFFIX_MATCHES {
            by_suffix
        } else {
            Vec::new()
        }
    };
    for p in &m.paths {
        let hits = lookup(p);
        if hits.is_empty() {
            missing.push(p.clone());
        }
        for h in hits {
            push_unique(&mut found, h);
        }
    }
    for p in &m.weak_paths {
        for h in lookup(p) {
            push_unique(&mut found, h);
        }
    }
    (found, missing)
}

/// Gathers a task's facts; `repo_dir` is a checkout or a bare mirror (read at the task's
/// `base_ref`, default `HEAD`). Never fails: what cannot be read becomes a warning.
pub fn gather_facts(task: &Task, repo_dir: Option<&Path>) -> TaskFacts {
    let snapshot = repo_dir.map(|p| RepoSnapshot::detect(p, task.base_ref.as_deref()));
    gather_facts_at(task, snapshot.as_ref())
}

/// Routing reads at most this much of a task's text (title and body): enough for any
/// issue a person writes, and it bounds routing time whatever `max_body_bytes` allows
/// (issue 12: a 10 MB body took minutes). The context estimate still counts all of it.
pub const MAX_SCANNED_TEXT_BYTES: usize = 256 * 1024;

/// The longest prefix of `text` within `max` bytes, cut at a character boundary.
fn prefix_within(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// [`gather_facts`] with an explicit snapshot.
pub fn gather_facts_at(task: &Task, snapshot: Option<&RepoSnapshot>) -> TaskFacts {
    let full_chars = (task.title.chars().count() + 2 + task.body.chars().count()) as u64;
    let text = if task.body.trim().is_empty() {
        task.title.clone()
    } else {
        let room = MAX_SCANNED_TEXT_BYTES.saturating_sub(task.title.len() + 2);
        format!("{}\n\n{}", task.title, prefix_within(&task.body, room))
    };
    let full_chars = if task.body.trim().is_empty() {
        text.chars().count() as u64
    } else {
        full_chars
    };
    let (label_type, label_risk, label_web) = classify_labels(&task.labels);
    let task_type = label_type.unwrap_or(task.task_type);
    let mut facts = TaskFacts {
        task_type,
        risk: label_risk.unwrap_or(task.risk),
        refactor: task_type == TaskType::Refactor,
        requires_web: task.requires_web || label_web,
        labels: task.labels.clone(),
        ..TaskFacts::default()
    };
    let mentions = extract_mentions(&text);
    let mut file_bytes: u64 = 0;

    match snapshot {
        None => {
            facts.files = mentions
                .paths
                .iter()
                .filter(|p| !p.ends_with('/'))
                .map(|p| FileFact {
                    path: p.clone(),
                    loc: 0,
                    bytes: 0,
                    verified: false,
                })
                .collect();
        }
        Some(snap) => match snap.list_files() {
            Err(e) => {
                facts.warnings.push(format!(
                    "repository {} could not be read, scoring from the text only: {e}",
                    snap.describe()
                ));
            }
            Ok(all) => {
                facts.repo_checked = true;
                let (files, missing) = resolve_paths(&mentions, &all);
                facts.missing_paths = missing;
                for path in files {
                    match snap.read(&path) {
                        Ok((len, contents)) => {
                            file_bytes += len;
                            let mut fact = FileFact {
                                path: path.clone(),
                                loc: 0,
                                bytes: len,
                                verified: true,
                            };
                            if let Some(bytes) = contents.filter(|b| !is_binary(b)) {
                                fact.loc = count_loc(&bytes);
                                let s = String::from_utf8_lossy(&bytes);
                                let kw = FileKeywords {
                                    path: path.clone(),
                                    security: keywords_in(&s, Category::Security),
                                    concurrency: keywords_in(&s, Category::Concurrency),
                                };
                                if !kw.security.is_empty() || !kw.concurrency.is_empty() {
                                    facts.file_keywords.push(kw);
                                }
                            }
                            facts.files.push(fact);
                        }
                        Err(e) => facts.warnings.push(e),
                    }
                }
                match snap.references(&mentions.identifiers, &all) {
                    Ok(refs) => {
                        facts.identifiers = mentions
                            .identifiers
                            .iter()
                            .zip(refs)
                            .map(|(name, files)| IdentifierFact {
                                name: name.clone(),
                                files,
                            })
                            .collect();
                    }
                    Err(e) => facts.warnings.push(e),
                }
            }
        },
    }
    if snapshot.is_none() {
        // Identifiers are still shown, with no callers known.
        facts.identifiers = mentions
            .identifiers
            .iter()
            .map(|i| IdentifierFact {
                name: i.clone(),
                files: Vec::new(),
            })
            .collect();
    }
    facts.context_tokens = (full_chars + file_bytes).div_ceil(4);
    facts.text = text;
    facts
}

/// Writes what the facts decided back into the task (type, scope, risk, web, tokens).
pub fn enrich_task(task: &mut Task, facts: &TaskFacts) {
    task.task_type = facts.task_type;
    task.risk = facts.risk;
    task.scope = facts.scope();
    task.requires_web = facts.requires_web;
    task.context_tokens = facts.context_tokens;
}

/// Distinct files of the facts (for display).
pub fn file_paths(facts: &TaskFacts) -> BTreeSet<&str> {
    facts.files.iter().map(|f| f.path.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_extracted() {
        fn check(text: &str, strong: &[&str], weak: &[&str]) {
            let m = extract_mentions(text);
            assert_eq!(m.paths, strong, "{text:?}");
            assert_eq!(m.weak_paths, weak, "{text:?}");
        }
        check("Fix src/lib.rs please", &["src/lib.rs"], &[]);
        check("see `src/a/b.py:42`.", &["src/a/b.py"], &[]);
        check(
            "in ./tools/x.sh#L10-L20, and Cargo.toml",
            &["tools/x.sh", "Cargo.toml"],
            &[],
        );
        check(
            "refactor src/routing/ and src/store",
            &["src/routing/"],
            &["src/store"],
        );
        check("main.rs (the entry)", &["main.rs"], &[]);
        check(
            "https://example.com/a/b.html e.g. v1.2 and/or owner/repo#4",
            &[],
            &["and/or"],
        );
        check("node.js is not a file here? it has .js", &["node.js"], &[]);
        check("../etc/passwd.txt", &[], &[]);
        check(
            "Dockerfile and docs/Makefile",
            &["Dockerfile", "docs/Makefile"],
            &[],
        );
    }

    #[test]
    fn identifiers_are_extracted() {
        fn check(text: &str, expect: &[&str]) {
            assert_eq!(extract_mentions(text).identifiers, expect, "{text:?}");
        }
        check(
            "call `parse_config` from `Router::route()`",
            &["parse_config", "Router", "route"],
        );
        check(
            "the TaskFacts struct and getUser",
            &["TaskFacts", "getUser"],
        );
        check(
            "bump MAX_RETRIES in retry_policy",
            &["MAX_RETRIES", "retry_policy"],
        );
        check("fix src/foo_bar.rs on GitHub", &[]);
        check("`fn` and `new` and `self`", &[]);
        check("Simple Words Only", &[]);
    }

    #[test]
    fn labels_are_classified() {
        fn check(labels: &[&str], expect: (Option<TaskType>, Option<Risk>, bool)) {
            assert_eq!(classify_labels(labels), expect, "{labels:?}");
        }
        use TaskType::*;
        check(&[], (None, None, false));
        check(&["bug"], (Some(Bugfix), None, false));
        check(&["Enhancement"], (Some(Feature), None, false));
        check(&["feature"], (Some(Feature), None, false));
        check(&["documentation"], (Some(Docs), None, false));
        check(&["docs"], (Some(Docs), None, false));
        check(&["type: refactor"], (Some(Refactor), None, false));
        check(&["kind/migration"], (Some(Migration), None, false));
        check(&["review"], (Some(Review), None, false));
        check(&["research"], (Some(Research), None, true));
        check(&["needs-web"], (None, None, true));
        check(&["requires-web", "bug"], (Some(Bugfix), None, true));
        check(&["risk:high"], (None, Some(Risk::High), false));
        check(&["risk: medium"], (None, Some(Risk::Medium), false));
        check(&["risk/low", "risk:high"], (None, Some(Risk::High), false));
        check(&["risk:extreme"], (None, None, false));
        check(&["bug", "docs"], (Some(Bugfix), None, false));
        check(&["agent-ready", "good first issue"], (None, None, false));
    }

    #[test]
    fn loc_counts_non_blank_lines() {
        assert_eq!(count_loc(b""), 0);
        assert_eq!(count_loc(b"a\n\n  \nb\n"), 2);
        assert_eq!(count_loc(b"a"), 1);
    }

    #[test]
    fn paths_resolve_exactly_by_directory_and_by_suffix() {
        let all: Vec<String> = [
            "README.md",
            "src/a/mod.rs",
            "src/a/x.rs",
            "src/lib.rs",
            "src/main.rs",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let m = Mentions {
            paths: vec![
                "src/lib.rs".into(),
                "a/x.rs".into(),
                "src/a/".into(),
                "nope.rs".into(),
            ],
            weak_paths: vec!["src/a".into(), "and/or".into()],
            identifiers: vec![],
        };
        let (found, missing) = resolve_paths(&m, &all);
        assert_eq!(found, vec!["src/lib.rs", "src/a/x.rs", "src/a/mod.rs"]);
        assert_eq!(missing, vec!["nope.rs"]);
    }
}
