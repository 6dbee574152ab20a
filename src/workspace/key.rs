//! Pure naming rules for workspaces (spec §6): task id -> directory key, branch names, mirror
//! directory names, the orchestrator's repository beside an attempt directory, `uid:gid` parsing.
//!
//! Owns only string transformations. Must not touch the disk, the clock or git: every function
//! here is deterministic and tested with a plain table.

use super::WorkspaceError;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Suffix of the orchestrator's repository beside attempt directory `N`: `N.land.git`.
pub(crate) const SUFFIX: &str = ".land.git";

/// Longest sanitized prefix kept before the hash suffix; the whole key stays well under
/// the 255-byte file name limit.
const MAX_KEY_PREFIX: usize = 80;

/// Turns a task id into a directory name made of `[A-Za-z0-9._-]`.
///
/// When sanitizing changed anything (a replaced character, a trimmed leading `.`/`-`, a cut
/// to length), `-` + 8 hex digits of sha256(id) is appended, so `a/b` and `a_b` never share a
/// directory. Ids that are already clean keep their exact name so humans can find them.
pub fn task_key(task_id: &str) -> Result<String, WorkspaceError> {
    let invalid = |reason: &'static str| WorkspaceError::InvalidTaskId {
        id: task_id.to_string(),
        reason,
    };
    if task_id.is_empty() {
        return Err(invalid("it is empty"));
    }
    if task_id.contains(['\0', '\n', '\r']) {
        return Err(invalid("it contains a NUL or newline character"));
    }
    // `..` is refused inside git ref names, and the key goes into the branch name.
    let mut replaced = String::with_capacity(task_id.len());
    for c in task_id.chars() {
        let keep = is_key_char(c) && !(c == '.' && replaced.ends_with('.'));
        replaced.push(if keep { c } else { '_' });
    }
    // A leading `.` or `-` would make a hidden file or an option-looking argument; `.` and
    // `..` would escape the root.
    let trimmed = replaced.trim_start_matches(['.', '-']);
    let capped: String = trimmed.chars().take(MAX_KEY_PREFIX).collect();
    if capped == task_id {
        return Ok(capped);
    }
    let hash = short_hash(task_id);
    Ok(if capped.is_empty() {
        hash
    } else {
        format!("{capped}-{hash}")
    })
}

/// `{prefix}{key}-a{attempt}`, e.g. `polyphony/owner_repo_42-1a2b3c4d-a2`.
pub fn branch_name(prefix: &str, key: &str, attempt: u32) -> String {
    format!("{prefix}{key}-a{attempt}")
}

/// Directory name of the bare mirror for `repo` (a URL or an absolute path): readable
/// sanitized tail plus a hash of the full string, so two repos never share a mirror.
pub fn mirror_dir_name(repo: &str) -> String {
    let without_scheme = repo.split_once("://").map_or(repo, |(_, rest)| rest);
    let tail = without_scheme
        .trim_end_matches('/')
        .trim_end_matches(".git");
    let sanitized: String = tail
        .chars()
        .map(|c| if is_key_char(c) { c } else { '_' })
        .collect();
    let sanitized = sanitized.trim_start_matches(['.', '-', '_']);
    // Keep the end of the name: `host_owner_repo` is more telling than a long path prefix.
    let chars: Vec<char> = sanitized.chars().collect();
    let start = chars.len().saturating_sub(60);
    let readable: String = chars[start..].iter().collect();
    let readable = readable.trim_start_matches(['.', '-', '_']);
    let hash = short_hash(repo);
    if readable.is_empty() {
        format!("{hash}.git")
    } else {
        format!("{readable}-{hash}.git")
    }
}

