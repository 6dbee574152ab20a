//! Conditional GETs: the ETag cache behind the shepherd's polling (issue 15).
//!
//! Owns: what a `200` left behind (its `ETag`, `Link` and body) per request target, so the
//! next GET of the same target sends `If-None-Match` and a `304 Not Modified` (which GitHub
//! does not count against the rate limit) is answered from here: the client's conditional
//! GETs over the pure [`EtagCache`] (`etag_cache.rs`).
//! Must not: hold anything secret (bodies of GETs only, never headers of the request).

use http::{HeaderMap, Method, StatusCode};
use serde::de::DeserializeOwned;

use super::client::{Answer, GithubClient, GithubError, Repeat};
use super::etag_cache::EtagCache;

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

    fn etag_cache(&self) -> std::sync::MutexGuard<'_, EtagCache> {
        // A panic while holding the lock leaves a consistent map: use it.
        self.etags.lock().unwrap_or_else(|p| p.into_inner())
    }
}
