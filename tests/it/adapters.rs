//! Adapters against recorded CLI output (tests/fixtures, provenance in PROVENANCE.md) and
//! the invocation contract. Every fixture is replayed through `agents::replay`.

use std::io::BufReader;
use std::path::PathBuf;

use polyphony::agents::replay::{replay, ReplayStatus, ReplaySummary};
use polyphony::agents::{adapter_for, AgentOutcome, FailureKind};
use polyphony::domain::{AgentType, EventKind, NetworkMode, ResourceLimits, RunSpec, TokenUsage};

fn fixture(agent: AgentType, name: &str) -> ReplaySummary {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(agent.as_str())
        .join(name);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let adapter = adapter_for(agent);
    replay(BufReader::new(file), adapter.as_ref()).unwrap_or_else(|e| panic!("{e}"))
}

struct Want {
    status: ReplayStatus,
    turns: u32,
    tokens: TokenUsage,
    cost: Option<f64>,
    final_message: Option<&'static str>,
    quota: Option<Option<&'static str>>,
    counts: &'static [(EventKind, u64)],
}

fn check(agent: AgentType, name: &str, want: Want) {
    let s = fixture(agent, name);
    let o: &AgentOutcome = &s.outcome;
    assert_eq!(s.status, want.status, "{name}: status; outcome {o:?}");
    assert_eq!(o.turns, want.turns, "{name}: turns");
    assert_eq!(o.tokens, want.tokens, "{name}: tokens");
    assert_eq!(o.cost_usd, want.cost, "{name}: cost");
    assert_eq!(
        o.final_message.as_deref(),
        want.final_message,
        "{name}: final message"
    );
    assert_eq!(
        o.quota.as_ref().map(|q| q.resets_at.as_deref()),
        want.quota,
        "{name}: quota {:?}",
        o.quota
    );
    for (kind, n) in want.counts {
        assert_eq!(s.count(*kind), *n, "{name}: count of {kind}");
    }
}

fn tokens(input: u64, cached_input: u64, output: u64) -> TokenUsage {
    TokenUsage {
        input,
        output,
        cached_input,
    }
}

#[test]
fn claude_real_success() {
    check(
        AgentType::Claude,
        "gump_write_file_success.ndjson",
        Want {
            status: ReplayStatus::Succeeded,
            turns: 2,
            // The result's usage only: 4 + 1774 + 38897 input, 38897 cached, 107 output.
            tokens: tokens(40675, 38897, 107),
            cost: Some(0.033231000000000004),
            final_message: Some("Created `stream-test.txt` with the content \"stream works\"."),
            quota: None,
            counts: &[
                (EventKind::System, 1),
                (EventKind::ToolCall, 1),
                (EventKind::ToolResult, 1),
                (EventKind::Usage, 1),
                (EventKind::Message, 1),
                (EventKind::Result, 1),
                (EventKind::Unknown, 0),
            ],
        },
    );
}

#[test]
fn claude_usage_limit() {
    check(
        AgentType::Claude,
        "usage_limit_constructed.ndjson",
        Want {
            status: ReplayStatus::Quota,
            turns: 1,
            tokens: tokens(0, 0, 0),
            cost: Some(0.0),
            final_message: Some("Claude AI usage limit reached|1755772800"),
            quota: Some(Some("1755772800")),
            counts: &[
                (EventKind::Usage, 1),
                (EventKind::Error, 1),
                (EventKind::Result, 1),
            ],
        },
    );
}

#[test]
fn claude_limit_words_in_code_are_not_quota() {
    // No result line: the per-message usage is counted once per message id.
    check(
        AgentType::Claude,
        "rate_limit_text_in_code_constructed.ndjson",
        Want {
            status: ReplayStatus::Incomplete,
            turns: 2,
            tokens: tokens(1110 + 1155, 2100, 50),
            cost: None,
            final_message: None,
            quota: None,
            counts: &[
                (EventKind::ToolCall, 1),
                (EventKind::ToolResult, 1),
                (EventKind::Message, 2),
            ],
        },
    );
}

