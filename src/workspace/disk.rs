//! A full disk (issue 24): git's parallel checkout (`checkout.workers=8`) exits 0 after it
//! failed to write a file, and the attempt then committed the lost file as deleted and
//! landed it. So a checkout is complete before anything builds on it, the filesystem has
//! room before the agent starts, and ENOSPC anywhere (the clone, the checkout, the
//! check checkout, the landing commit) is [`WorkspaceError::DiskFull`], which the
//! orchestrator makes a permanent failure with the fix (`orchestrator/failure.rs`).
//!
//! - [`verify_checkout`]: judges `git ls-files --deleted --modified` over an index the
//!   caller wrote (never the agent's: at prepare the agent has not run, and the checks'
//!   index is a temporary file of the orchestrator's repository). Entries whose stat data
//!   git recorded cost one `lstat`; only entries git failed to write are hashed.
//! - [`ensure_room`]: at least [`MIN_FREE_BYTES`] free after the checkout, and, before the
//!   landing commit, more than [`FULL_BYTES`] (a filesystem the agent's run filled may
//!   have lost writes: nothing is committed from it).
//! - [`explain`]: a failed git write on a filesystem under the floor, or git's own
//!   "No space left on device" (foreign text, read under `LC_ALL=C`), is `DiskFull`.

use super::WorkspaceError;
use std::path::{Path, PathBuf};

/// Free space an attempt's filesystem must have once its checkout is written.
pub const MIN_FREE_BYTES: u64 = 64 << 20;

/// Below this much free space after the agent ran, its working tree is not committed.
pub const FULL_BYTES: u64 = 1 << 20;

/// `git ls-files` arguments listing what a checkout failed to write ([`verify_checkout`]).
pub(crate) const LIST_LOST: [&str; 4] = ["ls-files", "-z", "--deleted", "--modified"];

/// How many lost paths an error names.
const NAMED: usize = 5;

/// Bytes available to this user on the filesystem holding `path` (or its nearest existing
/// ancestor: a root not created yet lands there); `None` when it cannot be read.
pub fn free_bytes(path: &Path) -> Option<u64> {
    free_space(path).ok()
}

/// [`free_bytes`] with the reason it cannot be read (`doctor` shows it).
pub fn free_space(path: &Path) -> std::io::Result<u64> {
    let mut probe: PathBuf = path.to_path_buf();
    // `exists` follows links: a dangling symlink is not a filesystem to ask.
    while !probe.exists() {
        probe = match probe.parent() {
            Some(p) => p.to_path_buf(),
            None => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("no existing ancestor of {}", path.display()),
                ))
            }
        };
    }
    let c = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains a NUL byte")
    })?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `stat` a valid out-pointer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut stat) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// Whether an I/O error is the disk (or the quota) being full.
pub(crate) fn is_full_io(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || matches!(
            e.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        )
}

/// Whether git's (or the kernel's) words say the disk is full. Foreign text.
fn is_full_text(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("no space left on device") || lower.contains("disk quota exceeded")
}

fn disk_full(path: &Path, what: String) -> WorkspaceError {
    WorkspaceError::DiskFull {
        path: path.to_path_buf(),
        free: free_bytes(path),
        what,
    }
}

/// Types a failed write under `path` as `DiskFull` when the disk is why: git said so, or a
/// git write failed with less than [`MIN_FREE_BYTES`] left there. Anything else unchanged.
pub(crate) fn explain(e: WorkspaceError, path: &Path) -> WorkspaceError {
    match &e {
        WorkspaceError::Git { stderr, .. } | WorkspaceError::Read { reason: stderr, .. }
            if is_full_text(stderr) || free_bytes(path).is_some_and(|f| f < MIN_FREE_BYTES) =>
        {
            disk_full(path, e.to_string())
        }
        WorkspaceError::Io { source, .. } if is_full_io(source) => disk_full(path, e.to_string()),
        _ => e,
    }
}

/// `DiskFull` when git itself said the disk is full (every failed git child passes here,
/// with the directory it ran in); anything else unchanged.
pub(crate) fn said_full(e: WorkspaceError, dir: Option<&Path>) -> WorkspaceError {
    match &e {
        WorkspaceError::Git { stderr, .. } if is_full_text(stderr) => {
            disk_full(dir.unwrap_or(Path::new(".")), e.to_string())
        }
        _ => e,
    }
}

/// Refuses to go on with less than `need` bytes free where `path` lives.
pub(crate) fn ensure_room(path: &Path, need: u64, doing: &str) -> Result<(), WorkspaceError> {
    match free_bytes(path) {
        Some(free) if free < need => Err(disk_full(
            path,
            format!(
                "{doing} needs at least {} free, the filesystem has {}",
                human(need),
                human(free)
            ),
        )),
        _ => Ok(()),
    }
}

/// Judges `listing`, the output of `git ls-files -z --deleted --modified` over the index
/// that wrote `work_tree` (the caller runs it: this module runs no git): every tracked path
/// must be on disk as the index says. A lost path is `DiskFull` when the filesystem is
/// under the floor, else `IncompleteCheckout`.
pub(crate) fn verify_checkout(listing: &[u8], work_tree: &Path) -> Result<(), WorkspaceError> {
    let mut lost: Vec<String> = Vec::new();
    for p in listing.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let p = String::from_utf8_lossy(p).into_owned();
        if !lost.contains(&p) {
            lost.push(p);
        }
    }
    if lost.is_empty() {
        return Ok(());
    }
    let count = lost.len();
    let mut named = lost.into_iter().take(NAMED).collect::<Vec<_>>().join(", ");
    if count > NAMED {
        named.push_str(&format!(" and {} more", count - NAMED));
    }
    let what = format!("the checkout is missing or truncated {count} tracked file(s): {named}");
    match free_bytes(work_tree) {
        Some(free) if free < MIN_FREE_BYTES => Err(disk_full(work_tree, what)),
        _ => Err(WorkspaceError::IncompleteCheckout {
            path: work_tree.to_path_buf(),
            what,
        }),
    }
}

/// `3.2 MiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{v:.1} {}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_asks_the_nearest_existing_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_space(dir.path()).unwrap() > 0);
        assert!(free_space(&dir.path().join("not/made/yet")).unwrap() > 0);
        // A dangling link is not a filesystem (doctor's own copy of this asked the link's
        // parent; this one asked statvfs of the dangling link and gave up).
        let link = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
        assert!(free_bytes(&link).is_some());
    }

    #[test]
    fn full_disk_words_and_errors_are_recognised() {
        assert!(is_full_text("fatal: write error: No space left on device"));
        assert!(is_full_text("error: Disk quota exceeded"));
        assert!(!is_full_text("fatal: unable to access 'x': timeout"));
        assert!(is_full_io(&std::io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(is_full_io(&std::io::Error::from_raw_os_error(libc::EDQUOT)));
        assert!(!is_full_io(&std::io::Error::from_raw_os_error(
            libc::EACCES
        )));
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 20), "3.0 MiB");
    }

    #[test]
    fn a_git_failure_with_room_left_stays_what_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        let e = WorkspaceError::Git {
            op: "checkout".into(),
            code: Some(128),
            stderr: "fatal: bad object".into(),
        };
        assert!(matches!(explain(e, tmp.path()), WorkspaceError::Git { .. }));
        let e = WorkspaceError::Git {
            op: "fast-import".into(),
            code: Some(128),
            stderr: "fatal: No space left on device".into(),
        };
        assert!(matches!(
            explain(e, tmp.path()),
            WorkspaceError::DiskFull { .. }
        ));
    }
}
