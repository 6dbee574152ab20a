//! Task facts (spec §5.1 inputs): what a task's text mentions, and what the repository's
//! answer counts for. Pure: `workspace::RepoSnapshot` reads the repository (a checkout on disk
//! or a bare mirror at a ref) and `orchestrator::facts` calls [`resolve_paths`],
//! [`file_fact`] and [`task_facts`] with what it read. Scoring itself is `routing::scoring`.
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
//!   Files over `workspace::repo_read::MAX_FILE_BYTES` count with their size only.
//! - Keywords are counted in the task text AND in the mentioned files' contents (a file
//!   full of locks makes the change concurrency-sensitive even if the issue is terse).
//! - Without a repository the mentioned paths still count as (unverified) files with 0 LOC,
//!   so a task scores from its text alone; lookup failures become `warnings`, never errors.
//! - Labels: see [`classify_labels`]. context_tokens = (chars of title + body + bytes of
//!   the mentioned files) / 4, rounded up.

use regex::Regex;
use std::collections::BTreeSet;
use std::sync::OnceLock;

use super::scoring::{keywords_in, Category, FileFact, FileKeywords, IdentifierFact, TaskFacts};
use crate::domain::{Risk, Task, TaskType};

/// At most this many identifiers are looked up.
pub const MAX_IDENTIFIERS: usize = 20;
/// A path found only as a suffix is taken when it matches at most this many files.
pub const MAX_SUFFIX_MATCHES: usize = 5;

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

/// Whether a file's first 8 KiB hold a NUL byte (its contents are not counted).
pub fn is_binary(bytes: &[u8]) -> bool {
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

/// The text routing scans (title and body, the body cut to [`MAX_SCANNED_TEXT_BYTES`]) and
/// the character count of the whole text (the context estimate counts all of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskText {
    pub scanned: String,
    pub full_chars: u64,
}

impl TaskText {
    pub fn of(task: &Task) -> TaskText {
        if task.body.trim().is_empty() {
            let scanned = task.title.clone();
            let full_chars = scanned.chars().count() as u64;
            return TaskText {
                scanned,
                full_chars,
            };
        }
        let full_chars = (task.title.chars().count() + 2 + task.body.chars().count()) as u64;
        let room = MAX_SCANNED_TEXT_BYTES.saturating_sub(task.title.len() + 2);
        TaskText {
            scanned: format!("{}\n\n{}", task.title, prefix_within(&task.body, room)),
            full_chars,
        }
    }
}

/// What the repository said about a task's mentions (read by `workspace::RepoSnapshot`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepoLookup {
    /// No repository given: the mentioned paths count as unverified files with 0 LOC.
    NoRepository,
    /// The repository's file list could not be read: the task scores from its text.
    Unreadable {
        repo: String,
        error: String,
    },
    Read(RepoRead),
}

/// The mentioned files as read, and the files referencing each identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoRead {
    /// Strong paths that matched no file.
    pub missing_paths: Vec<String>,
    /// The resolved files that could be read, in resolution order.
    pub files: Vec<FileFact>,
    /// Keywords found in those files (files with none are left out).
    pub file_keywords: Vec<FileKeywords>,
    /// Total size of the files read.
    pub file_bytes: u64,
    /// Files that could not be read, in resolution order.
    pub warnings: Vec<String>,
    /// For each mentioned identifier in order, the files containing it as a whole word,
    /// or why they could not be searched.
    pub references: Result<Vec<Vec<String>>, String>,
}

/// What one read file counts for: its LOC and keywords (none when binary or not read
/// because too large: `contents` is `None`).
pub fn file_fact(
    path: String,
    len: u64,
    contents: Option<&[u8]>,
) -> (FileFact, Option<FileKeywords>) {
    let mut fact = FileFact {
        path,
        loc: 0,
        bytes: len,
        verified: true,
    };
    let mut keywords = None;
    if let Some(bytes) = contents.filter(|b| !is_binary(b)) {
        fact.loc = count_loc(bytes);
        let s = String::from_utf8_lossy(bytes);
        let kw = FileKeywords {
            path: fact.path.clone(),
            security: keywords_in(&s, Category::Security),
            concurrency: keywords_in(&s, Category::Concurrency),
        };
        if !kw.security.is_empty() || !kw.concurrency.is_empty() {
            keywords = Some(kw);
        }
    }
    (fact, keywords)
}

/// A task's facts from its text, labels and what the repository said. Pure.
pub fn task_facts(task: &Task, text: TaskText, mentions: &Mentions, repo: RepoLookup) -> TaskFacts {
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
    let mut file_bytes: u64 = 0;

    match repo {
        RepoLookup::NoRepository => {
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
        RepoLookup::Unreadable { repo, error } => {
            facts.warnings.push(format!(
                "repository {repo} could not be read, scoring from the text only: {error}"
            ));
        }
        RepoLookup::Read(read) => {
            facts.repo_checked = true;
            facts.missing_paths = read.missing_paths;
            facts.files = read.files;
            facts.file_keywords = read.file_keywords;
            facts.warnings = read.warnings;
            file_bytes = read.file_bytes;
            match read.references {
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
    }
    facts.context_tokens = (text.full_chars + file_bytes).div_ceil(4);
    facts.text = text.scanned;
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

    #[test]
    fn facts_follow_what_the_repository_said() {
        use crate::domain::SourceKind;
        let mut task = Task::new(
            "local-1",
            SourceKind::Local,
            "1",
            "/r",
            "Fix",
            chrono::Utc::now(),
        );
        task.body = "the lock in src/a.rs and src/gone.rs, see `spawn_worker`".into();
        let text = TaskText::of(&task);
        let mentions = extract_mentions(&text.scanned);
        let chars = text.full_chars;

        let none = task_facts(&task, text.clone(), &mentions, RepoLookup::NoRepository);
        assert!(!none.repo_checked);
        assert_eq!(none.files.len(), 2);
        assert!(none.files.iter().all(|f| !f.verified));
        assert_eq!(none.identifiers[0].name, "spawn_worker");
        assert_eq!(none.context_tokens, chars.div_ceil(4));

        let unreadable = RepoLookup::Unreadable {
            repo: "/r at main".into(),
            error: "no ref".into(),
        };
        let u = task_facts(&task, text.clone(), &mentions, unreadable);
        assert!(!u.repo_checked && u.files.is_empty() && u.identifiers.is_empty());
        assert_eq!(
            u.warnings,
            vec!["repository /r at main could not be read, scoring from the text only: no ref"]
        );

        let (fact, keywords) =
            file_fact("src/a.rs".into(), 40, Some(b"let m = Mutex::new(1);\n\n"));
        assert_eq!((fact.loc, fact.bytes, fact.verified), (1, 40, true));
        let read = RepoRead {
            missing_paths: vec!["src/gone.rs".into()],
            files: vec![fact],
            file_keywords: keywords.into_iter().collect(),
            file_bytes: 40,
            warnings: vec!["cannot read x".into()],
            references: Err("grep failed".into()),
        };
        let r = task_facts(&task, text, &mentions, RepoLookup::Read(read));
        assert!(r.repo_checked);
        assert_eq!(r.missing_paths, vec!["src/gone.rs"]);
        assert_eq!(r.file_keywords.len(), 1);
        assert_eq!(r.warnings, vec!["cannot read x", "grep failed"]);
        assert!(r.identifiers.is_empty());
        assert_eq!(r.context_tokens, (chars + 40).div_ceil(4));
    }
}
