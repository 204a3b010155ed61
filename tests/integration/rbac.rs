//! RBAC sufficiency (being written).
