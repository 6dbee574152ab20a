//! Who may use the gateway and what it sends upstream (pure).
//!
//! - **The placeholder**: each attempt gets its own random credential
//!   (`polyphony-gw-<64 hex>`), handed to the CLI where its real key would go. The gateway
//!   accepts a request only when the credential it presents (`x-api-key`,
//!   `Authorization: Bearer`, `x-goog-api-key` or `api-key`) is that attempt's placeholder,
//!   compared in constant time. Another container, or a later attempt, holding an old
//!   placeholder is refused: the placeholder dies with its gateway.
//! - **Its one client**: the first peer address that presents the placeholder owns it for
//!   the gateway's life; the placeholder from any other address is refused
//!   ([`admit_client`]). The CLI makes its first model request as it starts, before any
//!   tool of the agent has run, so a container that learns the placeholder later (another
//!   container put on the attempt's network, another attempt's container) cannot use it.
//! - **The upstream request**: every credential header the client sent is removed, as are
//!   hop-by-hop headers and `host`; the real credential is set the way the provider takes
//!   it (Anthropic key: `x-api-key`; Anthropic OAuth token from `claude setup-token`:
//!   `Authorization: Bearer` plus the `oauth-2025-04-20` beta; OpenAI and Kimi: `Bearer`;
//!   Gemini: `x-goog-api-key`). Every other header (the CLI's `anthropic-version`,
//!   `anthropic-beta`, user agent, …) passes unchanged.

use http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, HOST};

use super::Api;

/// The prefix of every placeholder (so the scrubber and a reader can tell one apart).
pub const PLACEHOLDER_PREFIX: &str = "polyphony-gw-";

/// The beta flag Anthropic's API wants with an OAuth bearer token.
pub const ANTHROPIC_OAUTH_BETA: &str = "oauth-2025-04-20";

/// Headers that carry a credential: always removed before forwarding.
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "x-api-key", "x-goog-api-key", "api-key"];

/// Hop-by-hop headers (RFC 9110 §7.6.1) and `host`: never forwarded.
const HOP_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    // The body is re-sent whole (hyper sets its own length).
    "content-length",
];

/// A fresh placeholder from 32 bytes of `random`.
pub fn placeholder_from(random: [u8; 32]) -> String {
    format!("{PLACEHOLDER_PREFIX}{}", hex::encode(random))
}

/// A fresh placeholder from the OS's randomness (tokens: `/dev/urandom`, falling back to
/// hashing the time and the process id only when that cannot be read).
pub fn new_placeholder() -> String {
    let mut bytes = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if read.is_err() {
        use sha2::Digest;
        let seed = format!(
            "{:?}{}{:p}",
            std::time::SystemTime::now(),
            std::process::id(),
            &bytes
        );
        bytes.copy_from_slice(&sha2::Sha256::digest(seed.as_bytes()));
    }
    placeholder_from(bytes)
}

/// The credential a request presents, from whichever header carries one.
pub fn presented(headers: &HeaderMap) -> Option<&str> {
    for name in ["x-api-key", "x-goog-api-key", "api-key"] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            return Some(v.trim());
        }
    }
    let auth = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = auth.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Whether `headers` present exactly `placeholder` (constant time in its length).
pub fn authorized(headers: &HeaderMap, placeholder: &str) -> bool {
    presented(headers).is_some_and(|p| constant_time_eq(p.as_bytes(), placeholder.as_bytes()))
}

