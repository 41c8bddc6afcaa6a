//! Self-tests of the local servers in `support`: each stand-in answers as the real service
//! does, checked against recorded payloads and the official specs.

mod azure_devops;
mod bitbucket_cloud;
mod bitbucket_server;
mod git_server;
mod gitea_server;
mod github_server;
mod gitlab_server;
mod harness;
mod kube_server;
