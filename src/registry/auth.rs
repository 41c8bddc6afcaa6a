//! Registry authentication: the pure parts.
//!
//! Registries answer an unauthenticated request with `401` and a `WWW-Authenticate` challenge.
//! For `Bearer` the client asks the challenge's `realm` for a token scoped to the repository;
//! for `Basic` it resends with credentials. Parsing challenges and token answers is kept here,
//! free of I/O, so every quirk (Quay's scope-less challenge, `access_token` instead of `token`)
//! is unit-tested without a server.
//!
//! A `docker login` leaves either a password (sent as Basic to the registry or its token
//! realm) or an OAuth2 identity token (ACR, some `credsStore`s), which is only good for the
//! refresh-token grant at the token realm: [`Login`] keeps the two apart so neither is sent
//! where it does not belong.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// A username and password (or token used as a password) for one registry.
///
/// `Debug` never prints the password: credentials end up in structs that get logged.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// What `docker login` left for one registry.
///
/// `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Login {
    /// Sent as `Basic` to the registry, or to its token realm's `GET`.
    Password(Credential),
    /// An OAuth2 refresh token, exchanged at the token realm with a `POST` (see
    /// [`refresh_token_form`]); never sent to the registry itself.
    IdentityToken(String),
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Login::Password(c) => f.debug_tuple("Password").field(c).finish(),
            Login::IdentityToken(_) => f.write_str("IdentityToken(<redacted>)"),
        }
    }
}

/// The `client_id` tagpin names itself with at OAuth2 token endpoints.
pub(crate) const OAUTH_CLIENT_ID: &str = "tagpin";

/// The form of the OAuth2 refresh-token grant (distribution's `docs/spec/auth/oauth.md`):
/// `POST realm` with these fields, answered with JSON `access_token`.
pub(crate) fn refresh_token_form<'a>(
    refresh_token: &'a str,
    service: Option<&'a str>,
    scope: &'a str,
) -> Vec<(&'static str, &'a str)> {
    let mut form = vec![
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token),
    ];
    if let Some(service) = service {
        form.push(("service", service));
    }
    form.push(("scope", scope));
    form.push(("client_id", OAUTH_CLIENT_ID));
    form
}

/// What a `401` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
    Basic,
}

/// Parses one `WWW-Authenticate` header value; `None` when it names no scheme we speak.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = match header.find(|c: char| c.is_ascii_whitespace()) {
        Some(i) => (&header[..i], &header[i..]),
        None => (header, ""),
    };
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let params = parse_params(rest);
    let get = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.clone())
    };
    Some(Challenge::Bearer {
        realm: get("realm")?,
        service: get("service"),
        scope: get("scope").filter(|s| !s.is_empty()),
    })
}

/// Splits `k="v", k2=v2` into pairs; quoted values may hold commas and `\"` escapes.
fn parse_params(input: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = input.chars().peekable();
    loop {
        while matches!(chars.peek(), Some(c) if c.is_ascii_whitespace() || *c == ',') {
            chars.next();
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c == ',' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() {
            break;
        }
        if chars.next() != Some('=') {
            continue;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(escaped) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => break,
                    other => value.push(other),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        out.push((key.trim().to_string(), value.trim().to_string()));
    }
    out
}

/// The scope to ask for: the challenge's own when it names one, else pull on the repository.
///
/// Quay answers with a challenge that has no `scope`; asking without one yields a token that
/// cannot read anything, so the scope is built from the repository name instead.
pub(crate) fn token_scope(challenge_scope: Option<&str>, repository: &str) -> String {
    match challenge_scope {
        Some(scope) => scope.to_string(),
        None => format!("repository:{repository}:pull"),
    }
}

/// A bearer token and how long it may be reused.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub value: String,
    pub lifetime: Duration,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("value", &"<redacted>")
            .field("lifetime", &self.lifetime)
            .finish()
    }
}

/// The distribution token spec's default lifetime when `expires_in` is absent.
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(60);
/// Tokens are dropped this long before they expire, so a request never carries a stale one.
const TOKEN_EXPIRY_MARGIN: Duration = Duration::from_secs(10);
/// The longest a token is reused, whatever `expires_in` says. The number comes from the
/// network: `18446744073709551615` must neither overflow the clock nor pin a token (which the
/// registry may revoke) for ever. Registries hand out tokens for 5 to 60 minutes; asking again
/// after an hour costs one request per repository.
pub(crate) const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

#[derive(Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
    /// Any JSON value: a negative, fractional or out-of-range number must not make a usable
    /// token unreadable (see [`token_lifetime`]).
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
}

/// How long a token may be reused, from its answer's `expires_in`: absent or not a number is
/// the spec's 60 s; zero or negative is "do not reuse" (the token serves the request that
/// asked for it); anything is capped at [`MAX_TOKEN_LIFETIME`]; the margin is taken off.
fn token_lifetime(expires_in: Option<&serde_json::Value>) -> Duration {
    let lifetime = match expires_in.and_then(serde_json::Value::as_f64) {
        None => DEFAULT_TOKEN_LIFETIME,
        Some(secs) if secs >= MAX_TOKEN_LIFETIME.as_secs_f64() => MAX_TOKEN_LIFETIME,
        Some(secs) if secs <= 0.0 => Duration::ZERO,
        Some(secs) => Duration::from_secs_f64(secs),
    };
    lifetime.saturating_sub(TOKEN_EXPIRY_MARGIN)
}

