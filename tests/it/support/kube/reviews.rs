//! TokenReview (`authentication.k8s.io/v1`) and SubjectAccessReview (`authorization.k8s.io/v1`),
//! as the real API server answers them: `create` only, the caller needs `create` on
//! `tokenreviews` / `subjectaccessreviews` (the `system:auth-delegator` ClusterRole), bodies
//! decoded with the k8s-openapi types and validated as the real server validates them (a
//! token; exactly one of resource or non-resource attributes; a user or a group), the answer
//! `201 Created` with the request's spec and a status. Tokens are those a test registered
//! with [`KubeServer::add_user_token`]; access is what [`KubeServer::grant_to`] gave the user
//! and its groups.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewStatus, UserInfo};
use k8s_openapi::api::authorization::v1::{SubjectAccessReview, SubjectAccessReviewStatus};
use serde_json::Value;

use super::{json_response, status_response, Identity, KubeServer, Shared};

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

impl KubeServer {
    /// Makes `token` a bearer token a TokenReview accepts as `user` in `groups` (the API
    /// server itself takes only its own token: these are the dashboard's viewers').
    pub fn add_user_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.shared.state().user_tokens.insert(
            token.to_string(),
            (
                user.to_string(),
                groups.iter().map(|g| g.to_string()).collect(),
            ),
        );
    }
}

fn invalid(kind: &str, message: &str) -> Response {
    status_response(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        &format!("{kind}.{} \"\" is invalid: {message}", group_of(kind)),
        None,
    )
}

fn group_of(kind: &str) -> &'static str {
    if kind == "TokenReview" {
        "authentication.k8s.io"
    } else {
        "authorization.k8s.io"
    }
}

/// The answer to a review request, or `None` when `path` is not a review's.
pub(super) fn answer(
    shared: &Shared,
    method: &Method,
    path: &str,
    who: &Identity,
    body: &[u8],
) -> Option<Response> {
    let (kind, resource) = match path {
        TOKEN_REVIEWS => ("TokenReview", "tokenreviews"),
        ACCESS_REVIEWS => ("SubjectAccessReview", "subjectaccessreviews"),
        _ => return None,
    };
    if method != Method::POST {
        return Some(status_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!(
                "the server does not allow this method on the requested resource ({resource})"
            ),
            None,
        ));
    }
    let state = shared.state();
    if !state.authorized(who, "create", resource, None) {
        return Some(status_response(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!(
                "{resource}.{} is forbidden: User \"{}\" cannot create resource \"{resource}\" \
                 in API group \"{}\" at the cluster scope",
                group_of(kind),
                who.user,
                group_of(kind)
            ),
            None,
        ));
    }
    let raw: Value = match serde_json::from_slice(body) {
        Ok(raw) => raw,
        Err(e) => {
            return Some(status_response(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &e.to_string(),
                None,
            ))
        }
    };
    let expected_version = format!("{}/v1", group_of(kind));
    if raw["apiVersion"] != expected_version.as_str() || raw["kind"] != kind {
        return Some(status_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("the body is not a {expected_version} {kind}: {raw}"),
            None,
        ));
    }
    Some(if kind == "TokenReview" {
        token_review(&state.user_tokens, raw)
    } else {
        access_review(&state, raw)
    })
}

fn token_review(
    tokens: &std::collections::BTreeMap<String, (String, Vec<String>)>,
    raw: Value,
) -> Response {
    let mut review: TokenReview = match serde_json::from_value(raw) {
        Ok(review) => review,
        Err(e) => {
            return status_response(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string(), None)
        }
    };
    let Some(token) = review.spec.token.clone().filter(|t| !t.is_empty()) else {
        return invalid("TokenReview", "spec.token: Required value");
    };
    review.status = Some(match tokens.get(&token) {
        Some((user, groups)) => TokenReviewStatus {
            authenticated: Some(true),
            user: Some(UserInfo {
                username: Some(user.clone()),
                uid: Some(format!("uid-{user}")),
                groups: Some(groups.clone()),
                extra: None,
            }),
            audiences: review.spec.audiences.clone(),
            error: None,
        },
        // The real server: no `authenticated`, an empty user, the authenticators' error.
        None => TokenReviewStatus {
            user: Some(UserInfo::default()),
            error: Some("[invalid bearer token, token lookup failed]".into()),
            ..TokenReviewStatus::default()
        },
    });
    json_response(StatusCode::CREATED, &serde_json::to_value(&review).unwrap())
}

fn access_review(state: &super::State, raw: Value) -> Response {
    let mut review: SubjectAccessReview = match serde_json::from_value(raw) {
        Ok(review) => review,
        Err(e) => {
            return status_response(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string(), None)
        }
    };
    let spec = &review.spec;
    if spec.resource_attributes.is_some() == spec.non_resource_attributes.is_some() {
        return invalid(
            "SubjectAccessReview",
            "spec.resourceAttributes: Invalid value: \"null\": exactly one of \
             nonResourceAttributes or resourceAttributes must be specified",
        );
    }
    let user = spec.user.clone().unwrap_or_default();
    let groups = spec.groups.clone().unwrap_or_default();
    if user.is_empty() && groups.is_empty() {
        return invalid(
            "SubjectAccessReview",
            "spec.user: Invalid value: \"\": at least one of user or group must be specified",
        );
    }
    let allowed = match &spec.resource_attributes {
        Some(attributes) => {
            let subject = Identity {
                user: user.clone(),
                groups,
                impersonated: true,
            };
            state.authorized(
                &subject,
                attributes.verb.as_deref().unwrap_or(""),
                attributes.resource.as_deref().unwrap_or(""),
                attributes.namespace.as_deref().filter(|ns| !ns.is_empty()),
            )
        }
        None => false,
    };
    review.status = Some(SubjectAccessReviewStatus {
        allowed,
        reason: allowed
            .then(|| format!("RBAC: allowed by a binding to User \"{user}\" or its groups")),
        ..SubjectAccessReviewStatus::default()
    });
    json_response(StatusCode::CREATED, &serde_json::to_value(&review).unwrap())
}
