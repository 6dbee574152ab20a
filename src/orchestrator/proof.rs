//! Proof-of-work gates that need no container (spec §10, DESIGN.md "Proof of work"):
//! the agent's own verdict, a non-empty diff, untouched protected paths, no submodule or
//! filter-attribute change, no oversized file, no known secret (issue 11). The checks that
//! run commands live in `verify`; this module only judges values.

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::domain::{AttemptStatus, CheckEvidence};
use crate::workspace::TreeChange;

/// Compiled protected-path globs.
#[derive(Debug, Clone)]
pub struct ProtectedPaths {
    patterns: Vec<String>,
    set: GlobSet,
}

impl ProtectedPaths {
    /// Compiles the globs; `dir/**` also protects `dir` itself.
    pub fn new(patterns: &[String]) -> Result<ProtectedPaths, globset::Error> {
        let mut builder = GlobSetBuilder::new();
        for pattern in patterns {
            builder.add(Glob::new(pattern)?);
        }
        Ok(ProtectedPaths {
            patterns: patterns.to_vec(),
            set: builder.build()?,
        })
    }

    /// The changed paths that match a protected glob.
    pub fn violations<'a>(&self, changed: &'a [String]) -> Vec<&'a str> {
        changed
            .iter()
            .map(String::as_str)
            .filter(|path| self.set.is_match(path))
            .collect()
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

/// Evidence for a gate that ran no command.
pub fn gate(name: &str, passed: bool, detail: impl Into<String>) -> CheckEvidence {
    CheckEvidence {
        name: name.to_string(),
        command: String::new(),
        exit_code: None,
        duration_ms: 0,
        passed,
        output_tail: detail.into(),
    }
}

/// The agent's own verdict: only `succeeded` may go on to verification.
pub fn result_gate(status: AttemptStatus, reason: Option<&str>) -> CheckEvidence {
    let passed = status == AttemptStatus::Succeeded;
    let detail = match (passed, reason) {
        (true, _) => "agent reported success".to_string(),
        (false, Some(reason)) => format!("agent run ended {status}: {reason}"),
        (false, None) => format!("agent run ended {status}"),
    };
    gate("result", passed, detail)
}

/// The diff gate: an attempt that changed nothing has proved nothing.
pub fn diff_gate(changed: &[String]) -> CheckEvidence {
    if changed.is_empty() {
        gate("diff", false, "the agent changed no file")
    } else {
        gate("diff", true, format!("{} file(s) changed", changed.len()))
    }
}

/// The protected-path gate.
pub fn protected_gate(protected: &ProtectedPaths, changed: &[String]) -> CheckEvidence {
    let touched = protected.violations(changed);
    if touched.is_empty() {
        gate("protected-paths", true, "no protected path touched")
    } else {
        gate(
            "protected-paths",
            false,
            format!(
                "the agent changed protected path(s) {} (protected: {})",
                touched.join(", "),
                protected.patterns().join(", ")
            ),
        )
    }
}

/// The submodule gate (issue 11): a gitlink or a `.gitmodules` change makes a clone fetch
/// another repository the checks never saw.
pub fn submodule_gate(changes: &[TreeChange], allowed: bool) -> CheckEvidence {
    let found: Vec<&str> = changes
        .iter()
        .filter(|c| {
            c.new_mode == "160000"
                || c.old_mode == "160000"
                || c.path == ".gitmodules"
                || c.path.ends_with("/.gitmodules")
        })
        .map(|c| c.path.as_str())
        .collect();
    match (found.is_empty(), allowed) {
        (true, _) => gate("submodules", true, "no submodule change"),
        (false, true) => gate(
            "submodules",
            true,
            format!(
                "submodule change(s) allowed by verify.allow_submodules: {}",
                found.join(", ")
            ),
        ),
        (false, false) => gate(
            "submodules",
            false,
            format!(
                "the agent changed submodules ({}); set verify.allow_submodules: true to accept them",
                found.join(", ")
            ),
        ),
    }
}

