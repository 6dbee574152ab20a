//! (placeholder: filled in by the routing issue)
