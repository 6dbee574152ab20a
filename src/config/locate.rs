//! Finds where a key or value sits in block-style YAML text, so errors found after
//! deserialization (unknown agent, duplicate name, bad duration) still carry a line and
//! column.
//!
//! serde's YAML values carry no positions, so this scans the text: each line becomes
//! entries (a `- ` sequence dash, then the content after it), and a path of keys and
//! sequence indexes is followed by indentation. Flow collections (`[a, b]`) are searched
//! as text. When a step cannot be found the deepest position found so far is returned:
//! a slightly coarse line beats no line.

/// One step of a path into the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seg<'a> {
    Key(&'a str),
    Item(usize),
}

#[derive(Debug, Clone)]
struct Entry<'t> {
    /// 0-based line.
    line: usize,
    /// 0-based column of the first character.
    col: usize,
    dash: bool,
    text: &'t str,
}

/// Line-and-column lookup over one YAML document.
pub struct Locator<'t> {
    entries: Vec<Entry<'t>>,
    lines: Vec<&'t str>,
}

impl<'t> Locator<'t> {
    pub fn new(source: &'t str) -> Locator<'t> {
        let lines: Vec<&str> = source.lines().collect();
        let mut entries = Vec::new();
        for (line, raw) in lines.iter().enumerate() {
            let content = strip_comment(raw);
            let mut col = content.len() - content.trim_start().len();
            let mut rest = content.trim_start();
            if rest.is_empty() || rest.starts_with("---") || rest.starts_with("...") {
                continue;
            }
            while rest == "-" || rest.starts_with("- ") {
                entries.push(Entry {
                    line,
                    col,
                    dash: true,
                    text: "-",
                });
                let after = &rest[1..];
                let trimmed = after.trim_start();
                col += 1 + after.len() - trimmed.len();
                rest = trimmed;
            }
            if !rest.is_empty() {
                entries.push(Entry {
                    line,
                    col,
                    dash: false,
                    text: rest.trim_end(),
                });
            }
        }
        Locator { entries, lines }
    }

    /// 1-based (line, column) of the value at `path`, or of `needle` inside it when given
    /// and present. Falls back to the deepest step found, then to (1, 1).
    pub fn find(&self, path: &[Seg<'_>], needle: Option<&str>) -> (usize, usize) {
        let mut range = 0..self.entries.len();
        let mut best: Option<(usize, usize)> = None;
        for seg in path {
            match self.step(range.clone(), *seg) {
                Some((pos, next)) => {
                    best = Some(pos);
                    range = next;
                }
                None => break,
            }
        }
        let (line, col) = best.unwrap_or((0, 0));
        if let Some(needle) = needle.filter(|n| !n.is_empty()) {
            // Search the found line first (inline and flow values), then the block below it.
            let candidates =
                std::iter::once(line).chain(range.clone().map(|i| self.entries[i].line));
            for l in candidates {
                let text = strip_comment(self.lines.get(l).copied().unwrap_or(""));
                let start = if l == line { col.min(text.len()) } else { 0 };
                if let Some(found) = find_word(&text[start..], needle) {
                    return (l + 1, start + found + 1);
                }
            }
        }
        (line + 1, col + 1)
    }

    /// Follows one step inside `range`; returns the position of what it found and the
    /// entries that make up its value.
    fn step(
        &self,
        range: std::ops::Range<usize>,
        seg: Seg<'_>,
    ) -> Option<((usize, usize), std::ops::Range<usize>)> {
        let first = self
            .entries
            .get(range.start)
            .filter(|_| !range.is_empty())?;
        let level = first.col;
        match seg {
            Seg::Key(key) => {
                for i in range.clone() {
                    let e = &self.entries[i];
                    if e.col < level {
                        break;
                    }
                    if e.col != level || e.dash {
                        continue;
                    }
                    let Some(value_offset) = key_value_offset(e.text, key) else {
                        continue;
                    };
                    let end = self.block_end(i + 1, range.end, e.col, true);
                    let pos = if value_offset < e.text.len() {
                        (e.line, e.col + value_offset)
                    } else {
                        (e.line, e.col)
                    };
                    return Some((pos, i + 1..end));
                }
                None
            }
            Seg::Item(index) => {
                let mut seen = 0;
                for i in range.clone() {
                    let e = &self.entries[i];
                    if e.col < level {
                        break;
                    }
                    if e.col != level || !e.dash {
                        continue;
                    }
                    if seen == index {
                        let end = self.block_end(i + 1, range.end, e.col, false);
                        let content = self.entries.get(i + 1).filter(|n| n.line == e.line);
                        let pos = content.map_or((e.line, e.col), |n| (n.line, n.col));
                        return Some((pos, i + 1..end));
                    }
                    seen += 1;
                }
                None
            }
        }
    }

    /// First entry after `start` that leaves the block opened at column `col`. A mapping
    /// value may be a sequence written at the key's own indentation (`rules:\n- name: x`).
    fn block_end(
        &self,
        start: usize,
        limit: usize,
        col: usize,
        allow_same_col_dash: bool,
    ) -> usize {
        for i in start..limit {
            let e = &self.entries[i];
            if e.col > col || (allow_same_col_dash && e.col == col && e.dash) {
                continue;
            }
            return i;
        }
        limit
    }
}

/// For `key: value` (or `"key": value`), the byte offset of the value (or the text length
/// when there is none).
fn key_value_offset(text: &str, key: &str) -> Option<usize> {
    let unquoted = text
        .strip_prefix(key)
        .or_else(|| {
            text.strip_prefix('"')
                .and_then(|t| t.strip_prefix(key)?.strip_prefix('"'))
        })
        .or_else(|| {
            text.strip_prefix('\'')
                .and_then(|t| t.strip_prefix(key)?.strip_prefix('\''))
        })?;
    let after_colon = unquoted.strip_prefix(':')?;
    if !(after_colon.is_empty() || after_colon.starts_with(' ')) {
        return None;
    }
    let value = after_colon.trim_start();
    Some(text.len() - value.len())
}

/// Drops a trailing `# comment` that is not inside quotes.
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' && (prev == ' ' || prev == '\t' || i == 0) => return &line[..i],
            None => {}
        }
        prev = c;
    }
    line
}

