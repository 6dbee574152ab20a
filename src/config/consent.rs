//! Settings that weaken isolation need the operator's consent (`allow_unsafe: true` in
//! config.yaml): hardening turned off, `network: host`, container user 0, a credential
//! volume that is `/`, `egress: open`, the Docker socket or a system directory, `GITHUB_TOKEN`/`GH_TOKEN`
//! in `api_keys`, and an empty `protected_paths`.
//!
//! Without consent the first one found is the load error (exit 2, file:line, field, fix);
//! with consent each one becomes a warning that `doctor` and `config check` print.
//!
//! Paths are judged with `..`, `.` and `//` resolved by name; `Config::load` judges them
//! again with symlinks resolved ([`symlinked_volumes`]), so `~/creds -> /etc` is `/etc`.
//! A `user` is parsed as numbers: `00` and `000:0` are root too.
//!
//! Architecture Invariant: [`unsafe_settings`] is pure over the parsed files; paths are the
//! expanded ones the identities will really mount.

use std::path::Path;

use super::locate::Seg::{self, Item, Key};
use super::model::{AgentsFile, GlobalConfig};
use super::{ConfigError, ConfigErrorKind, Docs};
use crate::domain::Identity;

const CONSENT: &str = "or set `allow_unsafe: true` in config.yaml to accept the risk";

/// Directories a credential volume must never be, nor lie below (besides `/` itself).
const SYSTEM_DIRS: [&str; 14] = [
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/run",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containerd",
];

/// Top-level directories a credential volume must not be (below them is fine, e.g.
/// `/root/.claude` or `/home/me/.codex`).
const WHOLE_TREES: [&str; 6] = ["/root", "/home", "/var", "/opt", "/srv", "/tmp"];

/// Every unsafe setting, as the error it is without consent.
pub(super) fn unsafe_settings(
    global: &GlobalConfig,
    identities: &[Identity],
    agents: &AgentsFile,
    docs: &Docs<'_>,
) -> Vec<ConfigError> {
    let mut out = Vec::new();
    let cfg = &docs.config;
    let mut push =
        |doc: &super::Doc<'_>, path: &[Seg<'_>], needle: Option<&str>, what: String, fix: &str| {
            out.push(doc.error(
                ConfigErrorKind::Unsafe,
                path,
                needle,
                what,
                format!("{fix}, {CONSENT}"),
            ));
        };
    if global.container.network.trim() == "host" {
        push(
            cfg,
            &[Key("container"), Key("network")],
            None,
            "`container.network: host` gives agents the host's network stack (its loopback services included)".into(),
            "use `bridge` (or `none`)",
        );
    }
    if global.egress.mode.trim() == "open" {
        push(
            cfg,
            &[Key("egress"), Key("mode")],
            None,
            "`egress.mode: open` lets agents connect anywhere (Docker's bridge: the host's gateway, other containers, any address)".into(),
            "use `allowlist` (named hosts only, through a proxy) and list what agents need in `egress.allow`",
        );
    }
    if let Some(user) = &global.container.user {
        if runs_as_root(user) {
            push(
                cfg,
                &[Key("container"), Key("user")],
                None,
                format!("`container.user: {user}` runs agents and checks as root"),
                "remove it (a root daemon then uses 1000:1000) or give an unprivileged uid:gid",
            );
        }
    }
    if global.verify.protected_paths.is_empty() {
        push(
            cfg,
            &[Key("verify"), Key("protected_paths")],
            None,
            "`verify.protected_paths` is empty: an agent may rewrite CI workflows and .polyphony.yaml".into(),
            "list at least `.github/**` and `.polyphony.yaml` (the default)",
        );
    }
    for (i, repo) in global.repos.iter().enumerate() {
        let empty = repo
            .verify
            .as_ref()
            .and_then(|v| v.protected_paths.as_ref())
            .is_some_and(Vec::is_empty);
        if empty {
            push(
                cfg,
                &[Key("repos"), Item(i), Key("verify"), Key("protected_paths")],
                None,
                format!("`repos[{i}].verify.protected_paths` ({}) is empty: an agent may rewrite CI workflows and .polyphony.yaml", repo.repo),
                "list at least `.github/**` and `.polyphony.yaml`, or remove the override",
            );
        }
    }
    for (i, a) in agents.agents.iter().enumerate() {
        if a.network.as_deref().map(str::trim) == Some("host") {
            push(
                &docs.agents,
                &[Key("agents"), Item(i), Key("network")],
                None,
                format!("agent `{}` has `network: host` (the host's network stack, its loopback services included)", a.name),
                "use `bridge` (or `none`)",
            );
        }
        if a.egress.as_ref().and_then(|e| e.mode()).map(str::trim) == Some("open") {
            let mut path = vec![Key("agents"), Item(i), Key("egress")];
            if matches!(a.egress, Some(super::model::EgressField::Full(_))) {
                path.push(Key("mode"));
            }
            push(
                &docs.agents,
                &path,
                None,
                format!("agent `{}` has `egress: open` (it may connect anywhere: the host's gateway, other containers, any address)", a.name),
                "use `egress: allowlist` and list what it needs in `egress.allow`",
            );
        }
        if let Some(user) = &a.user {
            if runs_as_root(user) {
                push(
                    &docs.agents,
                    &[Key("agents"), Item(i), Key("user")],
                    None,
                    format!("agent `{}` runs as root (`user: {user}`)", a.name),
                    "remove it (a root daemon then uses 1000:1000) or give an unprivileged uid:gid",
                );
            }
        }
        if let Some(h) = &a.hardening {
            for (field, on) in [
                ("cap_drop_all", h.cap_drop_all),
                ("no_new_privileges", h.no_new_privileges),
                ("init", h.init),
            ] {
                if !on {
                    push(
                        &docs.agents,
                        &[Key("agents"), Item(i), Key("hardening"), Key(field)],
                        None,
                        format!(
                            "agent `{}` turns hardening off (`hardening.{field}: false`)",
                            a.name
                        ),
                        "remove the line (hardening is on by default)",
                    );
                }
            }
        }
    }
    for (i, id) in identities.iter().enumerate() {
        for (agent_type, path) in &id.volumes {
            if let Some(why) = dangerous_volume(path) {
                push(
                    &docs.identities,
                    &[
                        Key("identities"),
                        Item(i),
                        Key("volumes"),
                        Key(agent_type.as_str()),
                    ],
                    None,
                    format!(
                        "identity `{}` volume `{agent_type}` is {} ({why})",
                        id.name,
                        path.display()
                    ),
                    "point it at the CLI's login directory, e.g. `~/.claude`",
                );
            }
        }
        for (container_var, host_var) in &id.api_keys {
            let github = |v: &str| matches!(v, "GITHUB_TOKEN" | "GH_TOKEN");
            if github(container_var) || github(host_var) {
                push(
                    &docs.identities,
                    &[Key("identities"), Item(i), Key("api_keys")],
                    Some(if github(container_var) { container_var } else { host_var }),
                    format!(
                        "identity `{}` hands the GitHub token to the agent (`api_keys: {container_var}: {host_var}`): the agent could push past verification",
                        id.name
                    ),
                    "remove the entry: Polyphony pushes with the token itself and agents never need it",
                );
            }
        }
    }
    out
}