#[test]
fn codex_real_success() {
    check(
        AgentType::Codex,
        "gump_stream_success.ndjson",
        Want {
            status: ReplayStatus::Succeeded,
            turns: 1,
            tokens: tokens(15931, 14080, 175),
            cost: None,
            final_message: Some(
                "Created `stream-test.txt` with the content:\n\n`codex stream works`",
            ),
            quota: None,
            counts: &[
                (EventKind::System, 2),
                (EventKind::Message, 3),
                (EventKind::ToolCall, 1),
                (EventKind::ToolResult, 1),
                (EventKind::Result, 1),
            ],
        },
    );
}

#[test]
fn codex_real_turn_failed_is_failure_not_quota() {
    check(
        AgentType::Codex,
        "issue37676_turn_failed.ndjson",
        Want {
            status: ReplayStatus::Failed,
            turns: 1,
            tokens: tokens(0, 0, 0),
            cost: None,
            final_message: Some("ok"),
            quota: None,
            counts: &[(EventKind::Error, 2), (EventKind::Result, 1)],
        },
    );
    let s = fixture(AgentType::Codex, "issue37676_turn_failed.ndjson");
    assert_eq!(
        s.outcome.error.as_deref(),
        Some("shared rollout token budget exhausted")
    );
}

#[test]
fn codex_usage_limit() {
    check(
        AgentType::Codex,
        "usage_limit_constructed.ndjson",
        Want {
            status: ReplayStatus::Quota,
            turns: 1,
            tokens: tokens(0, 0, 0),
            cost: None,
            final_message: None,
            quota: Some(Some("3:28 PM")),
            counts: &[(EventKind::Error, 1), (EventKind::Result, 1)],
        },
    );
}

#[test]
fn codex_transient_429_then_success_and_cumulative_usage() {
    // `codex exec` reports once: a second turn.completed after the report is not folded,
    // in replay as in the daemon (`agents::fold`), so it neither adds nor replaces.
    let s = fixture(
        AgentType::Codex,
        "reconnect_then_success_constructed.ndjson",
    );
    assert_eq!(s.lines_after_final, 1);
    check(
        AgentType::Codex,
        "reconnect_then_success_constructed.ndjson",
        Want {
            status: ReplayStatus::Succeeded,
            turns: 1,
            tokens: tokens(24763, 24448, 122),
            cost: None,
            final_message: Some(
                "Added retry on 429 Too Many Requests: usage limit reached errors now back off.",
            ),
            quota: None,
            counts: &[(EventKind::ToolResult, 1)],
        },
    );
}

#[test]
fn gemini_real_success() {
    check(
        AgentType::Gemini,
        "gump_stream_success.ndjson",
        Want {
            status: ReplayStatus::Succeeded,
            turns: 2,
            tokens: tokens(12479, 5952, 89),
            cost: None,
            final_message: Some("Created `stream-test.txt` with the content 'stream works'."),
            quota: None,
            counts: &[
                (EventKind::System, 1),
                (EventKind::Message, 4),
                (EventKind::ToolCall, 1),
                (EventKind::ToolResult, 1),
                (EventKind::Result, 1),
            ],
        },
    );
}

#[test]
fn gemini_quota_result() {
    check(
        AgentType::Gemini,
        "quota_error_constructed.ndjson",
        Want {
            status: ReplayStatus::Quota,
            turns: 0,
            tokens: tokens(90, 0, 10),
            cost: None,
            final_message: None,
            quota: Some(None),
            counts: &[(EventKind::Error, 1), (EventKind::Result, 1)],
        },
    );
}

#[test]
fn kimi_documented_tool_call_run() {
    check(
        AgentType::Kimi,
        "docs_print_mode_tool_call.ndjson",
        Want {
            status: ReplayStatus::Succeeded,
            turns: 2,
            tokens: tokens(0, 0, 0),
            cost: None,
            final_message: Some("当前目录有两个 Python 文件。"),
            quota: None,
            counts: &[
                (EventKind::ToolCall, 1),
                (EventKind::ToolResult, 1),
                (EventKind::Message, 1),
            ],
        },
    );
}

#[test]
fn kimi_provider_429_line_is_quota() {
    check(
        AgentType::Kimi,
        "provider_429_constructed.ndjson",
        Want {
            status: ReplayStatus::Quota,
            turns: 1,
            tokens: tokens(0, 0, 0),
            cost: None,
            final_message: Some("Running the tests."),
            quota: Some(Some("after 1 seconds")),
            counts: &[
                (EventKind::ToolCall, 1),
                (EventKind::ToolResult, 1),
                (EventKind::Error, 1),
            ],
        },
    );
}

