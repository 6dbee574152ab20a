//! Secret scrubbing for every stored line, and secret detection for the pre-push diff scan
//! (spec §9, DESIGN "Secrets never reach logs", issue 11 "Scrubbing that holds").
//!
//! One [`Scrubber`] knows the secret set and both redacts ([`Scrubber::scrub_line`],
//! [`Scrubber::scrub_text`]) and detects ([`Scrubber::find_secret`]), so whatever spelling
//! is masked in logs is also refused in a diff. For each secret value (at least
//! [`MIN_SECRET_LEN`] bytes; shorter values would blank ordinary words) it matches:
//! - the value itself and its JSON-escaped spelling (stored lines are mostly JSON);
//! - for values of at least [`MIN_ENCODED_LEN`] bytes: base64 and base64url at each of the
//!   three byte alignments (so the value is found inside a longer encoded string, padded or
//!   not), lower- and upper-case hex, and URL-encoded forms (reserved bytes only, every
//!   non-alphanumeric byte, every byte; upper- and lower-case escapes).
//!
//! A secret split across lines (`fold`, `base64` wrapping at 76 columns, two `echo`s) is
//! caught by [`StreamScrub`], which holds back a line whose end could be the start of a
//! secret until the next line shows whether it is, and masks the pieces on both sides.
//! Chunk boundaries inside a line never matter: lines are reassembled before scrubbing
//! (`runtime::stream`). [`scrub_known_patterns`] catches token shapes we were never told
//! about (`ghp_…`, `github_pat_…`, `sk-ant-…`, `sk-…`, Google `AIza…`, Slack `xox?-…`).
//! [`credential_file_tokens`] picks the token values out of a CLI's credential file so they
//! join the set.
//!
//! Architecture Invariant: pure; secret values live only inside the matcher and are never
//! printed (`Debug` shows only the count, a [`SecretHit`] only the form and line).

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use regex::Regex;
use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;

/// What a secret becomes.
pub const MASK: &str = "***";

/// Shortest secret value that is scrubbed.
pub const MIN_SECRET_LEN: usize = 4;

/// Shortest secret value whose encoded forms are scrubbed too: the base64 core of a 4-byte
/// value is 4 characters, short enough to hit ordinary text.
pub const MIN_ENCODED_LEN: usize = 8;

/// A line is held back at most this many lines waiting for the rest of a split secret.
const MAX_HELD_LINES: usize = 64;
/// … and at most this many bytes.
const MAX_HELD_BYTES: usize = 4 * 1024 * 1024;

/// RFC 3986 unreserved characters stay; everything else is escaped (`encodeURIComponent`).
const URL_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The spelling a secret was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretForm {
    Plain,
    JsonEscaped,
    Base64,
    Base64Url,
    Hex,
    UrlEncoded,
}

impl fmt::Display for SecretForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SecretForm::Plain => "as plain text",
            SecretForm::JsonEscaped => "JSON-escaped",
            SecretForm::Base64 => "base64-encoded",
            SecretForm::Base64Url => "base64url-encoded",
            SecretForm::Hex => "hex-encoded",
            SecretForm::UrlEncoded => "URL-encoded",
        })
    }
}

/// Where [`Scrubber::find_secret`] found a secret; never the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretHit {
    pub form: SecretForm,
    /// 1-based line of the text the match starts on.
    pub line: usize,
    /// The match spans a line break (the secret was split across lines).
    pub split: bool,
}

impl fmt::Display for SecretHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a known secret {} on line {}", self.form, self.line)?;
        if self.split {
            f.write_str(" (split across lines)")?;
        }
        Ok(())
    }
}

