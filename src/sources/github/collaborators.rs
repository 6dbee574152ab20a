//! A user's permission on a repository (issue 15: only feedback from people with write
//! access or above is acted on).
//!
//! Owns: reading `GET /collaborators/{user}/permission` into a [`Permission`] (conditional:
//! an unchanged permission costs a `304`).
//! Must not: decide who is trusted: the shepherd compares against its configured minimum.

use serde::Deserialize;

use super::client::{encode_component, GithubClient, GithubError};
use super::RepoSlug;

/// A repository role, lowest first, so `>=` compares levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    None,
    Read,
    Triage,
    Write,
    Maintain,
    Admin,
}

impl Permission {
    /// From `role_name` (which tells maintain and triage apart) or the legacy `permission`.
    pub fn parse(value: &str) -> Permission {
        match value {
            "admin" => Permission::Admin,
            "maintain" => Permission::Maintain,
            "write" | "push" => Permission::Write,
            "triage" => Permission::Triage,
            "read" | "pull" => Permission::Read,
            _ => Permission::None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Admin => "admin",
            Permission::Maintain => "maintain",
            Permission::Write => "write",
            Permission::Triage => "triage",
            Permission::Read => "read",
            Permission::None => "none",
        }
    }

    pub fn at_least(self, minimum: Permission) -> bool {
        self >= minimum
    }
}

#[derive(Debug, Deserialize)]
struct RawPermission {
    #[serde(default)]
    permission: Option<String>,
    #[serde(default)]
    role_name: Option<String>,
}

/// The permission of `login` on `repo`. A login GitHub does not know is `NotFound`; a
/// known user without access is `Permission::None`.
pub async fn permission_of(
    client: &GithubClient,
    repo: &RepoSlug,
    login: &str,
) -> Result<Permission, GithubError> {
    let raw: RawPermission = client
        .get_json_cached(
            &format!("reading the permission of {login} on {repo}"),
            &format!(
                "{}/collaborators/{}/permission",
                repo.api_path(),
                encode_component(login)
            ),
        )
        .await?;
    // Custom roles have their own `role_name`; the legacy field still gives their base.
    let by_role = raw.role_name.as_deref().map(Permission::parse);
    let legacy = raw.permission.as_deref().map(Permission::parse);
    Ok(match (by_role, legacy) {
        (Some(role), Some(legacy)) => role.max(legacy),
        (Some(p), None) | (None, Some(p)) => p,
        (None, None) => Permission::None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_order_by_level() {
        assert!(Permission::parse("admin").at_least(Permission::Write));
        assert!(Permission::parse("maintain").at_least(Permission::Write));
        assert!(Permission::parse("write").at_least(Permission::Write));
        assert!(!Permission::parse("triage").at_least(Permission::Write));
        assert!(!Permission::parse("read").at_least(Permission::Write));
        assert_eq!(Permission::parse("none"), Permission::None);
        assert_eq!(Permission::parse("custom-role"), Permission::None);
        for p in ["admin", "maintain", "write", "triage", "read", "none"] {
            assert_eq!(Permission::parse(p).as_str(), p);
        }
    }
}
