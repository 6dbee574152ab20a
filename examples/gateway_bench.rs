//! Gateway overhead (issue 26, docs/benchmarks.md "Model-API gateway"): the same requests to
//! the scripted Anthropic API (src/scripted_model.rs) directly and through the gateway, one
//! keep-alive client each, interleaved; p50/p99 latency of each path and what the gateway
//! adds, then the throughput of one large streamed answer both ways. Two placements:
//!
//! - `loopback`: the gateway in this process (as the daemon hosts it under `egress: open`),
//!   client, gateway and server on 127.0.0.1.
//! - `process`: the gateway as the proxy container runs it, `POLYPHONY_BIN egress-proxy`,
//!   but as a plain process on the host, on 127.0.0.1 (port 3129 must be free).
//! - `container`: the gateway as an `egress: allowlist` attempt really has it: inside the
//!   attempt's egress proxy container (`polyphony egress-proxy`, the `polyphony-egress` image
//!   made of `POLYPHONY_BIN`, started by `DockerRuntime::egress_up` with its credential file
//!   and its resource limits), on an `--internal` network of its own. The client runs in a
//!   container too (this very binary, `client` mode, in the proxy's image), joined to the
//!   attempt's network (to reach the gateway) and to the proxy's outbound bridge (to reach
//!   the server directly), so both paths start in the same container and end at the same
//!   server on the host's bridge address: the direct path is what the CLI does under
//!   `egress: open` without a gateway.
//!
//! Usage: `gateway_bench [loopback|process|container|markdown] [REQUESTS [STREAM_MIB]]`
//! (defaults 2000 and 64; `markdown`: `process` and `container` as docs/benchmarks.md's section, sizes from
//! `BENCH_GATEWAY_REQUESTS` and `BENCH_GATEWAY_MIB`). `client ...` is the container side.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use axum::body::{Body, Bytes};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use polyphony::gateway::{self, Api, Credential, GatewaySettings, NoHooks, PriceTable};
use polyphony::runtime::{DockerRuntime, EgressPlan, WorkerRuntime};
use polyphony::scripted_model::{Reply, ScriptedAnthropic, Turn};

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// Stream repetitions (each way, interleaved; the median is reported).
const STREAM_REPS: usize = 3;

async fn one(client: &HttpClient, url: &str, key: &str, body: &Bytes) -> (Duration, usize) {
    let req = http::Request::post(url)
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .expect("request");
    let t = Instant::now();
    let resp = client.request(req).await.expect("response");
    assert!(resp.status().is_success(), "{url}: {}", resp.status());
    let bytes = resp
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .len();
    (t.elapsed(), bytes)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The request each latency sample sends (what Claude Code's turn looks like, small).
fn request_body() -> Bytes {
    Bytes::from(
        serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "stream": true,
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "hello"}]})
        .to_string(),
    )
}

fn settings(upstream: String, placeholder: String) -> GatewaySettings {
    GatewaySettings {
        api: Api::Anthropic,
        upstream,
        credential: Credential::ApiKey("sk-ant-bench".into()),
        placeholder,
        prices: PriceTable::with_overrides(&Default::default()),
        attempt_budget: None,
        budget_resets_at: None,
    }
}

async fn start_gateway(upstream: String) -> gateway::GatewayHandle {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
    gateway::start(
        listener,
        settings(upstream, gateway::new_placeholder()),
        Arc::new(NoHooks),
    )
    .expect("gateway")
}