/// Every spelling of `secret` the scrubber matches, with its form. Pure.
pub fn secret_forms(secret: &str) -> Vec<(String, SecretForm)> {
    let mut out = vec![(secret.to_string(), SecretForm::Plain)];
    // The spelling the secret has inside a JSON string ("a\"b" for a"b).
    if let Ok(quoted) = serde_json::to_string(secret) {
        out.push((
            quoted[1..quoted.len() - 1].to_string(),
            SecretForm::JsonEscaped,
        ));
    }
    if secret.len() >= MIN_ENCODED_LEN {
        let bytes = secret.as_bytes();
        for k in 0..3 {
            out.push((base64_core(bytes, k, false), SecretForm::Base64));
            out.push((base64_core(bytes, k, true), SecretForm::Base64Url));
        }
        let lower = hex::encode(bytes);
        out.push((lower.to_ascii_uppercase(), SecretForm::Hex));
        out.push((lower, SecretForm::Hex));
        let every_byte: String = bytes.iter().map(|b| format!("%{b:02X}")).collect();
        for encoded in [
            utf8_percent_encode(secret, URL_COMPONENT).to_string(),
            utf8_percent_encode(secret, NON_ALPHANUMERIC).to_string(),
            every_byte,
        ] {
            out.push((lowercase_escapes(&encoded), SecretForm::UrlEncoded));
            out.push((encoded, SecretForm::UrlEncoded));
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|(text, _)| !text.is_empty() && seen.insert(text.clone()));
    out
}

/// The base64 characters that depend only on `bytes` when they sit at offset `k` (mod 3)
/// of a longer encoded string: the first and last characters, which share bits with the
/// neighbours, are dropped.
fn base64_core(bytes: &[u8], k: usize, url: bool) -> String {
    let mut padded = vec![0u8; k];
    padded.extend_from_slice(bytes);
    let encoded = if url {
        URL_SAFE_NO_PAD.encode(&padded)
    } else {
        STANDARD_NO_PAD.encode(&padded)
    };
    let start = (8 * k).div_ceil(6);
    let end = (8 * (k + bytes.len())) / 6;
    encoded.get(start..end).unwrap_or_default().to_string()
}

/// `%2F` -> `%2f`: both spellings are valid URL encoding.
fn lowercase_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut escape = 0;
    for c in s.chars() {
        if c == '%' {
            escape = 2;
            out.push(c);
        } else if escape > 0 {
            escape -= 1;
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Replaces known secret values, in every spelling, in lines and texts.
pub struct Scrubber {
    // Invariant: `None` when there is nothing to scrub; leftmost-longest so a secret
    // containing another is masked whole. `patterns[i]` and `forms[i]` describe pattern i.
    matcher: Option<AhoCorasick>,
    patterns: Vec<String>,
    forms: Vec<SecretForm>,
    count: usize,
    /// Length of the longest pattern: how far back a split secret can begin.
    longest: usize,
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scrubber({} secrets)", self.count)
    }
}

impl Scrubber {
    pub fn new<I, S>(secret_values: I) -> Scrubber
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut values: Vec<String> = secret_values
            .into_iter()
            .map(|s| s.as_ref().to_string())
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .collect();
        values.sort();
        values.dedup();
        let mut patterns = Vec::new();
        let mut forms = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for value in &values {
            for (text, form) in secret_forms(value) {
                if seen.insert(text.clone()) {
                    patterns.push(text);
                    forms.push(form);
                }
            }
        }
        let matcher = if patterns.is_empty() {
            None
        } else {
            // Literal patterns always build; on the impossible failure nothing would be
            // masked, so refuse to run instead of leaking.
            Some(
                AhoCorasickBuilder::new()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&patterns)
                    .unwrap_or_else(|e| panic!("cannot build the secret matcher: {e}")),
            )
        };
        let longest = patterns.iter().map(String::len).max().unwrap_or(0);
        Scrubber {
            matcher,
            patterns,
            forms,
            count: values.len(),
            longest,
        }
    }

    /// Number of secret values this scrubber masks.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `line` with every known secret value masked (no line-split handling).
    pub fn scrub<'a>(&self, line: &'a str) -> Cow<'a, str> {
        match &self.matcher {
            Some(m) if m.is_match(line) => {
                Cow::Owned(m.replace_all(line, &vec![MASK; self.patterns.len()]))
            }
            _ => Cow::Borrowed(line),
        }
    }

    /// Known values in every spelling (also split across the text's line breaks), then
    /// known token shapes: what every stored line or message goes through.
    pub fn scrub_line<'a>(&self, line: &'a str) -> Cow<'a, str> {
        if line.contains('\n') {
            return Cow::Owned(self.scrub_text(line));
        }
        let known = match self.scrub(line) {
            Cow::Borrowed(b) => scrub_known_patterns(b),
            Cow::Owned(o) => Cow::Owned(scrub_known_patterns(&o).into_owned()),
        };
        match known {
            Cow::Borrowed(b) => mask_decoded(self.matcher.as_ref(), b),
            Cow::Owned(o) => Cow::Owned(mask_decoded(self.matcher.as_ref(), &o).into_owned()),
        }
    }

    /// A multi-line text scrubbed as a stream: secrets split across its lines are masked.
    pub fn scrub_text(&self, text: &str) -> String {
        let mut guard = StreamScrub::default();
        let mut out: Vec<String> = Vec::new();
        for line in text.split('\n') {
            out.extend(
                guard
                    .push(self, line.to_string(), false, ())
                    .into_iter()
                    .map(|(l, _)| l),
            );
        }
        out.extend(guard.finish(self).into_iter().map(|(l, _)| l));
        out.join("\n")
    }

    /// Where the first known secret occurs in `text` (byte range), in any spelling, also
    /// when split across its lines: for the pre-push diff scan (pass the added content).
    /// [`Scrubber::find_secret_hit`] says in which form and on which line.
    pub fn find_secret(&self, text: &str) -> Option<std::ops::Range<usize>> {
        self.locate(text).map(|(range, _)| range)
    }

    /// Like [`Scrubber::find_secret`], as a reportable [`SecretHit`] (never the value).
    pub fn find_secret_hit(&self, text: &str) -> Option<SecretHit> {
        self.locate(text).map(|(range, hit)| SecretHit {
            line: 1 + text[..range.start].matches('\n').count(),
            ..hit
        })
    }

    /// The first match in `text`, else in `text` with its line breaks removed (the range is
    /// then mapped back onto `text`).
    fn locate(&self, text: &str) -> Option<(std::ops::Range<usize>, SecretHit)> {
        let m = self.matcher.as_ref()?;
        let hit = |form, split| SecretHit {
            form,
            line: 0,
            split,
        };
        if let Some(found) = m.find(text) {
            let form = self.forms[found.pattern().as_usize()];
            return Some((found.range(), hit(form, false)));
        }
        // After decoding: `\u0073k…` or a value split by an escaped `\n` in one line.
        if let Some(view) = EscapeView::of(text) {
            if let Some(found) = m.find(&view.text) {
                let raw = view.raw_range(found.range());
                let spelled = &text[raw.clone()];
                let split = spelled.contains("\\n") || spelled.contains("\\r");
                return Some((raw, hit(SecretForm::JsonEscaped, split)));
            }
        }
        let (joined, origin) = join_lines(text);
        let found = m.find(&joined)?;
        let start = origin[found.start()];
        let last = origin[found.end() - 1];
        let end = last + text[last..].chars().next().map_or(1, char::len_utf8);
        let form = self.forms[found.pattern().as_usize()];
        Some((start..end, hit(form, true)))
    }

    /// Length of the longest end of `s` that is a proper beginning of some spelling: how
    /// much of `s` could be the first part of a secret continued on the next line.
    fn partial_tail(&self, s: &[u8]) -> usize {
        let mut best = 0;
        for p in &self.patterns {
            let p = p.as_bytes();
            let window = s.len().min(p.len() - 1);
            let from = s.len() - window;
            for j in from..s.len() {
                if s[j] == p[0] && p.starts_with(&s[j..]) {
                    best = best.max(s.len() - j);
                    break;
                }
            }
        }
        best
    }
}

