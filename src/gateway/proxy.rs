//! The gateway's IO: one HTTP listener per attempt (axum), forwarding to the provider over
//! hyper + rustls with connection reuse, the answer streamed back frame by frame, unchanged,
//! while [`UsageTap`] reads it.
//!
//! Timeouts: connecting [`CONNECT_TIMEOUT`], the answer's headers [`HEADERS_TIMEOUT`] (a
//! non-streamed answer is generated before its headers), and [`IDLE_TIMEOUT`] between two
//! chunks of a body. A request body over [`MAX_REQUEST_BYTES`] is refused (413).
//!
//! `HEAD`/`GET /api/hello` (Claude Code's connectivity check, sent before any message) is
//! answered here, without a credential, and never forwarded.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::auth::{self, Credential};
use super::budget::{self, Decision, Limit, Remaining};
use super::limits;
use super::pricing::{usd_of_picos, Picos, PriceTable};
use super::usage::{Metered, Usage, UsageTap};
use super::Api;

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const HEADERS_TIMEOUT: Duration = Duration::from_secs(600);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
pub const MAX_REQUEST_BYTES: usize = 64 << 20;

type Upstream = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One client for the whole process: connections to a provider are reused across attempts.
fn client() -> Result<Upstream, String> {
    static CLIENT: OnceLock<Result<Upstream, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let mut http = HttpConnector::new();
            http.set_connect_timeout(Some(CONNECT_TIMEOUT));
            http.set_nodelay(true);
            http.enforce_http(false);
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_native_roots()
                .map_err(|e| format!("cannot load the system's TLS root certificates: {e}"))?
                .https_or_http()
                .enable_http1()
                .wrap_connector(http);
            Ok(Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                .build(https))
        })
        .clone()
}

/// What the orchestrator learns from the gateway and lends it. Every method has a default.
pub trait Hooks: Send + Sync + 'static {
    /// What is left of the identity's daily budget, not counting this attempt's metered
    /// cost (the gateway subtracts that itself). `None`: no ceiling.
    fn daily_left(&self) -> Option<Picos> {
        None
    }
    /// One request finished (or was refused).
    fn on_request(&self, _record: &RequestRecord) {}
    /// The clock (tests move it).
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Hooks that do nothing.
pub struct NoHooks;
impl Hooks for NoHooks {}

/// What the gateway of one attempt is configured with.
pub struct GatewaySettings {
    pub api: Api,
    /// `scheme://host[:port][/prefix]`: the real provider (or a test's scripted one).
    pub upstream: String,
    pub credential: Credential,
    /// The attempt's placeholder ([`auth::new_placeholder`]).
    pub placeholder: String,
    pub prices: PriceTable,
    /// `max_cost_usd_per_attempt`, as pico-dollars.
    pub attempt_budget: Option<Picos>,
    /// What to say a budget refusal resets at (the identity's next UTC midnight).
    pub budget_resets_at: Option<DateTime<Utc>>,
}

/// One request as an event: never a header value, a query string or a body. Written by
/// the gateway in the egress proxy as one log line and read back by the daemon, so it
/// round-trips through JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// 0, 1, … per attempt.
    pub seq: u64,
    pub at: DateTime<Utc>,
    pub api: Api,
    pub method: String,
    /// The path only (a query may hold a key).
    pub path: String,
    pub model: Option<String>,
    pub status: u16,
    pub usage: Option<Usage>,
    /// `None`: no usage, or the model's price is unknown (see `price_known`).
    pub cost_usd: Option<f64>,
    /// The exact figure `cost_usd` rounds (pico-dollars), as a decimal string.
    #[serde(default, with = "picos_text")]
    pub cost_picos: Option<Picos>,
    pub price_known: bool,
    pub duration_ms: f64,
    /// `ok`, `error` (the provider answered an error), `limited` (a usage limit), `cut`
    /// (the stream ended early), `upstream_failed`, `refused_budget`, `refused_credential`,
    /// `refused_client` (the placeholder from an address other than its first client's).
    pub outcome: String,
    /// A limit's reset instant, from the answer's headers.
    pub reset_at: Option<DateTime<Utc>>,
    /// Set on a `refused_budget` request: which budget, what it needed, what was left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetRefusal>,
}

