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

mod audit;
mod azure_devops_forge;
mod azure_devops_selftest;
mod bitbucket_cloud_selftest;
mod bitbucket_forge;
mod bitbucket_server_forge;
mod bitbucket_server_selftest;
mod bounded_answers;
mod chart_values_helm;
mod cli;
mod cred_helpers;
mod deploy;
mod docs;
mod examples;
mod file_size;
mod forges;
mod git_server_selftest;
mod gitea_forge;
mod gitea_server_selftest;
mod github_server_selftest;
mod gitlab_server_selftest;
mod gitops;
mod golden;
mod harness_selftest;
mod helm;
mod helm_verify;
mod holds;
mod hydrator;
mod image_rules;
mod kube_server_selftest;
mod kustomize;
mod leader;
mod minimum_age;
mod mirror_repair;
mod module_graph;
mod monitoring;
mod operator;
mod operator_azure_devops;
mod operator_bitbucket;
mod operator_bitbucket_server;
mod operator_gitea;
mod operator_hostile;
mod operator_promote;
mod operator_shared;
mod operator_signatures;
mod operator_tenancy;
mod pipeline;
mod pod_template_cli;
mod policies;
mod promote;
mod quickstart;
mod registry_client;
mod revert;
mod rollout_verify;
mod run;
mod signatures;
mod signatures_referrers;
mod signed_commits;
mod sync;
mod sync_pr;
mod verify;