/// Whether `peer` may use the placeholder it presented: the first address to do so binds it
/// (`bound` is set), any other address is refused from then on. IPv4-mapped IPv6 addresses
/// count as their IPv4 address.
pub fn admit_client(bound: &mut Option<std::net::IpAddr>, peer: std::net::IpAddr) -> bool {
    let peer = peer.to_canonical();
    match bound {
        Some(owner) => *owner == peer,
        None => {
            *bound = Some(peer);
            true
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The real credential, as the identity holds it.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// A provider API key.
    ApiKey(String),
    /// An OAuth access token (Claude: `claude setup-token`, used as
    /// `CLAUDE_CODE_OAUTH_TOKEN`).
    OAuthToken(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the value.
        match self {
            Credential::ApiKey(_) => f.write_str("ApiKey(..)"),
            Credential::OAuthToken(_) => f.write_str("OAuthToken(..)"),
        }
    }
}

impl Credential {
    pub fn secret(&self) -> &str {
        match self {
            Credential::ApiKey(s) | Credential::OAuthToken(s) => s,
        }
    }
}

/// Why a header could not be built (a credential with a byte HTTP refuses).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {0} credential holds characters an HTTP header cannot carry (a newline?): fix the value of the host variable the identity names")]
pub struct BadCredential(pub &'static str);

/// The headers sent upstream for a request that arrived with `incoming`.
pub fn upstream_headers(
    api: Api,
    incoming: &HeaderMap,
    credential: &Credential,
    upstream_host: &str,
) -> Result<HeaderMap, BadCredential> {
    let mut out = HeaderMap::with_capacity(incoming.len() + 2);
    // Also drop what `Connection:` names as hop-by-hop.
    let named: Vec<String> = incoming
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    for (name, value) in incoming {
        let n = name.as_str();
        if CREDENTIAL_HEADERS.contains(&n)
            || HOP_HEADERS.contains(&n)
            || named.iter().any(|x| x == n)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    let value = |s: &str, which: &'static str| {
        let mut v = HeaderValue::from_str(s).map_err(|_| BadCredential(which))?;
        v.set_sensitive(true);
        Ok::<_, BadCredential>(v)
    };
    if let Ok(h) = HeaderValue::from_str(upstream_host) {
        out.insert(HOST, h);
    }
    match (api, credential) {
        (Api::Anthropic, Credential::ApiKey(k)) => {
            out.insert(HeaderName::from_static("x-api-key"), value(k, "API key")?);
        }
        (Api::Anthropic, Credential::OAuthToken(t)) => {
            out.insert(AUTHORIZATION, value(&format!("Bearer {t}"), "OAuth")?);
            let beta = HeaderName::from_static("anthropic-beta");
            let has = out
                .get_all(&beta)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .any(|b| b.trim() == ANTHROPIC_OAUTH_BETA);
            if !has {
                out.append(beta, HeaderValue::from_static(ANTHROPIC_OAUTH_BETA));
            }
        }
        (Api::Gemini, c) => {
            out.insert(
                HeaderName::from_static("x-goog-api-key"),
                value(c.secret(), "API key")?,
            );
        }
        (Api::OpenAiResponses | Api::OpenAiChat, c) => {
            out.insert(
                AUTHORIZATION,
                value(&format!("Bearer {}", c.secret()), "API key")?,
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_client_owns_the_placeholder() {
        let agent: std::net::IpAddr = "172.30.0.3".parse().unwrap();
        let other: std::net::IpAddr = "172.30.0.4".parse().unwrap();
        let mapped: std::net::IpAddr = "::ffff:172.30.0.3".parse().unwrap();
        let mut bound = None;
        assert!(admit_client(&mut bound, agent));
        assert!(admit_client(&mut bound, agent));
        assert!(admit_client(&mut bound, mapped));
        assert!(!admit_client(&mut bound, other));
        assert_eq!(bound, Some(agent));
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn placeholders_are_random_and_prefixed() {
        let a = new_placeholder();
        let b = new_placeholder();
        assert_ne!(a, b);
        assert!(a.starts_with(PLACEHOLDER_PREFIX));
        assert_eq!(a.len(), PLACEHOLDER_PREFIX.len() + 64);
        assert_eq!(
            placeholder_from([0xab; 32]),
            format!("polyphony-gw-{}", "ab".repeat(32))
        );
    }

    #[test]
    fn only_the_attempts_placeholder_is_accepted() {
        let p = placeholder_from([7; 32]);
        let other = placeholder_from([8; 32]);
        let cases: Vec<(HeaderMap, bool)> = vec![
            (headers(&[("x-api-key", &p)]), true),
            (headers(&[("authorization", &format!("Bearer {p}"))]), true),
            (
                headers(&[("authorization", &format!("bearer  {p} "))]),
                true,
            ),
            (headers(&[("x-goog-api-key", &p)]), true),
            (headers(&[("api-key", &p)]), true),
            (headers(&[("x-api-key", &other)]), false),
            (headers(&[("x-api-key", &p[..p.len() - 1])]), false),
            (headers(&[("x-api-key", &format!("{p}0"))]), false),
            (headers(&[("authorization", &format!("Basic {p}"))]), false),
            (headers(&[("authorization", &p)]), false),
            (headers(&[]), false),
            (headers(&[("x-api-key", "")]), false),
            // A key header wins over a bearer: a wrong key with the right bearer is refused.
            (
                headers(&[
                    ("x-api-key", &other),
                    ("authorization", &format!("Bearer {p}")),
                ]),
                false,
            ),
        ];
        for (h, ok) in cases {
            assert_eq!(authorized(&h, &p), ok, "{h:?}");
        }
    }

    #[test]
    fn upstream_headers_swap_the_credential_and_drop_hop_headers() {
        let p = placeholder_from([1; 32]);
        let incoming = headers(&[
            ("x-api-key", &p),
            ("authorization", &format!("Bearer {p}")),
            ("anthropic-version", "2023-06-01"),
            (
                "anthropic-beta",
                "claude-code-20250219,interleaved-thinking-2025-05-14",
            ),
            ("user-agent", "claude-cli/2.1.332 (external, cli)"),
            ("content-type", "application/json"),
            ("content-length", "123"),
            ("host", "172.18.0.1:4000"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("transfer-encoding", "chunked"),
            ("accept", "application/json"),
        ]);
        let key = Credential::ApiKey("sk-ant-real".into());
        let h = upstream_headers(Api::Anthropic, &incoming, &key, "api.anthropic.com").unwrap();
        assert_eq!(h["x-api-key"], "sk-ant-real");
        assert!(h["x-api-key"].is_sensitive());
        assert!(h.get("authorization").is_none());
        assert_eq!(h["host"], "api.anthropic.com");
        for gone in ["content-length", "connection", "x-hop", "transfer-encoding"] {
            assert!(h.get(gone).is_none(), "{gone}");
        }
        for kept in [
            "anthropic-version",
            "anthropic-beta",
            "user-agent",
            "content-type",
            "accept",
        ] {
            assert_eq!(h[kept], incoming[kept], "{kept}");
        }
        let all: String = format!("{h:?}");
        assert!(!all.contains(&p), "the placeholder went upstream");

        // OAuth: bearer plus the beta flag, added once.
        let oauth = Credential::OAuthToken("sk-ant-oat01-real".into());
        let h = upstream_headers(Api::Anthropic, &incoming, &oauth, "api.anthropic.com").unwrap();
        assert_eq!(h["authorization"], "Bearer sk-ant-oat01-real");
        assert!(h.get("x-api-key").is_none());
        let betas: Vec<_> = h.get_all("anthropic-beta").iter().collect();
        assert_eq!(betas.len(), 2);
        assert_eq!(betas[1], ANTHROPIC_OAUTH_BETA);
        let already = headers(&[("anthropic-beta", "oauth-2025-04-20, x")]);
        let h = upstream_headers(Api::Anthropic, &already, &oauth, "h").unwrap();
        assert_eq!(h.get_all("anthropic-beta").iter().count(), 1);

        let h = upstream_headers(Api::OpenAiResponses, &incoming, &key, "api.openai.com").unwrap();
        assert_eq!(h["authorization"], "Bearer sk-ant-real");
        assert!(h.get("x-api-key").is_none());
        let h = upstream_headers(Api::Gemini, &incoming, &key, "g").unwrap();
        assert_eq!(h["x-goog-api-key"], "sk-ant-real");
        assert!(h.get("authorization").is_none());

        let bad = Credential::ApiKey("line\nbreak".into());
        assert!(upstream_headers(Api::Anthropic, &incoming, &bad, "h").is_err());
        assert_eq!(format!("{bad:?}"), "ApiKey(..)");
    }
}
