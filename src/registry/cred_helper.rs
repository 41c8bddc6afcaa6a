//! Docker credential helpers (`docker-credential-<name> get`).
//!
//! ECR, Artifact Registry and ACR hand out short-lived credentials through helper programs
//! named in `config.json` (`credHelpers`, `credsStore`), not through `auths`. The protocol is
//! tiny: the server URL on stdin, JSON `{"ServerURL","Username","Secret"}` on stdout, and
//! `<token>` as the username when the secret is an identity token. Reading the answer is pure
//! ([`interpret`]) and unit-tested; [`get`] is the only code that spawns a process.
//!
//! A helper's stdout holds secrets, so nothing it printed ever reaches a message; its stderr
//! is shown (first line only) after [`redact`] blanks anything shaped like a token.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use super::auth::{Credential, Login};

/// How long a helper may take: cloud helpers make a network call, but a hung one must not
/// hold a pass.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The message helpers print (docker-credential-helpers' `ErrCredentialsNotFound`) when they
/// hold nothing for the server: the registry is then used anonymously.
const NOT_FOUND: &str = "credentials not found";

/// The username that marks `Secret` as an identity token.
const IDENTITY_TOKEN_USER: &str = "<token>";

#[derive(Deserialize)]
struct Answer {
    #[serde(default, rename = "Username")]
    username: String,
    #[serde(default, rename = "Secret")]
    secret: String,
}

/// How a helper run ended, as [`interpret`] needs it.
pub struct Outcome<'a> {
    /// `None` when it exited successfully, else how it failed.
    pub failure: Option<Failure>,
    pub stdout: &'a [u8],
    pub stderr: &'a [u8],
}

/// How a helper process ended when it did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("exited with status {0}")]
    Status(i32),
    #[error("was killed by a signal")]
    Killed,
}

/// Why a credential helper gave no login. Messages say what happened to the helper, never
/// what it printed on stdout (its answer holds secrets); the caller names the helper and the
/// registry. Cloned because a failure is answered from memory for a while (see
/// [`super::docker_config::FAILURE_REUSE`]), hence the `Arc`s around `io::Error`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HelperError {
    /// A `credHelpers`/`credsStore` value that would make the program a path.
    #[error("credential helper name {name:?} is not a plain name")]
    NotAPlainName { name: String },
    #[error("not found on PATH")]
    NotFound,
    #[error("cannot start: {0}")]
    CannotStart(#[source] Arc<std::io::Error>),
    #[error("gave no answer within {within:?}; stopped")]
    NoAnswer { within: Duration },
    #[error("cannot read its answer: {0}")]
    CannotRead(#[source] Arc<std::io::Error>),
    /// It failed; `stderr` is the first line it wrote there, already [`redact`]ed.
    #[error("{failure}{}", stderr.as_deref().map(|line| format!(": {line}")).unwrap_or_default())]
    Failed {
        #[source]
        failure: Failure,
        stderr: Option<String>,
    },
    /// serde's error is not kept: its message may quote the answer, which may be a secret.
    #[error(
        "printed something that is not credential helper JSON (not shown: it may hold secrets)"
    )]
    NotJson,
}

/// The program for a helper name; a name that would make it a path is refused, since
/// `config.json` must not be able to run an arbitrary file.
pub fn program(name: &str) -> Result<String, HelperError> {
    if name.is_empty() || name.contains(['/', '\\']) || name.chars().any(char::is_whitespace) {
        return Err(HelperError::NotAPlainName {
            name: name.to_string(),
        });
    }
    Ok(format!("docker-credential-{name}"))
}

/// What a helper's run means: a login, `None` for "no credentials, go anonymous", or an
/// error that never quotes stdout.
pub(crate) fn interpret(outcome: &Outcome<'_>) -> Result<Option<Login>, HelperError> {
    if let Some(failure) = outcome.failure {
        let said_not_found = |bytes: &[u8]| String::from_utf8_lossy(bytes).contains(NOT_FOUND);
        if said_not_found(outcome.stdout) || said_not_found(outcome.stderr) {
            return Ok(None);
        }
        return Err(HelperError::Failed {
            failure,
            stderr: first_line(outcome.stderr).map(|line| redact(&line)),
        });
    }
    // serde's message may quote the input, which may be a secret: it is not kept.
    let answer: Answer =
        serde_json::from_slice(outcome.stdout).map_err(|_| HelperError::NotJson)?;
    if answer.secret.is_empty() {
        return Ok(None);
    }
    if answer.username == IDENTITY_TOKEN_USER {
        return Ok(Some(Login::IdentityToken(answer.secret)));
    }
    Ok(Some(Login::Password(Credential {
        username: answer.username,
        password: answer.secret,
    })))
}

fn first_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(200).collect())
}