/// An upstream on `ip` that streams `mib` MiB of SSE text deltas in 16 KiB chunks.
async fn big_stream(ip: IpAddr, mib: usize) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let event = {
        let text = "x".repeat(16 * 1024 - 120);
        Bytes::from(format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
        ))
    };
    let chunks = mib * 1024 * 1024 / event.len();
    let app = axum::Router::new().fallback(move || {
        let event = event.clone();
        async move {
            let stream = futures_util::stream::iter(
                (0..chunks).map(move |_| Ok::<_, std::io::Error>(event.clone())),
            );
            let mut resp = axum::response::Response::new(Body::from_stream(stream));
            resp.headers_mut()
                .insert("content-type", "text/event-stream".parse().expect("ct"));
            resp
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// What one placement measured.
struct Figures {
    n: usize,
    direct: Vec<Duration>,
    via: Vec<Duration>,
    stream_mib: f64,
    stream_direct: f64,
    stream_via: f64,
}

impl Figures {
    fn added(&self, p: f64) -> f64 {
        ms(pct(&self.via, p)) - ms(pct(&self.direct, p))
    }

    fn text(&self, what: &str) -> String {
        format!(
            "{what}: {} requests each way\ndirect:  p50 {:.3} ms  p99 {:.3} ms\ngateway: p50 {:.3} ms  p99 {:.3} ms\nadded:   p50 {:.3} ms  p99 {:.3} ms\nstream of {:.1} MiB: direct {:.0} MiB/s, gateway {:.0} MiB/s\n",
            self.n,
            ms(pct(&self.direct, 0.5)),
            ms(pct(&self.direct, 0.99)),
            ms(pct(&self.via, 0.5)),
            ms(pct(&self.via, 0.99)),
            self.added(0.5),
            self.added(0.99),
            self.stream_mib,
            self.stream_direct,
            self.stream_via
        )
    }
}

/// `n` interleaved requests each way, after 50 warm-ups: `{direct_ns, via_ns}`.
async fn measure_latency(
    n: usize,
    (direct_url, via_url, key): (&str, &str, &str),
) -> serde_json::Value {
    let body = request_body();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    for _ in 0..50 {
        one(&client, direct_url, "k", &body).await;
        one(&client, via_url, key, &body).await;
    }
    let mut direct = Vec::with_capacity(n);
    let mut via = Vec::with_capacity(n);
    // Interleaved, so drift on a shared machine hits both alike.
    for _ in 0..n {
        direct.push(one(&client, direct_url, "k", &body).await.0.as_nanos() as u64);
        via.push(one(&client, via_url, key, &body).await.0.as_nanos() as u64);
    }
    serde_json::json!({"direct_ns": direct, "via_ns": via})
}

/// [`STREAM_REPS`] streamed answers each way: `[[bytes, direct s, via s], ...]`.
async fn measure_stream((direct_url, via_url, key): (&str, &str, &str)) -> serde_json::Value {
    let body = request_body();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut streams = Vec::new();
    for _ in 0..STREAM_REPS {
        let (td, bd) = one(&client, direct_url, "k", &body).await;
        let (tv, bv) = one(&client, via_url, key, &body).await;
        assert_eq!(bd, bv, "the gateway changed the stream's length");
        streams.push(serde_json::json!([bd, td.as_secs_f64(), tv.as_secs_f64()]));
    }
    serde_json::Value::Array(streams)
}

/// The client side: latency, then streams. One JSON object.
async fn measure(
    n: usize,
    latency: (&str, &str, &str),
    stream: (&str, &str, &str),
) -> serde_json::Value {
    let mut v = measure_latency(n, latency).await;
    v["streams"] = measure_stream(stream).await;
    v
}

fn figures(n: usize, v: &serde_json::Value) -> anyhow::Result<Figures> {
    let durations = |k: &str| -> anyhow::Result<Vec<Duration>> {
        let mut d: Vec<Duration> = v[k]
            .as_array()
            .with_context(|| format!("no {k} in {v}"))?
            .iter()
            .filter_map(|x| x.as_u64().map(Duration::from_nanos))
            .collect();
        d.sort();
        ensure!(d.len() == n, "{k}: {} samples, want {n}", d.len());
        Ok(d)
    };
    let streams = v["streams"].as_array().context("no streams")?;
    let rate = |i: usize| {
        median(
            streams
                .iter()
                .map(|s| s[0].as_f64().unwrap_or(0.0) / 1048576.0 / s[i].as_f64().unwrap_or(1.0))
                .collect(),
        )
    };
    Ok(Figures {
        n,
        direct: durations("direct_ns")?,
        via: durations("via_ns")?,
        stream_mib: streams[0][0].as_f64().unwrap_or(0.0) / 1048576.0,
        stream_direct: rate(1),
        stream_via: rate(2),
    })
}

async fn loopback(n: usize, mib: usize) -> anyhow::Result<Figures> {
    let api = ScriptedAnthropic::start(Ipv4Addr::LOCALHOST.into(), |_: &Turn<'_>| {
        Reply::Text("ok".into())
    })
    .await?;
    let gw = start_gateway(api.base_url()).await;
    let up = big_stream(Ipv4Addr::LOCALHOST.into(), mib).await;
    let gw2 = start_gateway(format!("http://{up}")).await;
    let v = measure(
        n,
        (
            &format!("{}/v1/messages", api.base_url()),
            &format!("{}/v1/messages", gw.base_url()),
            gw.placeholder(),
        ),
        (
            &format!("http://{up}/v1/messages"),
            &format!("{}/v1/messages", gw2.base_url()),
            gw2.placeholder(),
        ),
    )
    .await;
    figures(n, &v)
}

/// `polyphony egress-proxy` run on the host (the release binary, the same process the
/// proxy container runs) with its gateway forwarding to `upstream`; the gateway listens on
/// port 3129 of every address, reached here on 127.0.0.1. Killed on drop.
struct HostProxy {
    child: std::process::Child,
    placeholder: String,
    _dir: tempfile::TempDir,
}

impl Drop for HostProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn host_proxy(upstream: String) -> anyhow::Result<HostProxy> {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    let cred = dir.path().join(gateway::spec::CREDENTIAL_FILE);
    std::fs::write(&cred, "sk-ant-bench\n")?;
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600))?;
    let placeholder = gateway::new_placeholder();
    let config = polyphony::egress::ProxyConfig {
        listen: "127.0.0.1:0".into(),
        gateway: Some(gateway::GatewaySpec {
            api: Api::Anthropic,
            upstream,
            kind: gateway::CredentialKind::ApiKey,
            placeholder: placeholder.clone(),
            prices: Default::default(),
            attempt_budget_usd: None,
            daily_left_usd: None,
            budget_resets_at: None,
            dir: dir.path().display().to_string(),
        }),
        ..Default::default()
    };
    let file = dir.path().join("config.json");
    std::fs::write(&file, serde_json::to_string(&config)?)?;
    let mut child = Command::new(polyphony_bin()?)
        .arg("egress-proxy")
        .arg("--config")
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = std::io::BufReader::new(stdout).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains(r#""event":"ready""#) => break,
            Some(Ok(_)) => continue,
            _ => {
                let _ = child.kill();
                bail!("polyphony egress-proxy exited before it was ready");
            }
        }
    }
    // Its log (one line per request) is drained as the container's is by Docker.
    std::thread::spawn(move || for _ in lines {});
    std::fs::remove_file(&cred)?;
    Ok(HostProxy {
        child,
        placeholder,
        _dir: dir,
    })
}

