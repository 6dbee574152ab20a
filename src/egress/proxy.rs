//! The egress proxy server (`polyphony egress-proxy`): HTTP `CONNECT` tunnels and
//! plain-HTTP forwarding, each decided by [`policy`] on the requested name and then on the
//! resolved address it connects to. One JSON line per event on stdout ([`EventLog`]), which
//! the daemon reads back from the container's log.
//!
//! Runs in its own container per attempt (see `super::image`), dual-homed: the attempt's
//! internal network, where the agent reaches it, and the outbound network.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::policy::{self, Allowlist, Refusal};

/// Where the proxy listens inside its container.
pub const PROXY_PORT: u16 = 3128;
/// Where a model-API gateway (issue 26) listens in the same process, when configured.
pub const GATEWAY_PORT: u16 = 3129;
/// The environment variable the container gets its [`ProxyConfig`] from (JSON).
pub const CONFIG_ENV: &str = crate::runtime::PROXY_CONFIG_ENV;
/// Largest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client has to send its request head, and an upstream to accept.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What one proxy enforces. Written by the daemon, read by the proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// `0.0.0.0:3128` in the container.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// `host:port` entries (`*.suffix:port` globs), see [`policy::Entry`].
    #[serde(default)]
    pub allow: Vec<String>,
    /// Operator-written name -> address pins (config.yaml `egress.hosts`): trusted like
    /// an `/etc/hosts` the operator wrote, so the private-range check does not apply.
    #[serde(default)]
    pub pins: BTreeMap<String, IpAddr>,
    /// Connections the attempt may open in all.
    #[serde(default = "default_max_connections")]
    pub max_connections: u64,
    /// Bytes (both directions, all connections) the attempt may move.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// The model-API gateway (issue 26) served on [`GATEWAY_PORT`] by the same process.
    #[serde(default)]
    pub gateway: Option<crate::gateway::GatewaySpec>,
}

fn default_listen() -> String {
    format!("0.0.0.0:{PROXY_PORT}")
}
pub const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;
pub const DEFAULT_MAX_BYTES: u64 = 4 * 1024 * 1024 * 1024;
fn default_max_connections() -> u64 {
    DEFAULT_MAX_CONNECTIONS
}
fn default_max_bytes() -> u64 {
    DEFAULT_MAX_BYTES
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: default_listen(),
            allow: Vec::new(),
            pins: BTreeMap::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_bytes: DEFAULT_MAX_BYTES,
            gateway: None,
        }
    }
}

/// The proxy's structured log: one JSON object per line, each with `event`, `ts` and `n`
/// (the line's number in the proxy's whole log, 0 for its first: the daemon keys what it
/// stores by it, so a log the engine rotated, which starts again at its first byte, keeps
/// its numbers). Cheap to clone; the gateway (issue 26) writes its own events through the
/// same log.
#[derive(Clone)]
pub struct EventLog {
    out: Arc<Mutex<(u64, Box<dyn Write + Send>)>>,
}

impl EventLog {
    /// Lines go to stdout (the container's log).
    pub fn stdout() -> EventLog {
        EventLog::to(Box::new(std::io::stdout()))
    }

    pub fn to(out: Box<dyn Write + Send>) -> EventLog {
        EventLog {
            out: Arc::new(Mutex::new((0, out))),
        }
    }

    /// Writes `event` (an object) with `ts` and `n` added, as one line.
    pub fn emit(&self, mut event: Value) {
        let Ok(mut out) = self.out.lock() else {
            return;
        };
        if let Value::Object(map) = &mut event {
            map.insert(
                "ts".into(),
                Value::String(
                    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                ),
            );
            map.insert("n".into(), Value::from(out.0));
        }
        // Numbered under the lock, so the numbers are in the log's order.
        out.0 += 1;
        let mut line = event.to_string();
        line.push('\n');
        let _ = out.1.write_all(line.as_bytes());
        let _ = out.1.flush();
    }
}

/// How names become addresses. The proxy uses the system resolver; tests inject answers.
pub trait Resolve: Send + Sync {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
        port: u16,
    ) -> futures_util::future::BoxFuture<'a, std::io::Result<Vec<SocketAddr>>>;
}

/// `getaddrinfo` (the container's `/etc/hosts`, then its DNS).
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
        port: u16,
    ) -> futures_util::future::BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((name, port)).await?.collect()) })
    }
}

/// Fixed answers (tests): a name not in the map does not resolve.
pub struct StaticResolver(pub BTreeMap<String, Vec<IpAddr>>);

