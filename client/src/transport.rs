//! The [`Client`] itself and its one way to the server: [`Client::send`], one request with
//! the bearer token, its answer decoded or mapped to a [`ClientError`], retried under the
//! policy of [`crate::retry`].

use crate::ClientError;
use crate::retry::{self, Failure};
use backon::Retryable;
use crucible_shared::ApiError;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// Not `Debug`: it holds the bearer token.
#[derive(Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    max_attempts: u32,
    /// Sent as `Authorization: Bearer <token>` with every request.
    token: Option<String>,
}

impl Client {
    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:10907`), without a token;
    /// each request times out after 120 s and is tried up to 6 times.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base: base_url.into().trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .expect("reqwest client builds"),
            max_attempts: 6,
            token: None,
        }
    }

    /// Authenticates every request with `token`: a tenant's token, or the admin token for
    /// the admin calls. None (or empty) sends none, as a server with `CRUCIBLE_AUTH=off` (a
    /// `crucible up` on a loopback address) needs.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// One call: tried until it is answered, it fails in a way no retry fixes, or the retry
    /// schedule runs out (then [`ClientError::Exhausted`] with the last failure).
    pub(crate) async fn send<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        (|| self.attempt(method.clone(), path, body))
            .retry(retry::schedule(self.max_attempts))
            .when(Failure::is_retryable)
            .adjust(|failure, pause| retry::pause(pause, failure.server_pause()))
            .await
            .map_err(|failure| failure.into_error(self.max_attempts))
    }

    /// One attempt of [`Client::send`], its failure classified for the retry policy.
    async fn attempt<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, Failure> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let resp = match req.send().await {
            Ok(resp) => resp,
            Err(e) if e.is_connect() || e.is_timeout() => {
                return Err(Failure::Retryable {
                    last: e.to_string(),
                    server_pause: None,
                });
            }
            Err(e) => return Err(Failure::Final(e.into())),
        };
        let status = resp.status().as_u16();
        let server_pause = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(retry::retry_after);
        let bytes = resp.bytes().await.map_err(|e| Failure::Final(e.into()))?;
        let unexpected = || ClientError::Unexpected {
            status,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        };
        if (200..300).contains(&status) {
            return serde_json::from_slice(&bytes).map_err(|_| Failure::Final(unexpected()));
        }
        let err = match serde_json::from_slice::<ApiError>(&bytes) {
            Ok(error) => ClientError::Api { status, error },
            Err(_) => unexpected(),
        };
        Err(if retry::RETRYABLE_STATUS.contains(&status) {
            Failure::Retryable {
                last: err.to_string(),
                server_pause,
            }
        } else {
            Failure::Final(err)
        })
    }
}
