//! Secret scrubbing for every stored line (spec §9, DESIGN "Secrets never reach logs").
//!
//! [`Scrubber`] replaces each known secret value (at least 4 bytes; shorter values would
//! blank ordinary words) with `***`, including its JSON-escaped spelling, since stored lines
//! are mostly JSON. [`scrub_known_patterns`] catches token shapes we were never told about
//! (`ghp_…`, `github_pat_…`, `sk-ant-…`, `sk-…`, Google `AIza…`, Slack `xox?-…`).
//!
//! Architecture Invariant: pure; secret values live only inside the compiled matcher and are
//! never printed (`Debug` shows only the count).

use regex::Regex;
use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;

/// What a secret becomes.
pub const MASK: &str = "***";

/// Shortest secret value that is scrubbed.
pub const MIN_SECRET_LEN: usize = 4;

/// Replaces known secret values in lines.
pub struct Scrubber {
    // Invariant: `None` when there is nothing to scrub; alternatives longest first so a
    // secret containing another is masked whole.
    matcher: Option<Regex>,
    count: usize,
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
        let mut variants: Vec<String> = Vec::new();
        let mut count = 0;
        for secret in secret_values {
            let s = secret.as_ref();
            if s.len() < MIN_SECRET_LEN {
                continue;
            }
            count += 1;
            variants.push(s.to_string());
            // The spelling the secret has inside a JSON string ("a\"b" for a"b).
            if let Ok(quoted) = serde_json::to_string(s) {
                let inner = &quoted[1..quoted.len() - 1];
                if inner != s {
                    variants.push(inner.to_string());
                }
            }
        }
        variants.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        variants.dedup();
        let matcher = if variants.is_empty() {
            None
        } else {
            let pattern = variants
                .iter()
                .map(|v| regex::escape(v))
                .collect::<Vec<_>>()
                .join("|");
            // Escaped literals always compile; the size limit is raised for long key lists.
            regex::RegexBuilder::new(&pattern)
                .size_limit(64 * 1024 * 1024)
                .build()
                .ok()
        };
        Scrubber { matcher, count }
    }

    /// Number of secret values this scrubber masks.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `line` with every known secret value masked.
    pub fn scrub<'a>(&self, line: &'a str) -> Cow<'a, str> {
        match &self.matcher {
            Some(m) => m.replace_all(line, MASK),
            None => Cow::Borrowed(line),
        }
    }

    /// Where the first known secret value (in any spelling this scrubber masks) occurs in
    /// `text`, if anywhere: the landing gate refuses a diff that carries one (issue 11).
    pub fn find_secret(&self, text: &str) -> Option<std::ops::Range<usize>> {
        self.matcher
            .as_ref()
            .and_then(|m| m.find(text))
            .map(|m| m.range())
    }

    /// Known values, then known token shapes: what every stored line goes through.
    pub fn scrub_line<'a>(&self, line: &'a str) -> Cow<'a, str> {
        match self.scrub(line) {
            Cow::Borrowed(b) => scrub_known_patterns(b),
            Cow::Owned(o) => Cow::Owned(scrub_known_patterns(&o).into_owned()),
        }
    }
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

/// `line` with obvious API-token shapes masked.
pub fn scrub_known_patterns(line: &str) -> Cow<'_, str> {
    TOKEN_SHAPES.replace_all(line, MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_secret_locates_a_known_value() {
        let s = Scrubber::new(["hunter22"]);
        assert_eq!(s.find_secret("pw=hunter22;"), Some(3..11));
        assert_eq!(s.find_secret("nothing here"), None);
        assert_eq!(Scrubber::new(Vec::<String>::new()).find_secret("x"), None);
    }

    fn check(secrets: &[&str], line: &str, want: &str) {
        let s = Scrubber::new(secrets.iter().copied());
        assert_eq!(
            s.scrub_line(line),
            want,
            "secrets {secrets:?} line {line:?}"
        );
    }

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

    #[test]
    fn debug_never_shows_values() {
        let s = Scrubber::new(["supersecret"]);
        assert_eq!(format!("{s:?}"), "Scrubber(1 secrets)");
        assert_eq!(s.len(), 1);
    }
}