impl Resolve for StaticResolver {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
        port: u16,
    ) -> futures_util::future::BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        Box::pin(async move {
            match self.0.get(name) {
                Some(ips) => Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()),
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{name} does not resolve"),
                )),
            }
        })
    }
}

/// The proxy's shared state: policy, caps and counters.
pub struct Proxy {
    allow: Allowlist,
    pins: BTreeMap<String, IpAddr>,
    max_connections: u64,
    max_bytes: u64,
    connections: AtomicU64,
    bytes: Arc<AtomicU64>,
    resolver: Box<dyn Resolve>,
    log: EventLog,
}

impl Proxy {
    pub fn new(
        config: &ProxyConfig,
        resolver: Box<dyn Resolve>,
        log: EventLog,
    ) -> Result<Arc<Proxy>, String> {
        let pins = config
            .pins
            .iter()
            .map(|(name, ip)| {
                policy::normalize(name)
                    .map(|n| (n, *ip))
                    .ok_or_else(|| format!("pin `{name}` is not a host name"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Arc::new(Proxy {
            allow: Allowlist::parse(&config.allow)?,
            pins,
            max_connections: config.max_connections,
            max_bytes: config.max_bytes,
            connections: AtomicU64::new(0),
            bytes: Arc::new(AtomicU64::new(0)),
            resolver,
            log,
        }))
    }

    pub fn log(&self) -> &EventLog {
        &self.log
    }

    /// Serves `listener` until the process ends.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let Ok((client, peer)) = listener.accept().await else {
                continue;
            };
            let proxy = self.clone();
            tokio::spawn(async move {
                proxy.handle(client, peer).await;
            });
        }
    }

    fn refuse_event(&self, host: &str, port: u16, why: &Refusal, method: &str, detail: &str) {
        self.log.emit(json!({
            "event": "refused",
            "host": host,
            "port": port,
            "method": method,
            "reason": why.as_str(),
            "detail": detail,
        }));
    }

    async fn handle(&self, mut client: TcpStream, peer: SocketAddr) {
        let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
            Ok(Ok(head)) => head,
            _ => {
                let _ = respond(&mut client, 400, "cannot read the request").await;
                return;
            }
        };
        let request = match parse_request(&head.bytes[..head.len]) {
            Ok(r) => r,
            Err(detail) => {
                self.refuse_event("", 0, &Refusal::Malformed, "", &detail);
                let _ = respond(&mut client, 400, &detail).await;
                return;
            }
        };
        let method = request.method.clone();
        let (host, port) = (request.host.clone(), request.port);
        let upstream = match self.open(&host, port).await {
            Ok(pair) => pair,
            Err((why, detail)) => {
                self.refuse_event(&host, port, &why, &method, &detail);
                let text = format!(
                    "polyphony egress refused {host}:{port}: {why}{}",
                    if detail.is_empty() {
                        String::new()
                    } else {
                        format!(" ({detail})")
                    }
                );
                let status = if why == Refusal::Unreachable {
                    502
                } else {
                    403
                };
                let _ = respond(&mut client, status, &text).await;
                return;
            }
        };
        let (mut server, addr) = upstream;
        self.log.emit(json!({
            "event": "allowed",
            "host": host,
            "port": port,
            "addr": addr.to_string(),
            "method": method,
            "client": peer.ip().to_string(),
        }));
        let started = Instant::now();
        let mut up_prefix = Vec::new();
        if request.connect {
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
        } else {
            up_prefix = request.forward_head;
        }
        // Bytes the client sent after its head belong to the tunnel / the request body.
        up_prefix.extend_from_slice(&head.bytes[head.len..head.filled]);
        let (up, down) = self.pipe(client, &mut server, up_prefix).await;
        self.log.emit(json!({
            "event": "closed",
            "host": host,
            "port": port,
            "bytes_up": up,
            "bytes_down": down,
            "ms": started.elapsed().as_millis() as u64,
        }));
    }

    /// Policy on the name, the caps, resolution, policy on each address, connect.
    async fn open(
        &self,
        host: &str,
        port: u16,
    ) -> Result<(TcpStream, SocketAddr), (Refusal, String)> {
        let name = self
            .allow
            .check(host, port)
            .map_err(|r| (r, String::new()))?;
        if self.bytes.load(Ordering::Relaxed) >= self.max_bytes {
            return Err((Refusal::ByteCap, format!("{} bytes", self.max_bytes)));
        }
        let n = self.connections.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.max_connections {
            return Err((
                Refusal::ConnectionCap,
                format!("{} connections", self.max_connections),
            ));
        }
        let addrs: Vec<SocketAddr> = match self.pins.get(&name) {
            Some(ip) => vec![SocketAddr::new(*ip, port)],
            None => {
                let found = self
                    .resolver
                    .resolve(&name, port)
                    .await
                    .map_err(|e| (Refusal::Unreachable, format!("resolving: {e}")))?;
                if found.is_empty() {
                    return Err((Refusal::Unreachable, "no address".into()));
                }
                // One non-public answer refuses the name: a mixed answer is an attack.
                if let Some(bad) = found
                    .iter()
                    .find(|a| policy::check_address(a.ip()).is_err())
                {
                    return Err((Refusal::PrivateAddress, format!("resolved to {}", bad.ip())));
                }
                found
            }
        };
        let mut last = String::from("no address");
        for addr in addrs {
            // The address connected to is the one just checked: no rebinding window.
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => return Ok((stream, addr)),
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: timed out"),
            }
        }
        Err((Refusal::Unreachable, last))
    }

    /// Copies both ways until either side closes or the byte cap is reached; returns the
    /// bytes sent up (to the server) and down.
    async fn pipe(&self, client: TcpStream, server: &mut TcpStream, prefix: Vec<u8>) -> (u64, u64) {
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.split();
        let budget = Budget {
            used: self.bytes.clone(),
            max: self.max_bytes,
        };
        let up = async {
            let mut n = 0u64;
            let sent = prefix.is_empty()
                || (budget.take(prefix.len() as u64) && sw.write_all(&prefix).await.is_ok());
            if sent {
                n += prefix.len() as u64;
                n += copy(&mut cr, &mut sw, &budget).await;
            }
            // The server sees the end either way (a cap reached included), so it closes.
            let _ = sw.shutdown().await;
            n
        };
        let down = async {
            let n = copy(&mut sr, &mut cw, &budget).await;
            let _ = cw.shutdown().await;
            n
        };
        let (up, down) = tokio::join!(up, down);
        if budget.used.load(Ordering::Relaxed) > budget.max {
            self.log.emit(json!({
                "event": "refused",
                "host": "",
                "port": 0,
                "method": "",
                "reason": Refusal::ByteCap.as_str(),
                "detail": format!("{} bytes", budget.max),
            }));
        }
        (up, down)
    }
}

