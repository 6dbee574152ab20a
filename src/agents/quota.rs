//! Recognising usage- and rate-limit messages (spec §8.3): the texts CLIs put in their
//! structured limit events, and when the limit resets (issue 14).
//!
//! A reset is read in two pure steps: [`reset_hint`] turns the message into what it says
//! (an epoch, a delay, or a wall-clock time in the CLI's local time), and
//! [`reset_instant`] places that hint in time, given when the message was seen and the
//! CLI's UTC offset. Nothing here reads the clock.
//!
//! Architecture Invariant: these matchers are only ever applied to text taken from a
//! structured error/limit event (Claude's error results and synthetic API-error messages,
//! Codex `error`/`turn.failed`, Gemini `error`/error results). Never to assistant text, tool
//! input or tool output: an agent writing "rate limit" in code is not out of quota.

use chrono::{DateTime, Datelike, Duration, FixedOffset, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use regex::Regex;
use serde::{Deserialize, Serialize};
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

/// The reset as the message words it, for people: everything after `resets [at]`, `try
/// again [at|in]`, `retry in` or `resuming at` up to the end of the clause. A
/// comma followed by a year stays (Codex: `try again at Dec 1st, 2026 10:04 PM`).
static RESETS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)(?:resets?(?:\s+at)?|try\s+again(?:\s+at|\s+in)?|retry\s+in|resuming\s+at)\s+((?:[^.\n'",;}\]]|,\s*\d{4}\b|\.\d)+)"#,
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
        reset: reset_hint(text),
    }
}

// ---------------------------------------------------------------- reset times

/// When a limit resets, as the CLI said it, before it is placed in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ResetHint {
    /// Unix seconds: Claude's `usage limit reached|<epoch>`, a `rate_limit_event`'s
    /// `resetsAt`, an `*-ratelimit-*-reset: <epoch>` header, a `retry-after` HTTP date.
    Epoch { seconds: i64 },
    /// Seconds after the message was seen: `try again in 1 hour 5 minutes`, `retry-after:
    /// 3600`, Gemini's `reset after 1h49m8s` / `retry in 31.44s`, Kimi's `try again after 1
    /// seconds`.
    After { millis: u64 },
    /// A wall-clock time in the CLI's local time, with as much of the date as it gave:
    /// Codex's `try again at Dec 1st, 2026 10:04 PM` or `at 3:28 PM`, Claude's `resets 5am`.
    Local {
        /// `(month, day, year)`; the year is absent when the message gave none.
        date: Option<(u32, u32, Option<i32>)>,
        time: NaiveTime,
        /// The IANA zone the message named (Claude Code: `resets 1pm
        /// (America/Mexico_City)`); absent: the CLI machine's own offset.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        zone: Option<Tz>,
    },
}

