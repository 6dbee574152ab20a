//! What a failed GitHub answer means and how long to wait: pure classification and policy.
//!
//! Owns: the retry bounds (`FaultPolicy`), whether a request may be repeated (`Repeat`), and
//! `classify_failure` over status, rate-limit headers and body (403/429 with `retry-after` /
//! `x-ratelimit-reset`, secondary limits). Must not: sleep or send; the loop is the client's.

use std::time::Duration;

use serde_json::Value;

/// Bounds on waiting and retrying.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPolicy {
    /// Longest rate-limit wait the client sits through; a longer one is returned as
    /// [`GithubError::RateLimited`](super::error::GithubError::RateLimited) so the daemon
    /// moves on.
    pub max_rate_limit_wait: Duration,
    /// Wait for a secondary rate limit that names no time (GitHub says: at least a minute).
    pub secondary_limit_wait: Duration,
    /// Rate-limit waits per request.
    pub max_rate_limit_retries: u32,
    /// Retries of a repeatable request after a 5xx or a transport error.
    pub max_server_retries: u32,
    /// First backoff; doubles per retry.
    pub backoff: Duration,
    /// Limit for one request (connect, headers and body).
    pub request_timeout: Duration,
}

impl Default for FaultPolicy {
    fn default() -> Self {
        FaultPolicy {
            max_rate_limit_wait: Duration::from_secs(60),
            secondary_limit_wait: Duration::from_secs(60),
            max_rate_limit_retries: 3,
            max_server_retries: 3,
            backoff: Duration::from_secs(1),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Whether a request may be sent again when its outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// GET, DELETE of a label, adding labels: repeating changes nothing.
    Safe,
    /// Creating a comment or a pull request: only a definite refusal (rate limit) is retried.
    Never,
}

/// What a failed answer means. Pure classification of status, headers and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Refused for rate; wait this long, then the same request may go again.
    RateLimited {
        wait_secs: u64,
    },
    Server,
    Unauthorized,
    Forbidden {
        message: String,
    },
    NotFound,
    Other {
        message: String,
    },
}

/// The rate-limit headers of an answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitHeaders<'a> {
    pub retry_after: Option<&'a str>,
    pub remaining: Option<&'a str>,
    pub reset: Option<&'a str>,
}

/// Classify a non-2xx answer. `now_epoch` is the current Unix time in seconds;
/// `secondary_wait` is used for a secondary limit that gives no time.
pub fn classify_failure(
    status: u16,
    limits: &LimitHeaders<'_>,
    body: &str,
    now_epoch: u64,
    secondary_wait: Duration,
) -> Failure {
    let message = error_message(body);
    let retry_after = limits
        .retry_after
        .and_then(|v| v.trim().parse::<u64>().ok());
    let exhausted = limits.remaining.map(str::trim) == Some("0");
    let reset_wait = limits
        .reset
        .and_then(|v| v.trim().parse::<u64>().ok())
        // One second of slack: GitHub's reset is a whole second and clocks drift.
        .map(|reset| reset.saturating_sub(now_epoch) + 1);
    let mentions_limit = message.to_ascii_lowercase().contains("rate limit");
    if status == 429 || (status == 403 && (retry_after.is_some() || exhausted || mentions_limit)) {
        let wait_secs = retry_after
            .or(if exhausted { reset_wait } else { None })
            .unwrap_or(secondary_wait.as_secs());
        return Failure::RateLimited { wait_secs };
    }
    match status {
        401 => Failure::Unauthorized,
        403 => Failure::Forbidden { message },
        404 => Failure::NotFound,
        500..=599 => Failure::Server,
        _ => Failure::Other { message },
    }
}

/// GitHub's error body is `{"message": …, "errors": [...]}`; fall back to the raw text.
fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.get("message"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let details = parsed
        .as_ref()
        .and_then(|v| v.get("errors"))
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| {
                    let text = |k: &str| e.get(k).and_then(Value::as_str);
                    match (text("message"), text("field"), text("code")) {
                        (Some(m), _, _) => Some(m.to_string()),
                        (None, Some(field), Some(code)) => Some(format!("{field}: {code}")),
                        _ => None,
                    }
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .filter(|d| !d.is_empty());
    match (message, details) {
        (Some(m), Some(d)) => format!("{m} ({d})"),
        (Some(m), None) => m,
        _ => body.chars().take(200).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_failure(status: u16, limits: LimitHeaders<'_>, body: &str, expect: Failure) {
        let got = classify_failure(status, &limits, body, 1_000, Duration::from_secs(60));
        assert_eq!(got, expect, "status {status}, {limits:?}, {body}");
    }

    #[test]
    fn failures_are_classified() {
        let none = LimitHeaders::default();
        let rate = |wait_secs| Failure::RateLimited { wait_secs };
        check_failure(
            429,
            LimitHeaders {
                retry_after: Some("7"),
                ..none.clone()
            },
            "",
            rate(7),
        );
        check_failure(429, none.clone(), "", rate(60));
        check_failure(
            403,
            LimitHeaders {
                remaining: Some("0"),
                reset: Some("1010"),
                ..none.clone()
            },
            r#"{"message":"API rate limit exceeded"}"#,
            rate(11),
        );
        // A reset already in the past still waits the one second of slack.
        check_failure(
            403,
            LimitHeaders {
                remaining: Some("0"),
                reset: Some("900"),
                ..none.clone()
            },
            "",
            rate(1),
        );
        check_failure(
            403,
            none.clone(),
            r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes."}"#,
            rate(60),
        );
        check_failure(
            403,
            LimitHeaders {
                remaining: Some("4999"),
                ..none.clone()
            },
            r#"{"message":"Resource not accessible by integration"}"#,
            Failure::Forbidden {
                message: "Resource not accessible by integration".into(),
            },
        );
        check_failure(
            401,
            none.clone(),
            r#"{"message":"Bad credentials"}"#,
            Failure::Unauthorized,
        );
        check_failure(404, none.clone(), "", Failure::NotFound);
        check_failure(502, none.clone(), "<html>", Failure::Server);
        check_failure(
            422,
            none.clone(),
            r#"{"message":"Validation Failed","errors":[{"message":"A pull request already exists for o:b."}]}"#,
            Failure::Other {
                message: "Validation Failed (A pull request already exists for o:b.)".into(),
            },
        );
        check_failure(
            422,
            none.clone(),
            r#"{"message":"Validation Failed","errors":[{"resource":"PullRequest","field":"head","code":"invalid"}]}"#,
            Failure::Other {
                message: "Validation Failed (head: invalid)".into(),
            },
        );
    }
}
