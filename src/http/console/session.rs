//! Who may act from a browser, and how a cross-site request is told apart (pure; issue 29).
//!
//! Signing in (`POST /login` with the daemon's token) sets an `HttpOnly`,
//! `SameSite=Strict` session cookie whose value is derived from the token (never the
//! token itself), and the name the person gave, for the action log. A form that changes
//! something also carries a CSRF value derived from the token, and its `Origin` (or,
//! without one, its `Referer`) must name this server: a page elsewhere can neither read
//! the value nor send the cookie, and its origin gives it away. The API keeps its bearer
//! token; a cookie opens only the console's own forms and reads.

use axum::http::{header, HeaderMap, Method};
use sha2::{Digest, Sha256};

/// The session cookie's name.
pub const SESSION: &str = "polyphony_session";
/// The cookie with the signed-in person's name (a label for the action log, not a secret).
pub const WHO: &str = "polyphony_who";

fn derive(purpose: &str, token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"polyphony-console\0");
    h.update(purpose.as_bytes());
    h.update(b"\0");
    h.update(token.as_bytes());
    hex::encode(h.finalize())
}

/// The session cookie's value for `token`.
pub fn session_value(token: &str) -> String {
    derive("session", token)
}

/// The CSRF value forms carry, for `token`.
pub fn csrf_value(token: &str) -> String {
    derive("csrf", token)
}

/// Equal without an early exit (the values are secrets' digests).
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// Where a request says it comes from, against the `Host` it was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `Origin` (or `Referer`) names this server.
    Same,
    /// It names another site (or is `null`).
    Cross,
    /// Neither header was sent (curl, a script).
    Unknown,
}

/// The scheme-less authority of an origin or URL (`http://a:1/x` → `a:1`).
fn authority(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    Some(rest.split(['/', '?', '#']).next().unwrap_or(rest))
}

/// Whether the request comes from a page of this server.
pub fn origin_of(headers: &HeaderMap) -> Origin {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let Some(host) = host.map(str::trim).filter(|h| !h.is_empty()) else {
        return Origin::Unknown;
    };
    let named = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    match named {
        None => Origin::Unknown,
        Some(v) => match authority(v) {
            Some(a) if a.eq_ignore_ascii_case(host) => Origin::Same,
            _ => Origin::Cross,
        },
    }
}

/// How a request is let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// Through the session cookie: a console form, whose handler checks the CSRF value.
    AllowedBySession,
    Unauthorized,
    /// A change sent from another site's page.
    CrossOrigin,
}

/// What the caller knows about one request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub bearer: Option<&'a str>,
    pub session: Option<&'a str>,
    pub origin: Origin,
}

/// The rule (pure): any change sent from another site is refused whatever it carries;
/// the bearer token opens everything ([`crate::http::access`]); the session cookie opens
/// reads and the console's own forms (not the API's changes), and a form sent with it
/// must say it comes from this server. `/login` checks the token itself.
pub fn decide(r: Request<'_>, token: Option<&str>, token_for_reads: bool) -> Decision {
    let mutating = !matches!(*r.method, Method::GET | Method::HEAD | Method::OPTIONS);
    if mutating && r.origin == Origin::Cross {
        return Decision::CrossOrigin;
    }
    if mutating && r.path == "/login" {
        return Decision::Allowed;
    }
    if r.bearer.is_some() {
        return match crate::http::access(r.method, r.bearer, token, token_for_reads) {
            crate::http::Access::Allowed => Decision::Allowed,
            crate::http::Access::Unauthorized => Decision::Unauthorized,
        };
    }
    let session_ok = match (r.session, token) {
        (Some(s), Some(t)) => same_secret(s, &session_value(t)),
        _ => false,
    };
    if !mutating {
        return if !token_for_reads || session_ok {
            Decision::Allowed
        } else {
            Decision::Unauthorized
        };
    }
    let console_form = !r.path.starts_with("/api/");
    if session_ok && console_form && r.origin == Origin::Same {
        Decision::AllowedBySession
    } else {
        Decision::Unauthorized
    }
}

