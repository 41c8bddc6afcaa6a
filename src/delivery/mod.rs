//! Delivery metrics (DORA) from what tagpin records (issue #39, section 2): `tagpin report`,
//! the `tagpin_lead_time_seconds`, `tagpin_deployments_total` and
//! `tagpin_time_to_restore_seconds` metrics of `run` and the operator, and the dashboard's
//! delivery panel and timeline, all from one reading of durable records, so the same
//! repository gives the same figures on a laptop as in the controller, after any restart:
//!
//! - the branch's first-parent history: pin and promotion commits, reverts
//!   (`Tagpin-Reverts`) and holds (`Tagpin-Held`) ([`history`]);
//! - the verdicts the verification round recorded on each deployment commit, in Git notes on
//!   `refs/notes/tagpin` ([`note`], written by [`record`]);
//! - each digest's build time from the registry (`src/age/`), else its first sighting, else
//!   the pin commit's time.
//!
//! [`figures`] holds the definitions and is pure; [`report`] shapes the report (the JSON of
//! the issue) and the events.

pub mod figures;
pub mod history;
pub mod note;
pub mod observe;
pub mod record;
pub mod report;

pub use history::{read, Delivery, ReadError};
pub use report::DeliveryReport;
