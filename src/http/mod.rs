//! The daemon's HTTP surface (`polyphony daemon --listen ADDR`, `http:` in config.yaml;
//! docs/api.md): a JSON API under `/api/v1/` with the same shapes as the CLI's `--json`,
//! an attempt's events live as Server-Sent Events, Prometheus metrics at `/metrics`, and
//! the console at `/` (`console/`: server-rendered pages, live over SSE, with actions).
//!
//! Every handler reads the store on the blocking pool (one short-lived connection per
//! request, WAL readers never wait for the pipeline's writer), so serving never stalls an
//! attempt. Auth is decided by [`Access`], a pure function of the request and the
//! settings: a token for every mutating request, and for reads unless the address is
//! loopback and the config allows reads without it. A browser signs in once and carries a
//! session cookie instead; a change sent from another site's page is refused
//! (`console::session`).
//!
//! Must not: write to the store (mutations go through the same library calls as the CLI),
//! render agent or issue text without escaping it, or echo the token.

mod act;
mod api;
pub mod console;
mod events;
mod guard;

pub use events::StreamLimits;
pub use guard::HostPolicy;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::config::Config;

/// Why the server cannot start as configured: exit 2 (a usage or config error).
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("`{value}` is not an address to listen on ({problem}) — fix: give HOST:PORT, e.g. 127.0.0.1:8787")]
    BadAddress { value: String, problem: String },
    #[error("refusing to serve on {addr} without a token: a non-loopback address needs ${var} set — fix: export {var}=<a long random string>, or listen on 127.0.0.1")]
    TokenRequired { addr: SocketAddr, var: String },
    #[error("cannot listen on {addr}: {source} — fix: pick a free port, or stop what holds it")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// What the server needs, fixed at start.
#[derive(Clone)]
pub struct ServerSettings {
    /// The Polyphony home being served (its config is read again for a retry).
    pub home: PathBuf,
    /// The queue of the home being served (issue 27: one handle, built from the config).
    pub db: crate::store::StoreHandle,
    /// `max_body_bytes`: the longest task body `POST /api/v1/tasks` accepts.
    pub body_limit: u64,
    /// This home's machine id (`store.machine`, else the host name): a task enqueued with a
    /// local path is pinned to it (issue 27).
    pub machine: String,
    /// The bearer token, if its variable is set.
    pub token: Option<String>,
    /// Whether reads need the token (always true off loopback).
    pub token_for_reads: bool,
    /// The daemon's agent slots (`max_concurrent_agents`).
    pub slots: u32,
    /// Each identity's name and daily cost ceiling, for `/state`.
    pub identities: Vec<(String, Option<f64>)>,
    /// The `Host` names served (loopback, the listen address, `http.allowed_hosts`).
    pub hosts: HostPolicy,
    /// How many event streams may be open (`http.max_streams*`).
    pub streams: StreamLimits,
}

/// What every handler sees: the settings and the event-stream hub shared by all streams.
pub struct AppState {
    pub settings: ServerSettings,
    hub: events::Hub,
}

impl std::ops::Deref for AppState {
    type Target = ServerSettings;
    fn deref(&self) -> &ServerSettings {
        &self.settings
    }
}

impl std::fmt::Debug for ServerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSettings")
            .field("db", &self.db)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("token_for_reads", &self.token_for_reads)
            .field("slots", &self.slots)
            .finish()
    }
}

/// Parses `listen` and decides the settings: a non-loopback address without a token is
/// refused. `token` is the value of `token_env` (read by the caller).
pub fn settings(
    config: &Config,
    store: crate::store::StoreHandle,
    listen: &str,
    token: Option<String>,
) -> Result<(SocketAddr, ServerSettings), HttpError> {
    let addr: SocketAddr =
        listen
            .parse()
            .map_err(|e: std::net::AddrParseError| HttpError::BadAddress {
                value: listen.to_string(),
                problem: e.to_string(),
            })?;
    let token = token.filter(|t| !t.trim().is_empty());
    let loopback = addr.ip().is_loopback();
    if !loopback && token.is_none() {
        return Err(HttpError::TokenRequired {
            addr,
            var: config.global().http.token_env.clone(),
        });
    }
    let settings = ServerSettings {
        home: config.home().to_path_buf(),
        db: store,
        body_limit: config.global().max_body_bytes,
        machine: crate::orchestrator::lease::machine_id(config),
        token,
        token_for_reads: config.global().http.token_for_reads || !loopback,
        slots: config.max_concurrent_agents(),
        identities: config
            .identities()
            .iter()
            .map(|i| (i.name.clone(), i.cost_ceiling_usd_per_day))
            .collect(),
        hosts: HostPolicy::new(Some(addr), &config.global().http.allowed_hosts),
        streams: StreamLimits {
            total: config.global().http.max_streams,
            per_client: config.global().http.max_streams_per_client,
        },
    };
    Ok((addr, settings))
}

/// Binds `addr` (port 0 picks a free one; the caller reads `local_addr`).
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, HttpError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })
}