/// The release gateway process on the host, everything on 127.0.0.1: latency through one
/// such process, then (after it stopped: both need port 3129) the stream through another.
async fn loopback_process(n: usize, mib: usize) -> anyhow::Result<Figures> {
    let via = "http://127.0.0.1:3129/v1/messages";
    let api = ScriptedAnthropic::start(Ipv4Addr::LOCALHOST.into(), |_: &Turn<'_>| {
        Reply::Text("ok".into())
    })
    .await?;
    let proxy = host_proxy(api.base_url())?;
    let mut v = measure_latency(
        n,
        (
            &format!("{}/v1/messages", api.base_url()),
            via,
            &proxy.placeholder,
        ),
    )
    .await;
    drop(proxy);
    let up = big_stream(Ipv4Addr::LOCALHOST.into(), mib).await;
    let proxy = host_proxy(format!("http://{up}"))?;
    v["streams"] =
        measure_stream((&format!("http://{up}/v1/messages"), via, &proxy.placeholder)).await;
    figures(n, &v)
}

fn docker(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("docker").args(args).output()?;
    ensure!(
        out.status.success(),
        "docker {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Everything the container run made, removed on drop.
struct Made {
    runtime: Arc<DockerRuntime>,
    bridge: String,
    proxies: Vec<(String, String)>,
    client: Option<String>,
    dir: tempfile::TempDir,
}

impl Drop for Made {
    fn drop(&mut self) {
        if let Some(c) = &self.client {
            let _ = Command::new("docker").args(["rm", "-f", c]).output();
        }
        let runtime = self.runtime.clone();
        let proxies = std::mem::take(&mut self.proxies);
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                for (proxy, network) in &proxies {
                    let _ = runtime.egress_down(proxy, network).await;
                }
            });
        });
        let _ = done.join();
        let _ = Command::new("docker")
            .args(["network", "rm", &self.bridge])
            .output();
    }
}

/// The release `polyphony` the proxy image is made of: `POLYPHONY_BIN`, else beside this
/// example (`target/release/examples/..`).
fn polyphony_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("POLYPHONY_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe()?;
    let p = me
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("polyphony"))
        .context("no target directory")?;
    ensure!(p.exists(), "{} missing: set POLYPHONY_BIN", p.display());
    Ok(p)
}

