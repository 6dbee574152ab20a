//! `polyphony backup FILE`: a consistent copy of `queue.db` taken with SQLite's online
//! backup API, safe while the daemon runs (issue 12). Restoring is a file copy with the
//! daemon stopped (README "Backup and restore").
//!
//! Interruptions (issue 24, docs/SECURITY.md): the copy is written to
//! `.polyphony-backup-PID-N` beside FILE and renamed onto it once checked. SIGTERM and
//! SIGINT remove that file and its journal before the process dies (an async-signal-safe
//! `unlink` of paths prepared before the copy starts). A SIGKILL leaves them, with a
//! breadcrumb `backup-PID.pending` in the home naming them: the next `backup` or
//! `cleanup` removes every temporary whose process is gone (and `backup` those beside its
//! FILE too). FILE is only ever replaced by a rename, and only when it is a regular file:
//! a device, FIFO, directory or symlink is refused, `--force` or not.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};

use anyhow::Context as _;

use super::{Context, Outcome, UsageError};
use crate::store::Store;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write the copy (refused if it exists, unless --force).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let db = crate::config::db_path(&ctx.home);
    if !db.is_file() {
        return Err(UsageError::new(
            format!("there is no queue database at {}", db.display()),
            "check --home / POLYPHONY_HOME: nothing has been queued in this home yet",
        )
        .into());
    }
    let dest = std::path::absolute(&args.file)
        .with_context(|| format!("cannot resolve {}", args.file.display()))?;
    if let Ok(meta) = std::fs::symlink_metadata(&dest) {
        if !meta.file_type().is_file() {
            return Err(UsageError::new(
                format!(
                    "{} is {}, not a regular file: a backup never replaces it",
                    dest.display(),
                    kind_of(&meta.file_type())
                ),
                "name a regular file (a new one, or an old backup with --force)",
            )
            .into());
        }
    }
    if dest.exists() && !args.force {
        return Err(UsageError::new(
            format!("{} already exists", dest.display()),
            "name a new file, or pass --force to replace it",
        )
        .into());
    }
    let same = dest
        .canonicalize()
        .ok()
        .zip(db.canonicalize().ok())
        .is_some_and(|(a, b)| a == b);
    if same {
        return Err(UsageError::new(
            format!("{} is the queue database itself", dest.display()),
            "write the backup to another file",
        )
        .into());
    }
    if dest.parent().is_some_and(|p| !p.is_dir()) {
        return Err(UsageError::new(
            format!("the directory of {} does not exist", dest.display()),
            "create it first, or name a file in an existing directory",
        )
        .into());
    }
    let store = Store::open(&db).with_context(|| format!("opening the queue {}", db.display()))?;
    store.ensure_sound()?;
    let dir = dest.parent().unwrap_or(Path::new("/"));
    let removed = remove_stale(&ctx.home) + remove_stale_beside(dir);
    if removed > 0 {
        eprintln!("removed {removed} temporary file(s) of interrupted backups");
    }
    let tmp = dir.join(format!(
        "{TMP_PREFIX}{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let pending = ctx
        .home
        .join(format!("backup-{}.pending", std::process::id()));
    std::fs::write(&pending, tmp.as_os_str().as_encoded_bytes())
        .with_context(|| format!("cannot write {}", pending.display()))?;
    let guard = SignalCleanup::arm(&tmp, &pending);
    let result = store
        .backup_via(&tmp, &dest)
        .with_context(|| format!("backing up {} to {}", db.display(), dest.display()));
    drop(guard);
    let _ = std::fs::remove_file(&pending);
    result?;
    eprintln!("backed up {} to {}", db.display(), dest.display());
    Ok(Outcome::Success)
}

/// The name of a backup's temporary file: `.polyphony-backup-PID-N`.
const TMP_PREFIX: &str = ".polyphony-backup-";

fn kind_of(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_symlink() {
        "a symlink"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Whether process `pid` is gone (a pid that lives again as another process counts as
/// alive: its files stay, the safe side).
fn gone(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 only checks whether the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Removes a backup temporary and its journal; only files named like one.
fn remove_tmp(tmp: &Path) -> bool {
    let named = tmp
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(TMP_PREFIX));
    if !named {
        return false;
    }
    let mut journal = tmp.as_os_str().to_owned();
    journal.push("-journal");
    let _ = std::fs::remove_file(PathBuf::from(journal));
    std::fs::remove_file(tmp).is_ok()
}

/// Removes the temporaries of interrupted backups the home's breadcrumbs name (their
/// process gone), and the breadcrumbs; returns how many temporaries went (`cleanup` too).
pub fn remove_stale(home: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(home) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("backup-"))
            .and_then(|n| n.strip_suffix(".pending"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if !gone(pid) {
            continue;
        }
        if let Ok(bytes) = std::fs::read(e.path()) {
            let tmp = PathBuf::from(String::from_utf8_lossy(&bytes).into_owned());
            if remove_tmp(&tmp) {
                removed += 1;
            }
        }
        let _ = std::fs::remove_file(e.path());
    }
    removed
}

/// Removes `.polyphony-backup-PID-*` files in `dir` whose process is gone.
fn remove_stale_beside(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TMP_PREFIX))
            .filter(|n| !n.ends_with("-journal"))
            .and_then(|n| n.split('-').next())
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if gone(pid) && remove_tmp(&e.path()) {
            removed += 1;
        }
    }
    removed
}

/// The paths a SIGTERM or SIGINT handler unlinks: the temporary, its journal, the
/// breadcrumb. Leaked `CString`s, set before the handler is installed.
static DOOMED: [AtomicPtr<libc::c_char>; 3] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];

extern "C" fn on_signal(sig: libc::c_int) {
    for slot in &DOOMED {
        let p = slot.load(Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: `p` is a leaked NUL-terminated path; unlink(2) is async-signal-safe.
            unsafe {
                libc::unlink(p);
            }
        }
    }
    // SAFETY: back to the default action, then die of the same signal (exit status 128+n).
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// SIGTERM and SIGINT remove the backup's files while it runs; dropped, the defaults
/// are back.
struct SignalCleanup;

impl SignalCleanup {
    fn arm(tmp: &Path, pending: &Path) -> SignalCleanup {
        let mut journal = tmp.as_os_str().to_owned();
        journal.push("-journal");
        let paths = [
            tmp.as_os_str().to_owned(),
            journal,
            pending.as_os_str().to_owned(),
        ];
        for (slot, path) in DOOMED.iter().zip(paths) {
            if let Ok(c) = CString::new(path.into_encoded_bytes()) {
                slot.store(c.into_raw(), Ordering::SeqCst);
            }
        }
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: installs a handler that only calls async-signal-safe functions.
        unsafe {
            libc::signal(libc::SIGTERM, handler);
            libc::signal(libc::SIGINT, handler);
        }
        SignalCleanup
    }
}

impl Drop for SignalCleanup {
    fn drop(&mut self) {
        // SAFETY: restores the default actions.
        unsafe {
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            libc::signal(libc::SIGINT, libc::SIG_DFL);
        }
        for slot in &DOOMED {
            let p = slot.swap(std::ptr::null_mut(), Ordering::SeqCst);
            if !p.is_null() {
                // SAFETY: `p` came from `CString::into_raw` above and is no longer shared.
                drop(unsafe { CString::from_raw(p) });
            }
        }
    }
}
