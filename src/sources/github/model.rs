//! The GitHub objects Polyphony reads, with only the fields it uses.
//!
//! Lenient on purpose: octocrab's own models require every field GitHub documents, so one
//! field a GitHub-compatible server leaves out (or a new enum value) fails a whole page.
//! These structs take the fields we need and ignore the rest; absent optional fields get
//! their defaults.

use serde::Deserialize;

/// An issue (or a pull request seen through the issues API).
#[derive(Debug, Clone, Deserialize)]
pub struct Issue {
    pub number: u64,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    /// `open` or `closed`.
    #[serde(default = "open")]
    pub state: String,
    #[serde(default)]
    pub locked: bool,
    #[serde(default)]
    pub labels: Vec<Label>,
    /// Present only on pull requests.
    #[serde(default)]
    pub pull_request: Option<serde_json::Value>,
    #[serde(default)]
    pub html_url: Option<String>,
    #[serde(default)]
    pub node_id: Option<String>,
    #[serde(default)]
    pub user: Option<User>,
}

fn open() -> String {
    "open".to_string()
}

impl Issue {
    pub fn is_open(&self) -> bool {
        self.state.eq_ignore_ascii_case("open")
    }

    pub fn has_label(&self, name: &str) -> bool {
        self.labels
            .iter()
            .any(|l| l.name.eq_ignore_ascii_case(name))
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Label {
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct User {
    pub login: String,
}

/// An issue comment.
#[derive(Debug, Clone, Deserialize)]
pub struct Comment {
    pub id: u64,
    #[serde(default)]
    pub body: Option<String>,
    /// The author; only our own comments' markers count (issue 11).
    #[serde(default)]
    pub user: Option<User>,
}

/// A repository.
#[derive(Debug, Clone, Deserialize)]
pub struct Repository {
    #[serde(default)]
    pub clone_url: Option<String>,
    #[serde(default)]
    pub default_branch: Option<String>,
}

/// A pull request.
#[derive(Debug, Clone, Deserialize)]
pub struct PullRequest {
    pub number: u64,
    /// The API URL of the pull request.
    #[serde(default)]
    pub url: String,
    #[serde(default)]
    pub html_url: Option<String>,
    pub head: Head,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Head {
    #[serde(rename = "ref")]
    pub ref_field: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_objects_decode() {
        let issue: Issue = serde_json::from_str(
            r#"{"number": 3, "title": "x", "labels": [{"name": "agent-ready"}]}"#,
        )
        .unwrap();
        assert!(issue.is_open());
        assert!(issue.has_label("Agent-Ready"));
        assert!(issue.pull_request.is_none());
        let pr: PullRequest =
            serde_json::from_str(r#"{"number": 9, "head": {"ref": "polyphony/x-a1"}}"#).unwrap();
        assert_eq!(pr.head.ref_field, "polyphony/x-a1");
        let c: Comment = serde_json::from_str(r#"{"id": 12, "body": null}"#).unwrap();
        assert_eq!(c.id, 12);
    }
}
