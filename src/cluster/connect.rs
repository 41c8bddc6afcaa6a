//! Every kube client tagpin builds, and what bounds it.
//!
//! kube sets no read timeout and no cap on an answer by default, and retries for up to
//! 1000 s: right for a controller that runs forever against its own cluster, wrong for a
//! verdict someone waits on, or for an API server a tenant names. Each client here is given
//! a timeout without progress, a total deadline per request (watches aside) and a cap on the
//! answer ([`crate::bounded`]), so no caller can forget one.

use std::sync::Arc;
use std::time::Duration;

use kube::config::Kubeconfig;

use super::error::ClusterError;
use super::handle::{Cluster, Server, ServiceAccount};
use super::kubeconfig::{from_kubeconfig, read_error};
use crate::config::ClusterTarget;

/// How long one request to the Kubernetes API may go without progress, by default: to connect
/// (TCP and TLS), to send, and between two reads of the answer. A list of 500 objects starts
/// answering within a second on a healthy API server; a hung one never does.
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest answer read from a Kubernetes API server. A page of 500 pods (see `list.rs`) is
/// about 10 MB with `managedFields` (pods of 5 to 20 KB); Argo CD Applications listing many
/// resources run to 100 KB each. 64 MiB holds a page of 500 objects of 128 KB, and keeps a
/// server that answers without end (a stage kubeconfig's `server` is a tenant's to choose) to
/// that much memory per request. See [`crate::bounded`].
pub const MAX_ANSWER_BYTES: usize = 64 * crate::bounded::MIB;

/// How long one request (watches aside) may take in all, from sending it to the last byte of
/// its answer, as a multiple of the timeout without progress: a server that sends a byte just
/// within each read timeout would otherwise hold a check for as long as it likes. Twice the
/// timeout leaves a large answer on a slow link the time it needs, and keeps the read timeout
/// the first to end a silent server.
pub const DEADLINE_PER_TIMEOUT: u32 = 2;

impl Cluster {
    /// Connects as kube does by default (kubeconfig, else in-cluster), with `context` chosen
    /// from the kubeconfig when given. Each request gives up after `timeout` without progress.
    pub async fn connect(
        context: Option<&str>,
        timeout: Duration,
    ) -> Result<Cluster, ClusterError> {
        let target = match context {
            Some(context) => ClusterTarget::Context(context.to_string()),
            None => ClusterTarget::Default,
        };
        Cluster::connect_to(&target, timeout).await
    }

    /// Connects to `target` (a promotion stage's `cluster`). Errors name the target: with
    /// several clusters configured, "context not found" alone does not say which one.
    ///
    /// kube sets no read timeout by default, so an API server that accepts a connection and
    /// never answers would hold a check (and the controller's loop) forever. Here connecting,
    /// sending and each wait for more of the answer give up after `timeout`; the read timeout
    /// counts from the request sent, not from when a pooled connection went idle. A read
    /// timeout does not bound a server that keeps sending a byte now and then, so every
    /// request but a watch must also end, answer included, within [`DEADLINE_PER_TIMEOUT`]
    /// times `timeout`, and every answer (watches too) is cut at [`MAX_ANSWER_BYTES`].
    pub async fn connect_to(
        target: &ClusterTarget,
        timeout: Duration,
    ) -> Result<Cluster, ClusterError> {
        let failed =
            |message: &dyn std::fmt::Display| ClusterError::Config(format!("{target}: {message}"));
        let mut config = match target {
            ClusterTarget::Default => kube::Config::infer().await.map_err(|e| failed(&e))?,
            ClusterTarget::Context(context) => {
                let kubeconfig = Kubeconfig::read().map_err(|e| failed(&read_error(e)))?;
                from_kubeconfig(kubeconfig, Some(context))
                    .await
                    .map_err(|e| failed(&e))?
            }
            ClusterTarget::Kubeconfig { path, context } => {
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| failed(&read_error(e)))?;
                from_kubeconfig(kubeconfig, context.as_deref())
                    .await
                    .map_err(|e| failed(&e))?
            }
            ClusterTarget::InCluster => kube::Config::incluster().map_err(|e| failed(&e))?,
            // Only a PinnedRepository names one, and the operator reads the Secret first.
            ClusterTarget::KubeconfigSecret { .. } => {
                return Err(failed(
                    &"a kubeconfig Secret is read by `tagpin operator` only",
                ))
            }
        };
        // kube's default retry waits up to 1000 s over 15 attempts: right for a controller
        // that runs forever, not for a verdict someone is waiting on. tagpin retries itself,
        // bounded (see [`super::retrying`] and `--wait`).
        config.default_retry = false;
        config.connect_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
        Cluster::with_config(config, timeout, None).map_err(|e| failed(&e))
    }

    /// The same API server, reached with the same credentials, timeouts and retry settings,
    /// with every request impersonating `account` (`Impersonate-User:
    /// system:serviceaccount:<namespace>:<name>`; the API server adds the ServiceAccount's
    /// groups itself). The credentials must hold `impersonate` on that ServiceAccount, and
    /// what the ServiceAccount may read is then all this cluster sees.
    pub fn impersonating(&self, account: ServiceAccount) -> Result<Cluster, ClusterError> {
        let mut config = kube::Config::clone(&self.config);
        config.auth_info.impersonate = Some(account.user());
        // Only the user: groups, a uid or extras would need `impersonate` on those too.
        config.auth_info.impersonate_groups = None;
        config.auth_info.impersonate_uid = None;
        config.auth_info.impersonate_user_extra = None;
        let cluster = Cluster::with_config(config, self.server.timeout, Some(account.clone()))
            .map_err(|e| {
                ClusterError::Config(format!("impersonating ServiceAccount {account}: {e}"))
            })?;
        Ok(match &self.shared_lists {
            Some(lists) => cluster.sharing_lists(lists.max_age()),
            None => cluster,
        })
    }

    /// The clients of `config` (its connect and write timeouts set): one whose reads give up
    /// after `timeout` without progress, one for watches without a read timeout.
    fn with_config(
        config: kube::Config,
        timeout: Duration,
        acting_as: Option<ServiceAccount>,
    ) -> Result<Cluster, kube::Error> {
        let base = Arc::new(config.clone());
        let mut config = config;
        // A watch is quiet by design: [`Cluster::wait_for_change`] ends it itself.
        let watch_client = bounded_client(config.clone(), None)?;
        config.read_timeout = Some(timeout);
        config.reset_reader_on_write = true;
        let server = Server {
            url: config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_string(),
            timeout,
        };
        let client = bounded_client(config, Some(timeout * DEADLINE_PER_TIMEOUT))?;
        Ok(Cluster {
            client,
            watch_client,
            server: Arc::new(server),
            seen: std::sync::Mutex::default(),
            config: base,
            acting_as: acting_as.map(Arc::new),
            shared_lists: None,
        })
    }
}

