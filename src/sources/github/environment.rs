//! The GitHub token and API URL, read from the environment. Pure, over a lookup closure.
//!
//! Owns: the one GitHub-token rule (`resolve_token`), the API base (`resolve_api_url`,
//! `parse_api_url`) and their defaults. Must not: read the process environment itself, or
//! let the token's value reach a message or `Debug`.

use std::fmt;

use super::error::GithubError;

/// Where requests go unless `GITHUB_API_URL` says otherwise.
pub const DEFAULT_API_URL: &str = "https://api.github.com";

/// Token variables tried after the identity's own, in order.
pub const DEFAULT_TOKEN_VARS: [&str; 2] = ["GITHUB_TOKEN", "GH_TOKEN"];

/// A token and the variable it came from. `Debug` never shows the value.
#[derive(Clone)]
pub struct ResolvedToken {
    /// Name of the environment variable (for messages).
    pub var: String,
    value: String,
}

impl ResolvedToken {
    pub fn new(var: impl Into<String>, value: impl Into<String>) -> ResolvedToken {
        ResolvedToken {
            var: var.into(),
            value: value.into(),
        }
    }

    /// The token itself, for the one git push that needs it and for the scrubber.
    pub fn secret(&self) -> &str {
        &self.value
    }
}

impl fmt::Debug for ResolvedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ResolvedToken {{ var: {:?}, value: <redacted> }}",
            self.var
        )
    }
}

/// The token for an identity: its own variable alone when it names one (a named account
/// must never silently become another, issue 11), else `GITHUB_TOKEN`, else `GH_TOKEN`.
/// Empty values count as unset. Pure: `lookup` reads the environment.
pub fn resolve_token(
    identity_var: Option<&str>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<ResolvedToken, GithubError> {
    let mut tried = Vec::new();
    let candidates: Vec<&str> = match identity_var {
        Some(var) => vec![var],
        None => DEFAULT_TOKEN_VARS.to_vec(),
    };
    for var in candidates {
        tried.push(var.to_string());
        if let Some(value) = lookup(var) {
            let value = value.trim().to_string();
            if value.is_empty() {
                continue;
            }
            // octocrab builds the Authorization header with `parse().unwrap()`: a bad byte
            // would panic inside it, so refuse the token here with a message instead.
            if !value.bytes().all(|b| (0x21..0x7f).contains(&b)) {
                return Err(GithubError::InvalidToken {
                    var: var.to_string(),
                });
            }
            return Ok(ResolvedToken::new(var, value));
        }
    }
    match identity_var {
        Some(var) => Err(GithubError::IdentityTokenUnset {
            var: var.to_string(),
        }),
        None => Err(GithubError::MissingToken { tried }),
    }
}

/// The API base: `GITHUB_API_URL` when set and non-empty, else [`DEFAULT_API_URL`].
/// A path prefix (GitHub Enterprise `/api/v3`) is kept.
pub fn resolve_api_url(lookup: impl Fn(&str) -> Option<String>) -> String {
    match lookup("GITHUB_API_URL") {
        Some(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_string(),
        _ => DEFAULT_API_URL.to_string(),
    }
}

/// `url` as an absolute http(s) URI, or [`GithubError::InvalidApiUrl`] saying what is
/// wrong with it (issue 12: a bad `GITHUB_API_URL` read as "no token was found").
pub fn parse_api_url(url: &str) -> Result<http::Uri, GithubError> {
    let invalid = |reason: String| GithubError::InvalidApiUrl {
        url: url.to_string(),
        reason,
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?;
    let http = uri
        .scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https"));
    if !http || uri.authority().is_none() {
        return Err(invalid(
            "expected an absolute http(s) URL such as https://api.github.com (or https://HOST/api/v3 for GitHub Enterprise)".into(),
        ));
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn check_token(identity: Option<&str>, pairs: &[(&str, &str)], expect: Result<&str, &str>) {
        let got = resolve_token(identity, env(pairs));
        match (got, expect) {
            (Ok(t), Ok(var)) => assert_eq!(t.var, var),
            (Err(e), Err(fragment)) => {
                let text = e.to_string();
                assert!(text.contains(fragment), "{text}");
                assert!(!text.contains("sekrit"), "token leaked: {text}");
            }
            (got, expect) => panic!("got {got:?}, expected {expect:?}"),
        }
    }

    #[test]
    fn token_resolution_order() {
        check_token(
            Some("WORK_GH"),
            &[("WORK_GH", "a"), ("GITHUB_TOKEN", "b")],
            Ok("WORK_GH"),
        );
        // A named account never becomes the default one.
        check_token(
            Some("WORK_GH"),
            &[("GITHUB_TOKEN", "b")],
            Err("names $WORK_GH, which is unset"),
        );
        check_token(
            Some("WORK_GH"),
            &[("WORK_GH", " "), ("GH_TOKEN", "c")],
            Err("export the token as WORK_GH"),
        );
        check_token(
            None,
            &[("GITHUB_TOKEN", "b"), ("GH_TOKEN", "c")],
            Ok("GITHUB_TOKEN"),
        );
        check_token(None, &[("GH_TOKEN", "c")], Ok("GH_TOKEN"));
        check_token(
            None,
            &[("GITHUB_TOKEN", "  "), ("GH_TOKEN", "c")],
            Ok("GH_TOKEN"),
        );
        check_token(None, &[], Err("tried GITHUB_TOKEN, GH_TOKEN"));
        check_token(Some("X"), &[], Err("names $X"));
        check_token(
            None,
            &[("GITHUB_TOKEN", "sek\nrit")],
            Err("$GITHUB_TOKEN contains"),
        );
    }

    #[test]
    fn resolved_token_debug_hides_the_value() {
        let t = ResolvedToken::new("GITHUB_TOKEN", "sekrit");
        assert!(!format!("{t:?}").contains("sekrit"));
    }

    #[test]
    fn api_url_defaults_and_keeps_prefix() {
        assert_eq!(resolve_api_url(env(&[])), DEFAULT_API_URL);
        assert_eq!(
            resolve_api_url(env(&[("GITHUB_API_URL", "")])),
            DEFAULT_API_URL
        );
        assert_eq!(
            resolve_api_url(env(&[("GITHUB_API_URL", "https://ghe.example/api/v3/")])),
            "https://ghe.example/api/v3"
        );
    }
}