/// `text` without line breaks, and for each of its bytes the offset it came from.
fn join_lines(text: &str) -> (String, Vec<usize>) {
    let mut joined = String::with_capacity(text.len());
    let mut origin = Vec::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        if c == '\n' || c == '\r' {
            continue;
        }
        joined.push(c);
        origin.extend(std::iter::repeat_n(i, c.len_utf8()));
    }
    (joined, origin)
}

/// Scrubs a stream of lines so that a secret split across line breaks is masked too.
///
/// Each line is pushed with a tag (the caller's metadata) and comes back scrubbed, in
/// order, possibly later: a line whose end could begin a secret is held until the next
/// line settles it (at most [`MAX_HELD_LINES`] lines or [`MAX_HELD_BYTES`]). Call
/// [`StreamScrub::finish`] at the end of the stream for what is still held.
#[derive(Debug)]
pub struct StreamScrub<T> {
    held: Vec<(String, T)>,
    held_bytes: usize,
}

impl<T> Default for StreamScrub<T> {
    fn default() -> Self {
        StreamScrub {
            held: Vec::new(),
            held_bytes: 0,
        }
    }
}

impl<T> StreamScrub<T> {
    /// Feeds one line (without its newline). `cut` says the line was truncated, so a
    /// secret may continue in bytes nobody will see: its unfinished end is masked and
    /// nothing is held.
    pub fn push(&mut self, s: &Scrubber, line: String, cut: bool, tag: T) -> Vec<(String, T)> {
        self.held_bytes += line.len();
        self.held.push((line, tag));
        if s.matcher.is_none() {
            return self.release(s, false);
        }
        if cut {
            return self.release(s, true);
        }
        let tail_could_continue = {
            let last = &self.held[self.held.len() - 1].0;
            let body = last.strip_suffix('\r').unwrap_or(last);
            if body.is_empty() && self.held.len() > 1 {
                // An empty line between two halves: keep waiting.
                true
            } else {
                s.partial_tail(&self.held_tail(s.longest)) > 0
            }
        };
        if tail_could_continue
            && self.held.len() < MAX_HELD_LINES
            && self.held_bytes < MAX_HELD_BYTES
        {
            return Vec::new();
        }
        self.release(s, false)
    }

