//! From the raw file ([`super::raw`]) to the trusted [`Config`]: every problem, of shape or of
//! meaning, is collected with its field path (`pull_request.grouping`,
//! `promotion.stages[1].cluster`), so one run lists them all.

use std::borrow::Cow;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_yaml::Value;

use super::model::{
    invalid_stage_name, is_loopback_url, parse_duration, paths_overlap, valid_branch_name, Author,
    ClusterTarget, Config, Forge, GitAuth, GitOpsObjects, Grouping, ImageRules, KeylessIdentity,
    MinimumAgeRule, NotationRule, Notification, NotifyKind, ObjectName, OnFailure, Order, Origin,
    PolicyRule, Problem, Promotion, ProvenanceRule, PullRequest, Registries, Repository,
    SecretName, SignatureFile, SignatureKey, SignatureRule, Signing, SigningFormat, SigningKey,
    Stage, TagPolicy, Verify, WriteMode, DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME,
    DEFAULT_BRANCH_PREFIX, DEFAULT_COMMIT_MESSAGE, DEFAULT_FORGE_TIMEOUT_SECONDS, DEFAULT_PR_TITLE,
    DEFAULT_TIMEOUT_SECONDS, DEFAULT_TOKEN_USERNAME, MAX_STAGE_NAME, TEMPLATE_PLACEHOLDERS,
};
use super::raw::{
    names_of, Field, Known, List, RawAuthor, RawCluster, RawConfig, RawDuration, RawForge,
    RawGitAuth, RawHelm, RawImages, RawKeyless, RawLocalRef, RawMinimumAge, RawNotation,
    RawNotification, RawPolicy, RawPromotion, RawProvenance, RawPullRequest, RawRegistries,
    RawRepository, RawSecretKeyRef, RawSignature, RawSigning, RawStage, RawVerify, Section,
};

/// The configuration the raw file describes, or every problem found in it.
///
/// `base` is the directory of the configuration file, which the files it names (signature
/// keys, trusted roots) are relative to; `None` for a resource, which names no local file.
pub(super) fn config(
    raw: &Section<RawConfig>,
    origin: Origin,
    base: Option<&Path>,
) -> Result<Config, Vec<Problem>> {
    let mut check = Check {
        problems: Vec::new(),
        origin,
        base: base.map(Path::to_path_buf),
    };
    match check.config(raw) {
        Some(config) if check.problems.is_empty() => Ok(config),
        _ => Err(check.problems),
    }
}

/// Collects problems while reading the raw values.
struct Check {
    problems: Vec<Problem>,
    /// A file and a resource differ only in where secrets and local files come from.
    origin: Origin,
    /// The configuration file's directory: where the files it names are read from.
    base: Option<PathBuf>,
}

/// Keys only a `PinnedRepository` may write.
const RESOURCE_ONLY: [&str; 6] = [
    "secret_ref",
    "docker_config_secret_ref",
    "kubeconfig_secret_ref",
    "service_account_name",
    "url_secret_key",
    "secret_key",
];

/// The default key of a `kubeconfig_secret_ref`.
const DEFAULT_KUBECONFIG_KEY: &str = "kubeconfig";

impl Check {
    /// A key naming something on the controller's own disk or environment, which a resource
    /// cannot give: reported when a resource writes it, with what to use `instead`.
    fn file_only(&mut self, path: &str, written: bool, instead: &str) {
        if written && self.origin == Origin::Resource {
            self.problem(
                path,
                format!(
                    "names something on the controller's own disk; a PinnedRepository {instead}"
                ),
            );
        }
    }

    /// A Secret reference, which only a resource may hold: reported when a file writes it.
    fn resource_only(&mut self, path: &str, written: bool, instead: &str) {
        if written && self.origin == Origin::File {
            self.problem(
                path,
                format!("only a PinnedRepository refers to Secrets; in a file, use {instead}"),
            );
        }
    }

    /// `service_account_name`: a ServiceAccount of the resource's namespace, whose rights the
    /// operator reads the cluster with. A file has no namespace to hold one: `tagpin run` and
    /// `tagpin verify` read with their own identity.
    fn service_account(&mut self, field: &Field<String>) -> Option<String> {
        let path = "service_account_name";
        if field.is_written() && self.origin == Origin::File {
            self.problem(
                path,
                "only a PinnedRepository names a ServiceAccount (of its namespace); a file's \
                 reads use the identity tagpin runs as",
            );
            return None;
        }
        let name = self.string(path, field)?;
        // A ServiceAccount's name is a DNS subdomain to the API server; tagpin also puts it in
        // a user name (`system:serviceaccount:<namespace>:<name>`), so it takes the stricter
        // DNS-1123 label that the schema states.
        if !super::model::is_dns_label(name) {
            self.problem(path, super::model::not_a_service_account(name));
            return None;
        }
        Some(name.to_string())
    }

    /// The name of a Secret of the resource's namespace (a DNS subdomain).
    fn local_ref(&mut self, path: &str, field: &Section<RawLocalRef>) -> Option<String> {
        let raw = self.section(path, field)?;
        let name = self.required_string(&join(path, "name"), &raw.name)?;
        self.object_name(&join(path, "name"), name);
        Some(name.to_string())
    }

    fn object_name(&mut self, path: &str, name: &str) {
        let valid = name.len() <= 253
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !valid {
            self.problem(
                path,
                format!("{name:?} is not a Secret name (lowercase letters, digits, '-', '.')"),
            );
        }
    }

    /// Where a secret is named: an environment variable in a file, a key of the Secret
    /// `secret_ref` in a resource.
    fn secret_name(&mut self, path: &str, name: &str) {
        match self.origin {
            Origin::File => self.env_name(path, name),
            Origin::Resource => self.secret_key(path, name),
        }
    }

    fn secret_key(&mut self, path: &str, key: &str) {
        let valid = key.len() <= 253
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
        if !valid {
            // Never echo the value: it may be the secret itself, pasted in by mistake.
            self.problem(
                path,
                "must name a key of the Secret secret_ref (letters, digits, '-', '_', '.'), \
                 not hold a secret",
            );
        }
    }

    /// The one rule for every URL a token is sent to: plain `http://` only on loopback, where
    /// it never crosses a network. `path` names the field the problem is reported at.
    fn token_transport(&mut self, path: &str, url: &str) {
        let plain = url::Url::parse(url).is_ok_and(|u| u.scheme() == "http");
        if plain && !is_loopback_url(url) {
            self.problem(
                path,
                "a token is never sent over plain http:// beyond this machine; use https://",
            );
        }
    }

    fn problem(&mut self, path: &str, message: impl std::fmt::Display) {
        self.problems.push(Problem {
            path: path.to_string(),
            message: message.to_string(),
        });
    }

