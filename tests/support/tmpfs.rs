//! A tiny filesystem for full-disk tests (issue 24): a tmpfs of a given size mounted on a
//! directory of the test's own, unmounted on drop. Without the right to mount (not root, no
//! `CAP_SYS_ADMIN`) a test prints `SKIPPED: <why>` and returns, but fails when `CI` is set.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted tmpfs; unmounted (lazily, so an open file cannot keep it) on drop.
pub struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount -o size=`, e.g. `1m`) on `dir` (created), or `None`
    /// after printing SKIPPED (a panic under CI).
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir)
            .output();
        let why = match out {
            Ok(o) if o.status.success() => {
                return Some(Tmpfs {
                    dir: dir.to_path_buf(),
                })
            }
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        if std::env::var_os("CI").is_some() {
            panic!("mounting a tmpfs is required under CI: {why}");
        }
        println!("SKIPPED: cannot mount a tmpfs ({why})");
        None
    }

    /// Grows (or shrinks) the filesystem in place: `mount -o remount,size=`.
    pub fn resize(&self, size: &str) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(st.success(), "remount {} to {size}", self.dir.display());
    }

    /// Makes the filesystem read-only in place: `mount -o remount,ro`.
    pub fn read_only(&self) {
        let st = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(st.success(), "remount {} read-only", self.dir.display());
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
