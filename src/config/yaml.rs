//! Turns serde YAML errors into [`ConfigError`]s with a kind, a position and a fix.

use std::path::Path;

use super::error::{ConfigError, ConfigErrorKind};

/// Parses one file. A file holding only comments and blank lines reads as `{}`.
pub fn parse<T: serde::de::DeserializeOwned>(file: &Path, text: &str) -> Result<T, ConfigError> {
    let has_content = text.lines().any(|l| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#') && t != "---"
    });
    let source = if has_content { text } else { "{}" };
    serde_yaml::from_str(source)
        .map_err(|e| duplicate_key(file, source, &e).unwrap_or_else(|| from_serde(file, &e)))
}

/// A key given twice in one mapping. serde reports `duplicate field `x`` at the start of
/// the mapping (line 7 for a top-level key given again at line 147) and the syntax hint
/// about indentation followed (issue 29): this names the key and both lines and points
/// at the second one, found by scanning the mapping from where serde says it starts.
fn duplicate_key(file: &Path, text: &str, err: &serde_yaml::Error) -> Option<ConfigError> {
    let full = strip_position(&err.to_string());
    // `container: duplicate field `memory``: the path (if any) before the detail.
    let at = full
        .find("duplicate field `")
        .or_else(|| full.find("duplicate entry with key "))?;
    let (path, detail) = (full[..at].trim_end().trim_end_matches(':'), &full[at..]);
    let path = (!path.is_empty()).then_some(path);
    let key = if let Some(rest) = detail.strip_prefix("duplicate field `") {
        rest.split('`').next()?.to_string()
    } else {
        let rest = detail.strip_prefix("duplicate entry with key ")?;
        rest.trim().trim_matches('"').to_string()
    };
    let start = err.location().map_or(1, |l| l.line().max(1));
    let lines: Vec<&str> = text.lines().collect();
    let content = |l: &str| {
        let t = l.trim_start();
        !t.is_empty() && !t.starts_with('#')
    };
    // A key's column: after the indentation and a list item's `- `.
    let key_indent = |l: &str| l.len() - l.trim_start().trim_start_matches("- ").len();
    // The mapping's keys are indented as its first key, at or after where serde points.
    let first = (start - 1..lines.len()).find(|&i| content(lines[i]))?;
    let indent = key_indent(lines[first]);
    let names = [
        format!("{key}:"),
        format!("\"{key}\":"),
        format!("'{key}':"),
    ];
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(first) {
        if !content(line) {
            continue;
        }
        // The mapping ends at a line indented less than its keys (the next list item too).
        if i > first && line.len() - line.trim_start().len() < indent {
            break;
        }
        let t = line.trim_start().trim_start_matches("- ");
        if key_indent(line) == indent && names.iter().any(|n| t.starts_with(n.as_str())) {
            found.push(i + 1);
        }
    }
    let [first, again, ..] = found[..] else {
        return None;
    };
    Some(ConfigError::new(
        ConfigErrorKind::Duplicate,
        file,
        (again, indent + 1),
        format!(
            "`{key}` is given twice{} (lines {first} and {again})",
            in_section(path)
        ),
        format!("keep one of the two `{key}:` lines and delete the other"),
    ))
}