/// A kube client for `config` whose answers are cut at [`MAX_ANSWER_BYTES`] and, with
/// `deadline`, must end within it (a watch, quiet by design, takes none). The one place a
/// kube client is built.
fn bounded_client(
    config: kube::Config,
    deadline: Option<Duration>,
) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&crate::bounded::BoundedLayer(crate::bounded::Bounds {
            max_bytes: MAX_ANSWER_BYTES,
            deadline,
        }))
        .build())
}

/// Why no client of the cluster tagpin runs in could be made. The message is kube's.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No Kubernetes configuration found (`KUBECONFIG` or `~/.kube/config`, else in-cluster).
    #[error(transparent)]
    Infer(kube::config::InferConfigError),
    /// The configuration found cannot make a client (a bad certificate, an unknown auth).
    #[error(transparent)]
    Build(kube::Error),
}

/// The cluster tagpin itself runs in, as kube infers it (`KUBECONFIG` or `~/.kube/config`,
/// else the pod's ServiceAccount), for code that speaks to the API server in types of its own
/// rather than reading through a [`Cluster`]: leader election's Lease, the operator's
/// `PinnedRepository` objects, their Secrets, status and Events. Its clients carry the same
/// bounds as a [`Cluster`]'s (timeout without progress, deadline, answer cap); kube's own
/// retry is left as each caller needs it.
pub struct HomeCluster {
    /// kube's configuration with the connect and write timeouts set.
    config: kube::Config,
    timeout: Duration,
}

impl HomeCluster {
    /// Finds the configuration; each request of its clients gives up after `timeout` without
    /// progress (to connect, to send, between two reads of a request's answer).
    pub async fn infer(timeout: Duration) -> Result<HomeCluster, ClientError> {
        let mut config = kube::Config::infer().await.map_err(ClientError::Infer)?;
        config.connect_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
        Ok(HomeCluster { config, timeout })
    }

    /// A client for requests: each gives up after the timeout without progress, and must end,
    /// answer included, within [`DEADLINE_PER_TIMEOUT`] times it. With `kube_retry`, kube
    /// retries 5xx and 429 itself within that deadline (the operator's reconciles); without,
    /// the caller decides (leader election, which must know at once that a renewal failed).
    pub fn requests(&self, kube_retry: bool) -> Result<kube::Client, ClientError> {
        let mut config = self.config.clone();
        if !kube_retry {
            config.default_retry = false;
        }
        config.read_timeout = Some(self.timeout);
        bounded_client(config, Some(self.timeout * DEADLINE_PER_TIMEOUT))
            .map_err(ClientError::Build)
    }

