//! [`Doc`]: one configuration file's path and text, so every error can point at file:line;
//! [`Docs`]: the four of them, as loading hands them to the checks.

use std::path::{Path, PathBuf};

use super::error::{ConfigError, ConfigErrorKind};
use super::locate::{Locator, Seg};
use super::yaml;

pub(super) struct Doc<'s> {
    pub(super) path: PathBuf,
    pub(super) text: &'s str,
}

pub(super) struct Docs<'s> {
    pub(super) config: Doc<'s>,
    pub(super) identities: Doc<'s>,
    pub(super) agents: Doc<'s>,
    pub(super) routing: Doc<'s>,
}

impl<'s> Doc<'s> {
    pub(super) fn new(home: &Path, name: &str, text: &'s Option<String>) -> Doc<'s> {
        Doc {
            path: home.join(name),
            text: text.as_deref().unwrap_or(""),
        }
    }

    pub(super) fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ConfigError> {
        yaml::parse(&self.path, self.text)
    }

    pub(super) fn error(
        &self,
        kind: ConfigErrorKind,
        path: &[Seg<'_>],
        needle: Option<&str>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> ConfigError {
        let pos = if self.text.is_empty() {
            (0, 0)
        } else {
            Locator::new(self.text).find(path, needle)
        };
        ConfigError::new(kind, &self.path, pos, message, fix)
    }
}
