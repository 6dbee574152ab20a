//! The harness the scripted model APIs share (`scripted_model` for Anthropic's Messages API,
//! `scripted_openai` for OpenAI's Responses API; tests and the real-CLI demos, never a real
//! model): an in-process axum server on a listener the caller bound, a script deciding each
//! agent turn, and a record of every request and the credential it presented.
//!
//! Each protocol module keeps only what its API says: which requests are turns, how a
//! turn's transcript reads, and how a [`Reply`](crate::scripted_model::Reply) is answered;
//! its server is this one over its own `Reply` (`ScriptedAnthropic` is
//! `ScriptedServer<scripted_model::Reply>`), with its `start` and `base_url`.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;

/// One agent turn as the model sees it.
pub struct Turn<'a> {
    /// 0 for the first agent request, 1 after the first tool result, ...
    pub index: usize,
    /// The request's conversation as JSON text (Anthropic: `system` and `messages`;
    /// OpenAI: `instructions` and `input`): search it for the prompt or tool results.
    pub transcript: &'a str,
}

type Script<R> = dyn Fn(&Turn<'_>) -> R + Send + Sync;

/// What the server records; a protocol's handler reads and updates it.
pub struct ServerState<R> {
    script: Box<Script<R>>,
    turns: usize,
    requests: Vec<String>,
    /// The credential each request presented (an API key or a bearer token), for tests
    /// that prove which key reached the API.
    credentials: Vec<String>,
}

impl<R> ServerState<R> {
    /// Records a request (`METHOD path`) and the credential it presented.
    pub fn record(&mut self, request: String, credential: String) {
        self.requests.push(request);
        self.credentials.push(credential);
    }

    /// The script's reply to the next agent turn, which this counts.
    pub fn turn(&mut self, transcript: &str) -> R {
        let reply = (self.script)(&Turn {
            index: self.turns,
            transcript,
        });
        self.turns += 1;
        reply
    }
}

/// The state a protocol's handler is given.
pub type Shared<R> = Arc<Mutex<ServerState<R>>>;

/// Locks the state; a panic while holding it leaves consistent lists.
pub fn lock<R>(state: &Shared<R>) -> MutexGuard<'_, ServerState<R>> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running scripted API; stops when dropped.
pub struct ScriptedServer<R> {
    state: Shared<R>,
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<R: 'static> ScriptedServer<R> {
    /// Binds `ip` (port chosen by the OS) and serves `app` over a fresh state.
    pub async fn start_app(
        ip: IpAddr,
        script: impl Fn(&Turn<'_>) -> R + Send + Sync + 'static,
        app: impl FnOnce(Shared<R>) -> Router,
    ) -> std::io::Result<ScriptedServer<R>> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0)).await?;
        ScriptedServer::serve_app(listener, script, app)
    }

    /// Serves `app` on a listener the caller bound (and must be inside a Tokio runtime).
    pub fn serve_app(
        listener: tokio::net::TcpListener,
        script: impl Fn(&Turn<'_>) -> R + Send + Sync + 'static,
        app: impl FnOnce(Shared<R>) -> Router,
    ) -> std::io::Result<ScriptedServer<R>> {
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(ServerState {
            script: Box::new(script),
            turns: 0,
            requests: Vec::new(),
            credentials: Vec::new(),
        }));
        let app = app(state.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(ScriptedServer {
            state,
            addr,
            shutdown: Some(tx),
        })
    }
}

impl<R> ScriptedServer<R> {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port it listens on (a test reaches it by name through an egress proxy).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Agent turns answered so far.
    pub fn turns(&self) -> usize {
        lock(&self.state).turns
    }

    /// `METHOD path` of every request so far.
    pub fn requests(&self) -> Vec<String> {
        lock(&self.state).requests.clone()
    }

    /// The credential every request so far presented (empty when none).
    pub fn credentials(&self) -> Vec<String> {
        lock(&self.state).credentials.clone()
    }
}

impl<R> Drop for ScriptedServer<R> {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
