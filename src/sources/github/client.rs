//! The GitHub REST client: octocrab set up for polyphony, raw calls, and fault handling.
//!
//! Owns: token and API-URL resolution (pure, over a lookup closure), the octocrab instance,
//! and the one request loop every call goes through: rate limits (403/429 with
//! `x-ratelimit-reset` / `retry-after`, secondary limits) wait, bounded; 5xx and transport
//! errors back off, bounded, only for requests that are safe to repeat; 401/403/404 become
//! typed errors naming the token variable (never its value) or the resource.
//! Must not: retry a POST after an answer that leaves its effect unknown (5xx, timeout) —
//! the callers look for what the POST would have created (marker, head branch) and decide.
//! Must not log, store or put into an error the token itself.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, Method, StatusCode};
use octocrab::service::middleware::retry::RetryConfig;
use octocrab::Octocrab;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Where requests go unless `GITHUB_API_URL` says otherwise.
pub const DEFAULT_API_URL: &str = "https://api.github.com";

/// Token variables tried after the identity's own, in order.
pub const DEFAULT_TOKEN_VARS: [&str; 2] = ["GITHUB_TOKEN", "GH_TOKEN"];

/// Failure of a GitHub call.
#[derive(Debug, thiserror::Error)]
pub enum GithubError {
    #[error("no GitHub token found: tried {}; export a token with `repo` scope in one of them (or set `github_token_env` on the identity)", tried.join(", "))]
    MissingToken { tried: Vec<String> },
    #[error("the identity's `github_token_env` names ${var}, which is unset or empty: export the token as {var} (Polyphony never falls back to GITHUB_TOKEN for a named account)")]
    IdentityTokenUnset { var: String },
    #[error("the GitHub token in ${var} contains characters an HTTP header cannot carry (a newline or a control character?); re-export it without them")]
    InvalidToken { var: String },
    #[error("invalid GitHub API URL `{url}` (from GITHUB_API_URL): {reason}; export GITHUB_API_URL as an absolute URL such as https://api.github.com, or unset it")]
    InvalidApiUrl { url: String, reason: String },
    #[error("invalid repository `{value}`: {reason} (expected owner/name, e.g. octo-org/widgets)")]
    InvalidRepo { value: String, reason: String },
    #[error("GitHub rejected the token from ${token_var} (401 Unauthorized at {api_url}): it is missing, expired or revoked; create a new token with `repo` scope and export it as {token_var}")]
    Unauthorized { token_var: String, api_url: String },
    #[error("GitHub refused {what} (403 Forbidden): {message}; check that the token in ${token_var} has `repo` scope and write access")]
    Forbidden {
        what: String,
        token_var: String,
        message: String,
    },
    #[error("{what}: not found (404); check the name in `github.repos` and that the token in ${token_var} can see it")]
    NotFound { what: String, token_var: String },
    #[error("GitHub rate limit while {what}: it resets in {wait_secs}s, longer than the {max_wait_secs}s this client waits; the next poll tries again")]
    RateLimited {
        what: String,
        wait_secs: u64,
        max_wait_secs: u64,
    },
    #[error("GitHub answered {status} while {what} (after {attempts} tries)")]
    Server {
        what: String,
        status: u16,
        attempts: u32,
    },
    #[error("could not reach GitHub while {what}: {message}")]
    Transport { what: String, message: String },
    #[error("GitHub answered {status} while {what}: {message}")]
    Api {
        what: String,
        status: u16,
        message: String,
    },
    #[error("unexpected GitHub answer while {what}: {message}")]
    Decode { what: String, message: String },
    #[error("GitHub's next-page link while {what} points to `{link}`, outside the API at {api_url}; refusing to send the token there")]
    ForeignLink {
        what: String,
        link: String,
        api_url: String,
    },
}

impl GithubError {
    /// `true` for failures only the operator can fix (token, repository name, URL): the CLI
    /// maps these to exit code 2.
    pub fn is_config_error(&self) -> bool {
        matches!(
            self,
            GithubError::MissingToken { .. }
                | GithubError::IdentityTokenUnset { .. }
                | GithubError::InvalidToken { .. }
                | GithubError::InvalidApiUrl { .. }
                | GithubError::InvalidRepo { .. }
                | GithubError::Unauthorized { .. }
                | GithubError::Forbidden { .. }
                | GithubError::NotFound { .. }
        )
    }

