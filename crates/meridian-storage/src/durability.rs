//! When a durable engine forces writes to disk: Redis's `appendfsync`, by another name.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The write-ahead durability policy of a durable engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// fsync before every write returns: an acknowledged write survives a crash or power loss.
    Always,
    /// fsync once a second in the background: a crash loses at most about a second of writes.
    #[default]
    Everysec,
    /// never fsync; the OS decides. A process crash keeps what reached the OS, power loss may not.
    Never,
}

impl FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "always" => Ok(Durability::Always),
            "everysec" => Ok(Durability::Everysec),
            "never" | "no" => Ok(Durability::Never),
            other => Err(format!(
                "unknown fsync policy '{other}': expected always, everysec or never"
            )),
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::Always => "always",
            Durability::Everysec => "everysec",
            Durability::Never => "never",
        })
    }
}