    /// A client for watches, which are quiet by design: a read may wait up to `read_timeout`
    /// (longer than the watch's own server-side timeout), and no total deadline applies.
    pub fn watches(&self, read_timeout: Duration) -> Result<kube::Client, ClientError> {
        let mut config = self.config.clone();
        config.read_timeout = Some(read_timeout);
        bounded_client(config, None).map_err(ClientError::Build)
    }
}

/// [`Cluster::connect_to`] against kubeconfig files, with local API servers that record who
/// asked them what.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutex::lock;
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::super::list::Follow;
    use kube::api::{ApiResource, GroupVersionKind};

    /// What one request asked: `GET /path?query Bearer token`.
    type Requests = Arc<Mutex<Vec<String>>>;

    /// A plain-HTTP API server that answers every request 404 (no such resource) and records
    /// each request line with its Authorization header.
    async fn recording_server() -> (String, Requests) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Requests::default();
        let record = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    let (mut request, mut authorization) = (String::new(), String::new());
                    let mut acting_as = String::new();
                    let mut line = String::new();
                    while stream.read_line(&mut line).await.unwrap_or(0) > 0 {
                        let header = line.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        if request.is_empty() {
                            request = header.trim_end_matches(" HTTP/1.1").to_string();
                        } else if let Some((name, value)) = header.split_once(':') {
                            if name.eq_ignore_ascii_case("authorization") {
                                authorization = value.trim().to_string();
                            } else if name.eq_ignore_ascii_case("impersonate-user") {
                                acting_as = format!(" as {}", value.trim());
                            }
                        }
                        line.clear();
                    }
                    lock(&record).push(format!("{request} {authorization}{acting_as}"));
                    let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"not found","reason":"NotFound","code":404}"#;
                    let response = format!(
                        "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let stream = stream.get_mut();
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        (url, requests)
    }

    /// Lists Argo CD Applications in all namespaces through `cluster`: one request, which
    /// the recording server answers 404.
    async fn list_applications(cluster: &Cluster) {
        let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "applications");
        let listed = cluster.list_objects(None, &resource, Follow::No).await;
        assert!(
            matches!(listed, Err(kube::Error::Api(ref s)) if s.code == 404),
            "{listed:?}"
        );
    }

    /// A kubeconfig with contexts `staging` (current) and `prod`, each with its own cluster
    /// and user, written to `dir/kubeconfig`.
    fn two_contexts(dir: &Path, staging_url: &str, prod_url: &str) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: staging
  cluster: {{server: '{staging_url}'}}
- name: prod
  cluster: {{server: '{prod_url}'}}
users:
- name: staging
  user: {{token: staging-token}}
- name: prod
  user: {{token: prod-token}}
contexts:
- name: staging
  context: {{cluster: staging, user: staging}}
- name: prod
  context: {{cluster: prod, user: prod}}
