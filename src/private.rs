//! Owner-only permissions for what holds task data or could hold a secret (issue 11 "Low"):
//! the home directory 0700; `queue.db` and its `-wal`/`-shm`, transcripts and logs 0600.
//!
//! Must not: widen a permission. Every function only removes group and other access.
//! Must not: touch a directory shared by design. A sticky directory (`/tmp`) or one owned by
//! another user is left as it is: a queue opened at `/tmp/q.db` by root would otherwise make
//! `/tmp` 0700 for everyone.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of private directories.
pub const DIR_MODE: u32 = 0o700;
/// Mode of private files.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` (and missing parents, owner-only) and makes `dir` itself 0700.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    restrict(dir, DIR_MODE)
}

/// Makes an existing file or directory owner-only (`mode` is 0700 or 0600); a missing path
/// is not an error (SQLite creates `-wal` and `-shm` lazily).
pub fn restrict(path: &Path, mode: u32) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Ok(()),
        Ok(meta) if meta.is_dir() && shared(&meta) => Ok(()),
        Ok(meta) if meta.permissions().mode() & 0o777 == mode => Ok(()),
        Ok(_) => std::fs::set_permissions(path, Permissions::from_mode(mode)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether a directory is shared by design: sticky (`/tmp`, `/var/tmp`) or owned by another
/// user than this process's.
fn shared(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    meta.permissions().mode() & 0o1000 != 0 || meta.uid() != euid
}

/// Opens `path` for appending, created 0600 (and made 0600 when it already existed).
pub fn open_append(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(FILE_MODE)
        .open(path)?;
    if file.metadata()?.permissions().mode() & 0o777 != FILE_MODE {
        file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    }
    Ok(file)
}

/// Creates `path` empty with mode 0600 unless it exists (SQLite then keeps that mode, and
/// gives its `-wal` and `-shm` files the database's mode).
pub fn create_file_if_missing(path: &Path) -> io::Result<()> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => restrict(path, FILE_MODE),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn directories_and_files_become_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        create_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        create_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let f = dir.join("t.log");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, Permissions::from_mode(0o644)).unwrap();
        open_append(&f).unwrap();
        assert_eq!(mode(&f), 0o600);
        let db = dir.join("q.db");
        create_file_if_missing(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
        restrict(&dir.join("missing"), FILE_MODE).unwrap();
    }

    #[test]
    fn a_sticky_shared_directory_is_left_as_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("tmp");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, Permissions::from_mode(0o1777)).unwrap();
        create_dir(&shared).unwrap();
        restrict(&shared, DIR_MODE).unwrap();
        let full = std::fs::metadata(&shared).unwrap().permissions().mode() & 0o7777;
        assert_eq!(full, 0o1777);
        // What is made inside it is still owner-only.
        let home = shared.join("home");
        create_dir(&home).unwrap();
        assert_eq!(mode(&home), 0o700);
    }
}
