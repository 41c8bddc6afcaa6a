//! A notification receiver: a local HTTP server that records every request it is sent
//! (path, headers, body) and answers `503 Service Unavailable` to the first request on each
//! path, then `200 OK`: what a Slack, Teams or webhook endpoint does on a bad second. Every
//! answer carries [`ANSWER_MARKER`] in its body, so a test can check that nothing a receiver
//! says reaches a log, a status or an Event.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::Router;

/// In the body of every answer.
pub const ANSWER_MARKER: &str = "receiver-answer-body-9d2e";

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// What the receiver answered.
    pub status: u16,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

#[derive(Default)]
struct Log {
    received: Vec<Received>,
}

pub struct Receiver {
    log: Arc<Mutex<Log>>,
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let log = Arc::new(Mutex::new(Log::default()));
        let router = Router::new().fallback(record).with_state(log.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Receiver { log, port, task }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every request to `path`, in order.
    pub fn received(&self, path: &str) -> Vec<Received> {
        let log = self.log.lock().unwrap();
        log.received
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// Every request.
    pub fn all(&self) -> Vec<Received> {
        self.log.lock().unwrap().received.clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(
    State(log): State<Arc<Mutex<Log>>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, &'static str) {
    let mut log = log.lock().unwrap();
    let path = uri.path().to_string();
    let first = !log.received.iter().any(|r| r.path == path);
    let status = if first {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    log.received.push(Received {
        path,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        body: body.to_vec(),
        status: status.as_u16(),
    });
    (status, ANSWER_MARKER)
}
