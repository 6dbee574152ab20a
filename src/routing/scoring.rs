//! Complexity scoring (spec §5.1): [`TaskFacts`] in, [`ComplexityScore`] out.
//!
//! Owns the five dimensions and their thresholds, and the keyword matcher used for the
//! security and concurrency dimensions. Gathering the facts (reading the repository) is
//! `routing::facts`; this module is pure and never touches disk, clock or network.
//!
//! Thresholds (each dimension 0–2, total 0–10):
//! - cyclomatic depth: 2 when the mentioned files hold 50+ LOC or number 5+; else 1 when
//!   they hold 10+ LOC or number 2+; else 0.
//! - fan-out: distinct files referencing any mentioned identifier; 0–2 → 0, 3–10 → 1, 11+ → 2.
//! - security / concurrency: distinct keywords of the category found in the task text or
//!   in the mentioned files; 0 → 0, 1 → 1, 2+ → 2.
//! - domain invariants: high risk → 2; medium risk or a refactor → 1; else 0.
//!
//! Keyword rule: matching is ASCII case-insensitive. Every keyword has a fixed list of
//! forms (`lock`: lock, locked, locking, unlock, unlocked, rwlock, spinlock). A form matches
//! when it starts at a word boundary and ends at a word boundary, optionally followed by a
//! plural `s` or `es` (single-word forms only). A word boundary is a non-alphanumeric
//! character (space, `_`, `<`, `:`…), the start/end of the text, or a camel-case hump
//! (`RwLock`, `AuthToken`). The words of a multi-word form (`for update`) may be separated
//! by spaces, `_` or `-`. So `locks`, `Mutex<` and `session_token` match, while `blocking`,
//! `clocks` and `trace` do not. When two matches overlap the longer one wins (`OAuth` counts
//! as `oauth`, not `auth`; `deadlock` not `lock`). Hits count distinct keywords, not
//! occurrences.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use crate::domain::{Risk, Scope, TaskType};

/// A file the task mentions, with its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFact {
    /// Repository-relative path, `/`-separated.
    pub path: String,
    /// Non-blank lines.
    pub loc: u64,
    pub bytes: u64,
    /// Found in the repository; `false` when there was no repository to look in and the
    /// path is taken on the text's word.
    pub verified: bool,
}

/// A code identifier the task mentions and the files that reference it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentifierFact {
    pub name: String,
    /// Files containing the identifier as a whole word (the defining file included).
    pub files: Vec<String>,
}

impl IdentifierFact {
    pub fn callers(&self) -> usize {
        self.files.len()
    }
}

/// Keywords found in one mentioned file's contents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileKeywords {
    pub path: String,
    pub security: Vec<String>,
    pub concurrency: Vec<String>,
}

/// Everything scoring and routing need to know about a task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskFacts {
    /// Title and body.
    pub text: String,
    pub task_type: TaskType,
    pub risk: Risk,
    /// A refactor (task type or label): raises domain invariants to at least 1.
    pub refactor: bool,
    pub requires_web: bool,
    pub labels: Vec<String>,
    /// A repository snapshot was available and read.
    pub repo_checked: bool,
    /// Mentioned files (a mentioned directory contributes every file below it).
    pub files: Vec<FileFact>,
    /// Paths the text mentions that the repository does not have.
    pub missing_paths: Vec<String>,
    pub identifiers: Vec<IdentifierFact>,
    pub file_keywords: Vec<FileKeywords>,
    /// Estimated tokens: characters of title, body and mentioned files, divided by 4.
    pub context_tokens: u64,
    /// What could not be looked up (the score then rests on the text alone).
    pub warnings: Vec<String>,
}

impl TaskFacts {
    pub fn scope(&self) -> Scope {
        Scope::from_file_count(self.files.len())
    }

    pub fn total_loc(&self) -> u64 {
        self.files.iter().map(|f| f.loc).sum()
    }

