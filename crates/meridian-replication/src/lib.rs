//! Replication protocols (being written).
