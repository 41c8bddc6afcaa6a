//! Shared support for tagpin's integration tests.
//!
//! Every test file that needs a real registry says `mod support;` and uses
//! `support::registry::*`. No test file uses every helper, so unused ones are
//! allowed here instead of warning in each test crate.
#![allow(dead_code)]

pub mod git;
pub mod github;
pub mod kube;
pub mod registry;
