//! tagpin keeps a GitOps repository pinned to image digests.
//!
//! The library holds everything; the binary (`src/main.rs`) only parses the command line and
//! picks the exit code. Pure logic ([`reference`], the scanning and rewriting in [`manifest`],
//! [`plan`]) is separate from the adapters that do I/O ([`registry`], [`pass`]).

pub mod age;
pub mod audit;
pub mod bounded;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod cycle;
pub mod daemon;
pub mod event;
pub mod forge;
pub mod git;
pub mod inflight;
pub mod leader;
pub mod lifecycle;
pub mod manifest;
pub mod metrics;
mod mutex;
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
pub mod revert;
pub mod review;
pub mod server;
pub mod signature;
pub mod signing;
pub mod sync;
pub mod verify;
pub mod webhook;
pub mod workload;
pub mod writer;
