//! A notification receiver: a local HTTP server that records every request it is sent
//! (path, headers, body) and answers `503 Service Unavailable` to the first request on each
//! path, then `200 OK`: what a Slack, Teams or webhook endpoint does on a bad second. Every
//! answer carries [`ANSWER_MARKER`] in its body, so a test can check that nothing a receiver
//! says reaches a log, a status or an Event.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
    scheme: &'static str,
    host: &'static str,
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
        Receiver {
            log,
            port,
            task,
            scheme: "http",
            host: "127.0.0.1",
        }
    }

    /// A receiver over HTTPS, `localhost` and `127.0.0.1` in its certificate, issued by a CA
    /// made now whose PEM is written to `dir/receiver-ca.pem` (returned): what a process is
    /// told to trust with `SSL_CERT_FILE`.
    pub async fn start_tls(dir: &Path) -> (Receiver, PathBuf) {
        let (config, ca_pem) = tls_config();
        let ca_path = dir.join("receiver-ca.pem");
        std::fs::write(&ca_path, ca_pem).unwrap();
        let log = Arc::new(Mutex::new(Log::default()));
        let router = Router::new().fallback(record).with_state(log.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, router) = (acceptor.clone(), router.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(router);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        let receiver = Receiver {
            log,
            port,
            task,
            scheme: "https",
            host: "localhost",
        };
        (receiver, ca_path)
    }

    /// `<scheme>://<host>:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}:{}{path}", self.scheme, self.host, self.port)
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

/// A server configuration for `localhost` and `127.0.0.1`, and the PEM of the CA that issued
/// its certificate.
fn tls_config() -> (rustls::ServerConfig, String) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "notification receiver test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.subject_alt_names.push(rcgen::SanType::IpAddress(
        std::net::Ipv4Addr::LOCALHOST.into(),
    ));
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = params.signed_by(&key, &ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    (config, ca.pem())
}
