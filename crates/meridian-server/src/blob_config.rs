//! The object service's settings (`[blob]` in a node's configuration): [`BlobConfig`], its
//! defaults and its range checks.
//!
//! A leaf: it imports nothing of this crate, so the configuration (`config::NodeConfig`) holds it
//! without depending on the object service, which re-exports it
//! (`meridian_server::objects::BlobConfig`).

use meridian_blob::Placement;
use meridian_blob::admission::AdmissionConfig;
use serde::{Deserialize, Serialize};

/// Settings of the object service (`[blob]` in a node's configuration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlobConfig {
    /// Objects up to this many bytes keep their bytes in the manifest (default 1 MiB).
    pub threshold: u64,
    /// Chunk size of uploads, 64 KiB ..= 8 MiB (default 1 MiB).
    pub chunk_size: u32,
    /// Chunks an upload keeps in flight (default 4).
    pub window: usize,
    /// Chunks a download fetches ahead (default 4).
    pub prefetch: usize,
    /// Largest object, bytes (default 5 TiB, S3's).
    pub max_object: u64,
    /// Bytes of chunks in flight per node, all transfers together (default 256 MiB).
    pub max_inflight_bytes: u64,
    /// Transfers running at once per node (default 64).
    pub max_active_transfers: usize,
    /// Transfers waiting for a slot before new ones are refused (default 1024).
    pub max_queued: usize,
    /// How long a transfer waits for a slot, ms (default 30 000).
    pub queue_timeout_ms: u64,
    /// A plain RESP `GET` of a large object returns it whole up to this size, and an error
    /// naming `BLOB.READ` above it (default 64 MiB).
    pub resp_get_max: u64,
    /// A single PUT's (and a part's) S3 ETag is the body's MD5, as S3 clients expect
    /// (default true). MD5 is the upload path's costliest step (one core's worth, ~500 MiB/s):
    /// off, the ETag is the quoted BLAKE3 (64 hex digits) and MD5 is computed only to check a
    /// client's `Content-MD5`.
    pub md5_etag: bool,
    /// Chunks of a version no manifest references any more are deleted this long after it
    /// was replaced, ms (default 10 min: readers mid-stream finish). A single PUT may not
    /// take longer (use multipart).
    pub version_grace_ms: u64,
    /// Chunks of uploads that never committed are deleted after this long, ms (default 1 h).
    pub orphan_ttl_ms: u64,
    /// How often the node looks for garbage chunks, ms (default 60 000).
    pub gc_interval_ms: u64,
    /// How often every stored chunk is read back and checked, ms (default 30 days).
    pub scrub_interval_ms: u64,
    /// How fast a scrub reads, bytes per second (default 16 MiB/s).
    pub scrub_bytes_per_sec: u64,
    /// Socket buffer of the bulk connections that carry chunks between nodes, bytes; unset
    /// (default): `max(256 KiB, 2 × link_bandwidth × RTT)`, the RTT measured per connection.
    /// Under the WAN emulator it also caps each chunk stream at `buffer / RTT`.
    pub tcp_buffer: Option<usize>,
    /// Bandwidth of a link between nodes, bytes per second, for sizing bulk socket buffers
    /// (default 125 000 000 = 1 Gb/s).
    pub link_bandwidth: u64,
    /// Bulk connections per peer (default 4; 0 carries chunks on the control connection).
    pub bulk_lanes: u8,
    /// Where new objects' chunks live: `with_manifest` (default: on the object key's
    /// replicas, the object one unit on N nodes) or `spread` (chunk i on the replicas of a
    /// key hashing its version and index: very large objects spread over the cluster and
    /// their range reads over many nodes).
    pub chunk_placement: Placement,
    /// Background traffic to each other DC — chunk handoff, read and scrub repair, and also
    /// the objects' read repair, anti-entropy and hinted handoff — is paced to this many
    /// bytes per second, so it never takes a WAN link from clients (default 12 500 000; 0:
    /// unpaced).
    pub repair_wan_bytes_per_sec: u64,
    /// How often a node runs a chunk-repair pass (anti-entropy of chunks: the replicas of
    /// a live object's chunks that lack some are sent them), ms (default 60 000).
    pub chunk_repair_interval_ms: u64,
    /// `BLOB.OPEN` handles open at once per node (default 4096).
    pub max_open_handles: usize,
    /// Bytes handles may pin at once per node: values and inline objects they hold, and the
    /// chunk lists of the versions they read (default 64 MiB).
    pub max_handle_bytes: u64,
    /// A handle unused this long closes, ms (default 60 000).
    pub handle_idle_ms: u64,
}