    /// `true` when the request may have taken effect (a POST answered by 5xx or lost in
    /// transit): the caller must look before posting again.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            GithubError::Server { .. } | GithubError::Transport { .. }
        )
    }
}

/// A token and the variable it came from. `Debug` never shows the value.
#[derive(Clone)]
pub struct ResolvedToken {
    /// Name of the environment variable (for messages).
    pub var: String,
    value: String,
}

impl ResolvedToken {
    pub fn new(var: impl Into<String>, value: impl Into<String>) -> ResolvedToken {
        ResolvedToken {
            var: var.into(),
            value: value.into(),
        }
    }

    /// The token itself, for the one git push that needs it and for the scrubber.
    pub fn secret(&self) -> &str {
        &self.value
    }
}

impl fmt::Debug for ResolvedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ResolvedToken {{ var: {:?}, value: <redacted> }}",
            self.var
        )
    }
}

/// The token for an identity: its own variable alone when it names one (a named account
/// must never silently become another, issue 11), else `GITHUB_TOKEN`, else `GH_TOKEN`.
/// Empty values count as unset. Pure: `lookup` reads the environment.
pub fn resolve_token(
    identity_var: Option<&str>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<ResolvedToken, GithubError> {
    let mut tried = Vec::new();
    let candidates: Vec<&str> = match identity_var {
        Some(var) => vec![var],
        None => DEFAULT_TOKEN_VARS.to_vec(),
    };
    for var in candidates {
        tried.push(var.to_string());
        if let Some(value) = lookup(var) {
            let value = value.trim().to_string();
            if value.is_empty() {
                continue;
            }
            // octocrab builds the Authorization header with `parse().unwrap()`: a bad byte
            // would panic inside it, so refuse the token here with a message instead.
            if !value.bytes().all(|b| (0x21..0x7f).contains(&b)) {
                return Err(GithubError::InvalidToken {
                    var: var.to_string(),
                });
            }
            return Ok(ResolvedToken::new(var, value));
        }
    }
    match identity_var {
        Some(var) => Err(GithubError::IdentityTokenUnset {
            var: var.to_string(),
        }),
        None => Err(GithubError::MissingToken { tried }),
    }
}

/// The API base: `GITHUB_API_URL` when set and non-empty, else [`DEFAULT_API_URL`].
/// A path prefix (GitHub Enterprise `/api/v3`) is kept.
pub fn resolve_api_url(lookup: impl Fn(&str) -> Option<String>) -> String {
    match lookup("GITHUB_API_URL") {
        Some(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_string(),
        _ => DEFAULT_API_URL.to_string(),
    }
}

/// `url` as an absolute http(s) URI, or [`GithubError::InvalidApiUrl`] saying what is
/// wrong with it (issue 12: a bad `GITHUB_API_URL` read as "no token was found").
pub fn parse_api_url(url: &str) -> Result<http::Uri, GithubError> {
    let invalid = |reason: String| GithubError::InvalidApiUrl {
        url: url.to_string(),
        reason,
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?;
    let http = uri
        .scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https"));
    if !http || uri.authority().is_none() {
        return Err(invalid(
            "expected an absolute http(s) URL such as https://api.github.com (or https://HOST/api/v3 for GitHub Enterprise)".into(),
        ));
    }
    Ok(uri)
}

/// Bounds on waiting and retrying.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPolicy {
    /// Longest rate-limit wait the client sits through; a longer one is returned as
    /// [`GithubError::RateLimited`] so the daemon moves on.
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

/// The `rel="next"` target of a `Link` header, if any.
pub fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let mut pieces = part.split(';');
        let target = pieces.next()?.trim();
        let is_next = pieces.any(|p| {
            let p = p.trim();
            p == "rel=\"next\"" || p == "rel=next"
        });
        let url = target.strip_prefix('<')?.strip_suffix('>')?;
        is_next.then(|| url.to_string())
    })
}

