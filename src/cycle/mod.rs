//! One cycle over a repository, the same for every driver: sync, verify and audit, promote,
//! report. `tagpin run` and the operator set a repository up (its clusters in
//! [`clusters`], its memory across passes in [`state`]), run [`order::Cycle::run`], and map
//! its [`report::CycleReport`] to their own outputs: run to its logs and metrics, the
//! operator to the object's status, conditions and Events. [`events`] turns the same report
//! into the events people are told of (notifications, the dashboard's timeline). When a driver
//! runs a cycle (timers, webhooks, a stop signal's grace period) stays with the driver.

pub mod clusters;
pub mod counts;
pub mod events;
pub mod order;
pub mod report;
pub mod state;

pub use clusters::{ClusterSetupError, Clusters, Own, Reach};
pub use order::Cycle;
pub use report::{CycleReport, Step, Verification};
pub use state::RepoState;
