//! tagpin keeps a GitOps repository pinned to image digests.
//!
//! The library holds everything; the binary (`src/main.rs`) only parses the command line and
//! picks the exit code. Pure logic ([`reference`], the scanning and rewriting in [`manifest`],
//! [`plan`]) is separate from the adapters that do I/O ([`registry`], [`pass`]).

pub mod age;
pub(crate) mod audit;
pub(crate) mod bounded;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub(crate) mod cycle;
pub(crate) mod daemon;
pub(crate) mod delivery;
pub mod event;
pub mod forge;
pub mod git;
pub(crate) mod inflight;
pub(crate) mod leader;
pub(crate) mod lifecycle;
pub mod manifest;
pub mod metrics;
mod mutex;
pub(crate) mod notify;
pub mod operator;
mod output;
pub mod pass;
pub mod pipeline;
pub mod plan;
pub mod policy;
pub mod promote;
pub mod proposal;
pub mod provenance;
pub mod reference;
pub mod registry;
pub mod render;
pub mod resolution;
pub(crate) mod revert;
pub(crate) mod review;
pub mod server;
pub mod signature;
pub(crate) mod signing;
pub(crate) mod state_file;
pub mod sync;
pub mod ui;
pub mod verify;
pub mod webhook;
pub mod workload;
pub(crate) mod writer;
