//! What the verifier reads from the cluster: workloads, pods, GitOps objects and Helm
//! releases through the Kubernetes API ([`live`]), converted into the judge's types; lists
//! shared between reconciles for a second ([`shared_lists`]).

pub mod live;
pub mod shared_lists;
