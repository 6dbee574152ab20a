//! Recognising usage- and rate-limit messages (spec §8.3): the texts CLIs put in their
//! structured limit events.
//!
//! Architecture Invariant: these matchers are only ever applied to text taken from a
//! structured error/limit event (Claude's error results and synthetic API-error messages,
//! Codex `error`/`turn.failed`, Gemini `error`/error results). Never to assistant text, tool
//! input or tool output: an agent writing "rate limit" in code is not out of quota.

use regex::Regex;
use std::sync::LazyLock;

use super::QuotaHit;

/// Limit banners that are unmistakable even inside a result that claims success (Claude has
/// reported its usage limit as `subtype: success` with the banner as the result text). They
/// must start the text.
static BANNER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)^\s*(?:
            claude\ ai\ usage\ limit\ reached
          | claude\ usage\ limit\ reached
          | (?:5-hour|five-hour|weekly|daily|session|usage|opus|sonnet)\ limit\ reached
          | you(?:'|’)ve\ (?:hit|reached)\ your\ (?:[a-z0-9-]+\ )?limit
        )",
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// Broader limit wording, for text that is already known to be an error.
static ERROR_LIMIT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)
            usage\ limit
          | (?:hit|reached)\ your\ (?:[a-z0-9-]+\ )?limit
          | limit\ reached
          | rate[\ _-]?limit(?:ed|_error|\ exceeded|\ reached)?
          | too\ many\ requests
          | \b429\b
          | quota\ (?:exceeded|exhausted)
          | exceeded\ your\ current\ quota
          | insufficient_quota
          | resource_exhausted
          | resource\ exhausted
        ",
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

static PIPE_EPOCH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\|\s*(\d{9,})").unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

static RESETS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)(?:resets?(?:\s+at)?|try again(?:\s+at|\s+in)?|resuming at)\s+([^.\n'",;}\]]+)"#,
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// A limit banner at the start of `text` (safe to apply to a claimed-success result).
pub fn banner(text: &str) -> Option<QuotaHit> {
    // A final message that merely mentions limits is long prose; banners are one short line.
    if text.len() > 400 || !BANNER.is_match(text) {
        return None;
    }
    Some(hit(text))
}

/// Limit wording anywhere in `text`, which must come from a structured error.
pub fn in_error(text: &str) -> Option<QuotaHit> {
    if banner(text).is_some() || ERROR_LIMIT.is_match(text) {
        Some(hit(text))
    } else {
        None
    }
}

/// Builds the hit, reading the reset time the message states, if any.
pub fn hit(text: &str) -> QuotaHit {
    let resets_at = PIPE_EPOCH
        .captures(text)
        .or_else(|| RESETS.captures(text))
        .and_then(|c| c.get(1))
        .map(|m| m.as_str().trim().to_string())
        // "Please try again later." (the API's 429 text, as Claude Code 2.1 prints it) names
        // no time.
        .filter(|s| !s.is_empty() && !s.eq_ignore_ascii_case("later"));
    QuotaHit {
        message: super::common::one_line(text, 300),
        resets_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_banner(text: &str, want: Option<Option<&str>>) {
        let got = banner(text).map(|h| h.resets_at);
        assert_eq!(got, want.map(|r| r.map(String::from)), "banner({text:?})");
    }

    #[test]
    fn try_again_later_is_no_reset_time() {
        let hit = in_error("API Error: Request rejected (429) · This request would exceed your account's rate limit. Please try again later.");
        assert_eq!(hit.map(|h| h.resets_at), Some(None));
    }

    #[test]
    fn banners() {
        check_banner(
            "Claude AI usage limit reached|1751997600",
            Some(Some("1751997600")),
        );
        check_banner("Weekly limit reached ∙ resets 5am", Some(Some("5am")));
        check_banner(
            "You've hit your session limit · resets 1pm (Europe/Berlin)",
            Some(Some("1pm (Europe/Berlin)")),
        );
        check_banner("You’ve hit your usage limit", Some(None));
        check_banner("5-hour limit reached ∙ resets 3pm", Some(Some("3pm")));
        // Prose about limits is not a banner.
        check_banner(
            "I added rate limit handling; usage limit reached errors now retry.",
            None,
        );
        check_banner(
            "Fixed the bug. Claude AI usage limit reached is handled.",
            None,
        );
        check_banner("", None);
    }

    fn check_error(text: &str, want: bool) {
        assert_eq!(in_error(text).is_some(), want, "in_error({text:?})");
    }

    #[test]
    fn error_texts() {
        check_error(
            "You've hit your usage limit. Upgrade to Pro or try again at 3:28 PM.",
            true,
        );
        check_error("API Error: 429 {\"type\":\"rate_limit_error\"}", true);
        check_error(
            "exceeded retry limit, last status: 429 Too Many Requests",
            true,
        );
        check_error(
            "Quota exceeded for quota metric 'Generate Content API requests'",
            true,
        );
        check_error("RESOURCE_EXHAUSTED", true);
        check_error("stream disconnected before completion", false);
        check_error("Model metadata for `o3-mini` not found", false);
    }

    #[test]
    fn reset_times() {
        let r = |t: &str| hit(t).resets_at;
        assert_eq!(
            r("You've hit your usage limit. Visit https://x/usage to purchase more credits or try again at 3:28 PM."),
            Some("3:28 PM".into())
        );
        assert_eq!(r("limit"), None);
    }
}
