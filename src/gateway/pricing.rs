//! Model prices and what a request's tokens cost (pure).
//!
//! Prices are USD per million tokens, as the providers publish them, for four kinds of
//! token: uncached input, cache writes, cache reads and output (reasoning/thinking tokens
//! are output). They are held as integer pico-dollars per token (USD per million tokens ×
//! 10^6), so a cost is an exact integer sum and the same script always costs the same.
//!
//! A model is found by its exact id, else by the longest table key it starts with
//! (`claude-sonnet-4-5-20250929` is priced as `claude-sonnet-4-5`). A model in neither is
//! unknown: its tokens are counted and its cost is `None` (shown as "price unknown"), never
//! a guess.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::usage::Usage;

/// Pico-dollars (10^-12 USD): the unit every metered cost is summed in.
pub type Picos = u128;

/// 1 USD in pico-dollars.
pub const PICOS_PER_USD: f64 = 1e12;

/// USD as pico-dollars (negative or non-finite: 0).
pub fn picos_of_usd(usd: f64) -> Picos {
    if usd.is_finite() && usd > 0.0 {
        (usd * PICOS_PER_USD).round() as Picos
    } else {
        0
    }
}

/// Pico-dollars as USD.
pub fn usd_of_picos(picos: Picos) -> f64 {
    picos as f64 / PICOS_PER_USD
}

/// One model's prices, USD per million tokens (the config's and the providers' unit).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    /// Cache writes (Anthropic's 5-minute cache); other providers have none.
    #[serde(default)]
    pub cache_write: f64,
    /// Cache reads (OpenAI, Gemini, Kimi: "cached input").
    #[serde(default)]
    pub cache_read: f64,
    pub output: f64,
}

impl Price {
    const fn new(input: f64, cache_write: f64, cache_read: f64, output: f64) -> Price {
        Price {
            input,
            cache_write,
            cache_read,
            output,
        }
    }

    /// Pico-dollars per token of each kind: USD/MTok × 10^6, rounded.
    fn per_token(&self) -> [Picos; 4] {
        [self.input, self.cache_write, self.cache_read, self.output]
            .map(|usd_per_mtok| picos_of_usd(usd_per_mtok / 1e6))
    }

    /// Exact cost of `usage` in pico-dollars.
    pub fn cost(&self, usage: &Usage) -> Picos {
        let [input, write, read, output] = self.per_token();
        usage.input_tokens as Picos * input
            + usage.cache_write_tokens as Picos * write
            + usage.cache_read_tokens as Picos * read
            + usage.output_tokens as Picos * output
    }

    /// Whether the figures are usable (finite, not negative).
    pub fn is_valid(&self) -> bool {
        [self.input, self.cache_write, self.cache_read, self.output]
            .iter()
            .all(|p| p.is_finite() && *p >= 0.0)
    }
}