/// One attempt-like egress proxy with its gateway forwarding to `upstream`; returns the
/// gateway's URL on the attempt's network, that network and the placeholder.
async fn proxy_with_gateway(
    made: &mut Made,
    n: u32,
    upstream: String,
) -> anyhow::Result<(String, String, String)> {
    use std::os::unix::fs::PermissionsExt;
    let task = format!("gwbench{}", std::process::id());
    let (network, proxy_name) = polyphony::egress::names(&task, n, "gwbench0");
    let dir = made.dir.path().join(&proxy_name);
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let cred = dir.join(gateway::spec::CREDENTIAL_FILE);
    std::fs::write(&cred, "sk-ant-bench\n")?;
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600))?;
    // As the daemon does it: the proxy runs as this user, or as nobody (owning its files)
    // when this is root.
    let mut user = polyphony::runtime::daemon_user();
    if user.starts_with("0:") {
        user = "65534:65534".to_string();
        for p in [&dir, &cred] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534))?;
        }
    }
    let placeholder = gateway::new_placeholder();
    let spec = gateway::GatewaySpec {
        api: Api::Anthropic,
        upstream,
        kind: gateway::CredentialKind::ApiKey,
        placeholder: placeholder.clone(),
        prices: Default::default(),
        attempt_budget_usd: None,
        daily_left_usd: None,
        budget_resets_at: None,
        dir: gateway::spec::CONTAINER_DIR.to_string(),
    };
    let config = polyphony::egress::ProxyConfig {
        gateway: Some(spec),
        ..Default::default()
    };
    let plan = EgressPlan {
        network: network.clone(),
        outbound: made.bridge.clone(),
        proxy_name: proxy_name.clone(),
        labels: polyphony::egress::labels(&task, n, "gwbench0"),
        config_json: serde_json::to_string(&config)?,
        resolver_hosts: Vec::new(),
        mounts: vec![(
            dir.display().to_string(),
            gateway::spec::CONTAINER_DIR.to_string(),
        )],
        user: Some(user),
        config_file: None,
    };
    made.proxies.push((proxy_name, network.clone()));
    let endpoint = made.runtime.egress_up(&plan).await?;
    std::fs::remove_file(&cred)?;
    Ok((
        format!(
            "http://{}/v1/messages",
            SocketAddr::new(endpoint.proxy_ip, polyphony::egress::GATEWAY_PORT)
        ),
        network,
        placeholder,
    ))
}

