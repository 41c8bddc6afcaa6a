//! Kubeconfig files as tagpin reads them: a context chosen by name, with errors that say which
//! contexts the file has instead of kube's bare "not found", and the check that a kubeconfig
//! a tenant hands the operator (in a Secret) cannot make it run a command, read one of its
//! files or send a token in the clear.

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// The client configuration for `context` of `kubeconfig` (its current context when `None`).
/// A missing context is reported with the contexts the file does have.
pub(super) async fn from_kubeconfig(
    kubeconfig: Kubeconfig,
    context: Option<&str>,
) -> Result<kube::Config, ContextError> {
    let known: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| match e {
            KubeconfigError::LoadContext(name) => ContextError::NotFound {
                // A named context is in the target already; the current one is not.
                current: context.is_none().then_some(name),
                known,
            },
            KubeconfigError::CurrentContextNotSet => ContextError::NotSet,
            e => ContextError::Kube(e),
        })
}

/// Why a kubeconfig's context cannot be used.
#[derive(Debug, thiserror::Error)]
pub(super) enum ContextError {
    /// `current`: the file's current-context, when that is the one missing (a context the
    /// target names is in the target's own words already); `known`: the contexts it has.
    #[error("{}", context_not_found(.current.as_deref(), .known))]
    NotFound {
        current: Option<String>,
        known: Vec<String>,
    },
    #[error("no current-context is set; name one (cluster.context)")]
    NotSet,
    #[error(transparent)]
    Kube(KubeconfigError),
}

fn context_not_found(current: Option<&str>, known: &[String]) -> String {
    let missing = match current {
        None => "context not found".to_string(),
        Some(name) => format!("current-context {name:?} not found"),
    };
    if known.is_empty() {
        format!("{missing}: the kubeconfig has no contexts")
    } else {
        format!("{missing} (the kubeconfig has {})", known.join(", "))
    }
}

/// A kubeconfig that could not be read, without kube's repetition of the path (the target
/// names it already).
#[derive(Debug, thiserror::Error)]
pub(super) enum UnreadKubeconfig {
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    #[error(transparent)]
    Kube(KubeconfigError),
}

pub(super) fn read_error(e: KubeconfigError) -> UnreadKubeconfig {
    match e {
        KubeconfigError::ReadConfig(source, _) => UnreadKubeconfig::Read(source),
        e => UnreadKubeconfig::Kube(e),
    }
}

/// Checks that a kubeconfig from a Secret carries everything inline. Whoever may write a
/// Secret and a `PinnedRepository` in a namespace must not make the controller run a command
/// (`exec`, `auth-provider` plugins) or read one of its own files (`tokenFile`,
/// `client-certificate`, `client-key`, `certificate-authority` paths: the controller's
/// service account token could be sent to a server of their choosing). Nor may a cluster be
/// served over plain `http://` beyond loopback: its token would cross the network in the
/// clear, and whoever sits on the way could answer for the cluster. Every problem is named
/// with its user or cluster; tokens, `*-data` fields, usernames and passwords are fine.
pub fn self_contained(bytes: &[u8]) -> Result<(), UnsafeKubeconfig> {
    let text = std::str::from_utf8(bytes).map_err(|_| UnsafeKubeconfig::NotText)?;
    let kubeconfig =
        Kubeconfig::from_yaml(text).map_err(|e| UnsafeKubeconfig::NotKubeconfig(e.to_string()))?;
    let mut problems = Vec::new();
    for named in &kubeconfig.auth_infos {
        let Some(user) = &named.auth_info else {
            continue;
        };
        let fields = [
            ("exec", user.exec.is_some()),
            ("auth-provider", user.auth_provider.is_some()),
            ("tokenFile", user.token_file.is_some()),
            ("client-certificate", user.client_certificate.is_some()),
            ("client-key", user.client_key.is_some()),
        ];
        for (field, set) in fields {
            if set {
                problems.push(format!("user {:?} sets {field}", named.name));
            }
        }
    }
    for named in &kubeconfig.clusters {
        if named
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            problems.push(format!(
                "cluster {:?} sets certificate-authority",
                named.name
            ));
        }
    }
    let plain: Vec<String> = kubeconfig
        .clusters
        .iter()
        .filter(|named| {
            named
                .cluster
                .as_ref()
                .and_then(|c| c.server.as_deref())
                .is_some_and(plain_beyond_loopback)
        })
        .map(|named| format!("cluster {:?}", named.name))
        .collect();
    let mut said = Vec::new();
    if !problems.is_empty() {
        said.push(format!(
            "a kubeconfig from a Secret may not run commands nor read the controller's files \
             ({}); use a token or the *-data fields inline",
            problems.join(", ")
        ));
    }
    if !plain.is_empty() {
        said.push(format!(
            "a kubeconfig from a Secret may not reach a server over plain http:// beyond \
             loopback ({}); use https://",
            plain.join(", ")
        ));
    }
    match said.is_empty() {
        true => Ok(()),
        false => Err(UnsafeKubeconfig::Refused(said.join("; "))),
    }
}