/// Byte offset of `needle` as a whole word (not inside a longer identifier).
fn find_word(haystack: &str, needle: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let mut from = 0;
    while let Some(found) = haystack[from..].find(needle) {
        let at = from + found;
        let before = haystack[..at].chars().next_back();
        let after = haystack[at + needle.len()..].chars().next();
        if !before.is_some_and(is_ident) && !after.is_some_and(is_ident) {
            return Some(at);
        }
        from = at + needle.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use Seg::*;

    const DOC: &str = "\
# routing
rules:
  - name: small-bugfix   # first
    match:
      task_type: bugfix
      scope: small
    agent: codex
    fallback: [claude, kimi]
  - name: docs
    agent: kimi
    fallback:
      - codex
      - claud
default:
  agent: claude
";

    fn check(path: &[Seg<'_>], needle: Option<&str>, expected: (usize, usize)) {
        assert_eq!(
            Locator::new(DOC).find(path, needle),
            expected,
            "{path:?} {needle:?}"
        );
    }

    #[test]
    fn finds_keys_items_and_values() {
        check(&[Key("rules")], None, (2, 1));
        check(&[Key("rules"), Item(0)], None, (3, 5));
        check(&[Key("rules"), Item(0), Key("name")], None, (3, 11));
        check(
            &[Key("rules"), Item(0), Key("match"), Key("scope")],
            None,
            (6, 14),
        );
        check(&[Key("rules"), Item(0), Key("agent")], None, (7, 12));
        check(
            &[Key("rules"), Item(0), Key("fallback")],
            Some("kimi"),
            (8, 24),
        );
        check(&[Key("rules"), Item(1), Key("agent")], None, (10, 12));
        check(
            &[Key("rules"), Item(1), Key("fallback")],
            Some("claud"),
            (13, 9),
        );
        check(&[Key("default"), Key("agent")], None, (15, 10));
    }

    #[test]
    fn falls_back_to_the_deepest_step_found() {
        check(&[Key("rules"), Item(1), Key("identity")], None, (9, 5));
        check(&[Key("rules"), Item(7)], None, (2, 1));
        check(&[Key("nothing")], None, (1, 1));
    }

    #[test]
    fn sequences_at_the_key_indentation() {
        let doc = "identities:\n- name: a\n  volumes: {}\n- name: b\n";
        let loc = Locator::new(doc);
        assert_eq!(
            loc.find(&[Key("identities"), Item(1), Key("name")], None),
            (4, 9)
        );
        assert_eq!(
            loc.find(&[Key("identities"), Item(0), Key("volumes")], None),
            (3, 12)
        );
    }

    #[test]
    fn needles_match_whole_words_only() {
        assert_eq!(find_word("[claude, claud]", "claud"), Some(9));
        assert_eq!(find_word("claude", "claud"), None);
        assert_eq!(strip_comment("a: \"x # y\" # z"), "a: \"x # y\" ");
    }
}
