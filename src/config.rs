//! The `tagpin.yaml` configuration: read once, validated once, then trusted everywhere.
//!
//! The file is read in two steps. serde derives its shape (`config/raw.rs`): every value
//! through a wrapper that keeps a node of the wrong type, and every mapping through one that
//! keeps the keys it does not know, so nothing stops at the first mistake. Validation
//! (`config/validate.rs`) then turns that raw value into the trusted [`Config`], reporting
//! *every* problem, of shape or of meaning, with its field path (`pull_request.grouping:
//! expected one of single, per-image`); unknown keys (typos) are errors rather than silently
//! ignored settings. Each problem whose field is in the file is then placed by the scanner's
//! position-keeping YAML tree (`tagpin.yaml:7:1: mode: …`), so an editor can jump to it.
//! Secrets never live here: the file names environment variables or files that hold them.

mod choices;
mod model;
mod raw;
mod validate;

use std::path::{Path, PathBuf};

use crate::manifest::yaml::{self, Document};

pub use model::*;

/// Every problem found in a configuration file, one per line, each with its field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: invalid configuration:\n{}", file.display(), problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
pub struct ConfigError {
    pub file: PathBuf,
    pub problems: Vec<String>,
}

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_path_buf(),
            problems: vec![format!("cannot read: {e}")],
        })?;
        Config::parse(&text, path)
    }

    /// Parses and validates configuration text; `file` only names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
        let raw: raw::Section<raw::RawConfig> =
            serde_yaml::from_str(text).map_err(|e| ConfigError {
                file: file.to_path_buf(),
                problems: vec![match e.location() {
                    Some(l) => format!("line {}: not valid YAML: {e}", l.line()),
                    None => format!("not valid YAML: {e}"),
                }],
            })?;
        validate::config(
            &raw,
            Origin::File,
            Some(file.parent().unwrap_or(Path::new(""))),
        )
        .map_err(|problems| ConfigError {
            file: file.to_path_buf(),
            problems: place(text, file, problems),
        })
    }

    /// Validates a `PinnedRepository`'s spec, as JSON from the API server, with the same rules
    /// and messages as a file; `object` (`namespace/name`) names it in errors, and each
    /// problem's path starts with `spec.`.
    pub fn from_resource_spec(
        spec: &serde_json::Value,
        object: &str,
    ) -> Result<Config, ConfigError> {
        let error = |problems| ConfigError {
            file: PathBuf::from(object),
            problems,
        };
        let raw: raw::Section<raw::RawConfig> = serde_yaml::to_value(spec)
            .and_then(serde_yaml::from_value)
            .map_err(|e| error(vec![format!("spec: {e}")]))?;
        validate::config(&raw, Origin::Resource, None).map_err(|problems| {
            error(
                problems
                    .into_iter()
                    .map(
                        |Problem { path, message }| match path.strip_prefix("(top level)") {
                            Some(rest) => format!("spec{rest}: {message}"),
                            None => format!("spec.{path}: {message}"),
                        },
                    )
                    .collect(),
            )
        })
    }
}

/// The JSON schema of the file's shape: the spec of a `PinnedRepository`.
///
/// Every key is optional in the raw types (so that a missing one is reported with the others);
/// the two the API server can refuse by itself at `kubectl apply` are marked required here.
pub(crate) fn spec_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = <raw::RawConfig as schemars::JsonSchema>::json_schema(generator);
    schema.insert("required".into(), serde_json::json!(["repository"]));
    if let Some(repository) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("repository"))
        .and_then(|r| r.as_object_mut())
    {
        repository.insert("required".into(), serde_json::json!(["url"]));
    }
    schema
}

/// A secret the configuration names by its environment variable is not there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EnvError {
    /// Unset, blank, or not Unicode: told apart by nobody, and `VarError::NotUnicode` would
    /// carry the value, a secret, so nothing of it is kept.
    #[error("environment variable {name} is not set or empty")]
    Missing { name: String },
}

/// Reads a secret from an environment variable, with an error that names the variable only.
pub(crate) fn read_env(name: &str) -> Result<String, EnvError> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(EnvError::Missing {
            name: name.to_string(),
        }),
    }
}

/// Writes each problem as `path: message`, prefixed with `file:line:column: ` where its field is
/// in the file (a missing field has no position).
fn place(text: &str, file: &Path, problems: Vec<Problem>) -> Vec<String> {
    let document = yaml::documents(file, text).next().and_then(Result::ok);
    problems
        .into_iter()
        .map(|Problem { path, message }| {
            let position = document
                .as_ref()
                .and_then(|document| field_position(document, &path));
            match position {
                Some((line, column)) => {
                    format!("{}:{line}:{column}: {path}: {message}", file.display())
                }
                None => format!("{path}: {message}"),
            }
        })
        .collect()
}