/// The shipped defaults: the models each CLI uses by default or by its documented names
/// (public list prices, USD per million tokens). Overridden or extended by `gateway.prices`
/// in config.yaml.
pub const DEFAULT_PRICES: &[(&str, Price)] = &[
    // Claude Code 2.1.332's default model. Its list price as that CLI computes it (its result
    // line's `costBasis: "list"`): 2400 input + 10000 cache-read + 80 output tokens cost
    // $0.0132, i.e. $4 / $0.20 / $20 per MTok; cache write at the usual 1.25 × input.
    ("claude-opus-5-5", Price::new(4.0, 5.0, 0.20, 20.0)),
    // Anthropic (Claude Code). Cache write = 1.25 × input, cache read = 0.1 × input.
    ("claude-opus-4-5", Price::new(5.0, 6.25, 0.50, 25.0)),
    ("claude-opus-4-1", Price::new(15.0, 18.75, 1.50, 75.0)),
    ("claude-opus-4", Price::new(15.0, 18.75, 1.50, 75.0)),
    ("claude-sonnet-4-5", Price::new(3.0, 3.75, 0.30, 15.0)),
    ("claude-sonnet-4", Price::new(3.0, 3.75, 0.30, 15.0)),
    ("claude-3-7-sonnet", Price::new(3.0, 3.75, 0.30, 15.0)),
    ("claude-haiku-4-5", Price::new(1.0, 1.25, 0.10, 5.0)),
    ("claude-3-5-haiku", Price::new(0.80, 1.0, 0.08, 4.0)),
    // OpenAI (Codex). Cached input = 0.1 × input.
    ("gpt-5", Price::new(1.25, 0.0, 0.125, 10.0)),
    ("gpt-5-codex", Price::new(1.25, 0.0, 0.125, 10.0)),
    ("gpt-5.1", Price::new(1.25, 0.0, 0.125, 10.0)),
    ("gpt-5.1-codex", Price::new(1.25, 0.0, 0.125, 10.0)),
    ("gpt-5.1-codex-max", Price::new(1.25, 0.0, 0.125, 10.0)),
    ("gpt-5-mini", Price::new(0.25, 0.0, 0.025, 2.0)),
    ("gpt-5.1-codex-mini", Price::new(0.25, 0.0, 0.025, 2.0)),
    ("codex-mini-latest", Price::new(1.50, 0.0, 0.375, 6.0)),
    // Google (Gemini CLI), prompts up to 200k tokens.
    ("gemini-2.5-pro", Price::new(1.25, 0.0, 0.125, 10.0)),
    ("gemini-2.5-flash", Price::new(0.30, 0.0, 0.03, 2.50)),
    ("gemini-2.5-flash-lite", Price::new(0.10, 0.0, 0.01, 0.40)),
    // Moonshot (Kimi CLI).
    ("kimi-k2", Price::new(0.60, 0.0, 0.15, 2.50)),
    ("kimi-k2-turbo", Price::new(1.15, 0.0, 0.15, 8.0)),
    ("kimi-k2-thinking", Price::new(0.60, 0.0, 0.15, 2.50)),
    ("kimi-for-coding", Price::new(0.60, 0.0, 0.15, 2.50)),
];

/// Model id -> price. The operator's entries (`gateway.prices`) are looked up before the
/// shipped defaults, so `claude: {…}` prices every Claude model the defaults also know.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PriceTable {
    overrides: BTreeMap<String, Price>,
    prices: BTreeMap<String, Price>,
}

impl PriceTable {
    /// The shipped defaults with `overrides` laid over them (same key: the override wins).
    pub fn with_overrides(overrides: &BTreeMap<String, Price>) -> PriceTable {
        PriceTable {
            overrides: overrides
                .iter()
                .map(|(k, p)| (k.to_ascii_lowercase(), *p))
                .collect(),
            prices: DEFAULT_PRICES
                .iter()
                .map(|(k, p)| (k.to_string(), *p))
                .collect(),
        }
    }

    /// Only these prices (tests).
    pub fn only(prices: impl IntoIterator<Item = (String, Price)>) -> PriceTable {
        PriceTable {
            overrides: BTreeMap::new(),
            prices: prices.into_iter().collect(),
        }
    }

    /// The price of `model`: exact id, else the longest key it starts with (a key followed
    /// by `-`, `@` or `.`: a dated or versioned id), case-insensitively.
    pub fn price(&self, model: &str) -> Option<&Price> {
        let model = model.trim().to_ascii_lowercase();
        let model = model.rsplit('/').next().unwrap_or(&model);
        lookup(&self.overrides, model).or_else(|| lookup(&self.prices, model))
    }

    /// Exact cost of `usage` for `model`, `None` when the model's price is unknown.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<Picos> {
        self.price(model).map(|p| p.cost(usage))
    }
}

