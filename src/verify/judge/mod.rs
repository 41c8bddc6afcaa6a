//! The verifier's judgement, pure: what Git expects ([`expected`]), what the live objects say
//! (as [`observed`] holds them, read by `verify/observe`), and the verdict of each pinned
//! container ([`verdict`], from [`pods`] and [`rollout`]), what Argo CD (its Source Hydrator
//! too: [`hydrator`]), Flux and Helm releases say about the pins ([`gitops`], [`helm`]), the
//! grace a young commit gets ([`grace`]) and the text posted back ([`report`]). Nothing here
//! reads the cluster: no `kube` import.

pub mod check;
mod condition;
pub mod expected;
pub mod findings;
pub mod gitops;
pub mod grace;
pub mod helm;
pub mod hydrator;
pub(crate) mod observed;
mod pods;
pub mod report;
mod rollout;
#[cfg(test)]
pub(crate) mod samples;
pub mod verdict;
mod wording;