    /// The section at `path`, with its unknown keys reported; `None` when absent or not a
    /// mapping (reported).
    fn section<'r, T: DeserializeOwned>(
        &mut self,
        path: &str,
        field: &'r Section<T>,
    ) -> Option<&'r T> {
        match field {
            Field::Absent => None,
            Field::Ok(known) => {
                self.unknown_keys(path, known);
                Some(&known.value)
            }
            // A mapping the struct could not read: not expected, since every field of a raw
            // struct is a `Field`, which keeps what it cannot read.
            Field::Wrong {
                found: Value::Mapping(_),
                error,
            } => {
                self.problem(path, error);
                None
            }
            other => {
                self.wrong(path, "a mapping", other);
                None
            }
        }
    }

    /// A section that may be left out: absent (or not a mapping, reported) it reads as its
    /// struct with every key absent, so that the defaults are applied in one place.
    fn optional<'r, T: DeserializeOwned + Default + Clone>(
        &mut self,
        path: &str,
        field: &'r Section<T>,
    ) -> Cow<'r, T> {
        match self.section(path, field) {
            Some(raw) => Cow::Borrowed(raw),
            None => Cow::Owned(T::default()),
        }
    }

    fn unknown_keys<T: DeserializeOwned>(&mut self, path: &str, known: &Known<T>) {
        for key in &known.unknown {
            match key.as_str() {
                Some(key) => {
                    // A file is told only the keys a file may use.
                    let keys: Vec<&str> = known
                        .keys()
                        .iter()
                        .copied()
                        .filter(|k| self.origin == Origin::Resource || !RESOURCE_ONLY.contains(k))
                        .collect();
                    self.problem(
                        &join(path, key),
                        format!("unknown key (known: {})", keys.join(", ")),
                    )
                }
                None => self.problem(path, "keys must be strings"),
            }
        }
    }

    /// Reports a field that is not what was `expected`, naming only the kind of value found.
    fn wrong<T>(&mut self, path: &str, expected: &str, field: &Field<T>) {
        self.problem(path, format!("expected {expected}, found {}", found(field)));
    }

    fn string<'r>(&mut self, path: &str, field: &'r Field<String>) -> Option<&'r str> {
        match field {
            Field::Absent | Field::Null => None,
            Field::Ok(s) if s.trim().is_empty() => {
                self.problem(path, "must not be empty");
                None
            }
            Field::Ok(s) => Some(s),
            other => {
                self.wrong(path, "a string", other);
                None
            }
        }
    }

    fn required_string<'r>(&mut self, path: &str, field: &'r Field<String>) -> Option<&'r str> {
        let value = self.string(path, field);
        if !field.is_set() {
            self.problem(path, "is required");
        }
        value
    }

    /// The items of a list; none when not set, or not a list of `expected` (reported).
    fn list<'r, T>(&mut self, path: &str, field: &'r List<T>, expected: &str) -> &'r [Field<T>] {
        match field {
            Field::Ok(items) => items,
            Field::Absent | Field::Null => &[],
            other => {
                self.wrong(path, expected, other);
                &[]
            }
        }
    }

    fn strings(&mut self, path: &str, field: &List<String>) -> Vec<String> {
        let mut out = Vec::new();
        for (i, item) in self
            .list(path, field, "a list of strings")
            .iter()
            .enumerate()
        {
            let found = match item {
                Field::Ok(s) if !s.trim().is_empty() => {
                    out.push(s.clone());
                    continue;
                }
                Field::Ok(_) => "a string",
                other => found(other),
            };
            self.problem(
                &format!("{path}[{i}]"),
                format!("expected a non-empty string, found {found}"),
            );
        }
        out
    }

    fn number(&mut self, path: &str, field: &Field<u64>, min: u64, max: u64) -> Option<u64> {
        let found = match field {
            Field::Absent | Field::Null => return None,
            Field::Ok(n) if (min..=max).contains(n) => return Some(*n),
            Field::Ok(n) => n.to_string(),
            Field::Wrong { found, .. } => describe(found),
        };
        let expected = format!("a whole number from {min} to {max}");
        self.problem(path, format!("expected {expected}, found {found}"));
        None
    }

    /// One of the names of the enum `T`, `default` when not set.
    fn choice<T: Copy + DeserializeOwned>(
        &mut self,
        path: &str,
        field: &Field<T>,
        default: T,
    ) -> T {
        match field {
            Field::Ok(value) => *value,
            Field::Absent | Field::Null => default,
            Field::Wrong {
                found: Value::String(s),
                ..
            } => {
                let names = names_of::<T>().join(", ");
                self.problem(path, format!("expected one of {names}, found {s:?}"));
                default
            }
            other => {
                self.wrong(path, "a string", other);
                default
            }
        }
    }

    /// A field that may only be `true` (or left out).
    fn only_true(&mut self, path: &str, field: &Field<bool>, message: &str) -> bool {
        match field {
            Field::Absent | Field::Null => false,
            Field::Ok(true) => true,
            _ => {
                self.problem(path, message);
                false
            }
        }
    }

    /// A duration written `90s`, `10m`, `1h`, or as a whole number of seconds.
    fn duration(&mut self, path: &str, field: &Field<RawDuration>) -> Option<Duration> {
        let expected = "expected a duration like 90s, 10m or 1h, or a whole number of seconds";
        match field {
            Field::Absent | Field::Null => None,
            Field::Ok(RawDuration::Seconds(seconds)) => Some(Duration::from_secs(*seconds)),
            Field::Ok(RawDuration::Text(text)) => match parse_duration(text) {
                Ok(duration) => Some(duration),
                Err(message) => {
                    self.problem(path, message);
                    None
                }
            },
            Field::Wrong { found, .. } => {
                self.problem(path, format!("{expected}, found {}", describe(found)));
                None
            }
        }
    }

    fn env_name(&mut self, path: &str, name: &str) {
        let looks_like_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !looks_like_name {
            // Never echo the value: it may be the secret itself, pasted in by mistake.
            self.problem(
                path,
                "must name an environment variable (like GITHUB_TOKEN), not hold a secret",
            );
        }
    }

    fn template(&mut self, path: &str, template: &str) {
        let mut rest = template;
        while let Some(start) = rest.find('{') {
            let Some(len) = rest[start..].find('}') else {
                self.problem(path, "has a '{' without a closing '}'");
                return;
            };
            let placeholder = &rest[start..start + len + 1];
            if !TEMPLATE_PLACEHOLDERS.contains(&placeholder) {
                self.problem(
                    path,
                    format!(
                        "unknown placeholder {placeholder} (known: {})",
                        TEMPLATE_PLACEHOLDERS.join(", ")
                    ),
                );
            }
            rest = &rest[start + len + 1..];
        }
    }

    /// A list of paths, each of which must stay inside the repository (top-level `paths` and
    /// each stage's `paths`).
    fn relative_paths(&mut self, path: &str, field: &List<String>) -> Vec<String> {
        let paths = self.strings(path, field);
        for (i, p) in paths.iter().enumerate() {
            let relative = Path::new(p);
            let escapes = relative.is_absolute()
                || relative.components().any(|c| {
                    matches!(
                        c,
                        Component::ParentDir | Component::RootDir | Component::Prefix(_)
                    )
                });
            if escapes {
                self.problem(
                    &format!("{path}[{i}]"),
                    format!("{p:?} must be relative to the repository and stay inside it"),
                );
            }
        }
        paths
    }

    fn globs(&mut self, path: &str, globs: &[String]) {
        for (i, g) in globs.iter().enumerate() {
            if let Err(e) = globset::Glob::new(g) {
                self.problem(
                    &format!("{path}[{i}]"),
                    format!("invalid glob: {}", e.kind()),
                );
            }
        }
    }

    fn config(&mut self, root: &Section<RawConfig>) -> Option<Config> {
        let top = self.section("(top level)", root)?;
        let repository = self.repository(&top.repository);
        let author = self.author(&top.author);
        let mut paths = self.relative_paths("paths", &top.paths);
        if paths.is_empty() {
            paths = vec![".".to_string()];
        }
        let include = self.strings("include", &top.include);
        let exclude = self.strings("exclude", &top.exclude);
        self.globs("include", &include);
        self.globs("exclude", &exclude);
        let images = self.images(&top.images);
        let registries = self.registries(&top.registries);
        let mode = self.choice("mode", &top.mode, WriteMode::Commit);
        let commit_message = self
            .string("commit_message", &top.commit_message)
            .unwrap_or(DEFAULT_COMMIT_MESSAGE)
            .to_string();
        self.template("commit_message", &commit_message);
        let pull_request = self.pull_request(&top.pull_request);
        let forge = self.forge(&top.forge, author.signing.is_some());
        if mode == WriteMode::PullRequest && !top.forge.is_written() {
            self.problem("forge", "is required when mode is pull-request");
        }
        let verify = self.verify(&top.verify);
        let helm = self.helm(&top.helm);
        self.resource_only(
            "secret_ref",
            top.secret_ref.is_written(),
            "environment variables and files",
        );
        let secret_ref = match self.origin {
            Origin::Resource => self.local_ref("secret_ref", &top.secret_ref),
            Origin::File => None,
        };
        if self.origin == Origin::Resource && secret_ref.is_none() {
            self.secret_ref_missing(&repository, forge.is_some(), &author);
        }
        let service_account_name = self.service_account(&top.service_account_name);
        let promotion = if top.promotion.is_written() {
            if top.paths.is_set() {
                self.problem(
                    "paths",
                    "with promotion.stages, each stage lists its own paths; sync pins the first stage's",
                );
            }
            let promotion = self.promotion(&top.promotion, mode, top.forge.is_written());
            if let Some(first) = promotion.as_ref().and_then(|p| p.stages.first()) {
                paths = first.paths.clone();
            }
            promotion
        } else {
            None
        };
        let notifications = self.notifications(&top.notifications, &promotion, &repository);
        if self.origin == Origin::Resource && secret_ref.is_none() && !notifications.is_empty() {
            self.problem(
                "notifications",
                "names keys of the Secret secret_ref, and secret_ref is not set",
            );
        }
        Some(Config {
            notifications,
            verify,
            promotion,
            helm,
            repository: repository?,
            author,
            paths,
            include,
            exclude,
            images,
            registries,
            mode,
            commit_message,
            pull_request,
            forge,
            secret_ref,
            service_account_name,
        })
    }

    /// A resource without `secret_ref` whose fields name keys of it: each such field named.
    fn secret_ref_missing(
        &mut self,
        repository: &Option<Repository>,
        has_forge: bool,
        author: &Author,
    ) {
        let mut named = Vec::new();
        match &repository {
            Some(Repository {
                auth: GitAuth::Token { .. },
                ..
            }) => named.push("repository.auth.token_env"),
            Some(Repository {
                auth: GitAuth::SshKey { .. },
                ..
            }) => named.push("repository.auth.ssh_key_file"),
            _ => {}
        }
        if has_forge {
            named.push("forge.token_env");
        }
        if let Some(signing) = &author.signing {
            named.push(signing.key.field());
            if signing.passphrase_env.is_some() {
                named.push("author.signing.passphrase_env");
            }
        }
        for path in named {
            self.problem(
                path,
                "names a key of the Secret secret_ref, and secret_ref is not set",
            );
        }
    }

    /// `notifications`: each entry's kind, where its URL and signing key are read (an
    /// environment variable in a file; a key of the Secret `secret_ref` in a resource, never
    /// anything of the controller's own environment), and the events and stages it tells.
    fn notifications(
        &mut self,
        field: &List<Known<RawNotification>>,
        promotion: &Option<Promotion>,
        repository: &Option<Repository>,
    ) -> Vec<Notification> {
        let stages: Vec<String> = match (promotion, repository) {
            (Some(promotion), _) => promotion.stages.iter().map(|s| s.name.clone()).collect(),
            (None, Some(repository)) => vec![repository.branch.clone()],
            (None, None) => Vec::new(),
        };
        let mut out = Vec::new();
        let items = self.list("notifications", field, "a list of notifications");
        for (i, item) in items.iter().enumerate() {
            let path = format!("notifications[{i}]");
            let Some(raw) = self.section(&path, item) else {
                continue;
            };
            if !raw.kind.is_set() {
                self.problem(
                    &join(&path, "kind"),
                    "is required (slack, msteams or webhook)",
                );
            }
            let kind = self.choice(&join(&path, "kind"), &raw.kind, NotifyKind::Webhook);
            let url = self.notify_secret(
                &path,
                ("url_env", &raw.url_env),
                ("url_secret_key", &raw.url_secret_key),
                true,
            );
            let secret = self.notify_secret(
                &path,
                ("secret_env", &raw.secret_env),
                ("secret_key", &raw.secret_key),
                false,
            );
            if secret.is_some() && kind != NotifyKind::Webhook {
                let key = match self.origin {
                    Origin::File => "secret_env",
                    Origin::Resource => "secret_key",
                };
                self.problem(
                    &join(&path, key),
                    "only kind webhook signs its body; Slack and Teams check nothing",
                );
            }
            let events = self.event_kinds(&join(&path, "events"), &raw.events);
            let wanted = self.strings(&join(&path, "stages"), &raw.stages);
            for (j, stage) in wanted.iter().enumerate() {
                if !stages.is_empty() && !stages.contains(stage) {
                    self.problem(
                        &format!("{path}.stages[{j}]"),
                        format!("unknown stage {stage:?} (known: {})", stages.join(", ")),
                    );
                }
            }
            if let (Some(url), false) = (url, events.is_empty()) {
                out.push(Notification {
                    kind,
                    url,
                    secret,
                    events,
                    stages: wanted,
                });
            }
        }
        out
    }

    /// Where one secret of a notification is read: `env` in a file, `key` in a resource;
    /// the other is refused (a resource's URL comes only from its own Secret).
    fn notify_secret(
        &mut self,
        path: &str,
        (env_key, env): (&str, &Field<String>),
        (secret_key, key): (&str, &Field<String>),
        required: bool,
    ) -> Option<SecretName> {
        let (env_path, key_path) = (join(path, env_key), join(path, secret_key));
        match self.origin {
            Origin::File => {
                self.resource_only(&key_path, key.is_written(), env_key);
                if required && !env.is_set() {
                    self.problem(&env_path, "is required");
                }
                let name = self.string(&env_path, env)?;
                self.env_name(&env_path, name);
                Some(SecretName::Env(name.to_string()))
            }
            Origin::Resource => {
                if env.is_written() {
                    self.problem(
                        &env_path,
                        format!(
                            "a PinnedRepository reads nothing of the controller's environment; \
                             name a key of the Secret secret_ref with {secret_key}"
                        ),
                    );
                }
                if required && !key.is_set() {
                    self.problem(&key_path, "is required");
                }
                let name = self.string(&key_path, key)?;
                self.secret_key(&key_path, name);
                Some(SecretName::SecretKey(name.to_string()))
            }
        }
    }

    /// A notification's `events`: at least one, each a kind of [`crate::event::EventKind`].
    fn event_kinds(&mut self, path: &str, field: &List<String>) -> Vec<crate::event::EventKind> {
        if !field.is_set() {
            self.problem(
                path,
                "is required: the events to tell (pinned, converged, failed, ...)",
            );
        }
        let mut kinds = Vec::new();
        for (j, name) in self.strings(path, field).iter().enumerate() {
            match crate::event::EventKind::parse(name) {
                Some(kind) if !kinds.contains(&kind) => kinds.push(kind),
                Some(_) => {}
                None => {
                    let known: Vec<&str> = crate::event::EventKind::ALL
                        .iter()
                        .map(|k| k.name())
                        .collect();
                    self.problem(
                        &format!("{path}[{j}]"),
                        format!("unknown event {name:?} (known: {})", known.join(", ")),
                    );
                }
            }
        }
        kinds
    }

    fn repository(&mut self, field: &Section<RawRepository>) -> Option<Repository> {
        if !field.is_written() {
            self.problem("repository", "is required");
            return None;
        }
        let raw = self.section("repository", field)?;
        let url = self.required_string("repository.url", &raw.url);
        let branch = self
            .string("repository.branch", &raw.branch)
            .unwrap_or("main");
        if !valid_branch_name(branch) {
            self.problem(
                "repository.branch",
                format!("{branch:?} is not a valid branch name"),
            );
        }
        let auth = if raw.auth.is_set() {
            self.git_auth(&raw.auth)
        } else {
            GitAuth::None
        };
        if let (Some(url), GitAuth::Token { .. }) = (url, &auth) {
            self.token_transport("repository.auth", url);
        }
        let cache_dir = self.string("repository.cache_dir", &raw.cache_dir);
        self.file_only(
            "repository.cache_dir",
            raw.cache_dir.is_written(),
            "has its mirror under the controller's --cache-dir",
        );
        Some(Repository {
            url: url?.to_string(),
            branch: branch.to_string(),
            auth,
            cache_dir: cache_dir.map(PathBuf::from),
        })
    }

    fn git_auth(&mut self, field: &Section<RawGitAuth>) -> GitAuth {
        let path = "repository.auth";
        let Some(raw) = self.section(path, field) else {
            return GitAuth::None;
        };
        let token_env = self.string("repository.auth.token_env", &raw.token_env);
        let key_file = self.string("repository.auth.ssh_key_file", &raw.ssh_key_file);
        match (token_env, key_file) {
            (Some(_), Some(_)) => {
                self.problem(path, "set token_env or ssh_key_file, not both");
                GitAuth::None
            }
            (Some(env), None) => {
                self.secret_name("repository.auth.token_env", env);
                let username = self
                    .string("repository.auth.username", &raw.username)
                    .unwrap_or(DEFAULT_TOKEN_USERNAME);
                GitAuth::Token {
                    env: env.to_string(),
                    username: username.to_string(),
                }
            }
            (None, Some(file)) => {
                if self.origin == Origin::Resource {
                    self.secret_key("repository.auth.ssh_key_file", file);
                }
                let passphrase_env =
                    self.string("repository.auth.passphrase_env", &raw.passphrase_env);
                if let Some(env) = passphrase_env {
                    self.secret_name("repository.auth.passphrase_env", env);
                }
                GitAuth::SshKey {
                    key_file: PathBuf::from(file),
                    passphrase_env: passphrase_env.map(str::to_string),
                }
            }
            (None, None) => {
                self.problem(path, "needs token_env or ssh_key_file (omit auth for none)");
                GitAuth::None
            }
        }
    }

    fn author(&mut self, field: &Section<RawAuthor>) -> Author {
        let raw = self.optional("author", field);
        let name = self.string("author.name", &raw.name);
        let email = self.string("author.email", &raw.email);
        if let Some(email) = email.filter(|email| !email.contains('@')) {
            self.problem("author.email", format!("{email:?} is not an email address"));
        }
        Author {
            name: name.unwrap_or(DEFAULT_AUTHOR_NAME).to_string(),
            email: email.unwrap_or(DEFAULT_AUTHOR_EMAIL).to_string(),
            signing: self.signing(&raw.signing),
        }
    }

    /// `author.signing`: a format, and the key in exactly one of `key_file` and `key_env`.
    /// The key itself is read and tried where secrets are read (it may come from a Secret).
    fn signing(&mut self, field: &Section<RawSigning>) -> Option<Signing> {
        let path = "author.signing";
        let raw = self.section(path, field)?;
        let format_path = "author.signing.format";
        let format = match &raw.format {
            Field::Absent | Field::Null => {
                self.problem(format_path, "is required: ssh or openpgp");
                None
            }
            set => Some(self.choice(format_path, set, SigningFormat::Ssh)),
        };
        let file = self.string("author.signing.key_file", &raw.key_file);
        let env = self.string("author.signing.key_env", &raw.key_env);
        let key = match (file, env) {
            (Some(_), Some(_)) => {
                self.problem(path, "set key_file or key_env, not both");
                None
            }
            (Some(file), None) => {
                if self.origin == Origin::Resource {
                    self.secret_key("author.signing.key_file", file);
                }
                Some(SigningKey::File(PathBuf::from(file)))
            }
            (None, Some(env)) => {
                self.secret_name("author.signing.key_env", env);
                Some(SigningKey::Env(env.to_string()))
            }
            (None, None) => {
                self.problem(
                    path,
                    "needs key_file or key_env: the private key to sign with",
                );
                None
            }
        };
        let passphrase_env = self.string("author.signing.passphrase_env", &raw.passphrase_env);
        if let Some(env) = passphrase_env {
            self.secret_name("author.signing.passphrase_env", env);
        }
        Some(Signing {
            format: format?,
            key: key?,
            passphrase_env: passphrase_env.map(str::to_string),
        })
    }

    fn images(&mut self, field: &Section<RawImages>) -> ImageRules {
        let raw = self.optional("images", field);
        let rules = ImageRules {
            manage: self.strings("images.manage", &raw.manage),
            ignore: self.strings("images.ignore", &raw.ignore),
            policies: self.policies(&raw.policies),
            signatures: self.signatures(&raw.signatures),
            minimum_age: self.minimum_ages(&raw.minimum_age),
            provenance: self.provenance(&raw.provenance),
        };
        self.globs("images.manage", &rules.manage);
        self.globs("images.ignore", &rules.ignore);
        rules
    }

    /// `images.policies`: each entry's glob, range or regex is compiled now, so a typo is a
    /// configuration error with its field path rather than a failure in the middle of a pass.
    fn policies(&mut self, field: &List<Known<RawPolicy>>) -> Vec<PolicyRule> {
        let mut rules = Vec::new();
        for (i, item) in self
            .list("images.policies", field, "a list")
            .iter()
            .enumerate()
        {
            let path = format!("images.policies[{i}]");
            let Some(raw) = self.section(&path, item) else {
                continue;
            };
            let matches = self.match_glob(&join(&path, "match"), &raw.matches);
            if let (Some(policy), Some(matches)) = (self.tag_policy(raw, &path), matches) {
                rules.push(PolicyRule {
                    matches: matches.to_string(),
                    policy,
                });
            }
        }
        rules
    }

    /// An entry's required `match`: an image glob, compiled now so a typo is named here.
    fn match_glob<'r>(&mut self, path: &str, field: &'r Field<String>) -> Option<&'r str> {
        let matches = self.required_string(path, field);
        if let Some(Err(e)) = matches.map(globset::Glob::new) {
            self.problem(path, format!("invalid glob: {}", e.kind()));
        }
        matches
    }

    /// `images.signatures`: globs, key files, identities and trusted roots are read and checked
    /// now, so a typo or a bad key is a configuration error with its field path, not a refusal
    /// of every digest in the middle of a pass.
    fn signatures(&mut self, field: &List<Known<RawSignature>>) -> Vec<SignatureRule> {
        let mut rules = Vec::new();
        for (i, item) in self
            .list("images.signatures", field, "a list")
            .iter()
            .enumerate()
        {
            let path = format!("images.signatures[{i}]");
            let Some(raw) = self.section(&path, item) else {
                continue;
            };
            let matches = self.match_glob(&join(&path, "match"), &raw.matches);
            let notation = self.notation(&join(&path, "notation"), &raw.notation);
            let signers = self.signers(
                &path,
                (&raw.keys, &raw.keyless, &raw.trusted_root),
                raw.notation.is_written(),
            );
            if let Some(matches) = matches {
                rules.push(SignatureRule {
                    matches: matches.to_string(),
                    notation,
                    ..signers
                });
            }
        }
        rules
    }

    /// Who may sign, as an `images.signatures` or `images.provenance` entry at `path` names
    /// them: `keys` (read and checked), `keyless` identities and a `trusted_root`. The rule's
    /// `matches` is left empty for the caller.
    fn signers(
        &mut self,
        path: &str,
        (keys, keyless, trusted_root): (&List<String>, &List<Known<RawKeyless>>, &Field<String>),
        notation: bool,
    ) -> SignatureRule {
        let keys_path = join(path, "keys");
        let root_path = join(path, "trusted_root");
        let read_keys: Vec<SignatureKey> = self
            .strings(&keys_path, keys)
            .into_iter()
            .enumerate()
            .filter_map(|(j, key)| self.signature_key(&format!("{keys_path}[{j}]"), key))
            .collect();
        let identities = self.keyless(&join(path, "keyless"), keyless);
        let root = self
            .string(&root_path, trusted_root)
            .map(str::to_string)
            .and_then(|file| self.trusted_root(&root_path, file));
        if !keys.is_written() && !keyless.is_written() && !notation {
            self.problem(
                path,
                "needs keys or keyless (who may sign the images it matches)",
            );
        }
        if trusted_root.is_written() && !keyless.is_written() {
            self.problem(&root_path, "only applies to keyless signatures");
        }
        SignatureRule {
            matches: String::new(),
            keys: read_keys,
            keyless: identities,
            trusted_root: root,
            notation: None,
        }
    }

    /// An `images.signatures` entry's `notation`: the trust store's PEM files read and
    /// checked (in a PinnedRepository, keys of the `secret_ref` Secret, read by the
    /// operator), and the identities read as trust policies write them.
    fn notation(&mut self, path: &str, field: &Section<RawNotation>) -> Option<NotationRule> {
        let raw = self.section(path, field)?;
        let store_path = join(path, "trust_store");
        let mut trust_store = Vec::new();
        let files = self.strings(&store_path, &raw.trust_store);
        let empty = "is empty: every Notation signature would be refused";
        if raw.trust_store.is_written() && files.is_empty() {
            self.problem(&store_path, empty);
        }
        for (j, file) in files.into_iter().enumerate() {
            let entry = format!("{store_path}[{j}]");
            if self.origin == Origin::Resource {
                self.secret_key(&entry, &file);
                trust_store.push(SignatureFile {
                    path: file,
                    contents: String::new(),
                });
                continue;
            }
            let Some(read) = self.signature_file(&entry, file) else {
                continue;
            };
            match crate::signature::trust_policy::NotationTrust::compile(&[&read.contents], &[]) {
                Ok(_) => trust_store.push(read),
                Err(e) => self.problem(&entry, format!("{}: {e}", read.path)),
            }
        }
        let ids_path = join(path, "identities");
        let identities = self.strings(&ids_path, &raw.identities);
        if raw.identities.is_written() && identities.is_empty() {
            self.problem(&ids_path, empty);
        }
        for (j, identity) in identities.iter().enumerate() {
            if let Err(e) = crate::signature::trust_policy::Identity::parse(identity) {
                self.problem(&format!("{ids_path}[{j}]"), e.to_string());
            }
        }
        if identities.len() > 1 && identities.iter().any(|i| i.trim() == "*") {
            self.problem(&ids_path, "* trusts every identity and stands alone");
        }
        if !raw.trust_store.is_written() {
            self.problem(
                &store_path,
                "is required (PEM CA certificates the chain must lead to)",
            );
        }
        if !raw.identities.is_written() {
            self.problem(
                &ids_path,
                "is required (x509.subject: C=.., ST=.., O=.., or *)",
            );
        }
        Some(NotationRule {
            trust_store,
            identities,
        })
    }

    /// `images.provenance`: as `images.signatures` for who may sign, and the builder and
    /// source-ref regexes compiled (anchored) now, the source repository required.
    fn provenance(&mut self, field: &List<Known<RawProvenance>>) -> Vec<ProvenanceRule> {
        let mut rules = Vec::new();
        for (i, item) in self
            .list("images.provenance", field, "a list")
            .iter()
            .enumerate()
        {
            let path = format!("images.provenance[{i}]");
            let Some(raw) = self.section(&path, item) else {
                continue;
            };
            let matches = self.match_glob(&join(&path, "match"), &raw.matches);
            let builder = self.anchored_regex(&join(&path, "builder_id"), &raw.builder_id, true);
            let source_path = join(&path, "source_repository");
            let source = self.required_string(&source_path, &raw.source_repository);
            if source.is_some_and(|s| s.ends_with('/') || s.ends_with(".git")) {
                self.problem(
                    &source_path,
                    "the repository's URI without a trailing / or .git (https://github.com/acme/web)",
                );
            }
            let source_ref =
                self.anchored_regex(&join(&path, "source_ref"), &raw.source_ref, false);
            let signers = self.signers(&path, (&raw.keys, &raw.keyless, &raw.trusted_root), false);
            if let (Some(matches), Some(builder), Some(source)) = (matches, builder, source) {
                rules.push(ProvenanceRule {
                    matches: matches.to_string(),
                    builder_id: builder,
                    source_repository: source.to_string(),
                    source_ref,
                    signers: SignatureRule {
                        matches: matches.to_string(),
                        ..signers
                    },
                });
            }
        }
        rules
    }

    /// A regex field, compiled anchored at both ends now so a typo is named with its path;
    /// `required` ones missing are a problem too.
    fn anchored_regex(
        &mut self,
        path: &str,
        field: &Field<String>,
        required: bool,
    ) -> Option<String> {
        let text = match required {
            true => self.required_string(path, field),
            false => self.string(path, field),
        }?;
        if let Err(e) = crate::signature::keys::subject_regex(text) {
            let last_line = e.to_string().lines().last().unwrap_or_default().to_string();
            self.problem(path, format!("invalid regex: {last_line}"));
            return None;
        }
        Some(text.to_string())
    }

    /// `images.minimum_age`: each entry's glob and age are checked now, so a typo is a
    /// configuration error with its field path rather than a digest pinned too young.
    fn minimum_ages(&mut self, field: &List<Known<RawMinimumAge>>) -> Vec<MinimumAgeRule> {
        let mut rules = Vec::new();
        for (i, item) in self
            .list("images.minimum_age", field, "a list")
            .iter()
            .enumerate()
        {
            let path = format!("images.minimum_age[{i}]");
            let Some(raw) = self.section(&path, item) else {
                continue;
            };
            let matches = self.match_glob(&join(&path, "match"), &raw.matches);
            let age_path = join(&path, "age");
            let age = self.duration(&age_path, &raw.age);
            if !raw.age.is_set() {
                self.problem(&age_path, "is required (like 24h)");
            }
            if let (Some(matches), Some(age)) = (matches, age) {
                rules.push(MinimumAgeRule {
                    matches: matches.to_string(),
                    age,
                });
            }
        }
        rules
    }

    /// Reads a file an `images.signatures` entry names, relative to the configuration file.
    fn signature_file(&mut self, path: &str, file: String) -> Option<SignatureFile> {
        let base = self.base.clone()?;
        match std::fs::read_to_string(base.join(&file)) {
            Ok(contents) => Some(SignatureFile {
                path: file,
                contents,
            }),
            Err(e) => {
                self.problem(path, format!("cannot read {file}: {e}"));
                None
            }
        }
    }

    /// One `keys` entry: a PEM public key that the verifier can use. In a PinnedRepository
    /// it names a key of the object's `secret_ref` Secret, read (and checked) by the operator
    /// at each reconcile: its contents are left empty here.
    fn signature_key(&mut self, path: &str, file: String) -> Option<SignatureKey> {
        if self.origin == Origin::Resource {
            return Some(SignatureKey {
                path: file,
                pem: String::new(),
            });
        }
        let read = self.signature_file(path, file)?;
        if let Err(e) = crate::signature::keys::parse_key(&read.contents) {
            self.problem(path, format!("{}: {e}", read.path));
            return None;
        }
        Some(SignatureKey {
            path: read.path,
            pem: read.contents,
        })
    }

    /// `promotion.require_signed_by`: public key files (an OpenSSH public key line, or an
    /// ASCII armoured OpenPGP public key), read and parsed now; in a PinnedRepository each
    /// names a key of the `secret_ref` Secret, read by the operator.
    fn required_signers(&mut self, field: &List<String>) -> Vec<SignatureFile> {
        let path = "promotion.require_signed_by";
        let mut keys = Vec::new();
        for (i, file) in self.strings(path, field).into_iter().enumerate() {
            let path = format!("{path}[{i}]");
            if self.origin == Origin::Resource {
                self.secret_key(&path, &file);
                keys.push(SignatureFile {
                    path: file,
                    contents: String::new(),
                });
                continue;
            }
            let Some(read) = self.signature_file(&path, file) else {
                continue;
            };
            match crate::signing::PublicKey::parse(&read.contents) {
                Ok(_) => keys.push(read),
                Err(e) => self.problem(&path, format!("{}: {e}", read.path)),
            }
        }
        keys
    }

    /// `trusted_root`: a Sigstore `trusted_root.json` the verifier accepts.
    /// In a PinnedRepository it names a key of the `secret_ref` Secret, as `keys` do.
    fn trusted_root(&mut self, path: &str, file: String) -> Option<SignatureFile> {
        if self.origin == Origin::Resource {
            return Some(SignatureFile {
                path: file,
                contents: String::new(),
            });
        }
        let read = self.signature_file(path, file)?;
        if let Err(e) = crate::signature::keys::parse_trusted_root(&read.contents) {
            self.problem(path, format!("{}: {e}", read.path));
            return None;
        }
        Some(read)
    }

    /// `keyless`: each entry's issuer, and its subject regex compiled (anchored) now.
    fn keyless(&mut self, path: &str, field: &List<Known<RawKeyless>>) -> Vec<KeylessIdentity> {
        let mut identities = Vec::new();
        for (j, item) in self.list(path, field, "a list").iter().enumerate() {
            let path = format!("{path}[{j}]");
            let Some(entry): Option<&RawKeyless> = self.section(&path, item) else {
                continue;
            };
            let issuer = self.required_string(&join(&path, "issuer"), &entry.issuer);
            let subject = self.required_string(&join(&path, "subject"), &entry.subject);
            if let Some(subject) = subject {
                if let Err(e) = crate::signature::keys::subject_regex(subject) {
                    let first_line = e.to_string().lines().last().unwrap_or_default().to_string();
                    self.problem(
                        &join(&path, "subject"),
                        format!("invalid regex: {first_line}"),
                    );
                    continue;
                }
            }
            if let (Some(issuer), Some(subject)) = (issuer, subject) {
                identities.push(KeylessIdentity {
                    issuer: issuer.to_string(),
                    subject: subject.to_string(),
                });
            }
        }
        identities
    }

    /// The one policy of a `images.policies` entry: `digest: true` (the default), `semver`,
    /// or `pattern` with `extract` and `order`.
    fn tag_policy(&mut self, raw: &RawPolicy, path: &str) -> Option<TagPolicy> {
        let named = written([
            ("digest", raw.digest.is_written()),
            ("semver", raw.semver.is_written()),
            ("pattern", raw.pattern.is_written()),
        ]);
        if named.len() > 1 {
            self.problem(
                path,
                format!(
                    "set one of digest, semver, pattern, not {}",
                    named.join(" and ")
                ),
            );
            return None;
        }
        let semver = self.string(&join(path, "semver"), &raw.semver);
        let pattern = self.string(&join(path, "pattern"), &raw.pattern);
        let extract = self.string(&join(path, "extract"), &raw.extract);
        let order = self.choice(&join(path, "order"), &raw.order, Order::Alphabetical);
        if pattern.is_none() {
            let keys = [
                ("extract", raw.extract.is_written()),
                ("order", raw.order.is_written()),
            ];
            for key in written(keys) {
                self.problem(&join(path, key), "only applies to a pattern policy");
            }
        }
        if !matches!(raw.digest, Field::Absent | Field::Ok(true)) {
            self.problem(&join(path, "digest"), "expected true");
        }
        if let Some(range) = semver {
            if let Err(e) = semver::VersionReq::parse(range) {
                self.problem(&join(path, "semver"), format!("invalid semver range: {e}"));
                return None;
            }
            return Some(TagPolicy::Semver {
                range: range.to_string(),
            });
        }
        if let Some(pattern) = pattern {
            if let Err(e) = regex::Regex::new(pattern) {
                let first_line = e.to_string().lines().last().unwrap_or_default().to_string();
                self.problem(
                    &join(path, "pattern"),
                    format!("invalid regex: {first_line}"),
                );
                return None;
            }
            return Some(TagPolicy::Pattern {
                pattern: pattern.to_string(),
                extract: extract.unwrap_or("$0").to_string(),
                order,
            });
        }
        Some(TagPolicy::Digest)
    }

    fn helm(&mut self, field: &Section<RawHelm>) -> super::model::Helm {
        let p = "helm";
        let raw = self.optional(p, field);
        let values_files = self.strings(&join(p, "values_files"), &raw.values_files);
        self.globs(&join(p, "values_files"), &values_files);
        super::model::Helm {
            values_files,
            digest: self.choice(
                &join(p, "digest"),
                &raw.digest,
                crate::manifest::DigestMode::Tag,
            ),
        }
    }

    fn registries(&mut self, field: &Section<RawRegistries>) -> Registries {
        let p = "registries";
        let raw = self.optional(p, field);
        self.file_only(
            &join(p, "docker_config"),
            raw.docker_config.is_written(),
            "takes docker_config_secret_ref",
        );
        self.file_only(
            &join(p, "ca_files"),
            raw.ca_files.is_written(),
            "uses the CA files given to the controller (--ca-file)",
        );
        self.resource_only(
            &join(p, "docker_config_secret_ref"),
            raw.docker_config_secret_ref.is_written(),
            "docker_config",
        );
        let docker_config_secret = match self.origin {
            Origin::Resource => self.local_ref(
                &join(p, "docker_config_secret_ref"),
                &raw.docker_config_secret_ref,
            ),
            Origin::File => None,
        };
        Registries {
            docker_config_secret,
            insecure: self.strings(&join(p, "insecure"), &raw.insecure),
            ca_files: self
                .strings(&join(p, "ca_files"), &raw.ca_files)
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            docker_config: self
                .string(&join(p, "docker_config"), &raw.docker_config)
                .map(PathBuf::from),
            concurrency: self
                .number(&join(p, "concurrency"), &raw.concurrency, 1, 256)
                .map_or(crate::registry::DEFAULT_CONCURRENCY_PER_HOST, |n| {
                    n as usize
                }),
            timeout_seconds: self
                .number(&join(p, "timeout_seconds"), &raw.timeout_seconds, 1, 3600)
                .unwrap_or(DEFAULT_TIMEOUT_SECONDS),
            budget_seconds: self
                .number(&join(p, "budget_seconds"), &raw.budget_seconds, 1, 3600)
                .unwrap_or(crate::registry::DEFAULT_RESOLVE_BUDGET.as_secs()),
        }
    }

    fn pull_request(&mut self, field: &Section<RawPullRequest>) -> PullRequest {
        let p = "pull_request";
        let raw = self.optional(p, field);
        let grouping = self.choice(&join(p, "grouping"), &raw.grouping, Grouping::Single);
        let title = self
            .string(&join(p, "title"), &raw.title)
            .unwrap_or(DEFAULT_PR_TITLE);
        self.template(&join(p, "title"), title);
        let labels = if raw.labels.is_written() {
            self.strings(&join(p, "labels"), &raw.labels)
        } else {
            vec!["tagpin".to_string()]
        };
        let prefix = self.string(&join(p, "branch_prefix"), &raw.branch_prefix);
        if let Some(prefix) = prefix.filter(|prefix| !valid_branch_name(&format!("{prefix}x"))) {
            self.problem(
                &join(p, "branch_prefix"),
                format!("{prefix:?} cannot start a branch name"),
            );
        }
        PullRequest {
            grouping,
            title: title.to_string(),
            labels,
            branch_prefix: prefix.unwrap_or(DEFAULT_BRANCH_PREFIX).to_string(),
        }
    }

    fn verify(&mut self, field: &Section<RawVerify>) -> Verify {
        let p = "verify";
        let raw = self.optional(p, field);
        let mut text = |key, field| self.string(&join(p, key), field).map(str::to_string);
        let default_namespace = text("default_namespace", &raw.default_namespace);
        let name_prefix = text("name_prefix", &raw.name_prefix);
        let name_suffix = text("name_suffix", &raw.name_suffix);
        let context = text("context", &raw.context);
        let on_failure = self.choice(&join(p, "on_failure"), &raw.on_failure, OnFailure::Report);
        self.file_only(
            "verify.context",
            raw.context.is_written(),
            "verifies on the controller's own cluster, or a stage's \
             cluster.kubeconfig_secret_ref",
        );
        let gitops = self
            .section("verify.gitops", &raw.gitops)
            .map(|gitops| GitOpsObjects {
                applications: self.object_names("verify.gitops.applications", &gitops.applications),
                kustomizations: self
                    .object_names("verify.gitops.kustomizations", &gitops.kustomizations),
            });
        Verify {
            default_namespace: default_namespace.unwrap_or_else(|| "default".to_string()),
            name_prefix: name_prefix.unwrap_or_default(),
            name_suffix: name_suffix.unwrap_or_default(),
            context,
            gitops: gitops.unwrap_or_default(),
            on_failure,
        }
    }

    fn object_names(&mut self, path: &str, field: &List<String>) -> Vec<ObjectName> {
        let mut names = Vec::new();
        for (i, text) in self.strings(path, field).iter().enumerate() {
            match ObjectName::parse(text) {
                Some(name) => names.push(name),
                None => self.problem(
                    &format!("{path}[{i}]"),
                    format!("expected namespace/name, found {text:?}"),
                ),
            }
        }
        names
    }

    /// `promotion`: the stages in promotion order. `mode` is the top-level write mode (the
    /// first stage's writes follow it); `has_forge` whether a `forge` section is present.
    fn promotion(
        &mut self,
        field: &Section<RawPromotion>,
        mode: WriteMode,
        has_forge: bool,
    ) -> Option<Promotion> {
        let raw = self.section("promotion", field)?;
        let path = "promotion.stages";
        let items = match &raw.stages {
            Field::Ok(items) => items,
            Field::Absent | Field::Null => {
                self.problem(path, "is required");
                return None;
            }
            other => {
                self.wrong(path, "a list of stages", other);
                return None;
            }
        };
        if items.len() < 2 {
            self.problem(
                path,
                format!(
                    "needs at least two stages, found {}: the first is pinned from the registry, \
                     each later one is promoted from the one before it",
                    items.len()
                ),
            );
        }
        let mut stages = Vec::new();
        let mut complete = true;
        let mut by_pull_request = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match self.stage(item, i, mode, &mut by_pull_request) {
                Some(stage) => stages.push((i, stage)),
                None => complete = false,
            }
        }
        if !has_forge && !by_pull_request.is_empty() {
            let verb = if by_pull_request.len() == 1 {
                "is"
            } else {
                "are"
            };
            self.problem(
                "forge",
                format!(
                    "is required when {} {verb} pull-request (the default for a stage promoted \
                     into; set mode: commit to promote by commit)",
                    by_pull_request.join(" and ")
                ),
            );
        }
        if !has_forge {
            for (i, stage) in stages.iter().filter(|(_, s)| !s.soak.is_zero()) {
                self.problem(
                    &format!("{path}[{i}].soak"),
                    format!(
                        "needs a forge: section: tagpin keeps no state of its own and reads when \
                         the previous stage converged back from the commit statuses it sets \
                         there (stage {:?})",
                        stage.name
                    ),
                );
            }
        }
        self.distinct_stages(path, &stages);
        let require_signed_by = self.required_signers(&raw.require_signed_by);
        (complete && stages.len() >= 2).then(|| Promotion {
            stages: stages.into_iter().map(|(_, stage)| stage).collect(),
            require_signed_by,
        })
    }

    /// Stages whose names repeat, or whose paths overlap, each named at its field.
    fn distinct_stages(&mut self, path: &str, stages: &[(usize, Stage)]) {
        for (a, (i, stage)) in stages.iter().enumerate() {
            if let Some((j, _)) = stages[..a].iter().find(|(_, s)| s.name == stage.name) {
                self.problem(
                    &format!("{path}[{i}].name"),
                    format!(
                        "{:?} is also the name of stages[{j}]: names must be unique, since a \
                         stage repeated in the order would promote into itself (a cycle)",
                        stage.name
                    ),
                );
            }
        }
        for (b, (i, later)) in stages.iter().enumerate() {
            for (j, earlier) in &stages[..b] {
                for (k, later_path) in later.paths.iter().enumerate() {
                    for (l, earlier_path) in earlier.paths.iter().enumerate() {
                        if paths_overlap(earlier_path, later_path) {
                            self.problem(
                                &format!("{path}[{i}].paths[{k}]"),
                                format!(
                                    "{later_path:?} of stage {:?} overlaps {earlier_path:?} of \
                                     stage {:?} (stages[{j}].paths[{l}]): each file belongs to \
                                     one stage, or promoting into one would rewrite the other",
                                    later.name, earlier.name
                                ),
                            );
                        }
                    }
                }
            }
        }
    }

    /// `promotion.stages[i]`. The first stage is pinned from the registry, not promoted into:
    /// it takes no `soak` or `mode`, and its writes follow the top-level `mode`.
    /// The field of each stage promoted into by pull request is added to `by_pull_request`.
    fn stage(
        &mut self,
        field: &Section<RawStage>,
        i: usize,
        mode: WriteMode,
        by_pull_request: &mut Vec<String>,
    ) -> Option<Stage> {
        let path = format!("promotion.stages[{i}]");
        let raw = self.section(&path, field)?;
        let name = self.required_string(&join(&path, "name"), &raw.name);
        if let Some(name) = name {
            if let Some(reason) = invalid_stage_name(name) {
                self.problem(
                    &join(&path, "name"),
                    format!(
                        "{name:?} {reason}: it names the branch tagpin/promote/<name> and a \
                         status context, so use lowercase letters, digits, '-', '_' and '.', \
                         starting with a letter or digit, at most {MAX_STAGE_NAME} characters"
                    ),
                );
            }
        }
        let paths_path = join(&path, "paths");
        let paths = self.relative_paths(&paths_path, &raw.paths);
        match &raw.paths {
            Field::Absent | Field::Null => self.problem(&paths_path, "is required"),
            Field::Ok(items) if items.is_empty() => self.problem(
                &paths_path,
                "must list at least one directory or file of this stage",
            ),
            _ => {}
        }
        let cluster = self.cluster_target(&join(&path, "cluster"), &raw.cluster);
        let (soak, soak_restarts, on_failure, stage_mode) = if i == 0 {
            let keys = [
                ("soak", raw.soak.is_written()),
                ("soak_restarts", raw.soak_restarts.is_written()),
                ("mode", raw.mode.is_written()),
                ("on_failure", raw.on_failure.is_written()),
            ];
            for key in written(keys) {
                self.problem(
                    &join(&path, key),
                    "the first stage is pinned from the registry by sync, not promoted into: \
                     soak, soak_restarts, mode and on_failure apply to the stages promoted \
                     into; its writes follow the top-level mode and verify.on_failure",
                );
            }
            (Duration::ZERO, None, None, mode)
        } else {
            let soak = self.duration(&join(&path, "soak"), &raw.soak);
            let restarts_path = join(&path, "soak_restarts");
            let soak_restarts = self
                .number(&restarts_path, &raw.soak_restarts, 0, u64::from(u32::MAX))
                .and_then(|n| u32::try_from(n).ok());
            if soak_restarts.is_some() && soak.unwrap_or_default().is_zero() {
                self.problem(
                    &restarts_path,
                    "counts container restarts during the soak: set soak as well",
                );
            }
            let on_failure = raw.on_failure.is_written().then(|| {
                self.choice(
                    &join(&path, "on_failure"),
                    &raw.on_failure,
                    OnFailure::Report,
                )
            });
            let stage_mode = self.choice(&join(&path, "mode"), &raw.mode, WriteMode::PullRequest);
            if stage_mode == WriteMode::PullRequest {
                by_pull_request.push(format!("{path}.mode"));
            }
            (
                soak.unwrap_or_default(),
                soak_restarts,
                on_failure,
                stage_mode,
            )
        };
        Some(Stage {
            name: name?.to_string(),
            paths,
            cluster,
            soak,
            soak_restarts,
            on_failure,
            mode: stage_mode,
        })
    }

    /// `cluster` of a stage: absent for the default, else exactly one of `context`,
    /// `kubeconfig` (with an optional `context` of that file) and `in_cluster: true`.
    fn cluster_target(&mut self, path: &str, field: &Section<RawCluster>) -> ClusterTarget {
        if !field.is_set() {
            return ClusterTarget::Default;
        }
        let Some(raw) = self.section(path, field) else {
            return ClusterTarget::Default;
        };
        let context = self.string(&join(path, "context"), &raw.context);
        let kubeconfig = self.string(&join(path, "kubeconfig"), &raw.kubeconfig);
        let instead = "takes kubeconfig_secret_ref or in_cluster";
        self.file_only(&join(path, "context"), raw.context.is_written(), instead);
        self.file_only(
            &join(path, "kubeconfig"),
            raw.kubeconfig.is_written(),
            instead,
        );
        self.resource_only(
            &join(path, "kubeconfig_secret_ref"),
            raw.kubeconfig_secret_ref.is_written(),
            "kubeconfig",
        );
        if self.origin == Origin::Resource {
            let secret = self.secret_key_ref(
                &join(path, "kubeconfig_secret_ref"),
                &raw.kubeconfig_secret_ref,
            );
            let in_cluster = self.only_true(
                &join(path, "in_cluster"),
                &raw.in_cluster,
                "expected true (omit cluster for the controller's own cluster)",
            );
            return match (secret, in_cluster) {
                (Some(_), true) => {
                    self.problem(
                        path,
                        "set one of kubeconfig_secret_ref, in_cluster, not both",
                    );
                    ClusterTarget::Default
                }
                (Some((name, key)), false) => ClusterTarget::KubeconfigSecret { name, key },
                (None, true) => ClusterTarget::InCluster,
                (None, false) => ClusterTarget::Default,
            };
        }
        let in_cluster = self.only_true(
            &join(path, "in_cluster"),
            &raw.in_cluster,
            "expected true (omit cluster for the default kubeconfig context)",
        );
        let named = written([
            ("context", raw.context.is_written()),
            ("kubeconfig", raw.kubeconfig.is_written()),
            ("in_cluster", raw.in_cluster.is_written()),
        ]);
        if named.is_empty() {
            self.problem(
                path,
                "set one of context, kubeconfig, in_cluster (omit cluster for the default \
                 kubeconfig context)",
            );
        } else if named.contains(&"in_cluster") && named.len() > 1 {
            self.problem(
                path,
                format!(
                    "set one of context, kubeconfig, in_cluster, not {}",
                    named.join(" and ")
                ),
            );
        }
        match (kubeconfig, context, in_cluster) {
            (Some(file), context, false) => ClusterTarget::Kubeconfig {
                path: PathBuf::from(file),
                context: context.map(str::to_string),
            },
            (None, Some(context), false) => ClusterTarget::Context(context.to_string()),
            (None, None, true) => ClusterTarget::InCluster,
            _ => ClusterTarget::Default,
        }
    }

    /// `signing`: whether `author.signing` is set, which `forge.api_commits` excludes.
    fn forge(&mut self, field: &Section<RawForge>, signing: bool) -> Option<Forge> {
        let raw = self.section("forge", field)?;
        let kind = self.string("forge.kind", &raw.kind).unwrap_or("github");
        let section = crate::forge::section(kind).unwrap_or_else(|| {
            let kinds = crate::forge::kinds();
            self.problem("forge.kind", format!("expected {kinds}, found {kind:?}"));
            &crate::forge::github::SECTION
        });
        let api_url = match section.default_api_url {
            Some(default) => Some(
                self.string("forge.api_url", &raw.api_url)
                    .unwrap_or(default),
            ),
            None => self.required_string("forge.api_url", &raw.api_url),
        };
        if let Some(api_url) = api_url {
            if url::Url::parse(api_url)
                .map(|u| !matches!(u.scheme(), "http" | "https"))
                .unwrap_or(true)
            {
                self.problem(
                    "forge.api_url",
                    format!("{api_url:?} is not an http(s) URL"),
                );
            }
            // The forge always carries a token.
            self.token_transport("forge.api_url", api_url);
        }
        let mut keys = ForgeKeys { check: self, raw };
        let kind = crate::forge::read_repository(section, &mut keys, api_url)?;
        let token_env = self.required_string("forge.token_env", &raw.token_env);
        if let Some(env) = token_env {
            self.secret_name("forge.token_env", env);
        }
        let login = self.string("forge.login", &raw.login).map(str::to_string);
        let username_env = self
            .string("forge.username_env", &raw.username_env)
            .map(str::to_string);
        if let Some(env) = &username_env {
            if section.takes_username {
                self.secret_name("forge.username_env", env);
            } else {
                let elsewhere = crate::forge::bitbucket::USERNAME_ELSEWHERE;
                self.problem("forge.username_env", elsewhere);
            }
        }
        let timeout_seconds = self
            .number("forge.timeout_seconds", &raw.timeout_seconds, 1, 3600)
            .unwrap_or(DEFAULT_FORGE_TIMEOUT_SECONDS);
        let api_commits = self.api_commits(&raw.api_commits, section.kind, signing);
        Some(Forge {
            kind,
            api_commits,
            api_url: api_url?.to_string(),
            token_env: token_env?.to_string(),
            login,
            username_env,
            timeout_seconds,
        })
    }
}