// ------------------------------------------------------------------ classify edge cases

fn kind_of(agent: AgentType, line: &str) -> (EventKind, String) {
    let c = adapter_for(agent).classify(line);
    (c.kind, c.summary)
}

#[test]
fn malformed_lines_are_unknown_for_every_adapter() {
    let huge = format!(
        "{{\"type\":\"result\",\"x\":\"{}\"}}",
        "a".repeat(1024 * 1024 + 1)
    );
    let cases = [
        "",
        "   ",
        "not json",
        "{\"type\":",
        "[1,2,3]",
        "42",
        "null",
        "{\"type\":\"mystery\"}",
        "{\"type\":7}",
        "\u{0}\u{1}",
        huge.as_str(),
    ];
    for agent in AgentType::ALL {
        for line in cases {
            let (kind, summary) = kind_of(agent, line);
            assert_eq!(
                kind,
                EventKind::Unknown,
                "{agent} {:?}",
                &line[..line.len().min(30)]
            );
            assert!(summary.chars().count() <= 160, "{agent}: summary bounded");
        }
    }
}

#[test]
fn claude_key_order_and_tool_summaries() {
    let check = |line: &str, kind: EventKind, summary: &str| {
        let (k, s) = kind_of(AgentType::Claude, line);
        assert_eq!((k, s.as_str()), (kind, summary), "{line}");
    };
    check(
        r#"{"message":{"content":[{"input":{"command":"cargo test --lib"},"name":"Bash","type":"tool_use"}]},"type":"assistant"}"#,
        EventKind::ToolCall,
        "Bash: cargo test --lib",
    );
    check(
        r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"Let me\nthink"}]}}"#,
        EventKind::Message,
        "thinking: Let me think",
    );
    check(
        r#"{"type":"system","subtype":"hook_started","hook_name":"SessionStart"}"#,
        EventKind::System,
        "system: hook_started",
    );
    check(
        r#"{"type":"user","message":{"content":[{"type":"tool_result","is_error":true,"content":[{"type":"text","text":"exit 1"}]}]}}"#,
        EventKind::ToolResult,
        "tool error: exit 1",
    );
}

#[test]
fn claude_outcome_rules() {
    let run = |lines: &[&str]| {
        let a = adapter_for(AgentType::Claude);
        let mut o = AgentOutcome::default();
        for l in lines {
            let c = a.classify(l);
            a.observe(&mut o, &c);
        }
        o
    };
    // is_error with subtype success is a failure.
    let o = run(&[
        r#"{"type":"result","subtype":"success","is_error":true,"result":"Invalid API key · Please run /login","num_turns":1}"#,
    ]);
    assert!(o.completed && !o.succeeded && o.quota.is_none());
    assert_eq!(
        o.error.as_deref(),
        Some("success: Invalid API key · Please run /login")
    );
    // Max turns.
    let o =
        run(&[r#"{"type":"result","subtype":"error_max_turns","is_error":false,"num_turns":5}"#]);
    assert!(!o.succeeded);
    assert_eq!(o.turns, 5);
    // Lines after the result never change the totals.
    let o = run(&[
        r#"{"type":"result","subtype":"success","is_error":false,"num_turns":1,"usage":{"input_tokens":1,"output_tokens":2}}"#,
        r#"{"type":"assistant","message":{"id":"m9","content":[{"type":"text","text":"late"}],"usage":{"input_tokens":100,"output_tokens":100}}}"#,
    ]);
    assert_eq!((o.turns, o.tokens.input, o.tokens.output), (1, 1, 2));
    assert!(o.succeeded);
    // Weekly and session limit banners.
    let o = run(&[
        r#"{"type":"result","subtype":"success","is_error":true,"result":"Weekly limit reached ∙ resets 5am"}"#,
    ]);
    assert_eq!(o.quota.and_then(|q| q.resets_at).as_deref(), Some("5am"));
    let o = run(&[
        r#"{"type":"result","subtype":"success","is_error":true,"result":"You've hit your session limit · resets 1pm"}"#,
    ]);
    assert_eq!(o.quota.and_then(|q| q.resets_at).as_deref(), Some("1pm"));
    // A successful final message that talks about rate limits is a success.
    let o = run(&[
        r#"{"type":"result","subtype":"success","is_error":false,"result":"I fixed the rate limit handling: a 429 usage limit reached error now retries."}"#,
    ]);
    assert!(o.succeeded && o.quota.is_none());
    // rate_limit_event rejected → quota; allowed_warning → not.
    let o = run(&[
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","rateLimitType":"seven_day"}}"#,
    ]);
    assert!(o.quota.is_none());
    let o = run(&[
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1790472600,"rateLimitType":"five_hour"}}"#,
    ]);
    assert_eq!(
        o.quota.and_then(|q| q.resets_at).as_deref(),
        Some("1790472600")
    );
}

