//! Custom resources registered from a CustomResourceDefinition, as the real
//! API server's apiextensions part serves them: the CRD's `openAPIV3Schema`
//! checks every stored object (with `nullable` honoured) and prunes the
//! fields it does not declare, unless `x-kubernetes-preserve-unknown-fields`
//! keeps them.

use serde_json::{json, Map, Value};

use super::ResourceType;

/// The compiled schema of one served CRD version.
pub struct CrdSchema {
    /// The `openAPIV3Schema` as the CRD states it, for pruning.
    pub source: Value,
    validator: jsonschema::Validator,
}

impl CrdSchema {
    pub fn new(source: Value) -> Result<CrdSchema, String> {
        let validator = jsonschema::validator_for(&as_json_schema(&source))
            .map_err(|e| format!("spec.versions[].schema.openAPIV3Schema: {e}"))?;
        Ok(CrdSchema { source, validator })
    }

    /// Prunes what the schema does not declare (returning the pruned paths, for
    /// the `Warning` header or a strict refusal) and checks what is left.
    /// `apiVersion`, `kind` and `metadata` are never pruned: the real server
    /// keeps them whatever the schema says.
    pub fn check(&self, obj: &mut Value) -> Result<Vec<String>, String> {
        let mut pruned = Vec::new();
        if let (Some(map), Some(props)) = (obj.as_object_mut(), self.source.get("properties")) {
            for (key, value) in map.iter_mut() {
                if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(schema) = props.get(key) {
                    prune(value, schema, key, &mut pruned);
                }
            }
            if self.source["x-kubernetes-preserve-unknown-fields"] != json!(true) {
                let unknown: Vec<String> = map
                    .keys()
                    .filter(|k| {
                        !matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
                            && props.get(k.as_str()).is_none()
                    })
                    .cloned()
                    .collect();
                for key in unknown {
                    map.remove(&key);
                    pruned.push(key);
                }
            }
        }
        let problems: Vec<String> = self
            .validator
            .iter_errors(obj)
            .map(|e| match e.instance_path().as_str() {
                "" => e.to_string(),
                at => format!("{}: {e}", at.trim_start_matches('/').replace('/', ".")),
            })
            .collect();
        if problems.is_empty() {
            Ok(pruned)
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Checks `object` as the API server checks a custom resource of `crd`'s first version: with
/// the same compiled schema (`nullable` honoured), after pruning what it does not declare.
/// For tests of a manifest against a CRD without a server; the problems when it is refused.
pub fn check_custom_resource(crd: &Value, object: &Value) -> Result<(), String> {
    let schema = CrdSchema::new(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone())?;
    schema.check(&mut object.clone()).map(drop)
}

/// Removes, below `value`, the object fields `schema` does not declare.
fn prune(value: &mut Value, schema: &Value, path: &str, pruned: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == json!(true)
        && schema.get("properties").is_none()
        && schema.get("additionalProperties").is_none()
    {
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                let keep_unknown = schema["x-kubernetes-preserve-unknown-fields"] == json!(true);
                let keys: Vec<String> = map.keys().cloned().collect();
                for key in keys {
                    let at = format!("{path}.{key}");
                    match props.get(&key) {
                        Some(sub) => {
                            if let Some(v) = map.get_mut(&key) {
                                prune(v, sub, &at, pruned);
                            }
                        }
                        None if keep_unknown => {}
                        None => {
                            map.remove(&key);
                            pruned.push(at);
                        }
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for (key, v) in map.iter_mut() {
                    prune(v, additional, &format!("{path}.{key}"), pruned);
                }
            } else if schema.get("type") == Some(&json!("object")) {
                // An object schema with neither properties nor
                // additionalProperties holds nothing: the real server prunes
                // every field (unless preserve-unknown-fields, handled above).
                for key in map.keys().cloned().collect::<Vec<_>>() {
                    map.remove(&key);
                    pruned.push(format!("{path}.{key}"));
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item, item_schema, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

/// The OpenAPI v3 schema as JSON Schema: `nullable: true` becomes a `null`
/// alternative of the type, and `x-kubernetes-int-or-string` an integer or a
/// string; the other `x-kubernetes-*` keys mean nothing to a JSON Schema
/// validator and are ignored by it.
fn as_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out: Map<String, Value> = map
                .iter()
                .map(|(k, v)| {
                    let converted = match k.as_str() {
                        // Maps of schemas.
                        "properties" | "patternProperties" | "definitions" => match v {
                            Value::Object(props) => Value::Object(
                                props
                                    .iter()
                                    .map(|(name, s)| (name.clone(), as_json_schema(s)))
                                    .collect(),
                            ),
                            other => other.clone(),
                        },
                        // Values that are data, not schemas.
                        "enum" | "default" | "example" | "required" => v.clone(),
                        _ => as_json_schema(v),
                    };
                    (k.clone(), converted)
                })
                .collect();
            if map.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
                out.remove("type");
                out.insert("type".into(), json!(["integer", "string"]));
            }
            if map.get("nullable") == Some(&json!(true)) {
                match out.get("type").cloned() {
                    Some(Value::String(t)) => {
                        out.insert("type".into(), json!([t, "null"]));
                    }
                    Some(Value::Array(mut types)) => {
                        types.push(json!("null"));
                        out.insert("type".into(), Value::Array(types));
                    }
                    _ => {}
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(as_json_schema).collect()),
        other => other.clone(),
    }
}

/// What a CRD registers: the one served version's type. Errors name the
/// field, as the real server's validation of a CRD does.
pub fn resource_type(crd: &Value) -> Result<ResourceType, String> {
    let spec = &crd["spec"];
    let text = |v: &Value, at: &str| -> Result<&'static str, String> {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map(leak)
            .ok_or_else(|| format!("spec.{at}: Required value"))
    };
    let group = text(&spec["group"], "group")?;
    let names = &spec["names"];
    let plural = text(&names["plural"], "names.plural")?;
    let kind = text(&names["kind"], "names.kind")?;
    let singular = match names["singular"].as_str() {
        Some(s) if !s.is_empty() => leak(s),
        _ => leak(&kind.to_ascii_lowercase()),
    };
    let crd_name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if crd_name != format!("{plural}.{group}") {
        return Err(format!(
            "metadata.name: Invalid value: {crd_name:?}: must be spec.names.plural+\".\"+spec.group"
        ));
    }
    let short_names: Vec<&'static str> = names["shortNames"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(leak).collect())
        .unwrap_or_default();
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            return Err(format!(
                "spec.scope: Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
            ))
        }
    };
    let served: Vec<&Value> = spec["versions"]
        .as_array()
        .map(|v| v.iter().filter(|v| v["served"] == json!(true)).collect())
        .unwrap_or_default();
    let version = match served.as_slice() {
        [one] => *one,
        [] => return Err("spec.versions: Invalid value: no version is served".to_string()),
        _ => {
            return Err(
                "this test server serves one version per CRD (it has no conversion)".to_string(),
            )
        }
    };
    let version_name = text(&version["name"], "versions[].name")?;
    let schema = version["schema"]["openAPIV3Schema"].clone();
    if !schema.is_object() {
        return Err(format!(
            "spec.versions[{version_name}].schema.openAPIV3Schema: Required value: schemas are required"
        ));
    }
    let schema: &'static CrdSchema = Box::leak(Box::new(CrdSchema::new(schema)?));
    Ok(ResourceType {
        group,
        version: version_name,
        kind,
        plural,
        singular,
        short_names: Box::leak(short_names.into_boxed_slice()),
        field_labels: &[],
        has_generation: true,
        normalize: super::metadata_only,
        namespaced,
        status_subresource: version["subresources"]["status"].is_object(),
        schema: Some(schema),
    })
}

/// Registered types live as long as the test binary: their names are
/// leaked, a few bytes per registration.
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

/// The status the real server gives a CRD it accepted.
pub fn established_status(crd: &Value, now: &str) -> Value {
    let condition = |type_: &str, reason: &str, message: &str| {
        json!({
            "type": type_,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        })
    };
    json!({
        "acceptedNames": crd["spec"]["names"],
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": crd["spec"]["versions"]
            .as_array()
            .map(|vs| vs.iter().filter(|v| v["storage"] == json!(true)).map(|v| v["name"].clone()).collect::<Vec<_>>())
            .unwrap_or_default(),
    })
}