/// Whether `user: uid[:gid]` is uid 0 however it is spelled (`0`, `00`, `000:0`).
fn runs_as_root(user: &str) -> bool {
    super::resolve::parse_user(user.trim()).is_ok_and(|(uid, _)| uid == 0)
}

/// Why mounting `path` as a credential volume is dangerous, if it is: judged on the path
/// with `.`, `..` and repeated `/` resolved by name (pure).
fn dangerous_volume(path: &Path) -> Option<&'static str> {
    dangerous_lexical(&lexical(path))
}

/// The same judgement on what `path` resolves to on disk: a symlink into a system
/// directory is that directory. Reads the disk; `None` when it does not exist.
fn dangerous_on_disk(path: &Path) -> Option<&'static str> {
    std::fs::canonicalize(path)
        .ok()
        .and_then(|real| dangerous_lexical(&real))
}

/// The credential volumes that are dangerous only once their symlinks are resolved, as
/// the errors they are without consent. Run by `Config::load` (it reads the disk).
pub(super) fn symlinked_volumes(identities: &[Identity], doc: &super::Doc<'_>) -> Vec<ConfigError> {
    let mut out = Vec::new();
    for (i, id) in identities.iter().enumerate() {
        for (agent_type, path) in &id.volumes {
            if dangerous_volume(path).is_some() {
                continue;
            }
            if let Some(why) = dangerous_on_disk(path) {
                let real = std::fs::canonicalize(path).unwrap_or_default();
                out.push(doc.error(
                    ConfigErrorKind::Unsafe,
                    &[
                        Key("identities"),
                        Item(i),
                        Key("volumes"),
                        Key(agent_type.as_str()),
                    ],
                    None,
                    format!(
                        "identity `{}` volume `{agent_type}` is {}, a symlink to {} ({why})",
                        id.name,
                        path.display(),
                        real.display()
                    ),
                    format!("point it at the CLI's login directory, e.g. `~/.claude`, {CONSENT}"),
                ));
            }
        }
    }
    out
}

/// `path` with `.` and `..` resolved by name and repeated separators dropped.
fn lexical(path: &Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn dangerous_lexical(path: &Path) -> Option<&'static str> {
    let text = path.to_string_lossy();
    let trimmed = text.trim_end_matches('/');
    if trimmed.is_empty() {
        return Some("the host's whole filesystem");
    }
    if path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with("docker.sock"))
    {
        return Some("the Docker socket: root on the host");
    }
    if SYSTEM_DIRS
        .iter()
        .any(|d| trimmed == *d || trimmed.starts_with(&format!("{d}/")))
    {
        return Some("a system directory");
    }
    if WHOLE_TREES.contains(&trimmed) {
        return Some("a whole tree of other users' or system files");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dangerous_volumes_are_named() {
        for p in [
            "/",
            "/var/run/docker.sock",
            "/run/docker.sock",
            "/home/me/docker.sock",
            "/etc",
            "/etc/shadow",
            "/proc/1/root",
            "/usr/",
            "/home",
            "/root",
            "/var/lib/docker/volumes",
            "/home/me/../../etc",
            "//etc",
            "/home/me/./../..",
        ] {
            assert!(dangerous_volume(Path::new(p)).is_some(), "{p}");
        }
        for p in ["/root/.claude", "/home/me/.codex", "/srv/creds/.gemini"] {
            assert_eq!(dangerous_volume(Path::new(p)), None, "{p}");
        }
    }

    #[test]
    fn a_symlink_into_a_system_directory_is_that_directory() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("creds");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        assert_eq!(dangerous_volume(&link), None);
        assert_eq!(dangerous_on_disk(&link), Some("a system directory"));
        assert_eq!(
            dangerous_on_disk(&link.join("ssl")),
            Some("a system directory")
        );
        assert_eq!(dangerous_on_disk(dir.path()), None);
    }

    #[test]
    fn root_however_spelled() {
        for u in ["0", "00", "00:00", "000:0", "0:1000"] {
            assert!(runs_as_root(u), "{u}");
        }
        for u in ["1000", "1000:0", "10", "4294967296", "x"] {
            assert!(!runs_as_root(u), "{u}");
        }
    }
}
