//! Proof-of-work gates that need no container (spec §10, DESIGN.md "Proof of work"):
//! the agent's own verdict, a non-empty diff, untouched protected paths. The checks that
//! run commands live in `verify`; this module only judges values.

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::domain::{AttemptStatus, CheckEvidence};

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