fn spec(agent_type: AgentType, cli: &str) -> RunSpec {
    RunSpec {
        task_id: "t1".into(),
        attempt: 1,
        agent: "a".into(),
        agent_type,
        cli_command: cli.into(),
        fallback: vec![],
        identity: "me".into(),
        workspace: PathBuf::from("/tmp/w"),
        branch: "b".into(),
        base_ref: None,
        image: "img".into(),
        model: Some("m1".into()),
        max_turns: Some(7),
        args: Vec::new(),
        env_overlay: vec![],
        volume_mounts: vec![],
        deadline_seconds: 60,
        idle_timeout_seconds: 30,
        network: NetworkMode::Bridge,
        egress: Default::default(),
        limits: ResourceLimits::default(),
        verification: vec![],
        verify_image: "img".into(),
        rule: "r".into(),
    }
}

#[test]
fn invocations_keep_the_prompt_one_argv_element() {
    let prompt = "Fix it; rm -rf / && echo $HOME \"quoted\" `tick`\nline two";
    let cases: [(AgentType, &[&str]); 5] = [
        (
            AgentType::Claude,
            &[
                "/opt/claude",
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--dangerously-skip-permissions",
                "--max-turns",
                "7",
                "--model",
                "m1",
            ],
        ),
        (
            AgentType::Codex,
            &[
                "/opt/codex",
                "exec",
                "--json",
                "--dangerously-bypass-approvals-and-sandbox",
                "-m",
                "m1",
            ],
        ),
        (
            AgentType::Kimi,
            &[
                "/opt/kimi",
                "--print",
                "--output-format=stream-json",
                "--model",
                "m1",
                "--max-steps-per-turn",
                "7",
                "-p",
            ],
        ),
        (
            AgentType::Gemini,
            &[
                "/opt/gemini",
                "--output-format",
                "stream-json",
                "--yolo",
                "-m",
                "m1",
                "-p",
            ],
        ),
        (
            AgentType::OpenCode,
            &["/opt/opencode", "run", "--format", "json", "-m", "m1"],
        ),
    ];
    for (agent, head) in cases {
        let cli = format!("/opt/{agent}");
        let inv = adapter_for(agent).invocation(&spec(agent, &cli), prompt);
        let mut want: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        want.push(prompt.to_string());
        assert_eq!(inv.argv, want, "{agent}");
        assert_eq!(inv.stdin, None);
    }
}

/// Issue 28: OpenCode's `run` auto-rejects permission prompts unless given `--auto`; a
/// profile's `args` (checked against the descriptor when the config loads) come after
/// Polyphony's own flags and before the prompt.
#[test]
fn opencode_takes_the_profiles_flags_before_the_prompt() {
    let mut s = spec(AgentType::OpenCode, "opencode");
    s.args = vec!["--auto".into(), "--agent".into(), "build".into()];
    let inv = adapter_for(AgentType::OpenCode).invocation(&s, "Fix it");
    assert_eq!(
        inv.argv,
        [
            "opencode", "run", "--format", "json", "-m", "m1", "--auto", "--agent", "build",
            "Fix it"
        ]
    );
}

#[test]
fn long_or_dash_prompts_go_to_stdin() {
    let long = "x".repeat(100 * 1024);
    for prompt in [long.as_str(), "--help me"] {
        for agent in AgentType::ALL {
            let inv = adapter_for(agent).invocation(&spec(agent, "c"), prompt);
            assert_eq!(inv.stdin.as_deref(), Some(prompt), "{agent}");
            assert!(
                !inv.argv.iter().any(|a| a == prompt),
                "{agent}: prompt not in argv"
            );
            if agent == AgentType::Codex {
                assert_eq!(inv.argv.last().map(String::as_str), Some("-"));
            }
        }
    }
}

