//! Placeholder: the conformance table is being written.
