//! The shape of `tagpin.yaml`, derived with serde: what the file may say, before any rule about
//! what it means.
//!
//! Plain serde stops at the first error, and `tagpin.yaml` wants every problem listed at once,
//! so every value is read through [`Field`]: a node of the wrong type is kept, with what was
//! found, instead of failing the whole document; and every mapping through [`Known`], which
//! keeps the keys its struct does not declare instead of refusing them. Validation
//! (`super::validate`) then reports both with their field paths, together with the rules about
//! meaning. Keys are written as in the file (snake_case), so the same structs give the spec of
//! the `PinnedRepository` resource: its schema is derived from them ([`schemars::JsonSchema`],
//! read by `crate::operator::crd`), and its spec is read back through them and validated by
//! the same code.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::Deserialize;
use serde_yaml::{Mapping, Value};

use super::choices::{Grouping, NotifyKind, Order, SigningFormat, WriteMode};

/// One node of the file, read as `T` or kept as found.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Field<T> {
    /// The key is not written.
    #[default]
    Absent,
    /// Written with no value (`key:` or `key: ~`).
    Null,
    Ok(T),
    /// Not a `T`: the node as found and serde's reason. The reason may quote the value, so
    /// messages describe `found` instead (a pasted secret must never be echoed).
    Wrong {
        found: Value,
        error: String,
    },
}

impl<T> Field<T> {
    /// Whether the key is written at all, even with no value.
    pub fn is_written(&self) -> bool {
        !matches!(self, Field::Absent)
    }

    /// Whether the key is written with a value (right or wrong).
    pub fn is_set(&self) -> bool {
        matches!(self, Field::Ok(_) | Field::Wrong { .. })
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Only a node the YAML parser cannot read fails here; anything it can read is kept.
        let found = Value::deserialize(deserializer)?;
        match found {
            Value::Null => Ok(Field::Null),
            // serde_yaml would read through a tag (`!secret x` as the string `x`); the file
            // uses none, so a tag is a mistake worth naming rather than ignoring.
            Value::Tagged(_) => Ok(Field::Wrong {
                found,
                error: "a tagged value".to_string(),
            }),
            _ => match T::deserialize(&found) {
                Ok(value) => Ok(Field::Ok(value)),
                Err(error) => Ok(Field::Wrong {
                    error: error.to_string(),
                    found,
                }),
            },
        }
    }
}

/// A mapping read as the struct `T`, with the keys `T` does not declare set aside in
/// `unknown` (in file order) instead of refused, so that each can be reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Known<T> {
    pub value: T,
    pub unknown: Vec<Value>,
}

impl<T: DeserializeOwned> Known<T> {
    /// The keys `T` declares, in declaration order.
    pub fn keys(&self) -> &'static [&'static str] {
        names_of::<T>()
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Known<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Value::Mapping(mapping) = Value::deserialize(deserializer)? else {
            return Err(de::Error::custom("expected a mapping"));
        };
        let keys = names_of::<T>();
        let (known, unknown): (Mapping, Mapping) = mapping
            .into_iter()
            .partition(|(key, _)| key.as_str().is_some_and(|key| keys.contains(&key)));
        // Every field of `T` is a `Field`, so reading the known keys cannot fail.
        let value = T::deserialize(Value::Mapping(known)).map_err(de::Error::custom)?;
        Ok(Known {
            value,
            unknown: unknown.into_iter().map(|(key, _)| key).collect(),
        })
    }
}

/// A mapping of `T`'s keys.
pub type Section<T> = Field<Known<T>>;

/// A list whose items are each kept or refused on their own.
pub type List<T> = Field<Vec<Field<T>>>;

/// In a schema a field is what it holds: the wrapper only changes how mistakes are reported.
impl<T: JsonSchema> JsonSchema for Field<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }
}

/// A mapping's schema is its struct's: the unknown keys it sets aside are refused by the API
/// server (strict field validation) before validation could report them.
impl<T: JsonSchema> JsonSchema for Known<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }
}

/// The keys of a struct, or the names of an enum's variants, as its derived `Deserialize`
/// declares them (after `rename`). serde hands them to the deserializer, so one that only
/// records them and stops can read them without any input. A struct using
/// `#[serde(flatten)]` would ask for a map instead and have none: the raw structs use none.
pub fn names_of<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Names<'a>(&'a mut &'static [&'static str]);

    impl<'de> Deserializer<'de> for Names<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("neither a struct nor an enum"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("names read"))
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _: &'static str,
            variants: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = variants;
            Err(de::Error::custom("names read"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
            identifier ignored_any
        }
    }

    let mut names: &'static [&'static str] = &[];
    // The error is the point: it stops `T` once the names are read.
    let _ = T::deserialize(Names(&mut names));
    names
}

