//! A real browser for the dashboard's tests: Debian's chromium, headless, driven through
//! chromedriver's W3C WebDriver HTTP API with reqwest, and axe-core (npm) injected into the
//! page to check accessibility. `.ci/run` installs all three; under `CI=true` a missing one
//! fails the test, elsewhere the test says so and is skipped.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::{Child, Command};

use super::registry::free_port;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Where axe-core's `axe.min.js` is, when not in [`axe_path`]'s default place.
pub const AXE_ENV: &str = "TAGPIN_AXE_JS";

/// WebDriver's key codes.
pub const TAB: &str = "\u{E004}";
pub const ENTER: &str = "\u{E007}";

/// `axe.min.js`: `$TAGPIN_AXE_JS`, else where `.ci/run` installs it
/// (`target/tools/axe/node_modules/axe-core/axe.min.js`).
pub fn axe_path() -> PathBuf {
    match std::env::var_os(AXE_ENV) {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("target/tools/axe/node_modules/axe-core/axe.min.js"),
    }
}

/// What is missing to run a browser test, if anything. Under `CI=true` a missing tool fails
/// the test (CI installs them all); elsewhere the caller skips, saying why.
pub fn missing_tools() -> Option<String> {
    let missing: Vec<String> = [
        PathBuf::from(CHROMIUM),
        PathBuf::from(CHROMEDRIVER),
        axe_path(),
    ]
    .into_iter()
    .filter(|p| !p.exists())
    .map(|p| p.display().to_string())
    .collect();
    if missing.is_empty() {
        return None;
    }
    let message = format!(
        "browser test needs {} (apt: chromium chromium-driver; npm: axe-core into \
         target/tools/axe, or ${AXE_ENV}); .ci/run installs them",
        missing.join(", ")
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    Some(message)
}

/// A chromedriver process and one headless chromium session.
pub struct Browser {
    _driver: Child,
    _profile: tempfile::TempDir,
    http: reqwest::Client,
    session: String,
}

impl Browser {
    /// Starts chromedriver and a fresh headless chromium (its own profile, no network of its
    /// own: no updates, sync or QUIC), 1400×1000.
    pub async fn start() -> Browser {
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        super::eventually_async("chromedriver to listen", || async {
            let status = http.get(format!("{base}/status")).send().await;
            match status {
                Ok(answer) => answer
                    .json::<Value>()
                    .await
                    .is_ok_and(|v| v["value"]["ready"] == json!(true)),
                Err(_) => false,
            }
        })
        .await;
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
        ]
        .into_iter()
        .map(String::from)
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await
            .expect("new WebDriver session")
            .json()
            .await
            .unwrap();
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_string();
        Browser {
            _driver: driver,
            _profile: profile,
            http,
            session: format!("{base}/session/{session}"),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.session))
            .timeout(Duration::from_secs(60));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        if answer["value"].get("error").is_some() {
            panic!("WebDriver {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> Value {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    pub async fn url(&self) -> String {
        self.get("/url")
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Runs `script` (a function body) in the page and returns what it returns.
    pub async fn run(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", json!({ "script": script, "args": args }))
            .await
    }

    /// Runs `script` in the page; it ends by calling its last argument with the result.
    pub async fn run_async(&self, script: &str) -> Value {
        self.post("/execute/async", json!({ "script": script, "args": [] }))
            .await
    }

    /// The text a person sees in the page (`innerText` of the body).
    pub async fn text(&self) -> String {
        let text = self.run("return document.body.innerText;", json!([])).await;
        text.as_str().unwrap_or_default().to_string()
    }

    /// Presses a key (a character, or [`TAB`], [`ENTER`]).
    pub async fn press(&self, key: &str) {
        let actions = json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
            {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}
        ]}]});
        self.post("/actions", actions).await;
    }

    /// The focused element's tag, `href` attribute, `aria-label` and text.
    pub async fn focused(&self) -> Value {
        self.run(
            "const e = document.activeElement; return {tag: e.tagName.toLowerCase(), \
             href: e.getAttribute('href'), label: e.getAttribute('aria-label'), \
             text: e.textContent};",
            json!([]),
        )
        .await
    }

    /// Presses Tab until `matches` holds for the focused element (at most `limit` times);
    /// returns it.
    pub async fn tab_to(&self, limit: usize, matches: impl Fn(&Value) -> bool) -> Option<Value> {
        for _ in 0..limit {
            self.press(TAB).await;
            let focused = self.focused().await;
            if matches(&focused) {
                return Some(focused);
            }
        }
        None
    }

    /// axe-core's serious and critical violations on the page, as `id: help (targets)`.
    pub async fn accessibility_problems(&self) -> Vec<String> {
        let axe = std::fs::read_to_string(axe_path()).expect("read axe.min.js");
        self.run(&format!("{axe}\nreturn typeof axe;"), json!([]))
            .await;
        let found = self
            .run_async(
                "const done = arguments[arguments.length - 1];\
                 axe.run(document, {resultTypes: ['violations']})\
                 .then(r => done(r.violations.filter(v => v.impact === 'serious' || \
                 v.impact === 'critical').map(v => v.id + ': ' + v.help + ' (' + \
                 v.nodes.map(n => n.target.join(' ')).join(', ') + ')')))\
                 .catch(e => done(['axe failed: ' + e]));",
            )
            .await;
        serde_json::from_value(found).unwrap()
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let encoded = self.get("/screenshot").await;
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap())
            .unwrap()
    }

    /// Ends the session (chromium exits; chromedriver is killed when dropped).
    pub async fn quit(self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}
