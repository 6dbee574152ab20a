//! The supervisor: the attempt pipeline with proof of work and retries, landing, the
//! daemon loop, reconciliation after a crash (spec §2–§12).

pub mod lock;
pub mod proof;
pub mod retry;
