//! The conformance battery through the API (being written).