    /// The last `n` bytes of the held lines joined (their line breaks removed).
    fn held_tail(&self, n: usize) -> Vec<u8> {
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut len = 0;
        for (line, _) in self.held.iter().rev() {
            let b = trim_cr(line).as_bytes();
            let take = b.len().min(n - len);
            parts.push(&b[b.len() - take..]);
            len += take;
            if len == n {
                break;
            }
        }
        parts.into_iter().rev().flatten().copied().collect()
    }

    /// Whatever is still held, scrubbed.
    pub fn finish(&mut self, s: &Scrubber) -> Vec<(String, T)> {
        self.release(s, false)
    }

    fn release(&mut self, s: &Scrubber, mask_unfinished_end: bool) -> Vec<(String, T)> {
        let held = std::mem::take(&mut self.held);
        self.held_bytes = 0;
        if held.is_empty() {
            return Vec::new();
        }
        let Some(m) = &s.matcher else {
            return held
                .into_iter()
                .map(|(l, t)| (scrub_after_decoding(None, &l), t))
                .collect();
        };
        // Join the bodies (a trailing \r is kept aside), find matches in the join, and
        // mask each line's share of every match.
        let mut joined = String::new();
        let mut ranges = Vec::with_capacity(held.len());
        for (line, _) in &held {
            let start = joined.len();
            joined.push_str(trim_cr(line));
            ranges.push(start..joined.len());
        }
        let mut masks: Vec<std::ops::Range<usize>> =
            m.find_iter(&joined).map(|hit| hit.range()).collect();
        if mask_unfinished_end {
            let tail = s.partial_tail(joined.as_bytes());
            if tail >= MIN_SECRET_LEN {
                masks.push(joined.len() - tail..joined.len());
            }
        }
        held.into_iter()
            .zip(ranges)
            .map(|((line, tag), range)| {
                let mut out = String::with_capacity(line.len());
                let mut at = range.start;
                for mask in &masks {
                    let (a, b) = (mask.start.max(range.start), mask.end.min(range.end));
                    if a >= b {
                        continue;
                    }
                    out.push_str(&joined[at..a]);
                    out.push_str(MASK);
                    at = b;
                }
                out.push_str(&joined[at..range.end]);
                if line.ends_with('\r') {
                    out.push('\r');
                }
                (scrub_after_decoding(Some(m), &out), tag)
            })
            .collect()
    }
}

fn trim_cr(line: &str) -> &str {
    line.strip_suffix('\r').unwrap_or(line)
}

