//! The model-API gateway (src/gateway/, issue 26) on loopback, in front of the scripted
//! Anthropic API (src/scripted_model.rs) and of a replay server that answers recorded
//! provider streams in odd chunks: the placeholder is the only credential it accepts, the
//! upstream sees the real key and nothing else, streams pass byte for byte and unbuffered,
//! cost is the provider's usage times the table, limits come from the headers and a budget
//! refuses before the request goes out.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use chrono::{DateTime, TimeZone, Utc};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use polyphony::gateway::pricing::picos_of_usd;
use polyphony::gateway::{
    self, new_placeholder, Api, Credential, GatewayHandle, GatewaySettings, Hooks, Price,
    PriceTable, RequestRecord,
};
use polyphony::scripted_model::{
    Reply, ScriptedAnthropic, Turn, CACHE_READ_TOKENS, INPUT_TOKENS, OUTPUT_TOKENS,
};
use serde_json::{json, Value};

const REAL_KEY: &str = "sk-ant-real-key-0123456789abcdef";

/// Records every request event.
#[derive(Default)]
struct Recorder {
    records: Mutex<Vec<RequestRecord>>,
    daily_left: Option<u128>,
}

impl Hooks for Recorder {
    fn daily_left(&self) -> Option<u128> {
        self.daily_left
    }
    fn on_request(&self, record: &RequestRecord) {
        self.records.lock().unwrap().push(record.clone());
    }
    fn now(&self) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap()
    }
}

fn prices() -> PriceTable {
    PriceTable::only([(
        "claude-test".to_string(),
        Price {
            input: 3.0,
            cache_write: 3.75,
            cache_read: 0.30,
            output: 15.0,
        },
    )])
}

async fn gateway(
    api: Api,
    upstream: &str,
    hooks: Arc<Recorder>,
    attempt_budget: Option<f64>,
) -> GatewayHandle {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
    gateway::start(
        listener,
        GatewaySettings {
            api,
            upstream: upstream.to_string(),
            credential: Credential::ApiKey(REAL_KEY.into()),
            placeholder: new_placeholder(),
            prices: prices(),
            attempt_budget: attempt_budget.map(picos_of_usd),
            budget_resets_at: None,
        },
        hooks,
    )
    .expect("gateway")
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
    /// When the first body chunk arrived, after the request was sent.
    first_chunk: Duration,
}

async fn post(url: &str, key: &str, body: &Value) -> Answer {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::post(url)
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let sent = Instant::now();
    let resp = client.request(req).await.expect("response");
    let (parts, mut incoming) = resp.into_parts();
    let mut body = Vec::new();
    let mut first_chunk = None;
    while let Some(frame) = incoming.frame().await {
        let frame = frame.expect("frame");
        if let Ok(data) = frame.into_data() {
            first_chunk.get_or_insert_with(|| sent.elapsed());
            body.extend_from_slice(&data);
        }
    }
    Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: Bytes::from(body),
        first_chunk: first_chunk.unwrap_or_default(),
    }
}

fn agent_turn() -> Value {
    json!({"model": "claude-test", "max_tokens": 1000, "stream": true,
           "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
           "messages": [{"role": "user", "content": "fix add()"}]})
}

fn scripted_cost() -> u128 {
    let p = |usd_per_mtok: f64| picos_of_usd(usd_per_mtok / 1e6);
    INPUT_TOKENS as u128 * p(3.0)
        + CACHE_READ_TOKENS as u128 * p(0.30)
        + OUTPUT_TOKENS as u128 * p(15.0)
}