/// Pico-dollar figures as decimal strings in JSON (u128 is past what every reader takes).
mod picos_text {
    use super::Picos;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Picos>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(p) => s.serialize_str(&p.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Picos>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| t.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

impl RequestRecord {
    /// One line for `logs` and the dashboard.
    pub fn summary(&self) -> String {
        let model = self.model.as_deref().unwrap_or("?");
        let tokens = self
            .usage
            .map(|u| {
                format!(
                    " in {} (+{} cached, +{} cache-write) out {}",
                    u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens
                )
            })
            .unwrap_or_default();
        let cost = match (self.cost_usd, self.price_known, self.usage.is_some()) {
            (Some(c), _, _) => format!(" ${c:.4}"),
            (None, false, true) => " (price unknown)".into(),
            _ => String::new(),
        };
        format!(
            "model API: {} {} {model} -> {} {}{tokens}{cost} in {:.0} ms",
            self.method, self.path, self.status, self.outcome, self.duration_ms
        )
    }
}

/// A budget refusal: which budget (`attempt` or `daily`), what the request needed, what
/// was left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetRefusal {
    pub limit: String,
    pub needed_usd: f64,
    pub remaining_usd: f64,
}

/// What the gateway metered so far for its attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Meter {
    pub requests: u64,
    pub usage: Usage,
    #[serde(skip)]
    pub cost_picos: Picos,
    pub cost_usd: f64,
    /// Models that answered with usage but have no price.
    pub unpriced_models: BTreeSet<String>,
    /// The first budget refusal, if any: the attempt ends as `budget`.
    pub budget_refusal: Option<BudgetRefusal>,
    /// The latest reset instant a limited answer's headers gave.
    pub limit_reset: Option<DateTime<Utc>>,
    /// Requests refused for not presenting the placeholder.
    pub refused_credential: u64,
}

impl Meter {
    /// Counts one finished request (pure): what the gateway does per request, and what the
    /// daemon does again with the records read back from the proxy's log.
    pub fn add(&mut self, record: &RequestRecord) {
        self.requests += 1;
        if let Some(u) = &record.usage {
            self.usage.add(u);
            match record.cost_picos {
                Some(c) => {
                    self.cost_picos += c;
                    self.cost_usd = usd_of_picos(self.cost_picos);
                }
                None => {
                    if let Some(model) = &record.model {
                        self.unpriced_models.insert(model.clone());
                    }
                }
            }
        }
        if let Some(at) = record.reset_at {
            self.limit_reset = Some(self.limit_reset.map_or(at, |t| t.max(at)));
        }
        if record.outcome == "refused_credential" || record.outcome == "refused_client" {
            self.refused_credential += 1;
        }
        if let Some(b) = &record.budget {
            self.budget_refusal.get_or_insert_with(|| b.clone());
        }
    }

    /// The meter of a list of records.
    pub fn of<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Meter {
        let mut m = Meter::default();
        for r in records {
            m.add(r);
        }
        m
    }
}

struct Inner {
    settings: GatewaySettings,
    upstream_host: String,
    upstream_base: String,
    hooks: Arc<dyn Hooks>,
    meter: Mutex<Meter>,
    /// The peer address that owns the placeholder ([`auth::admit_client`]).
    client: Mutex<Option<std::net::IpAddr>>,
}

impl Inner {
    fn meter(&self) -> MutexGuard<'_, Meter> {
        self.meter.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts and reports one request.
    fn finish(&self, mut record: RequestRecord) {
        {
            let mut m = self.meter();
            record.seq = m.requests;
            m.add(&record);
        }
        self.hooks.on_request(&record);
    }
}