static TOKEN_SHAPES: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
            github_pat_[A-Za-z0-9_]{20,}
          | gh[pousr]_[A-Za-z0-9]{20,}
          | sk-ant-[A-Za-z0-9_-]{16,}
          | sk-[A-Za-z0-9_-]{20,}
          | AIza[0-9A-Za-z_-]{35}
          | xox[abposr]-[A-Za-z0-9-]{10,}
        ",
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// Known token shapes, then whatever hides behind escapes: what every released line ends with.
fn scrub_after_decoding(m: Option<&AhoCorasick>, line: &str) -> String {
    let shapes = scrub_known_patterns(line);
    mask_decoded(m, &shapes).into_owned()
}

/// A line as a JSON decoder reads it: string escapes (`\"`, `\\`, `\/`, `\b`, `\f`, `\t`,
/// `\uXXXX` with surrogate pairs) decoded, escaped line breaks (`\n`, `\r`) dropped so the
/// halves of a value split by one meet, and for each byte of the view the raw bytes it came
/// from. Whatever the line decodes to is what an adapter stores and `logs` shows, so that is
/// what is matched (issue 24: `\u0073k-ant-…` reached the store as the plain key).
struct EscapeView {
    text: String,
    /// `origin[i]`: the raw byte range view byte `i` came from.
    origin: Vec<(usize, usize)>,
}

impl EscapeView {
    /// `None` when `line` holds no backslash (the view would be the line itself).
    fn of(line: &str) -> Option<EscapeView> {
        if !line.contains('\\') {
            return None;
        }
        let bytes = line.as_bytes();
        let mut text = String::with_capacity(line.len());
        let mut origin = Vec::with_capacity(line.len());
        let mut push = |c: char, from: usize, to: usize, text: &mut String| {
            text.push(c);
            origin.extend(std::iter::repeat_n((from, to), c.len_utf8()));
        };
        let hex4 = |at: usize| -> Option<u32> {
            let digits = line.get(at..at + 4)?;
            if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(digits, 16).ok()
        };
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'\\' || i + 1 >= bytes.len() {
                let c = line[i..].chars().next().unwrap_or('\u{fffd}');
                push(c, i, i + c.len_utf8(), &mut text);
                i += c.len_utf8();
                continue;
            }
            let simple = match bytes[i + 1] {
                b'"' => Some(Some('"')),
                b'\\' => Some(Some('\\')),
                b'/' => Some(Some('/')),
                b'b' => Some(Some('\u{8}')),
                b'f' => Some(Some('\u{c}')),
                b't' => Some(Some('\t')),
                b'n' | b'r' => Some(None),
                _ => None,
            };
            if let Some(decoded) = simple {
                if let Some(c) = decoded {
                    push(c, i, i + 2, &mut text);
                }
                i += 2;
                continue;
            }
            if bytes[i + 1] == b'u' {
                if let Some(unit) = hex4(i + 2) {
                    let mut end = i + 6;
                    let mut code = unit;
                    if (0xD800..0xDC00).contains(&unit) && line.get(end..end + 2) == Some("\\u") {
                        if let Some(low) = hex4(end + 2).filter(|l| (0xDC00..0xE000).contains(l)) {
                            code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                            end += 6;
                        }
                    }
                    match char::from_u32(code) {
                        Some('\n' | '\r') => {}
                        Some(c) => push(c, i, end, &mut text),
                        None => push('\u{fffd}', i, end, &mut text),
                    }
                    i = end;
                    continue;
                }
            }
            push('\\', i, i + 1, &mut text);
            i += 1;
        }
        Some(EscapeView { text, origin })
    }

    /// The raw byte range view range `r` (non-empty) came from.
    fn raw_range(&self, r: std::ops::Range<usize>) -> std::ops::Range<usize> {
        self.origin[r.start].0..self.origin[r.end - 1].1
    }
}

/// `line` with every known value and token shape that its decoded form shows masked in the
/// raw spelling (the escapes that spelled it become [`MASK`]; the line stays valid JSON).
fn mask_decoded<'a>(m: Option<&AhoCorasick>, line: &'a str) -> Cow<'a, str> {
    let Some(view) = EscapeView::of(line) else {
        return Cow::Borrowed(line);
    };
    let mut masks: Vec<std::ops::Range<usize>> = Vec::new();
    if let Some(m) = m {
        masks.extend(
            m.find_iter(&view.text)
                .map(|hit| view.raw_range(hit.range())),
        );
    }
    masks.extend(
        TOKEN_SHAPES
            .find_iter(&view.text)
            .map(|hit| view.raw_range(hit.range())),
    );
    if masks.is_empty() {
        return Cow::Borrowed(line);
    }
    masks.sort_by_key(|r| r.start);
    let mut out = String::with_capacity(line.len());
    let mut at = 0;
    for mask in masks {
        if mask.end <= at {
            continue;
        }
        out.push_str(&line[at..mask.start.max(at)]);
        out.push_str(MASK);
        at = mask.end;
    }
    out.push_str(&line[at..]);
    Cow::Owned(out)
}

