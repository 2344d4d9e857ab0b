//! Cluster logic (being written).