struct Budget {
    used: Arc<AtomicU64>,
    max: u64,
}

impl Budget {
    /// Counts `n` bytes; false once the cap is passed.
    fn take(&self, n: u64) -> bool {
        self.used.fetch_add(n, Ordering::Relaxed) + n <= self.max
    }
}

async fn copy<R, W>(from: &mut R, to: &mut W, budget: &Budget) -> u64
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return total,
            Ok(n) => n,
        };
        if !budget.take(n as u64) || to.write_all(&buf[..n]).await.is_err() {
            return total;
        }
        total += n as u64;
    }
}

struct Head {
    bytes: Vec<u8>,
    /// Length of the head, through its blank line.
    len: usize,
    /// Bytes read in all (the head and whatever followed it).
    filled: usize,
}

async fn read_head(client: &mut TcpStream) -> std::io::Result<Head> {
    let mut bytes = vec![0u8; MAX_HEAD];
    let mut filled = 0;
    loop {
        if filled == bytes.len() {
            return Err(std::io::Error::other("request head too large"));
        }
        let n = client.read(&mut bytes[filled..]).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed before the head ended"));
        }
        filled += n;
        if let Some(end) = memchr::memmem::find(&bytes[..filled], b"\r\n\r\n") {
            return Ok(Head {
                bytes,
                len: end + 4,
                filled,
            });
        }
    }
}

/// A proxy request: its target and, for plain HTTP, the head to send upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRequest {
    pub method: String,
    pub connect: bool,
    pub host: String,
    pub port: u16,
    /// Plain HTTP: the request in origin form, `Proxy-*` headers dropped, `Connection: close`.
    pub forward_head: Vec<u8>,
}

