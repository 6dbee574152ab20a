//! The GitHub REST client: octocrab set up for polyphony, raw calls, and fault handling.
//!
//! Owns: the octocrab instance and the one request loop every call goes through: rate
//! limits wait, bounded; 5xx and transport errors back off, bounded, only for requests that
//! are safe to repeat; 401/403/404 become typed errors naming the token variable (never its
//! value) or the resource. What a failure means is `faults`; the token and URL come from
//! `environment`; links from `urls`. Their items are re-exported here, so
//! `sources::github::client::X` names them all.
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

pub use super::environment::{
    parse_api_url, resolve_api_url, resolve_token, ResolvedToken, DEFAULT_API_URL,
    DEFAULT_TOKEN_VARS,
};
pub use super::error::GithubError;
pub use super::faults::{classify_failure, Failure, FaultPolicy, LimitHeaders, Repeat};
pub use super::urls::{encode_component, next_link, pinned_link};

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
    pub(super) etags: std::sync::Arc<std::sync::Mutex<super::etag_cache::EtagCache>>,
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
            .personal_token(token.secret().to_string())
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