impl Default for BlobConfig {
    fn default() -> Self {
        BlobConfig {
            threshold: 1 << 20,
            chunk_size: 1 << 20,
            window: 4,
            prefetch: 4,
            max_object: 5 << 40,
            max_inflight_bytes: 256 << 20,
            max_active_transfers: 64,
            max_queued: 1024,
            queue_timeout_ms: 30_000,
            resp_get_max: 64 << 20,
            md5_etag: true,
            version_grace_ms: 600_000,
            orphan_ttl_ms: 3_600_000,
            gc_interval_ms: 60_000,
            scrub_interval_ms: 30 * 86_400_000,
            scrub_bytes_per_sec: 16 << 20,
            tcp_buffer: None,
            link_bandwidth: 125_000_000,
            bulk_lanes: 4,
            chunk_placement: Placement::WithManifest,
            repair_wan_bytes_per_sec: 12_500_000,
            chunk_repair_interval_ms: 60_000,
            max_open_handles: 4096,
            max_handle_bytes: 64 << 20,
            handle_idle_ms: 60_000,
        }
    }
}

impl BlobConfig {
    /// Checks every field's range; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(64 << 10..=8 << 20).contains(&self.chunk_size) {
            return Err(format!(
                "blob.chunk_size must be 65536..=8388608 bytes, not {}",
                self.chunk_size
            ));
        }
        if self.threshold > 16 << 20 {
            return Err(format!(
                "blob.threshold must be at most 16777216 bytes, not {}",
                self.threshold
            ));
        }
        if !(1..=64).contains(&self.window) {
            return Err(format!("blob.window must be 1..=64, not {}", self.window));
        }
        if !(1..=64).contains(&self.prefetch) {
            return Err(format!(
                "blob.prefetch must be 1..=64, not {}",
                self.prefetch
            ));
        }
        if self.max_inflight_bytes < u64::from(self.chunk_size) {
            return Err("blob.max_inflight_bytes must hold at least one chunk".into());
        }
        if self.max_object == 0 {
            return Err("blob.max_object must be positive".into());
        }
        for (name, v) in [
            ("version_grace_ms", self.version_grace_ms),
            ("orphan_ttl_ms", self.orphan_ttl_ms),
            ("gc_interval_ms", self.gc_interval_ms),
            ("chunk_repair_interval_ms", self.chunk_repair_interval_ms),
        ] {
            if !(1..=30 * 86_400_000).contains(&v) {
                return Err(format!("blob.{name} must be 1 ms to 30 days, not {v}"));
            }
        }
        if !(1..=365 * 86_400_000).contains(&self.scrub_interval_ms) {
            return Err(format!(
                "blob.scrub_interval_ms must be 1 ms to 365 days, not {}",
                self.scrub_interval_ms
            ));
        }
        if self.scrub_bytes_per_sec == 0 {
            return Err("blob.scrub_bytes_per_sec must be positive".into());
        }
        if let Some(b) = self.tcp_buffer
            && !(4096..=256 << 20).contains(&b)
        {
            return Err(format!(
                "blob.tcp_buffer must be 4096..=268435456 bytes, not {b}"
            ));
        }
        if self.link_bandwidth == 0 {
            return Err("blob.link_bandwidth must be positive".into());
        }
        if !(1..=1_000_000).contains(&self.max_open_handles) {
            return Err(format!(
                "blob.max_open_handles must be 1..=1000000, not {}",
                self.max_open_handles
            ));
        }
        if !(1 << 20..=16 << 30).contains(&self.max_handle_bytes) {
            return Err(format!(
                "blob.max_handle_bytes must be 1 MiB..=16 GiB, not {}",
                self.max_handle_bytes
            ));
        }
        if !(1..=86_400_000).contains(&self.handle_idle_ms) {
            return Err(format!(
                "blob.handle_idle_ms must be 1 ms to 1 day, not {}",
                self.handle_idle_ms
            ));
        }
        if self.bulk_lanes > 64 {
            return Err(format!(
                "blob.bulk_lanes must be 0..=64, not {}",
                self.bulk_lanes
            ));
        }
        self.admission().validate()
    }

    /// The admission settings these name.
    pub fn admission(&self) -> AdmissionConfig {
        AdmissionConfig {
            max_active: self.max_active_transfers,
            max_queued: self.max_queued,
            queue_timeout: std::time::Duration::from_millis(self.queue_timeout_ms),
            ..AdmissionConfig::default()
        }
    }
}
