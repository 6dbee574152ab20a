//! The host side of one container: what must exist on disk before the engine creates it.
//!
//! Owns three steps `DockerRuntime::create` takes for every container:
//! - **Credential copy.** Credential mounts below [`CREDENTIAL_STAGING_DIR`] are never bound
//!   from the operator's files: each named file (or, when the identity asks for it, whole
//!   directory) is copied into a private per-container directory, readable by the
//!   container's uid and nobody else, and that copy is mounted read-only. The operator's
//!   login files stay 0600 for the operator, the container cannot see anything but the
//!   copied files, and an unprivileged container user can still read them.
//! - **Stdin.** The prompt is written to the same directory ([`STDIN_FILE`]), so the
//!   container's root filesystem can stay read-only (the engine refuses uploads into a
//!   read-only rootfs).
//! - **Workspace hand-over.** When the daemon runs as root and the container does not,
//!   read-write bind mounts are shared with the container's group (group write, setgid
//!   directories) without changing their owner, so host git keeps owning the repository
//!   (no "dubious ownership") and nothing has to be handed back after a crash.
//!
//! The directory is removed when the returned [`Staged`] is dropped (the runtime keeps it
//! until the container is removed).

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::container_spec::{
    numeric_user, ContainerSpec, CREDENTIAL_STAGING_DIR, HOLD_ENV, HOLD_FIFO_ENV, HOLD_SECONDS,
    HOLD_TIMEOUT_ENV, RELEASE_FIFO, RELEASE_FILE, STAGING_ROOT, STDIN_FILE,
};
use super::RuntimeError;
use crate::domain::VolumeMount;

/// Staging directories are `<temp dir>/polyphony-stage-<home label>-<random>`.
pub const STAGE_PREFIX: &str = "polyphony-stage-";

/// Removes this home's staging directories older than `age` (left by a daemon that was
/// killed: a live container's entrypoint copied its files within seconds of starting).
/// Returns how many were removed.
pub fn sweep_stale(home_label: &str, age: std::time::Duration) -> usize {
    let prefix = format!("{STAGE_PREFIX}{home_label}-");
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|e| e > age);
        if old && fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The per-container directory; removed on drop.
#[derive(Debug)]
pub struct Staged {
    dir: tempfile::TempDir,
}

impl Staged {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// `path` (below [`STAGING_ROOT`] in the container) as the host sees it under `root`.
fn staged_path(root: &Path, path: &str) -> PathBuf {
    root.join(
        path.trim_start_matches(STAGING_ROOT)
            .trim_start_matches('/'),
    )
}

/// Releases a held container's command ([`ContainerSpec::hold`]): writes [`RELEASE_FILE`]
/// into its staging directory `root` (as the host sees it), then a line into
/// [`RELEASE_FIFO`] for an entrypoint waiting on it. The file comes first: an entrypoint
/// opens the FIFO before it looks for the file, so either its look finds the file or its
/// `read` gets the line. No reader yet (`ENXIO`), or a directory staged before the FIFO
/// existed, is nothing to tell. Releasing twice is harmless.
pub fn release(root: &Path) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    fs::write(staged_path(root, RELEASE_FILE), b"")?;
    let fifo = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(staged_path(root, RELEASE_FIFO));
    match fifo {
        // One short line is written whole or not at all (below PIPE_BUF).
        Ok(mut fifo) => match fifo.write_all(b"released\n") {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            other => other,
        },
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) || e.kind() == io::ErrorKind::NotFound => {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Makes [`RELEASE_FIFO`] under `root` for the container's user: owned by the daemon, its
/// group the container's (`gid`) with read and write, else the daemon's alone (a container
/// running as the daemon's own user).
fn make_release_fifo(root: &Path, gid: Option<u32>) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = staged_path(root, RELEASE_FIFO);
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mode = match gid {
        Some(gid) => {
            std::os::unix::fs::lchown(&path, None, Some(gid))?;
            0o660
        }
        None => 0o600,
    };
    fs::set_permissions(&path, fs::Permissions::from_mode(mode))
}

/// Prepares the host side of `spec` and returns the spec the engine should see: credential
/// mounts and stdin replaced by one read-only mount of the staging directory.
pub fn prepare(spec: &ContainerSpec) -> Result<(ContainerSpec, Option<Staged>), RuntimeError> {
    let user = spec.limits.user.as_deref().and_then(numeric_user);
    let daemon_is_root = unsafe { libc::geteuid() } == 0;
    let mut out = spec.clone();
    let (credentials, others): (Vec<VolumeMount>, Vec<VolumeMount>) = spec
        .mounts
        .iter()
        .cloned()
        .partition(|m| is_below(&m.container_path, CREDENTIAL_STAGING_DIR));
    if daemon_is_root {
        if let Some((uid, gid)) = user.filter(|(uid, _)| *uid != 0) {
            for m in others.iter().filter(|m| !m.read_only) {
                share_with_group(&m.host_path, gid).map_err(|e| {
                    RuntimeError::Io(format!(
                        "cannot share {} with the container user {uid}:{gid}: {e}",
                        m.host_path.display()
                    ))
                })?;
            }
        }
    }
    if credentials.is_empty() && spec.stdin.is_none() && !spec.hold {
        return Ok((out, None));
    }
    let home = spec
        .labels
        .get(super::LABEL_HOME)
        .map(String::as_str)
        .unwrap_or("none");
    let dir = tempfile::Builder::new()
        .prefix(&format!("{STAGE_PREFIX}{home}-"))
        .tempdir()
        .map_err(|e| RuntimeError::Io(format!("cannot create a staging directory: {e}")))?;
    let root = dir.path();
    let owner = if daemon_is_root { user } else { None };
    let io_err = |what: &str, e: io::Error| RuntimeError::Io(format!("{what}: {e}"));
    for m in &credentials {
        let target = staged_path(root, &m.container_path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err("staging credentials", e))?;
        }
        copy_credential(&m.host_path, &target).map_err(|e| {
            RuntimeError::Io(format!(
                "cannot stage credential {} for the container: {e}",
                m.host_path.display()
            ))
        })?;
    }
    if let Some(input) = &spec.stdin {
        let target = staged_path(root, STDIN_FILE);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err("staging stdin", e))?;
        }
        fs::write(&target, input).map_err(|e| io_err("staging stdin", e))?;
        out.env
            .insert("POLYPHONY_STDIN".to_string(), STDIN_FILE.to_string());
        out.stdin = None;
    }
    if spec.hold {
        out.env
            .insert(HOLD_ENV.to_string(), RELEASE_FILE.to_string());
        out.env
            .entry(HOLD_TIMEOUT_ENV.to_string())
            .or_insert_with(|| HOLD_SECONDS.to_string());
        out.env
            .entry(HOLD_FIFO_ENV.to_string())
            .or_insert_with(|| RELEASE_FIFO.to_string());
    }
    // Owned by the daemon, readable by the container's group only: u=rw(x), g=r(x).
    restrict(root, owner.map(|(_, gid)| gid)).map_err(|e| io_err("staging permissions", e))?;
    if spec.hold {
        // After `restrict`: the one thing here the container writes (a line of its own
        // releases nothing it could not skip; its network's one exit is the proxy).
        make_release_fifo(root, owner.map(|(_, gid)| gid))
            .map_err(|e| io_err("staging the release FIFO", e))?;
    }
    out.mounts = others;
    out.mounts.push(VolumeMount {
        host_path: root.to_path_buf(),
        container_path: STAGING_ROOT.to_string(),
        read_only: true,
    });
    Ok((out, Some(Staged { dir })))
}

