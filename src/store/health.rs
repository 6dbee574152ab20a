//! Database health (issue 12): recognising a damaged `queue.db` (SQLITE_CORRUPT,
//! SQLITE_NOTADB), integrity checks for `doctor`, `enqueue` and daemon start, and a
//! consistent copy taken while the daemon runs (`polyphony backup`, SQLite's online
//! backup API).
//!
//! Architecture Invariant: a damaged database is never a task failure. Once this process
//! has seen SQLITE_CORRUPT or SQLITE_NOTADB, [`damaged`] is true; the pipeline then
//! records nothing more and the daemon stops claiming, stops its attempts and exits 2.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

pub use super::error::{damaged, is_damage};
use super::{Store, StoreError};

impl StoreError {
    /// Whether this error means the database file itself is damaged.
    pub fn is_damage(&self) -> bool {
        match self {
            StoreError::Open { source, .. } | StoreError::Sqlite(source) => source.is_damage(),
            StoreError::Damaged { .. } => true,
            _ => false,
        }
    }
}

/// The error every verb reports for a damaged queue: the file, and how to recover.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the queue database {p} is damaged ({detail}); nothing more was written to it — fix: stop the daemon, then restore a backup (move {p} and its -wal/-shm files aside, then `cp BACKUP {p}`), or salvage it with `sqlite3 {p} .recover | sqlite3 {p}.recovered` and move that into place; `polyphony doctor` checks the result",
    p = path.display()
)]
pub struct DatabaseDamaged {
    pub path: PathBuf,
    pub detail: String,
}

/// Finds a damage report in an error chain and names `db` in it.
pub fn damage_in(err: &anyhow::Error, db: &Path) -> Option<DatabaseDamaged> {
    err.chain().find_map(|cause| {
        if let Some(d) = cause.downcast_ref::<DatabaseDamaged>() {
            return Some(d.clone());
        }
        let detail = if let Some(e) = cause.downcast_ref::<rusqlite::Error>() {
            is_damage(e).then(|| e.to_string())
        } else if let Some(e) = cause.downcast_ref::<StoreError>() {
            match e {
                StoreError::Damaged { detail, .. } => Some(detail.clone()),
                StoreError::Open { source, .. } | StoreError::Sqlite(source) => {
                    source.is_damage().then(|| source.to_string())
                }
                _ => None,
            }
        } else {
            None
        }?;
        Some(DatabaseDamaged {
            path: db.to_path_buf(),
            detail,
        })
    })
}

/// `StoreError::ReadOnly` when opening `db` failed because its directory cannot be
/// written (a read-only mount, or no write permission); anything else unchanged.
pub(super) fn read_only_home(e: StoreError, db: &Path) -> StoreError {
    if !matches!(e, StoreError::Io { .. } | StoreError::Open { .. }) {
        return e;
    }
    let dir = db
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The nearest existing directory: a home that is not created yet lives below it.
    let mut probe = dir.to_path_buf();
    while !probe.exists() {
        match probe.parent() {
            Some(p) => probe = p.to_path_buf(),
            None => return e,
        }
    }
    let Ok(c) = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes()) else {
        return e;
    };
    // SAFETY: `c` is a valid NUL-terminated path.
    let writable = unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0;
    if writable {
        return e;
    }
    StoreError::ReadOnly {
        dir: probe,
        path: db.to_path_buf(),
    }
}

/// A clean verdict of [`Store::ensure_sound`], which the caller may remember.
#[derive(Debug)]
pub struct Sound {
    remember: Option<(PathBuf, String)>,
}

