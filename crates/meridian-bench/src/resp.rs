//! A pipelined RESP client [`crate::runner::Target`]: drives any Redis-protocol server.