// ---- Real Claude Code 2.1.332 (tests/real_cli.rs against the scripted model API) ----

#[test]
fn claude_2_1_332_real_success_reads_usage_and_cost_from_the_result() {
    // The result line starts with `duration_api_ms`, not `type`.
    check(
        AgentType::Claude,
        "real_2.1.332_lands_1.ndjson",
        Want {
            status: ReplayStatus::Succeeded,
            turns: 2,
            // Two API calls of 1200 uncached + 5000 cache-read input and 40 output tokens.
            tokens: tokens(12400, 10000, 80),
            cost: Some(0.0132),
            final_message: Some("Fixed add(): it now adds."),
            quota: None,
            counts: &[
                (EventKind::System, 1),
                (EventKind::ToolCall, 1),
                (EventKind::ToolResult, 1),
                (EventKind::Message, 1),
                (EventKind::Result, 1),
                (EventKind::Unknown, 0),
            ],
        },
    );
    let repair = fixture(AgentType::Claude, "real_2.1.332_repair_2.ndjson");
    assert_eq!(repair.status, ReplayStatus::Succeeded);
    assert_eq!(repair.outcome.failure_kind, None);
}

#[test]
fn claude_2_1_332_real_429_is_quota_without_a_made_up_reset_time() {
    check(
        AgentType::Claude,
        "real_2.1.332_quota_1.ndjson",
        Want {
            status: ReplayStatus::Quota,
            turns: 1,
            tokens: tokens(0, 0, 0),
            cost: Some(0.0),
            final_message: Some("API Error: Request rejected (429) · This request would exceed your account's rate limit. Please try again later."),
            // "Please try again later." names no time.
            quota: Some(None),
            counts: &[(EventKind::Error, 1), (EventKind::Result, 1), (EventKind::Unknown, 0)],
        },
    );
    let s = fixture(AgentType::Claude, "real_2.1.332_quota_1.ndjson");
    assert_eq!(s.outcome.failure_kind, Some(FailureKind::Quota));
    assert!(!s.outcome.hopeless);
}

#[test]
fn claude_2_1_332_real_401_retry_is_a_hopeless_auth_failure() {
    let s = fixture(AgentType::Claude, "real_2.1.332_auth_1.ndjson");
    let o = &s.outcome;
    assert_eq!(s.status, ReplayStatus::Failed, "{o:?}");
    assert_eq!(o.failure_kind, Some(FailureKind::Auth));
    assert!(o.hopeless);
    assert!(o.quota.is_none());
    let retry = o.api_retry.as_ref().expect("api_retry");
    assert_eq!(
        (retry.status, retry.error.as_str()),
        (Some(401), "authentication_failed")
    );
    assert_eq!(retry.max_retries, 10);
    assert!(o
        .error
        .as_deref()
        .is_some_and(|e| e.starts_with("authentication failed: the model API answered 401")));
}

#[test]
fn claude_api_retry_lines_label_transient_errors_and_clear_on_progress() {
    let adapter = adapter_for(AgentType::Claude);
    let mut o = AgentOutcome::default();
    for line in [
        r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":500,"error_status":529,"error":"overloaded_error"}"#,
        r#"{"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,"retry_delay_ms":1100,"error_status":500,"error":"server_error"}"#,
    ] {
        adapter.observe(&mut o, &adapter.classify(line));
    }
    assert_eq!(o.failure_kind, Some(FailureKind::Transient));
    assert!(!o.hopeless);
    assert_eq!(o.api_retry.as_ref().map(|r| r.attempt), Some(2));
    // The call went through: the retry is over.
    let line = r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":1}}}"#;
    adapter.observe(&mut o, &adapter.classify(line));
    assert!(o.api_retry.is_none());
    // A result that names the failed call's status labels it.
    let line = r#"{"is_error":true,"subtype":"success","api_error_status":500,"result":"API Error: 500 Internal server error","type":"result","num_turns":1}"#;
    adapter.observe(&mut o, &adapter.classify(line));
    assert_eq!(o.failure_kind, Some(FailureKind::Transient));
    assert!(!o.succeeded);
}

