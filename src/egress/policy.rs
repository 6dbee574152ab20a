//! The egress decision, pure: may an attempt open a connection to `host:port`, and may it
//! connect to the address that name resolved to? No IO, no clock, no resolver.
//!
//! Names, not addresses: a target must be a DNS name on the allowlist with the exact port
//! listed (`api.anthropic.com:443`, or a glob `*.crates.io:443` that matches any name
//! ending in `.crates.io`, not `crates.io` itself). IP literals (IPv4, IPv6, and the
//! numeric spellings `inet_aton` would take for one, like `127.1` or `0x7f000001`) are
//! refused whatever the list says. The resolved address is checked separately
//! ([`check_address`]) on the very address the proxy then connects to, so a DNS answer
//! that changes between check and connect (rebinding) gains nothing.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// Why a connection is refused. `as_str` is the stable code in the proxy's log lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The request could not be read as a proxy request.
    Malformed,
    /// The target is an IP address, not a name.
    IpLiteral,
    /// The name is on the list, but not with this port.
    PortNotAllowed,
    /// The name is not on the list.
    NotAllowed,
    /// The name resolved to a loopback, private, link-local, metadata or other
    /// non-public address.
    PrivateAddress,
    /// The name did not resolve, or no address accepted the connection.
    Unreachable,
    /// The attempt opened as many connections as it may.
    ConnectionCap,
    /// The attempt moved as many bytes as it may.
    ByteCap,
}

impl Refusal {
    pub fn as_str(&self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::IpLiteral => "ip_literal",
            Refusal::PortNotAllowed => "port_not_allowed",
            Refusal::NotAllowed => "not_allowed",
            Refusal::PrivateAddress => "private_address",
            Refusal::Unreachable => "unreachable",
            Refusal::ConnectionCap => "connection_cap",
            Refusal::ByteCap => "byte_cap",
        }
    }

    /// The refusal a log code names.
    pub fn from_code(code: &str) -> Option<Refusal> {
        [
            Refusal::Malformed,
            Refusal::IpLiteral,
            Refusal::PortNotAllowed,
            Refusal::NotAllowed,
            Refusal::PrivateAddress,
            Refusal::Unreachable,
            Refusal::ConnectionCap,
            Refusal::ByteCap,
        ]
        .into_iter()
        .find(|r| r.as_str() == code)
    }

    /// Whether adding `host:port` to `egress.allow` would have let it through.
    pub fn fixed_by_allowing(&self) -> bool {
        matches!(self, Refusal::NotAllowed | Refusal::PortNotAllowed)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::Malformed => "not a proxy request",
            Refusal::IpLiteral => {
                "an IP address, not a name (only names on the allowlist are reached)"
            }
            Refusal::PortNotAllowed => "the name is allowed, but not on this port",
            Refusal::NotAllowed => "not on the allowlist",
            Refusal::PrivateAddress => {
                "the name resolves to a loopback, private, link-local or metadata address"
            }
            Refusal::Unreachable => "the name does not resolve or refuses connections",
            Refusal::ConnectionCap => "the attempt's connection cap is reached",
            Refusal::ByteCap => "the attempt's byte cap is reached",
        })
    }
}

/// One allowlist entry: an exact name or `*.suffix`, and one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Lower case, no trailing dot. For a glob, the suffix with its leading dot (`.crates.io`).
    name: String,
    glob: bool,
    port: u16,
}

impl Entry {
    /// Parses `name:port` or `*.suffix:port`. The error says what is wrong and how to
    /// write it (config errors quote it).
    pub fn parse(text: &str) -> Result<Entry, String> {
        let text = text.trim();
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(format!(
                "`{text}` has no port; write host:port, like `{text}:443`"
            ));
        };
        let port: u16 = match port.parse() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(format!(
                    "`{text}`: `{port}` is not a port (1-65535); write host:port, like api.example.com:443"
                ))
            }
        };
        let (glob, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        let name = normalize(name).ok_or_else(|| {
            format!("`{text}`: `{host}` is not a host name; write a DNS name or `*.domain`, like *.crates.io:443")
        })?;
        if looks_numeric(&name) {
            return Err(format!(
                "`{text}`: IP addresses cannot be allowed (the proxy allows names only); name the host"
            ));
        }
        if glob && !name.contains('.') {
            return Err(format!(
                "`{text}`: a glob must keep at least two labels (`*.example.com`), not a whole top-level domain"
            ));
        }
        Ok(Entry {
            name: if glob { format!(".{name}") } else { name },
            glob,
            port,
        })
    }

    fn matches_name(&self, name: &str) -> bool {
        if self.glob {
            name.len() > self.name.len() && name.ends_with(&self.name)
        } else {
            name == self.name
        }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.glob {
            write!(f, "*{}:{}", self.name, self.port)
        } else {
            write!(f, "{}:{}", self.name, self.port)
        }
    }
}