    /// Distinct files referencing any mentioned identifier.
    pub fn caller_files(&self) -> BTreeSet<&str> {
        self.identifiers
            .iter()
            .flat_map(|i| i.files.iter().map(String::as_str))
            .collect()
    }
}

/// One dimension's score and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dimension {
    /// 0, 1 or 2.
    pub score: u32,
    /// One line: the measured value against the thresholds.
    pub reason: String,
    /// Files, words or callers behind the score.
    pub evidence: Vec<String>,
}

/// The five dimensions of spec §5.1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComplexityScore {
    pub cyclomatic_depth: Dimension,
    pub fan_out: Dimension,
    pub security: Dimension,
    pub concurrency: Dimension,
    pub domain_invariants: Dimension,
    /// Sum of the five, 0–10.
    pub total: u32,
}

impl ComplexityScore {
    /// The dimensions with their display names, in spec order.
    pub fn dimensions(&self) -> [(&'static str, &Dimension); 5] {
        [
            ("cyclomatic depth", &self.cyclomatic_depth),
            ("fan-out", &self.fan_out),
            ("security", &self.security),
            ("concurrency", &self.concurrency),
            ("domain invariants", &self.domain_invariants),
        ]
    }
}

/// A keyword category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Security,
    Concurrency,
}

/// (keyword, its forms). Forms of one keyword count once; no form of one keyword may be
/// a boundary-delimited part of another keyword's form except through overlap (the
/// longer match wins).
const SECURITY: &[(&str, &[&str])] = &[
    (
        "auth",
        &[
            "auth",
            "authn",
            "authz",
            "authentication",
            "authenticate",
            "authenticated",
            "authorization",
            "authorize",
            "authorized",
        ],
    ),
    ("token", &["token"]),
    ("secret", &["secret"]),
    ("password", &["password", "passwd"]),
    ("session", &["session"]),
    ("csrf", &["csrf"]),
    ("xss", &["xss"]),
    ("oauth", &["oauth", "oauth2"]),
    ("jwt", &["jwt"]),
    ("permission", &["permission"]),
    ("payment", &["payment"]),
    ("billing", &["billing"]),
    ("pii", &["pii"]),
    ("credential", &["credential"]),
    (
        "encryption",
        &[
            "encrypt",
            "encrypted",
            "encryption",
            "decrypt",
            "decryption",
        ],
    ),
    ("api key", &["api key", "apikey"]),
    ("login", &["login", "logout"]),
    ("sql injection", &["sql injection"]),
];

const CONCURRENCY: &[(&str, &[&str])] = &[
    (
        "lock",
        &[
            "lock", "locked", "locking", "unlock", "unlocked", "rwlock", "spinlock",
        ],
    ),
    ("mutex", &["mutex"]),
    ("semaphore", &["semaphore"]),
    ("atomic", &["atomic", "atomically"]),
    ("transaction", &["transaction", "transactional"]),
    ("for update", &["for update"]),
    ("race", &["race", "racy"]),
    ("deadlock", &["deadlock", "livelock"]),
    ("condvar", &["condvar", "condition variable"]),
    (
        "concurrency",
        &["concurrency", "concurrent", "concurrently"],
    ),
    ("thread-safe", &["thread safe", "threadsafe"]),
];

fn table(category: Category) -> &'static [(&'static str, &'static [&'static str])] {
    match category {
        Category::Security => SECURITY,
        Category::Concurrency => CONCURRENCY,
    }
}