current-context: staging
"
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Two recording API servers, `staging` and `prod`, and a kubeconfig naming both
    /// ([`two_contexts`]) in a directory that lives as long as this.
    struct TwoServers {
        staging: Requests,
        prod: Requests,
        path: PathBuf,
        _dir: tempfile::TempDir,
    }

    impl TwoServers {
        /// Connects through the kubeconfig's `context` (its current one for `None`) and
        /// lists Applications once.
        async fn list_through(&self, context: Option<&str>) {
            let target = kubeconfig(&self.path, context);
            let cluster = Cluster::connect_to(&target, DEFAULT_API_TIMEOUT)
                .await
                .unwrap();
            list_applications(&cluster).await;
        }
    }

    async fn two_servers() -> TwoServers {
        let (staging_url, staging) = recording_server().await;
        let (prod_url, prod) = recording_server().await;
        let dir = tempfile::tempdir().unwrap();
        let path = two_contexts(dir.path(), &staging_url, &prod_url);
        TwoServers {
            staging,
            prod,
            path,
            _dir: dir,
        }
    }

    /// What `server` was asked, each request made with `token`.
    #[track_caller]
    fn asked_with(server: &Requests, token: &str) -> Vec<String> {
        let asked = lock(server).clone();
        let bearer = format!(" Bearer {token}");
        assert!(asked.iter().all(|r| r.ends_with(&bearer)), "{asked:?}");
        asked
    }

    fn kubeconfig(path: &Path, context: Option<&str>) -> ClusterTarget {
        ClusterTarget::Kubeconfig {
            path: path.to_path_buf(),
            context: context.map(str::to_string),
        }
    }

    #[tokio::test]
    async fn an_impersonating_cluster_keeps_the_connection_and_adds_only_the_user_header() {
        let TwoServers {
            prod, path, _dir, ..
        } = two_servers().await;
        let timeout = Duration::from_secs(7);
        let own = Cluster::connect_to(&kubeconfig(&path, Some("prod")), timeout)
            .await
            .unwrap();
        let account = ServiceAccount {
            namespace: "team-a".into(),
            name: "tagpin".into(),
        };
        let tenant = own.impersonating(account.clone()).unwrap();
        assert_eq!(tenant.acting_as(), Some(&account));
        assert_eq!(own.acting_as(), None);
        assert_eq!(tenant.server.url, own.server.url);
        assert_eq!(tenant.server.timeout, timeout);
        assert_eq!(tenant.config.default_retry, own.config.default_retry);
        assert_eq!(tenant.config.connect_timeout, Some(timeout));
        assert_eq!(tenant.config.auth_info.impersonate_groups, None);

        list_applications(&tenant).await;
        list_applications(&own).await;
        let asked = lock(&prod).clone();
        assert_eq!(asked.len(), 2, "{asked:?}");
        let (as_tenant, as_own): (Vec<&String>, Vec<&String>) =
            asked.iter().partition(|r| r.contains(" as "));
        assert_eq!(as_tenant.len(), 1, "{asked:?}");
        assert!(
            as_tenant
                .iter()
                .all(|r| r.ends_with(" Bearer prod-token as system:serviceaccount:team-a:tagpin")),
            "{asked:?}"
        );
        assert!(
            as_own.iter().all(|r| r.ends_with(" Bearer prod-token")),
            "{asked:?}"
        );
    }

    #[tokio::test]
    async fn a_kubeconfig_target_reaches_the_named_contexts_server_as_its_user() {
        let servers = two_servers().await;
        servers.list_through(Some("prod")).await;
        assert!(
            lock(&servers.staging).is_empty(),
            "{:?}",
            lock(&servers.staging)
        );
        let asked = asked_with(&servers.prod, "prod-token");
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(
            asked
                .iter()
                .any(|r| r.starts_with("GET /apis/argoproj.io/v1alpha1/applications?")),
            "{asked:?}"
        );
    }

    #[tokio::test]
    async fn a_kubeconfig_target_without_a_context_uses_the_files_current_one() {
        let servers = two_servers().await;
        servers.list_through(None).await;
        assert!(lock(&servers.prod).is_empty(), "{:?}", lock(&servers.prod));
        let asked = asked_with(&servers.staging, "staging-token");
        assert_eq!(asked.len(), 1, "{asked:?}");
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.kubeconfig");
        let Err(e) = Cluster::connect_to(&kubeconfig(&path, None), DEFAULT_API_TIMEOUT).await
        else {
            panic!("connected with a kubeconfig that does not exist");
        };
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("kubeconfig {}: cannot read: ", path.display())),
            "{text}"
        );
        assert!(text.contains("No such file"), "{text}");
        assert!(matches!(e, ClusterError::Config(_)) && !e.is_transient());
    }

    #[tokio::test]
    async fn a_missing_context_is_named_with_the_ones_there_are() {
        let dir = tempfile::tempdir().unwrap();
        let path = two_contexts(dir.path(), "http://127.0.0.1:1", "http://127.0.0.1:2");
        let Err(e) =
            Cluster::connect_to(&kubeconfig(&path, Some("dev")), DEFAULT_API_TIMEOUT).await
        else {
            panic!("connected to a context that does not exist");
        };
        assert_eq!(
            e.to_string(),
            format!(
                "context \"dev\" of kubeconfig {}: context not found (the kubeconfig has staging, prod)",
                path.display()
            )
        );

        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("current-context: staging", "current-context: gone");
        std::fs::write(&path, text).unwrap();
        let Err(e) = Cluster::connect_to(&kubeconfig(&path, None), DEFAULT_API_TIMEOUT).await
        else {
            panic!("connected to a current-context that does not exist");
        };
        assert_eq!(
            e.to_string(),
            format!(
                "kubeconfig {}: current-context \"gone\" not found (the kubeconfig has staging, prod)",
                path.display()
            )
        );
    }

    #[tokio::test]
    async fn an_unparsable_kubeconfig_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, "clusters: [unclosed\n").unwrap();
        let Err(e) =
            Cluster::connect_to(&kubeconfig(&path, Some("prod")), DEFAULT_API_TIMEOUT).await
        else {
            panic!("connected with a kubeconfig that is not YAML");
        };
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "context \"prod\" of kubeconfig {}: failed to parse kubeconfig YAML",
                path.display()
            )),
            "{text}"
        );
    }

    #[tokio::test]
    async fn in_cluster_outside_a_pod_names_the_service_account() {
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            return; // Running in a pod: in-cluster configuration may well succeed.
        }
        let Err(e) = Cluster::connect_to(&ClusterTarget::InCluster, DEFAULT_API_TIMEOUT).await
        else {
            panic!("connected in-cluster outside a pod");
        };
        assert!(
            e.to_string().starts_with(
                "the in-cluster service account: failed to read an incluster environment variable"
            ),
            "{e}"
        );
    }
}
