//! A node's configuration: read from TOML, overridden by command-line flags, validated once.
//!
//! Unknown keys are errors (a typo must not silently fall back to a default), and every
//! validation error names the setting and what is accepted.

use crate::error::{Error, Result};
use meridian_storage::Durability;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Which storage engine a node runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// In memory: fast, nothing survives a restart.
    #[default]
    Mem,
    /// Durable, on the fjall LSM tree in `data_dir`.
    Fjall,
}

impl FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "mem" | "memory" => Ok(EngineKind::Mem),
            "fjall" => Ok(EngineKind::Fjall),
            other => Err(format!("unknown engine '{other}': expected mem or fjall")),
        }
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EngineKind::Mem => "mem",
            EngineKind::Fjall => "fjall",
        })
    }
}

/// Everything a node needs to start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// The Redis-protocol front end.
    pub resp: RespSection,
    /// The HTTP front end.
    pub http: HttpSection,
    /// The storage engine.
    pub storage: StorageSection,
}

/// `[resp]`: the Redis-protocol front end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RespSection {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Password clients must give with AUTH (none: no authentication).
    pub requirepass: Option<String>,
    /// Most clients connected at once; more are refused with an error.
    pub max_clients: usize,
    /// Largest bulk string accepted, in bytes (Redis's `proto-max-bulk-len`).
    pub max_bulk_len: usize,
    /// Most arguments in one command.
    pub max_multibulk_len: usize,
    /// Longest inline (telnet-style) command, in bytes.
    pub max_inline_len: usize,
}

impl Default for RespSection {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 6379)),
            requirepass: None,
            max_clients: 10_000,
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: 1024 * 1024,
            max_inline_len: 64 * 1024,
        }
    }
}

/// `[http]`: the HTTP front end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSection {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Largest request body accepted by `PUT /kv/{key}`, in bytes.
    pub max_body_len: usize,
}

impl Default for HttpSection {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8379)),
            max_body_len: 64 * 1024 * 1024,
        }
    }
}

/// `[storage]`: the engine and its durability.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageSection {
    /// Which engine.
    pub engine: EngineKind,
    /// Where the durable engine keeps its files.
    pub data_dir: PathBuf,
    /// When the durable engine forces writes to disk.
    pub fsync: Durability,
    /// How long old versions are kept for snapshot reads, in milliseconds (0: latest only).
    pub version_retention_ms: u64,
    /// How often old versions are garbage-collected, in milliseconds.
    pub gc_interval_ms: u64,
}

impl Default for StorageSection {
    fn default() -> Self {
        Self {
            engine: EngineKind::Mem,
            data_dir: PathBuf::from("meridian-data"),
            fsync: Durability::Everysec,
            version_retention_ms: 0,
            gc_interval_ms: 10_000,
        }
    }
}

impl NodeConfig {
    /// Parses TOML text, then validates.
    pub fn from_toml(text: &str) -> Result<Self> {
        let config: NodeConfig =
            toml::from_str(text).map_err(|e| Error::Config(format!("invalid TOML: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!("cannot read config file {}: {e}", path.display()))
        })?;
        Self::from_toml(&text)
            .map_err(|e| Error::Config(format!("{}: {}", path.display(), e.detail())))
    }

    /// Checks the settings hang together; the message says which one is wrong and why.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.resp.max_clients == 0 {
            return bad("resp.max_clients must be at least 1".into());
        }
        if self.resp.max_bulk_len < 1024 {
            return bad(format!(
                "resp.max_bulk_len = {} is too small: at least 1024 bytes",
                self.resp.max_bulk_len
            ));
        }
        if self.resp.max_multibulk_len < 2 {
            return bad("resp.max_multibulk_len must be at least 2".into());
        }
        if self.resp.max_inline_len < 64 {
            return bad("resp.max_inline_len must be at least 64 bytes".into());
        }
        if self.resp.requirepass.as_deref() == Some("") {
            return bad("resp.requirepass is empty: remove it to disable AUTH".into());
        }
        if self.http.listen == self.resp.listen && self.resp.listen.port() != 0 {
            return bad(format!(
                "resp.listen and http.listen are both {}: give them different ports",
                self.resp.listen
            ));
        }
        if self.storage.gc_interval_ms == 0 {
            return bad("storage.gc_interval_ms must be at least 1".into());
        }
        if self.storage.engine == EngineKind::Fjall && self.storage.data_dir.as_os_str().is_empty()
        {
            return bad("storage.data_dir is required with engine = \"fjall\"".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(NodeConfig::from_toml("").unwrap(), NodeConfig::default());
    }

    #[test]
    fn a_full_file_parses() {
        let c = NodeConfig::from_toml(
            r#"
            [resp]
            listen = "127.0.0.1:7000"
            requirepass = "s3cret"
            max_clients = 10
            [http]
            listen = "127.0.0.1:7001"
            [storage]
            engine = "fjall"
            data_dir = "/tmp/x"
            fsync = "always"
            "#,
        )
        .unwrap();
        assert_eq!(c.resp.listen.port(), 7000);
        assert_eq!(c.resp.requirepass.as_deref(), Some("s3cret"));
        assert_eq!(c.storage.engine, EngineKind::Fjall);
        assert_eq!(c.storage.fsync, Durability::Always);
    }

    #[test]
    fn typos_and_bad_values_are_named() {
        let e = NodeConfig::from_toml("[resp]\nlisten_addr = \"x\"").unwrap_err();
        assert!(e.to_string().contains("listen_addr"), "{e}");
        let e = NodeConfig::from_toml("[storage]\nfsync = \"sometimes\"").unwrap_err();
        assert!(e.to_string().contains("sometimes"), "{e}");
        let e = NodeConfig::from_toml("[resp]\nmax_clients = 0").unwrap_err();
        assert!(e.to_string().contains("max_clients"), "{e}");
        let e = NodeConfig::from_toml(
            "[resp]\nlisten = \"127.0.0.1:9\"\n[http]\nlisten = \"127.0.0.1:9\"",
        )
        .unwrap_err();
        assert!(e.to_string().contains("different ports"), "{e}");
    }

    #[test]
    fn engine_and_fsync_parse_from_flags() {
        assert_eq!("FJALL".parse::<EngineKind>().unwrap(), EngineKind::Fjall);
        assert!(
            "rocks"
                .parse::<EngineKind>()
                .unwrap_err()
                .contains("mem or fjall")
        );
        assert_eq!("never".parse::<Durability>().unwrap(), Durability::Never);
    }
}
