//! Routing (spec §5): complexity scoring, rule evaluation and RunSpec building.

pub mod facts;
pub mod rules;
pub mod run_spec;
pub mod scoring;
