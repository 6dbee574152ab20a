//! URLs of GitHub requests: percent-encoding a component, following `Link: rel="next"`.
//!
//! Owns: `encode_component`, `next_link` and `pinned_link` (a next-page link is followed only
//! on the API host, so the token never goes where a header points). Pure.

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

#[cfg(test)]
mod tests {
    use super::*;

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