fn lookup<'a>(prices: &'a BTreeMap<String, Price>, model: &str) -> Option<&'a Price> {
    if let Some(p) = prices.get(model) {
        return Some(p);
    }
    prices
        .iter()
        .filter(|(k, _)| {
            model.len() > k.len()
                && model.starts_with(k.as_str())
                && matches!(model.as_bytes()[k.len()], b'-' | b'@' | b'.' | b':')
        })
        .max_by_key(|(k, _)| k.len())
        .map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(i: u64, w: u64, r: u64, o: u64) -> Usage {
        Usage {
            input_tokens: i,
            cache_write_tokens: w,
            cache_read_tokens: r,
            output_tokens: o,
        }
    }

    #[test]
    fn claude_codes_default_model_costs_what_the_cli_itself_reports() {
        // Claude Code 2.1.332 against the scripted API (tests/it/real_cli.rs): two requests
        // of 1200 input, 5000 cache-read and 40 output tokens; its result said $0.0132.
        let t = PriceTable::with_overrides(&BTreeMap::new());
        let c = t
            .cost("claude-opus-5-5", &usage(2400, 0, 10_000, 80))
            .unwrap();
        assert_eq!(usd_of_picos(c), 0.0132);
        assert!(t.price("claude-opus-5-5-20261101").is_some());
    }

    #[test]
    fn costs_are_exact_integer_sums() {
        let t = PriceTable::with_overrides(&BTreeMap::new());
        // Sonnet 4.5: 1200 in × $3 + 5000 cache read × $0.30 + 40 out × $15 per MTok.
        let c = t
            .cost("claude-sonnet-4-5-20250929", &usage(1200, 0, 5000, 40))
            .unwrap();
        assert_eq!(c, 1200 * 3_000_000 + 5000 * 300_000 + 40 * 15_000_000);
        assert_eq!(usd_of_picos(c), 0.0057);
        // Cache writes priced apart.
        let c = t.cost("claude-opus-4-5", &usage(0, 1000, 0, 0)).unwrap();
        assert_eq!(c, 1000 * 6_250_000);
        assert_eq!(picos_of_usd(1.0), 1_000_000_000_000);
        assert_eq!(picos_of_usd(-1.0), 0);
        assert_eq!(picos_of_usd(f64::NAN), 0);
    }

    #[test]
    fn model_lookup_exact_then_longest_prefix() {
        let t = PriceTable::with_overrides(&BTreeMap::new());
        let cases: &[(&str, Option<f64>)] = &[
            ("claude-opus-4-5", Some(5.0)),
            ("claude-opus-4-5-20251101", Some(5.0)),
            ("claude-opus-4-1-20250805", Some(15.0)),
            ("claude-opus-4-20250514", Some(15.0)),
            ("CLAUDE-HAIKU-4-5", Some(1.0)),
            ("gpt-5.1-codex-mini", Some(0.25)),
            ("gpt-5.1-codex", Some(1.25)),
            ("gpt-5-codex", Some(1.25)),
            ("models/gemini-2.5-pro", Some(1.25)),
            ("gemini-2.5-flash-lite-preview", Some(0.10)),
            ("kimi-k2-0905-preview", Some(0.60)),
            ("kimi-k2-turbo-preview", Some(1.15)),
            // Not a prefix at a separator: unknown, never a near guess.
            ("claude-opus-45", None),
            ("gpt-50", None),
            ("llama-3", None),
            ("", None),
        ];
        for (model, input) in cases {
            assert_eq!(t.price(model).map(|p| p.input), *input, "{model}");
        }
    }

    #[test]
    fn overrides_replace_and_extend_the_defaults() {
        let mut o = BTreeMap::new();
        o.insert(
            "claude-sonnet-4-5".to_string(),
            Price::new(1.0, 0.0, 0.0, 2.0),
        );
        o.insert("Local-Model".to_string(), Price::new(0.5, 0.0, 0.0, 0.5));
        let t = PriceTable::with_overrides(&o);
        assert_eq!(t.price("claude-sonnet-4-5-x").unwrap().output, 2.0);
        assert_eq!(t.price("local-model").unwrap().input, 0.5);
        assert_eq!(t.price("claude-opus-4-5").unwrap().input, 5.0);
        assert_eq!(t.cost("nobody-knows", &usage(1, 1, 1, 1)), None);
        // An operator's prefix wins over a longer default.
        let mut o = BTreeMap::new();
        o.insert("claude".to_string(), Price::new(9.0, 0.0, 0.0, 9.0));
        let t = PriceTable::with_overrides(&o);
        assert_eq!(t.price("claude-sonnet-4-5-20250929").unwrap().input, 9.0);
        assert_eq!(t.price("gpt-5").unwrap().input, 1.25);
        assert!(!Price::new(-1.0, 0.0, 0.0, 0.0).is_valid());
        assert!(!Price::new(f64::INFINITY, 0.0, 0.0, 0.0).is_valid());
        assert!(Price::new(0.0, 0.0, 0.0, 0.0).is_valid());
    }
}
