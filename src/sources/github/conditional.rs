//! Conditional GETs: the ETag cache behind the shepherd's polling (issue 15).
//!
//! Owns: what a `200` left behind (its `ETag`, `Link` and body) per request target, so the
//! next GET of the same target sends `If-None-Match` and a `304 Not Modified` (which GitHub
//! does not count against the rate limit) is answered from here: the pure `EtagCache`,
//! and the client's conditional GETs over it.
//! Must not: hold anything secret (bodies of GETs only, never headers of the request).

use std::collections::HashMap;

use http::{HeaderMap, Method, StatusCode};
use serde::de::DeserializeOwned;

use super::client::{Answer, GithubClient, GithubError, Repeat};

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

impl GithubClient {
    /// [`GithubClient::get_json`] as a conditional request: an unchanged resource costs a
    /// `304`, answered from the ETag cache.
    pub async fn get_json_cached<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
    ) -> Result<T, GithubError> {
        self.get_cached(what, path).await?.json(what)
    }

    /// [`GithubClient::get_all_pages`] with every page a conditional request.
    pub async fn get_all_pages_cached<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
    ) -> Result<Vec<T>, GithubError> {
        self.pages(what, path, true).await
    }

    /// GET `target` with `If-None-Match` when a `200` for it was kept; a `304` is answered
    /// with the kept body and `Link` (status 200, as if read again).
    pub async fn get_cached(&self, what: &str, target: &str) -> Result<Answer, GithubError> {
        let validator = self
            .etag_cache()
            .validator(target)
            .and_then(|e| http::HeaderValue::from_str(e).ok());
        let mut headers = HeaderMap::new();
        if let Some(etag) = validator {
            headers.insert(http::header::IF_NONE_MATCH, etag);
        }
        let mut answer = self
            .send_with_headers(
                Method::GET,
                target,
                None,
                Some(&headers),
                Repeat::Safe,
                what,
            )
            .await?;
        if answer.status == StatusCode::NOT_MODIFIED && self.etag_cache().get(target).is_none() {
            // The kept body went meanwhile (a full cache starts over): read it again.
            answer = self
                .send(Method::GET, target, None, Repeat::Safe, what)
                .await?;
        }
        let header = |name: http::header::HeaderName| {
            answer
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        if answer.status == StatusCode::NOT_MODIFIED {
            let Some(kept) = self.etag_cache().get(target).cloned() else {
                return Err(GithubError::Decode {
                    what: what.to_string(),
                    message: "304 Not Modified for a request that was not conditional".into(),
                });
            };
            let mut headers = HeaderMap::new();
            if let Some(link) = kept
                .link
                .as_deref()
                .and_then(|l| http::HeaderValue::from_str(l).ok())
            {
                headers.insert(http::header::LINK, link);
            }
            return Ok(Answer {
                status: StatusCode::OK,
                headers,
                body: kept.body,
            });
        }
        self.etag_cache().store(
            target,
            header(http::header::ETAG).as_deref(),
            header(http::header::LINK).as_deref(),
            &answer.body,
        );
        Ok(answer)
    }

    fn etag_cache(&self) -> std::sync::MutexGuard<'_, super::conditional::EtagCache> {
        // A panic while holding the lock leaves a consistent map: use it.
        self.etags.lock().unwrap_or_else(|p| p.into_inner())
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