#[test]
fn claude_2_1_332_real_500_retries_are_transient_and_not_hopeless() {
    let s = fixture(AgentType::Claude, "real_2.1.332_server_error_1.ndjson");
    let o = &s.outcome;
    assert_eq!(s.status, ReplayStatus::Incomplete, "{o:?}");
    assert_eq!(o.failure_kind, Some(FailureKind::Transient));
    assert!(!o.hopeless);
    let retry = o.api_retry.as_ref().expect("api_retry");
    assert_eq!(
        (retry.status, retry.error.as_str()),
        (Some(500), "server_error")
    );
    assert_eq!(s.count(EventKind::System), 7);
}

// ------------------------------------------------ every fixture and its recorded outcome

/// The fields of `replay FILE --agent X --json` a fixture's `.expected.json` pins.
fn expected_view(s: &ReplaySummary) -> serde_json::Value {
    let o = &s.outcome;
    serde_json::json!({
        "status": s.status,
        "turns": o.turns,
        "tokens": o.tokens,
        "cost_usd": o.cost_usd,
        "failure_kind": o.failure_kind,
        "tool_calls": o.tool_calls,
        "quota": o.quota.is_some(),
        "reset": o.quota.as_ref().and_then(|q| q.reset),
        "hopeless": o.hopeless,
    })
}

#[test]
fn every_fixture_replays_to_its_expected_outcome() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut checked = 0;
    for agent in AgentType::ALL {
        let dir = root.join(agent.as_str());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "ndjson"))
            .collect();
        names.sort();
        for path in names {
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            let want_path = path.with_extension("expected.json");
            let want: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&want_path).unwrap_or_else(|e| {
                    panic!(
                        "{}: every fixture needs its expected outcome: {e}",
                        want_path.display()
                    )
                }))
                .unwrap_or_else(|e| panic!("{}: {e}", want_path.display()));
            let s = fixture(agent, &name);
            assert_eq!(expected_view(&s), want, "{agent}/{name}");
            checked += 1;
        }
    }
    // PROVENANCE.md says where each fixture came from.
    let provenance = std::fs::read_to_string(root.join("PROVENANCE.md")).unwrap_or_default();
    for agent in AgentType::ALL {
        for e in std::fs::read_dir(root.join(agent.as_str()))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().to_string();
            if name.ends_with(".ndjson") {
                // A numbered series (`…_repair_1`, `…_repair_2`) may share one row.
                let stem = name.trim_end_matches(".ndjson");
                let series = stem.trim_end_matches(|c: char| c.is_ascii_digit());
                assert!(
                    provenance.contains(stem) || provenance.contains(series),
                    "{agent}/{name} is not in tests/fixtures/PROVENANCE.md"
                );
            }
        }
    }
    assert!(checked >= 28, "only {checked} fixtures checked");
}