async fn container(n: usize, mib: usize) -> anyhow::Result<Figures> {
    let binary = polyphony_bin()?;
    let runtime = Arc::new(DockerRuntime::connect().await?.with_proxy_binary(&binary));
    let image = runtime.proxy_image().await?;
    let bridge = format!("polyphony-gwbench-{}", std::process::id());
    docker(&["network", "create", "--driver", "bridge", &bridge])?;
    let mut made = Made {
        runtime: runtime.clone(),
        bridge: bridge.clone(),
        proxies: Vec::new(),
        client: None,
        dir: tempfile::tempdir()?,
    };
    let host: IpAddr = docker(&[
        "network",
        "inspect",
        "--format",
        "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
        &bridge,
    ])?
    .parse()
    .context("the bridge's gateway address")?;
    let api = ScriptedAnthropic::start(host, |_: &Turn<'_>| Reply::Text("ok".into())).await?;
    let up = big_stream(host, mib).await;
    let (via, network, key) = proxy_with_gateway(&mut made, 1, api.base_url()).await?;
    let (stream_via, stream_network, stream_key) =
        proxy_with_gateway(&mut made, 2, format!("http://{up}")).await?;
    let me = std::env::current_exe()?;
    let n_arg = n.to_string();
    let direct = format!("{}/v1/messages", api.base_url());
    let stream_direct = format!("http://{up}/v1/messages");
    let mount = format!("{}:/gateway_bench:ro", me.display());
    let id = docker(&[
        "create",
        "--network",
        &network,
        "--user",
        "65534:65534",
        "-v",
        &mount,
        "--entrypoint",
        "/gateway_bench",
        &image,
        "client",
        &n_arg,
        &direct,
        &via,
        &key,
        &stream_direct,
        &stream_via,
        &stream_key,
    ])?;
    made.client = Some(id.clone());
    docker(&["network", "connect", &stream_network, &id])?;
    docker(&["network", "connect", &bridge, &id])?;
    eprintln!("gateway: {n} requests each way from a container ...");
    let out = Command::new("docker").args(["start", "-a", &id]).output()?;
    if !out.status.success() {
        bail!(
            "the client container failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("client output: {}", String::from_utf8_lossy(&out.stdout)))?;
    drop(made);
    figures(n, &v)
}

fn markdown(n: usize, mib: usize, lo: &Figures, co: &Figures) -> String {
    let row = |name: &str, f: &Figures| {
        format!(
            "| {name} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | **{:.3} ms** | {:.3} ms | {:.0} MiB/s | {:.0} MiB/s |\n",
            ms(pct(&f.direct, 0.5)),
            ms(pct(&f.direct, 0.99)),
            ms(pct(&f.via, 0.5)),
            ms(pct(&f.via, 0.99)),
            f.added(0.5),
            f.added(0.99),
            f.stream_direct,
            f.stream_via
        )
    };
    let mut md = String::new();
    md.push_str(&format!("{n} streamed Messages requests (a small Claude Code turn) each way, interleaved after 50 warm-ups, one keep-alive client per path, to the scripted Anthropic API answering `ok`; then a {mib} MiB streamed answer ({STREAM_REPS} times each way, the median). \"Added\" is the gateway's percentile minus the direct one's.\n\n"));
    md.push_str("- **loopback**: the gateway as the release binary runs it, `polyphony egress-proxy` (the proxy container's own process), here as a plain process on the host; client, gateway and server on 127.0.0.1.\n");
    md.push_str("- **container**: the gateway where an `egress: allowlist` attempt has it, in the attempt's egress proxy container (`polyphony-egress` image of the release binary, 1 CPU, started by `DockerRuntime::egress_up` with its credential file) on an `--internal` network. The client runs in a container on that network and the proxy's outbound bridge; direct, it reaches the server on the host's bridge address itself (as the CLI does without a gateway); through the gateway, one more container hop (client → proxy → host).\n\n");
    md.push_str("| Placement | direct p50 | direct p99 | gateway p50 | gateway p99 | added p50 | added p99 | stream direct | stream via gateway |\n|---|---|---|---|---|---|---|---|---|\n");
    md.push_str(&row("loopback", lo));
    md.push_str(&row("container", co));
    md.push_str(&format!(
        "\nTarget (issue 26): under 2 ms p50 added on loopback — {} ({:.3} ms). In the container the added p50 is {:.3} ms: the gateway's own work (the loopback figure) plus a second veth hop through the proxy's network namespace and its 1-CPU limit.\n",
        if lo.added(0.5) < 2.0 { "met" } else { "missed" },
        lo.added(0.5),
        co.added(0.5)
    ));
    md
}

fn arg(args: &[String], i: usize, default: usize) -> usize {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, rest) = match args.first().map(String::as_str) {
        Some(m @ ("loopback" | "process" | "container" | "markdown" | "client")) => (m, &args[1..]),
        _ => ("loopback", &args[..]),
    };
    match mode {
        "client" => {
            let [n, d, v, k, sd, sv, sk] = rest else {
                bail!("client N DIRECT VIA KEY STREAM_DIRECT STREAM_VIA STREAM_KEY");
            };
            let n: usize = n.parse()?;
            let out = measure(n, (d, v, k), (sd, sv, sk)).await;
            println!("{out}");
        }
        "loopback" => {
            let f = loopback(arg(rest, 0, 2000), arg(rest, 1, 64)).await?;
            print!("{}", f.text("loopback"));
        }
        "process" => {
            let f = loopback_process(arg(rest, 0, 2000), arg(rest, 1, 64)).await?;
            print!("{}", f.text("loopback, release egress-proxy process"));
        }
        "container" => {
            let f = container(arg(rest, 0, 2000), arg(rest, 1, 64)).await?;
            print!("{}", f.text("container"));
        }
        _ => {
            let env = |k: &str, d: usize| {
                std::env::var(k)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(d)
            };
            let (n, mib) = (
                env("BENCH_GATEWAY_REQUESTS", 2000),
                env("BENCH_GATEWAY_MIB", 32),
            );
            eprintln!("gateway: loopback, {n} requests each way ...");
            let lo = loopback_process(n, mib).await?;
            eprint!("{}", lo.text("loopback"));
            let co = container(n, mib).await?;
            eprint!("{}", co.text("container"));
            print!("{}", markdown(n, mib, &lo, &co));
        }
    }
    Ok(())
}
