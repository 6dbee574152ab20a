//! Values that would only fail later, checked when the config loads (issue 12: each used to
//! cost up to three agent runs before BLOCKED): `verify.protected_paths` globs, the commit
//! author, `git.branch_prefix` under git's ref-name rules, image references, and roots
//! that cleanup must never treat as its own (`/`, `$HOME`, the Polyphony home, its
//! `transcripts/`).
//!
//! The `check_*` value functions are pure. [`check_roots_on_disk`] reads the disk and runs
//! from `Config::load` only.

use std::path::{Path, PathBuf};

use globset::Glob;

use super::locate::Seg;
use super::model::{AgentsFile, GlobalConfig};
use super::{ConfigError, ConfigErrorKind, Doc};

/// Why `reference` is not a Docker image reference (`[host[:port]/]path[:tag][@digest]`,
/// lowercase path components), or `Ok`.
pub fn check_image_ref(reference: &str) -> Result<(), String> {
    if reference.is_empty() {
        return Err("it is empty".into());
    }
    if reference.len() > 255 {
        return Err("it is longer than 255 characters".into());
    }
    if reference
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err("it contains whitespace".into());
    }
    let (rest, digest) = match reference.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (reference, None),
    };
    if let Some(d) = digest {
        let ok = d.split_once(':').is_some_and(|(alg, hex)| {
            !alg.is_empty()
                && alg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+._-".contains(c))
                && hex.len() >= 32
                && hex.chars().all(|c| c.is_ascii_hexdigit())
        });
        if !ok {
            return Err(format!(
                "`@{d}` is not a digest like sha256:<64 hex digits>"
            ));
        }
    }
    // A tag follows the last `:` after the last `/` (a `:` before it is a registry port).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let mut chars = tag.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok
            || tag.len() > 128
            || !chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        {
            return Err(format!(
                "tag `{tag}` may hold only letters, digits, `_`, `.` and `-` (at most 128)"
            ));
        }
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    // The first part is a registry host when it has a `.` or `:` or is `localhost`.
    if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost") {
        let host = parts.remove(0);
        let (h, port) = match host.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host, None),
        };
        let host_ok = !h.is_empty()
            && h.split('.').all(|label| {
                !label.is_empty()
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !host_ok || port.is_some_and(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()))
        {
            return Err(format!(
                "registry `{host}` is not a host name with an optional port"
            ));
        }
    }
    for part in &parts {
        if !valid_path_component(part) {
            return Err(format!(
                "`{part}` is not a valid name component: lowercase letters and digits, separated by one `.`, `_`, `__` or dashes"
            ));
        }
    }
    Ok(())
}