/// The attempt's allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<Entry>,
}

impl Allowlist {
    /// Parses every entry; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Allowlist, String> {
        let entries = entries
            .iter()
            .map(|e| Entry::parse(e.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Allowlist { entries })
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The decision on a requested target, before any resolution: `Ok(name)` is the
    /// normalized name to resolve.
    pub fn check(&self, host: &str, port: u16) -> Result<String, Refusal> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.parse::<IpAddr>().is_ok() || host.contains(':') {
            return Err(Refusal::IpLiteral);
        }
        let Some(name) = normalize(host) else {
            return Err(Refusal::Malformed);
        };
        if looks_numeric(&name) {
            return Err(Refusal::IpLiteral);
        }
        let mut name_listed = false;
        for entry in &self.entries {
            if entry.matches_name(&name) {
                if entry.port == port {
                    return Ok(name);
                }
                name_listed = true;
            }
        }
        Err(if name_listed {
            Refusal::PortNotAllowed
        } else {
            Refusal::NotAllowed
        })
    }
}

/// Lower case without a trailing dot, when `host` is a syntactically valid DNS name
/// (letters, digits, `-` and `_` in labels of 1-63, 253 in all).
pub fn normalize(host: &str) -> Option<String> {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.is_empty() || host.len() > 253 {
        return None;
    }
    let ok = host.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    ok.then_some(host)
}

/// A name `inet_aton` would read as an address (`127.1`, `2130706433`, `0x7f.1`): its
/// last label is all digits or a hex number. No real top-level domain looks like that.
fn looks_numeric(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    last.bytes().all(|b| b.is_ascii_digit())
        || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether the proxy may connect to `ip`: only globally routable unicast addresses. An
/// IPv6 address that embeds an IPv4 one (mapped, NAT64, 6to4, compatible) is judged by the
/// IPv4 address it carries.
pub fn check_address(ip: IpAddr) -> Result<(), Refusal> {
    let public = match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => public_v6(v6),
    };
    if public {
        Ok(())
    } else {
        Err(Refusal::PrivateAddress)
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0                                  // "this network"
        || a == 10                            // private
        || a == 127                           // loopback
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 169 && b == 254)             // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 0 && c == 0)     // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)     // documentation
        || (a == 192 && b == 88 && c == 99)   // 6to4 relay anycast
        || (a == 192 && b == 168)             // private
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 198 && b == 51 && c == 100)  // documentation
        || (a == 203 && b == 0 && c == 113)   // documentation
        || a >= 224) // multicast, reserved, broadcast
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = embedded_v4(ip) {
        return public_v4(v4);
    }
    if ip.is_unspecified() || ip.is_loopback() {
        return false;
    }
    // Only global unicast (2000::/3) is public; of it, documentation (2001:db8::/32),
    // benchmarking (2001:2::/48), ORCHID (2001:10::/28, 2001:20::/28) and the
    // Teredo/IETF block (2001::/23) are not.
    if s[0] & 0xe000 != 0x2000 {
        return false; // ULA fc00::/7, link-local fe80::/10, multicast ff00::/8, ...
    }
    let special = match s[0] {
        0x2001 => s[1] == 0x0db8 || s[1] < 0x0200,
        0x3fff => true,
        _ => false,
    };
    !special
}

