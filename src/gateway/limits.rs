//! When a usage limit lifts, from the provider's response headers (pure): the exact instant
//! the API states, instead of the CLI's words.
//!
//! Read only from a refused answer (429, or Anthropic's `unified-status: rejected`), in
//! this order of authority:
//! 1. `anthropic-ratelimit-unified-reset` (epoch seconds: the subscription window that
//!    refused), else the latest `anthropic-ratelimit-unified-<window>-reset` whose window's
//!    status is `rejected`;
//! 2. `retry-after` (seconds or an HTTP date) / `retry-after-ms`;
//! 3. the latest of OpenAI's `x-ratelimit-reset-requests` / `-tokens` (durations such as
//!    `6m0s`, `1.5s`) and Anthropic's per-bucket `anthropic-ratelimit-*-reset` (RFC 3339).
//!
//! Values are parsed by `agents::quota` (the same parser the CLIs' texts go through), so
//! the header spellings and the text fallback cannot drift apart.

use chrono::{DateTime, FixedOffset, Utc};
use http::HeaderMap;

use crate::agents::quota::{raw_reset_hint, reset_hint, reset_instant};

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// Whether the answer is a usage or rate limit (something a reset instant belongs to).
pub fn is_limited(status: u16, headers: &HeaderMap) -> bool {
    status == 429 || header(headers, "anthropic-ratelimit-unified-status") == Some("rejected")
}

/// The instant the limit that refused this answer lifts, if the headers say.
pub fn reset_from_headers(
    status: u16,
    headers: &HeaderMap,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    if !is_limited(status, headers) {
        return None;
    }
    let utc = FixedOffset::east_opt(0)?;
    let raw = |v: &str| raw_reset_hint(v).and_then(|h| reset_instant(&h, now, utc));
    if let Some(at) = header(headers, "anthropic-ratelimit-unified-reset").and_then(raw) {
        return Some(at);
    }
    let mut windows: Vec<DateTime<Utc>> = Vec::new();
    let mut buckets: Vec<DateTime<Utc>> = Vec::new();
    for (name, value) in headers {
        let n = name.as_str();
        let Ok(v) = value.to_str() else { continue };
        if let Some(window) = n
            .strip_prefix("anthropic-ratelimit-unified-")
            .and_then(|w| w.strip_suffix("-reset"))
        {
            let status = format!("anthropic-ratelimit-unified-{window}-status");
            if header(headers, &status) == Some("rejected") {
                windows.extend(raw(v));
            }
        } else if n.starts_with("x-ratelimit-reset") {
            buckets.extend(
                reset_hint(&format!("x-ratelimit-reset-requests: {v}"))
                    .or_else(|| raw_reset_hint(v))
                    .and_then(|h| reset_instant(&h, now, utc)),
            );
        } else if n.starts_with("anthropic-ratelimit-") && n.ends_with("-reset") {
            buckets.extend(raw(v));
        }
    }
    if let Some(at) = windows.into_iter().max() {
        return Some(at);
    }
    for name in ["retry-after-ms", "retry-after"] {
        if let Some(v) = header(headers, name) {
            if let Some(at) =
                reset_hint(&format!("{name}: {v}")).and_then(|h| reset_instant(&h, now, utc))
            {
                return Some(at);
            }
        }
    }
    buckets.into_iter().max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use http::{HeaderName, HeaderValue};

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }

    #[test]
    fn reset_instants_by_authority() {
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap();
        let at = |s: i64| Some(now + chrono::Duration::seconds(s));
        let epoch = (now + chrono::Duration::seconds(3600))
            .timestamp()
            .to_string();
        let later = (now + chrono::Duration::seconds(7200))
            .timestamp()
            .to_string();
        let cases: Vec<(u16, HeaderMap, Option<DateTime<Utc>>)> = vec![
            // What the scripted (and real) Anthropic API sends with a 429.
            (
                429,
                h(&[
                    ("retry-after", "60"),
                    ("anthropic-ratelimit-unified-status", "rejected"),
                    ("anthropic-ratelimit-unified-reset", &epoch),
                    ("anthropic-ratelimit-unified-5h-status", "rejected"),
                    ("anthropic-ratelimit-unified-5h-reset", &later),
                ]),
                at(3600),
            ),
            // No overall reset: the latest rejected window.
            (
                429,
                h(&[
                    ("anthropic-ratelimit-unified-5h-status", "rejected"),
                    ("anthropic-ratelimit-unified-5h-reset", &epoch),
                    ("anthropic-ratelimit-unified-7d-status", "rejected"),
                    ("anthropic-ratelimit-unified-7d-reset", &later),
                    ("anthropic-ratelimit-unified-opus-status", "allowed"),
                    ("anthropic-ratelimit-unified-opus-reset", "9999999999"),
                ]),
                at(7200),
            ),
            (429, h(&[("retry-after", "120")]), at(120)),
            (429, h(&[("retry-after-ms", "1500")]), at(2)),
            (
                429,
                h(&[("retry-after", "Tue, 01 Dec 2026 10:30:00 GMT")]),
                at(5400),
            ),
            (
                429,
                h(&[
                    ("x-ratelimit-reset-requests", "6m0s"),
                    ("x-ratelimit-reset-tokens", "1.5s"),
                ]),
                at(360),
            ),
            (
                429,
                h(&[("anthropic-ratelimit-tokens-reset", "2026-12-01T09:05:00Z")]),
                at(300),
            ),
            // A 200 with rate-limit headers is not a limit.
            (
                200,
                h(&[("retry-after", "60"), ("x-ratelimit-reset-requests", "1s")]),
                None,
            ),
            // 200 but the subscription refused.
            (
                200,
                h(&[
                    ("anthropic-ratelimit-unified-status", "rejected"),
                    ("anthropic-ratelimit-unified-reset", &epoch),
                ]),
                at(3600),
            ),
            (429, h(&[]), None),
            (429, h(&[("retry-after", "soon")]), None),
        ];
        for (status, headers, want) in cases {
            assert_eq!(
                reset_from_headers(status, &headers, now),
                want,
                "{status} {headers:?}"
            );
        }
    }
}