/// The whole file. Fields are in the order the file documents them; unknown keys are named
/// with this list.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawConfig {
    // Rules the schema can hold are also written here, so that the API server refuses a
    // resource that breaks them at `kubectl apply`; validation checks them all the same.
    pub repository: Section<RawRepository>,
    pub author: Section<RawAuthor>,
    pub paths: List<String>,
    pub include: List<String>,
    pub exclude: List<String>,
    pub images: Section<RawImages>,
    pub registries: Section<RawRegistries>,
    pub mode: Field<WriteMode>,
    pub commit_message: Field<String>,
    pub pull_request: Section<RawPullRequest>,
    pub forge: Section<RawForge>,
    pub verify: Section<RawVerify>,
    pub promotion: Section<RawPromotion>,
    pub helm: Section<RawHelm>,
    /// Where the events of a delivery are told (Slack, Microsoft Teams, any webhook).
    pub notifications: List<Known<RawNotification>>,
    /// Only in a `PinnedRepository`: the Secret of its namespace whose keys the `*_env` fields
    /// and `repository.auth.ssh_key_file` name, in place of environment variables and files.
    pub secret_ref: Section<RawLocalRef>,
    /// Only in a `PinnedRepository`: the ServiceAccount of its namespace whose rights every
    /// read of the cluster for its verification and promotions has (the operator impersonates
    /// it), in place of `tagpin operator --default-service-account`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub service_account_name: Field<String>,
}

/// `helm:`: which files hold Helm values beyond the usual names, and where a digest goes in an
/// image block without a digest key.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawHelm {
    pub values_files: List<String>,
    pub digest: Field<crate::manifest::DigestMode>,
}

/// One `notifications` entry: `kind`, where its URL (and a webhook's signing key) is read,
/// which `events` and, optionally, which `stages`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawNotification {
    pub kind: Field<NotifyKind>,
    /// A file's: the environment variable holding the URL.
    pub url_env: Field<String>,
    /// Only in a `PinnedRepository`: the key of the Secret `secret_ref` holding the URL.
    pub url_secret_key: Field<String>,
    /// A file's, `kind: webhook`: the environment variable holding the HMAC key.
    pub secret_env: Field<String>,
    /// Only in a `PinnedRepository`, `kind: webhook`: the key of the Secret `secret_ref`
    /// holding the HMAC key.
    pub secret_key: Field<String>,
    pub events: List<String>,
    pub stages: List<String>,
}

/// A Secret of the resource's own namespace, by name.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawLocalRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: Field<String>,
}

/// One key of a Secret of the resource's own namespace.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawSecretKeyRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: Field<String>,
    /// Default `kubeconfig`.
    pub key: Field<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawRepository {
    #[schemars(length(min = 1))]
    pub url: Field<String>,
    pub branch: Field<String>,
    pub auth: Section<RawGitAuth>,
    pub cache_dir: Field<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawGitAuth {
    pub token_env: Field<String>,
    pub username: Field<String>,
    pub ssh_key_file: Field<String>,
    pub passphrase_env: Field<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawAuthor {
    pub name: Field<String>,
    pub email: Field<String>,
    pub signing: Section<RawSigning>,
}

/// `author.signing`: the key every commit tagpin writes is signed with.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawSigning {
    pub format: Field<SigningFormat>,
    pub key_file: Field<String>,
    pub key_env: Field<String>,
    pub passphrase_env: Field<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawImages {
    pub manage: List<String>,
    pub ignore: List<String>,
    pub policies: List<Known<RawPolicy>>,
    pub signatures: List<Known<RawSignature>>,
    pub minimum_age: List<Known<RawMinimumAge>>,
    pub provenance: List<Known<RawProvenance>>,
}

/// One `images.provenance` entry: `match`, the builder and source an SLSA provenance
/// attestation must name, and who may sign it (`keys` and/or `keyless`, as for signatures).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawProvenance {
    #[serde(rename = "match")]
    pub matches: Field<String>,
    pub builder_id: Field<String>,
    pub source_repository: Field<String>,
    pub source_ref: Field<String>,
    pub keys: List<String>,
    pub keyless: List<Known<RawKeyless>>,
    pub trusted_root: Field<String>,
}

/// One `images.minimum_age` entry: `match` and `age` (`24h`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawMinimumAge {
    #[serde(rename = "match")]
    pub matches: Field<String>,
    pub age: Field<RawDuration>,
}

/// One `images.signatures` entry: `match`, and `keys`, `keyless` and/or `notation`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawSignature {
    #[serde(rename = "match")]
    pub matches: Field<String>,
    pub keys: List<String>,
    pub keyless: List<Known<RawKeyless>>,
    pub trusted_root: Field<String>,
    pub notation: Section<RawNotation>,
}

