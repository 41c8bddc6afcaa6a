//! What the verifier reads from the cluster, through a [`crate::cluster::Cluster`]: the live
//! workloads and their pods ([`read`]), converted into the judge's plain structs by pure
//! functions per kind (`convert.rs`), and what Argo CD and Flux say they applied
//! ([`gitops`]). Nothing here writes to the cluster, and nothing here judges.

mod convert;
pub mod gitops;
pub mod read;