/// Maps a serde YAML error onto a [`ConfigError`].
pub fn from_serde(file: &Path, err: &serde_yaml::Error) -> ConfigError {
    let pos = err
        .location()
        .map_or((1, 1), |l| (l.line().max(1), l.column().max(1)));
    let full = err.to_string();
    let stripped = strip_position(&full);
    let message = stripped.as_str();
    // serde_yaml prefixes semantic errors with the path: `rules[0].match: unknown field …`.
    let (path, detail) = split_path(message);
    let field = path.map(last_field);

    if let Some(rest) = detail.strip_prefix("unknown field `") {
        let name = rest.split('`').next().unwrap_or("");
        let expected = expected_names(rest);
        let fix = suggest(name, &expected);
        return ConfigError::new(
            ConfigErrorKind::UnknownField,
            file,
            pos,
            format!("unknown field `{name}`{}", in_section(path)),
            fix,
        );
    }
    if let Some(rest) = detail.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or("");
        return ConfigError::new(
            ConfigErrorKind::MissingField,
            file,
            pos,
            format!("missing field `{name}`{}", in_section(path)),
            format!("add `{name}: …` to this mapping"),
        );
    }
    if let Some(rest) = detail.strip_prefix("unknown variant `") {
        let name = rest.split('`').next().unwrap_or("");
        let what = field.map_or("this value".to_string(), |f| format!("`{f}`"));
        let expected = rest.split_once(", expected ").map_or("", |(_, e)| e);
        return ConfigError::new(
            ConfigErrorKind::InvalidValue,
            file,
            pos,
            format!("{what} is `{name}`, which is not one of its values"),
            format!("set {what} to {expected}"),
        );
    }
    if detail.starts_with("invalid type:") || detail.starts_with("invalid value:") {
        let expected = detail
            .rsplit_once(", expected ")
            .map_or("another type", |(_, e)| e);
        let what = field.map_or("this value".to_string(), |f| format!("`{f}`"));
        // Issue 12: `-1` for a count is not "not a whole number", and NaN is not a number.
        let unsigned = matches!(expected.trim(), "u8" | "u16" | "u32" | "u64" | "usize");
        if let Some(n) = detail
            .strip_prefix("invalid type: integer `-")
            .or_else(|| detail.strip_prefix("invalid value: integer `-"))
            .filter(|_| unsigned)
        {
            let n = n.split('`').next().unwrap_or(n);
            return ConfigError::new(
                ConfigErrorKind::InvalidValue,
                file,
                pos,
                format!("{what} is -{n}; it must be positive"),
                format!("make {what} a positive whole number"),
            );
        }
        let lowered = detail.to_ascii_lowercase();
        if lowered.contains("`nan`") || lowered.contains("`inf`") || lowered.contains("`-inf`") {
            return ConfigError::new(
                ConfigErrorKind::InvalidValue,
                file,
                pos,
                format!("{what} is not a number"),
                format!("make {what} {}", humanize_type(expected)),
            );
        }
        return ConfigError::new(
            ConfigErrorKind::WrongType,
            file,
            pos,
            format!(
                "{what}: {}",
                detail.split(", expected").next().unwrap_or(detail)
            ),
            format!("make {what} {}", humanize_type(expected)),
        );
    }
    if detail.starts_with("data did not match any variant of untagged enum OneOrMany") {
        let what = field.map_or("this value".to_string(), |f| format!("`{f}`"));
        return ConfigError::new(
            ConfigErrorKind::WrongType,
            file,
            pos,
            format!("{what} must be a string or a list of strings"),
            format!("write {what} as `value` or `[a, b]`"),
        );
    }
    ConfigError::new(
        ConfigErrorKind::Syntax,
        file,
        pos,
        format!("invalid YAML: {message}"),
        "check the indentation, the `key: value` colons and the quotes on this line",
    )
}

/// Drops serde_yaml's first ` at line N column M`: that position is in the error's own
/// fields. Later ones (libyaml's "while scanning … at line 1 column 16") stay as context.
fn strip_position(message: &str) -> String {
    let Some(start) = message.find(" at line ") else {
        return message.to_string();
    };
    let rest = &message[start + " at line ".len()..];
    let skip_number = |s: &str| {
        s.trim_start_matches(|c: char| c.is_ascii_digit())
            .to_string()
    };
    let after = skip_number(rest);
    let after = match after.strip_prefix(" column ") {
        Some(col) => skip_number(col),
        None => after,
    };
    format!("{}{}", &message[..start], after)
}

fn split_path(message: &str) -> (Option<&str>, &str) {
    for marker in [
        ": unknown field",
        ": unknown variant",
        ": missing field",
        ": invalid type",
        ": invalid value",
        ": data did not match",
    ] {
        if let Some(i) = message.find(marker) {
            let path = &message[..i];
            if !path.contains(' ') {
                return (Some(path), &message[i + 2..]);
            }
        }
    }
    (None, message)
}

fn last_field(path: &str) -> &str {
    let last = path.rsplit('.').next().unwrap_or(path);
    last.split('[').next().unwrap_or(last)
}

fn in_section(path: Option<&str>) -> String {
    path.map_or(String::new(), |p| format!(" in `{p}`"))
}

/// The names listed after `expected one of` / `expected`.
fn expected_names(rest: &str) -> Vec<String> {
    let Some((_, list)) = rest.split_once("expected") else {
        return Vec::new();
    };
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Names the closest valid field, or lists them all when none is close.
pub fn suggest(name: &str, valid: &[String]) -> String {
    let best = valid
        .iter()
        .map(|v| (strsim::jaro_winkler(name, v), v))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((score, v)) if score >= 0.75 => format!("rename `{name}` to `{v}`"),
        _ if valid.is_empty() => format!("remove `{name}`: this section takes no fields"),
        _ => format!("remove `{name}`; valid fields are {}", valid.join(", ")),
    }
}

