//! A hostile HTTP server: what a tenant may point tagpin at from a `PinnedRepository` (a
//! `forge.api_url`, a registry, a stage kubeconfig's `server`, a token realm).
//!
//! It speaks plain HTTP/1.1 over a loopback socket, written by hand so that it can do what no
//! well-behaved framework lets a server do: answer `200` and then stream a body without end,
//! send one byte every few seconds, redirect to another server, or answer with a private page.
//! Each request is answered by a [`Handler`] that sees the request (method, path, headers), and
//! recorded with its headers, so a test can say what tagpin sent where (credentials included:
//! the recorder is the test's own, and its tokens are fake). Every answer closes the connection.
//!
//! Test support panics with a clear message instead of returning errors.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// Header names lower-cased, values as sent.
    pub headers: Vec<(String, String)>,
}

impl Seen {
    /// The value of header `name` (lower-case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How to answer one request.
#[derive(Debug, Clone)]
pub enum Answer {
    /// This status, these headers, this body.
    Plain {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// `200`, then a chunked body that never ends, as fast as the client reads it.
    Endless { content_type: String },
    /// `200`, then a chunked body of one byte every `every`, without end.
    Drip {
        content_type: String,
        every: Duration,
    },
}

impl Answer {
    /// `status` with a body of `content_type`.
    pub fn body(status: u16, content_type: &str, body: &str) -> Answer {
        Answer::Plain {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
        }
    }

    /// `status` (a 30x) to `location`.
    pub fn redirect(status: u16, location: &str) -> Answer {
        Answer::Plain {
            status,
            headers: vec![("Location".into(), location.into())],
            body: String::new(),
        }
    }

    /// `header: value` added to a [`Answer::Plain`] answer.
    pub fn with_header(mut self, name: &str, value: &str) -> Answer {
        if let Answer::Plain { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }
}

/// Decides the answer to each request.
pub type Handler = Arc<dyn Fn(&Seen) -> Answer + Send + Sync>;

/// The server; stops when dropped.
pub struct HostileServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl HostileServer {
    /// Serves `handler` on a fresh port of 127.0.0.1.
    pub async fn start(handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> HostileServer {
        HostileServer::start_on("127.0.0.1", handler).await
    }

    /// Serves `handler` on a fresh port of `ip`, an address of the loopback range
    /// (`127.0.0.2` stands for another host than `127.0.0.1`).
    pub async fn start_on(
        ip: &str,
        handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static,
    ) -> HostileServer {
        let listener = TcpListener::bind((ip, 0))
            .await
            .unwrap_or_else(|e| panic!("bind {ip}:0 for the hostile server: {e}"));
        let addr = listener.local_addr().expect("local addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Handler = Arc::new(handler);
        let recorded = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (handler, recorded) = (handler.clone(), recorded.clone());
                tokio::spawn(async move {
                    // A client that hangs up mid-answer is what the tests provoke: not an error.
                    let _ = serve(stream, handler, recorded).await;
                });
            }
        });
        HostileServer { addr, seen, task }
    }

    /// Answers every request with `answer`.
    pub async fn always(answer: Answer) -> HostileServer {
        HostileServer::start(move |_| answer.clone()).await
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request's head (and its body, by `Content-Length`), records it and answers.
async fn serve(
    mut stream: TcpStream,
    handler: Handler,
    recorded: Arc<Mutex<Vec<Seen>>>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_string();
    let target = request_line.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length.min(1024 * 1024)];
    stream.read_exact(&mut body).await?;
    let seen = Seen {
        method,
        target,
        headers,
    };
    let answer = handler(&seen);
    recorded.lock().unwrap().push(seen);
    match answer {
        Answer::Plain {
            status,
            headers,
            body,
        } => {
            let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
            for (name, value) in headers {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
            out.push_str(&format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ));
            stream.write_all(out.as_bytes()).await?;
            stream.shutdown().await
        }
        Answer::Endless { content_type } => {
            stream
                .write_all(chunked_head(&content_type).as_bytes())
                .await?;
            // 64 KiB chunks of a JSON-looking array that never closes.
            let chunk = "{\"id\":1},".repeat(64 * 1024 / 9);
            let frame = format!("{:x}\r\n{chunk}\r\n", chunk.len());
            stream.write_all(b"5\r\n[    \r\n").await?;
            loop {
                stream.write_all(frame.as_bytes()).await?;
            }
        }
        Answer::Drip {
            content_type,
            every,
        } => {
            stream
                .write_all(chunked_head(&content_type).as_bytes())
                .await?;
            loop {
                stream.write_all(b"1\r\n \r\n").await?;
                stream.flush().await?;
                tokio::time::sleep(every).await;
            }
        }
    }
}

fn chunked_head(content_type: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        500 => "Internal Server Error",
        _ => "Whatever",
    }
}

/// The peak resident memory (`VmRSS`, in KiB) process `pid` reached while `running` resolves,
/// polled every 20 ms from `/proc/<pid>/status`; the process is killed if it passes
/// `kill_above_kib` (a runaway that would otherwise take the machine with it).
pub async fn peak_rss_kib<F: std::future::Future>(
    pid: u32,
    kill_above_kib: u64,
    running: F,
) -> (F::Output, u64) {
    let peak = Arc::new(Mutex::new(0u64));
    let watched = peak.clone();
    let poll = tokio::spawn(async move {
        loop {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status"));
            let Ok(status) = status else { return };
            let rss = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
            if let Some(rss) = rss {
                let mut peak = watched.lock().unwrap();
                *peak = (*peak).max(rss);
                if rss > kill_above_kib {
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let output = running.await;
    poll.abort();
    let peak = *peak.lock().unwrap();
    (output, peak)
}
