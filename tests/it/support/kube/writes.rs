//! Writes through the API, for the clients a test grants them to (a
//! controller's status updates, its Leases and Events): create, update,
//! patch and delete as the real API server's generic registry does them.
//!
//! - Authorization first: without a grant the write is 403 and kept for the
//!   test to fail on ([`super::KubeServer::writes`]).
//! - Optimistic concurrency: an update or patch carrying a stale
//!   `metadata.resourceVersion` is 409 Conflict; a create of an existing name
//!   is 409 AlreadyExists.
//! - The `status` subresource: writes to an object leave its status alone and
//!   writes to `/status` change only the status; `metadata.generation` counts
//!   the other changes.
//! - Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
//!   server-side apply. Apply is modelled for one field manager per object
//!   and subresource: what the manager applied last and no longer applies is
//!   removed, maps merge, lists are replaced; conflicts between managers and
//!   `metadata.managedFields` are not modelled. Strategic merge patch is
//!   refused (415) rather than approximated: the real server refuses it for
//!   custom resources, and no tagpin write uses it.
//! - Deletion honours finalizers: the object gets a `deletionTimestamp` and
//!   goes when its last finalizer is removed.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::Response;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde_json::{json, Value};

use super::{
    bad_request, crd_resource, details, forbidden, not_found_path, rfc3339, status_response, ty,
    Identity, Key, Origin, Params, ResourceType, Shared, State,
};

/// One write, as routed.
pub(super) struct WriteRequest<'a> {
    pub verb: &'static str,
    pub resource: usize,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    pub params: Params,
    pub content_type: String,
    pub body: &'a Bytes,
}

/// Answers a write: the stored object (201 for a create, 200 otherwise), or
/// the real server's `Status` for a refusal.
pub(super) fn write(shared: &Arc<Shared>, who: &Identity, request: WriteRequest<'_>) -> Response {
    let t = ty(request.resource);
    let mut state = shared.state();
    let authz_resource = match &request.subresource {
        Some(sub) => format!("{}/{sub}", t.plural),
        None => t.plural.to_string(),
    };
    if !state.authorized(
        who,
        request.verb,
        &authz_resource,
        request.namespace.as_deref(),
    ) {
        return forbidden(
            &who.user,
            request.verb,
            t,
            request.subresource.as_deref(),
            request.namespace.as_deref(),
            request.name.as_deref(),
        );
    }
    if request
        .subresource
        .as_deref()
        .is_some_and(|s| s != "status" || !t.status_subresource)
    {
        return not_found_path();
    }
    if matches!(request.verb, "update" | "patch") {
        if let Some(name) = &request.name {
            let path_hit = |fragment: &str| {
                let path = format!(
                    "{}/{}/{name}",
                    request.namespace.as_deref().unwrap_or(""),
                    t.plural
                );
                path.contains(fragment) || fragment.is_empty()
            };
            let injected = state
                .write_conflicts
                .iter_mut()
                .find(|(fragment, times)| *times > 0 && path_hit(fragment));
            if let Some((_, times)) = injected {
                *times -= 1;
                return status_response(
                    StatusCode::CONFLICT,
                    "Conflict",
                    &format!(
                        "Operation cannot be fulfilled on {} \"{name}\": the object has been \
                         modified; please apply your changes to the latest version and try again",
                        t.group_resource()
                    ),
                    Some(details(t, Some(name))),
                );
            }
        }
    }
    let mut write = Write {
        state: &mut state,
        changes: &shared.changes,
        resource: request.resource,
        t,
        namespace: request.namespace.unwrap_or_default(),
        status_only: request.subresource.is_some(),
        params: &request.params,
    };
    match (request.verb, request.name) {
        ("create", None) if !write.status_only => write.create(request.body),
        ("update", Some(name)) => write.update(&name, request.body),
        ("patch", Some(name)) => write.patch(&name, &request.content_type, request.body),
        ("delete", Some(name)) if !write.status_only => write.delete(&name, request.body),
        (verb, _) => status_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!(
                "the server does not allow this method on the requested resource ({verb} is not \
                 served here by this test server)"
            ),
            Some(meta::StatusDetails::default()),
        ),
    }
}

