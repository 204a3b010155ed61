//! CoreDNS equivalence of the mirror objects (being written).
