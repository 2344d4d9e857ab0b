//! [`FjallEngine`]: the durable engine, on the fjall LSM tree. (Being written.)

use crate::Durability;
use std::path::PathBuf;

/// Settings of a [`FjallEngine`].
#[derive(Clone, Debug)]
pub struct FjallConfig {
    /// Directory holding the LSM tree and its journal.
    pub path: PathBuf,
    /// When writes are forced to disk.
    pub durability: Durability,
}

/// The durable engine.
#[derive(Debug)]
pub struct FjallEngine {}
