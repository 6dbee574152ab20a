//! The upstream a workspace and its mirror are keyed by: URLs as given, local paths made
//! absolute and canonical (so neither depends on the current directory).

use super::key::check_repo_spec;
use super::WorkspaceError;
use std::path::Path;

/// Makes `repo` a stable upstream string: URLs (and scp-like `host:path`) as given, local paths
/// absolute and canonical (so the mirror name and `origin` do not depend on the cwd).
pub(crate) fn resolve_upstream(repo: &str) -> Result<String, WorkspaceError> {
    check_repo_spec(repo)?;
    if repo.contains("://") {
        return Ok(repo.to_string());
    }
    let path = Path::new(repo);
    let scp_like = !path.exists()
        && repo
            .split_once(':')
            .is_some_and(|(host, _)| !host.is_empty() && !host.contains('/'));
    if scp_like {
        return Ok(repo.to_string());
    }
    let abs = path
        .canonicalize()
        .map_err(|e| WorkspaceError::InvalidInput {
            what: "repository",
            value: repo.to_string(),
            reason: format!("not a URL and not an existing local path ({e})"),
        })?;
    abs.to_str()
        .map(str::to_string)
        .ok_or_else(|| WorkspaceError::InvalidInput {
            what: "repository",
            value: abs.display().to_string(),
            reason: "local repository paths must be valid UTF-8".into(),
        })
}