struct Write<'a, 'b> {
    state: &'a mut State,
    changes: &'b tokio::sync::broadcast::Sender<Arc<super::Change>>,
    resource: usize,
    t: &'static ResourceType,
    namespace: String,
    /// A write to `/status`.
    status_only: bool,
    params: &'b Params,
}

// A refusal is the answer itself, built once per request: boxing it would
// buy nothing.
#[allow(clippy::result_large_err)]
impl Write<'_, '_> {
    fn key(&self, name: &str) -> Key {
        (self.resource, self.namespace.clone(), name.to_string())
    }

    fn create(&mut self, body: &Bytes) -> Response {
        let mut obj = match self.decode_json(body) {
            Ok(obj) => obj,
            Err(response) => return response,
        };
        if let Err(response) = self.check_identity(&obj, None) {
            return response;
        }
        let mut name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        if name.is_empty() {
            match obj["metadata"]["generateName"].as_str() {
                Some(prefix) if !prefix.is_empty() => {
                    name = format!("{prefix}{}", generated_suffix(self.state.rv));
                }
                _ => {
                    return self.invalid(
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    )
                }
            }
        }
        obj["metadata"]["name"] = json!(name);
        if self.t.namespaced {
            obj["metadata"]["namespace"] = json!(self.namespace);
        }
        if obj["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty())
        {
            return status_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "Internal error occurred: resourceVersion should not be set on objects to be created",
                Some(meta::StatusDetails {
                    causes: Some(vec![meta::StatusCause {
                        message: Some(
                            "resourceVersion should not be set on objects to be created"
                                .to_string(),
                        ),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            );
        }
        let key = self.key(&name);
        if self.state.objects.contains_key(&key) {
            return status_response(
                StatusCode::CONFLICT,
                "AlreadyExists",
                &format!("{} \"{name}\" already exists", self.t.group_resource()),
                Some(details(self.t, Some(&name))),
            );
        }
        if self.t.status_subresource {
            // The status of a new object is the server's to set.
            if let Some(map) = obj.as_object_mut() {
                map.remove("status");
            }
        }
        self.store(key, obj, None, Origin::Client, StatusCode::CREATED)
    }

    fn update(&mut self, name: &str, body: &Bytes) -> Response {
        let obj = match self.decode_json(body) {
            Ok(obj) => obj,
            Err(response) => return response,
        };
        if let Err(response) = self.check_identity(&obj, Some(name)) {
            return response;
        }
        let key = self.key(name);
        let Some(old) = self.state.objects.get(&key).cloned() else {
            return self.not_found(name);
        };
        if let Err(response) = self.precondition(name, &obj, &old) {
            return response;
        }
        let new = self.scoped(obj, &old, name);
        self.store(key, new, Some(old), Origin::Client, StatusCode::OK)
    }

    fn patch(&mut self, name: &str, content_type: &str, body: &Bytes) -> Response {
        let media_type = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let key = self.key(name);
        let old = self.state.objects.get(&key).cloned();
        let patched = match media_type.as_str() {
            "application/merge-patch+json" => {
                let Some(old) = &old else {
                    return self.not_found(name);
                };
                let patch: Value = match serde_json::from_slice(body) {
                    Ok(patch) => patch,
                    Err(e) => return bad_request(&format!("error decoding patch: {e}")),
                };
                let mut doc = old.clone();
                json_patch::merge(&mut doc, &patch);
                doc
            }
            "application/json-patch+json" => {
                let Some(old) = &old else {
                    return self.not_found(name);
                };
                let patch: json_patch::Patch = match serde_json::from_slice(body) {
                    Ok(patch) => patch,
                    Err(e) => return bad_request(&format!("error decoding patch: {e}")),
                };
                let mut doc = old.clone();
                if let Err(e) = json_patch::patch(&mut doc, &patch) {
                    return status_response(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        &format!(
                            "the server rejected our request due to an error in our request: {e}"
                        ),
                        Some(details(self.t, Some(name))),
                    );
                }
                doc
            }
            "application/apply-patch+yaml" => {
                return self.apply(name, old, body);
            }
            _ => {
                return status_response(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    &format!(
                    "the body of the request was in an unknown format ({media_type}) - accepted \
                         media types include: application/json-patch+json, \
                         application/merge-patch+json, application/apply-patch+yaml"
                ),
                    Some(meta::StatusDetails::default()),
                )
            }
        };
        let Some(old) = old else {
            return self.not_found(name);
        };
        if let Err(response) = self.precondition(name, &patched, &old) {
            return response;
        }
        let new = self.scoped(patched, &old, name);
        self.store(key, new, Some(old), Origin::Client, StatusCode::OK)
    }

    /// Server-side apply (`Patch::Apply`): creates the object if missing.
    fn apply(&mut self, name: &str, old: Option<Value>, body: &Bytes) -> Response {
        if self.params.field_manager.is_empty() {
            return status_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is \
                 required for apply patch",
                Some(meta::StatusDetails {
                    kind: Some("PatchOptions".to_string()),
                    group: Some("meta.k8s.io".to_string()),
                    ..Default::default()
                }),
            );
        }
        let applied: Value = match serde_yaml::from_slice(body) {
            Ok(applied) => applied,
            Err(e) => return bad_request(&format!("error decoding YAML: {e}")),
        };
        if let Err(response) = self.check_identity(&applied, Some(name)) {
            return response;
        }
        let key = self.key(name);
        let manager = if self.status_only {
            format!("{}/status", self.params.field_manager)
        } else {
            self.params.field_manager.clone()
        };
        let last = self
            .state
            .applied
            .get(&(key.clone(), manager.clone()))
            .cloned();
        let Some(old) = old else {
            if self.status_only {
                return self.not_found(name);
            }
            let mut obj = applied.clone();
            obj["metadata"]["name"] = json!(name);
            if self.t.namespaced {
                obj["metadata"]["namespace"] = json!(self.namespace);
            }
            if self.t.status_subresource {
                if let Some(map) = obj.as_object_mut() {
                    map.remove("status");
                }
            }
            let response = self.store(key.clone(), obj, None, Origin::Client, StatusCode::CREATED);
            if response.status().is_success() && !self.params.dry_run {
                self.state.applied.insert((key, manager), applied);
            }
            return response;
        };
        if let Err(response) = self.precondition(name, &applied, &old) {
            return response;
        }
        let mut merged = old.clone();
        if let Some(last) = &last {
            remove_unapplied(&mut merged, last, &applied);
        }
        merge_applied(&mut merged, &applied);
        let new = self.scoped(merged, &old, name);
        let response = self.store(key.clone(), new, Some(old), Origin::Client, StatusCode::OK);
        if response.status().is_success() && !self.params.dry_run {
            self.state.applied.insert((key, manager), applied);
        }
        response
    }

    fn delete(&mut self, name: &str, body: &Bytes) -> Response {
        let key = self.key(name);
        let Some(old) = self.state.objects.get(&key).cloned() else {
            return self.not_found(name);
        };
        // DeleteOptions, when sent: its preconditions must hold.
        if !body.is_empty() {
            let options: Value = match serde_json::from_slice(body) {
                Ok(options) => options,
                Err(e) => return bad_request(&format!("error decoding DeleteOptions: {e}")),
            };
            for (field, label) in [("resourceVersion", "ResourceVersion"), ("uid", "UID")] {
                if let Some(wanted) = options["preconditions"][field].as_str() {
                    let actual = old["metadata"][field].as_str().unwrap_or("");
                    if wanted != actual {
                        return self.conflict(
                            name,
                            &format!(
                                "Precondition failed: {label} in precondition: {wanted}, \
                                 {label} in object meta: {actual}"
                            ),
                        );
                    }
                }
            }
        }
        if self.params.dry_run {
            return super::json_response(StatusCode::OK, &old);
        }
        let has_finalizers = old["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if !old["metadata"]["deletionTimestamp"].is_null() {
                return super::json_response(StatusCode::OK, &old);
            }
            let mut marked = old.clone();
            marked["metadata"]["deletionTimestamp"] = json!(rfc3339(SystemTime::now()));
            let stored = self
                .state
                .commit(self.changes, key, marked, Some(old), Origin::Deletion);
            return super::json_response(StatusCode::OK, &stored);
        }
        self.state
            .delete(self.changes, self.resource, &self.namespace, name);
        // Pods and custom resources answer with the object, the other
        // built-ins with a Success Status.
        if self.t.schema.is_some() || self.t.kind == "Pod" {
            let mut gone = old;
            gone["metadata"]["resourceVersion"] = json!(self.state.rv.to_string());
            return super::json_response(StatusCode::OK, &gone);
        }
        let mut status_details = details(self.t, Some(name));
        status_details.uid = old["metadata"]["uid"].as_str().map(str::to_string);
        let status = meta::Status {
            status: Some("Success".to_string()),
            details: Some(status_details),
            ..Default::default()
        };
        super::json_response(
            StatusCode::OK,
            &serde_json::to_value(status).expect("serialize Status"),
        )
    }

    // --- shared steps ------------------------------------------------------

    fn decode_json(&self, body: &Bytes) -> Result<Value, Response> {
        let obj: Value = serde_json::from_slice(body)
            .map_err(|e| bad_request(&format!("couldn't decode the request body as JSON: {e}")))?;
        if !obj.is_object() {
            return Err(bad_request("the request body is not a JSON object"));
        }
        Ok(obj)
    }

    /// The object's `apiVersion`, `kind`, name and namespace agree with the
    /// request, as the real server demands.
    fn check_identity(&self, obj: &Value, url_name: Option<&str>) -> Result<(), Response> {
        let kind = obj["kind"].as_str().unwrap_or("");
        if kind.is_empty() {
            return Err(bad_request(&format!(
                "Object 'Kind' is missing in '{}'",
                obj
            )));
        }
        let api_version = obj["apiVersion"].as_str().unwrap_or("");
        if api_version != self.t.api_version() {
            return Err(bad_request(&format!(
                "the API version in the data ({api_version}) does not match the expected API \
                 version ({})",
                self.t.api_version()
            )));
        }
        if kind != self.t.kind {
            return Err(bad_request(&format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                self.t.kind
            )));
        }
        if let Some(url_name) = url_name {
            let name = obj["metadata"]["name"].as_str().unwrap_or("");
            if name != url_name {
                return Err(bad_request(&format!(
                    "the name of the object ({name}) does not match the name on the URL ({url_name})"
                )));
            }
        }
        let namespace = obj["metadata"]["namespace"].as_str().unwrap_or("");
        if !namespace.is_empty() && namespace != self.namespace {
            return Err(bad_request(
                "the namespace of the provided object does not match the namespace sent on the \
                 request",
            ));
        }
        Ok(())
    }

    /// A `metadata.resourceVersion` in the request is a precondition: it
    /// must be the stored one.
    fn precondition(&self, name: &str, obj: &Value, old: &Value) -> Result<(), Response> {
        let given = obj["metadata"]["resourceVersion"].as_str().unwrap_or("");
        let stored = old["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if !given.is_empty() && given != stored {
            return Err(self.conflict(
                name,
                "the object has been modified; please apply your changes to the latest version \
                 and try again",
            ));
        }
        Ok(())
    }

    /// What a write may change: with a status subresource, a write to the
    /// object keeps the stored status and a write to `/status` keeps all but
    /// the status. Name and namespace come from the URL.
    fn scoped(&self, mut new: Value, old: &Value, name: &str) -> Value {
        if self.status_only {
            let mut kept = old.clone();
            match new.get("status") {
                Some(status) => kept["status"] = status.clone(),
                None => {
                    if let Some(map) = kept.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            new = kept;
        } else if self.t.status_subresource {
            match old.get("status") {
                Some(status) => new["status"] = status.clone(),
                None => {
                    if let Some(map) = new.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
        }
        if !new["metadata"].is_object() {
            new["metadata"] = json!({});
        }
        new["metadata"]["name"] = json!(name);
        if self.t.namespaced {
            new["metadata"]["namespace"] = json!(self.namespace);
        }
        new
    }

    /// Checks, prunes and stores (unless a dry run), answering the stored
    /// object with `code`.
    fn store(
        &mut self,
        key: Key,
        obj: Value,
        old: Option<Value>,
        origin: Origin,
        code: StatusCode,
    ) -> Response {
        let name = key.2.clone();
        let (obj, pruned) = match State::normalize(self.resource, obj) {
            Ok(normalized) => normalized,
            Err(message) => return self.invalid(&name, &message),
        };
        if !pruned.is_empty() && self.params.field_validation == "Strict" {
            let unknown: Vec<String> = pruned
                .iter()
                .map(|p| format!("unknown field \"{p}\""))
                .collect();
            return bad_request(&format!("strict decoding error: {}", unknown.join(", ")));
        }
        let stored = if self.params.dry_run {
            obj
        } else {
            let stored = self.state.commit(self.changes, key, obj, old, origin);
            if self.resource == crd_resource() {
                match self.state.register_crd(self.changes, &stored) {
                    Ok(established) => established,
                    Err(message) => return self.invalid(&name, &message),
                }
            } else {
                stored
            }
        };
        let mut response = super::json_response(code, &stored);
        if self.params.field_validation != "Ignore" {
            for path in pruned {
                let warning = format!("299 - \"unknown field \\\"{path}\\\"\"");
                if let Ok(value) = header::HeaderValue::from_str(&warning) {
                    response.headers_mut().append(header::WARNING, value);
                }
            }
        }
        response
    }

    fn not_found(&self, name: &str) -> Response {
        status_response(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("{} \"{name}\" not found", self.t.group_resource()),
            Some(details(self.t, Some(name))),
        )
    }

    fn conflict(&self, name: &str, why: &str) -> Response {
        status_response(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                self.t.group_resource()
            ),
            Some(details(self.t, Some(name))),
        )
    }

    /// 422 Invalid, named as the real server names it:
    /// `PinnedRepository.tagpin.dev "x" is invalid: spec.url: Required value`.
    fn invalid(&self, name: &str, message: &str) -> Response {
        let qualified_kind = if self.t.group.is_empty() {
            self.t.kind.to_string()
        } else {
            format!("{}.{}", self.t.kind, self.t.group)
        };
        let mut status_details = details(self.t, Some(name));
        status_details.kind = Some(self.t.kind.to_string());
        status_details.causes = Some(vec![meta::StatusCause {
            message: Some(message.to_string()),
            reason: Some("FieldValueInvalid".to_string()),
            ..Default::default()
        }]);
        status_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            &format!("{qualified_kind} \"{name}\" is invalid: {message}"),
            Some(status_details),
        )
    }
}

/// Five characters from the alphabet the real server uses for
/// `generateName` suffixes (no vowels, no look-alikes).
fn generated_suffix(seed: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u64),
    );
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize];
            n /= ALPHABET.len() as u64;
            char::from(c)
        })
        .collect()
}

