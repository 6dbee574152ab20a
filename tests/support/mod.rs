//! Shared test support. Each integration test binary compiles only what it uses.
#![allow(dead_code)]

pub mod anthropic;
pub mod fake_github;