/// Parses `uid:gid` (both numeric), the format of `container.user` in config.yaml.
pub fn parse_owner(spec: &str) -> Result<(u32, u32), WorkspaceError> {
    let invalid = || WorkspaceError::InvalidInput {
        what: "owner",
        value: spec.to_string(),
        reason: "expected numeric `uid:gid`, e.g. `1000:1000`".into(),
    };
    let (uid, gid) = spec.split_once(':').ok_or_else(invalid)?;
    let uid = uid.parse::<u32>().map_err(|_| invalid())?;
    let gid = gid.parse::<u32>().map_err(|_| invalid())?;
    Ok((uid, gid))
}

/// Rejects a repository string that git could read as an option, or an https URL that carries
/// a password (credentials belong in the push token, never in a URL stored on disk).
pub fn check_repo_spec(repo: &str) -> Result<(), WorkspaceError> {
    let invalid = |reason: &str| WorkspaceError::InvalidInput {
        what: "repository",
        value: redact_userinfo(repo),
        reason: reason.to_string(),
    };
    if repo.is_empty() {
        return Err(invalid("it is empty"));
    }
    if repo.starts_with('-') {
        return Err(invalid(
            "it starts with `-` and would be read as a git option",
        ));
    }
    if repo.contains(['\0', '\n', '\r']) {
        return Err(invalid("it contains a NUL or newline character"));
    }
    if let Some((_, rest)) = repo.split_once("://") {
        let authority = rest.split('/').next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            if userinfo.contains(':') {
                return Err(invalid(
                    "the URL embeds a password; pass the token separately so it is never stored",
                ));
            }
        }
    }
    Ok(())
}

/// Replaces every occurrence of `secret` (when non-empty) and the userinfo of any
/// `scheme://user:pass@` URL in `text`, so errors and logs never carry credentials.
pub fn scrub(text: &str, secret: Option<&str>) -> String {
    let mut out = match secret {
        Some(s) if !s.is_empty() => text.replace(s, "***"),
        _ => text.to_string(),
    };
    out = redact_userinfo(&out);
    out
}