impl Check {
    /// `forge.api_commits`: a boolean, and only where the forge makes commits (GitHub).
    fn api_commits(&mut self, field: &Field<bool>, kind: &str, signing: bool) -> bool {
        let path = "forge.api_commits";
        let on = match field {
            Field::Ok(on) => *on,
            Field::Absent | Field::Null => false,
            other => {
                self.wrong(path, "true or false", other);
                false
            }
        };
        if on && kind != crate::forge::github::SECTION.kind {
            self.problem(
                path,
                "commits through the forge's API are GitHub's only (kind: github)",
            );
        }
        if on && signing {
            self.problem(
                path,
                "GitHub signs the commits it makes through its API; author.signing signs the commits tagpin makes itself: set one of the two",
            );
        }
        on
    }
}

/// The keys of the `forge:` section as its adapter reads them ([`crate::forge::settings::Keys`]):
/// through the same checks as every other key, problems reported at their paths.
struct ForgeKeys<'c, 'r> {
    check: &'c mut Check,
    raw: &'r RawForge,
}

/// The raw field at `key`; the adapters read only the keys that name a repository.
fn forge_field<'r>(raw: &'r RawForge, key: &str) -> &'r Field<String> {
    match key {
        "forge.owner" => &raw.owner,
        "forge.repo" => &raw.repo,
        "forge.project" => &raw.project,
        "forge.workspace" => &raw.workspace,
        _ => &Field::Absent,
    }
}

