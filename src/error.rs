//! Errors more than one layer names: the typed ones a caller branches on (here, how
//! `main` picks the exit code) that belong to no single module.

/// A mistake in how polyphony was called (bad argument value, missing file): exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{message} — fix: {fix}")]
pub struct UsageError {
    pub message: String,
    pub fix: String,
}

impl UsageError {
    pub fn new(message: impl Into<String>, fix: impl Into<String>) -> UsageError {
        UsageError {
            message: message.into(),
            fix: fix.into(),
        }
    }
}