/// `link` when it stays on the API at `api_url` (same scheme, host and port, under its path
/// prefix), so the token is never sent anywhere a `Link` header names (issue 11). A
/// relative link is kept as it is. Pure.
pub fn pinned_link(link: &str, api_url: &str) -> Option<String> {
    if link.starts_with('/') && !link.starts_with("//") {
        return Some(link.to_string());
    }
    let link_uri: http::Uri = link.parse().ok()?;
    let api: http::Uri = api_url.parse().ok()?;
    let same_origin = link_uri.scheme() == api.scheme()
        && link_uri
            .authority()
            .zip(api.authority())
            .is_some_and(|(l, a)| {
                l.host().eq_ignore_ascii_case(a.host())
                    && l.port_u16() == a.port_u16()
                    && !l.as_str().contains('@')
            });
    let prefix = api.path().trim_end_matches('/');
    let under_prefix = link_uri
        .path()
        .strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    (same_origin && under_prefix).then(|| link.to_string())
}

/// Percent-encode one path segment or query value (everything but RFC 3986 unreserved).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A 2xx answer: status, headers and body text.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json<T: DeserializeOwned>(&self, what: &str) -> Result<T, GithubError> {
        serde_json::from_str(&self.body).map_err(|e| GithubError::Decode {
            what: what.to_string(),
            message: e.to_string(),
        })
    }
}

/// The GitHub client every source call goes through.
#[derive(Clone)]
pub struct GithubClient {
    octo: Octocrab,
    api_url: String,
    token_var: String,
    policy: FaultPolicy,
    /// The token's own login (`GET /user`), read once.
    viewer: std::sync::Arc<tokio::sync::OnceCell<String>>,
    /// Validators and bodies of conditional GETs, shared by clones (see `conditional`).
    pub(super) etags: std::sync::Arc<std::sync::Mutex<super::conditional::EtagCache>>,
}

impl fmt::Debug for GithubClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GithubClient")
            .field("api_url", &self.api_url)
            .field("token_var", &self.token_var)
            .finish_non_exhaustive()
    }
}

impl GithubClient {
    /// A client for `api_url` authenticated with `token`.
    pub fn new(
        api_url: &str,
        token: ResolvedToken,
        policy: FaultPolicy,
    ) -> Result<GithubClient, GithubError> {
        let api_url = api_url.trim_end_matches('/').to_string();
        let invalid = |reason: String| GithubError::InvalidApiUrl {
            url: api_url.clone(),
            reason,
        };
        let uri = parse_api_url(&api_url)?;
        // Our own loop handles retries: octocrab's default also re-sends POSTs.
        let octo = Octocrab::builder()
            .personal_token(token.value)
            .add_retry_config(RetryConfig::None)
            .set_connect_timeout(Some(policy.request_timeout))
            .set_read_timeout(Some(policy.request_timeout))
            .base_uri(uri)
            .and_then(|b| b.build())
            .map_err(|e| invalid(e.to_string()))?;
        Ok(GithubClient {
            octo,
            api_url,
            token_var: token.var,
            policy,
            viewer: Default::default(),
            etags: Default::default(),
        })
    }

    /// The login of the token's user (`GET /user`, asked once per client): the author of
    /// every comment we write, so the only author whose hidden markers we honour.
    pub async fn viewer_login(&self) -> Result<&str, GithubError> {
        self.viewer
            .get_or_try_init(|| async {
                let user: super::model::User = self
                    .get_json("reading the token's own user", "/user")
                    .await?;
                Ok(user.login)
            })
            .await
            .map(String::as_str)
    }

    /// A client from the environment: `GITHUB_API_URL`, and the token of `identity_var`,
    /// else `GITHUB_TOKEN`, else `GH_TOKEN`.
    pub fn from_env(
        identity_var: Option<&str>,
        lookup: impl Fn(&str) -> Option<String>,
        policy: FaultPolicy,
    ) -> Result<GithubClient, GithubError> {
        let api_url = resolve_api_url(&lookup);
        // The URL first: with both wrong, the bad URL is the surprising half.
        parse_api_url(&api_url)?;
        let token = resolve_token(identity_var, &lookup)?;
        GithubClient::new(&api_url, token, policy)
    }

    pub fn api_url(&self) -> &str {
        &self.api_url
    }

