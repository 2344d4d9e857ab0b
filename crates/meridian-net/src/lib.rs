//! Node-to-node networking (being written).
