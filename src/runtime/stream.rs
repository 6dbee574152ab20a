//! Bytes -> lines for one output stream: partial lines are buffered across frames and a
//! line longer than the limit is cut (spec §9: "never buffered whole", huge lines are
//! recorded as cut, never a crash).
//!
//! Architecture Invariant: pure; memory per stream is bounded by the limit.

/// Lines longer than this are cut (1 MiB).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// One complete line, without its newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The line (lossy UTF-8), at most `max` bytes of it when cut.
    pub text: String,
    /// `Some(total_bytes)` when the line was longer than the limit and was cut.
    pub cut: Option<usize>,
}

/// Splits one stream's frames into lines.
#[derive(Debug)]
pub struct LineSplitter {
    max: usize,
    buf: Vec<u8>,
    /// Bytes of the current line dropped past `max` (the line is being cut).
    dropped: usize,
}

impl Default for LineSplitter {
    fn default() -> Self {
        LineSplitter::new(MAX_LINE_BYTES)
    }
}

impl LineSplitter {
    pub fn new(max: usize) -> Self {
        LineSplitter {
            max,
            buf: Vec::new(),
            dropped: 0,
        }
    }

    /// Feeds one frame; returns the lines it completed.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<Line> {
        let mut lines = Vec::new();
        while !bytes.is_empty() {
            let (chunk, rest, ended) = match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &bytes[bytes.len()..], false),
            };
            let room = self.max.saturating_sub(self.buf.len());
            let take = room.min(chunk.len());
            self.buf.extend_from_slice(&chunk[..take]);
            self.dropped += chunk.len() - take;
            if ended {
                lines.push(self.take_line());
            }
            bytes = rest;
        }
        lines
    }

    /// The unterminated last line, if the stream ended without a newline.
    pub fn finish(&mut self) -> Option<Line> {
        if self.buf.is_empty() && self.dropped == 0 {
            None
        } else {
            Some(self.take_line())
        }
    }

    fn take_line(&mut self) -> Line {
        let mut raw = std::mem::take(&mut self.buf);
        if raw.last() == Some(&b'\r') && self.dropped == 0 {
            raw.pop();
        }
        let cut = (self.dropped > 0).then(|| raw.len() + self.dropped);
        self.dropped = 0;
        Line {
            text: String::from_utf8_lossy(&raw).into_owned(),
            cut,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `frames` to a splitter with limit `max`; returns every line and the tail.
    fn check(max: usize, frames: &[&str], expected: &[(&str, Option<usize>)]) {
        let mut s = LineSplitter::new(max);
        let mut got: Vec<Line> = frames.iter().flat_map(|f| s.push(f.as_bytes())).collect();
        got.extend(s.finish());
        let got: Vec<(&str, Option<usize>)> =
            got.iter().map(|l| (l.text.as_str(), l.cut)).collect();
        assert_eq!(got, expected, "frames {frames:?}");
    }

    #[test]
    fn whole_lines() {
        check(10, &["a\nb\n"], &[("a", None), ("b", None)]);
    }

    #[test]
    fn partial_lines_join_across_frames() {
        check(10, &["ab", "c\nd", "e\n"], &[("abc", None), ("de", None)]);
    }

    #[test]
    fn unterminated_tail_is_flushed() {
        check(10, &["a\nbc"], &[("a", None), ("bc", None)]);
    }

    #[test]
    fn empty_lines_are_lines() {
        check(10, &["\n\n"], &[("", None), ("", None)]);
    }

    #[test]
    fn crlf_is_trimmed() {
        check(10, &["a\r\n"], &[("a", None)]);
    }

    #[test]
    fn long_line_is_cut_and_sized() {
        check(4, &["abcdefg\nxy\n"], &[("abcd", Some(7)), ("xy", None)]);
    }

    #[test]
    fn long_line_cut_across_frames() {
        check(
            4,
            &["abc", "defg", "hi\nz"],
            &[("abcd", Some(9)), ("z", None)],
        );
    }

    #[test]
    fn exactly_the_limit_is_not_cut() {
        check(4, &["abcd\n"], &[("abcd", None)]);
    }

    #[test]
    fn unterminated_long_tail_is_cut() {
        check(2, &["abcdef"], &[("ab", Some(6))]);
    }

    #[test]
    fn nothing_gives_nothing() {
        check(4, &[], &[]);
    }
}