/// Serves until `shutdown` resolves, then finishes the requests in flight (event streams
/// end with it).
pub async fn serve(
    listener: tokio::net::TcpListener,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router(settings).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// The routes, for [`serve`] and for tests.
pub fn router(settings: ServerSettings) -> Router {
    let hub = events::Hub::new(settings.streams);
    let state = Arc::new(AppState { settings, hub });
    Router::new()
        .route("/", get(console::home))
        .route("/tasks/{id}", get(console::task::task_page))
        .route("/tasks/{id}/{verb}", post(console::form_action))
        .route("/login", get(console::login_form).post(console::login))
        .route("/logout", post(console::logout))
        .route("/live", get(console::live_stream))
        .route("/metrics", get(api::metrics))
        .route("/api/v1/health", get(api::health))
        .route("/api/v1/state", get(api::daemon_state))
        .route("/api/v1/tasks", get(api::list_tasks).post(api::enqueue))
        .route("/api/v1/tasks/{id}", get(api::show_task))
        .route("/api/v1/tasks/{id}/{verb}", post(act::api_action))
        .route("/api/v1/tasks/{id}/events", get(events::stream))
        .fallback(guard::unknown_route)
        // A task body may be `max_body_bytes`; the JSON around it gets some room.
        .layer(axum::extract::DefaultBodyLimit::max(
            usize::try_from(state.body_limit.saturating_add(64 * 1024)).unwrap_or(usize::MAX),
        ))
        // Layers run outside-in from the last one: JSON errors wrap everything, the host
        // check comes before auth, and both before any route (the fallback included).
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            guard::check_host,
        ))
        .layer(middleware::from_fn(guard::json_errors))
        .with_state(state)
}

type Shared = Arc<AppState>;

/// Whether a request may proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Allowed,
    /// No token or a wrong one: 401.
    Unauthorized,
}

/// The auth rule (pure): mutations always need the token (and without a configured token
/// there are none); reads need it when `token_for_reads`.
pub fn access(
    method: &Method,
    presented: Option<&str>,
    token: Option<&str>,
    token_for_reads: bool,
) -> Access {
    let mutating = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !mutating && !token_for_reads {
        return Access::Allowed;
    }
    match (presented, token) {
        (Some(p), Some(t)) if constant_time_eq(p.as_bytes(), t.as_bytes()) => Access::Allowed,
        _ => Access::Unauthorized,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn authorize(State(state): State<Shared>, request: Request, next: Next) -> Response {
    use console::session::{self, Decision};
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(guard::bearer_token);
    let decision = session::decide(
        session::Request {
            method: request.method(),
            path: request.uri().path(),
            bearer,
            session: session::cookie(headers, session::SESSION),
            origin: session::origin_of(headers),
        },
        state.token.as_deref(),
        state.token_for_reads,
    );
    match decision {
        Decision::Allowed | Decision::AllowedBySession => next.run(request).await,
        Decision::CrossOrigin => api::error_response(
            StatusCode::FORBIDDEN,
            "refused: this change was sent from another site's page",
            "act from the daemon's own pages (its address in the browser) or send the API request without a foreign `Origin`",
        ),
        Decision::Unauthorized => {
            let mut response = api::error_response(
                StatusCode::UNAUTHORIZED,
                "a bearer token is required",
                "send `Authorization: Bearer $TOKEN` with the value of the daemon's `http.token_env` variable (in a browser: sign in at /login)",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            response.into_response()
        }
    }
}

/// A URL to link to, when it is http(s) (a PR URL comes from the source API, but a
/// `javascript:` URL must never become clickable); templates escape it.
pub fn safe_url(url: &str) -> Option<String> {
    let lower = url.trim().to_ascii_lowercase();
    (lower.starts_with("https://") || lower.starts_with("http://")).then(|| url.trim().to_string())
}

/// Everything but RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a task id as one URL path segment (`owner/repo#42` →
/// `owner%2Frepo%2342`).
pub fn encode_segment(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (method, token presented, token configured, token for reads, expected)
    type Case<'a> = (&'a Method, Option<&'a str>, Option<&'a str>, bool, Access);

    #[test]
    fn access_rules() {
        let get = Method::GET;
        let post = Method::POST;
        let cases: &[Case<'_>] = &[
            // Loopback reads without a token are open unless configured otherwise.
            (&get, None, None, false, Access::Allowed),
            (&get, None, Some("t"), false, Access::Allowed),
            (&get, None, Some("t"), true, Access::Unauthorized),
            (&get, Some("t"), Some("t"), true, Access::Allowed),
            (&get, Some("x"), Some("t"), true, Access::Unauthorized),
            // Mutations always need the right token; without one configured, none pass.
            (&post, None, None, false, Access::Unauthorized),
            (&post, Some("t"), None, false, Access::Unauthorized),
            (&post, None, Some("t"), false, Access::Unauthorized),
            (&post, Some("tt"), Some("t"), false, Access::Unauthorized),
            (&post, Some("t"), Some("t"), false, Access::Allowed),
        ];
        for (method, presented, token, reads, want) in cases {
            assert_eq!(
                access(method, *presented, *token, *reads),
                *want,
                "{method} presented={presented:?} token={token:?} reads={reads}"
            );
        }
    }

    #[test]
    fn only_http_urls_become_links() {
        assert_eq!(safe_url("javascript:alert(1)"), None);
        assert_eq!(safe_url(" JavaScript:x"), None);
        assert_eq!(safe_url("data:text/html,x"), None);
        assert_eq!(
            safe_url("https://github.com/o/r/pull/1?a=1&b=2").as_deref(),
            Some("https://github.com/o/r/pull/1?a=1&b=2")
        );
    }

    #[test]
    fn task_ids_encode_as_one_segment() {
        assert_eq!(encode_segment("local-7"), "local-7");
        assert_eq!(encode_segment("octo/widgets#42"), "octo%2Fwidgets%2342");
        assert_eq!(encode_segment("a b<"), "a%20b%3C");
    }
}
