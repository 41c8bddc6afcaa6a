//! tagpin's integration tests, as one test binary.
//!
//! Each module is one area (the former `tests/<area>.rs` files); `support` holds the local
//! servers they share (registry, Git, GitHub, Kubernetes). One binary links tagpin and the
//! support code once instead of once per area. Run one area with
//! `cargo test --test it sync::`, one test with its full path.
//!
//! Everything here runs in one process, in parallel: a test must not change process-wide
//! state (environment variables, current directory, panic hook, a global tracing subscriber);
//! what a child process needs is passed to it with `Command::env`.

mod support;

mod bounded_answers;
mod chart_values_helm;
mod cli;
mod cred_helpers;
mod cycle_drivers;
mod delivery;
mod deploy;
mod docs;
mod examples;
mod file_size;
mod forges;
mod golden;
mod helm;
mod image_rules;
mod kustomize;
mod leader;
mod minimum_age;
mod mirror_repair;
mod module_graph;
mod monitoring;
mod notation;
mod notes;
mod notifications;
mod operator;
mod pipeline;
mod pod_template_cli;
mod policies;
mod promote;
mod provenance;
mod quickstart;
mod registry_client;
mod run;
mod selftests;
mod signatures;
mod signatures_referrers;
mod signed_commits;
mod sync;
mod sync_pr;
mod ui;
mod verify;