fn is_below(path: &str, dir: &str) -> bool {
    path == dir || path.starts_with(&format!("{dir}/"))
}

/// Copies a file, or a directory tree (regular files and directories only: symlinks,
/// sockets and devices inside it are skipped, so a link cannot pull other host files in).
fn copy_credential(from: &Path, to: &Path) -> io::Result<()> {
    // The identity's path itself may be a symlink (a dotfiles checkout): follow that one.
    let meta = fs::metadata(from)?;
    if meta.is_file() {
        fs::copy(from, to)?;
        return Ok(());
    }
    if !meta.is_dir() {
        return Err(io::Error::other("not a regular file or directory"));
    }
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if kind.is_dir() {
            copy_credential(&src, &dst)?;
        } else if kind.is_file() {
            fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// Directories 0750, files 0640 (0750 when executable), group `gid` when given.
fn restrict(path: &Path, gid: Option<u32>) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if gid.is_some() {
        std::os::unix::fs::lchown(path, None, gid)?;
    }
    let (mode, group_mode) = if meta.is_dir() || meta.mode() & 0o100 != 0 {
        (0o700, 0o050)
    } else {
        (0o600, 0o040)
    };
    let mode = if gid.is_some() {
        mode | group_mode
    } else {
        mode
    };
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    if meta.is_dir() {
        for entry in fs::read_dir(path)? {
            restrict(&entry?.path(), gid)?;
        }
    }
    Ok(())
}

/// Gives group `gid` write access to the tree at `path` without changing owners:
/// group set to `gid`, g+rw on everything, g+x where u+x, setgid on directories (files
/// the container creates keep the group). Symlinks are re-grouped, never followed.
pub fn share_with_group(path: &Path, gid: u32) -> io::Result<()> {
    let mut stack: Vec<PathBuf> = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = fs::symlink_metadata(&p)?;
        if meta.gid() != gid {
            std::os::unix::fs::lchown(&p, None, Some(gid))?;
        }
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.mode() & 0o7777;
        let mut want = mode | 0o060;
        if mode & 0o100 != 0 {
            want |= 0o010;
        }
        if meta.is_dir() {
            want |= 0o2000;
            for entry in fs::read_dir(&p)? {
                stack.push(entry?.path());
            }
        }
        if want != mode {
            fs::set_permissions(&p, fs::Permissions::from_mode(want))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

    /// Issue 25: a held container always gets its staging directory, the entrypoint is told
    /// the file to wait for, and `release` writes it where the container sees it.
    #[test]
    fn a_held_container_is_staged_and_released_through_its_staging_directory() {
        let mut spec =
            ContainerSpec::new("n", "i", vec!["x".into()]).limits(Default::default(), "4242:4242");
        assert!(prepare(&spec).unwrap().1.is_none(), "nothing to stage");
        spec.hold = true;
        let (out, staged) = prepare(&spec).unwrap();
        let staged = staged.expect("a held container is staged");
        assert_eq!(out.env[HOLD_ENV], RELEASE_FILE);
        assert_eq!(out.env[HOLD_TIMEOUT_ENV], HOLD_SECONDS.to_string());
        assert!(out
            .mounts
            .iter()
            .any(|m| m.container_path == STAGING_ROOT && m.host_path == staged.path()));
        assert!(!staged.path().join("released").exists());
        assert_eq!(out.env[HOLD_FIFO_ENV], RELEASE_FIFO);
        let fifo = staged.path().join("release.fifo");
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        // No reader yet: nothing to tell, the file is enough.
        release(staged.path()).unwrap();
        assert!(staged.path().join("released").exists());
        // A reader waiting (read-write, as the entrypoint opens it) gets one line a release.
        let mut reader = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .unwrap();
        release(staged.path()).unwrap();
        let mut line = [0u8; 9];
        io::Read::read_exact(&mut reader, &mut line).unwrap();
        assert_eq!(&line, b"released\n");
        // A container that filled the FIFO (it may write there) and never reads it: the
        // release neither blocks nor fails, and the file is still written.
        fs::remove_file(staged.path().join("released")).unwrap();
        let mut filler = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        while io::Write::write(&mut filler, &[b'x'; 4096]).is_ok() {}
        release(staged.path()).unwrap();
        assert!(staged.path().join("released").exists());
        drop(reader);
        // A spec's own bound is kept (tests shorten it).
        spec.env
            .insert(HOLD_TIMEOUT_ENV.to_string(), "1".to_string());
        assert_eq!(prepare(&spec).unwrap().0.env[HOLD_TIMEOUT_ENV], "1");
    }

    #[test]
    fn stage_copies_only_named_files_and_stdin() {
        let host = tempfile::tempdir().unwrap();
        let login = host.path().join(".claude");
        fs::create_dir_all(login.join("projects")).unwrap();
        fs::write(login.join(".credentials.json"), "{\"t\":1}").unwrap();
        fs::write(login.join("projects/history.jsonl"), "secret chat").unwrap();
        let spec = ContainerSpec::new("n", "i", vec!["x".into()])
            .mount(VolumeMount {
                host_path: login.join(".credentials.json"),
                container_path: format!("{CREDENTIAL_STAGING_DIR}/.claude/.credentials.json"),
                read_only: true,
            })
            .stdin(Some("prompt".into()))
            .limits(Default::default(), "4242:4242");
        let (out, staged) = prepare(&spec).unwrap();
        let staged = staged.expect("staged");
        let root = staged.path().to_path_buf();
        assert_eq!(
            fs::read_to_string(root.join("credentials/.claude/.credentials.json")).unwrap(),
            "{\"t\":1}"
        );
        assert!(!root.join("credentials/.claude/projects").exists());
        assert_eq!(
            fs::read_to_string(root.join("input/stdin")).unwrap(),
            "prompt"
        );
        assert_eq!(out.mounts.len(), 1);
        assert_eq!(out.mounts[0].container_path, STAGING_ROOT);
        assert!(out.mounts[0].read_only);
        assert!(out.stdin.is_none());
        assert_eq!(out.env["POLYPHONY_STDIN"], STDIN_FILE);
        let mode = fs::metadata(root.join("credentials/.claude/.credentials.json"))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o007, 0, "never world-readable: {mode:o}");
        drop(staged);
        assert!(!root.exists(), "removed on drop");
    }

    #[test]
    fn stale_staging_of_this_home_only_is_swept() {
        let ours = format!("sweep-{}", std::process::id());
        let mine = std::env::temp_dir().join(format!("{STAGE_PREFIX}{ours}-a"));
        let theirs = std::env::temp_dir().join(format!("{STAGE_PREFIX}{ours}x-a"));
        fs::create_dir_all(&mine).unwrap();
        fs::create_dir_all(&theirs).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(sweep_stale(&ours, std::time::Duration::from_secs(3600)), 0);
        assert_eq!(sweep_stale(&ours, std::time::Duration::ZERO), 1);
        assert!(!mine.exists());
        assert!(theirs.exists(), "another home's directory stays");
        fs::remove_dir_all(theirs).unwrap();
    }

    #[test]
    fn whole_directory_copy_skips_symlinks() {
        let host = tempfile::tempdir().unwrap();
        let login = host.path().join(".codex");
        fs::create_dir_all(&login).unwrap();
        fs::write(login.join("auth.json"), "a").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", login.join("leak")).unwrap();
        let to = host.path().join("copy");
        copy_credential(&login, &to).unwrap();
        assert!(to.join("auth.json").exists());
        assert!(fs::symlink_metadata(to.join("leak")).is_err());
    }
}