/// A running gateway; stops when dropped.
pub struct GatewayHandle {
    inner: Arc<Inner>,
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl GatewayHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL for the CLI (`http://ADDR:PORT` plus the API's suffix).
    pub fn base_url(&self) -> String {
        format!(
            "http://{}{}",
            self.addr,
            self.inner.settings.api.cli_base_suffix()
        )
    }

    pub fn placeholder(&self) -> &str {
        &self.inner.settings.placeholder
    }

    /// What was metered so far.
    pub fn meter(&self) -> Meter {
        self.inner.meter().clone()
    }
}

impl Drop for GatewayHandle {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("gateway upstream `{0}` is not a URL of the form scheme://host[:port][/path]")]
    BadUpstream(String),
    #[error("{0}")]
    Tls(String),
    #[error("cannot listen for the gateway: {0}")]
    Io(#[from] std::io::Error),
}

/// Serves `settings` on `listener` (inside a Tokio runtime).
pub fn start(
    listener: tokio::net::TcpListener,
    settings: GatewaySettings,
    hooks: Arc<dyn Hooks>,
) -> Result<GatewayHandle, StartError> {
    client().map_err(StartError::Tls)?;
    let uri: http::Uri = settings
        .upstream
        .parse()
        .map_err(|_| StartError::BadUpstream(settings.upstream.clone()))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(StartError::BadUpstream(settings.upstream.clone()));
    };
    if !matches!(scheme, "http" | "https") {
        return Err(StartError::BadUpstream(settings.upstream.clone()));
    }
    let prefix = uri.path().trim_end_matches('/');
    let upstream_base = format!("{scheme}://{authority}{prefix}");
    let upstream_host = authority.to_string();
    let addr = listener.local_addr()?;
    let inner = Arc::new(Inner {
        settings,
        upstream_host,
        upstream_base,
        hooks,
        meter: Mutex::new(Meter::default()),
        client: Mutex::new(None),
    });
    let app = Router::new().fallback(handle).with_state(inner.clone());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
    });
    Ok(GatewayHandle {
        inner,
        addr,
        shutdown: Some(tx),
    })
}