/// The canonical keywords of `category` present in `text`, sorted and distinct.
pub fn keywords_in(text: &str, category: Category) -> Vec<String> {
    let bytes = text.as_bytes();
    // (start, end, keyword) for every form match.
    let mut matches: Vec<(usize, usize, &str)> = Vec::new();
    let forms: Vec<(&str, Vec<&[u8]>, bool)> = table(category)
        .iter()
        .flat_map(|(keyword, forms)| {
            forms.iter().map(move |form| {
                let words = form.split(' ').map(str::as_bytes).collect();
                (*keyword, words, !form.contains(' '))
            })
        })
        .collect();
    // Only word starts can begin a match; checking them alone keeps big files cheap.
    for start in
        (0..bytes.len()).filter(|&i| bytes[i].is_ascii_alphanumeric() && is_boundary(bytes, i))
    {
        for (keyword, words, plural_ok) in &forms {
            if let Some(end) = match_form_at(bytes, start, words, *plural_ok) {
                matches.push((start, end, keyword));
            }
        }
    }
    // Longer matches first at each start, so a contained match is dropped.
    matches.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    // A match is dropped when a kept one with another span contains it. Every kept match
    // starts at or before this one, so the largest kept end (and the earliest start that
    // reaches it) decides in constant time; a pairwise scan took minutes on a 10 MB body
    // (issue 12).
    let mut kept: Vec<(usize, usize, &str)> = Vec::new();
    let mut reach: Option<(usize, usize)> = None; // (largest end, earliest start at it)
    for m in matches {
        let covered = reach.is_some_and(|(end, start)| end > m.1 || (end == m.1 && start < m.0));
        if !covered {
            reach = match reach {
                Some((end, start)) if end == m.1 => Some((end, start.min(m.0))),
                Some((end, start)) if end > m.1 => Some((end, start)),
                _ => Some((m.1, m.0)),
            };
            kept.push(m);
        }
    }
    let found: BTreeSet<&str> = kept.iter().map(|m| m.2).collect();
    found.into_iter().map(str::to_string).collect()
}

/// True between two characters that belong to different words.
fn is_boundary(b: &[u8], i: usize) -> bool {
    if i == 0 || i >= b.len() {
        return true;
    }
    let (p, c) = (b[i - 1], b[i]);
    if !p.is_ascii_alphanumeric() || !c.is_ascii_alphanumeric() {
        return true;
    }
    if p.is_ascii_lowercase() && c.is_ascii_uppercase() {
        return true;
    }
    // `HTTPServer`: the hump sits before the last capital of a run.
    p.is_ascii_uppercase()
        && c.is_ascii_uppercase()
        && b.get(i + 1).is_some_and(|n| n.is_ascii_lowercase())
}

fn eq_ignore_case_at(b: &[u8], at: usize, word: &[u8]) -> bool {
    b.len() >= at + word.len() && b[at..at + word.len()].eq_ignore_ascii_case(word)
}

/// End of the match of `words` starting at `start`, if any.
fn match_form_at(b: &[u8], start: usize, words: &[&[u8]], plural_ok: bool) -> Option<usize> {
    if !b.get(start)?.is_ascii_alphanumeric() || !is_boundary(b, start) {
        return None;
    }
    let mut pos = start;
    for (i, word) in words.iter().enumerate() {
        if !eq_ignore_case_at(b, pos, word) {
            return None;
        }
        pos += word.len();
        if i + 1 < words.len() {
            if !is_boundary(b, pos) {
                return None;
            }
            while pos < b.len()
                && (b[pos].is_ascii_whitespace() || b[pos] == b'_' || b[pos] == b'-')
            {
                pos += 1;
            }
            if pos >= b.len() || !b[pos].is_ascii_alphanumeric() {
                return None;
            }
        }
    }
    if is_boundary(b, pos) {
        return Some(pos);
    }
    if plural_ok {
        for suffix in [&b"s"[..], &b"es"[..]] {
            if eq_ignore_case_at(b, pos, suffix) && is_boundary(b, pos + suffix.len()) {
                return Some(pos + suffix.len());
            }
        }
    }
    None
}

/// Scores a task (spec §5.1). Total, never fails.
pub fn score(facts: &TaskFacts) -> ComplexityScore {
    let cyclomatic_depth = depth_dimension(facts);
    let fan_out = fan_out_dimension(facts);
    let security = keyword_dimension(facts, Category::Security);
    let concurrency = keyword_dimension(facts, Category::Concurrency);
    let domain_invariants = invariants_dimension(facts);
    let total = cyclomatic_depth.score
        + fan_out.score
        + security.score
        + concurrency.score
        + domain_invariants.score;
    ComplexityScore {
        cyclomatic_depth,
        fan_out,
        security,
        concurrency,
        domain_invariants,
        total,
    }
}

