//! Limits on task text a person types or pipes in (issue 12): a title is one line of at
//! most [`MAX_TITLE_CHARS`] characters, a body stays under the configured byte limit, and
//! neither holds a NUL byte (SQLite, git and the agent CLIs all stop at it). Pure.

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 256;

/// Why task text was refused: what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextError {
    pub message: String,
    pub fix: String,
}

fn refuse(message: impl Into<String>, fix: impl Into<String>) -> TextError {
    TextError {
        message: message.into(),
        fix: fix.into(),
    }
}

/// A non-empty single line without NUL of at most [`MAX_TITLE_CHARS`] characters.
pub fn check_title(title: &str) -> Result<(), TextError> {
    if title.contains('\0') {
        return Err(refuse(
            "the task title holds a NUL byte",
            "remove the NUL (\\0) character from the title",
        ));
    }
    if title.trim().is_empty() {
        return Err(refuse(
            "the task title is empty",
            "pass a one-line title, e.g. \"Fix the parser\"",
        ));
    }
    if title.contains(['\n', '\r']) {
        return Err(refuse(
            "the task title spans several lines",
            "keep the title to one line and put the rest in --body",
        ));
    }
    let chars = title.chars().count();
    if chars > MAX_TITLE_CHARS {
        return Err(refuse(
            format!(
                "the task title is {chars} characters long, above the limit of {MAX_TITLE_CHARS}"
            ),
            "shorten the title and put the details in --body",
        ));
    }
    Ok(())
}

/// A body without NUL of at most `limit` bytes.
pub fn check_body(body: &str, limit: u64) -> Result<(), TextError> {
    if body.contains('\0') {
        return Err(refuse(
            "the task body holds a NUL byte",
            "remove the NUL (\\0) characters from the body (is --body-file a binary file?)",
        ));
    }
    let len = body.len() as u64;
    if len > limit {
        return Err(refuse(
            format!("the task body is {len} bytes, above the limit of {limit} bytes (max_body_bytes)"),
            "shorten the body, link to the long material instead, or raise `max_body_bytes` in config.yaml",
        ));
    }
    Ok(())
}

/// A value that would be read as an option by git or by the agent CLI.
pub fn check_not_option(field: &str, value: &str) -> Result<(), TextError> {
    if value.starts_with('-') {
        return Err(refuse(
            format!("{field} `{value}` starts with `-` and would be read as an option"),
            format!("pass a {field} that does not start with `-`"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles() {
        assert!(check_title("Fix the parser").is_ok());
        assert!(check_title(&"é".repeat(256)).is_ok());
        for bad in ["", "  ", "a\nb", "a\rb", "a\0b"] {
            assert!(check_title(bad).is_err(), "{bad:?}");
        }
        let long = check_title(&"x".repeat(257)).unwrap_err();
        assert!(
            long.message.contains("257") && long.message.contains("256"),
            "{long:?}"
        );
    }

    #[test]
    fn bodies() {
        assert!(check_body("", 10).is_ok());
        assert!(check_body("0123456789", 10).is_ok());
        let e = check_body("0123456789a", 10).unwrap_err();
        assert!(e.message.contains("limit of 10 bytes"), "{e:?}");
        assert!(check_body("a\0", 10).is_err());
    }

    #[test]
    fn option_like_values() {
        assert!(check_not_option("--base", "main").is_ok());
        assert!(check_not_option("--base", "--upload-pack=evil").is_err());
    }
}
