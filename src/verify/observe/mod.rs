//! What the verifier reads from the cluster: workloads, pods, GitOps objects and Helm
//! releases through the Kubernetes API ([`live`], over a [`crate::cluster::Cluster`]),
//! converted into the judge's types.

pub mod live;
