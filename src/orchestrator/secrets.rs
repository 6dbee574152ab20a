//! The secret set of one attempt, for the scrubber (issue 11 "Scrubbing that holds"): the
//! values of the identity's env overlay, the GitHub token, and the token values inside the
//! credential files the identity mounts (an OAuth access or refresh token in Claude's
//! `.credentials.json` or Codex's `auth.json` is as secret as an API key).
//!
//! Must not: log, print or return anything but the values themselves to the scrubber.

use std::path::Path;

use crate::agents::scrub::credential_file_tokens;
use crate::domain::VolumeMount;

/// Credential files larger than this are not credential files.
const MAX_CREDENTIAL_FILE: u64 = 1024 * 1024;
/// At most this many files are read per mount.
const MAX_FILES_PER_MOUNT: usize = 200;

/// Token values found in the JSON files of `mounts` (the mount itself when it is a file,
/// else its `*.json` files up to two levels down). Unreadable files are skipped: this
/// only ever adds values to mask.
pub fn credential_tokens(mounts: &[VolumeMount]) -> Vec<String> {
    let mut tokens = Vec::new();
    for mount in mounts {
        let mut files = Vec::new();
        collect_json_files(&mount.host_path, 0, true, &mut files);
        for file in files {
            if let Ok(text) = std::fs::read_to_string(&file) {
                tokens.extend(credential_file_tokens(&text));
            }
        }
    }
    tokens.sort();
    tokens.dedup();
    tokens
}

fn collect_json_files(path: &Path, depth: usize, top: bool, out: &mut Vec<std::path::PathBuf>) {
    if out.len() >= MAX_FILES_PER_MOUNT {
        return;
    }
    // symlink_metadata: a link is followed only when it is the mount itself.
    let meta = if top {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    };
    let Ok(meta) = meta else { return };
    if meta.is_file() {
        let is_json = path.extension().is_some_and(|e| e == "json");
        if (top || is_json) && meta.len() <= MAX_CREDENTIAL_FILE {
            out.push(path.to_path_buf());
        }
    } else if meta.is_dir() && depth < 2 {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for entry in entries.flatten() {
            collect_json_files(&entry.path(), depth + 1, false, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tokens_from_mounted_credential_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".credentials.json"),
            r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-secretA","refreshToken":"sk-ant-ort01-secretB"}}"#,
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(
            dir.path().join("sub/auth.json"),
            r#"{"tokens":{"access_token":"codex-access-1"}}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), r#"{"token":"not-json-ext"}"#).unwrap();
        let file = dir.path().join("auth-file");
        std::fs::write(&file, r#"{"api_key":"a-single-file-key"}"#).unwrap();
        let mount = |p: &Path| VolumeMount {
            host_path: p.to_path_buf(),
            container_path: "/x".into(),
            read_only: true,
        };
        let got = credential_tokens(&[mount(dir.path()), mount(&file)]);
        assert_eq!(
            got,
            vec![
                "a-single-file-key",
                "codex-access-1",
                "sk-ant-oat01-secretA",
                "sk-ant-ort01-secretB"
            ]
        );
        assert!(credential_tokens(&[mount(&dir.path().join("missing"))]).is_empty());
    }
}