/// The IPv4 address an IPv6 one carries: mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`,
/// NAT64 `64:ff9b::a.b.c.d` (and the local-use `64:ff9b:1::/48`), 6to4 `2002:AABB:CCDD::`.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..5] == [0, 0, 0, 0, 0] && (s[5] == 0xffff || (s[5] == 0 && (s[6] != 0 || s[7] > 1))) {
        return Some(tail);
    }
    if s[0] == 0x64 && s[1] == 0xff9b && (s[2..6] == [0, 0, 0, 0] || s[2] == 1) {
        return Some(tail);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

/// The line a refusal is reported with, naming what to add and where:
/// `refused evil.example:443 (not on the allowlist) — to allow it add "evil.example:443"
/// to egress.allow of profile claude in agents.yaml`.
pub fn suggestion(host: &str, port: u16, why: &Refusal, profile: &str) -> String {
    let target = format!("{host}:{port}");
    if why.fixed_by_allowing() {
        format!(
            "refused {target} ({why}) — to allow it add \"{target}\" to egress.allow of profile {profile} in agents.yaml"
        )
    } else {
        format!("refused {target} ({why})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> Allowlist {
        Allowlist::parse(&[
            "api.anthropic.com:443",
            "*.crates.io:443",
            "Registry.NPMjs.org.:443",
            "model.test:8080",
        ])
        .unwrap()
    }

    #[test]
    fn names_on_the_list_pass_and_everything_else_is_refused() {
        use Refusal::*;
        let table: &[(&str, u16, Result<&str, Refusal>)] = &[
            ("api.anthropic.com", 443, Ok("api.anthropic.com")),
            ("API.Anthropic.COM.", 443, Ok("api.anthropic.com")),
            ("static.crates.io", 443, Ok("static.crates.io")),
            ("a.b.crates.io", 443, Ok("a.b.crates.io")),
            ("registry.npmjs.org", 443, Ok("registry.npmjs.org")),
            ("model.test", 8080, Ok("model.test")),
            // globs do not match the bare domain, nor a look-alike suffix
            ("crates.io", 443, Err(NotAllowed)),
            ("evilcrates.io", 443, Err(NotAllowed)),
            ("crates.io.evil.example", 443, Err(NotAllowed)),
            ("evil.example", 443, Err(NotAllowed)),
            ("api.anthropic.com.evil.example", 443, Err(NotAllowed)),
            // the right name on another port
            ("api.anthropic.com", 80, Err(PortNotAllowed)),
            ("static.crates.io", 22, Err(PortNotAllowed)),
            ("model.test", 443, Err(PortNotAllowed)),
            // addresses, in every spelling
            ("93.184.216.34", 443, Err(IpLiteral)),
            ("127.0.0.1", 443, Err(IpLiteral)),
            ("[::1]", 443, Err(IpLiteral)),
            ("::1", 443, Err(IpLiteral)),
            ("[2606:4700::1111]", 443, Err(IpLiteral)),
            ("127.1", 443, Err(IpLiteral)),
            ("2130706433", 443, Err(IpLiteral)),
            ("0x7f000001", 443, Err(IpLiteral)),
            ("10.0.0.1.", 443, Err(IpLiteral)),
            // not names at all
            ("", 443, Err(Malformed)),
            ("evil example", 443, Err(Malformed)),
            ("a..b", 443, Err(Malformed)),
            ("-x.example", 443, Err(Malformed)),
            ("x.example/path", 443, Err(Malformed)),
            ("user@x.example", 443, Err(Malformed)),
        ];
        let allow = list();
        for (host, port, want) in table {
            let got = allow.check(host, *port);
            let want = want.clone().map(str::to_string);
            assert_eq!(got, want, "{host}:{port}");
        }
    }

    #[test]
    fn an_empty_list_refuses_everything() {
        let empty = Allowlist::default();
        assert_eq!(
            empty.check("api.anthropic.com", 443),
            Err(Refusal::NotAllowed)
        );
    }

    #[test]
    fn entries_parse_or_say_how_to_write_them() {
        for ok in ["a.example:443", "*.crates.io:443", "x:1", "localhost:8080"] {
            assert!(Entry::parse(ok).is_ok(), "{ok}");
        }
        let bad: &[(&str, &str)] = &[
            ("api.example.com", "has no port"),
            ("api.example.com:0", "not a port"),
            ("api.example.com:99999", "not a port"),
            ("api.example.com:https", "not a port"),
            ("10.0.0.1:443", "IP addresses cannot be allowed"),
            ("[::1]:443", "not a host name"),
            ("*.com:443", "at least two labels"),
            ("*:443", "not a host name"),
            ("a b:443", "not a host name"),
        ];
        for (text, why) in bad {
            let err = Entry::parse(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
        assert_eq!(
            Entry::parse("*.Crates.IO:443").unwrap().to_string(),
            "*.crates.io:443"
        );
    }

    #[test]
    fn only_public_unicast_addresses_may_be_connected_to() {
        let refused = [
            "0.0.0.0",
            "0.1.2.3",
            "10.1.2.3",
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "127.255.0.9",
            "169.254.169.254",
            "172.16.0.1",
            "172.17.0.1",
            "172.31.255.255",
            "192.0.0.170",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.251",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a00:1",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "100::1",
        ];
        for ip in refused {
            let addr: IpAddr = ip.parse().unwrap();
            assert_eq!(check_address(addr), Err(Refusal::PrivateAddress), "{ip}");
        }
        let allowed = [
            "1.1.1.1",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.255.255",
            "172.32.0.1",
            "169.253.1.1",
            "192.169.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:1.1.1.1",
            "64:ff9b::101:101",
            "2002:101:101::1",
        ];
        for ip in allowed {
            let addr: IpAddr = ip.parse().unwrap();
            assert_eq!(check_address(addr), Ok(()), "{ip}");
        }
    }

    #[test]
    fn a_refusal_names_the_line_to_add_when_adding_would_help() {
        let line = suggestion("evil.example", 443, &Refusal::NotAllowed, "claude");
        assert_eq!(
            line,
            "refused evil.example:443 (not on the allowlist) — to allow it add \"evil.example:443\" to egress.allow of profile claude in agents.yaml"
        );
        let line = suggestion("10.0.0.1", 443, &Refusal::IpLiteral, "claude");
        assert!(!line.contains("to allow it"), "{line}");
    }
}
