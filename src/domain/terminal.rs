//! Text others wrote (task titles, bodies, labels, agent output), made safe to print on an
//! operator's terminal or to quote where a terminal may show it. Pure.

/// `s` without terminal control sequences (issue 11): ESC sequences (CSI, OSC, DCS and the
/// other string controls up to their terminator), C1 controls (U+0080..U+009F, including
/// the one-character CSI and OSC), DEL and every C0 control except newline and tab. What
/// `logs`, `status` and `route` print passes through here: task titles, bodies, labels and
/// agent output are written by others and must not move the cursor, retitle the window
/// or plant an OSC 8 link in the operator's terminal.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    let is_control =
        |c: char| (c.is_control() && c != '\n' && c != '\t') || ('\u{80}'..='\u{9f}').contains(&c);
    if !s.chars().any(is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    // Skips a control string (OSC, DCS, SOS, PM, APC) up to BEL, ESC \ or ST.
    fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
        while let Some(c) = chars.next() {
            match c {
                '\u{7}' | '\u{9c}' => return,
                '\u{1b}' => {
                    if chars.peek() == Some(&'\\') {
                        chars.next();
                    }
                    return;
                }
                _ => {}
            }
        }
    }
    // Skips a CSI's parameter and intermediate bytes and its final byte.
    fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
        for c in chars.by_ref() {
            if ('\u{40}'..='\u{7e}').contains(&c) || !('\u{20}'..='\u{3f}').contains(&c) {
                return;
            }
        }
    }
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']' | 'P' | 'X' | '^' | '_') => skip_string(&mut chars),
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if is_control(c) => {}
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_strips_terminal_controls() {
        let check = |input: &str, want: &str| assert_eq!(printable(input), want, "{input:?}");
        check("plain\ttext\nnext", "plain\ttext\nnext");
        check("red \u{1b}[31mALERT\u{1b}[0m", "red ALERT");
        check("\u{1b}]0;owned title\u{7}after", "after");
        check(
            "\u{1b}]8;;https://evil.example\u{1b}\\link\u{1b}]8;;\u{1b}\\",
            "link",
        );
        check("csi\u{9b}2Jc1 \u{9d}osc\u{9c}end", "csic1 end");
        check(
            "bell\u{7} cr\r del\u{7f} nul\u{0} esc-c\u{1b}c.",
            "bell cr del nul esc-c.",
        );
        check("unterminated \u{1b}]2;title", "unterminated ");
        check("ünïcødé ✓", "ünïcødé ✓");
    }
}