/// Blanks every word that looks like a token (long, mixed letters and digits, token alphabet):
/// a failing helper may echo the secret it could not use.
pub(crate) fn redact(line: &str) -> String {
    line.split(' ')
        .map(|word| {
            let bare = word.trim_matches(|c: char| "\"'`,;:()[]{}<>".contains(c));
            let token_like = bare.len() >= 16
                && bare.chars().any(|c| c.is_ascii_digit())
                && bare.chars().any(|c| c.is_ascii_alphabetic())
                && bare
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+/=._-".contains(c));
            if token_like {
                word.replace(bare, "<redacted>")
            } else {
                word.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `program get` with `server_url` on stdin: no shell, the environment inherited (cloud
/// helpers read their credentials from it), stdin closed after the URL, killed on timeout.
pub async fn get(
    program: &str,
    server_url: &str,
    timeout: Duration,
) -> Result<Option<Login>, HelperError> {
    let mut child = tokio::process::Command::new(program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => HelperError::NotFound,
            _ => HelperError::CannotStart(Arc::new(e)),
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that exits without reading makes this fail; its exit status says why.
        let _ = stdin.write_all(server_url.as_bytes()).await;
    }
    let output = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| HelperError::NoAnswer { within: timeout })?
        .map_err(|e| HelperError::CannotRead(Arc::new(e)))?;
    let failure = (!output.status.success()).then(|| match output.status.code() {
        Some(code) => Failure::Status(code),
        None => Failure::Killed,
    });
    interpret(&Outcome {
        failure,
        stdout: &output.stdout,
        stderr: &output.stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(stdout: &str) -> Result<Option<Login>, HelperError> {
        interpret(&Outcome {
            failure: None,
            stdout: stdout.as_bytes(),
            stderr: b"",
        })
    }

    fn failed(stdout: &str, stderr: &str) -> Result<Option<Login>, HelperError> {
        interpret(&Outcome {
            failure: Some(Failure::Status(1)),
            stdout: stdout.as_bytes(),
            stderr: stderr.as_bytes(),
        })
    }

    #[test]
    fn username_and_secret_are_a_password_login() {
        let login = ok(r#"{"ServerURL":"r.io","Username":"AWS","Secret":"pw"}"#).unwrap();
        assert_eq!(
            login,
            Some(Login::Password(Credential {
                username: "AWS".into(),
                password: "pw".into()
            }))
        );
    }

    #[test]
    fn token_username_marks_an_identity_token() {
        let login = ok(r#"{"ServerURL":"r.io","Username":"<token>","Secret":"rt"}"#).unwrap();
        assert_eq!(login, Some(Login::IdentityToken("rt".into())));
    }

    #[test]
    fn empty_secret_and_not_found_mean_anonymous() {
        assert_eq!(
            ok(r#"{"ServerURL":"r.io","Username":"","Secret":""}"#).unwrap(),
            None
        );
        assert_eq!(
            failed("credentials not found in native keychain\n", "").unwrap(),
            None
        );
        assert_eq!(
            failed("", "credentials not found in native keychain").unwrap(),
            None
        );
    }

    #[test]
    fn garbage_is_an_error_that_does_not_quote_it() {
        let err = ok("\"hunter2-garbage\"").unwrap_err().to_string();
        assert!(err.contains("not credential helper JSON"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn failure_shows_the_first_stderr_line_redacted_never_stdout() {
        let err = failed(
            "stdout-secret-1234567890abcdef",
            "\n  token AKIA1234567890ABCDEF rejected: expired\nsecond line\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "exited with status 1: token <redacted> rejected: expired"
        );
        assert_eq!(
            failed("", "").unwrap_err().to_string(),
            "exited with status 1"
        );
    }

    #[test]
    fn redact_keeps_words_and_urls_but_blanks_tokens() {
        assert_eq!(
            redact("no credentials for https://r.io (\"eyJhbGciOi.J9eyJzdWIi0x\")"),
            "no credentials for https://r.io (\"<redacted>\")"
        );
        assert_eq!(
            redact("profile default not found"),
            "profile default not found"
        );
    }

    #[test]
    fn helper_names_must_not_be_paths() {
        assert_eq!(program("ecr-login").unwrap(), "docker-credential-ecr-login");
        assert!(program("../../bin/sh").is_err());
        assert!(program("").is_err());
    }

    fn script(dir: &std::path::Path, body: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("docker-credential-test");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.to_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn get_passes_the_url_on_stdin_and_reads_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        let program = script(
            dir.path(),
            r#"read url; printf '{"ServerURL":"%s","Username":"u-%s","Secret":"s"}' "$url" "$url""#,
        );
        let login = get(&program, "r.io", TIMEOUT).await.unwrap();
        let Some(Login::Password(c)) = login else {
            panic!("expected a password login");
        };
        assert_eq!(c.username, "u-r.io");
    }

    #[tokio::test]
    async fn a_hung_helper_is_stopped_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let program = script(dir.path(), "exec sleep 30");
        let started = std::time::Instant::now();
        let err = get(&program, "r.io", Duration::from_millis(300))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("no answer within"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_missing_helper_is_not_found_on_path() {
        let err = get("docker-credential-tagpin-no-such-helper", "r.io", TIMEOUT)
            .await
            .unwrap_err();
        assert!(matches!(err, HelperError::NotFound), "{err:?}");
        assert_eq!(err.to_string(), "not found on PATH");
    }
}
