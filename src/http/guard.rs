//! Router-wide rules every request passes before any handler (issue 24): the `Host` check
//! against DNS rebinding, the bearer-token rule, and errors that are always
//! `{"error", "fix"}` JSON (an unknown route, a wrong method, a body over the limit).
//!
//! The decisions are pure functions ([`HostPolicy::allows`], [`bearer_token`],
//! [`super::access`]); the middlewares only apply them.
//!
//! Must not: let a request through to a handler before the host check, or echo a token.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api::{error_response, ApiError};
use super::Shared;

/// Which `Host` names the server answers (pure). A page whose name an attacker rebinds to
/// 127.0.0.1 still sends its own name as `Host`; refusing every name but ours stops it
/// reading anything, on every route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicy {
    /// Lower-case names and IP literals (without port) that are accepted.
    names: Vec<String>,
    /// The listen address is unspecified (0.0.0.0, ::): any IP literal names this
    /// machine. A rebinding page always sends a name, never an IP literal.
    any_ip: bool,
}

impl HostPolicy {
    /// The loopback names, the listen address and `extra` (`http.allowed_hosts`).
    pub fn new(listen: Option<SocketAddr>, extra: &[String]) -> HostPolicy {
        let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut any_ip = false;
        if let Some(addr) = listen {
            if addr.ip().is_unspecified() {
                any_ip = true;
            } else {
                names.push(addr.ip().to_string());
            }
        }
        names.extend(extra.iter().map(|h| normalise(h)));
        names.sort();
        names.dedup();
        HostPolicy { names, any_ip }
    }

    /// Loopback names only (tests, a server built without a listen address).
    pub fn loopback() -> HostPolicy {
        HostPolicy::new(None, &[])
    }

    /// Whether a request whose `Host` is `host` (port allowed) is served.
    pub fn allows(&self, host: &str) -> bool {
        let Some(name) = host_name(host) else {
            return false;
        };
        if let Ok(ip) = name.parse::<IpAddr>() {
            if ip.is_loopback() || self.any_ip {
                return true;
            }
        }
        self.names.contains(&name)
    }
}

fn normalise(name: &str) -> String {
    let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
    name.strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .map(str::to_string)
        .unwrap_or(name)
}

/// The name part of a `Host` value (`[::1]:8787` → `::1`, `Example.COM.:80` →
/// `example.com`), or `None` when it is not one.
fn host_name(host: &str) -> Option<String> {
    let host = host.trim();
    if host.is_empty() || host.contains(['/', '@', ' ', '\\']) {
        return None;
    }
    let name = if let Some(rest) = host.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        if !(after.is_empty() || port_ok(after.strip_prefix(':')?)) {
            return None;
        }
        ip.to_string()
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if !name.contains(':') => {
                if !port_ok(port) {
                    return None;
                }
                name.to_string()
            }
            Some(_) => return None,
            None => host.to_string(),
        }
    };
    let name = normalise(&name);
    (!name.is_empty()).then_some(name)
}

fn port_ok(port: &str) -> bool {
    !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit())
}

/// The token of an `Authorization` value whose scheme is `Bearer` (any case, RFC 9110
/// §11.1), or `None`.
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Refuses a request whose `Host` (or HTTP/2 authority) is not ours: 421 with the fix.
pub async fn check_host(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    match host {
        Some(h) if state.hosts.allows(&h) => next.run(request).await,
        Some(h) => ApiError::owned(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "`Host: {}` is not a name this daemon serves",
                h.chars().take(200).collect::<String>()
            ),
            "open the daemon as http://127.0.0.1:PORT/ (or its listen address), or add the name to `http.allowed_hosts` in config.yaml",
        )
        .into_response(),
        None => error_response(
            StatusCode::MISDIRECTED_REQUEST,
            "the request names no host",
            "send a `Host` header naming the daemon (HTTP/1.1 requires one)",
        ),
    }
}

/// `404 {"error", "fix"}` for a path no route serves.
pub async fn unknown_route(request: Request) -> Response {
    ApiError::owned(
        StatusCode::NOT_FOUND,
        format!(
            "no route {} {}",
            request.method(),
            request.uri().path().chars().take(200).collect::<String>()
        ),
        "see docs/api.md for the endpoints (the API lives under /api/v1/)",
    )
    .into_response()
}

/// Every error the framework answers on its own (405, 413, 415, a rejected extractor) as
/// `{"error", "fix"}` JSON like the handlers' errors, its text kept in `error`. The
/// console's HTML pages (a wrong sign-in, a refused form) pass as they are.
pub async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    // JSON errors, and the console's own error pages (HTML for a browser), are answers
    // already; only the framework's plain-text ones are rewritten.
    let ours = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if ours {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, 4096).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let reason = status.canonical_reason().unwrap_or("error");
    let error = if text.is_empty() {
        reason.to_string()
    } else {
        format!("{reason}: {text}")
    };
    let fix = match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            "send a smaller body (a task body is at most `max_body_bytes` of config.yaml)"
        }
        StatusCode::METHOD_NOT_ALLOWED => {
            "use the method docs/api.md gives for this path (reads are GET, changes POST)"
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "send `Content-Type: application/json`",
        _ => "see docs/api.md",
    };
    let body = serde_json::json!({ "error": error, "fix": fix }).to_string();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_policy_accepts_loopback_listen_and_configured_names_only() {
        let listen: SocketAddr = "192.168.1.5:8787".parse().unwrap();
        let p = HostPolicy::new(Some(listen), &["Dash.Example.COM.".into()]);
        for ok in [
            "127.0.0.1:8787",
            "localhost",
            "LOCALHOST:80",
            "[::1]:8787",
            "127.0.0.2",
            "192.168.1.5:8787",
            "dash.example.com",
            "dash.example.com.:443",
        ] {
            assert!(p.allows(ok), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:8787",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "192.168.1.6",
            "",
            "a@127.0.0.1",
            "127.0.0.1:80x",
            "[::1]x",
            "::1",
            "example.com/127.0.0.1",
        ] {
            assert!(!p.allows(refused), "{refused}");
        }
        let any = HostPolicy::new(Some("0.0.0.0:8787".parse().unwrap()), &[]);
        assert!(any.allows("10.0.0.7:8787"));
        assert!(!any.allows("rebound.example:8787"));
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER   abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }
}