/// `https://user:pass@host/x` -> `https://***@host/x`, anywhere in `text`.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let (head, tail) = rest.split_at(pos + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '\'' || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rsplit_once('@') {
            Some((userinfo, host)) if userinfo.contains(':') => {
                out.push_str("***@");
                out.push_str(host);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

fn short_hash(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    hex::encode(&digest[..4])
}

/// `{dir}.land.git` for attempt directory `dir`.
pub(crate) fn own_repo_beside(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.with_file_name(format!("{name}{SUFFIX}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(id: &str, expect: Result<&str, ()>) {
        let got = task_key(id);
        match (got, expect) {
            (Ok(k), Ok(e)) => assert_eq!(k, e, "task_key({id:?})"),
            (Err(_), Err(())) => {}
            (got, expect) => panic!("task_key({id:?}) = {got:?}, expected {expect:?}"),
        }
    }

    fn hashed(id: &str, prefix: &str) -> String {
        let h = short_hash(id);
        if prefix.is_empty() {
            h
        } else {
            format!("{prefix}-{h}")
        }
    }

    #[test]
    fn clean_ids_are_kept() {
        check("task-42", Ok("task-42"));
        check("ABC_def.9", Ok("ABC_def.9"));
    }

    #[test]
    fn unsafe_ids_are_sanitized_and_hashed() {
        check(
            "owner/repo#42",
            Ok(&hashed("owner/repo#42", "owner_repo_42")),
        );
        check("..", Ok(&hashed("..", "_")));
        check("a..b", Ok(&hashed("a..b", "a._b")));
        check(".", Ok(&hashed(".", "")));
        check("../../etc", Ok(&hashed("../../etc", "__.__etc")));
        check("-rf", Ok(&hashed("-rf", "rf")));
        check(".hidden", Ok(&hashed(".hidden", "hidden")));
        check("tâche-é", Ok(&hashed("tâche-é", "t_che-_")));
        check("日本", Ok(&hashed("日本", "__")));
        check("a b", Ok(&hashed("a b", "a_b")));
    }

    #[test]
    fn invalid_ids_are_refused() {
        check("", Err(()));
        check("a\0b", Err(()));
        check("a\nb", Err(()));
        check("a\rb", Err(()));
    }

    #[test]
    fn long_ids_are_capped() {
        let long = "x".repeat(300);
        let key = task_key(&long).unwrap();
        assert_eq!(key, hashed(&long, &"x".repeat(80)));
        assert_eq!(key.len(), 89);
        // Same 80-char prefix, different tail: still distinct.
        let other = format!("{}y", "x".repeat(299));
        assert_ne!(task_key(&other).unwrap(), key);
    }

    #[test]
    fn sanitized_ids_never_collide_with_clean_ones() {
        let a = task_key("a/b").unwrap();
        let b = task_key("a_b").unwrap();
        assert_ne!(a, b);
        assert_eq!(b, "a_b");
        assert_ne!(task_key("a/b").unwrap(), task_key("a#b").unwrap());
    }

    #[test]
    fn keys_are_safe_path_components() {
        for id in [
            "..",
            ".",
            "../../etc",
            "-",
            "--",
            "/",
            "\\",
            "a/../b",
            "~root",
            "$HOME",
            "x.lock",
            "a@{1}",
            "a..b",
            &"ab.".repeat(100),
        ] {
            let k = task_key(id).unwrap();
            assert!(!k.is_empty() && k != "." && k != "..", "{id:?} -> {k:?}");
            assert!(!k.starts_with(['.', '-']), "{id:?} -> {k:?}");
            assert!(k.chars().all(is_key_char), "{id:?} -> {k:?}");
            let branch = format!("refs/heads/{}", branch_name("polyphony/", &k, 1));
            assert!(
                git2::Reference::is_valid_name(&branch),
                "{id:?} -> {branch}"
            );
        }
    }

    #[test]
    fn branch_names() {
        assert_eq!(branch_name("polyphony/", "t-1", 2), "polyphony/t-1-a2");
        assert_eq!(branch_name("", "k", 10), "k-a10");
    }

    #[test]
    fn mirror_names() {
        let n = mirror_dir_name("https://github.com/owner/repo.git");
        assert!(
            n.starts_with("github.com_owner_repo-") && n.ends_with(".git"),
            "{n}"
        );
        assert_ne!(n, mirror_dir_name("https://github.com/owner/repo"));
        let local = mirror_dir_name("/tmp/x/origin.git");
        assert!(local.starts_with("tmp_x_origin-"), "{local}");
        assert!(mirror_dir_name(&format!("/{}", "a".repeat(500))).len() < 80);
        assert!(!mirror_dir_name("/..").starts_with('.'));
    }

    #[test]
    fn owners() {
        assert_eq!(parse_owner("1000:1001").unwrap(), (1000, 1001));
        for bad in ["1000", "a:b", ":1", "1:", "-1:0", "1:2:3"] {
            assert!(parse_owner(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn repo_specs() {
        for ok in [
            "https://github.com/o/r.git",
            "file:///tmp/o.git",
            "/tmp/o.git",
            "git@h:o/r",
        ] {
            assert!(check_repo_spec(ok).is_ok(), "{ok}");
        }
        for bad in ["", "--upload-pack=x", "https://u:tok@h/o/r", "a\nb"] {
            let err = check_repo_spec(bad).unwrap_err().to_string();
            assert!(!err.contains("tok@"), "{err}");
        }
        assert!(check_repo_spec("https://user@h/o/r").is_ok());
    }

    #[test]
    fn scrubbing() {
        assert_eq!(scrub("bad tok123 x", Some("tok123")), "bad *** x");
        assert_eq!(scrub("plain", Some("")), "plain");
        assert_eq!(
            scrub("fatal: 'https://u:p@h/o' and ssh://a:b@c:22/x", None),
            "fatal: 'https://***@h/o' and ssh://***@c:22/x"
        );
        assert_eq!(scrub("https://user@h/o", None), "https://user@h/o");
    }
}
