//! Shared test support. Each integration test binary compiles only what it uses.
#![allow(dead_code)]

pub mod fake_github;