/// Parses a request head (pure). `CONNECT host:port`, or an absolute `http://` URI.
pub fn parse_request(head: &[u8]) -> Result<ProxyRequest, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("incomplete request head".into()),
        Err(e) => return Err(format!("bad request head: {e}")),
    }
    let method = req.method.unwrap_or("").to_string();
    let target = req.path.unwrap_or("");
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(target, None)?;
        return Ok(ProxyRequest {
            method,
            connect: true,
            host,
            port,
            forward_head: Vec::new(),
        });
    }
    let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("HTTP://"))
    else {
        return Err(if target.starts_with("https://") {
            "an https:// URL must be tunnelled with CONNECT".into()
        } else {
            "not a proxy request (the target must be an absolute http:// URL or CONNECT host:port)"
                .into()
        });
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    if authority.contains('@') {
        return Err("credentials in the URL are not forwarded".into());
    }
    let (host, port) = split_authority(authority, Some(80))?;
    let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    let mut saw_host = false;
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if name.starts_with("proxy-") || name == "connection" || name == "keep-alive" {
            continue;
        }
        if name == "host" {
            saw_host = true;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    if !saw_host {
        out.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(ProxyRequest {
        method,
        connect: false,
        host,
        port,
        forward_head: out,
    })
}

/// `host:port` (`[v6]:port` too) into its parts; `default` is the port when none is given.
fn split_authority(authority: &str, default: Option<u16>) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return Err(format!("`{authority}` is not host:port"));
        };
        (format!("[{v6}]"), after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    let port = match (port, default) {
        (Some(p), _) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("`{authority}`: `{p}` is not a port"))?,
        (None, Some(d)) => d,
        (None, None) => return Err(format!("`{authority}` has no port")),
    };
    if host.is_empty() {
        return Err(format!("`{authority}` has no host"));
    }
    Ok((host, port))
}