/// Why a token service's answer holds no usable token. The caller names the image and the
/// registry.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TokenAnswerError {
    /// serde's error is kept for its line and column, but not as a source and not in its own
    /// words: those may quote the answer, and an answer carries tokens.
    #[error("token answer: {}", crate::bounded::json_problem(.0))]
    NotJson(serde_json::Error),
    #[error("token answer has neither `token` nor `access_token`")]
    NoToken,
}

/// Reads a token endpoint's JSON answer. Both `token` and the OAuth2 `access_token` are
/// accepted; when both are present they are the same token by spec, and `token` wins.
pub(crate) fn parse_token_answer(body: &[u8]) -> Result<Token, TokenAnswerError> {
    let answer: TokenAnswer = serde_json::from_slice(body).map_err(TokenAnswerError::NotJson)?;
    let value = answer
        .token
        .filter(|t| !t.is_empty())
        .or(answer.access_token.filter(|t| !t.is_empty()))
        .ok_or(TokenAnswerError::NoToken)?;
    let lifetime = token_lifetime(answer.expires_in.as_ref());
    Ok(Token { value, lifetime })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_challenge_is_parsed_with_its_scope() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull""#,
        );
        assert_eq!(
            c,
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/nginx:pull".into()),
            })
        );
    }

    #[test]
    fn quoted_scope_with_commas_stays_whole() {
        let c = parse_challenge(
            r#"Bearer realm="http://127.0.0.1:1/token", service="reg", scope="repository:a/b:pull,push""#,
        );
        match c {
            Some(Challenge::Bearer { scope, .. }) => {
                assert_eq!(scope.as_deref(), Some("repository:a/b:pull,push"))
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn quay_challenge_without_scope_gets_a_pull_scope_for_the_repository() {
        let c = parse_challenge(r#"Bearer realm="https://quay.io/v2/auth",service="quay.io""#);
        let Some(Challenge::Bearer { scope, .. }) = c else {
            panic!("expected a bearer challenge");
        };
        assert_eq!(scope, None);
        assert_eq!(
            token_scope(scope.as_deref(), "k_nakajima/nginx-sample"),
            "repository:k_nakajima/nginx-sample:pull"
        );
    }

    #[test]
    fn basic_challenge_is_recognised_case_insensitively() {
        assert_eq!(
            parse_challenge(r#"basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
    }

    #[test]
    fn unknown_scheme_and_bearer_without_realm_are_rejected() {
        assert_eq!(parse_challenge("Negotiate abc"), None);
        assert_eq!(parse_challenge(r#"Bearer service="x""#), None);
    }

    #[test]
    fn access_token_is_accepted_when_token_is_absent() {
        let t = parse_token_answer(br#"{"access_token":"abc","expires_in":300}"#).unwrap();
        assert_eq!(t.value, "abc");
        assert_eq!(t.lifetime, Duration::from_secs(290));
    }

    #[test]
    fn token_without_expiry_lives_the_spec_default_less_the_margin() {
        let t = parse_token_answer(br#"{"token":"abc"}"#).unwrap();
        assert_eq!(t.lifetime, Duration::from_secs(50));
    }

    #[test]
    fn absurd_lifetimes_are_capped_and_negative_ones_mean_do_not_reuse() {
        let lifetime = |json: &str| parse_token_answer(json.as_bytes()).unwrap().lifetime;
        let capped = MAX_TOKEN_LIFETIME - TOKEN_EXPIRY_MARGIN;
        assert_eq!(
            lifetime(r#"{"token":"a","expires_in":18446744073709551615}"#),
            capped
        );
        assert_eq!(lifetime(r#"{"token":"a","expires_in":1e300}"#), capped);
        assert_eq!(
            lifetime(r#"{"token":"a","expires_in":99999999999999999999999999}"#),
            capped
        );
        assert_eq!(lifetime(r#"{"token":"a","expires_in":0}"#), Duration::ZERO);
        assert_eq!(
            lifetime(r#"{"token":"a","expires_in":-300}"#),
            Duration::ZERO
        );
        assert_eq!(lifetime(r#"{"token":"a","expires_in":5}"#), Duration::ZERO);
        assert_eq!(
            lifetime(r#"{"token":"a","expires_in":70.5}"#),
            Duration::from_secs_f64(60.5)
        );
        assert_eq!(
            lifetime(r#"{"token":"a","expires_in":"300"}"#),
            Duration::from_secs(50)
        );
    }

    #[test]
    fn token_answer_without_any_token_is_an_error() {
        let err = parse_token_answer(br#"{"expires_in":300}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("neither `token` nor `access_token`"), "{err}");
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let c = Credential {
            username: "u".into(),
            password: "hunter2".into(),
        };
        let t = Token {
            value: "secret-token".into(),
            lifetime: Duration::from_secs(1),
        };
        let l = Login::IdentityToken("refresh-me".into());
        let p = Login::Password(c.clone());
        let shown = format!("{c:?} {t:?} {l:?} {p:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("secret-token"));
        assert!(!shown.contains("refresh-me"), "{shown}");
    }

    #[test]
    fn refresh_token_form_has_the_oauth_fields_in_order() {
        let form = refresh_token_form("rt", Some("svc"), "repository:a/b:pull");
        assert_eq!(
            form,
            vec![
                ("grant_type", "refresh_token"),
                ("refresh_token", "rt"),
                ("service", "svc"),
                ("scope", "repository:a/b:pull"),
                ("client_id", "tagpin"),
            ]
        );
        let without_service = refresh_token_form("rt", None, "s");
        assert!(!without_service.iter().any(|(k, _)| *k == "service"));
    }
}