/// Depth band from total LOC and file count.
pub fn depth_band(loc: u64, files: usize) -> u32 {
    if loc >= 50 || files >= 5 {
        2
    } else if loc >= 10 || files >= 2 {
        1
    } else {
        0
    }
}

/// Fan-out band from the number of referencing files.
pub fn fan_out_band(callers: usize) -> u32 {
    match callers {
        0..=2 => 0,
        3..=10 => 1,
        _ => 2,
    }
}

/// Keyword band from the number of distinct keywords.
pub fn keyword_band(hits: usize) -> u32 {
    hits.min(2) as u32
}

fn depth_dimension(facts: &TaskFacts) -> Dimension {
    let loc = facts.total_loc();
    let files = facts.files.len();
    let score = depth_band(loc, files);
    let unverified = facts.files.iter().filter(|f| !f.verified).count();
    let mut reason = format!(
        "{files} file{} and {loc} LOC mentioned (0: <10 LOC and 0-1 files; 1: 10+ LOC or 2+ files; 2: 50+ LOC or 5+ files)",
        plural(files)
    );
    if unverified > 0 {
        reason.push_str(&format!(
            "; {unverified} path{} not verified (no repository)",
            plural(unverified)
        ));
    }
    let evidence = facts
        .files
        .iter()
        .map(|f| {
            if f.verified {
                format!("{} ({} LOC)", f.path, f.loc)
            } else {
                format!("{} (not verified)", f.path)
            }
        })
        .collect();
    Dimension {
        score,
        reason,
        evidence,
    }
}

fn fan_out_dimension(facts: &TaskFacts) -> Dimension {
    let callers = facts.caller_files().len();
    let score = fan_out_band(callers);
    let reason = if facts.identifiers.is_empty() {
        "no code identifiers mentioned (0: 0-2 callers; 1: 3-10; 2: 11+)".to_string()
    } else {
        format!(
            "{callers} file{} reference the {} mentioned identifier{} (0: 0-2 callers; 1: 3-10; 2: 11+)",
            plural(callers),
            facts.identifiers.len(),
            plural(facts.identifiers.len())
        )
    };
    let evidence = facts
        .identifiers
        .iter()
        .map(|i| {
            let shown: Vec<&str> = i.files.iter().take(5).map(String::as_str).collect();
            let more = i.files.len().saturating_sub(shown.len());
            let mut line = format!(
                "{}: {} caller file{}",
                i.name,
                i.callers(),
                plural(i.callers())
            );
            if !shown.is_empty() {
                line.push_str(&format!(" ({}", shown.join(", ")));
                if more > 0 {
                    line.push_str(&format!(", +{more} more"));
                }
                line.push(')');
            }
            line
        })
        .collect();
    Dimension {
        score,
        reason,
        evidence,
    }
}

fn keyword_dimension(facts: &TaskFacts, category: Category) -> Dimension {
    // keyword -> where it was found
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for k in keywords_in(&facts.text, category) {
        found.entry(k).or_default().push("task text".to_string());
    }
    for file in &facts.file_keywords {
        let words = match category {
            Category::Security => &file.security,
            Category::Concurrency => &file.concurrency,
        };
        for k in words {
            found.entry(k.clone()).or_default().push(file.path.clone());
        }
    }
    let hits = found.len();
    let score = keyword_band(hits);
    let what = match category {
        Category::Security => "security",
        Category::Concurrency => "concurrency",
    };
    let reason = format!(
        "{hits} distinct {what} keyword{} (0: none; 1: one; 2: two or more)",
        plural(hits)
    );
    let evidence = found
        .into_iter()
        .map(|(k, places)| format!("{k} ({})", places.join(", ")))
        .collect();
    Dimension {
        score,
        reason,
        evidence,
    }
}

