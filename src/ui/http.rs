//! The dashboard's HTTP side: the pages (one HTML shell, a stylesheet and a small script, all
//! embedded in the binary) and the JSON API they poll, every answer filtered by what the
//! viewer may see ([`super::auth`]). Served on a listener of its own (`--ui-listen`) with the
//! bounds of every tagpin listener ([`crate::server::serve_app`]).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::auth::{Refused, UiAuth};
use super::board::{Board, Visible};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The Content-Security-Policy of every answer: the page's own script and style only, no
/// inline script, nothing framed, nothing sent elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// What the handlers share.
struct Ui {
    board: Board,
    auth: UiAuth,
}

/// The dashboard's routes, reading `board`, viewers known by `auth`.
pub fn router(board: Board, auth: UiAuth) -> Router {
    let ui = Arc::new(Ui { board, auth });
    Router::new()
        .route("/", get(page))
        .route("/repositories/{id}", get(page))
        .route("/assets/app.js", get(script))
        .route("/assets/app.css", get(style))
        .route("/api/repositories", get(overview))
        .route("/api/repositories/{id}", get(repository))
        .layer(axum::middleware::map_response(secure))
        .with_state(ui)
}

/// The headers every answer carries.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(headers, "content-security-policy", CSP);
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "referrer-policy", "no-referrer");
    set(headers, "x-frame-options", "DENY");
    set(headers, "cache-control", "no-store");
    response
}

async fn page() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        INDEX_HTML,
    )
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
}

async fn style() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], APP_CSS)
}

/// What the viewer may see, or the answer that refuses them.
async fn visible(ui: &Ui, headers: &HeaderMap) -> Result<Visible, Response> {
    match ui.auth.visible(headers, ui.board.namespaces()).await {
        Ok(visible) => Ok(visible),
        Err(Refused::Review(e)) => {
            tracing::warn!("dashboard: {e}");
            Err((
                StatusCode::SERVICE_UNAVAILABLE,
                Json(serde_json::json!({"error": "cannot review the viewer's access now"})),
            )
                .into_response())
        }
        Err(refused) => Err((
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            Json(serde_json::json!({"error": refused.to_string()})),
        )
            .into_response()),
    }
}

async fn overview(State(ui): State<Arc<Ui>>, headers: HeaderMap) -> Response {
    let visible = match visible(&ui, &headers).await {
        Ok(visible) => visible,
        Err(answer) => return answer,
    };
    Json(serde_json::json!({
        "repositories": ui.board.overview(&visible),
    }))
    .into_response()
}

async fn repository(
    State(ui): State<Arc<Ui>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let visible = match visible(&ui, &headers).await {
        Ok(visible) => visible,
        Err(answer) => return answer,
    };
    match ui.board.detail(&id, &visible) {
        Some(detail) => Json(detail).into_response(),
        // The same answer for a repository that does not exist and one not to be seen.
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({"error": "no such repository"})),
        )
            .into_response(),
    }
}
