//! The Kubernetes adapter: every connection tagpin makes to an API server, and the bounded
//! ways it reads through one.
//!
//! Several rooms talk to clusters: `verify` and `audit` read workloads and pods, `promote`
//! reads a stage's verdict on that stage's cluster, the operator reconciles its objects as
//! its tenants' ServiceAccounts, and leader election keeps a Lease. They all need the same
//! things done the same way, so each is written once here:
//!
//! - reaching a cluster as a [`ClusterTarget`](crate::config::ClusterTarget) says (kubeconfig
//!   and context, in-cluster), with errors that name the target (`connect.rs`,
//!   `kubeconfig.rs`);
//! - reading as a tenant's ServiceAccount ([`Cluster::impersonating`]), so that its RBAC, not
//!   tagpin's, decides what it sees;
//! - bounds on every request: a timeout without progress, a total deadline, a cap on the
//!   answer's size ([`DEFAULT_API_TIMEOUT`], [`DEADLINE_PER_TIMEOUT`], [`MAX_ANSWER_BYTES`]),
//!   since a tenant names the API servers the operator talks to;
//! - lists read page by page, shared between reconciles ([`Cluster::sharing_lists`]), retried
//!   when the failure is transient ([`retrying`]), refusals (403) told apart from failures in
//!   tagpin's own words (`error.rs`), and a wait for what was listed to change
//!   ([`Cluster::wait_for_change`]);
//! - the plain kube clients of the cluster tagpin runs in, for code that speaks to the API in
//!   its own types (the Lease, the operator's objects and Events: [`HomeCluster`]).
//!
//! What is read, and what it means, is the callers' business: this room knows no workload
//! kind and no verdict (`verify::observe` reads workloads, pods and GitOps objects through
//! it). No other room builds a kube client or reads a kubeconfig (`tests/it/module_graph.rs`
//! fails the build if one does).
//!
//! How a driver holds its clusters: connect once per target when it starts
//! ([`Cluster::connect_to`]; a stage's cluster, or the default one for `verify`) and keep the
//! [`Cluster`]: its clients pool connections, and a clone is another handle on the same
//! server. A long-running driver that checks many objects calls [`Cluster::sharing_lists`]
//! once, so that their reads share one list, kept current by a watch; a tenant's reads go through
//! [`Cluster::impersonating`] that cluster, made once per ServiceAccount and kept (the
//! operator keeps a bounded number). A connection that fails is a [`ClusterError`] naming
//! the target: the driver decides whether it can go on without that cluster.

mod connect;
mod error;
mod handle;
mod kubeconfig;
mod list;
mod shared_lists;
mod watch;

pub use connect::{
    ClientError, HomeCluster, DEADLINE_PER_TIMEOUT, DEFAULT_API_TIMEOUT, MAX_ANSWER_BYTES,
};
pub use error::{impersonation_refused, ClusterError, Refused};
pub use handle::{Cluster, Server, ServiceAccount};
pub use kubeconfig::{self_contained, UnsafeKubeconfig};
pub use list::{retrying, Follow, Listable, Namespaced};
pub use shared_lists::{SharedLists, Stamp, OPERATOR_LIST_AGE};