fn invariants_dimension(facts: &TaskFacts) -> Dimension {
    let score = match (facts.risk, facts.refactor) {
        (Risk::High, _) => 2,
        (Risk::Medium, _) | (_, true) => 1,
        (Risk::Low, false) => 0,
    };
    let reason = format!(
        "risk {}, {} (0: low risk; 1: medium risk or refactor; 2: high risk)",
        facts.risk,
        if facts.refactor {
            "a refactor"
        } else {
            "not a refactor"
        }
    );
    let mut evidence = vec![format!("risk: {}", facts.risk)];
    if facts.refactor {
        evidence.push("refactor".to_string());
    }
    Dimension {
        score,
        reason,
        evidence,
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, loc: u64) -> FileFact {
        FileFact {
            path: path.to_string(),
            loc,
            bytes: loc * 20,
            verified: true,
        }
    }

    fn files(n: usize, loc_each: u64) -> Vec<FileFact> {
        (0..n)
            .map(|i| file(&format!("src/f{i}.rs"), loc_each))
            .collect()
    }

    #[test]
    fn depth_thresholds() {
        fn check(loc_each: u64, n: usize, expect: u32) {
            let facts = TaskFacts {
                files: files(n, loc_each),
                ..TaskFacts::default()
            };
            assert_eq!(
                score(&facts).cyclomatic_depth.score,
                expect,
                "{n} files x {loc_each} LOC"
            );
        }
        check(0, 0, 0);
        check(9, 1, 0);
        check(10, 1, 1);
        check(49, 1, 1);
        check(50, 1, 2);
        check(1, 1, 0);
        check(1, 2, 1);
        check(1, 4, 1);
        check(1, 5, 2);
        check(0, 5, 2);
        check(4, 2, 1); // 8 LOC but 2 files
    }

    #[test]
    fn fan_out_thresholds() {
        fn check(n: usize, expect: u32) {
            let facts = TaskFacts {
                identifiers: vec![IdentifierFact {
                    name: "parse_config".into(),
                    files: (0..n).map(|i| format!("src/c{i}.rs")).collect(),
                }],
                ..TaskFacts::default()
            };
            assert_eq!(score(&facts).fan_out.score, expect, "{n} callers");
        }
        check(0, 0);
        check(2, 0);
        check(3, 1);
        check(10, 1);
        check(11, 2);
    }

    #[test]
    fn fan_out_counts_distinct_files_across_identifiers() {
        let facts = TaskFacts {
            identifiers: vec![
                IdentifierFact {
                    name: "A".into(),
                    files: vec!["x.rs".into(), "y.rs".into()],
                },
                IdentifierFact {
                    name: "B".into(),
                    files: vec!["y.rs".into(), "z.rs".into()],
                },
            ],
            ..TaskFacts::default()
        };
        let s = score(&facts);
        assert_eq!(s.fan_out.score, 1);
        assert!(
            s.fan_out.reason.starts_with("3 files"),
            "{}",
            s.fan_out.reason
        );
    }

    #[test]
    fn keyword_matching() {
        fn check(text: &str, category: Category, expect: &[&str]) {
            assert_eq!(keywords_in(text, category), expect, "text: {text:?}");
        }
        use Category::*;
        check("", Concurrency, &[]);
        check("take the lock", Concurrency, &["lock"]);
        check("too many locks held", Concurrency, &["lock"]);
        check("LOCKS", Concurrency, &["lock"]);
        check("wrap it in a Mutex<Vec<u8>>", Concurrency, &["mutex"]);
        check("a blocking call", Concurrency, &[]);
        check("clocks and padlocking", Concurrency, &[]);
        check("use RwLock here", Concurrency, &["lock"]);
        check("acquire_lock()", Concurrency, &["lock"]);
        check("a deadlock", Concurrency, &["deadlock"]);
        check("DeadLock", Concurrency, &["deadlock"]);
        check("SELECT * FROM t FOR UPDATE", Concurrency, &["for update"]);
        check("select_for_update", Concurrency, &["for update"]);
        check("trace the grace period", Concurrency, &[]);
        check("a race condition", Concurrency, &["race"]);
        check(
            "AtomicUsize and a transaction",
            Concurrency,
            &["atomic", "transaction"],
        );
        check("lock, unlock, locked, locking", Concurrency, &["lock"]);
        check("locksmith", Concurrency, &[]);
        check("auth tokens", Security, &["auth", "token"]);
        check(
            "Authentication of the session",
            Security,
            &["auth", "session"],
        );
        check("OAuth", Security, &["oauth"]);
        check("refresh the AuthToken", Security, &["auth", "token"]);
        check("session_token", Security, &["session", "token"]);
        check("author and authority", Security, &[]);
        check("tokenizer", Security, &[]);
        check("JWT and CSRF and PII", Security, &["csrf", "jwt", "pii"]);
        check("passwords", Security, &["password"]);
        check(
            "payments billing permissions secrets",
            Security,
            &["billing", "payment", "permission", "secret"],
        );
        check("set the API key", Security, &["api key"]);
        check("HTTPSession", Security, &["session"]);
        check("passé session", Security, &["session"]);
    }

    #[test]
    fn keyword_thresholds_count_distinct_words() {
        fn check(text: &str, sec: u32, conc: u32) {
            let s = score(&TaskFacts {
                text: text.into(),
                ..TaskFacts::default()
            });
            assert_eq!(
                (s.security.score, s.concurrency.score),
                (sec, conc),
                "{text:?}"
            );
        }
        check("rename a button", 0, 0);
        check("token", 1, 0);
        check("token token tokens", 1, 0);
        check("token and password", 2, 0);
        check("token password secret", 2, 0);
        check("a lock", 0, 1);
        check("a lock and a mutex", 0, 2);
        check("blocking lock", 0, 1);
    }

    #[test]
    fn file_keywords_add_to_text_keywords() {
        let facts = TaskFacts {
            text: "fix the lock".into(),
            file_keywords: vec![FileKeywords {
                path: "src/pool.rs".into(),
                security: vec![],
                concurrency: vec!["lock".into(), "semaphore".into()],
            }],
            ..TaskFacts::default()
        };
        let s = score(&facts);
        assert_eq!(s.concurrency.score, 2);
        assert_eq!(
            s.concurrency.evidence,
            vec!["lock (task text, src/pool.rs)", "semaphore (src/pool.rs)"]
        );
    }

    #[test]
    fn invariants_from_risk_and_refactor() {
        fn check(risk: Risk, refactor: bool, expect: u32) {
            let s = score(&TaskFacts {
                risk,
                refactor,
                ..TaskFacts::default()
            });
            assert_eq!(s.domain_invariants.score, expect, "{risk} {refactor}");
        }
        check(Risk::Low, false, 0);
        check(Risk::Low, true, 1);
        check(Risk::Medium, false, 1);
        check(Risk::Medium, true, 1);
        check(Risk::High, false, 2);
        check(Risk::High, true, 2);
    }

    #[test]
    fn total_is_the_sum_and_at_most_ten() {
        let facts = TaskFacts {
            text: "auth token mutex lock".into(),
            risk: Risk::High,
            files: files(6, 100),
            identifiers: vec![IdentifierFact {
                name: "X".into(),
                files: (0..20).map(|i| format!("{i}.rs")).collect(),
            }],
            ..TaskFacts::default()
        };
        let s = score(&facts);
        assert_eq!(s.total, 10);
        let sum: u32 = s.dimensions().iter().map(|(_, d)| d.score).sum();
        assert_eq!(sum, s.total);
    }

    #[test]
    fn unverified_paths_are_flagged_in_evidence() {
        let facts = TaskFacts {
            files: vec![FileFact {
                path: "src/a.rs".into(),
                loc: 0,
                bytes: 0,
                verified: false,
            }],
            ..TaskFacts::default()
        };
        let d = score(&facts).cyclomatic_depth;
        assert_eq!(d.evidence, vec!["src/a.rs (not verified)"]);
        assert!(d.reason.contains("not verified"), "{}", d.reason);
    }
}