/// Line and column of the field at a validator path: of the key for a mapping entry, of the
/// item for a list index, of the document for `(top level)` (which also starts the paths of
/// unknown top-level keys).
fn field_position(document: &Document<'_>, path: &str) -> Option<(usize, usize)> {
    let mut value = document.root()?;
    let mut field = value;
    let path = path.strip_prefix("(top level)").unwrap_or(path);
    let path = path.strip_prefix('.').unwrap_or(path);
    if !path.is_empty() {
        for segment in path.split('.') {
            let mut parts = segment.split('[');
            let (key, found) = document.get_entry(value, parts.next()?).ok()??;
            (field, value) = (key, found);
            for index in parts {
                let index: usize = index.strip_suffix(']')?.parse().ok()?;
                let item = *document.items(value).get(index)?;
                (field, value) = (item, item);
            }
        }
    }
    let node = document.node(field)?;
    Some((node.line, node.column))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("tagpin.yaml"))
    }

    /// `text` read as the file `tagpin.yaml` of `dir`, where the files it names are.
    fn parse_in(dir: &Path, text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, &dir.join("tagpin.yaml"))
    }

    #[test]
    fn a_minimal_config_gets_the_documented_defaults() {
        let c = parse("repository:\n  url: https://example.com/acme/gitops.git\n").unwrap();
        assert_eq!(c.repository.branch, "main");
        assert_eq!(c.repository.auth, GitAuth::None);
        assert_eq!(c.mode, WriteMode::Commit);
        assert_eq!(c.paths, vec!["."]);
        assert_eq!(c.pull_request.grouping, Grouping::Single);
        assert_eq!(c.pull_request.branch_prefix, "tagpin/");
        assert_eq!(
            c.registries.concurrency,
            crate::registry::DEFAULT_CONCURRENCY_PER_HOST
        );
        assert!(c.forge.is_none());
    }

    #[test]
    fn helm_settings_default_to_digests_in_tags_and_the_usual_values_file_names() {
        let c = parse("repository:\n  url: https://example.com/acme/gitops.git\n").unwrap();
        assert_eq!(c.helm, Helm::default());
        assert_eq!(c.helm.digest, crate::manifest::DigestMode::Tag);
        let c = parse(
            "repository:\n  url: https://example.com/acme/gitops.git\ninclude: [\"apps/**/*.yaml\"]\nhelm:\n  values_files: [\"envs/*/overrides.yaml\"]\n  digest: key\n",
        )
        .unwrap();
        assert_eq!(c.helm.values_files, ["envs/*/overrides.yaml"]);
        assert_eq!(c.helm.digest, crate::manifest::DigestMode::Key);
        assert_eq!(
            c.include_globs(),
            ["apps/**/*.yaml", "envs/*/overrides.yaml"]
        );
        let options = c.helm.options().unwrap();
        assert!(options.is_values_file(Path::new("envs/prod/overrides.yaml")));
    }

    #[test]
    fn helm_problems_are_named_by_field_path_and_position() {
        let err = parse(
            "repository:\n  url: https://example.com/acme/gitops.git\nhelm:\n  values_files: [\"a/[b\"]\n  digest: sha\n  charts: true\n",
        )
        .unwrap_err();
        let text = err.to_string();
        assert_problems(
            &text,
            &[
                "tagpin.yaml:4:18: helm.values_files[0]: invalid glob",
                "tagpin.yaml:5:3: helm.digest: expected one of tag, key, found \"sha\"",
                "tagpin.yaml:6:3: helm.charts: unknown key (known: values_files, digest)",
            ],
        );
    }

    #[test]
    fn a_full_config_is_read_into_typed_fields() {
        let c = parse(
            r#"
repository:
  url: https://example.com/acme/gitops.git
  branch: production
  auth: {token_env: GIT_TOKEN}
author: {name: Bot, email: bot@example.com}
paths: [apps, clusters/prod]
exclude: ["**/secrets/**"]
images: {ignore: ["docker.io/library/postgres"]}
registries: {insecure: ["localhost:5000"], concurrency: 4, timeout_seconds: 10}
mode: pull-request
pull_request: {grouping: per-image, labels: [tagpin, deps], title: "Pin {images}"}
forge: {api_url: "https://ghe.example.com/api/v3", owner: acme, repo: gitops, token_env: GITHUB_TOKEN}
"#,
        )
        .unwrap();
        assert_eq!(
            c.repository.auth,
            GitAuth::Token {
                env: "GIT_TOKEN".into(),
                username: "x-access-token".into()
            }
        );
        assert_eq!(c.paths, vec!["apps", "clusters/prod"]);
        assert_eq!(c.mode, WriteMode::PullRequest);
        assert_eq!(c.pull_request.grouping, Grouping::PerImage);
        assert_eq!(c.registries.concurrency, 4);
        assert_eq!(c.forge.unwrap().api_url, "https://ghe.example.com/api/v3");
    }

    #[test]
    fn every_problem_is_reported_with_its_field_path() {
        let err = parse(
            r#"
repository:
  branch: "bad branch"
  auth: {token_env: ghp_abcdefghijklmnop}
paths: ["../outside", "/etc"]
mode: sometimes
registries: {concurrency: 0, insecure: localhost}
pull_request: {grouping: many, title: "Pin {what}"}
colour: blue
"#,
        )
        .unwrap_err();
        let text = err.to_string();
        assert_problems(
            &text,
            &[
                "repository.url: is required",
                "repository.branch: \"bad branch\" is not a valid branch name",
                "repository.auth.token_env: must name an environment variable",
                "paths[0]: \"../outside\" must be relative",
                "paths[1]: \"/etc\" must be relative",
                "mode: expected one of commit, pull-request, found \"sometimes\"",
                "registries.concurrency: expected a whole number from 1 to 256, found 0",
                "registries.insecure: expected a list of strings, found a string",
                "pull_request.grouping: expected one of single, per-image",
                "pull_request.title: unknown placeholder {what}",
                "colour: unknown key",
            ],
        );
        assert!(
            !text.contains("ghp_abcdefghijklmnop"),
            "a pasted secret was echoed:\n{text}"
        );
        assert!(
            text.starts_with("tagpin.yaml: invalid configuration:"),
            "{text}"
        );
    }

    #[test]
    fn problems_name_the_line_and_column_of_their_field() {
        let err = parse(concat!(
            "repository:\n",
            "  branch: \"bad branch\"\n",
            "paths: [apps, \"../outside\"]\n",
            "registries: {concurrency: 0}\n",
            "mode: sometimes\n",
            "colour: blue\n",
        ))
        .unwrap_err();
        assert_eq!(
            err.problems,
            [
                "tagpin.yaml:6:1: (top level).colour: unknown key (known: repository, author, paths, include, exclude, images, registries, mode, commit_message, pull_request, forge, verify, promotion, helm, notifications)",
                "repository.url: is required",
                "tagpin.yaml:2:3: repository.branch: \"bad branch\" is not a valid branch name",
                "tagpin.yaml:3:15: paths[1]: \"../outside\" must be relative to the repository and stay inside it",
                "tagpin.yaml:4:14: registries.concurrency: expected a whole number from 1 to 256, found 0",
                "tagpin.yaml:5:1: mode: expected one of commit, pull-request, found \"sometimes\"",
            ]
        );
    }

    #[test]
    fn nested_keys_and_list_items_in_flow_style_are_placed() {
        let err = parse(concat!(
            "repository:\n",
            "  url: https://example.com/a.git\n",
            "  auth: {token_env: ghp_secret}\n",
            "images:\n",
            "  manage: [\"ok/*\", \"[bad\"]\n",
        ))
        .unwrap_err();
        let problems: Vec<&str> = err.problems.iter().map(String::as_str).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(
            problems[0],
            "tagpin.yaml:3:10: repository.auth.token_env: must name an environment variable (like GITHUB_TOKEN), not hold a secret"
        );
        assert!(
            problems[1].starts_with("tagpin.yaml:5:20: images.manage[1]: invalid glob"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_document_that_is_not_a_mapping_is_placed_at_its_start() {
        let err = parse("# tagpin\n- repository\n").unwrap_err();
        assert_eq!(
            err.problems,
            ["tagpin.yaml:2:1: (top level): expected a mapping, found a list"]
        );
    }

    #[test]
    fn gitops_objects_are_named_namespace_slash_name() {
        let c = parse(
            "repository: {url: /srv/git/gitops.git}\nverify:\n  gitops:\n    applications: [argocd/shop]\n    kustomizations: [flux-system/apps]\n",
        )
        .unwrap();
        assert_eq!(c.verify.gitops.applications[0].to_string(), "argocd/shop");
        assert_eq!(c.verify.gitops.kustomizations[0].name, "apps");
        assert!(parse("repository: {url: /srv/git/gitops.git}\n")
            .unwrap()
            .verify
            .gitops
            .is_empty());
        let err = parse(
            "repository: {url: /srv/git/gitops.git}\nverify: {gitops: {applications: [shop], flux: []}}\n",
        )
        .unwrap_err();
        let problems = err.problems.join("\n");
        assert_problems(
            &problems,
            &[
                "verify.gitops.applications[0]: expected namespace/name, found \"shop\"",
                "verify.gitops.flux: unknown key",
            ],
        );
    }

    #[test]
    fn image_policies_are_read_in_order_with_their_defaults() {
        let c = parse(concat!(
            "repository: {url: /srv/git/gitops.git}\n",
            "images:\n",
            "  policies:\n",
            "  - {match: ghcr.io/acme/job, pattern: '^build-(?P<n>[0-9]+)$', extract: '$n', order: numerical}\n",
            "  - {match: 'ghcr.io/acme/*', semver: '~1.4'}\n",
            "  - {match: nginx, digest: true}\n",
            "  - {match: 'quay.io/**', pattern: '^[0-9a-f]{7}$'}\n",
        ))
        .unwrap();
        let policies: Vec<(&str, &TagPolicy)> = c
            .images
            .policies
            .iter()
            .map(|rule| (rule.matches.as_str(), &rule.policy))
            .collect();
        assert_eq!(
            policies,
            [
                (
                    "ghcr.io/acme/job",
                    &TagPolicy::Pattern {
                        pattern: "^build-(?P<n>[0-9]+)$".into(),
                        extract: "$n".into(),
                        order: Order::Numerical
                    }
                ),
                (
                    "ghcr.io/acme/*",
                    &TagPolicy::Semver {
                        range: "~1.4".into()
                    }
                ),
                ("nginx", &TagPolicy::Digest),
                (
                    "quay.io/**",
                    &TagPolicy::Pattern {
                        pattern: "^[0-9a-f]{7}$".into(),
                        extract: "$0".into(),
                        order: Order::Alphabetical
                    }
                ),
            ]
        );
    }

    /// A PEM public key the verifier takes, written to `dir/name`.
    fn write_public_key(dir: &Path, name: &str) {
        let key = sigstore_crypto::KeyPair::generate_ecdsa_p256().unwrap();
        std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
        std::fs::write(dir.join(name), key.public_key_der().unwrap().to_pem()).unwrap();
    }

    #[test]
    fn image_signatures_read_keys_relative_to_the_file_and_keep_identities() {
        let dir = tempfile::tempdir().unwrap();
        write_public_key(dir.path(), "keys/release.pub");
        let c = parse_in(
            dir.path(),
            concat!(
                "repository: {url: /srv/git/gitops.git}\n",
                "images:\n",
                "  signatures:\n",
                "  - match: 'ghcr.io/acme/*'\n",
                "    keys: [keys/release.pub]\n",
                "    keyless:\n",
                "    - {issuer: 'https://token.actions.githubusercontent.com', subject: '^https://github\\.com/acme/.+$'}\n",
            ),
        )
        .unwrap();
        let [rule] = c.images.signatures.as_slice() else {
            panic!("one rule expected: {:?}", c.images.signatures);
        };
        assert_eq!(rule.matches, "ghcr.io/acme/*");
        assert_eq!(rule.keys.len(), 1);
        assert_eq!(rule.keys[0].path, "keys/release.pub");
        assert!(rule.keys[0].pem.starts_with("-----BEGIN PUBLIC KEY-----"));
        assert_eq!(
            rule.keyless,
            [KeylessIdentity {
                issuer: "https://token.actions.githubusercontent.com".into(),
                subject: "^https://github\\.com/acme/.+$".into(),
            }]
        );
        assert_eq!(rule.trusted_root, None);
    }

    #[test]
    fn invalid_image_signatures_are_named_by_field_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("not-a-key.pub"), "hello\n").unwrap();
        std::fs::write(dir.path().join("root.json"), "{}").unwrap();
        let err = parse_in(
            dir.path(),
            concat!(
                "repository: {url: /srv/git/gitops.git}\n",
                "images:\n",
                "  signatures:\n",
                "  - {match: a, keys: [missing.pub, not-a-key.pub]}\n",
                "  - {match: b}\n",
                "  - {match: c, keyless: [{issuer: x, subject: '(unclosed'}, {subject: y}]}\n",
                "  - {match: '[d', keys: [], trusted_root: root.json, colour: red}\n",
            ),
        )
        .unwrap_err();
        let problems = err.problems.join("\n");
        assert_problems(
            &problems,
            &[
                "images.signatures[0].keys[0]: cannot read missing.pub:",
                "images.signatures[0].keys[1]: not-a-key.pub: not a PEM public key (-----BEGIN PUBLIC KEY-----):",
                "images.signatures[1]: needs keys or keyless (who may sign the images it matches)",
                "images.signatures[2].keyless[0].subject: invalid regex:",
                "images.signatures[2].keyless[1].issuer: is required",
                "images.signatures[3].match: invalid glob",
                "images.signatures[3].trusted_root: root.json: not a Sigstore trusted_root.json:",
                "images.signatures[3].trusted_root: only applies to keyless signatures",
                "images.signatures[3].colour: unknown key",
            ],
        );
    }

    #[test]
    fn provenance_entries_read_builder_source_and_signers() {
        let dir = tempfile::tempdir().unwrap();
        write_public_key(dir.path(), "keys/ci.pub");
        let c = parse_in(
            dir.path(),
            concat!(
                "repository: {url: /srv/git/gitops.git}\n",
                "images:\n",
                "  provenance:\n",
                "  - match: 'ghcr.io/acme/*'\n",
                "    builder_id: 'https://github\\.com/acme/.+'\n",
                "    source_repository: https://github.com/acme/web\n",
                "    source_ref: 'refs/tags/v.+'\n",
                "    keys: [keys/ci.pub]\n",
            ),
        )
        .unwrap();
        let [rule] = c.images.provenance.as_slice() else {
            panic!("one rule expected: {:?}", c.images.provenance);
        };
        assert_eq!(rule.matches, "ghcr.io/acme/*");
        assert_eq!(rule.builder_id, "https://github\\.com/acme/.+");
        assert_eq!(rule.source_repository, "https://github.com/acme/web");
        assert_eq!(rule.source_ref.as_deref(), Some("refs/tags/v.+"));
        assert_eq!(rule.signers.matches, "ghcr.io/acme/*");
        assert_eq!(rule.signers.keys[0].path, "keys/ci.pub");
    }

    #[test]
    fn invalid_provenance_entries_are_named_by_field_path_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let err = parse_in(
            dir.path(),
            concat!(
                "repository: {url: /srv/git/gitops.git}\n",
                "images:\n",
                "  provenance:\n",
                "  - {match: a, source_repository: https://github.com/acme/web.git, keys: [missing.pub]}\n",
                "  - {match: b, builder_id: '(x', source_repository: r, source_ref: '[', keyless: [{issuer: i, subject: s}]}\n",
                "  - {match: c, builder_id: b, source_repository: r}\n",
            ),
        )
        .unwrap_err();
        let problems = err.problems.join("\n");
        assert_problems(
            &problems,
            &[
                "images.provenance[0].builder_id: is required",
                "images.provenance[0].source_repository: the repository's URI without a trailing / or .git",
                "images.provenance[0].keys[0]: cannot read missing.pub:",
                "images.provenance[1].builder_id: invalid regex:",
                "images.provenance[1].source_ref: invalid regex:",
                "images.provenance[2]: needs keys or keyless",
            ],
        );
    }

    #[test]
    fn minimum_ages_are_read_in_order_with_their_durations() {
        let c = parse(concat!(
            "repository: {url: /srv/git/gitops.git}\n",
            "images:\n",
            "  minimum_age:\n",
            "  - {match: 'ghcr.io/acme/hotfix', age: 0}\n",
            "  - {match: 'ghcr.io/acme/*', age: 24h}\n",
            "  - {match: nginx, age: 90}\n",
        ))
        .unwrap();
        let read: Vec<(&str, u64)> = c
            .images
            .minimum_age
            .iter()
            .map(|r| (r.matches.as_str(), r.age.as_secs()))
            .collect();
        assert_eq!(
            read,
            [
                ("ghcr.io/acme/hotfix", 0),
                ("ghcr.io/acme/*", 86_400),
                ("nginx", 90)
            ]
        );
        assert!(parse("repository: {url: /srv/git/gitops.git}\n")
            .unwrap()
            .images
            .minimum_age
            .is_empty());
    }

    #[test]
    fn invalid_minimum_ages_are_named_by_field_path() {
        let err = parse(concat!(
            "repository: {url: /srv/git/gitops.git}\n",
            "images:\n",
            "  minimum_age:\n",
            "  - {match: 'ghcr.io/acme/*'}\n",
            "  - {match: b, age: 1d}\n",
            "  - {age: 1h}\n",
            "  - {match: '[d', age: [1h], colour: red}\n",
            "  - just-a-string\n",
        ))
        .unwrap_err();
        let problems = err.problems.join("\n");
        assert_problems(
            &problems,
            &[
                "images.minimum_age[0].age: is required (like 24h)",
                "images.minimum_age[1].age: ",
                "images.minimum_age[2].match: is required",
                "images.minimum_age[3].match: invalid glob",
                "images.minimum_age[3].age: expected a duration like 90s, 10m or 1h",
                "images.minimum_age[3].colour: unknown key",
                "images.minimum_age[4]: ",
            ],
        );
        let wrong = parse("repository: {url: /srv/git/gitops.git}\nimages: {minimum_age: 24h}\n")
            .unwrap_err()
            .problems
            .join("\n");
        assert_problems(&wrong, &["images.minimum_age: "]);
    }

    #[test]
    fn invalid_image_policies_are_named_by_field_path_and_position() {
        let err = parse(concat!(
            "repository: {url: /srv/git/gitops.git}\n",
            "images:\n",
            "  policies:\n",
            "  - {match: a, semver: 'not a range'}\n",
            "  - {match: b, pattern: '^(unclosed'}\n",
            "  - {semver: '1', pattern: x}\n",
            "  - {match: c, semver: '^1', order: numerical}\n",
            "  - {match: d, pattern: x, order: newest}\n",
            "  - {match: '[e', digest: false, tags: 3}\n",
        ))
        .unwrap_err();
        let problems = err.problems.join("\n");
        assert_problems(
            &problems,
            &[
                "tagpin.yaml:4:16: images.policies[0].semver: invalid semver range:",
                "tagpin.yaml:5:16: images.policies[1].pattern: invalid regex: error: unclosed group",
                "images.policies[2].match: is required",
                "images.policies[2]: set one of digest, semver, pattern, not semver and pattern",
                "tagpin.yaml:7:30: images.policies[3].order: only applies to a pattern policy",
                "images.policies[4].order: expected one of numerical, alphabetical, found \"newest\"",
                "images.policies[5].match: invalid glob",
                "images.policies[5].digest: expected true",
                "images.policies[5].tags: unknown key",
            ],
        );
    }

    #[test]
    fn pull_request_mode_needs_a_forge() {
        let err =
            parse("repository: {url: /srv/git/gitops.git}\nmode: pull-request\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("forge: is required when mode is pull-request"),
            "{err}"
        );
    }

    #[test]
    fn a_token_is_never_configured_for_plain_http() {
        let err =
            parse("repository: {url: 'http://git.example.com/a.git', auth: {token_env: T}}\n")
                .unwrap_err();
        assert!(
            err.to_string().contains("never sent over plain http"),
            "{err}"
        );
        let loopback = "repository: {url: 'http://127.0.0.1:8080/a.git', auth: {token_env: T}}\n";
        assert!(parse(loopback).is_ok());
    }

    #[test]
    fn a_forge_login_is_read_for_tokens_that_cannot_ask_who_they_are() {
        let forge = forge_of(
            "{owner: acme, repo: gitops, token_env: GITHUB_TOKEN, login: 'tagpin-app[bot]'}",
        );
        assert_eq!(forge.login.as_deref(), Some("tagpin-app[bot]"));
        assert_eq!(
            forge_of("{owner: acme, repo: gitops, token_env: GITHUB_TOKEN}").login,
            None
        );
    }

    #[test]
    fn a_gitlab_forge_names_its_project_by_path() {
        let forge = forge_of("{kind: gitlab, api_url: 'https://gitlab.example.com/api/v4', project: group/sub/gitops, token_env: GITLAB_TOKEN}");
        assert_eq!(
            forge.kind,
            ForgeKind::GitLab {
                project: "group/sub/gitops".into()
            }
        );
        assert_eq!(forge.api_url, "https://gitlab.example.com/api/v4");
        assert_eq!(forge.token_env, "GITLAB_TOKEN");
        assert_eq!(
            forge_of("{kind: gitlab, project: '1234', token_env: GITLAB_TOKEN}").api_url,
            "https://gitlab.com/api/v4"
        );
    }

    #[test]
    fn a_bitbucket_forge_names_its_repository_by_workspace_and_slug() {
        let forge = forge_of("{kind: bitbucket, workspace: acme, repo: gitops, token_env: BITBUCKET_TOKEN, username_env: BITBUCKET_USERNAME}");
        assert_eq!(
            forge.kind,
            ForgeKind::Bitbucket {
                workspace: "acme".into(),
                repo: "gitops".into()
            }
        );
        assert_eq!(forge.api_url, "https://api.bitbucket.org/2.0");
        assert_eq!(forge.username_env.as_deref(), Some("BITBUCKET_USERNAME"));
        assert_forge_problems(
            "{kind: bitbucket, owner: acme, repo: 'my repo', token_env: BITBUCKET_TOKEN}",
            &[
                "forge.owner: is not Bitbucket's",
                "forge.workspace: is required",
                "forge.repo: \"my repo\" is not a Bitbucket slug",
            ],
        );
        // An app password's username is Bitbucket's alone.
        assert_forge_problems(
            "{owner: acme, repo: gitops, token_env: GITHUB_TOKEN, username_env: GH_USER, workspace: acme}",
            &[
                "forge.username_env: is for Bitbucket Cloud app passwords",
                "forge.workspace: is for Bitbucket Cloud",
            ],
        );
    }

    #[test]
    fn a_gitea_forge_names_its_repository_by_owner_and_repo_at_its_own_address() {
        let forge = forge_of("{kind: gitea, api_url: 'https://git.example.com/api/v1', owner: acme, repo: gitops, token_env: GITEA_TOKEN}");
        assert_eq!(
            forge.kind,
            ForgeKind::Gitea {
                owner: "acme".into(),
                repo: "gitops".into()
            }
        );
        assert_eq!(forge.api_url, "https://git.example.com/api/v1");
        assert_eq!(forge.token_env, "GITEA_TOKEN");
        // There is no one Gitea to assume, and a project is GitLab's word.
        assert_forge_problems(
            "{kind: gitea, project: acme/gitops, token_env: GITEA_TOKEN}",
            &[
                "forge.api_url: is required",
                "forge.project: is for GitLab",
                "forge.owner: is required",
            ],
        );
    }

    #[test]
    fn a_bitbucket_server_forge_names_its_repository_by_project_key_and_slug_at_its_own_address() {
        let forge = forge_of("{kind: bitbucket-server, api_url: 'https://bitbucket.example.com', project: ACME, repo: gitops, token_env: BITBUCKET_TOKEN}");
        assert_eq!(
            forge.kind,
            ForgeKind::BitbucketServer {
                project: "ACME".into(),
                repo: "gitops".into()
            }
        );
        assert_eq!(forge.api_url, "https://bitbucket.example.com");
        // There is no one Bitbucket to assume, and an owner is GitHub's and Gitea's word.
        assert_forge_problems(
            "{kind: bitbucket-server, owner: acme, project: 'AC/ME', token_env: BITBUCKET_TOKEN}",
            &[
                "forge.api_url: is required",
                "forge.owner: is for GitHub and Gitea",
                "is not a Bitbucket project key",
                "forge.repo: is required",
            ],
        );
        assert_forge_problems("{kind: bitbucket-server, api_url: 'https://bitbucket.example.com/rest/api/1.0', project: ACME, repo: gitops, token_env: T}", &["give the instance's base URL"]);
    }

    #[test]
    fn an_azure_devops_forge_names_project_and_repository_in_its_organization() {
        let forge = forge_of("{kind: azure-devops, api_url: 'https://dev.azure.com/acme', project: platform, repo: gitops, token_env: AZURE_DEVOPS_TOKEN}");
        assert_eq!(
            forge.kind,
            ForgeKind::AzureDevOps {
                project: "platform".into(),
                repo: "gitops".into()
            }
        );
        assert_eq!(forge.api_url, "https://dev.azure.com/acme");
        // The organization is not assumed, and an owner is GitHub's and Gitea's word.
        assert_forge_problems(
            "{kind: azure-devops, owner: acme, repo: gitops, token_env: AZURE_DEVOPS_TOKEN}",
            &[
                "forge.api_url: is required",
                "forge.owner: is for GitHub and Gitea",
                "forge.project: is required",
            ],
        );
    }

    /// The forge's own checks live with its adapter (`forge/settings.rs`), yet a problem they
    /// find is reported as every other: at the file, line and column of the key.
    #[test]
    fn a_forge_adapters_problem_names_the_file_the_line_and_the_key() {
        let text = "repository: {url: /srv/git/gitops.git}\n\
                    forge:\n  kind: bitbucket-server\n  api_url: 'https://bitbucket.example.com'\n  \
                    owner: acme\n  project: 'AC/ME'\n  repo: gitops\n  token_env: T\n";
        let err = Config::parse(text, Path::new("tagpin.yaml"))
            .unwrap_err()
            .to_string();
        assert_problems(
            &err,
            &[
                "tagpin.yaml:5:3: forge.owner: is for GitHub and Gitea",
                "tagpin.yaml:6:3: forge.project: \"AC/ME\" is not a Bitbucket project key",
            ],
        );
    }

    #[test]
    fn each_forge_is_told_the_keys_of_the_other_apart() {
        let problems = |forge: &str| {
            Config::parse(
                &format!("repository: {{url: /srv/git/gitops.git}}\nforge: {forge}\n"),
                Path::new("tagpin.yaml"),
            )
            .unwrap_err()
            .to_string()
        };
        let gitlab = problems("{kind: gitlab, owner: acme, repo: gitops, token_env: T}");
        assert_problems(
            &gitlab,
            &["forge.owner: is for GitHub", "forge.project: is required"],
        );
        let github = problems("{owner: acme, repo: gitops, project: acme/gitops, token_env: T}");
        assert_problems(&github, &["forge.project: is for GitLab"]);
        let path = problems("{kind: gitlab, project: 'acme/', token_env: T}");
        assert_problems(
            &path,
            &["forge.project: \"acme/\" is not a GitLab project path"],
        );
        let kind = problems("{kind: sourcehut, owner: acme, repo: gitops, token_env: T}");
        assert_problems(&kind, &["forge.kind: expected github, gitlab, gitea, bitbucket, bitbucket-server or azure-devops, found \"sourcehut\""]);
        let plain = problems(
            "{kind: gitlab, api_url: 'http://gitlab.example.com/api/v4', project: a/b, token_env: T}",
        );
        assert_problems(&plain, &["never sent over plain http"]);
    }

    #[test]
    fn the_forge_token_is_never_sent_over_plain_http_beyond_this_machine() {
        let text = "repository: {url: /srv/git/gitops.git}\n\
                    forge:\n  api_url: 'http://ghe.example.com/api/v3'\n  owner: acme\n  repo: gitops\n  token_env: GITHUB_TOKEN\n";
        let err = Config::parse(text, Path::new("tagpin.yaml")).unwrap_err();
        assert!(
            err.to_string().contains(
                "tagpin.yaml:3:3: forge.api_url: a token is never sent over plain http:// beyond this machine; use https://"
            ),
            "{err}"
        );
        // Loopback is this machine (a local GitHub for tests, or a proxy beside tagpin).
        for local in [
            "http://127.0.0.1:8080",
            "http://localhost:9000/api/v3",
            "http://[::1]:80",
        ] {
            let text = format!(
                "repository: {{url: /srv/git/gitops.git}}\nforge: {{api_url: '{local}', owner: acme, repo: gitops, token_env: GITHUB_TOKEN}}\n"
            );
            assert!(parse(&text).is_ok(), "{local}");
        }
        // The scheme is read as a URL reads it, whatever its case.
        let err =
            parse("repository: {url: 'HTTP://git.example.com/a.git', auth: {token_env: T}}\n")
                .unwrap_err();
        assert!(
            err.to_string().contains("never sent over plain http"),
            "{err}"
        );
    }

    #[test]
    fn yaml_syntax_errors_name_the_line() {
        let err = parse("repository:\n  url: [unclosed\n").unwrap_err();
        assert!(err.to_string().contains("line "), "{err}");
    }

    /// A repository with a forge, so stages promoted by pull request (the default) are valid.
    const PROMOTING: &str = concat!(
        "repository: {url: /srv/git/gitops.git}\n",
        "forge: {owner: acme, repo: gitops, token_env: GITHUB_TOKEN}\n",
    );

    /// The forge of a config that is a local repository and `forge: <forge>`.
    fn forge_of(forge: &str) -> Forge {
        parse(&format!(
            "repository: {{url: /srv/git/gitops.git}}\nforge: {forge}\n"
        ))
        .unwrap()
        .forge
        .unwrap()
    }

    /// A config that is a local repository and `forge: <forge>` is refused, with each of
    /// `expected` among its problems.
    #[track_caller]
    fn assert_forge_problems(forge: &str, expected: &[&str]) {
        let problems = problems_of(&format!(
            "repository: {{url: /srv/git/gitops.git}}\nforge: {forge}\n"
        ));
        assert_problems(&problems, expected);
    }

    fn problems_of(text: &str) -> String {
        parse(text).unwrap_err().problems.join("\n")
    }

    #[track_caller]
    fn assert_problems(problems: &str, expected: &[&str]) {
        for expected in expected {
            assert!(
                problems.contains(expected),
                "missing {expected:?} in:\n{problems}"
            );
        }
    }

    #[test]
    fn author_signing_is_read_and_its_mistakes_named_by_field() {
        let c = parse(concat!(
            "repository: {url: /srv/git/gitops.git}\n",
            "author:\n  signing: {format: openpgp, key_env: TAGPIN_SIGNING_KEY, passphrase_env: P}\n",
        ))
        .unwrap();
        assert_eq!(
            c.author.signing,
            Some(Signing {
                format: SigningFormat::Openpgp,
                key: SigningKey::Env("TAGPIN_SIGNING_KEY".into()),
                passphrase_env: Some("P".into()),
            })
        );
        for (signing, expected) in [
            (
                "{key_file: /k}",
                "author.signing.format: is required: ssh or openpgp",
            ),
            (
                "{format: x509, key_file: /k}",
                "author.signing.format: expected one of ssh, openpgp, found \"x509\"",
            ),
            (
                "{format: ssh}",
                "author.signing: needs key_file or key_env: the private key to sign with",
            ),
            (
                "{format: ssh, key_file: /k, key_env: K}",
                "author.signing: set key_file or key_env, not both",
            ),
        ] {
            let problems = problems_of(&format!(
                "repository: {{url: /srv/git/gitops.git}}\nauthor: {{signing: {signing}}}\n"
            ));
            assert_problems(&problems, &[expected]);
        }
    }

    #[test]
    fn require_signed_by_keys_are_read_and_an_unreadable_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let key = ssh_key::PrivateKey::random(&mut rand_core::OsRng, ssh_key::Algorithm::Ed25519)
            .unwrap();
        let line = key.public_key().to_openssh().unwrap();
        std::fs::write(dir.path().join("release.pub"), &line).unwrap();
        std::fs::write(dir.path().join("bad.pub"), "ssh-ed25519 not-base64").unwrap();
        let text = |keys: &str| {
            format!(
                "{PROMOTING}promotion:\n  require_signed_by: [{keys}]\n  stages:\n  \
                 - {{name: staging, paths: [a]}}\n  - {{name: production, paths: [b]}}\n"
            )
        };
        let file = dir.path().join("tagpin.yaml");
        let c = Config::parse(&text("release.pub"), &file).unwrap();
        let keys = &c.promotion.unwrap().require_signed_by;
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].path, "release.pub");
        assert_eq!(keys[0].contents, line);
        let err = Config::parse(&text("release.pub, bad.pub, none.pub"), &file).unwrap_err();
        let problems = err.problems.join("\n");
        assert_problems(
            &problems,
            &[
                "promotion.require_signed_by[1]: bad.pub: not an OpenSSH public key line",
                "promotion.require_signed_by[2]: cannot read none.pub",
            ],
        );
    }

    #[test]
    fn promotion_stages_are_read_with_every_cluster_and_soak_form() {
        let c = parse(&format!(
            "{PROMOTING}{}",
            concat!(
                "promotion:\n",
                "  stages:\n",
                "  - name: dev\n",
                "    paths: [overlays/dev]\n",
                "  - name: staging\n",
                "    paths: [./overlays/staging/]\n",
                "    cluster: {context: staging}\n",
                "    soak: 90\n",
                "    mode: commit\n",
                "  - name: canary.eu-1\n",
                "    paths: [overlays/canary]\n",
                "    cluster: {in_cluster: true}\n",
                "    soak: 10m\n",
                "  - name: production\n",
                "    paths: [overlays/production, clusters/prod]\n",
                "    cluster: {kubeconfig: /etc/tagpin/prod.kubeconfig, context: prod}\n",
                "    soak: 1h\n",
                "    soak_restarts: 0\n",
                "    mode: pull-request\n",
                "    on_failure: revert\n",
                "  - name: dr_2\n",
                "    paths: [overlays/dr]\n",
                "    cluster: {kubeconfig: /etc/tagpin/dr.kubeconfig}\n",
                "    soak: 90s\n",
            )
        ))
        .unwrap();
        let promotion = c.promotion.as_ref().unwrap();
        let secs = std::time::Duration::from_secs;
        assert_eq!(
            promotion.stages,
            [
                Stage {
                    name: "dev".into(),
                    paths: vec!["overlays/dev".into()],
                    cluster: ClusterTarget::Default,
                    soak: secs(0),
                    soak_restarts: None,
                    on_failure: None,
                    mode: WriteMode::Commit,
                },
                Stage {
                    name: "staging".into(),
                    paths: vec!["./overlays/staging/".into()],
                    cluster: ClusterTarget::Context("staging".into()),
                    soak: secs(90),
                    soak_restarts: None,
                    on_failure: None,
                    mode: WriteMode::Commit,
                },
                Stage {
                    name: "canary.eu-1".into(),
                    paths: vec!["overlays/canary".into()],
                    cluster: ClusterTarget::InCluster,
                    soak: secs(600),
                    soak_restarts: None,
                    on_failure: None,
                    mode: WriteMode::PullRequest,
                },
                Stage {
                    name: "production".into(),
                    paths: vec!["overlays/production".into(), "clusters/prod".into()],
                    cluster: ClusterTarget::Kubeconfig {
                        path: "/etc/tagpin/prod.kubeconfig".into(),
                        context: Some("prod".into()),
                    },
                    soak: secs(3600),
                    soak_restarts: Some(0),
                    on_failure: Some(OnFailure::Revert),
                    mode: WriteMode::PullRequest,
                },
                Stage {
                    name: "dr_2".into(),
                    paths: vec!["overlays/dr".into()],
                    cluster: ClusterTarget::Kubeconfig {
                        path: "/etc/tagpin/dr.kubeconfig".into(),
                        context: None,
                    },
                    soak: secs(90),
                    soak_restarts: None,
                    on_failure: None,
                    mode: WriteMode::PullRequest,
                },
            ]
        );
        assert_eq!(
            promotion.source_of("production").map(|s| s.name.as_str()),
            Some("canary.eu-1")
        );
        assert!(promotion.source_of("dev").is_none());
    }

    #[test]
    fn with_promotion_sync_pins_the_first_stages_paths() {
        let c = parse(&format!(
            "{PROMOTING}{}",
            concat!(
                "mode: pull-request\n",
                "promotion:\n",
                "  stages:\n",
                "  - {name: staging, paths: [overlays/staging, base/staging]}\n",
                "  - {name: production, paths: [overlays/production]}\n",
            )
        ))
        .unwrap();
        assert_eq!(c.paths, ["overlays/staging", "base/staging"]);
        let first = &c.promotion.as_ref().unwrap().stages[0];
        assert_eq!(c.paths, first.paths);
        // The first stage's writes are sync's: they follow the top-level mode.
        assert_eq!(first.mode, WriteMode::PullRequest);
    }

    #[test]
    fn promotion_needs_a_list_of_at_least_two_stages_and_no_top_level_paths() {
        let problems = problems_of(&format!(
            "{PROMOTING}paths: [apps]\npromotion:\n  stages:\n  - {{name: only, paths: [a]}}\n"
        ));
        assert_problems(
            &problems,
            &[
                "paths: with promotion.stages, each stage lists its own paths; sync pins the first stage's",
                "promotion.stages: needs at least two stages, found 1: the first is pinned from the registry, each later one is promoted from the one before it",
            ],
        );
        for (promotion, expected) in [
            (
                "promotion: [a, b]\n",
                "promotion: expected a mapping, found a list",
            ),
            ("promotion: {}\n", "promotion.stages: is required"),
            (
                "promotion: {stages: staging}\n",
                "promotion.stages: expected a list of stages, found a string",
            ),
            (
                "promotion: {stages: [], order: [a]}\n",
                "promotion.order: unknown key (known: stages, require_signed_by)",
            ),
            (
                "promotion: {stages: [staging, {name: b, paths: [b]}]}\n",
                "promotion.stages[0]: expected a mapping, found a string",
            ),
        ] {
            assert_problems(
                &problems_of(&format!("{PROMOTING}{promotion}")),
                &[expected],
            );
        }
    }

    #[test]
    fn stage_names_are_unique_and_fit_a_branch_name() {
        let long = "a".repeat(64);
        let problems = problems_of(&format!(
            "{PROMOTING}{}",
            format_args!(
                concat!(
                    "promotion:\n",
                    "  stages:\n",
                    "  - {{name: staging, paths: [a]}}\n",
                    "  - {{name: production, paths: [b]}}\n",
                    "  - {{name: staging, paths: [c]}}\n",
                    "  - {{name: Prod, paths: [d]}}\n",
                    "  - {{name: 'pr od', paths: [e]}}\n",
                    "  - {{name: a..b, paths: [f]}}\n",
                    "  - {{name: {long}, paths: [g]}}\n",
                    "  - {{name: -x, paths: [h]}}\n",
                    "  - {{paths: [i]}}\n",
                    "  - {{name: 7, paths: [j]}}\n",
                ),
                long = long
            )
        ));
        assert_problems(
            &problems,
            &[
                "promotion.stages[2].name: \"staging\" is also the name of stages[0]",
                "a stage repeated in the order would promote into itself (a cycle)",
                "promotion.stages[3].name: \"Prod\" must start with a lowercase letter or digit",
                "promotion.stages[4].name: \"pr od\" has a character other than a-z, 0-9",
                "promotion.stages[5].name: \"a..b\" is not valid in a Git branch name",
                "promotion.stages[6].name: \"aaaa",
                "\" is too long: it names the branch tagpin/promote/<name>",
                "promotion.stages[7].name: \"-x\" must start with a lowercase letter or digit",
                "promotion.stages[8].name: is required",
                "promotion.stages[9].name: expected a string, found a number",
            ],
        );
        assert!(
            !problems.contains("stages[1].name"),
            "a valid name was refused:\n{problems}"
        );
        let max = "a".repeat(63);
        assert!(parse(&format!(
            "{PROMOTING}promotion:\n  stages:\n  - {{name: {max}, paths: [a]}}\n  - {{name: 0.b_c-d, paths: [b]}}\n"
        ))
        .is_ok());
    }

    #[test]
    fn stage_paths_are_required_relative_and_placed() {
        let text = format!(
            "{PROMOTING}{}",
            concat!(
                "promotion:\n",
                "  stages:\n",
                "  - name: staging\n",
                "    paths: [overlays/staging, /etc]\n",
                "  - name: production\n",
                "    paths: [\"../outside\"]\n",
                "  - name: qa\n",
                "  - name: perf\n",
                "    paths: []\n",
                "  - name: dr\n",
                "    paths: overlays/dr\n",
            )
        );
        let problems = problems_of(&text);
        assert_problems(
            &problems,
            &[
                "tagpin.yaml:6:31: promotion.stages[0].paths[1]: \"/etc\" must be relative to the repository and stay inside it",
                "tagpin.yaml:8:13: promotion.stages[1].paths[0]: \"../outside\" must be relative to the repository and stay inside it",
                "promotion.stages[2].paths: is required",
                "tagpin.yaml:11:5: promotion.stages[3].paths: must list at least one directory or file of this stage",
                "promotion.stages[4].paths: expected a list of strings, found a string",
            ],
        );
    }

    #[test]
    fn paths_of_different_stages_must_not_overlap() {
        let stages = |staging: &str, production: &str| {
            format!(
                "{PROMOTING}promotion:\n  stages:\n  - {{name: staging, paths: [{staging}]}}\n  - {{name: production, paths: [{production}]}}\n"
            )
        };
        assert!(parse(&stages("overlays/prod", "overlays/production")).is_ok());
        assert!(parse(&stages("overlays/prod/", "./overlays/production")).is_ok());
        let problems = problems_of(&stages("overlays/prod, base", "overlays/prod/"));
        assert_problems(
            &problems,
            &["promotion.stages[1].paths[0]: \"overlays/prod/\" of stage \"production\" overlaps \"overlays/prod\" of stage \"staging\" (stages[0].paths[0])"],
        );
        assert!(!problems.contains("base"), "{problems}");
        let problems = problems_of(&stages(
            "overlays",
            "overlays/production/kustomization.yaml",
        ));
        assert_problems(
            &problems,
            &["\"overlays/production/kustomization.yaml\" of stage \"production\" overlaps \"overlays\" of stage \"staging\""],
        );
        let problems = problems_of(&stages("apps", "."));
        assert_problems(
            &problems,
            &["\".\" of stage \"production\" overlaps \"apps\" of stage \"staging\""],
        );
    }

    #[test]
    fn overlap_is_component_wise_after_normalisation() {
        for (a, b) in [
            ("overlays/prod", "overlays/prod"),
            ("./overlays/prod/", "overlays/prod"),
            ("overlays", "overlays/prod"),
            ("overlays/prod/app.yaml", "overlays/prod"),
            (".", "overlays/prod"),
            ("./", "."),
            ("overlays/./prod", "overlays/prod"),
        ] {
            assert!(paths_overlap(a, b), "{a} and {b} overlap");
            assert!(paths_overlap(b, a), "{b} and {a} overlap");
        }
        for (a, b) in [
            ("overlays/prod", "overlays/production"),
            ("overlays/prod", "overlays/staging"),
            ("apps", "apps-extra"),
            ("overlays/prod.yaml", "overlays/prod"),
        ] {
            assert!(!paths_overlap(a, b), "{a} and {b} do not overlap");
            assert!(!paths_overlap(b, a), "{b} and {a} do not overlap");
        }
    }

    #[test]
    fn a_stage_cluster_is_one_of_context_kubeconfig_in_cluster() {
        let problems = problems_of(&format!(
            "{PROMOTING}{}",
            concat!(
                "promotion:\n",
                "  stages:\n",
                "  - {name: s0, paths: [a], cluster: {}}\n",
                "  - {name: s1, paths: [b], cluster: {in_cluster: true, context: x}}\n",
                "  - {name: s2, paths: [c], cluster: {in_cluster: true, kubeconfig: /k}}\n",
                "  - {name: s3, paths: [d], cluster: {in_cluster: false}}\n",
                "  - {name: s4, paths: [e], cluster: {kubeconfig: 3, region: eu}}\n",
                "  - {name: s5, paths: [f], cluster: prod}\n",
                "  - {name: s6, paths: [g], cluster: {context: ''}}\n",
                "  - {name: s7, paths: [h], cluster: ~}\n",
            )
        ));
        assert_problems(
            &problems,
            &[
                "promotion.stages[0].cluster: set one of context, kubeconfig, in_cluster (omit cluster for the default kubeconfig context)",
                "promotion.stages[1].cluster: set one of context, kubeconfig, in_cluster, not context and in_cluster",
                "promotion.stages[2].cluster: set one of context, kubeconfig, in_cluster, not kubeconfig and in_cluster",
                "promotion.stages[3].cluster.in_cluster: expected true",
                "promotion.stages[4].cluster.kubeconfig: expected a string, found a number",
                "promotion.stages[4].cluster.region: unknown key (known: context, kubeconfig, in_cluster)",
                "promotion.stages[5].cluster: expected a mapping, found a string",
                "promotion.stages[6].cluster.context: must not be empty",
            ],
        );
        assert!(!problems.contains("stages[7]"), "{problems}");
    }

    #[test]
    fn only_stages_promoted_into_take_soak_and_mode() {
        let problems = problems_of(&format!(
            "{PROMOTING}{}",
            concat!(
                "promotion:\n",
                "  stages:\n",
                "  - {name: s0, paths: [a], soak: 10m, mode: commit}\n",
                "  - {name: s1, paths: [b], soak: 5d, mode: sometimes, on_failure: undo}\n",
                "  - {name: s2, paths: [c], soak: -1}\n",
                "  - {name: s3, paths: [d], soak: 1.5}\n",
                "  - {name: s4, paths: [e], soak: [1m]}\n",
                "  - {name: s5, paths: [f], soak: 99999999999999999h}\n",
                "  - {name: s6, paths: [g], soak_restarts: 2}\n",
                "  - {name: s7, paths: [h], soak: 1m, soak_restarts: -1}\n",
            )
        ));
        let first = "the first stage is pinned from the registry by sync, not promoted into: soak, soak_restarts, mode and on_failure apply to the stages promoted into; its writes follow the top-level mode and verify.on_failure";
        assert_problems(
            &problems,
            &[
                &format!("tagpin.yaml:5:28: promotion.stages[0].soak: {first}"),
                &format!("tagpin.yaml:5:39: promotion.stages[0].mode: {first}"),
                "promotion.stages[1].soak: \"5d\" is not a duration like 90s, 10m or 1h",
                "promotion.stages[1].mode: expected one of commit, pull-request, found \"sometimes\"",
                "promotion.stages[2].soak: expected a duration like 90s, 10m or 1h, or a whole number of seconds, found -1",
                "promotion.stages[3].soak: expected a duration like 90s, 10m or 1h, or a whole number of seconds, found 1.5",
                "promotion.stages[4].soak: expected a duration like 90s, 10m or 1h, or a whole number of seconds, found a list",
                "promotion.stages[5].soak: \"99999999999999999h\" is too long a duration",
                "promotion.stages[1].on_failure: expected one of report, revert, found \"undo\"",
                "promotion.stages[6].soak_restarts: counts container restarts during the soak: set soak as well",
                "promotion.stages[7].soak_restarts: expected a whole number from 0 to 4294967295, found -1",
            ],
        );
    }

    #[test]
    fn a_stage_promoted_by_pull_request_needs_a_forge() {
        let stages = concat!(
            "promotion:\n",
            "  stages:\n",
            "  - {name: staging, paths: [a]}\n",
            "  - {name: production, paths: [b]}\n",
            "  - {name: dr, paths: [c], mode: commit}\n",
        );
        let problems = problems_of(&format!(
            "repository: {{url: /srv/git/gitops.git}}\n{stages}"
        ));
        assert_problems(
            &problems,
            &["forge: is required when promotion.stages[1].mode is pull-request (the default for a stage promoted into; set mode: commit to promote by commit)"],
        );
        assert!(!problems.contains("stages[2]"), "{problems}");
        assert!(!problems.contains("stages[0]"), "{problems}");
        assert!(parse(&format!("{PROMOTING}{stages}")).is_ok());
        let problems = problems_of(&format!(
            "repository: {{url: /srv/git/gitops.git}}\n{}",
            stages.replace(", mode: commit", "")
        ));
        assert_eq!(
            problems,
            "forge: is required when promotion.stages[1].mode and promotion.stages[2].mode are pull-request (the default for a stage promoted into; set mode: commit to promote by commit)"
        );
    }

    #[test]
    fn a_soak_needs_a_forge_to_keep_its_clock() {
        let problems = problems_of(concat!(
            "repository: {url: /srv/git/gitops.git}\n",
            "promotion:\n",
            "  stages:\n",
            "  - {name: staging, paths: [a]}\n",
            "  - {name: production, paths: [b], mode: commit, soak: 30m}\n",
        ));
        assert_problems(
            &problems,
            &["promotion.stages[1].soak: needs a forge: section"],
        );
        assert!(parse(concat!(
            "repository: {url: /srv/git/gitops.git}\n",
            "promotion:\n",
            "  stages:\n",
            "  - {name: staging, paths: [a]}\n",
            "  - {name: production, paths: [b], mode: commit}\n",
        ))
        .is_ok());
    }

    #[test]
    fn durations_read_like_people_write_them() {
        use std::time::Duration;
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration(" 0 "), Ok(Duration::ZERO));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("2h30m").is_err());
        assert_eq!(
            parse_duration("5124095576030432h").unwrap_err().to_string(),
            "\"5124095576030432h\" is too long a duration"
        );
    }

    #[test]
    fn branch_names_follow_git_rules() {
        for ok in ["main", "release/1.2", "tagpin/main"] {
            assert!(valid_branch_name(ok), "{ok}");
        }
        for bad in [
            "", "a..b", "a b", "/a", "a/", "a.lock", ".hidden", "a:b", "-x",
        ] {
            assert!(!valid_branch_name(bad), "{bad}");
        }
    }

    fn resource(spec: serde_json::Value) -> Result<Config, ConfigError> {
        Config::from_resource_spec(&spec, "team-a/web")
    }

    /// Each of `expected` begins one of the problems of `err`.
    #[track_caller]
    fn assert_problems_start(err: &ConfigError, expected: &[&str]) {
        for expected in expected {
            assert!(
                err.problems.iter().any(|p| p.starts_with(expected)),
                "{expected} not in {:#?}",
                err.problems
            );
        }
    }

    #[test]
    fn a_resource_spec_is_read_by_the_same_types_and_rules_as_a_file() {
        let c = resource(serde_json::json!({
            "repository": {"url": "https://git.example/acme/gitops.git", "auth": {"token_env": "git-token"}},
            "secret_ref": {"name": "gitops-creds"},
            "mode": "pull-request",
            "forge": {"owner": "acme", "repo": "gitops", "token_env": "GITHUB_TOKEN"},
            "registries": {"docker_config_secret_ref": {"name": "pull"}},
        }))
        .unwrap();
        assert_eq!(c.secret_ref.as_deref(), Some("gitops-creds"));
        assert_eq!(c.registries.docker_config_secret.as_deref(), Some("pull"));
        assert_eq!(c.mode, WriteMode::PullRequest);
        assert_eq!(c.forge.unwrap().token_env, "GITHUB_TOKEN");

        let err = resource(serde_json::json!({
            "repository": {"branch": "bad branch"},
            "mode": "sometimes",
            "colour": "blue",
        }))
        .unwrap_err();
        assert_eq!(err.file, Path::new("team-a/web"));
        assert_problems_start(
            &err,
            &[
                "spec.repository.url: is required",
                "spec.repository.branch: \"bad branch\" is not a valid branch name",
                "spec.mode: expected one of commit, pull-request, found \"sometimes\"",
                "spec.colour: unknown key",
            ],
        );
    }

    #[test]
    fn a_resource_spec_carries_minimum_ages_as_a_file_does() {
        let c = resource(serde_json::json!({
            "repository": {"url": "https://git.example/acme/gitops.git"},
            "images": {"minimum_age": [{"match": "ghcr.io/acme/*", "age": "24h"}, {"match": "nginx", "age": 60}]},
        }))
        .unwrap();
        let read: Vec<(&str, u64)> = c.minimum_ages().map(|(m, a)| (m, a.as_secs())).collect();
        assert_eq!(read, [("ghcr.io/acme/*", 86_400), ("nginx", 60)]);
        let err = resource(serde_json::json!({
            "repository": {"url": "https://git.example/acme/gitops.git"},
            "images": {"minimum_age": [{"match": "ghcr.io/acme/*", "age": "soon"}, {"age": "1h"}]},
        }))
        .unwrap_err();
        assert_problems_start(
            &err,
            &[
                "spec.images.minimum_age[0].age: ",
                "spec.images.minimum_age[1].match: is required",
            ],
        );
    }

    #[test]
    fn a_resource_names_secrets_by_reference_and_nothing_on_the_controllers_disk() {
        let err = resource(serde_json::json!({
            "repository": {"url": "https://git.example/a.git", "cache_dir": "/tmp/x", "auth": {"token_env": "token"}},
            "registries": {"docker_config": "/root/.docker", "ca_files": ["/ca.pem"]},
            "verify": {"context": "prod"},
            "forge": {"owner": "acme", "repo": "gitops", "token_env": "ghp_0123456789abcdef/"},
        }))
        .unwrap_err();
        assert_problems_start(
            &err,
            &[
                "spec.repository.cache_dir: names something on the controller's own disk",
                "spec.registries.docker_config: names something on the controller's own disk; a PinnedRepository takes docker_config_secret_ref",
                "spec.registries.ca_files: names something on the controller's own disk",
                "spec.verify.context: names something on the controller's own disk",
                "spec.repository.auth.token_env: names a key of the Secret secret_ref, and secret_ref is not set",
                "spec.forge.token_env: must name a key of the Secret secret_ref",
            ],
        );
        assert!(
            !err.problems.iter().any(|p| p.contains("ghp_")),
            "a pasted token is never echoed: {:#?}",
            err.problems
        );
    }

    #[test]
    fn a_file_refuses_secret_references() {
        let err = parse(
            "repository: {url: https://git.example/a.git}\nsecret_ref: {name: creds}\n\
             registries: {docker_config_secret_ref: {name: pull}}\n",
        )
        .unwrap_err();
        assert_eq!(
            err.problems,
            [
                "tagpin.yaml:3:14: registries.docker_config_secret_ref: only a PinnedRepository refers to Secrets; in a file, use docker_config",
                "tagpin.yaml:2:1: secret_ref: only a PinnedRepository refers to Secrets; in a file, use environment variables and files",
            ]
        );
    }

    #[test]
    fn only_a_resource_names_a_service_account_and_it_is_a_dns_label() {
        let err =
            parse("repository: {url: https://git.example/a.git}\nservice_account_name: tagpin\n")
                .unwrap_err();
        assert_eq!(
            err.problems,
            [
                "tagpin.yaml:2:1: service_account_name: only a PinnedRepository names a \
              ServiceAccount (of its namespace); a file's reads use the identity tagpin runs as"
            ]
        );
        let spec = |name: serde_json::Value| {
            resource(serde_json::json!({
                "repository": {"url": "https://git.example/a.git"},
                "service_account_name": name,
            }))
        };
        assert_eq!(
            spec("tagpin-verifier".into())
                .unwrap()
                .service_account_name
                .as_deref(),
            Some("tagpin-verifier")
        );
        for bad in ["Tagpin", "tagpin.verifier", "-tagpin", &"a".repeat(64)] {
            let err = spec(bad.into()).unwrap_err();
            assert_eq!(err.problems.len(), 1, "{bad}: {:#?}", err.problems);
            assert!(
                err.problems[0].starts_with(&format!(
                    "spec.service_account_name: {bad:?} is not a ServiceAccount name"
                )),
                "{bad}: {:#?}",
                err.problems
            );
        }
        let err = spec(serde_json::json!(3)).unwrap_err();
        assert_eq!(
            err.problems,
            ["spec.service_account_name: expected a string, found a number"]
        );
        assert_eq!(
            resource(serde_json::json!({"repository": {"url": "https://git.example/a.git"}}))
                .unwrap()
                .service_account_name,
            None
        );
    }

    #[test]
    fn a_stage_cluster_in_a_resource_is_in_cluster_or_a_kubeconfig_secret() {
        let stages = |cluster: serde_json::Value| {
            resource(serde_json::json!({
                "repository": {"url": "https://git.example/a.git"},
                "promotion": {"stages": [
                    {"name": "staging", "paths": ["staging"], "cluster": {"in_cluster": true}},
                    {"name": "prod", "paths": ["prod"], "cluster": cluster, "mode": "commit"},
                ]},
            }))
        };
        let c =
            stages(serde_json::json!({"kubeconfig_secret_ref": {"name": "prod-cluster"}})).unwrap();
        let promotion = c.promotion.unwrap();
        assert_eq!(promotion.stages[0].cluster, ClusterTarget::InCluster);
        assert_eq!(
            promotion.stages[1].cluster,
            ClusterTarget::KubeconfigSecret {
                name: "prod-cluster".into(),
                key: "kubeconfig".into()
            }
        );
        let err = stages(serde_json::json!({"kubeconfig": "/etc/prod", "in_cluster": true, "kubeconfig_secret_ref": {"name": "p"}}))
            .unwrap_err();
        assert!(err.problems.iter().any(|p| p.starts_with(
            "spec.promotion.stages[1].cluster.kubeconfig: names something on the controller's own disk"
        )), "{:#?}", err.problems);
        assert!(err.problems.iter().any(|p| p == "spec.promotion.stages[1].cluster: set one of kubeconfig_secret_ref, in_cluster, not both"), "{:#?}", err.problems);
    }

    #[test]
    fn notifications_are_read_with_their_kind_events_and_stages() {
        use crate::event::EventKind;
        let c = parse(concat!(
            "repository: {url: https://git.example/a.git}\n",
            "notifications:\n",
            "  - {kind: slack, url_env: SLACK_WEBHOOK_URL, events: [failed, reverted]}\n",
            "  - kind: webhook\n",
            "    url_env: HOOK_URL\n",
            "    secret_env: HOOK_SECRET\n",
            "    events: [pinned, converged]\n",
            "    stages: [main]\n",
        ))
        .unwrap();
        assert_eq!(c.notifications.len(), 2);
        let slack = &c.notifications[0];
        assert_eq!(slack.kind, NotifyKind::Slack);
        assert_eq!(slack.url, SecretName::Env("SLACK_WEBHOOK_URL".into()));
        assert_eq!(slack.secret, None);
        assert_eq!(slack.events, [EventKind::Failed, EventKind::Reverted]);
        assert!(slack.stages.is_empty());
        let hook = &c.notifications[1];
        assert_eq!(hook.secret, Some(SecretName::Env("HOOK_SECRET".into())));
        assert_eq!(hook.stages, ["main"]);
        assert!(parse("repository: {url: https://git.example/a.git}\n")
            .unwrap()
            .notifications
            .is_empty());
    }

    #[test]
    fn notification_mistakes_are_named_by_field_path_and_line() {
        let problems = problems_of(concat!(
            "repository: {url: https://git.example/a.git}\n",
            "notifications:\n",
            "  - {kind: pager, url_env: URL, events: [failed]}\n",
            "  - kind: slack\n",
            "    url_env: https://hooks.slack.com/services/T0/B0/secret\n",
            "    secret_env: S\n",
            "    events: [failed, deployed]\n",
            "    stages: [prod]\n",
            "  - {kind: msteams, url_secret_key: teams, events: [converged]}\n",
            "  - {kind: webhook, url_env: URL}\n",
        ));
        assert_problems(
            &problems,
            &[
                "tagpin.yaml:3:6: notifications[0].kind: expected one of slack, msteams, webhook, found \"pager\"",
                "tagpin.yaml:5:5: notifications[1].url_env: must name an environment variable",
                "tagpin.yaml:6:5: notifications[1].secret_env: only kind webhook signs its body",
                "tagpin.yaml:7:22: notifications[1].events[1]: unknown event \"deployed\" (known: pinned, converged, failed, reverted, promotion_opened, promotion_blocked, promoted, held)",
                "tagpin.yaml:8:14: notifications[1].stages[0]: unknown stage \"prod\" (known: main)",
                "notifications[2].url_env: is required",
                "tagpin.yaml:9:21: notifications[2].url_secret_key: only a PinnedRepository refers to Secrets; in a file, use url_env",
                "notifications[3].events: is required",
            ],
        );
        // The URL pasted where a variable's name goes is never echoed.
        assert!(!problems.contains("hooks.slack.com"), "{problems}");
    }

    #[test]
    fn a_resource_reads_notification_urls_from_its_secret_only() {
        let c = resource(serde_json::json!({
            "repository": {"url": "https://git.example/a.git"},
            "secret_ref": {"name": "creds"},
            "notifications": [{"kind": "webhook", "url_secret_key": "hook-url",
                               "secret_key": "hook-secret", "events": ["failed"]}],
        }))
        .unwrap();
        let hook = &c.notifications[0];
        assert_eq!(hook.url, SecretName::SecretKey("hook-url".into()));
        assert_eq!(
            hook.secret,
            Some(SecretName::SecretKey("hook-secret".into()))
        );
        let err = resource(serde_json::json!({
            "repository": {"url": "https://git.example/a.git"},
            "notifications": [{"kind": "slack", "url_env": "SLACK_URL", "events": ["failed"]}],
        }))
        .unwrap_err();
        assert_eq!(
            err.problems,
            [
                "spec.notifications[0].url_env: a PinnedRepository reads nothing of the controller's environment; name a key of the Secret secret_ref with url_secret_key",
                "spec.notifications[0].url_secret_key: is required",
            ]
        );
        let err = resource(serde_json::json!({
            "repository": {"url": "https://git.example/a.git"},
            "notifications": [{"kind": "slack", "url_secret_key": "slack", "events": ["failed"]}],
        }))
        .unwrap_err();
        assert_eq!(
            err.problems,
            ["spec.notifications: names keys of the Secret secret_ref, and secret_ref is not set"]
        );
    }
}