/// The failure kinds read from what the real CLIs printed (recorded here; PROVENANCE.md).
#[test]
fn failure_kinds_on_real_recordings() {
    let cases: &[(AgentType, &str, ReplayStatus, Option<FailureKind>)] = &[
        (
            AgentType::Codex,
            "real_0.147.0_host_usage_limit.ndjson",
            ReplayStatus::Quota,
            Some(FailureKind::Quota),
        ),
        (
            AgentType::Codex,
            "real_0.147.0_host_401.ndjson",
            ReplayStatus::Failed,
            Some(FailureKind::Auth),
        ),
        (
            AgentType::Codex,
            "real_0.147.0_host_404_model.ndjson",
            ReplayStatus::Failed,
            Some(FailureKind::Model),
        ),
        (
            AgentType::Codex,
            "real_0.147.0_host_unknown_model_warning.ndjson",
            ReplayStatus::Succeeded,
            None,
        ),
        (
            AgentType::Claude,
            "real_2.1.332_not_logged_in.ndjson",
            ReplayStatus::Failed,
            Some(FailureKind::Auth),
        ),
        (
            AgentType::Claude,
            "real_2.1.332_model_404.ndjson",
            ReplayStatus::Failed,
            Some(FailureKind::Model),
        ),
        (
            AgentType::Claude,
            "real_2.1.332_quota_1.ndjson",
            ReplayStatus::Quota,
            Some(FailureKind::Quota),
        ),
        (
            AgentType::Claude,
            "real_2.1.332_auth_1.ndjson",
            ReplayStatus::Failed,
            Some(FailureKind::Auth),
        ),
    ];
    for (agent, name, status, kind) in cases {
        let s = fixture(*agent, name);
        assert_eq!(
            (s.status, s.outcome.failure_kind),
            (*status, *kind),
            "{agent}/{name}"
        );
    }
    // Codex retries a refused key 5 times (7 s): the first `Reconnecting` already makes the
    // run hopeless, so the runtime stops it there.
    let mut outcome = AgentOutcome::default();
    let a = adapter_for(AgentType::Codex);
    a.observe(&mut outcome, &a.classify(r#"{"type":"error","message":"Reconnecting... 1/5 (unexpected status 401 Unauthorized: Incorrect API key provided: sk-test., url: http://h/v1/responses)"}"#));
    assert!(outcome.hopeless);
    assert_eq!(outcome.failure_kind, Some(FailureKind::Auth));
    assert_eq!(
        outcome
            .api_retry
            .as_ref()
            .map(|r| (r.attempt, r.max_retries, r.status)),
        Some((1, 5, Some(401)))
    );
    // A 5xx retry is transient and not hopeless.
    let mut outcome = AgentOutcome::default();
    a.observe(&mut outcome, &a.classify(r#"{"type":"error","message":"Reconnecting... 2/5 (We're currently experiencing high demand, which may cause temporary errors.)"}"#));
    assert!(!outcome.hopeless);
    assert_eq!(outcome.failure_kind, Some(FailureKind::Transient));
}

#[test]
fn a_named_zone_in_a_reset_is_kept() {
    use chrono::TimeZone;
    let s = fixture(AgentType::Claude, "reset_named_zone_constructed.ndjson");
    let q = s.outcome.quota.expect("quota");
    // Seen at 17:30 UTC = 11:30 in Mexico City (UTC-6): 1pm there is 19:00 UTC, whatever
    // offset the machine that ran the CLI had.
    let seen = chrono::Utc
        .with_ymd_and_hms(2026, 12, 1, 17, 30, 0)
        .unwrap();
    let far = chrono::FixedOffset::east_opt(9 * 3600).unwrap();
    let at = polyphony::agents::quota::hit_reset(&q, seen, far).expect("instant");
    assert_eq!(
        at,
        chrono::Utc.with_ymd_and_hms(2026, 12, 1, 19, 0, 0).unwrap()
    );
}

/// OpenCode (never run here: npm only): the public 1.18.21 recording sums its two steps'
/// tokens (input excludes the cache there; reasoning is output), counts the read once, and
/// completes on the `stop` step; errors are kinded by name, then HTTP status.
#[test]
fn opencode_recordings_sum_steps_and_kind_errors() {
    let s = fixture(
        AgentType::OpenCode,
        "public_1.18.21_read_then_answer.ndjson",
    );
    assert_eq!(s.status, ReplayStatus::Succeeded);
    assert_eq!(s.outcome.turns, 2);
    assert_eq!(s.outcome.tool_calls, 1);
    assert_eq!(
        s.outcome.tokens,
        tokens(7952 + 397 + 7680, 7680, 35 + 24 + 16 + 20)
    );
    assert_eq!(
        s.outcome.final_message.as_deref(),
        Some("NANOPY_EVENT_PROBE_20260823")
    );
    let s = fixture(AgentType::OpenCode, "api_error_429_constructed.ndjson");
    assert_eq!(s.status, ReplayStatus::Quota);
    assert_eq!(s.outcome.failure_kind, Some(FailureKind::Quota));
    let s = fixture(
        AgentType::OpenCode,
        "provider_auth_error_constructed.ndjson",
    );
    assert_eq!(s.outcome.failure_kind, Some(FailureKind::Auth));
    // After `done`, a forged error changes nothing.
    let s = fixture(
        AgentType::OpenCode,
        "edit_with_done_and_forged_constructed.ndjson",
    );
    assert_eq!(s.status, ReplayStatus::Succeeded);
    assert_eq!(s.outcome.failure_kind, None);
    assert_eq!(s.outcome.tool_calls, 2);
}
