//! Whether a request may go out (pure): the budget rule, decided before the request.
//!
//! **The estimate** of what a request can cost, from its body alone:
//! `input estimate` = body bytes ÷ 4 tokens (a conservative characters-per-token figure: the
//! JSON's punctuation and tool schemas make real bodies cheaper), priced as uncached input;
//! plus `max_tokens` (Anthropic, Chat Completions; `max_output_tokens` for Responses,
//! `generationConfig.maxOutputTokens` for Gemini; [`DEFAULT_MAX_OUTPUT`] when absent)
//! priced as output. A request is refused when this estimate exceeds what is left of the
//! identity's daily ceiling (`cost_ceiling_usd_per_day`, minus today's metered spend) or of
//! the attempt's `max_cost_usd_per_attempt` (minus this attempt's metered cost). The rule
//! errs on the side of refusing: the last cents of a budget that cannot cover a whole
//! worst-case answer stay unspent, and the task waits for the reset instead of overspending.
//!
//! A model whose price is unknown cannot be estimated: it is let through (and counted in
//! tokens only); `doctor` and the request event say its price is unknown.

use serde_json::Value;

use super::pricing::{Picos, PriceTable};
use super::usage::Usage;
use super::Api;

/// Output tokens assumed when a request names no limit.
pub const DEFAULT_MAX_OUTPUT: u64 = 32_000;

/// Bytes per input token in the estimate.
pub const BYTES_PER_TOKEN: u64 = 4;

/// What the request body says about its model and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFacts {
    pub model: Option<String>,
    pub max_output: u64,
    pub input_tokens_estimate: u64,
}

/// Reads `model` and the output limit from a request body (any API); `path_model` is the
/// model named in the path (Gemini: `/v1beta/models/MODEL:generateContent`).
pub fn facts(api: Api, body: &[u8], path: &str) -> RequestFacts {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let model = v["model"]
        .as_str()
        .map(String::from)
        .or_else(|| gemini_path_model(path));
    let max = match api {
        Api::Anthropic => v["max_tokens"].as_u64(),
        Api::OpenAiResponses => v["max_output_tokens"].as_u64(),
        Api::OpenAiChat => v["max_completion_tokens"]
            .as_u64()
            .or_else(|| v["max_tokens"].as_u64()),
        Api::Gemini => v["generationConfig"]["maxOutputTokens"].as_u64(),
    };
    RequestFacts {
        model,
        max_output: max.unwrap_or(DEFAULT_MAX_OUTPUT),
        input_tokens_estimate: (body.len() as u64).div_ceil(BYTES_PER_TOKEN),
    }
}

fn gemini_path_model(path: &str) -> Option<String> {
    let rest = path.split("/models/").nth(1)?;
    let model = rest.split([':', '/', '?']).next()?;
    (!model.is_empty()).then(|| model.to_string())
}

/// The worst case a request can cost, `None` when its model's price is unknown.
pub fn estimate(prices: &PriceTable, facts: &RequestFacts) -> Option<Picos> {
    let model = facts.model.as_deref()?;
    prices.cost(
        model,
        &Usage {
            input_tokens: facts.input_tokens_estimate,
            cache_write_tokens: 0,
            cache_read_tokens: 0,
            output_tokens: facts.max_output,
        },
    )
}

/// Which budget refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The identity's `cost_ceiling_usd_per_day`.
    Daily,
    /// `max_cost_usd_per_attempt`.
    Attempt,
}

/// What is left, in pico-dollars (`None`: no such budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Remaining {
    pub daily: Option<Picos>,
    pub attempt: Option<Picos>,
}

/// The decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Refuse {
        limit: Limit,
        needed: Picos,
        remaining: Picos,
    },
}