fn humanize_type(expected: &str) -> String {
    let e = expected.trim();
    match e {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number (no quotes)".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number (no quotes)".into(),
        "f32" | "f64" => "a number (no quotes)".into(),
        "a boolean" => "true or false".into(),
        "a string" => "a string".into(),
        "a sequence" => "a list (`- item` lines or `[a, b]`)".into(),
        _ if e.starts_with("struct") || e.starts_with("a map") => {
            "a mapping (`key: value` lines)".into()
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::{GlobalConfig, RoutingFile};

    fn check<T: serde::de::DeserializeOwned + std::fmt::Debug>(
        text: &str,
        kind: ConfigErrorKind,
        pos: (usize, usize),
        message_part: &str,
        fix_part: &str,
    ) {
        let err = parse::<T>(Path::new("f.yaml"), text).unwrap_err();
        assert_eq!(err.kind, kind, "{err}");
        assert_eq!((err.line, err.column), pos, "{err}");
        assert!(err.message.contains(message_part), "{err}");
        assert!(err.fix.contains(fix_part), "{err}");
    }

    #[test]
    fn serde_errors_become_config_errors() {
        check::<GlobalConfig>(
            "poll_interval: 30s\npoll_intervall: 5s\n",
            ConfigErrorKind::UnknownField,
            (2, 1),
            "unknown field `poll_intervall`",
            "rename `poll_intervall` to `poll_interval`",
        );
        check::<GlobalConfig>(
            "container:\n  imagee: x\n",
            ConfigErrorKind::UnknownField,
            (2, 3),
            "in `container`",
            "to `image`",
        );
        check::<GlobalConfig>(
            "zzzqqq: 1\n",
            ConfigErrorKind::UnknownField,
            (1, 1),
            "zzzqqq",
            "valid fields are workspace_root",
        );
        check::<GlobalConfig>(
            "max_concurrent_agents: eight\n",
            ConfigErrorKind::WrongType,
            (1, 24),
            "`max_concurrent_agents`",
            "a whole number",
        );
        check::<RoutingFile>(
            "rules: []\n",
            ConfigErrorKind::MissingField,
            (1, 1),
            "missing field `default`",
            "add `default: …`",
        );
        check::<GlobalConfig>(
            "poll_interval: \"30s\nmax_attempts: 3\n",
            ConfigErrorKind::Syntax,
            (3, 1),
            "quoted scalar at line 1 column 16",
            "indentation",
        );
    }

    /// Issue 29: a key given twice is reported at its second line, named, with both lines
    /// (it was reported at the mapping's first line with an indentation hint).
    #[test]
    fn duplicate_keys_name_the_key_and_its_second_line() {
        let mut text = String::from("# comment\npoll_interval: 30s\nmax_attempts: 3\n");
        for i in 0..140 {
            text.push_str(&format!("# filler {i}\n"));
        }
        text.push_str("container:\n  memory: 1g\nmax_attempts: 4\n");
        let err = parse::<GlobalConfig>(Path::new("f.yaml"), &text).unwrap_err();
        assert_eq!(err.kind, ConfigErrorKind::Duplicate, "{err}");
        assert_eq!((err.line, err.column), (146, 1), "{err}");
        assert!(
            err.message
                .contains("`max_attempts` is given twice (lines 3 and 146)"),
            "{err}"
        );
        assert!(!err.fix.contains("indentation"), "{err}");
        // Nested: the duplicate inside `container:`.
        let err = parse::<GlobalConfig>(
            Path::new("f.yaml"),
            "container:\n  memory: 1g\n  cpus: 1\n  memory: 2g\nmax_attempts: 3\n",
        )
        .unwrap_err();
        assert_eq!(
            (err.kind, err.line, err.column),
            (ConfigErrorKind::Duplicate, 4, 3),
            "{err}"
        );
        assert!(err.message.contains("`memory` is given twice"), "{err}");
        assert!(err.message.contains("(lines 2 and 4)"), "{err}");
    }

    /// Issue 12: `-1` read "not a whole number" and NaN "invalid type: floating point".
    #[test]
    fn negative_counts_and_nan_are_named() {
        check::<GlobalConfig>(
            "max_attempts: -1\n",
            ConfigErrorKind::InvalidValue,
            (1, 15),
            "`max_attempts` is -1; it must be positive",
            "positive whole number",
        );
        check::<GlobalConfig>(
            "max_attempts: .nan\n",
            ConfigErrorKind::InvalidValue,
            (1, 15),
            "`max_attempts` is not a number",
            "a whole number",
        );
    }

    #[test]
    fn comment_only_files_are_empty_mappings() {
        let g: GlobalConfig = parse(Path::new("c.yaml"), "# nothing\n\n").unwrap();
        assert_eq!(g, GlobalConfig::default());
    }
}