#[tokio::test]
async fn only_the_placeholder_passes_and_only_the_real_key_goes_upstream() {
    let api = ScriptedAnthropic::start(Ipv4Addr::LOCALHOST.into(), |_: &Turn<'_>| {
        Reply::Text("done".into())
    })
    .await
    .expect("scripted");
    let hooks = Arc::new(Recorder::default());
    let gw = gateway(Api::Anthropic, &api.base_url(), hooks.clone(), None).await;
    let url = format!("{}/v1/messages?beta=true", gw.base_url());

    // Another attempt's placeholder, the real key itself, nothing: refused, never forwarded.
    let other = new_placeholder();
    for key in [other.as_str(), REAL_KEY, ""] {
        let a = post(&url, key, &agent_turn()).await;
        assert_eq!(a.status, 401, "{key}");
        let v: Value = serde_json::from_slice(&a.body).expect("json error");
        assert_eq!(v["error"]["type"], "authentication_error");
    }
    assert!(api.requests().is_empty(), "{:?}", api.requests());

    let a = post(&url, gw.placeholder(), &agent_turn()).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["content-type"], "text/event-stream");
    assert!(String::from_utf8_lossy(&a.body).contains("message_stop"));
    assert_eq!(api.credentials(), vec![REAL_KEY.to_string()]);
    assert_eq!(api.requests(), vec!["POST /v1/messages".to_string()]);

    // Metered: the scripted usage times the table, exactly.
    let m = gw.meter();
    assert_eq!(m.requests, 4);
    assert_eq!(m.refused_credential, 3);
    assert_eq!(m.usage.input_tokens, INPUT_TOKENS);
    assert_eq!(m.usage.cache_read_tokens, CACHE_READ_TOKENS);
    assert_eq!(m.usage.output_tokens, OUTPUT_TOKENS);
    assert_eq!(m.cost_picos, scripted_cost());
    let records = hooks.records.lock().unwrap().clone();
    let outcomes: Vec<&str> = records.iter().map(|r| r.outcome.as_str()).collect();
    assert_eq!(
        outcomes,
        [
            "refused_credential",
            "refused_credential",
            "refused_credential",
            "ok"
        ]
    );
    let ok = &records[3];
    assert_eq!(ok.path, "/v1/messages");
    assert_eq!(ok.model.as_deref(), Some("claude-test"));
    assert_eq!(ok.cost_picos, Some(scripted_cost()));
    // Events never carry a credential (or a query string).
    let all = serde_json::to_string(&records).unwrap();
    assert!(
        !all.contains(REAL_KEY) && !all.contains(gw.placeholder()) && !all.contains("beta=true")
    );
    assert!(
        ok.summary().contains("claude-test -> 200 ok"),
        "{}",
        ok.summary()
    );

    // HEAD /api/hello answers without a key and is not forwarded.
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let resp = client
        .request(
            http::Request::head(format!("{}/api/hello", gw.base_url()))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(api.requests().len(), 1);
}

#[tokio::test]
async fn a_429_sets_the_reset_from_its_headers() {
    let reset = Utc.with_ymd_and_hms(2026, 12, 1, 13, 0, 0).unwrap();
    let api = ScriptedAnthropic::start(Ipv4Addr::LOCALHOST.into(), move |_: &Turn<'_>| {
        Reply::RateLimited {
            retry_after_secs: 60,
            reset_epoch: reset.timestamp(),
        }
    })
    .await
    .expect("scripted");
    let hooks = Arc::new(Recorder::default());
    let gw = gateway(Api::Anthropic, &api.base_url(), hooks.clone(), None).await;
    let a = post(
        &format!("{}/v1/messages", gw.base_url()),
        gw.placeholder(),
        &agent_turn(),
    )
    .await;
    assert_eq!(a.status, 429);
    // The provider's answer passes unchanged, headers included.
    assert_eq!(a.headers["anthropic-ratelimit-unified-status"], "rejected");
    let v: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(gw.meter().limit_reset, Some(reset));
    let r = hooks.records.lock().unwrap()[0].clone();
    assert_eq!(
        (r.status, r.outcome.as_str(), r.reset_at),
        (429, "limited", Some(reset))
    );
}