/// Refuse when the estimate exceeds a remaining budget (the attempt's first: it is the
/// narrower promise); allow an unknown estimate.
pub fn decide(estimate: Option<Picos>, remaining: Remaining) -> Decision {
    let Some(needed) = estimate else {
        return Decision::Allow;
    };
    for (limit, left) in [
        (Limit::Attempt, remaining.attempt),
        (Limit::Daily, remaining.daily),
    ] {
        if let Some(left) = left {
            if needed > left {
                return Decision::Refuse {
                    limit,
                    needed,
                    remaining: left,
                };
            }
        }
    }
    Decision::Allow
}

#[cfg(test)]
mod tests {
    use super::super::pricing::Price;
    use super::*;

    fn table() -> PriceTable {
        PriceTable::only([(
            "m".to_string(),
            Price {
                input: 1.0,
                cache_write: 0.0,
                cache_read: 0.0,
                output: 10.0,
            },
        )])
    }

    #[test]
    fn facts_per_api() {
        let body = br#"{"model":"claude-x","max_tokens":32000,"stream":true}"#;
        let f = facts(Api::Anthropic, body, "/v1/messages");
        assert_eq!(f.model.as_deref(), Some("claude-x"));
        assert_eq!(f.max_output, 32000);
        assert_eq!(f.input_tokens_estimate, (body.len() as u64).div_ceil(4));
        let f = facts(
            Api::OpenAiResponses,
            br#"{"model":"gpt-5","max_output_tokens":7}"#,
            "/v1/responses",
        );
        assert_eq!(f.max_output, 7);
        let f = facts(
            Api::OpenAiResponses,
            br#"{"model":"gpt-5"}"#,
            "/v1/responses",
        );
        assert_eq!(f.max_output, DEFAULT_MAX_OUTPUT);
        let f = facts(
            Api::OpenAiChat,
            br#"{"model":"k","max_tokens":9}"#,
            "/v1/chat/completions",
        );
        assert_eq!(f.max_output, 9);
        let f = facts(
            Api::Gemini,
            br#"{"generationConfig":{"maxOutputTokens":11}}"#,
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
        );
        assert_eq!(f.model.as_deref(), Some("gemini-2.5-pro"));
        assert_eq!(f.max_output, 11);
        let f = facts(Api::Anthropic, b"garbage", "/v1/messages");
        assert_eq!(f.model, None);
        assert_eq!(f.input_tokens_estimate, 2);
    }

    #[test]
    fn estimate_is_input_bytes_over_4_plus_max_output() {
        let f = RequestFacts {
            model: Some("m-2025".into()),
            max_output: 1000,
            input_tokens_estimate: 400,
        };
        // 400 × $1/MTok + 1000 × $10/MTok = $0.0104
        assert_eq!(
            estimate(&table(), &f),
            Some(400 * 1_000_000 + 1000 * 10_000_000)
        );
        let unknown = RequestFacts {
            model: Some("other".into()),
            ..f.clone()
        };
        assert_eq!(estimate(&table(), &unknown), None);
        assert_eq!(estimate(&table(), &RequestFacts { model: None, ..f }), None);
    }

    #[test]
    fn decisions() {
        let r = |d, a| Remaining {
            daily: d,
            attempt: a,
        };
        let cases = [
            (Some(10), r(None, None), Decision::Allow),
            (Some(10), r(Some(10), Some(10)), Decision::Allow),
            (
                Some(11),
                r(Some(100), Some(10)),
                Decision::Refuse {
                    limit: Limit::Attempt,
                    needed: 11,
                    remaining: 10,
                },
            ),
            (
                Some(11),
                r(Some(5), Some(100)),
                Decision::Refuse {
                    limit: Limit::Daily,
                    needed: 11,
                    remaining: 5,
                },
            ),
            (
                Some(1),
                r(Some(0), None),
                Decision::Refuse {
                    limit: Limit::Daily,
                    needed: 1,
                    remaining: 0,
                },
            ),
            (None, r(Some(0), Some(0)), Decision::Allow),
            (Some(0), r(Some(0), Some(0)), Decision::Allow),
        ];
        for (est, rem, want) in cases {
            assert_eq!(decide(est, rem), want, "{est:?} {rem:?}");
        }
    }
}