/// An error answer in the API's own shape, so the CLI shows it as it would the provider's.
pub fn api_error(api: Api, status: StatusCode, kind: &str, message: &str) -> Response {
    let body = match api {
        Api::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
        Api::OpenAiResponses | Api::OpenAiChat => {
            json!({"error": {"message": message, "type": kind, "code": kind, "param": null}})
        }
        Api::Gemini => {
            let st = match status.as_u16() {
                401 | 403 => "UNAUTHENTICATED",
                429 => "RESOURCE_EXHAUSTED",
                413 => "INVALID_ARGUMENT",
                _ => "UNAVAILABLE",
            };
            json!({"error": {"code": status.as_u16(), "message": message, "status": st}})
        }
    };
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

/// Kinds of error per API: (credential refused, budget refused, upstream failed).
fn kinds(api: Api) -> (&'static str, &'static str, &'static str) {
    match api {
        Api::Anthropic => ("authentication_error", "rate_limit_error", "api_error"),
        Api::OpenAiResponses | Api::OpenAiChat => {
            ("invalid_api_key", "insufficient_quota", "server_error")
        }
        Api::Gemini => ("UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "UNAVAILABLE"),
    }
}

const HOP_RESPONSE_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
];

async fn handle(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    let started = Instant::now();
    let at = inner.hooks.now();
    let api = inner.settings.api;
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_string();
    if path == "/api/hello" && (method == Method::HEAD || method == Method::GET) {
        return StatusCode::OK.into_response();
    }
    let record = |status: u16, outcome: &str| RequestRecord {
        seq: 0,
        at,
        api,
        method: method.to_string(),
        path: path.chars().take(300).collect(),
        model: None,
        status,
        usage: None,
        cost_usd: None,
        cost_picos: None,
        price_known: true,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        outcome: outcome.to_string(),
        reset_at: None,
        budget: None,
    };
    let (k_auth, k_budget, k_upstream) = kinds(api);
    if !auth::authorized(&parts.headers, &inner.settings.placeholder) {
        inner.finish(record(401, "refused_credential"));
        return api_error(
            api,
            StatusCode::UNAUTHORIZED,
            k_auth,
            "polyphony gateway: this credential is not the one this attempt was given",
        );
    }
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let admitted = peer.is_none_or(|ip| {
        auth::admit_client(
            &mut inner.client.lock().unwrap_or_else(|p| p.into_inner()),
            ip,
        )
    });
    if !admitted {
        inner.finish(record(401, "refused_client"));
        return api_error(
            api,
            StatusCode::UNAUTHORIZED,
            k_auth,
            "polyphony gateway: this attempt's credential is in use by another client",
        );
    }
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            inner.finish(record(413, "error"));
            return api_error(
                api,
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                "polyphony gateway: the request body is larger than 64 MiB",
            );
        }
    };
    let facts = budget::facts(api, &body, &path);
    let estimate = budget::estimate(&inner.settings.prices, &facts);
    let spent = inner.meter().cost_picos;
    let remaining = Remaining {
        attempt: inner
            .settings
            .attempt_budget
            .map(|b| b.saturating_sub(spent)),
        daily: inner.hooks.daily_left().map(|d| d.saturating_sub(spent)),
    };
    if let Decision::Refuse {
        limit,
        needed,
        remaining,
    } = budget::decide(estimate, remaining)
    {
        let which = match limit {
            Limit::Attempt => "attempt",
            Limit::Daily => "daily",
        };
        let refusal = BudgetRefusal {
            limit: which.to_string(),
            needed_usd: usd_of_picos(needed),
            remaining_usd: usd_of_picos(remaining),
        };
        let resets = match (limit, inner.settings.budget_resets_at) {
            (Limit::Daily, Some(t)) => format!("; it resets at {}", t.to_rfc3339()),
            _ => String::new(),
        };
        let what = match limit {
            Limit::Attempt => "this attempt's budget (max_cost_usd_per_attempt)",
            Limit::Daily => "the identity's daily budget (cost_ceiling_usd_per_day)",
        };
        let (needed_usd, remaining_usd) = (refusal.needed_usd, refusal.remaining_usd);
        let mut r = record(429, "refused_budget");
        r.model = facts.model.clone();
        r.budget = Some(refusal);
        inner.finish(r);
        return api_error(
            api,
            StatusCode::TOO_MANY_REQUESTS,
            k_budget,
            &format!(
                "polyphony gateway: budget limit reached: this request may cost up to ${:.4} and {what} has ${:.4} left{resets}",
                needed_usd, remaining_usd
            ),
        );
    }
    let upstream = match client() {
        Ok(c) => c,
        Err(e) => {
            inner.finish(record(502, "upstream_failed"));
            return api_error(api, StatusCode::BAD_GATEWAY, k_upstream, &e);
        }
    };
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let url = format!("{}{path_and_query}", inner.upstream_base);
    let headers = match auth::upstream_headers(
        api,
        &parts.headers,
        &inner.settings.credential,
        &inner.upstream_host,
    ) {
        Ok(h) => h,
        Err(e) => {
            inner.finish(record(502, "upstream_failed"));
            return api_error(api, StatusCode::BAD_GATEWAY, k_upstream, &e.to_string());
        }
    };
    let mut out = http::Request::builder().method(method.clone()).uri(&url);
    if let Some(h) = out.headers_mut() {
        *h = headers;
    }
    let Ok(out) = out.body(Full::new(body)) else {
        inner.finish(record(502, "upstream_failed"));
        return api_error(
            api,
            StatusCode::BAD_GATEWAY,
            k_upstream,
            "polyphony gateway: cannot build the upstream request",
        );
    };
    let resp = match tokio::time::timeout(HEADERS_TIMEOUT, upstream.request(out)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let mut r = record(502, "upstream_failed");
            r.model = facts.model.clone();
            inner.finish(r);
            tracing::warn!(host = %inner.upstream_host, error = %e, "gateway: the model API could not be reached");
            return api_error(
                api,
                StatusCode::BAD_GATEWAY,
                k_upstream,
                &format!(
                    "polyphony gateway: cannot reach {}: {e}",
                    inner.upstream_host
                ),
            );
        }
        Err(_) => {
            let mut r = record(504, "upstream_failed");
            r.model = facts.model.clone();
            inner.finish(r);
            return api_error(
                api,
                StatusCode::GATEWAY_TIMEOUT,
                k_upstream,
                "polyphony gateway: the model API sent no answer in time",
            );
        }
    };
    let (rparts, rbody) = resp.into_parts();
    let status = rparts.status.as_u16();
    let reset_at = limits::reset_from_headers(status, &rparts.headers, at);
    let sse = rparts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut headers = HeaderMap::with_capacity(rparts.headers.len());
    for (name, value) in &rparts.headers {
        if !HOP_RESPONSE_HEADERS.contains(&name.as_str()) {
            headers.append(name.clone(), value.clone());
        }
    }
    let mut base = record(status, "ok");
    base.model = facts.model.clone();
    base.reset_at = reset_at;
    let guard = Guard {
        inner: inner.clone(),
        tap: Some(UsageTap::new(api, sse)),
        record: Some(base),
        started,
        limited: limits::is_limited(status, &rparts.headers),
    };
    let stream = futures_util::stream::unfold(Some((rbody, guard)), |state| async move {
        let (mut body, mut guard) = state?;
        loop {
            match tokio::time::timeout(IDLE_TIMEOUT, body.frame()).await {
                Err(_) => {
                    guard.end(false);
                    let e = std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the model API went quiet mid-answer",
                    );
                    return Some((Err(e), None));
                }
                Ok(None) => {
                    guard.end(true);
                    return None;
                }
                Ok(Some(Err(e))) => {
                    guard.end(false);
                    return Some((Err(std::io::Error::other(e)), None));
                }
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        guard.feed(&data);
                        // A sized body may not be polled again after its last byte.
                        if hyper::body::Body::is_end_stream(&body) {
                            guard.end(true);
                        }
                        return Some((Ok::<Bytes, std::io::Error>(data), Some((body, guard))));
                    }
                }
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = rparts.status;
    *resp.headers_mut() = headers;
    resp
}