/// Notation signers of an `images.signatures` entry: `trust_store` (PEM CA certificate
/// files) and `identities` (trust policy subjects, or `*`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawNotation {
    pub trust_store: List<String>,
    pub identities: List<String>,
}

/// One keyless identity: `issuer` and `subject` (a regex).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawKeyless {
    pub issuer: Field<String>,
    pub subject: Field<String>,
}

/// One `images.policies` entry: `match` and at most one of `digest`, `semver`, `pattern`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawPolicy {
    #[serde(rename = "match")]
    pub matches: Field<String>,
    pub digest: Field<bool>,
    pub semver: Field<String>,
    pub pattern: Field<String>,
    pub extract: Field<String>,
    pub order: Field<Order>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawRegistries {
    pub insecure: List<String>,
    pub ca_files: List<String>,
    pub docker_config: Field<String>,
    #[schemars(range(min = 1, max = 256))]
    pub concurrency: Field<u64>,
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: Field<u64>,
    #[schemars(range(min = 1, max = 3600))]
    pub budget_seconds: Field<u64>,
    /// Only in a `PinnedRepository`: a `kubernetes.io/dockerconfigjson` Secret of its
    /// namespace, in place of `docker_config`.
    pub docker_config_secret_ref: Section<RawLocalRef>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawPullRequest {
    pub grouping: Field<Grouping>,
    pub title: Field<String>,
    pub labels: List<String>,
    pub branch_prefix: Field<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawForge {
    pub kind: Field<String>,
    pub api_url: Field<String>,
    pub owner: Field<String>,
    pub repo: Field<String>,
    pub project: Field<String>,
    /// Bitbucket Cloud's workspace (`kind: bitbucket`).
    pub workspace: Field<String>,
    pub token_env: Field<String>,
    pub login: Field<String>,
    /// Bitbucket Cloud: the variable holding an app password's username.
    pub username_env: Field<String>,
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: Field<u64>,
    /// GitHub only: commits made through the Git Data API, which GitHub signs.
    pub api_commits: Field<bool>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawVerify {
    pub default_namespace: Field<String>,
    pub name_prefix: Field<String>,
    pub name_suffix: Field<String>,
    pub context: Field<String>,
    pub gitops: Section<RawGitOps>,
    pub on_failure: Field<super::choices::OnFailure>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawGitOps {
    pub applications: List<String>,
    pub kustomizations: List<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawPromotion {
    pub stages: List<Known<RawStage>>,
    /// Public keys (SSH or OpenPGP) one of which must have signed the commit that pinned a
    /// stage's digests before they are promoted from it.
    pub require_signed_by: List<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawStage {
    pub name: Field<String>,
    pub paths: List<String>,
    pub cluster: Section<RawCluster>,
    pub soak: Field<RawDuration>,
    pub soak_restarts: Field<u64>,
    pub mode: Field<WriteMode>,
    pub on_failure: Field<super::choices::OnFailure>,
}

/// A stage's `cluster`: at most one of its keys (`kubeconfig` may take a `context`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RawCluster {
    pub context: Field<String>,
    pub kubeconfig: Field<String>,
    pub in_cluster: Field<bool>,
    /// Only in a `PinnedRepository`: a kubeconfig held in a Secret of its namespace, in place
    /// of `kubeconfig` and `context`.
    pub kubeconfig_secret_ref: Section<RawSecretKeyRef>,
}

/// A duration as written: whole seconds, or text like `90s`, `10m`, `1h`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum RawDuration {
    Seconds(u64),
    Text(String),
}

/// Kubernetes' own spelling of "a number or a string": a structural schema allows no `anyOf`
/// of types.
impl JsonSchema for RawDuration {
    fn schema_name() -> Cow<'static, str> {
        "RawDuration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schemars::json_schema!({
            "description": "Whole seconds, or text like 90s, 10m, 1h.",
            "x-kubernetes-int-or-string": true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_from_the_derived_deserialize() {
        assert_eq!(names_of::<RawAuthor>(), ["name", "email", "signing"]);
        assert_eq!(names_of::<RawPolicy>()[0], "match");
        assert_eq!(names_of::<WriteMode>(), ["commit", "pull-request"]);
        assert!(names_of::<String>().is_empty());
    }

    #[test]
    fn a_wrong_node_is_kept_and_the_rest_still_read() {
        let raw: Section<RawAuthor> =
            serde_yaml::from_str("{name: [a], email: e@x, colour: blue, 7: x}").unwrap();
        let Field::Ok(author) = raw else {
            panic!("{raw:?}")
        };
        assert!(matches!(
            &author.value.name,
            Field::Wrong {
                found: Value::Sequence(_),
                ..
            }
        ));
        assert_eq!(author.value.email, Field::Ok("e@x".to_string()));
        assert_eq!(author.unknown, [Value::from("colour"), Value::from(7)]);
    }
}