/// Why a kubeconfig from a Secret is not used ([`self_contained`]).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeKubeconfig {
    #[error("not UTF-8 text")]
    NotText,
    /// kube's reason (its error is not comparable, so its message is kept).
    #[error("not a kubeconfig: {0}")]
    NotKubeconfig(String),
    /// Every field that runs a command, reads the controller's files or reaches a server in
    /// the clear, each named with its user or cluster.
    #[error("{0}")]
    Refused(String),
}

/// A `server` tagpin would reach in the clear over a network: `http://` to anything but
/// loopback (where tests and local demo clusters run). A server that is not a URL is left to
/// kube, which refuses it.
fn plain_beyond_loopback(server: &str) -> bool {
    url::Url::parse(server)
        .is_ok_and(|url| url.scheme() == "http" && !crate::config::is_loopback_url(server))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INLINE: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: https://prod.example:6443\n    certificate-authority-data: Zm9v\nusers:\n- name: tagpin\n  user:\n    token: abc\ncontexts:\n- name: prod\n  context: {cluster: prod, user: tagpin}\ncurrent-context: prod\n";

    #[test]
    fn a_kubeconfig_with_everything_inline_is_accepted() {
        assert_eq!(self_contained(INLINE.as_bytes()), Ok(()));
    }

    #[test]
    fn a_kubeconfig_that_runs_a_command_or_reads_a_file_of_the_controller_is_refused() {
        let exec = INLINE.replace(
            "    token: abc\n",
            "    exec: {apiVersion: client.authentication.k8s.io/v1, command: sh, args: [-c, id]}\n",
        );
        let why = self_contained(exec.as_bytes()).unwrap_err().to_string();
        assert!(why.contains("user \"tagpin\" sets exec"), "{why}");
        let files = INLINE
            .replace(
                "    token: abc\n",
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n    client-key: /etc/key\n",
            )
            .replace(
                "    certificate-authority-data: Zm9v\n",
                "    certificate-authority: /etc/ca.crt\n",
            );
        let why = self_contained(files.as_bytes()).unwrap_err().to_string();
        for named in [
            "user \"tagpin\" sets tokenFile",
            "user \"tagpin\" sets client-key",
            "cluster \"prod\" sets certificate-authority",
        ] {
            assert!(why.contains(named), "{why}");
        }
        let provider = INLINE.replace("    token: abc\n", "    auth-provider: {name: gcp}\n");
        assert!(self_contained(provider.as_bytes())
            .unwrap_err()
            .to_string()
            .contains("sets auth-provider"));
    }

    #[test]
    fn a_kubeconfig_reaching_its_server_in_the_clear_beyond_loopback_is_refused() {
        let plain = INLINE.replace("https://prod.example:6443", "http://prod.example:6443");
        let why = self_contained(plain.as_bytes()).unwrap_err().to_string();
        assert!(
            why.contains("plain http:// beyond loopback (cluster \"prod\")"),
            "{why}"
        );
        for internal in [
            "http://10.0.0.1:8080/admin",
            "http://0.0.0.0:6443",
            "http://[fd00::1]",
        ] {
            let plain = INLINE.replace("https://prod.example:6443", internal);
            assert!(self_contained(plain.as_bytes()).is_err(), "{internal}");
        }
        for loopback in [
            "http://127.0.0.1:6443",
            "http://localhost:8080",
            "http://[::1]:1",
        ] {
            let local = INLINE.replace("https://prod.example:6443", loopback);
            assert_eq!(self_contained(local.as_bytes()), Ok(()), "{loopback}");
        }
    }

    #[test]
    fn what_is_not_a_kubeconfig_says_so() {
        assert!(self_contained(b"\xff\xfe")
            .unwrap_err()
            .to_string()
            .contains("UTF-8"));
        assert!(self_contained(b"clusters: 3")
            .unwrap_err()
            .to_string()
            .starts_with("not a kubeconfig"));
    }
}
