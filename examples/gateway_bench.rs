//! Gateway overhead (issue 26, docs/benchmarks.md "Model-API gateway"): the same requests to
//! the scripted Anthropic API (src/scripted_model.rs) directly and through the gateway, on
//! loopback, one keep-alive client each; prints p50/p99 latency of each path and the added
//! latency, then the throughput of one large streamed answer both ways.
//!
//! `cargo run --example gateway_bench [-- REQUESTS [STREAM_MIB]]` (defaults 2000 and 64).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use polyphony::gateway::{self, Api, Credential, GatewaySettings, NoHooks, PriceTable};
use polyphony::scripted_model::{Reply, ScriptedAnthropic, Turn};

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

async fn one(client: &HttpClient, url: &str, key: &str, body: &Bytes) -> (Duration, usize) {
    let req = http::Request::post(url)
        .header("x-api-key", key)
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .expect("request");
    let t = Instant::now();
    let resp = client.request(req).await.expect("response");
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

async fn start_gateway(upstream: String) -> gateway::GatewayHandle {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
    gateway::start(
        listener,
        GatewaySettings {
            api: Api::Anthropic,
            upstream,
            credential: Credential::ApiKey("sk-ant-bench".into()),
            placeholder: gateway::new_placeholder(),
            prices: PriceTable::with_overrides(&Default::default()),
            attempt_budget: None,
            budget_resets_at: None,
        },
        Arc::new(NoHooks),
    )
    .expect("gateway")
}

/// An upstream that streams `mib` MiB of SSE text deltas in 16 KiB chunks.
async fn big_stream(mib: usize) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let mib: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let api = ScriptedAnthropic::start(Ipv4Addr::LOCALHOST.into(), |_: &Turn<'_>| {
        Reply::Text("ok".into())
    })
    .await
    .expect("scripted");
    let gw = start_gateway(api.base_url()).await;
    let body = Bytes::from(
        serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "stream": true,
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "hello"}]})
        .to_string(),
    );
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let direct_url = format!("{}/v1/messages", api.base_url());
    let via_url = format!("{}/v1/messages", gw.base_url());
    // Warm both connections.
    for _ in 0..50 {
        one(&client, &direct_url, "k", &body).await;
        one(&client, &via_url, gw.placeholder(), &body).await;
    }
    let mut direct = Vec::with_capacity(n);
    let mut via = Vec::with_capacity(n);
    // Interleaved, so drift on a shared machine hits both alike.
    for _ in 0..n {
        direct.push(one(&client, &direct_url, "k", &body).await.0);
        via.push(one(&client, &via_url, gw.placeholder(), &body).await.0);
    }
    direct.sort();
    via.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("requests: {n} each way (streamed Messages answers, keep-alive, loopback)");
    println!(
        "direct:  p50 {:.3} ms  p99 {:.3} ms",
        ms(pct(&direct, 0.5)),
        ms(pct(&direct, 0.99))
    );
    println!(
        "gateway: p50 {:.3} ms  p99 {:.3} ms",
        ms(pct(&via, 0.5)),
        ms(pct(&via, 0.99))
    );
    println!(
        "added:   p50 {:.3} ms  p99 {:.3} ms",
        ms(pct(&via, 0.5)) - ms(pct(&direct, 0.5)),
        ms(pct(&via, 0.99)) - ms(pct(&direct, 0.99))
    );
    let up = big_stream(mib).await;
    let gw2 = start_gateway(format!("http://{up}")).await;
    let (t_direct, b_direct) = one(&client, &format!("http://{up}/v1/messages"), "k", &body).await;
    let (t_via, b_via) = one(
        &client,
        &format!("{}/v1/messages", gw2.base_url()),
        gw2.placeholder(),
        &body,
    )
    .await;
    assert_eq!(b_direct, b_via);
    let rate = |b: usize, t: Duration| b as f64 / (1024.0 * 1024.0) / t.as_secs_f64();
    println!(
        "stream of {:.1} MiB: direct {:.0} MiB/s, gateway {:.0} MiB/s",
        b_direct as f64 / 1048576.0,
        rate(b_direct, t_direct),
        rate(b_via, t_via)
    );
}