async fn respond(client: &mut TcpStream, status: u16, text: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let body = format!("{text}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nX-Polyphony-Egress: refused\r\nConnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}

/// The gateway's hooks inside the proxy: each request becomes a `gateway` log line (the
/// daemon reads them live), and the daily remainder is re-read from the budget file the
/// daemon keeps up to date.
struct ProxyGatewayHooks {
    log: EventLog,
    budget_file: std::path::PathBuf,
    /// Until the daemon writes the file: the remainder at the attempt's start.
    initial: Option<f64>,
}

impl crate::gateway::Hooks for ProxyGatewayHooks {
    fn daily_left(&self) -> Option<crate::gateway::Picos> {
        let left = std::fs::read_to_string(&self.budget_file)
            .ok()
            .and_then(|t| serde_json::from_str::<crate::gateway::BudgetFile>(&t).ok())
            .map_or(self.initial, |b| b.daily_left_usd);
        left.map(|usd| crate::gateway::pricing::picos_of_usd(usd.max(0.0)))
    }

    fn on_request(&self, record: &crate::gateway::RequestRecord) {
        self.log
            .emit(json!({ "event": "gateway", "record": record }));
    }
}

/// Starts the gateway of `spec` on `listener`: reads the real credential from its file
/// (which the daemon deletes once the proxy is ready).
fn start_gateway(
    spec: &crate::gateway::GatewaySpec,
    listener: TcpListener,
    log: EventLog,
) -> anyhow::Result<crate::gateway::GatewayHandle> {
    let dir = std::path::Path::new(&spec.dir);
    let path = dir.join(crate::gateway::spec::CREDENTIAL_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("gateway: cannot read {}: {e}", path.display()))?;
    let secret = crate::gateway::spec::secret_of(&text)
        .ok_or_else(|| anyhow::anyhow!("gateway: {} is empty", path.display()))?;
    let hooks = ProxyGatewayHooks {
        log,
        budget_file: dir.join(crate::gateway::spec::BUDGET_FILE),
        initial: spec.daily_left_usd,
    };
    crate::gateway::start(listener, spec.settings(secret), std::sync::Arc::new(hooks))
        .map_err(|e| anyhow::anyhow!("gateway: {e}"))
}

/// `polyphony egress-proxy`: reads the config, binds, starts the model-API gateway when
/// configured, says `ready`, serves. Returns once SIGTERM (the daemon's stop, once the
/// agent ended) asked it to, after its last line, `end`: the daemon then has the whole log
/// without waiting for the engine to see the process gone (docs/benchmarks.md, "Egress").
pub async fn run(config: ProxyConfig) -> anyhow::Result<()> {
    // Before anything can be asked of it: PID 1 ignores a signal it has no handler for.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("cannot handle SIGTERM: {e}"))?;
    let log = EventLog::stdout();
    let proxy = Proxy::new(&config, Box::new(SystemResolver), log.clone())
        .map_err(|e| anyhow::anyhow!("egress proxy config: {e}"))?;
    let listener = TcpListener::bind(&config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    // Kept alive for the process's life (dropping the handle stops the gateway).
    let _gateway = match &config.gateway {
        Some(spec) => {
            let listener = TcpListener::bind(("0.0.0.0", GATEWAY_PORT))
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on :{GATEWAY_PORT}: {e}"))?;
            Some(start_gateway(spec, listener, log.clone())?)
        }
        None => None,
    };
    log.emit(json!({
        "event": "ready",
        "listen": config.listen,
        "allow": config.allow,
        "gateway": _gateway.is_some(),
    }));
    tokio::select! {
        () = proxy.serve(listener) => {}
        _ = terminate.recv() => log.emit(json!({ "event": "end" })),
    }
    Ok(())
}

/// Blocks until `path` exists, looking every 2 ms (the daemon renames it into place whole).
pub fn wait_for_file(path: &std::path::Path) {
    while std::fs::symlink_metadata(path).is_err() {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Reads the config from `file`, else from [`CONFIG_ENV`].
pub fn load_config(file: Option<&std::path::Path>) -> anyhow::Result<ProxyConfig> {
    let text = match file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?,
        None => std::env::var(CONFIG_ENV)
            .map_err(|_| anyhow::anyhow!("no --config FILE and {CONFIG_ENV} is not set"))?,
    };
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("egress proxy config: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_and_absolute_forms_parse_to_their_targets() {
        let r =
            parse_request(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(r.connect);
        assert_eq!((r.host.as_str(), r.port), ("api.anthropic.com", 443));
        let r = parse_request(b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.host, "[::1]");
        let r = parse_request(
            b"GET http://model.test:8080/v1/messages?x=1 HTTP/1.1\r\nHost: model.test:8080\r\nProxy-Authorization: Basic eA==\r\nConnection: keep-alive\r\nX-A: b\r\n\r\n",
        )
        .unwrap();
        assert!(!r.connect);
        assert_eq!((r.host.as_str(), r.port), ("model.test", 8080));
        let head = String::from_utf8(r.forward_head).unwrap();
        assert!(
            head.starts_with("GET /v1/messages?x=1 HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("Host: model.test:8080\r\n"));
        assert!(head.contains("X-A: b\r\n"));
        assert!(!head.to_ascii_lowercase().contains("proxy-authorization"));
        assert!(head.ends_with("Connection: close\r\n\r\n"));
        let r = parse_request(b"GET http://example.org HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.port, 80);
        assert!(String::from_utf8(r.forward_head)
            .unwrap()
            .contains("Host: example.org\r\n"));
    }

    #[test]
    fn requests_that_are_not_proxy_requests_are_refused() {
        for bad in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            b"GET https://x.example/ HTTP/1.1\r\n\r\n",
            b"CONNECT x.example HTTP/1.1\r\n\r\n",
            b"CONNECT x.example:0 HTTP/1.1\r\n\r\n",
            b"CONNECT :443 HTTP/1.1\r\n\r\n",
            b"GET http://user:pw@x.example/ HTTP/1.1\r\n\r\n",
            b"\x00\x01garbage\r\n\r\n",
        ] {
            assert!(
                parse_request(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// A `Write` the test can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Captured {
        fn events(&self) -> Vec<Value> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        }
    }

    /// An upstream on loopback answering every connection with `hello` then what it read.
    async fn upstream() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let _ = s.write_all(b"hello ").await;
                    let _ = s.write_all(&buf[..n]).await;
                });
            }
        });
        addr
    }

    async fn start(
        config: ProxyConfig,
        answers: BTreeMap<String, Vec<IpAddr>>,
    ) -> (SocketAddr, Captured) {
        let captured = Captured::default();
        let log = EventLog::to(Box::new(captured.clone()));
        let proxy = Proxy::new(&config, Box::new(StaticResolver(answers)), log).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(proxy.serve(listener));
        (addr, captured)
    }

    async fn ask(proxy: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn tunnels_to_allowed_names_and_refuses_the_rest_with_a_log_line_each() {
        let up = upstream().await;
        let config = ProxyConfig {
            allow: vec![
                format!("model.test:{}", up.port()),
                format!("rebind.test:{}", up.port()),
                "evil-private.test:443".into(),
            ],
            pins: BTreeMap::from([("model.test".to_string(), up.ip())]),
            ..ProxyConfig::default()
        };
        let answers = BTreeMap::from([
            ("rebind.test".to_string(), vec![up.ip()]),
            (
                "evil-private.test".to_string(),
                vec!["8.8.8.8".parse().unwrap(), "10.1.2.3".parse().unwrap()],
            ),
        ]);
        let (proxy, log) = start(config, answers).await;
        let port = up.port();
        // Allowed (a pinned address is the operator's, so loopback is fine there).
        let got = ask(
            proxy,
            &format!("CONNECT model.test:{port} HTTP/1.1\r\n\r\nping"),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(got.ends_with("hello ping"), "{got}");
        // Plain HTTP is forwarded in origin form.
        let got = ask(
            proxy,
            &format!(
                "GET http://model.test:{port}/v1/x HTTP/1.1\r\nHost: model.test:{port}\r\n\r\n"
            ),
        )
        .await;
        assert!(got.starts_with("hello GET /v1/x HTTP/1.1\r\n"), "{got}");
        // Refused: unlisted, another port, raw IPs, a resolved loopback, a mixed answer.
        for (target, reason) in [
            ("evil.example:443".to_string(), "not_allowed"),
            ("model.test:443".to_string(), "port_not_allowed"),
            (format!("127.0.0.1:{port}"), "ip_literal"),
            (format!("[::1]:{port}"), "ip_literal"),
            (format!("rebind.test:{port}"), "private_address"),
            ("evil-private.test:443".to_string(), "private_address"),
        ] {
            let got = ask(proxy, &format!("CONNECT {target} HTTP/1.1\r\n\r\n")).await;
            assert!(got.starts_with("HTTP/1.1 403"), "{target}: {got}");
            assert!(got.contains("polyphony egress refused"), "{target}: {got}");
            let events = log.events();
            let last = events.last().unwrap();
            assert_eq!(last["event"], "refused", "{target}");
            assert_eq!(last["reason"], reason, "{target}");
        }
        let events = log.events();
        // Each line carries its number in the whole log, in order (issue 25: the daemon
        // keys what it stores by it, so the engine's rotation of the log renumbers none).
        let numbers: Vec<u64> = events.iter().map(|e| e["n"].as_u64().unwrap()).collect();
        assert_eq!(numbers, (0..events.len() as u64).collect::<Vec<_>>());
        let allowed = events.iter().filter(|e| e["event"] == "allowed").count();
        assert_eq!(allowed, 2);
        assert!(events
            .iter()
            .any(|e| e["event"] == "closed" && e["bytes_down"].as_u64() > Some(0)));
    }

    #[tokio::test]
    async fn the_connection_and_byte_caps_hold_per_proxy() {
        let up = upstream().await;
        let allow = vec![format!("model.test:{}", up.port())];
        let pins = BTreeMap::from([("model.test".to_string(), up.ip())]);
        let config = ProxyConfig {
            allow: allow.clone(),
            pins: pins.clone(),
            max_connections: 2,
            ..ProxyConfig::default()
        };
        let (proxy, log) = start(config, BTreeMap::new()).await;
        let req = format!("CONNECT model.test:{} HTTP/1.1\r\n\r\nx", up.port());
        assert!(ask(proxy, &req).await.starts_with("HTTP/1.1 200"));
        assert!(ask(proxy, &req).await.starts_with("HTTP/1.1 200"));
        let third = ask(proxy, &req).await;
        assert!(third.starts_with("HTTP/1.1 403"), "{third}");
        assert_eq!(log.events().last().unwrap()["reason"], "connection_cap");

        let config = ProxyConfig {
            allow,
            pins,
            max_bytes: 8,
            ..ProxyConfig::default()
        };
        let (proxy, log) = start(config, BTreeMap::new()).await;
        let got = ask(
            proxy,
            &format!(
                "CONNECT model.test:{} HTTP/1.1\r\n\r\n0123456789abcdef",
                up.port()
            ),
        )
        .await;
        assert!(
            !got.contains("0123456789abcdef"),
            "the cap let the bytes through: {got}"
        );
        let next = ask(proxy, &req).await;
        assert!(next.starts_with("HTTP/1.1 403"), "{next}");
        assert!(log.events().iter().any(|e| e["reason"] == "byte_cap"));
    }

    #[test]
    fn config_json_has_defaults_and_refuses_unknown_fields() {
        let c: ProxyConfig = serde_json::from_str(r#"{"allow":["a.example:443"]}"#).unwrap();
        assert_eq!(c.listen, "0.0.0.0:3128");
        assert_eq!(c.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert!(serde_json::from_str::<ProxyConfig>(r#"{"alow":[]}"#).is_err());
    }
}