fn valid_path_component(part: &str) -> bool {
    let b = part.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator run: `.`, `_`, `__` or any number of `-`.
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &part[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// Why `prefix` + a task key cannot be a branch name under `git check-ref-format`, or `Ok`.
pub fn check_branch_prefix(prefix: &str) -> Result<(), String> {
    // Branches are `{prefix}{key}-a{n}`: check the prefix with a plain name after it.
    let name = format!("{prefix}x");
    if prefix.starts_with('-') {
        return Err("a branch name cannot start with `-`".into());
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(*c))
    {
        return Err(format!(
            "{} is not allowed in a branch name",
            describe_char(c)
        ));
    }
    if name.contains("..") {
        return Err("`..` is not allowed in a branch name".into());
    }
    if name.contains("@{") {
        return Err("`@{` is not allowed in a branch name".into());
    }
    if name.starts_with('/') || name.contains("//") {
        return Err("a branch name cannot start with `/` or hold an empty component `//`".into());
    }
    for component in name.split('/') {
        if component.starts_with('.') {
            return Err(format!("component `{component}` starts with `.`"));
        }
        if component.ends_with(".lock") {
            return Err(format!("component `{component}` ends with `.lock`"));
        }
    }
    Ok(())
}

fn describe_char(c: char) -> String {
    if c == ' ' {
        "a space".into()
    } else if c.is_control() || c.is_whitespace() {
        format!("the control character U+{:04X}", c as u32)
    } else {
        format!("`{c}`")
    }
}

/// The pure checks over `config.yaml` and `agents.yaml` values.
pub(super) fn check_values(
    g: &GlobalConfig,
    agents: &AgentsFile,
    config_doc: &Doc<'_>,
    agents_doc: &Doc<'_>,
) -> Result<(), ConfigError> {
    use Seg::{Item, Key};
    let invalid = |doc: &Doc<'_>, path: &[Seg<'_>], message: String, fix: &str| {
        doc.error(ConfigErrorKind::InvalidValue, path, None, message, fix)
    };
    for (field, value) in [
        ("author_name", &g.git.author_name),
        ("author_email", &g.git.author_email),
    ] {
        if value.trim().is_empty() || value.contains(['\n', '\r', '<', '>']) {
            let problem = if value.trim().is_empty() {
                "is empty"
            } else {
                "holds a newline, `<` or `>`"
            };
            return Err(invalid(
                config_doc,
                &[Key("git"), Key(field)],
                format!("`git.{field}` {problem}; git cannot commit with it"),
                "set it to one line, e.g. `author_name: Polyphony` / `author_email: polyphony@localhost`, or remove the line for the default",
            ));
        }
    }
    if let Err(why) = check_branch_prefix(&g.git.branch_prefix) {
        return Err(invalid(
            config_doc,
            &[Key("git"), Key("branch_prefix")],
            format!("`git.branch_prefix` `{}` is not valid in a branch name: {why}", g.git.branch_prefix),
            "use letters, digits, `-`, `_` and `/`, e.g. `polyphony/` (the rules of git check-ref-format)",
        ));
    }
    check_globs(
        config_doc,
        &[Key("verify"), Key("protected_paths")],
        "verify.protected_paths",
        &g.verify.protected_paths,
    )?;
    let image_fix = "write a Docker image reference such as `polyphony-worker:latest` or `ghcr.io/acme/worker:1.2` (lowercase name, optional tag)";
    let mut images: Vec<(Vec<Seg<'_>>, String, &str)> = vec![(
        vec![Key("container"), Key("image")],
        "container.image".into(),
        g.container.image.as_str(),
    )];
    if let Some(i) = &g.verify.image {
        images.push((vec![Key("verify"), Key("image")], "verify.image".into(), i));
    }
    for (n, r) in g.repos.iter().enumerate() {
        if let Some(i) = &r.image {
            images.push((
                vec![Key("repos"), Item(n), Key("image")],
                format!("repos[{n}].image"),
                i,
            ));
        }
        if let Some(v) = &r.verify {
            if let Some(i) = &v.image {
                images.push((
                    vec![Key("repos"), Item(n), Key("verify"), Key("image")],
                    format!("repos[{n}].verify.image"),
                    i,
                ));
            }
            if let Some(globs) = &v.protected_paths {
                check_globs(
                    config_doc,
                    &[Key("repos"), Item(n), Key("verify"), Key("protected_paths")],
                    &format!("repos[{n}].verify.protected_paths"),
                    globs,
                )?;
            }
        }
    }
    for (path, field, value) in &images {
        if let Err(why) = check_image_ref(value) {
            return Err(invalid(
                config_doc,
                path,
                format!("`{field}` `{value}` is not a valid image reference: {why}"),
                image_fix,
            ));
        }
    }
    for (n, a) in agents.agents.iter().enumerate() {
        if let Some(image) = &a.image {
            if let Err(why) = check_image_ref(image) {
                return Err(invalid(
                    agents_doc,
                    &[Key("agents"), Item(n), Key("image")],
                    format!(
                        "agent `{}` image `{image}` is not a valid image reference: {why}",
                        a.name
                    ),
                    image_fix,
                ));
            }
        }
    }
    Ok(())
}

fn check_globs(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    globs: &[String],
) -> Result<(), ConfigError> {
    for (i, pattern) in globs.iter().enumerate() {
        if let Err(e) = Glob::new(pattern) {
            let at: Vec<Seg<'_>> = path.iter().copied().chain([Seg::Item(i)]).collect();
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &at,
                None,
                format!(
                    "`{field}` entry `{pattern}` is not a valid glob: {}",
                    e.kind()
                ),
                "write a glob like `.github/**` or `*.lock` (close every `[` and `{`)",
            ));
        }
    }
    Ok(())
}