/// A local path to go back to after a form (`/` unless it is one of ours).
pub fn back_path(raw: Option<&str>) -> String {
    match raw {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.contains(['\\', '\r', '\n'])
                && p.len() <= 500 =>
        {
            p.to_string()
        }
        _ => "/".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn derived_values_differ_from_the_token_and_each_other() {
        let s = session_value("tok");
        let c = csrf_value("tok");
        assert_eq!(s.len(), 64);
        assert_ne!(s, c);
        assert!(!s.contains("tok"));
        assert_ne!(session_value("tok2"), s);
        assert!(same_secret(&s, &session_value("tok")));
        assert!(!same_secret(&s, &c));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let h = headers(&[
            ("cookie", "a=1; polyphony_session=abc ; b=2"),
            ("cookie", "polyphony_who=ana"),
        ]);
        assert_eq!(cookie(&h, SESSION), Some("abc"));
        assert_eq!(cookie(&h, WHO), Some("ana"));
        assert_eq!(cookie(&h, "c"), None);
    }

    #[test]
    fn origins() {
        let same = headers(&[
            ("host", "127.0.0.1:8787"),
            ("origin", "http://127.0.0.1:8787"),
        ]);
        assert_eq!(origin_of(&same), Origin::Same);
        let other_port = headers(&[
            ("host", "127.0.0.1:8787"),
            ("origin", "http://127.0.0.1:9999"),
        ]);
        assert_eq!(origin_of(&other_port), Origin::Cross);
        let null = headers(&[("host", "127.0.0.1:8787"), ("origin", "null")]);
        assert_eq!(origin_of(&null), Origin::Cross);
        let referer = headers(&[
            ("host", "localhost:1"),
            ("referer", "http://localhost:1/tasks/x"),
        ]);
        assert_eq!(origin_of(&referer), Origin::Same);
        let evil_ref = headers(&[
            ("host", "localhost:1"),
            ("referer", "http://localhost:1.evil.example/"),
        ]);
        assert_eq!(origin_of(&evil_ref), Origin::Cross);
        assert_eq!(origin_of(&headers(&[("host", "a")])), Origin::Unknown);
    }

    #[test]
    fn decisions() {
        let post = Method::POST;
        let get = Method::GET;
        let good = session_value("t");
        let r = |method, path, bearer, session, origin| Request {
            method,
            path,
            bearer,
            session,
            origin,
        };
        let t = Some("t");
        // A console form: the session and a same-origin page.
        assert_eq!(
            decide(
                r(&post, "/tasks/x/retry", None, Some(&good), Origin::Same),
                t,
                false
            ),
            Decision::AllowedBySession
        );
        // ... not without the session, not with a wrong one, not from elsewhere, not unknown.
        assert_eq!(
            decide(
                r(&post, "/tasks/x/retry", None, None, Origin::Same),
                t,
                false
            ),
            Decision::Unauthorized
        );
        assert_eq!(
            decide(
                r(&post, "/tasks/x/retry", None, Some("bad"), Origin::Same),
                t,
                false
            ),
            Decision::Unauthorized
        );
        assert_eq!(
            decide(
                r(&post, "/tasks/x/retry", None, Some(&good), Origin::Cross),
                t,
                false
            ),
            Decision::CrossOrigin
        );
        assert_eq!(
            decide(
                r(&post, "/tasks/x/retry", None, Some(&good), Origin::Unknown),
                t,
                false
            ),
            Decision::Unauthorized
        );
        // The API's changes take the bearer token, never the cookie.
        assert_eq!(
            decide(
                r(
                    &post,
                    "/api/v1/tasks/x/retry",
                    None,
                    Some(&good),
                    Origin::Same
                ),
                t,
                false
            ),
            Decision::Unauthorized
        );
        assert_eq!(
            decide(
                r(
                    &post,
                    "/api/v1/tasks/x/retry",
                    Some("t"),
                    None,
                    Origin::Unknown
                ),
                t,
                false
            ),
            Decision::Allowed
        );
        assert_eq!(
            decide(
                r(
                    &post,
                    "/api/v1/tasks/x/retry",
                    Some("t"),
                    None,
                    Origin::Cross
                ),
                t,
                false
            ),
            Decision::CrossOrigin
        );
        assert_eq!(
            decide(
                r(
                    &post,
                    "/api/v1/tasks/x/retry",
                    Some("x"),
                    None,
                    Origin::Unknown
                ),
                t,
                false
            ),
            Decision::Unauthorized
        );
        // No token configured: no change passes, reads on loopback do.
        assert_eq!(
            decide(
                r(&post, "/tasks/x/retry", None, Some(&good), Origin::Same),
                None,
                false
            ),
            Decision::Unauthorized
        );
        assert_eq!(
            decide(r(&get, "/", None, None, Origin::Unknown), None, false),
            Decision::Allowed
        );
        // Reads behind the token: the session opens them.
        assert_eq!(
            decide(r(&get, "/", None, None, Origin::Unknown), t, true),
            Decision::Unauthorized
        );
        assert_eq!(
            decide(r(&get, "/", None, Some(&good), Origin::Unknown), t, true),
            Decision::Allowed
        );
        // Login checks the token itself, but not from another site.
        assert_eq!(
            decide(r(&post, "/login", None, None, Origin::Same), t, false),
            Decision::Allowed
        );
        assert_eq!(
            decide(r(&post, "/login", None, None, Origin::Cross), t, false),
            Decision::CrossOrigin
        );
    }

    #[test]
    fn back_paths_stay_local() {
        assert_eq!(back_path(Some("/tasks/a")), "/tasks/a");
        assert_eq!(back_path(Some("//evil.example/")), "/");
        assert_eq!(back_path(Some("https://evil.example/")), "/");
        assert_eq!(back_path(Some("/a\r\nSet-Cookie: x")), "/");
        assert_eq!(back_path(None), "/");
    }
}