#[tokio::test]
async fn a_budget_that_cannot_cover_the_next_request_refuses_it_before_it_goes_out() {
    let api = ScriptedAnthropic::start(Ipv4Addr::LOCALHOST.into(), |_: &Turn<'_>| {
        Reply::Text("done".into())
    })
    .await
    .expect("scripted");
    // The estimate of one turn: body bytes / 4 at $3 plus 1000 output tokens at $15
    // ($0.015 + a little); the first turn fits in $0.02, the second does not (the first
    // spent $0.0057).
    let hooks = Arc::new(Recorder::default());
    let gw = gateway(Api::Anthropic, &api.base_url(), hooks.clone(), Some(0.02)).await;
    let url = format!("{}/v1/messages", gw.base_url());
    assert_eq!(
        post(&url, gw.placeholder(), &agent_turn()).await.status,
        200
    );
    let a = post(&url, gw.placeholder(), &agent_turn()).await;
    assert_eq!(a.status, 429);
    let v: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("budget limit reached") && msg.contains("max_cost_usd_per_attempt"),
        "{msg}"
    );
    assert_eq!(api.requests().len(), 1, "the refused request went out");
    let m = gw.meter();
    let refusal = m.budget_refusal.expect("refusal recorded");
    assert_eq!(refusal.limit, "attempt");
    assert!(
        (refusal.remaining_usd - (0.02 - 0.0057)).abs() < 1e-12,
        "{refusal:?}"
    );

    // The daily budget refuses the same way (what is left today, minus this attempt).
    let hooks = Arc::new(Recorder {
        daily_left: Some(picos_of_usd(0.001)),
        ..Recorder::default()
    });
    let gw = gateway(Api::Anthropic, &api.base_url(), hooks, None).await;
    let a = post(
        &format!("{}/v1/messages", gw.base_url()),
        gw.placeholder(),
        &agent_turn(),
    )
    .await;
    assert_eq!(a.status, 429);
    assert_eq!(gw.meter().budget_refusal.unwrap().limit, "daily");
    assert_eq!(api.requests().len(), 1);
}

/// A recorded answer, served in the chunks it arrived in, with a pause after the first.
#[derive(Clone)]
struct Recording {
    content_type: &'static str,
    chunks: Vec<&'static [u8]>,
    pause: Duration,
}