/// Refuses a `workspace_root` or `mirror_root` that cleanup could mistake for its own:
/// `/`, the user's home, the Polyphony home or its `transcripts/`. Pure: `user_home` comes
/// from the caller's environment lookup.
pub(super) fn check_root_identity(
    field: &str,
    root: &Path,
    polyphony_home: &Path,
    user_home: Option<&Path>,
    doc: &Doc<'_>,
) -> Result<(), ConfigError> {
    let forbidden: Vec<(PathBuf, &str)> = [
        Some((PathBuf::from("/"), "the filesystem root `/`")),
        user_home.map(|h| (h.to_path_buf(), "your home directory ($HOME)")),
        Some((polyphony_home.to_path_buf(), "the Polyphony home itself")),
        Some((
            polyphony_home.join("transcripts"),
            "the home's transcripts/ directory",
        )),
    ]
    .into_iter()
    .flatten()
    .collect();
    let norm = normalize(root);
    for (path, what) in forbidden {
        if norm == normalize(&path) {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Seg::Key(field)],
                None,
                format!(
                    "`{field}` is {} ({what}); cleanup removes directories below it",
                    root.display()
                ),
                format!(
                    "point `{field}` at a directory of its own, e.g. `$POLYPHONY_HOME/{}`",
                    default_dir(field)
                ),
            ));
        }
    }
    Ok(())
}

fn default_dir(field: &str) -> &'static str {
    if field == "mirror_root" {
        "mirrors"
    } else {
        "workspaces"
    }
}

/// `.` and `..` resolved lexically, trailing slashes dropped.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Refuses a root that exists, is not empty and carries no Polyphony marker, unless it lies
/// inside the Polyphony home (the defaults, and homes made before markers existed).
pub(super) fn check_roots_on_disk(
    roots: [(&str, &Path); 2],
    polyphony_home: &Path,
    doc: &Doc<'_>,
) -> Result<(), ConfigError> {
    for (field, root) in roots {
        let resolved = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        let home = polyphony_home
            .canonicalize()
            .unwrap_or_else(|_| polyphony_home.to_path_buf());
        for (path, what) in [
            (&home, "the Polyphony home itself"),
            (
                &home.join("transcripts"),
                "the home's transcripts/ directory",
            ),
        ] {
            if &resolved == path {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &[Seg::Key(field)],
                    None,
                    format!(
                        "`{field}` resolves to {} ({what}); cleanup removes directories below it",
                        resolved.display()
                    ),
                    format!(
                        "point `{field}` at a directory of its own, e.g. `$POLYPHONY_HOME/{}`",
                        default_dir(field)
                    ),
                ));
            }
        }
        if resolved.starts_with(&home) || crate::workspace::marker::is_marked_root(&resolved) {
            continue;
        }
        let non_empty = std::fs::read_dir(&resolved).is_ok_and(|mut e| e.next().is_some());
        if non_empty {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Seg::Key(field)],
                None,
                format!(
                    "`{field}` {} is a non-empty directory Polyphony did not create (no {} marker)",
                    resolved.display(),
                    crate::workspace::marker::ROOT_MARKER
                ),
                format!(
                    "point `{field}` at an empty or new directory; if Polyphony did make this one, run `touch {}`",
                    resolved.join(crate::workspace::marker::ROOT_MARKER).display()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references() {
        for ok in [
            "polyphony-worker:latest",
            "ubuntu",
            "ghcr.io/acme/worker:1.2",
            "localhost:5000/a/b",
            "a__b/c-d---e:v_1",
            "polyphony-test:0123abcd",
            "x@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(check_image_ref(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Ubuntu",
            "my image",
            "a::b",
            "a:",
            ":tag",
            "-a",
            "a/",
            "a@sha256:xyz",
            "a:-x",
            "a..b",
        ] {
            assert!(check_image_ref(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn branch_prefixes() {
        for ok in ["polyphony/", "", "agents/x-", "a.b/"] {
            assert_eq!(check_branch_prefix(ok), Ok(()), "{ok}");
        }
        for bad in [
            "-x/", "a b/", "a..b/", "a//", "/a", ".x/", "a.lock/", "x~", "a:b", "a@{b", "a*",
        ] {
            assert!(check_branch_prefix(bad).is_err(), "{bad}");
        }
    }
}