/// `<number> <unit>` pairs: `4 days 2 hours 13 minutes`, `1h49m8s`, `31.44s`, `500ms`.
static DURATION_PART: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        // Longest spelling first and no word boundary after it: `1h49m8s` runs together.
        r"(?ix)^\s*(?:and\s+)?(\d+(?:\.\d+)?)\s*(
            milliseconds?|ms
          | seconds?|secs?|s
          | minutes?|mins?|m
          | hours?|hrs?|h
          | days?|d
          | weeks?|w
        ),?",
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// Where a relative reset starts: `try again in`, `reset after`, `retry in`, `retryDelay`.
static AFTER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?ix)(?:
            try\s+again\s+(?:in|after)
          | resets?\s+(?:in|after)
          | retry\s+(?:in|after)
          | "?retryDelay"?\s*[:=]\s*"?
          | x-ratelimit-reset-(?:requests|tokens)\s*[:=]\s*"?
        )\s*"#,
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// `retry-after: 3600` (seconds) or `retry-after-ms: 1500`, as a header or a JSON key.
static RETRY_AFTER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)"?retry[-_]after(-ms)?"?\s*[:=]\s*"?(\d+(?:\.\d+)?)\s*"?(?:[,}\s]|$)"#)
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// `retry-after: Wed, 21 Oct 2026 07:28:00 GMT` (an HTTP date).
static RETRY_AFTER_DATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)"?retry[-_]after"?\s*[:=]\s*"?([A-Z][a-z]{2},\s+\d{1,2}\s+[A-Z][a-z]{2}\s+\d{4}\s+\d{2}:\d{2}:\d{2}\s+GMT)"#)
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// A reset header holding an epoch: `anthropic-ratelimit-unified-reset: 1755772800`,
/// `x-ratelimit-reset: 1755772800`, JSON `"resetsAt": 1755772800`.
static RESET_EPOCH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)(?:ratelimit(?:-[a-z0-9]+)*-reset|"?resets_?at"?)\s*"?\s*[:=]\s*"?(\d{9,13})\b"#,
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// A wall-clock reset: `try again at [Dec 1st, [2026]] 10:04 PM`, `resets [at] 5am`,
/// `resuming at 14:05`.
static AT_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)(?:try\s+again\s+at|resets?(?:\s+at)?|resuming\s+at)\s+
          (?:(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+
             (?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s*(?P<year>\d{4})?,?\s*(?:at\s+)?)?
          (?P<hour>\d{1,2})(?::(?P<min>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?\b",
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// What `text` says about when the limit resets, if anything. The most exact form wins:
/// an epoch, then an HTTP date, then a delay, then a wall-clock time.
pub fn reset_hint(text: &str) -> Option<ResetHint> {
    if let Some(seconds) = PIPE_EPOCH
        .captures(text)
        .or_else(|| RESET_EPOCH.captures(text))
        .and_then(|c| c.get(1))
        .and_then(|m| epoch_seconds(m.as_str()))
    {
        return Some(ResetHint::Epoch { seconds });
    }
    if let Some(c) = RETRY_AFTER_DATE.captures(text) {
        if let Ok(at) = DateTime::parse_from_rfc2822(&c[1]) {
            return Some(ResetHint::Epoch {
                seconds: at.timestamp(),
            });
        }
    }
    if let Some(c) = RETRY_AFTER.captures(text) {
        if let Ok(n) = c[2].parse::<f64>() {
            let seconds = if c.get(1).is_some() { n / 1000.0 } else { n };
            return after(seconds);
        }
    }
    for m in AFTER.find_iter(text) {
        if let Some(seconds) = duration_seconds(&text[m.end()..]) {
            return after(seconds);
        }
    }
    let c = AT_TIME.captures(text)?;
    let mut hour: u32 = c.name("hour")?.as_str().parse().ok()?;
    let minute: u32 = match c.name("min") {
        Some(m) => m.as_str().parse().ok()?,
        None => 0,
    };
    match c.name("ampm").map(|m| m.as_str().to_ascii_lowercase()) {
        Some(ampm) => {
            if !(1..=12).contains(&hour) {
                return None;
            }
            hour %= 12;
            if ampm.starts_with('p') {
                hour += 12;
            }
        }
        // A bare number is not a time ("resets 5" could be anything); `14:05` is.
        None if c.name("min").is_none() => return None,
        None => {}
    }
    let time = NaiveTime::from_hms_opt(hour, minute, 0)?;
    let date = match (c.name("mon"), c.name("day")) {
        (Some(mon), Some(day)) => Some((
            month_number(mon.as_str())?,
            day.as_str().parse().ok()?,
            c.name("year").and_then(|y| y.as_str().parse().ok()),
        )),
        _ => None,
    };
    let zone = ZONE
        .captures(&text[c.get(0)?.end()..])
        .and_then(|z| z[1].parse::<Tz>().ok());
    Some(ResetHint::Local { date, time, zone })
}

/// The zone right after a wall-clock time: ` (America/Mexico_City)`, ` (UTC)`.
static ZONE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*\(\s*([A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+){0,2})\s*\)")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// Places `hint` in time. `seen`: when the message was read; `local`: the UTC offset of the
/// machine the CLI ran on (its wall-clock times are in that zone). A time without a date is
/// its next occurrence after `seen`, a date without a year the nearest one that is not
/// long past. `None` when the hint names no real instant (Feb 30th).
pub fn reset_instant(
    hint: &ResetHint,
    seen: DateTime<Utc>,
    local: FixedOffset,
) -> Option<DateTime<Utc>> {
    match *hint {
        ResetHint::Epoch { seconds } => Utc.timestamp_opt(seconds, 0).single(),
        ResetHint::After { millis } => {
            // Whole seconds, rounded up: never wake before the limit lifts.
            let seconds = i64::try_from(millis.div_ceil(1000)).ok()?;
            seen.checked_add_signed(Duration::try_seconds(seconds)?)
        }
        ResetHint::Local {
            date,
            time,
            zone: Some(zone),
        } => local_instant(date, time, &zone, seen),
        ResetHint::Local {
            date,
            time,
            zone: None,
        } => local_instant(date, time, &local, seen),
    }
}

/// A wall-clock time (and as much of a date as given) in `zone`, placed near `seen`.
fn local_instant<Z: TimeZone>(
    date: Option<(u32, u32, Option<i32>)>,
    time: NaiveTime,
    zone: &Z,
    seen: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let seen_local = seen.with_timezone(zone);
    let at = |d: NaiveDate| {
        zone.from_local_datetime(&d.and_time(time))
            .earliest()
            .map(|t| t.with_timezone(&Utc))
    };
    match date {
        None => {
            let today = at(seen_local.date_naive())?;
            if today > seen {
                Some(today)
            } else {
                at(seen_local.date_naive().succ_opt()?)
            }
        }
        Some((month, day, Some(year))) => at(NaiveDate::from_ymd_opt(year, month, day)?),
        Some((month, day, None)) => {
            // The year that puts it nearest to `seen` (Dec 31st seen on Jan 1st is
            // last year's; Jan 1st seen on Dec 31st is next year's).
            let year = seen_local.year();
            [year - 1, year, year + 1]
                .into_iter()
                .filter_map(|y| at(NaiveDate::from_ymd_opt(y, month, day)?))
                .min_by_key(|t| (*t - seen).num_seconds().abs())
        }
    }
}

/// The hit's reset instant: its own hint, else what its texts say.
pub fn hit_reset(hit: &QuotaHit, seen: DateTime<Utc>, local: FixedOffset) -> Option<DateTime<Utc>> {
    hit.reset
        .or_else(|| hit.resets_at.as_deref().and_then(raw_reset_hint))
        .or_else(|| reset_hint(&hit.message))
        .and_then(|h| reset_instant(&h, seen, local))
}

/// A hint from a raw reset value as a CLI's structured field holds it (`resetsAt`: an epoch
/// in seconds or milliseconds, an RFC 3339 time, or the words of the message).
pub fn raw_reset_hint(raw: &str) -> Option<ResetHint> {
    let raw = raw.trim().trim_matches('"');
    if let Some(seconds) = epoch_seconds(raw) {
        return Some(ResetHint::Epoch { seconds });
    }
    if let Ok(at) = DateTime::parse_from_rfc3339(raw) {
        return Some(ResetHint::Epoch {
            seconds: at.timestamp(),
        });
    }
    reset_hint(&format!("resets {raw}")).or_else(|| reset_hint(&format!("try again in {raw}")))
}

/// A delay hint; `None` for a figure no limit has (negative, not finite, over a year).
fn after(seconds: f64) -> Option<ResetHint> {
    (seconds.is_finite() && (0.0..=366.0 * 86_400.0).contains(&seconds)).then(|| ResetHint::After {
        millis: (seconds * 1000.0).round() as u64,
    })
}

/// Epoch seconds from 9–13 digits (13 are milliseconds).
fn epoch_seconds(digits: &str) -> Option<i64> {
    if !(9..=13).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    Some(if digits.len() >= 12 { n / 1000 } else { n })
}

/// Seconds in a duration at the start of `text`: `4 days 2 hours 13 minutes`, `1h49m8s`,
/// `31.44s`, `1 seconds`. `None` unless at least one `<number> <unit>` is there.
fn duration_seconds(text: &str) -> Option<f64> {
    let mut rest = text;
    let mut total = 0.0;
    let mut parts = 0;
    while let Some(c) = DURATION_PART.captures(rest) {
        let n: f64 = c[1].parse().ok()?;
        let unit = c[2].to_ascii_lowercase();
        let scale = if unit.starts_with("ms") || unit.starts_with("milli") {
            0.001
        } else if unit.starts_with('s') {
            1.0
        } else if unit.starts_with('m') {
            60.0
        } else if unit.starts_with('h') {
            3600.0
        } else if unit.starts_with('d') {
            86_400.0
        } else {
            604_800.0
        };
        total += n * scale;
        parts += 1;
        rest = &rest[c.get(0)?.end()..];
    }
    (parts > 0).then_some(total)
}

fn month_number(name: &str) -> Option<u32> {
    let months = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let lower = name.to_ascii_lowercase();
    months
        .iter()
        .position(|m| lower.starts_with(m))
        .map(|i| i as u32 + 1)
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

    // ------------------------------------------------------------ reset instants

    /// 2026-11-30 14:00:00 UTC, a Monday.
    fn seen() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 14, 0, 0).unwrap()
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> Option<DateTime<Utc>> {
        Some(Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap())
    }

    /// The instant `text` names, seen at [`seen`] by a CLI `offset_hours` from UTC.
    fn check_reset(text: &str, offset_hours: i32, want: Option<DateTime<Utc>>) {
        let offset = FixedOffset::east_opt(offset_hours * 3600).unwrap();
        let got = reset_hint(text).and_then(|h| reset_instant(&h, seen(), offset));
        assert_eq!(got, want, "reset of {text:?} at UTC{offset_hours:+}");
    }

    #[test]
    fn claude_resets() {
        // The banner's epoch (tests/fixtures/claude/usage_limit_constructed.ndjson).
        check_reset(
            "Claude AI usage limit reached|1755772800",
            0,
            utc(2025, 8, 21, 10, 40, 0),
        );
        // Milliseconds are read as such; the offset never matters for an epoch.
        check_reset(
            "Claude AI usage limit reached|1796054700000",
            5,
            utc(2026, 11, 30, 16, 5, 0),
        );
        // The subscription banners name a local hour.
        check_reset(
            "5-hour limit reached ∙ resets 3pm",
            0,
            utc(2026, 11, 30, 15, 0, 0),
        );
        check_reset(
            "Weekly limit reached ∙ resets 5am",
            0,
            utc(2026, 12, 1, 5, 0, 0),
        );
        check_reset(
            "Weekly limit reached ∙ resets 5am",
            2,
            utc(2026, 12, 1, 3, 0, 0),
        );
        check_reset(
            "You've hit your session limit · resets 1pm (Europe/Berlin)",
            1,
            utc(2026, 12, 1, 12, 0, 0),
        );
        // The API's 429 text as Claude Code 2.1 prints it names no time.
        check_reset("API Error: Request rejected (429) · This request would exceed your account's rate limit. Please try again later.", 0, None);
    }

    #[test]
    fn rate_limit_event_resets_at() {
        let at = |raw: &str| {
            raw_reset_hint(raw)
                .and_then(|h| reset_instant(&h, seen(), FixedOffset::east_opt(0).unwrap()))
        };
        assert_eq!(at("1755772800"), utc(2025, 8, 21, 10, 40, 0));
        assert_eq!(at("\"1796054700\""), utc(2026, 11, 30, 16, 5, 0));
        assert_eq!(at("2026-12-01T17:25:00Z"), utc(2026, 12, 1, 17, 25, 0));
        assert_eq!(at("5am"), utc(2026, 12, 1, 5, 0, 0));
        assert_eq!(at("soon"), None);
    }

    #[test]
    fn codex_resets() {
        // Codex prints the machine's local time with the date and year when it is not today.
        check_reset(
            "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing), visit https://chatgpt.com/codex/settings/usage to purchase more credits or try again at Dec 1st, 2026 10:04 PM.",
            0,
            utc(2026, 12, 1, 22, 4, 0),
        );
        check_reset(
            "You've hit your usage limit. Try again at Dec 1st, 2026 10:04 PM.",
            -5,
            utc(2026, 12, 2, 3, 4, 0),
        );
        // Without a year: the nearest one (here next year's January).
        check_reset("try again at Jan 2nd 9:00 AM", 0, utc(2027, 1, 2, 9, 0, 0));
        // Without a date: today's, or tomorrow's once today's has passed.
        check_reset(
            "You've hit your usage limit. Visit https://chatgpt.com/codex/settings/usage to purchase more credits or try again at 3:28 PM.",
            0,
            utc(2026, 11, 30, 15, 28, 0),
        );
        check_reset("try again at 3:28 PM.", 2, utc(2026, 12, 1, 13, 28, 0));
        check_reset("try again at 12:05 AM", 0, utc(2026, 12, 1, 0, 5, 0));
        // The relative forms.
        check_reset(
            "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing), or try again in 4 days 2 hours 13 minutes.",
            0,
            utc(2026, 12, 4, 16, 13, 0),
        );
        check_reset(
            "try again in 1 hour 5 minutes",
            0,
            utc(2026, 11, 30, 15, 5, 0),
        );
        check_reset("Try again in 45 minutes.", 0, utc(2026, 11, 30, 14, 45, 0));
        check_reset(
            "try again in 1 day, 3 hours, and 2 minutes",
            0,
            utc(2026, 12, 1, 17, 2, 0),
        );
        // Its transient reconnect notice names no reset.
        check_reset(
            "Reconnecting... 1/5 (exceeded retry limit, last status: 429 Too Many Requests)",
            0,
            None,
        );
    }

    #[test]
    fn gemini_and_kimi_resets() {
        check_reset(
            "TerminalQuotaError: You have exhausted your capacity on this model. Your quota will reset after 1h49m8s.",
            0,
            utc(2026, 11, 30, 15, 49, 8),
        );
        check_reset(
            "Your quota will reset after 39s.",
            0,
            utc(2026, 11, 30, 14, 0, 39),
        );
        // Fractions round up: never wake before the limit lifts.
        check_reset("Quota exceeded for metric: generate_content_free_tier_input_token_count, limit: 16000\nPlease retry in 31.44s.", 0, utc(2026, 11, 30, 14, 0, 32));
        check_reset(
            r#"{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"34s"}"#,
            0,
            utc(2026, 11, 30, 14, 0, 34),
        );
        // The daily quota text names no time: the caller's default cool-down applies.
        check_reset(
            "You have exhausted your daily quota on this model. 429 RESOURCE_EXHAUSTED",
            0,
            None,
        );
        check_reset(
            "Error code: 429 - {'error': {'message': 'Your account org-xxxx request reached organization max RPM: 3, please try again after 1 seconds', 'type': 'rate_limit_reached_error'}}",
            0,
            utc(2026, 11, 30, 14, 0, 1),
        );
    }

    #[test]
    fn http_headers() {
        check_reset(
            "429 Too Many Requests; retry-after: 3600",
            0,
            utc(2026, 11, 30, 15, 0, 0),
        );
        check_reset(
            r#"{"retry-after-ms": "1500"}"#,
            0,
            utc(2026, 11, 30, 14, 0, 2),
        );
        check_reset(
            "retry-after: Tue, 01 Dec 2026 07:28:00 GMT",
            3,
            utc(2026, 12, 1, 7, 28, 0),
        );
        check_reset(
            "anthropic-ratelimit-unified-status: rejected\nanthropic-ratelimit-unified-reset: 1796054700",
            0,
            utc(2026, 11, 30, 16, 5, 0),
        );
        check_reset(
            "x-ratelimit-reset-requests: 6m0s",
            0,
            utc(2026, 11, 30, 14, 6, 0),
        );
        check_reset(
            "x-ratelimit-reset-tokens: 1s",
            0,
            utc(2026, 11, 30, 14, 0, 1),
        );
    }

    #[test]
    fn no_time_is_no_reset() {
        for text in [
            "",
            "rate limit",
            "resets 5",
            "try again at Feb 30th, 2026 1:00 PM",
            "try again at 13:61",
            "try again in a while",
            "retry-after: 99999999999",
        ] {
            check_reset(text, 0, None);
        }
    }

    #[test]
    fn hits_carry_the_hint_and_the_words() {
        let h = hit("You've hit your usage limit. Try again at Dec 1st, 2026 10:04 PM.");
        assert_eq!(h.resets_at.as_deref(), Some("Dec 1st, 2026 10:04 PM"));
        let offset = FixedOffset::east_opt(0).unwrap();
        assert_eq!(hit_reset(&h, seen(), offset), utc(2026, 12, 1, 22, 4, 0));
        let h = hit("Your quota will reset after 1h49m8s.");
        assert_eq!(h.resets_at.as_deref(), Some("after 1h49m8s"));
        let h = hit("Please retry in 31.44s.");
        assert_eq!(h.resets_at.as_deref(), Some("31.44s"));
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

    #[test]
    fn a_named_zone_is_kept_and_used() {
        let hint = reset_hint("You've hit your limit · resets 1pm (America/Mexico_City)");
        let Some(ResetHint::Local { zone, time, date }) = hint else {
            panic!("{hint:?}")
        };
        assert_eq!(zone, Some(chrono_tz::America::Mexico_City));
        assert_eq!(time, NaiveTime::from_hms_opt(13, 0, 0).unwrap_or_default());
        assert_eq!(date, None);
        // An unknown name is no zone (the machine's offset applies), never an error.
        let Some(ResetHint::Local { zone, .. }) = reset_hint("resets 5am (Mars/Olympus)") else {
            panic!("hint")
        };
        assert_eq!(zone, None);
        // DST: 1pm in Mexico City is UTC-6 all year (no DST since 2022); New York in July is -4.
        let seen = Utc
            .with_ymd_and_hms(2026, 7, 1, 12, 0, 0)
            .single()
            .unwrap_or_default();
        let ny =
            reset_hint("resets 3pm (America/New_York)").unwrap_or(ResetHint::After { millis: 0 });
        assert_eq!(
            reset_instant(
                &ny,
                seen,
                FixedOffset::east_opt(0).unwrap_or_else(|| unreachable!())
            ),
            Utc.with_ymd_and_hms(2026, 7, 1, 19, 0, 0).single()
        );
    }
}
