//! The home's own files beside the configuration and the store: its daemon lock.
//!
//! One daemon per home: an exclusive lock on `$POLYPHONY_HOME/daemon.lock` holding the
//! owner's pid. The OS drops the lock when the process dies, so a `kill -9` never leaves
//! a stale lock behind; the pid in the file is only for the error message.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another polyphony daemon (pid {pid}) already runs on home {home}; stop it first, or use another POLYPHONY_HOME")]
    Held { pid: String, home: PathBuf },
    #[error("cannot open the daemon lock {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Held while the daemon runs; dropping it releases the lock.
#[derive(Debug)]
pub struct DaemonLock {
    _file: File,
    path: PathBuf,
}

impl DaemonLock {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock or says who holds it.
    pub fn acquire(home: &Path) -> Result<DaemonLock, LockError> {
        let path = home.join("daemon.lock");
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                return Err(LockError::Held {
                    pid: pid.trim().to_string(),
                    home: home.to_path_buf(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(DaemonLock { _file: file, path })
    }

    /// Whether some process holds the lock now (for `cleanup` and `status`).
    pub fn is_held(home: &Path) -> bool {
        let path = home.join("daemon.lock");
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => match file.try_lock() {
                Ok(()) => {
                    let _ = file.unlock();
                    false
                }
                Err(_) => true,
            },
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_names_the_holder() {
        let home = tempfile::tempdir().unwrap();
        let first = DaemonLock::acquire(home.path()).unwrap();
        assert!(DaemonLock::is_held(home.path()));
        match DaemonLock::acquire(home.path()) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            other => panic!("expected Held, got {other:?}"),
        }
        drop(first);
        assert!(!DaemonLock::is_held(home.path()));
        DaemonLock::acquire(home.path()).unwrap();
    }
}