impl crate::forge::settings::Keys for ForgeKeys<'_, '_> {
    fn required(&mut self, key: &str) -> Option<String> {
        let field = forge_field(self.raw, key);
        self.check.required_string(key, field).map(str::to_string)
    }

    fn is_set(&self, key: &str) -> bool {
        forge_field(self.raw, key).is_set()
    }

    fn problem(&mut self, key: &str, message: &str) {
        self.check.problem(key, message);
    }
}

impl Check {
    /// `{name, key}` of a Secret of the resource's namespace; `key` defaults to `kubeconfig`.
    fn secret_key_ref(
        &mut self,
        path: &str,
        field: &Section<RawSecretKeyRef>,
    ) -> Option<(String, String)> {
        let raw = self.section(path, field)?;
        let name = self.required_string(&join(path, "name"), &raw.name);
        if let Some(name) = name {
            self.object_name(&join(path, "name"), name);
        }
        let key = self
            .string(&join(path, "key"), &raw.key)
            .unwrap_or(DEFAULT_KUBECONFIG_KEY);
        self.secret_key(&join(path, "key"), key);
        Some((name?.to_string(), key.to_string()))
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The kind of value a field holds that is not what was expected: only the kind, since the
/// value may be a secret pasted in by mistake.
fn found<T>(field: &Field<T>) -> &'static str {
    match field {
        Field::Wrong { found, .. } => kind_of(found),
        _ => "nothing",
    }
}

/// A number where one was expected is shown (`found -1`); anything else by its kind only.
fn describe(found: &Value) -> String {
    match found {
        Value::Number(n) => n.to_string(),
        other => kind_of(other).to_string(),
    }
}

/// Which of `keys` are written, for rules that allow only one.
fn written<const N: usize>(keys: [(&'static str, bool); N]) -> Vec<&'static str> {
    keys.into_iter()
        .filter_map(|(key, written)| written.then_some(key))
        .collect()
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::Config;

    fn problems_of(text: &str) -> Vec<String> {
        Config::parse(text, Path::new("tagpin.yaml"))
            .unwrap_err()
            .problems
    }

    #[test]
    fn a_tagged_value_is_refused_wherever_it_is() {
        // The hand walk read through a tag in lists and mappings but not in scalars; a tag is
        // never meant in tagpin.yaml, so it is named wherever it is.
        let problems = problems_of(concat!(
            "repository: !git {url: /srv/git/gitops.git}\n",
            "paths: [!dir apps]\n",
            "mode: !mode commit\n",
        ));
        assert_eq!(
            problems,
            [
                "tagpin.yaml:1:1: repository: expected a mapping, found a tagged value",
                "tagpin.yaml:2:14: paths[0]: expected a non-empty string, found a tagged value",
                "tagpin.yaml:3:1: mode: expected a string, found a tagged value",
            ]
        );
    }

    #[test]
    fn a_number_of_the_wrong_kind_is_told_its_range() {
        let problems = problems_of(concat!(
            "repository: {url: /srv/git/gitops.git}\n",
            "registries: {concurrency: eight, timeout_seconds: 1.5}\n",
            "mode: ''\n",
        ));
        assert_eq!(
            problems,
            [
                "tagpin.yaml:2:14: registries.concurrency: expected a whole number from 1 to 256, found a string",
                "tagpin.yaml:2:34: registries.timeout_seconds: expected a whole number from 1 to 3600, found 1.5",
                "tagpin.yaml:3:1: mode: expected one of commit, pull-request, found \"\"",
            ]
        );
    }
}