    /// The variable the token came from (for messages).
    pub fn token_var(&self) -> &str {
        &self.token_var
    }

    pub(crate) fn not_found(&self, what: impl Into<String>) -> GithubError {
        GithubError::NotFound {
            what: what.into(),
            token_var: self.token_var.clone(),
        }
    }

    /// GET `path` and decode it.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
    ) -> Result<T, GithubError> {
        self.send(Method::GET, path, None, Repeat::Safe, what)
            .await?
            .json(what)
    }

    /// GET every page of a list, following `Link: rel="next"`.
    pub async fn get_all_pages<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
    ) -> Result<Vec<T>, GithubError> {
        self.pages(what, path, false).await
    }

    /// Every page of a list; `conditional`: each page through [`GithubClient::get_cached`].
    pub(super) async fn pages<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        conditional: bool,
    ) -> Result<Vec<T>, GithubError> {
        let mut items = Vec::new();
        let mut next = Some(path.to_string());
        let mut pages = 0u32;
        while let Some(url) = next.take() {
            pages += 1;
            let page_what = format!("{what} (page {pages})");
            let answer = if conditional {
                self.get_cached(&page_what, &url).await?
            } else {
                self.send(Method::GET, &url, None, Repeat::Safe, &page_what)
                    .await?
            };
            let page: Vec<T> = answer.json(&page_what)?;
            items.extend(page);
            next = match answer
                .headers
                .get(http::header::LINK)
                .and_then(|v| v.to_str().ok())
                .and_then(next_link)
            {
                Some(link) => match pinned_link(&link, &self.api_url) {
                    Some(link) => Some(link),
                    None => {
                        return Err(GithubError::ForeignLink {
                            what: page_what,
                            link,
                            api_url: self.api_url.clone(),
                        })
                    }
                },
                None => None,
            };
        }
        Ok(items)
    }

    pub async fn post_json<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        body: &Value,
        repeat: Repeat,
    ) -> Result<T, GithubError> {
        self.send(Method::POST, path, Some(body), repeat, what)
            .await?
            .json(what)
    }

    /// DELETE `path`; `Ok(false)` when it was already gone (404).
    pub async fn delete(&self, what: &str, path: &str) -> Result<bool, GithubError> {
        match self
            .send(Method::DELETE, path, None, Repeat::Safe, what)
            .await
        {
            Ok(_) => Ok(true),
            Err(GithubError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One request through the fault loop. `target` is a path (`/repos/…`) or an absolute
    /// URL from a `Link` header.
    pub async fn send(
        &self,
        method: Method,
        target: &str,
        body: Option<&Value>,
        repeat: Repeat,
        what: &str,
    ) -> Result<Answer, GithubError> {
        self.send_with_headers(method, target, body, None, repeat, what)
            .await
    }

    /// [`GithubClient::send`] with extra request headers (only GETs carry them). A `304 Not
    /// Modified` is an answer, not a failure: only conditional requests get one.
    pub async fn send_with_headers(
        &self,
        method: Method,
        target: &str,
        body: Option<&Value>,
        headers: Option<&HeaderMap>,
        repeat: Repeat,
        what: &str,
    ) -> Result<Answer, GithubError> {
        let mut rate_waits = 0u32;
        let mut server_retries = 0u32;
        loop {
            let sent = tokio::time::timeout(
                self.policy.request_timeout,
                self.send_once(method.clone(), target, body, headers),
            )
            .await;
            match &sent {
                Ok(Ok(answer)) => crate::metrics::github_request(
                    method.as_str(),
                    Some(answer.status.as_u16()),
                    answer
                        .headers
                        .get("x-ratelimit-remaining")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok()),
                ),
                _ => crate::metrics::github_request(method.as_str(), None, None),
            }
            let failure = match sent {
                Ok(Ok(answer))
                    if answer.status.is_success() || answer.status == StatusCode::NOT_MODIFIED =>
                {
                    return Ok(answer)
                }
                Ok(Ok(answer)) => {
                    let header =
                        |name: &str| answer.headers.get(name).and_then(|v| v.to_str().ok());
                    let limits = LimitHeaders {
                        retry_after: header("retry-after"),
                        remaining: header("x-ratelimit-remaining"),
                        reset: header("x-ratelimit-reset"),
                    };
                    let failure = classify_failure(
                        answer.status.as_u16(),
                        &limits,
                        &answer.body,
                        now_epoch(),
                        self.policy.secondary_limit_wait,
                    );
                    (Some(answer.status.as_u16()), failure)
                }
                Ok(Err(message)) => (None, Failure::Other { message }),
                Err(_elapsed) => (
                    None,
                    Failure::Other {
                        message: format!(
                            "no answer within {}",
                            humantime::format_duration(self.policy.request_timeout)
                        ),
                    },
                ),
            };
            let (status, failure) = failure;
            let retryable = match failure {
                Failure::RateLimited { wait_secs } => {
                    let max = self.policy.max_rate_limit_wait;
                    if Duration::from_secs(wait_secs) > max
                        || rate_waits >= self.policy.max_rate_limit_retries
                    {
                        return Err(GithubError::RateLimited {
                            what: what.to_string(),
                            wait_secs,
                            max_wait_secs: max.as_secs(),
                        });
                    }
                    rate_waits += 1;
                    tracing::warn!(what, wait_secs, "GitHub rate limit: waiting");
                    tokio::time::sleep(Duration::from_secs(wait_secs)).await;
                    continue;
                }
                Failure::Server => GithubError::Server {
                    what: what.to_string(),
                    status: status.unwrap_or(0),
                    attempts: server_retries + 1,
                },
                Failure::Other { message } if status.is_none() => GithubError::Transport {
                    what: what.to_string(),
                    message,
                },
                Failure::Unauthorized => {
                    return Err(GithubError::Unauthorized {
                        token_var: self.token_var.clone(),
                        api_url: self.api_url.clone(),
                    })
                }
                Failure::Forbidden { message } => {
                    return Err(GithubError::Forbidden {
                        what: what.to_string(),
                        token_var: self.token_var.clone(),
                        message,
                    })
                }
                Failure::NotFound => return Err(self.not_found(what)),
                Failure::Other { message } => {
                    return Err(GithubError::Api {
                        what: what.to_string(),
                        status: status.unwrap_or(0),
                        message,
                    })
                }
            };
            if repeat == Repeat::Never || server_retries >= self.policy.max_server_retries {
                return Err(retryable);
            }
            let delay = self.policy.backoff * 2u32.saturating_pow(server_retries);
            server_retries += 1;
            tracing::warn!(what, error = %retryable, retry = server_retries, "GitHub failed: backing off");
            tokio::time::sleep(delay).await;
        }
    }

    /// Send once; `Err` is a transport failure (text without the token).
    async fn send_once(
        &self,
        method: Method,
        target: &str,
        body: Option<&Value>,
        headers: Option<&HeaderMap>,
    ) -> Result<Answer, String> {
        let uri: http::Uri = target
            .parse()
            .map_err(|e: http::uri::InvalidUri| format!("bad request URI `{target}`: {e}"))?;
        let response = match method {
            Method::GET => self.octo._get_with_headers(uri, headers.cloned()).await,
            Method::POST => self.octo._post(uri, body).await,
            Method::DELETE => self.octo._delete(uri, body).await,
            Method::PATCH => self.octo._patch(uri, body).await,
            Method::PUT => self.octo._put(uri, body).await,
            other => return Err(format!("unsupported method {other}")),
        }
        .map_err(|e| e.to_string())?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = self
            .octo
            .body_to_string(response)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    }
}

fn now_epoch() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn check_token(identity: Option<&str>, pairs: &[(&str, &str)], expect: Result<&str, &str>) {
        let got = resolve_token(identity, env(pairs));
        match (got, expect) {
            (Ok(t), Ok(var)) => assert_eq!(t.var, var),
            (Err(e), Err(fragment)) => {
                let text = e.to_string();
                assert!(text.contains(fragment), "{text}");
                assert!(!text.contains("sekrit"), "token leaked: {text}");
            }
            (got, expect) => panic!("got {got:?}, expected {expect:?}"),
        }
    }

    #[test]
    fn token_resolution_order() {
        check_token(
            Some("WORK_GH"),
            &[("WORK_GH", "a"), ("GITHUB_TOKEN", "b")],
            Ok("WORK_GH"),
        );
        // A named account never becomes the default one.
        check_token(
            Some("WORK_GH"),
            &[("GITHUB_TOKEN", "b")],
            Err("names $WORK_GH, which is unset"),
        );
        check_token(
            Some("WORK_GH"),
            &[("WORK_GH", " "), ("GH_TOKEN", "c")],
            Err("export the token as WORK_GH"),
        );
        check_token(
            None,
            &[("GITHUB_TOKEN", "b"), ("GH_TOKEN", "c")],
            Ok("GITHUB_TOKEN"),
        );
        check_token(None, &[("GH_TOKEN", "c")], Ok("GH_TOKEN"));
        check_token(
            None,
            &[("GITHUB_TOKEN", "  "), ("GH_TOKEN", "c")],
            Ok("GH_TOKEN"),
        );
        check_token(None, &[], Err("tried GITHUB_TOKEN, GH_TOKEN"));
        check_token(Some("X"), &[], Err("names $X"));
        check_token(
            None,
            &[("GITHUB_TOKEN", "sek\nrit")],
            Err("$GITHUB_TOKEN contains"),
        );
    }

    #[test]
    fn resolved_token_debug_hides_the_value() {
        let t = ResolvedToken::new("GITHUB_TOKEN", "sekrit");
        assert!(!format!("{t:?}").contains("sekrit"));
    }

    #[test]
    fn api_url_defaults_and_keeps_prefix() {
        assert_eq!(resolve_api_url(env(&[])), DEFAULT_API_URL);
        assert_eq!(
            resolve_api_url(env(&[("GITHUB_API_URL", "")])),
            DEFAULT_API_URL
        );
        assert_eq!(
            resolve_api_url(env(&[("GITHUB_API_URL", "https://ghe.example/api/v3/")])),
            "https://ghe.example/api/v3"
        );
    }

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

    fn check_link(header: &str, expect: Option<&str>) {
        assert_eq!(next_link(header).as_deref(), expect, "{header}");
    }

    #[test]
    fn next_links_stay_on_the_api_host() {
        let api = "https://api.github.com";
        let ghe = "https://ghe.example.com/api/v3";
        let ok =
            |link: &str, base: &str| assert_eq!(pinned_link(link, base).as_deref(), Some(link));
        let refused = |link: &str, base: &str| assert_eq!(pinned_link(link, base), None, "{link}");
        ok("https://api.github.com/repositories/1/issues?page=2", api);
        ok("https://API.github.com/x", api);
        ok("/repos/o/r/issues?page=2", api);
        ok(
            "https://ghe.example.com/api/v3/repos/o/r/issues?page=2",
            ghe,
        );
        refused("https://evil.example/collect?page=2", api);
        refused("http://api.github.com/x", api);
        refused("https://api.github.com:8443/x", api);
        refused("https://api.github.com.evil.example/x", api);
        refused("https://user@api.github.com/x", api);
        refused("//evil.example/x", api);
        refused("https://ghe.example.com/other/repos", ghe);
        refused("https://ghe.example.com/api/v3x/repos", ghe);
        refused("not a url", api);
    }

    #[test]
    fn next_links_are_found() {
        check_link(
            r#"<https://api.github.com/repositories/1/issues?page=2>; rel="next", <https://api.github.com/repositories/1/issues?page=3>; rel="last""#,
            Some("https://api.github.com/repositories/1/issues?page=2"),
        );
        check_link(
            r#"<https://x/r?page=1>; rel="prev", <https://x/r?page=3>; rel="next""#,
            Some("https://x/r?page=3"),
        );
        check_link(
            r#"<https://x/r?page=1>; rel="first", <https://x/r?page=2>; rel="prev""#,
            None,
        );
        check_link("", None);
        check_link("garbage", None);
    }

    #[test]
    fn components_are_encoded() {
        for (input, expect) in [
            ("agent-ready", "agent-ready"),
            ("risk:high", "risk%3Ahigh"),
            ("good first issue", "good%20first%20issue"),
            ("a/b#c", "a%2Fb%23c"),
            ("ü", "%C3%BC"),
        ] {
            assert_eq!(encode_component(input), expect);
        }
    }
}
