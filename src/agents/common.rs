//! Helpers shared by the adapters: safe JSON parsing of one line, `unknown` events, short
//! one-line summaries and a tool-input digest.
//!
//! Architecture Invariant: pure and panic-free on any input (huge, empty, non-UTF-8-derived or
//! hostile lines); slicing is always on char boundaries.

use serde_json::{Map, Value};

use super::{Classified, Invocation};
use crate::domain::EventKind;

/// Lines longer than this are never parsed (the runtime cuts lines here too, spec §9).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// How much of an unparseable line is kept in `data.raw`.
const MAX_RAW_BYTES: usize = 16 * 1024;

/// Longest summary, in characters.
pub const SUMMARY_CHARS: usize = 160;

/// Prompts at least this long go through stdin instead of argv (ARG_MAX is shared with env).
pub const STDIN_PROMPT_BYTES: usize = 100 * 1024;

/// Whether the prompt must go through stdin: one that starts with `-` would be read as an
/// option, a huge one would hit ARG_MAX.
pub fn use_stdin(prompt: &str) -> bool {
    prompt.len() >= STDIN_PROMPT_BYTES || prompt.starts_with('-')
}

/// `argv` with the prompt handed over: on stdin when [`use_stdin`] says so (`stdin_arg`, such
/// as Codex's `-`, then ends argv), otherwise as the last argument, after `flag` (such as
/// `-p`) when the CLI takes one.
pub fn with_prompt(
    mut argv: Vec<String>,
    prompt: &str,
    flag: Option<&str>,
    stdin_arg: Option<&str>,
) -> Invocation {
    if use_stdin(prompt) {
        argv.extend(stdin_arg.map(str::to_string));
        Invocation {
            argv,
            stdin: Some(prompt.to_string()),
        }
    } else {
        argv.extend(flag.map(str::to_string));
        argv.push(prompt.to_string());
        Invocation { argv, stdin: None }
    }
}

/// Classifies one stdout line of a CLI whose every event is a JSON object: the object
/// through `classify_object`, anything else `unknown`.
pub fn classify_line(
    line: &str,
    classify_object: fn(Map<String, Value>) -> Classified,
) -> Classified {
    match parse_object(line) {
        Ok(map) => classify_object(map),
        Err(note) => unknown(line, note),
    }
}

/// Parses `line` as one JSON object, or says why it is not one.
pub fn parse_object(line: &str) -> Result<Map<String, Value>, &'static str> {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return Err("empty line");
    }
    if trimmed.len() > MAX_LINE_BYTES {
        return Err("line over 1 MiB, not parsed");
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("JSON line is not an object"),
        Err(_) => Err("not JSON"),
    }
}

/// An `unknown` event carrying (a bounded prefix of) the raw line and why it is unknown.
pub fn unknown(line: &str, note: &str) -> Classified {
    let raw = prefix(line, MAX_RAW_BYTES);
    let mut data = serde_json::json!({ "raw": raw, "note": note });
    if raw.len() < line.len() {
        data["truncated"] = Value::Bool(true);
        data["bytes"] = Value::from(line.len());
    }
    Classified {
        kind: EventKind::Unknown,
        summary: format!("unknown: {note}"),
        data,
    }
}

/// An object line whose `type` the adapter does not know.
pub fn unknown_object(map: Map<String, Value>, note: String) -> Classified {
    Classified {
        kind: EventKind::Unknown,
        summary: one_line(&format!("unknown: {note}"), SUMMARY_CHARS),
        data: Value::Object(map),
    }
}

pub fn event(kind: EventKind, summary: String, map: Map<String, Value>) -> Classified {
    Classified {
        kind,
        summary: one_line(&summary, SUMMARY_CHARS),
        data: Value::Object(map),
    }
}

/// The longest prefix of `s` of at most `max_bytes` bytes that ends on a char boundary.
pub fn prefix(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Collapses whitespace (newlines included) and cuts to `max_chars`, adding `…` when cut.
pub fn one_line(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars * 4));
    let mut count = 0;
    let mut pending_space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            pending_space = !out.is_empty();
            continue;
        }
        if pending_space {
            if count + 1 >= max_chars {
                out.push('…');
                return out;
            }
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        if count + 1 >= max_chars {
            out.push('…');
            return out;
        }
        out.push(c);
        count += 1;
    }
    out
}

pub fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

pub fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// A short digest of a tool's input: the field that says what the call does.
pub fn tool_input_summary(input: &Value) -> String {
    const KEYS: [&str; 14] = [
        "command",
        "cmd",
        "file_path",
        "path",
        "absolute_path",
        "filePath",
        "pattern",
        "query",
        "url",
        "description",
        "prompt",
        "dir_path",
        "directory",
        "content",
    ];
    match input {
        Value::Object(map) => {
            for key in KEYS {
                if let Some(v) = map.get(key) {
                    return value_text(v);
                }
            }
            map.values()
                .find(|v| v.is_string())
                .map(value_text)
                .unwrap_or_default()
        }
        Value::Null => String::new(),
        other => value_text(other),
    }
}

/// A value as display text: strings as themselves, arrays of strings joined by spaces.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Text of a message `content` that is either a string or an array of parts
/// (`{"type":"text","text":…}`); other parts are skipped.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                _ if str_of(p, "type") == Some("text") => str_of(p, "text"),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `"tool: input"`, or just the tool when the input says nothing.
pub fn tool_summary(name: &str, input: &Value) -> String {
    let digest = tool_input_summary(input);
    if digest.trim().is_empty() {
        name.to_string()
    } else {
        format!("{name}: {digest}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_collapses_and_cuts() {
        assert_eq!(one_line("a\n  b\tc", 20), "a b c");
        assert_eq!(one_line("  lead", 20), "lead");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(one_line("ééééé", 3), "éé…");
        assert_eq!(one_line("", 3), "");
    }

    #[test]
    fn prefix_respects_char_boundaries() {
        assert_eq!(prefix("héllo", 2), "h");
        assert_eq!(prefix("héllo", 3), "hé");
        assert_eq!(prefix("abc", 10), "abc");
    }

    #[test]
    fn parse_object_rejects_non_objects() {
        assert!(parse_object("").is_err());
        assert!(parse_object("   ").is_err());
        assert!(parse_object("[1,2]").is_err());
        assert!(parse_object("{\"a\":").is_err());
        assert!(parse_object("{\"a\":1}").is_ok());
    }

    #[test]
    fn tool_input_prefers_the_meaningful_field() {
        let check = |input: Value, want: &str| assert_eq!(tool_input_summary(&input), want);
        check(
            serde_json::json!({"command":"cargo test","timeout":5}),
            "cargo test",
        );
        check(
            serde_json::json!({"file_path":"/w/a.rs","content":"x"}),
            "/w/a.rs",
        );
        check(
            serde_json::json!({"command":["bash","-lc","ls"]}),
            "bash -lc ls",
        );
        check(serde_json::json!({"other":"v"}), "v");
        check(serde_json::json!(null), "");
    }
}