/// Whether a `.gitattributes` text assigns a filter driver (`filter=NAME`, `filter` set).
pub fn assigns_filter(attributes: &str) -> bool {
    attributes.lines().any(|line| {
        let line = line.trim();
        !line.starts_with('#')
            && line
                .split_whitespace()
                .skip(1)
                .any(|attr| attr == "filter" || attr.starts_with("filter="))
    })
}

/// The attributes gate: `.gitattributes` files of the landing commit (path, text) that the
/// agent changed must not assign filter drivers, which run programs on checkout.
pub fn attributes_gate(changed_attributes: &[(String, String)], allowed: bool) -> CheckEvidence {
    let found: Vec<&str> = changed_attributes
        .iter()
        .filter(|(_, text)| assigns_filter(text))
        .map(|(path, _)| path.as_str())
        .collect();
    if found.is_empty() || allowed {
        gate("attributes", true, "no filter attribute added")
    } else {
        gate(
            "attributes",
            false,
            format!(
                "{} assign(s) a filter driver; set verify.allow_attribute_filters: true to accept it",
                found.join(", ")
            ),
        )
    }
}

/// Whether `path` is a `.gitattributes` file.
pub fn is_attributes_file(path: &str) -> bool {
    path == ".gitattributes" || path.ends_with("/.gitattributes")
}

/// The size gate: no added or changed file above `max_bytes`.
pub fn size_gate(changes: &[TreeChange], max_bytes: u64) -> CheckEvidence {
    let big: Vec<String> = changes
        .iter()
        .filter(|c| c.size.is_some_and(|s| s > max_bytes))
        .map(|c| format!("{} ({} bytes)", c.path, c.size.unwrap_or(0)))
        .collect();
    if big.is_empty() {
        gate(
            "file-size",
            true,
            format!("no file above {max_bytes} bytes"),
        )
    } else {
        gate(
            "file-size",
            false,
            format!(
                "file(s) above verify.max_file_size ({max_bytes} bytes): {}",
                big.join(", ")
            ),
        )
    }
}

/// The secret gate: `found` names the secret whose value appears in the landing commit.
/// The name of the secrets gate's evidence.
pub const SECRETS_GATE: &str = "secrets";

pub fn secret_gate(found: Option<(&str, &str)>) -> CheckEvidence {
    match found {
        None => gate(SECRETS_GATE, true, "no known secret in the diff"),
        Some((name, path)) => gate(
            SECRETS_GATE,
            false,
            format!("the value of {name} appears in {path} in the diff; refusing to land it"),
        ),
    }
}

/// Repository files a check command runs directly: arguments that name a script
/// (`sh test.sh`, `./ci/run`, `python tools/check.py`) and the build files of `make`
/// (`Makefile`). Heuristic by design: it only decides what `config check` warns about and
/// what `verify.protect_check_scripts` protects.
pub fn check_entry_points(command: &str) -> Vec<String> {
    const SCRIPT_EXT: &[&str] = &[
        ".sh", ".bash", ".py", ".js", ".mjs", ".ts", ".rb", ".pl", ".mk", ".ps1",
    ];
    let mut out: Vec<String> = Vec::new();
    let mut push = |p: String| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    for segment in command.split(['&', '|', ';', '\n']) {
        let words: Vec<&str> = segment.split_whitespace().collect();
        let Some(first) = words.first() else { continue };
        if *first == "make" || first.ends_with("/make") {
            match words.iter().position(|w| *w == "-f") {
                Some(i) if i + 1 < words.len() => push(words[i + 1].to_string()),
                _ => push("Makefile".into()),
            }
        }
        for word in &words {
            let w = word.trim_matches(|c| c == '"' || c == '\'');
            if w.is_empty() || w.starts_with('-') || w.starts_with('/') || w.contains('=') {
                continue;
            }
            let scriptish = SCRIPT_EXT.iter().any(|e| w.ends_with(e)) || w.starts_with("./");
            if scriptish {
                push(w.trim_start_matches("./").to_string());
            }
        }
    }
    out
}