impl Sound {
    /// Remembers the verdict for the next [`Store::ensure_sound`] (best effort: a read-only
    /// home just checks every time).
    pub fn remember(self) {
        let Some((marker, id)) = self.remember else {
            return;
        };
        let tmp = marker.with_extension("sound.tmp");
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(crate::private::FILE_MODE)
            .open(&tmp)
            .and_then(|mut f| std::io::Write::write_all(&mut f, id.as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &marker));
        if let Err(e) = written {
            tracing::debug!(error = %e, path = %marker.display(), "soundness verdict not remembered");
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// Where [`Store::ensure_sound`] remembers a clean verdict.
fn sound_marker(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".sound");
    PathBuf::from(name)
}

/// Device, inode, size and ctime of the database and of its write-ahead log when that holds
/// frames: what changes whenever either file's bytes do.
fn files_identity(db: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let main = std::fs::metadata(db).ok()?;
    let mut id = format!(
        "db {} {} {} {}.{}",
        main.dev(),
        main.ino(),
        main.size(),
        main.ctime(),
        main.ctime_nsec()
    );
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    match std::fs::metadata(PathBuf::from(wal)) {
        Ok(m) if m.size() > 0 => id.push_str(&format!(
            " wal {} {} {}.{}",
            m.ino(),
            m.size(),
            m.ctime(),
            m.ctime_nsec()
        )),
        Ok(_) => id.push_str(" wal empty"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => id.push_str(" wal empty"),
        Err(_) => return None,
    }
    Some(id)
}

impl Store {
    /// `PRAGMA quick_check` (`full` = `integrity_check`): the problems found, empty when
    /// the file is sound. A damaged file may also fail the check itself: that is an
    /// [`StoreError::Damaged`] too.
    ///
    /// On PostgreSQL the server keeps its own files sound (checksums, WAL): this reads
    /// every table of the store once and reports one that is missing or unreadable.
    pub fn check_integrity(&self, full: bool) -> Result<Vec<String>, StoreError> {
        let Some(conn) = self.sqlite() else {
            return self.check_postgres_tables();
        };
        let pragma = if full {
            "PRAGMA integrity_check(20)"
        } else {
            "PRAGMA quick_check(20)"
        };
        let rows: Result<Vec<String>, rusqlite::Error> = conn
            .prepare(pragma)
            .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect());
        let rows = rows.map_err(|e| {
            if is_damage(&e) {
                self.damaged(e.to_string())
            } else {
                StoreError::from(e)
            }
        })?;
        let problems: Vec<String> = rows.into_iter().filter(|r| r != "ok").collect();
        if !problems.is_empty() {
            super::error::mark_damaged();
        }
        Ok(problems)
    }

    /// [`Store::check_integrity`] (quick) as an error: `Damaged` when anything is wrong.
    ///
    /// A clean verdict can be remembered beside the database (`queue.db.sound`) with the
    /// files' identity (device, inode, size, ctime of `queue.db` and of a non-empty `-wal`):
    /// the next call skips the whole-file check while that identity is unchanged, so
    /// `status` at 100,000 tasks does not read 140 MiB each time (issue 27). Any write by
    /// anyone changes a ctime (which `touch` cannot set back), so damage written since is
    /// checked again; a damaged verdict is never remembered. The caller decides whether to
    /// remember ([`Sound::remember`], once its verb succeeded: a refused verb leaves the home
    /// as it was). `doctor` and the daemon's start check the whole file every time.
    pub fn ensure_sound(&self) -> Result<Sound, StoreError> {
        if self.sqlite().is_none() {
            self.ensure_sound_now()?;
            return Ok(Sound { remember: None });
        }
        let before = files_identity(&self.path);
        let marker = sound_marker(&self.path);
        if let Some(id) = &before {
            if std::fs::read_to_string(&marker).is_ok_and(|m| &m == id) {
                return Ok(Sound { remember: None });
            }
        }
        self.ensure_sound_now()?;
        // Rememberable only when nothing changed while the check ran.
        let after = files_identity(&self.path);
        Ok(Sound {
            remember: before
                .filter(|id| after.as_ref() == Some(id))
                .map(|id| (marker, id)),
        })
    }

    /// [`Store::ensure_sound`] without the remembered verdict: the whole-file quick check
    /// every time (the daemon's start).
    pub fn ensure_sound_now(&self) -> Result<(), StoreError> {
        let problems = self.check_integrity(false)?;
        // One line for the message: SQLite puts several findings in one row.
        let lines: Vec<&str> = problems
            .iter()
            .flat_map(|p| p.lines())
            .filter(|l| !l.trim().is_empty() && !l.starts_with("*** in database"))
            .collect();
        match lines.first() {
            None if problems.is_empty() => Ok(()),
            None => Err(self.damaged("quick_check failed".into())),
            Some(first) => Err(self.damaged(format!(
                "quick_check: {first}{}",
                if lines.len() > 1 {
                    format!(" and {} more problems", lines.len() - 1)
                } else {
                    String::new()
                }
            ))),
        }
    }

    fn damaged(&self, detail: String) -> StoreError {
        // A verdict that still matches the files is withdrawn; a stale one is never trusted
        // anyway and stays, so a refused verb changes nothing on disk (issue 24).
        let marker = sound_marker(&self.path);
        let current = files_identity(&self.path)
            .is_some_and(|id| std::fs::read_to_string(&marker).is_ok_and(|m| m == id));
        if current {
            let _ = std::fs::remove_file(&marker);
        }
        super::error::mark_damaged();
        StoreError::Damaged {
            path: self.path.clone(),
            detail,
        }
    }

    /// Copies the database to `dest` with SQLite's online backup API: one step under a
    /// read transaction, so the copy is consistent even while the daemon writes. Written
    /// to a temporary file beside `dest`, checked, then renamed into place.
    pub fn backup_to(&self, dest: &Path) -> Result<(), StoreError> {
        self.refuse_postgres_backup()?;
        let dir = dest
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let tmp = tempfile::Builder::new()
            .prefix(".polyphony-backup-")
            .tempfile_in(dir)
            .map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        self.backup_via(tmp.path(), dest)
    }

    /// [`Store::backup_to`] through the temporary file `tmp` the caller named (and may
    /// remove on a signal, `cli::backup`): created here, renamed onto `dest` once checked,
    /// removed with its journal on any error.
    pub fn backup_via(&self, tmp: &Path, dest: &Path) -> Result<(), StoreError> {
        let result = self.backup_into(tmp).and_then(|()| {
            std::fs::rename(tmp, dest).map_err(|source| StoreError::Io {
                path: dest.to_path_buf(),
                source,
            })
        });
        if result.is_err() {
            let _ = std::fs::remove_file(tmp);
        }
        let mut journal = tmp.as_os_str().to_owned();
        journal.push("-journal");
        let _ = std::fs::remove_file(PathBuf::from(journal));
        result
    }

    fn backup_into(&self, tmp: &Path) -> Result<(), StoreError> {
        let Some(conn) = self.sqlite() else {
            return self.refuse_postgres_backup();
        };
        {
            let mut out = Connection::open_with_flags(
                tmp,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
            )?;
            let backup = rusqlite::backup::Backup::new(conn, &mut out)?;
            // -1: every page in one step, so no writer can interleave (a multi-step
            // backup restarts each time the source changes).
            loop {
                match backup.step(-1)? {
                    rusqlite::backup::StepResult::Done => break,
                    rusqlite::backup::StepResult::More
                    | rusqlite::backup::StepResult::Busy
                    | rusqlite::backup::StepResult::Locked => {
                        std::thread::sleep(std::time::Duration::from_millis(50))
                    }
                    _ => std::thread::sleep(std::time::Duration::from_millis(50)),
                }
            }
            drop(backup);
            crate::failpoint::hit("backup-copied");
            // A plain rollback-journal file: one self-contained file to copy back.
            out.pragma_update(None, "journal_mode", "DELETE")?;
            let check: String = out.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
            if check != "ok" {
                return Err(self.damaged(format!("the copy fails quick_check: {check}")));
            }
        }
        Ok(())
    }

    /// A PostgreSQL store is backed up with the server's tools, not by copying a file.
    fn refuse_postgres_backup(&self) -> Result<(), StoreError> {
        match self.sqlite() {
            Some(_) => Ok(()),
            None => Err(StoreError::Unsupported {
                shown: self.path.display().to_string(),
                what: "`polyphony backup` copies the embedded SQLite file; back up a PostgreSQL \
                       store with `pg_dump` (e.g. `pg_dump -Fc -f queue.dump DBNAME`) and restore \
                       it with `pg_restore`",
            }),
        }
    }

    /// Reads one row of every table of the PostgreSQL store: the problems found.
    fn check_postgres_tables(&self) -> Result<Vec<String>, StoreError> {
        let mut problems = Vec::new();
        for table in super::pg::TABLES {
            let sql = format!("SELECT 1 FROM {table} LIMIT 1");
            if let Err(e) = self.db.query_opt(&sql, super::sql::params![], |_| Ok(())) {
                problems.push(format!("table {table}: {e}"));
            }
        }
        Ok(problems)
    }
}