/// `line` with obvious API-token shapes masked.
pub fn scrub_known_patterns(line: &str) -> Cow<'_, str> {
    TOKEN_SHAPES.replace_all(line, MASK)
}

/// Token values in a CLI credential file (Claude `.credentials.json`, Codex `auth.json`,
/// Gemini `oauth_creds.json`, …): every string of at least [`MIN_ENCODED_LEN`] bytes under
/// a key naming a token, secret, key or password, at any depth. Not JSON: nothing.
pub fn credential_file_tokens(text: &str) -> Vec<String> {
    fn secret_key(key: &str) -> bool {
        let k = key.to_ascii_lowercase();
        [
            "token",
            "secret",
            "key",
            "password",
            "credential",
            "cookie",
            "session",
        ]
        .iter()
        .any(|w| k.contains(w))
    }
    fn walk(value: &serde_json::Value, under_secret_key: bool, out: &mut Vec<String>) {
        match value {
            serde_json::Value::String(s) if under_secret_key && s.len() >= MIN_ENCODED_LEN => {
                out.push(s.clone())
            }
            serde_json::Value::Array(items) => {
                for v in items {
                    walk(v, under_secret_key, out);
                }
            }
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    walk(v, under_secret_key || secret_key(k), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(text) {
        walk(&value, false, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(secrets: &[&str], line: &str, want: &str) {
        let s = Scrubber::new(secrets.iter().copied());
        assert_eq!(
            s.scrub_line(line),
            want,
            "secrets {secrets:?} line {line:?}"
        );
    }

    const TOKEN: &str = "tok-Zq8/+r~x.y_9KpW3";

    #[test]
    fn masks_values() {
        check(&["hunter22"], "pw=hunter22 and hunter22", "pw=*** and ***");
        check(
            &["abc"],
            "abc is too short to mask",
            "abc is too short to mask",
        );
        check(&["abcd", "abcdef"], "x abcdef y abcd", "x *** y ***");
        check(&[], "nothing", "nothing");
        check(&["a\"b\\c"], r#"{"t":"a\"b\\c"}"#, r#"{"t":"***"}"#);
        check(&["ünïcødé"], "key ünïcødé!", "key ***!");
        check(&["a.b*c"], "a.b*c axbbc", "*** axbbc");
    }

    #[test]
    fn masks_every_encoding() {
        let b64 = STANDARD_NO_PAD.encode(TOKEN);
        let b64_padded = base64::engine::general_purpose::STANDARD.encode(TOKEN);
        let b64url = URL_SAFE_NO_PAD.encode(TOKEN);
        let hex_lower = hex::encode(TOKEN);
        let url = utf8_percent_encode(TOKEN, URL_COMPONENT).to_string();
        for encoded in [
            b64.clone(),
            b64_padded,
            b64url,
            hex_lower.clone(),
            hex_lower.to_ascii_uppercase(),
            url.clone(),
            lowercase_escapes(&url),
            utf8_percent_encode(TOKEN, NON_ALPHANUMERIC).to_string(),
        ] {
            let s = Scrubber::new([TOKEN]);
            let line = format!("leak: {encoded} end");
            let out = s.scrub_line(&line);
            assert!(!out.contains(&encoded), "{encoded} survived: {out}");
            assert!(out.starts_with("leak: ") && out.ends_with(" end"), "{out}");
            assert!(s.find_secret_hit(&line).is_some(), "{encoded} not detected");
        }
        // Inside a longer encoded string, at each alignment.
        for prefix in ["", "a", "ab", "abc"] {
            let wrapped = STANDARD_NO_PAD.encode(format!("{prefix}token={TOKEN}&x=1"));
            let s = Scrubber::new([TOKEN]);
            assert!(s.scrub_line(&wrapped).contains(MASK), "prefix {prefix:?}");
            assert_eq!(
                s.find_secret_hit(&wrapped).map(|h| h.form),
                Some(SecretForm::Base64)
            );
        }
    }

    #[test]
    fn encodings_of_short_values_are_not_matched() {
        // A 4-byte value's base64 core would hit ordinary words.
        check(&["abcd"], "YWJj is base64 of abc", "YWJj is base64 of abc");
    }

    #[test]
    fn split_across_lines_is_masked_on_both_sides() {
        let s = Scrubber::new([TOKEN]);
        let (a, b) = TOKEN.split_at(7);
        let text = format!("first {a}\n{b} second\nplain");
        let out = s.scrub_text(&text);
        assert_eq!(out, "first ***\n*** second\nplain");
        // Three pieces, an empty line and CRLF between them.
        let (b1, b2) = b.split_at(5);
        let text = format!("{a}\r\n\r\n{b1}\r\n{b2}");
        let out = s.scrub_text(&text);
        assert!(!out.contains(b1) && !out.contains(b2), "{out:?}");
        assert_eq!(out.matches('\n').count(), 3);
        // base64 wrapped at 76 columns, as `base64` prints it.
        let long = format!("{TOKEN}{TOKEN}{TOKEN}{TOKEN}");
        let s = Scrubber::new([long.as_str()]);
        let encoded = base64::engine::general_purpose::STANDARD.encode(&long);
        let wrapped: Vec<&str> = encoded
            .as_bytes()
            .chunks(76)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        let text = wrapped.join("\n");
        let out = s.scrub_text(&text);
        for piece in &wrapped {
            assert!(!out.contains(&piece[2..piece.len() - 2]), "{out:?}");
        }
        let hit = s.find_secret_hit(&text).unwrap();
        assert_eq!(
            (hit.form, hit.line, hit.split),
            (SecretForm::Base64, 1, true)
        );
        let range = s.find_secret(&text).unwrap();
        assert!(text[range].contains('\n'), "the range spans the break");
    }

    #[test]
    fn stream_holds_only_lines_that_could_continue_a_secret() {
        let s = Scrubber::new(["SECRETVALUE"]);
        let mut g = StreamScrub::default();
        assert_eq!(
            g.push(&s, "done }".into(), false, 1),
            vec![("done }".to_string(), 1)]
        );
        assert!(g.push(&s, "x SECR".into(), false, 2).is_empty());
        assert_eq!(
            g.push(&s, "ETVALUE y".into(), false, 3),
            vec![("x ***".to_string(), 2), ("*** y".to_string(), 3)]
        );
        // Not continued: released unchanged.
        assert!(g.push(&s, "a SEC".into(), false, 4).is_empty());
        assert_eq!(
            g.push(&s, "ond".into(), false, 5),
            vec![("a SEC".to_string(), 4), ("ond".to_string(), 5)]
        );
        assert!(g.push(&s, "tail SECRETV".into(), false, 6).is_empty());
        assert_eq!(g.finish(&s), vec![("tail SECRETV".to_string(), 6)]);
        // A cut line may continue in dropped bytes: its unfinished end is masked.
        assert_eq!(
            g.push(&s, "cut SECRETV".into(), true, 7),
            vec![("cut ***".to_string(), 7)]
        );
    }

    #[test]
    fn find_secret_locates_a_known_value() {
        let s = Scrubber::new(["hunter22"]);
        assert_eq!(s.find_secret("pw=hunter22;"), Some(3..11));
        assert_eq!(s.find_secret("pw=hunt\ner22;"), Some(3..12));
        assert_eq!(s.find_secret("nothing here"), None);
        assert_eq!(Scrubber::new(Vec::<String>::new()).find_secret("x"), None);
    }

    #[test]
    fn find_secret_reports_form_and_line_never_the_value() {
        let s = Scrubber::new([TOKEN]);
        let text = format!("a\nb\nx={}\n", hex::encode(TOKEN));
        let hit = s.find_secret_hit(&text).unwrap();
        assert_eq!(
            hit,
            SecretHit {
                form: SecretForm::Hex,
                line: 3,
                split: false
            }
        );
        assert!(!hit.to_string().contains(TOKEN));
        assert_eq!(hit.to_string(), "a known secret hex-encoded on line 3");
        assert_eq!(s.find_secret_hit("nothing here"), None);
        assert_eq!(
            Scrubber::new(Vec::<String>::new()).find_secret_hit(TOKEN),
            None
        );
    }

    #[test]
    fn masks_token_shapes() {
        check(&[], "t=ghp_abcdefghijklmnopqrstuvwxyz0123", "t=***");
        check(&[], "github_pat_11ABCDEFG0123456789_abcdefghij", "***");
        check(
            &[],
            "ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnop_QR",
            "ANTHROPIC_API_KEY=***",
        );
        check(&[], "OPENAI=sk-proj-abcdefghijklmnopqrstuvwx", "OPENAI=***");
        check(
            &[],
            "sk-short is fine; task-sk-1 too",
            "sk-short is fine; task-sk-1 too",
        );
        check(&[], "git push ghp is a word", "git push ghp is a word");
    }

    /// Issue 24: what a line decodes to is what is matched, and the escapes are masked.
    #[test]
    fn values_behind_json_escapes_are_masked_and_detected() {
        let key = "pk-Zq8rXy0123456789";
        let escaped: String = key
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect();
        let line = format!(r#"{{"text":"key {escaped} end"}}"#);
        check(&[key], &line, r#"{"text":"key *** end"}"#);
        // Split by an escaped line break inside one JSON string.
        check(
            &[key],
            r#"{"text":"split pk-Zq8rXy01\n23456789 end"}"#,
            r#"{"text":"split *** end"}"#,
        );
        // A token shape nobody told us about, behind one escape; a surrogate pair too.
        check(
            &[],
            r#"{"t":"\u0073k-ant-api03-abcdefghijklmnop_QR"}"#,
            r#"{"t":"***"}"#,
        );
        check(
            &[],
            r#"{"t":"\ud83d\ude00 ok \\u0073"}"#,
            r#"{"t":"\ud83d\ude00 ok \\u0073"}"#,
        );
        let s = Scrubber::new([key]);
        let masked = s.scrub_line(&line);
        let decoded: serde_json::Value = serde_json::from_str(&masked).expect("still JSON");
        assert_eq!(decoded["text"], "key *** end");
        let hit = s
            .find_secret_hit(&format!("x = \"{escaped}\"\n"))
            .expect("detected");
        assert_eq!(
            (hit.form, hit.line, hit.split),
            (SecretForm::JsonEscaped, 1, false)
        );
        let hit = s
            .find_secret_hit("a\nb = \"pk-Zq8rXy01\\n23456789\"")
            .expect("detected when split by an escape");
        assert_eq!((hit.line, hit.split), (2, true));
        // Stream scrubbing applies the same view.
        assert_eq!(
            s.scrub_text(&format!("one\n{line}")),
            "one\n{\"text\":\"key *** end\"}"
        );
    }

    #[test]
    fn credential_files_yield_their_tokens() {
        let claude = r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-AAAA","refreshToken":"sk-ant-ort01-BBBB","expiresAt":1767225600000,"scopes":["user:inference"],"subscriptionType":"max"}}"#;
        assert_eq!(
            credential_file_tokens(claude),
            vec!["sk-ant-oat01-AAAA", "sk-ant-ort01-BBBB"]
        );
        let codex = r#"{"OPENAI_API_KEY":null,"tokens":{"id_token":"eyJhbGciOi.x.y","access_token":"eyJ0eXAi.a.b","refresh_token":"rt_0123456789","account_id":"acct-1"},"last_refresh":"2026-11-01T00:00:00Z"}"#;
        let mut got = credential_file_tokens(codex);
        got.sort();
        assert_eq!(got, vec!["eyJ0eXAi.a.b", "eyJhbGciOi.x.y", "rt_0123456789"]);
        assert!(credential_file_tokens("not json").is_empty());
        assert!(credential_file_tokens(r#"{"theme":"dark-mode-x"}"#).is_empty());
    }

    #[test]
    fn debug_never_shows_values() {
        let s = Scrubber::new(["supersecret"]);
        assert_eq!(format!("{s:?}"), "Scrubber(1 secrets)");
        assert_eq!(s.len(), 1);
    }
}