async fn replay_server(rec: Recording) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move || {
        let rec = rec.clone();
        async move {
            let chunks = rec.chunks.clone();
            let pause = rec.pause;
            let stream = futures_util::stream::unfold(0usize, move |i| {
                let chunks = chunks.clone();
                async move {
                    if i >= chunks.len() {
                        return None;
                    }
                    if i == 1 {
                        tokio::time::sleep(pause).await;
                    }
                    Some((
                        Ok::<_, std::io::Error>(Bytes::from_static(chunks[i])),
                        i + 1,
                    ))
                }
            });
            let mut resp = axum::response::Response::new(Body::from_stream(stream));
            resp.headers_mut()
                .insert("content-type", rec.content_type.parse().unwrap());
            resp.headers_mut()
                .insert("request-id", "req_recorded".parse().unwrap());
            resp
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// An Anthropic Messages stream as the API sends it (pings, thinking, text, a tool call
/// split across deltas, cumulative usage), cut at arbitrary byte offsets, one cut inside a
/// multi-byte character.
const ANTHROPIC_RECORDED: &[&[u8]] = &[
    b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-test\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":1024,\"cache_read_input_tokens\":20480,\"output_tokens\":2,\"service_tier\":\"standard\"}}}\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"I'll fix add() \xe2\x80\x94 caf\xc3",
    b"\xa9 first\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"Bash\",\"input\":{}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\": \\\"sed -i",
    b" s/a - b/a + b/ calc.sh\\\"}\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\nevent: mess",
    b"age_stop\ndata: {\"type\":\"message_stop\"}\n\n",
];

/// An OpenAI Responses stream (Codex's wire format), CRLF-free, usage on
/// `response.completed`.
const RESPONSES_RECORDED: &[&[u8]] = &[
    b"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_68af\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"gpt-5.1-codex\",\"usage\":null}}\n\nevent: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}}\n\n",
    b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Done.\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_68af\",\"object\":\"response\",\"status\":\"completed\",\"model\":\"gpt-5.1-codex\",\"usage\":{\"input_tokens\":12000,\"input_tokens_details\":{\"cached_tokens\":11000},\"output_tokens\":250,\"output_tokens_details\":{\"reasoning_tokens\":200},\"total_tokens\":12250}}}\n\n",
];

#[tokio::test]
async fn recorded_streams_replay_unchanged_and_unbuffered() {
    let pause = Duration::from_millis(400);
    for (api, recording, body, expect_model, expect_usage) in [
        (
            Api::Anthropic,
            ANTHROPIC_RECORDED,
            agent_turn(),
            "claude-test",
            (472u64, 1024u64, 20480u64, 89u64),
        ),
        (
            Api::OpenAiResponses,
            RESPONSES_RECORDED,
            json!({"model": "gpt-5.1-codex", "stream": true, "input": []}),
            "gpt-5.1-codex",
            (1000, 0, 11000, 250),
        ),
    ] {
        let rec = Recording {
            content_type: "text/event-stream; charset=utf-8",
            chunks: recording.to_vec(),
            pause,
        };
        let addr = replay_server(rec).await;
        let hooks = Arc::new(Recorder::default());
        let gw = gateway(api, &format!("http://{addr}"), hooks.clone(), None).await;
        let path = match api {
            Api::Anthropic => "/v1/messages?beta=true",
            _ => "/v1/responses",
        };
        let direct = post(&format!("http://{addr}{path}"), REAL_KEY, &body).await;
        let via = post(
            &format!("http://{}{path}", gw.addr()),
            gw.placeholder(),
            &body,
        )
        .await;
        let recorded: Vec<u8> = recording.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(direct.body.as_ref(), recorded.as_slice());
        assert_eq!(
            via.body, direct.body,
            "{api:?}: the gateway changed the stream"
        );
        assert_eq!(via.headers["content-type"], direct.headers["content-type"]);
        assert_eq!(via.headers["request-id"], "req_recorded");
        // Streamed, not buffered: the first chunk arrives before the upstream's pause ends.
        assert!(
            via.first_chunk < pause,
            "{api:?}: first chunk after {:?}",
            via.first_chunk
        );
        let m = gw.meter();
        assert_eq!(
            (
                m.usage.input_tokens,
                m.usage.cache_write_tokens,
                m.usage.cache_read_tokens,
                m.usage.output_tokens
            ),
            expect_usage,
            "{api:?}"
        );
        let r = hooks.records.lock().unwrap()[0].clone();
        assert_eq!(r.model.as_deref(), Some(expect_model));
        assert_eq!(r.outcome, "ok");
        // gpt-5.1-codex is not in this test's table: tokens counted, price unknown.
        if api == Api::OpenAiResponses {
            assert!(!r.price_known && r.cost_usd.is_none());
            assert!(m.unpriced_models.contains("gpt-5.1-codex"));
            assert!(r.summary().contains("price unknown"), "{}", r.summary());
        }
    }
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_in_the_apis_shape() {
    // A port nothing listens on.
    let dead = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    let hooks = Arc::new(Recorder::default());
    let gw = gateway(
        Api::Anthropic,
        &format!("http://{addr}"),
        hooks.clone(),
        None,
    )
    .await;
    let a = post(
        &format!("{}/v1/messages", gw.base_url()),
        gw.placeholder(),
        &agent_turn(),
    )
    .await;
    assert_eq!(a.status, 502);
    let v: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "api_error");
    assert!(!String::from_utf8_lossy(&a.body).contains(REAL_KEY));
    assert_eq!(hooks.records.lock().unwrap()[0].outcome, "upstream_failed");
}
