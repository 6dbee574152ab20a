//! The one error type of configuration loading: it names the file, the line and column,
//! what is wrong and a one-line fix.

use std::fmt;
use std::path::{Path, PathBuf};

/// What kind of mistake a [`ConfigError`] reports, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file or the home directory could not be read or resolved.
    Io,
    /// Not valid YAML.
    Syntax,
    /// A key the schema does not have.
    UnknownField,
    /// A required key is absent.
    MissingField,
    /// A value of the wrong type (a string where a number goes, …).
    WrongType,
    /// A value of the right type that is not allowed (bad duration, bad predicate, …).
    InvalidValue,
    /// Two identities, agents or rules share a name.
    Duplicate,
    /// A name that refers to an agent or identity that is not defined.
    UnknownReference,
    /// A setting that weakens isolation, given without `allow_unsafe: true`.
    Unsafe,
}

/// A configuration error, rendered as
/// `~/.polyphony/routing.yaml:12:5: rule `hard` names unknown agent `claud` — fix: …`.
///
/// `line` and `column` are 1-based; both are 0 when the error concerns the file as a
/// whole (it cannot be read, or the home cannot be resolved).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub kind: ConfigErrorKind,
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub fix: String,
}

impl ConfigError {
    pub fn new(
        kind: ConfigErrorKind,
        file: &Path,
        (line, column): (usize, usize),
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            kind,
            file: file.to_path_buf(),
            line,
            column,
            message: message.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", display_path(&self.file))?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        write!(f, ": {} — fix: {}", self.message, self.fix)
    }
}

/// Shows paths under the user's home as `~/…`, the way they are written in the docs.
fn display_path(path: &Path) -> String {
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        if let Ok(rest) = path.strip_prefix(Path::new(&home)) {
            return format!("~/{}", rest.display());
        }
    }
    path.display().to_string()
}
