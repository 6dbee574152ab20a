//! The ETag cache behind conditional GETs (`conditional.rs`, issue 15): what a `200` left
//! behind (its `ETag`, `Link` and body) per request target. Pure: no IO, no clock.
//! Must not: hold anything secret (bodies of GETs only, never headers of the request).

use std::collections::HashMap;

/// Targets remembered at most; past it the cache starts over (a full re-read costs one
/// request per target, and an idle fleet polls far fewer targets than this).
pub const MAX_ENTRIES: usize = 4096;

/// What a `200` answered for one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    pub etag: String,
    /// The `Link` header of that answer (pagination), if any.
    pub link: Option<String>,
    pub body: String,
}

/// Validators and bodies by request target (a path with its query, or an absolute link).
#[derive(Debug, Default)]
pub struct EtagCache {
    entries: HashMap<String, Cached>,
}

impl EtagCache {
    /// The `If-None-Match` value to send for `target`, if a `200` for it was kept.
    pub fn validator(&self, target: &str) -> Option<&str> {
        self.entries.get(target).map(|c| c.etag.as_str())
    }

    pub fn get(&self, target: &str) -> Option<&Cached> {
        self.entries.get(target)
    }

    /// Keep a `200`'s body under its `ETag`; an answer without one drops what was kept.
    pub fn store(&mut self, target: &str, etag: Option<&str>, link: Option<&str>, body: &str) {
        let Some(etag) = etag.filter(|e| !e.is_empty()) else {
            self.entries.remove(target);
            return;
        };
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(target) {
            self.entries.clear();
        }
        self.entries.insert(
            target.to_string(),
            Cached {
                etag: etag.to_string(),
                link: link.map(str::to_string),
                body: body.to_string(),
            },
        );
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_answer_gives_its_validator_back() {
        let mut cache = EtagCache::default();
        assert_eq!(cache.validator("/a"), None);
        cache.store("/a", Some("W/\"1\""), Some("<x>; rel=\"next\""), "[1]");
        assert_eq!(cache.validator("/a"), Some("W/\"1\""));
        assert_eq!(cache.get("/a").unwrap().body, "[1]");
        assert_eq!(
            cache.get("/a").unwrap().link.as_deref(),
            Some("<x>; rel=\"next\"")
        );
        cache.store("/a", Some("W/\"2\""), None, "[2]");
        assert_eq!(cache.validator("/a"), Some("W/\"2\""));
        assert_eq!(cache.get("/a").unwrap().link, None);
    }

    #[test]
    fn an_answer_without_etag_forgets_the_target() {
        let mut cache = EtagCache::default();
        cache.store("/a", Some("\"1\""), None, "{}");
        cache.store("/a", None, None, "{}");
        assert_eq!(cache.validator("/a"), None);
        cache.store("/b", Some(""), None, "{}");
        assert!(cache.is_empty());
    }

    #[test]
    fn a_full_cache_starts_over() {
        let mut cache = EtagCache::default();
        for i in 0..MAX_ENTRIES {
            cache.store(&format!("/{i}"), Some("\"e\""), None, "");
        }
        assert_eq!(cache.len(), MAX_ENTRIES);
        cache.store("/0", Some("\"f\""), None, "");
        assert_eq!(
            cache.len(),
            MAX_ENTRIES,
            "replacing a kept target keeps the rest"
        );
        cache.store("/new", Some("\"e\""), None, "");
        assert_eq!(cache.len(), 1);
    }
}
