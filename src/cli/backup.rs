//! `polyphony backup FILE`: a consistent copy of `queue.db` taken with SQLite's online
//! backup API, safe while the daemon runs (issue 12). Restoring is a file copy with the
//! daemon stopped (README "Backup and restore").

use std::path::PathBuf;

use anyhow::Context as _;

use super::{Context, Outcome, UsageError};

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
    let handle = crate::store::StoreHandle::for_home(&ctx.home)?;
    let Some(db) = handle.sqlite_path().map(std::path::Path::to_path_buf) else {
        return Err(UsageError::new(
            format!("the queue is the PostgreSQL store {handle}: `polyphony backup` copies the embedded SQLite file only"),
            "back the shared store up with pg_dump, e.g. `pg_dump -Fc -f FILE DBNAME`",
        )
        .into());
    };
    if !db.is_file() {
        return Err(UsageError::new(
            format!("there is no queue database at {}", db.display()),
            "check --home / POLYPHONY_HOME: nothing has been queued in this home yet",
        )
        .into());
    }
    let dest = std::path::absolute(&args.file)
        .with_context(|| format!("cannot resolve {}", args.file.display()))?;
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
    let store = handle
        .open()
        .with_context(|| format!("opening the queue {}", db.display()))?;
    store.ensure_sound()?;
    store
        .backup_to(&dest)
        .with_context(|| format!("backing up {} to {}", db.display(), dest.display()))?;
    eprintln!("backed up {} to {}", db.display(), dest.display());
    Ok(Outcome::Success)
}
