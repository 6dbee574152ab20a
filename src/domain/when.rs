//! Times as people read them (issue 29: `resets 1796113162` was printed): the clock time in
//! UTC, with the date when it is not today, and how far it is from now — `14:04 UTC (in 52
//! min)`, `Dec 02 09:00 UTC (in 18 h 56 min)`, `13:10 UTC (54 min ago)`. Every time the CLI
//! shows a person goes through here; JSON keeps RFC 3339.
//!
//! Pure: `now` is passed in.

use chrono::{DateTime, Datelike, Utc};

/// `14:04 UTC (in 52 min)`: [`clock`] and [`relative`].
pub fn human(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!("{} ({})", clock(at, now), relative(at, now))
}

/// `14:04 UTC` today, `Dec 02 14:04 UTC` another day this year, `2027-01-02 14:04 UTC`
/// another year.
pub fn clock(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if at.date_naive() == now.date_naive() {
        at.format("%H:%M UTC").to_string()
    } else if at.year() == now.year() {
        at.format("%b %d %H:%M UTC").to_string()
    } else {
        at.format("%Y-%m-%d %H:%M UTC").to_string()
    }
}

/// `in 52 min`, `3 h 5 min ago`, `in 2 d 4 h`, `now` (within a second).
pub fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (at - now).num_seconds();
    if secs == 0 {
        return "now".into();
    }
    let span = span(secs.unsigned_abs());
    if secs > 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// `42 s`, `52 min`, `3 h 5 min`, `2 d 4 h`: the two largest units, rounded down.
pub fn span(secs: u64) -> String {
    let (d, h, m) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60);
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{m} min"),
        3600..=86_399 if m == 0 => format!("{h} h"),
        3600..=86_399 => format!("{h} h {m} min"),
        _ if h == 0 => format!("{d} d"),
        _ => format!("{d} d {h} h"),
    }
}

/// A reset time as an agent CLI gave it, for text stored or printed without a clock at
/// hand: epoch seconds or milliseconds become `2026-12-01 14:04 UTC`; other text stays.
pub fn reset_absolute(raw: &str) -> String {
    match epoch(raw) {
        Some(at) => at.format("%Y-%m-%d %H:%M UTC").to_string(),
        None => raw.to_string(),
    }
}

/// A limit message as a CLI wrote it, for people: Claude Code's classic
/// `Claude AI usage limit reached|1796054700` ends in the reset's epoch seconds, which
/// becomes `(resets 14:05 UTC, in 52 min)` today, `(resets 2026-12-01 14:05 UTC)` another day.
pub fn message_text(message: &str, now: DateTime<Utc>) -> String {
    if let Some((text, tail)) = message.rsplit_once('|') {
        if let Some(at) = epoch(tail) {
            let when = if at.date_naive() == now.date_naive() {
                format!("{}, {}", clock(at, now), relative(at, now))
            } else {
                at.format("%Y-%m-%d %H:%M UTC").to_string()
            };
            return format!("{} (resets {when})", text.trim_end());
        }
    }
    message.to_string()
}

/// A limit message without the reset's epoch seconds Claude Code's classic message ends
/// in (`Claude AI usage limit reached|1796054700` → `Claude AI usage limit reached`), for
/// text that names the reset itself; any other message stays as it is.
pub fn without_epoch_tail(message: &str) -> &str {
    match message.rsplit_once('|') {
        Some((text, tail)) if epoch(tail).is_some() => text.trim_end(),
        _ => message,
    }
}

/// 9 to 13 digits: epoch seconds (up to 11) or milliseconds.
fn epoch(raw: &str) -> Option<DateTime<Utc>> {
    let digits = raw.trim();
    if !(9..=13).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = digits.parse::<i64>().ok()?;
    DateTime::from_timestamp(if digits.len() >= 12 { n / 1000 } else { n }, 0)
}

/// A reset time as an agent CLI gave it, for people: epoch seconds (or milliseconds, as
/// some CLIs and rate-limit headers send) become [`human`]; any other text (`5am`,
/// `Dec 1st, 2026 10:04 PM`) is the CLI's own words and stays as it is.
pub fn reset_text(raw: &str, now: DateTime<Utc>) -> String {
    match epoch(raw) {
        Some(at) => human(at, now),
        None => raw.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    #[test]
    fn times_for_people() {
        let now = at(2026, 12, 1, 13, 12, 0);
        assert_eq!(
            human(at(2026, 12, 1, 14, 4, 0), now),
            "14:04 UTC (in 52 min)"
        );
        assert_eq!(
            human(at(2026, 12, 1, 13, 10, 30), now),
            "13:10 UTC (1 min ago)"
        );
        assert_eq!(human(now, now), "13:12 UTC (now)");
        assert_eq!(
            human(at(2026, 12, 2, 9, 0, 0), now),
            "Dec 02 09:00 UTC (in 19 h 48 min)"
        );
        assert_eq!(
            human(at(2027, 1, 3, 13, 12, 0), now),
            "2027-01-03 13:12 UTC (in 33 d)"
        );
        assert_eq!(
            relative(now + chrono::Duration::seconds(42), now),
            "in 42 s"
        );
        assert_eq!(relative(now - chrono::Duration::hours(3), now), "3 h ago");
        assert_eq!(span(2 * 86_400 + 4 * 3600 + 59), "2 d 4 h");
    }

    /// The message of issue 29: `resets 1796113162` (epoch seconds from a CLI's JSON).
    #[test]
    fn epoch_resets_become_times() {
        let now = at(2026, 12, 1, 13, 12, 0);
        let reset = at(2026, 12, 1, 14, 4, 0).timestamp();
        assert_eq!(reset_text(&reset.to_string(), now), "14:04 UTC (in 52 min)");
        assert_eq!(
            reset_text(&(reset * 1000).to_string(), now),
            "14:04 UTC (in 52 min)"
        );
        assert_eq!(reset_text("5am", now), "5am");
        assert_eq!(reset_text("after 1h49m8s", now), "after 1h49m8s");
        assert_eq!(reset_text("12345", now), "12345");
        assert_eq!(reset_absolute(&reset.to_string()), "2026-12-01 14:04 UTC");
        assert_eq!(reset_absolute("5am"), "5am");
        assert_eq!(
            message_text(&format!("Claude AI usage limit reached|{reset}"), now),
            "Claude AI usage limit reached (resets 14:04 UTC, in 52 min)"
        );
        assert_eq!(message_text("a | b", now), "a | b");
        assert_eq!(
            without_epoch_tail(&format!("Claude AI usage limit reached|{reset}")),
            "Claude AI usage limit reached"
        );
        assert_eq!(without_epoch_tail("a | b"), "a | b");
        assert_eq!(without_epoch_tail("limit|12345"), "limit|12345");
    }
}
