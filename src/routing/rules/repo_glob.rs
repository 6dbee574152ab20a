//! Repository globs (`repo:` in routing.yaml and repository overrides): case-insensitive,
//! `*` crosses `/`, tried against the repository string and, for GitHub-style URLs and
//! `owner/name#N` refs, its `owner/name` form. Pure.

use globset::{GlobSet, GlobSetBuilder};

/// Compiles repository globs: case-insensitive, `*` crosses `/`.
/// On error returns the offending pattern and why.
pub fn repo_globset(patterns: &[String]) -> Result<GlobSet, (String, String)> {
    let mut builder = GlobSetBuilder::new();
    for p in patterns {
        if p.trim().is_empty() {
            return Err((p.clone(), "a repository glob cannot be empty".into()));
        }
        let glob = globset::GlobBuilder::new(p.trim())
            .case_insensitive(true)
            .literal_separator(false)
            .build()
            .map_err(|e| (p.clone(), e.kind().to_string()))?;
        builder.add(glob);
    }
    builder.build().map_err(|e| (String::new(), e.to_string()))
}

/// True when `pattern` (a repository glob) matches `repo`; an invalid glob matches nothing.
pub fn repo_matches(pattern: &str, repo: &str) -> bool {
    repo_globset(&[pattern.to_string()])
        .map(|set| repo_keys(repo).iter().any(|k| set.is_match(k)))
        .unwrap_or(false)
}

/// The strings a repository glob is tried against: the repo string as given (trailing
/// `/` and `.git` trimmed) and, for GitHub-style URLs and `owner/name#N` refs,
/// `owner/name`.
pub fn repo_keys(repo: &str) -> Vec<String> {
    let raw = repo.trim();
    let mut keys = vec![raw.to_string()];
    let trimmed = raw.trim_end_matches('/');
    let trimmed = trimmed.strip_suffix(".git").unwrap_or(trimmed);
    if trimmed != raw {
        keys.push(trimmed.to_string());
    }
    let rest = if let Some(i) = trimmed.find("://") {
        // https://host/owner/name
        trimmed[i + 3..].split_once('/').map(|(_, path)| path)
    } else if let Some((_, path)) = trimmed.split_once(':').filter(|(h, _)| h.contains('@')) {
        // git@host:owner/name
        Some(path)
    } else {
        None
    };
    if let Some(path) = rest {
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        if parts.len() == 2 {
            keys.push(format!("{}/{}", parts[0], parts[1]));
        }
    }
    if let Some((owner_name, _)) = trimmed.split_once('#') {
        keys.push(owner_name.to_string());
    }
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_keys_normalise_urls() {
        assert_eq!(
            repo_keys("https://github.com/acme/api.git"),
            vec![
                "https://github.com/acme/api.git",
                "https://github.com/acme/api",
                "acme/api"
            ]
        );
        assert_eq!(repo_keys("acme/api"), vec!["acme/api"]);
        assert!(repo_matches("acme/*", "git@github.com:acme/api.git"));
        assert!(!repo_matches("acme/*", "/srv/other"));
        assert!(!repo_matches("[", "acme/api"));
    }
}