/// Removes from `target` what the manager applied last time (`last`) and
/// no longer applies (`now`): its fields, recursively through maps. Name,
/// namespace and type are never removed.
fn remove_unapplied(target: &mut Value, last: &Value, now: &Value) {
    let (Some(target_map), Some(last_map)) = (target.as_object_mut(), last.as_object()) else {
        return;
    };
    for (key, last_value) in last_map {
        match now.get(key) {
            None => {
                if !matches!(key.as_str(), "apiVersion" | "kind" | "name" | "namespace") {
                    target_map.remove(key);
                }
            }
            Some(now_value) if last_value.is_object() && now_value.is_object() => {
                if let Some(sub) = target_map.get_mut(key) {
                    remove_unapplied(sub, last_value, now_value);
                }
            }
            Some(_) => {}
        }
    }
}

/// Sets what the manager applies: maps merge, anything else (lists
/// included) is replaced; `null` removes the field.
fn merge_applied(target: &mut Value, applied: &Value) {
    let Some(applied_map) = applied.as_object() else {
        *target = applied.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(target_map) = target.as_object_mut() else {
        return;
    };
    for (key, value) in applied_map {
        if value.is_null() {
            target_map.remove(key);
        } else if value.is_object() && target_map.get(key).is_some_and(Value::is_object) {
            if let Some(sub) = target_map.get_mut(key) {
                merge_applied(sub, value);
            }
        } else {
            target_map.insert(key.clone(), value.clone());
        }
    }
}
