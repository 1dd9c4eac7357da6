//! Network namespaces (being written).