/// Meters a response body as it passes and reports it once, when it ends, fails or is
/// dropped (the client went away).
struct Guard {
    inner: Arc<Inner>,
    tap: Option<UsageTap>,
    record: Option<RequestRecord>,
    started: Instant,
    limited: bool,
}

impl Guard {
    fn feed(&mut self, data: &[u8]) {
        if let Some(t) = &mut self.tap {
            t.feed(data);
        }
    }

    fn end(&mut self, complete: bool) {
        let (Some(tap), Some(mut record)) = (self.tap.take(), self.record.take()) else {
            return;
        };
        let Metered { model, usage, .. } = tap.finish();
        if model.is_some() {
            record.model = model;
        }
        record.usage = usage;
        if let Some(u) = &usage {
            let prices = &self.inner.settings.prices;
            match record.model.as_deref().and_then(|m| prices.price(m)) {
                Some(p) => {
                    let c = p.cost(u);
                    record.cost_picos = Some(c);
                    record.cost_usd = Some(usd_of_picos(c));
                }
                None => record.price_known = false,
            }
        }
        record.outcome = if self.limited {
            "limited"
        } else if record.status >= 400 {
            "error"
        } else if !complete {
            "cut"
        } else {
            "ok"
        }
        .to_string();
        record.duration_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        self.inner.finish(record);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.end(false);
    }
}