/// All evidence green.
pub fn all_passed(evidence: &[CheckEvidence]) -> bool {
    !evidence.is_empty() && evidence.iter().all(|e| e.passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn default_protected_paths() {
        let p = ProtectedPaths::new(&paths(&[".github/**", ".polyphony.yaml"])).unwrap();
        let changed = paths(&[
            "src/main.rs",
            ".github/workflows/ci.yml",
            ".polyphony.yaml",
            "docs/.polyphony.yaml",
            "github/x",
        ]);
        assert_eq!(
            p.violations(&changed),
            vec![".github/workflows/ci.yml", ".polyphony.yaml"]
        );
        assert!(!protected_gate(&p, &changed).passed);
        assert!(protected_gate(&p, &paths(&["src/a.rs"])).passed);
    }

    fn change(path: &str, old_mode: &str, new_mode: &str, size: Option<u64>) -> TreeChange {
        TreeChange {
            path: path.into(),
            status: 'M',
            old_mode: old_mode.into(),
            new_mode: new_mode.into(),
            new_oid: "0".repeat(40),
            size,
        }
    }

    #[test]
    fn submodules_are_refused_unless_allowed() {
        let file = change("src/a.rs", "100644", "100644", Some(3));
        let link = change("vendor/lib", "000000", "160000", None);
        let modules = change(".gitmodules", "000000", "100644", Some(40));
        assert!(submodule_gate(std::slice::from_ref(&file), false).passed);
        let g = submodule_gate(&[file.clone(), link.clone()], false);
        assert!(!g.passed && g.output_tail.contains("vendor/lib"), "{g:?}");
        assert!(!submodule_gate(std::slice::from_ref(&modules), false).passed);
        assert!(submodule_gate(&[link, modules], true).passed);
    }

    #[test]
    fn filter_attributes() {
        for (text, expected) in [
            ("*.txt text\n", false),
            ("*.bin filter=lfs diff=lfs\n", true),
            ("# *.x filter=evil\n", false),
            ("*  filter\n", true),
            ("filter=x\n", false),
        ] {
            assert_eq!(assigns_filter(text), expected, "{text:?}");
        }
        let files = vec![(".gitattributes".to_string(), "* filter=x".to_string())];
        assert!(!attributes_gate(&files, false).passed);
        assert!(attributes_gate(&files, true).passed);
        assert!(is_attributes_file("a/.gitattributes"));
        assert!(!is_attributes_file("a/gitattributes"));
    }

    #[test]
    fn size_gate_names_the_big_file() {
        let changes = [
            change("small", "100644", "100644", Some(10)),
            change("big.bin", "000000", "100644", Some(11)),
            change("gone", "100644", "000000", None),
        ];
        assert!(size_gate(&changes, 11).passed);
        let g = size_gate(&changes, 10);
        assert!(
            !g.passed && g.output_tail.contains("big.bin (11 bytes)"),
            "{g:?}"
        );
    }

    fn check_points(command: &str, expected: &[&str]) {
        assert_eq!(check_entry_points(command), expected, "{command:?}");
    }

    #[test]
    fn entry_points_of_check_commands() {
        check_points("sh test.sh", &["test.sh"]);
        check_points("./ci/run && make lint", &["ci/run", "Makefile"]);
        check_points("make -f build.mk test", &["build.mk"]);
        check_points("python tools/check.py --fast", &["tools/check.py"]);
        check_points("cargo test --all", &[]);
        check_points("sh -n calc.sh", &["calc.sh"]);
        check_points("/usr/bin/check.sh", &[]);
    }

    #[test]
    fn secret_gate_names_the_variable_not_the_value() {
        assert!(secret_gate(None).passed);
        let g = secret_gate(Some(("API_KEY", "notes.txt")));
        assert!(
            !g.passed && g.output_tail.contains("API_KEY") && g.output_tail.contains("notes.txt")
        );
    }

    #[test]
    fn bad_glob_is_an_error() {
        assert!(ProtectedPaths::new(&paths(&["a[b"])).is_err());
    }

    #[test]
    fn gates() {
        assert!(result_gate(AttemptStatus::Succeeded, None).passed);
        let g = result_gate(AttemptStatus::Timeout, Some("deadline 30m passed"));
        assert!(!g.passed);
        assert!(g.output_tail.contains("timeout: deadline"));
        assert!(!diff_gate(&[]).passed);
        assert!(diff_gate(&paths(&["a"])).passed);
        assert!(!all_passed(&[]));
    }
}
