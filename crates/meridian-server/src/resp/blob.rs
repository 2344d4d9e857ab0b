//! Large objects on RESP (spec `large-objects.md` §5): `BLOB.READ key offset len`, handles
//! (`BLOB.OPEN`/`BLOB.PREAD`/`BLOB.CLOSE`, below), and what the string commands do with a key whose value is an object's manifest (objects written
//! through the S3 endpoint live under `bucket:key` as manifests, see [`crate::objects`]).
//!
//! - `BLOB.READ key offset len`: `len` bytes of the object from `offset` (fewer at its end,
//!   the empty string past it; nil when the key is absent), reading only the chunks that
//!   range spans. On a plain string value it reads that value the same way. `offset` and
//!   `len` must be non-negative integers (`-ERR value is not an integer or out of range`),
//!   and `len` at most `blob.resp_get_max` (an error naming the limit otherwise).
//! - `GET` of a manifest: the object's whole bytes (inline ones at once, chunked ones read
//!   through the object service) up to `blob.resp_get_max`, above it `-ERR object is N bytes,
//!   above blob.resp_get_max (M): read it with BLOB.READ key offset len or the S3 endpoint`.
//!   Never the manifest's encoded bytes. `STRLEN` is the object's size; `MGET` shows an
//!   inline object's bytes and a chunked one as nil (as Redis's MGET shows a key holding
//!   another type); `TYPE`, `EXISTS`, `TTL`, `EXPIRE`, `PERSIST`, `DEL`, `SET` treat it as
//!   any value (`SET` and `DEL` replace or remove the object; its chunks become garbage).
//! - Every other string command that would read or change the bytes (`APPEND`, `SETRANGE`,
//!   `GETRANGE`/`SUBSTR`, `INCR` and its family, `GETDEL`, `GETEX`, `GETSET`, `SET ... GET`)
//!   is refused with an error saying the key holds a large object and what to use; nothing
//!   is changed. (`GETRANGE` is refused rather than served: its negative offsets would need
//!   the object's size first; `BLOB.READ` is its large-object form.)
//!
//! - `BLOB.OPEN key`: a handle on the version `key` holds now (`crate::blob_handles`), as
//!   `[handle, size]`; nil when the key is absent. `BLOB.PREAD key handle offset len` reads
//!   that version as `BLOB.READ` reads the current one, however the key changes meanwhile;
//!   `BLOB.CLOSE key handle` is 1 if it closed a handle, 0 if there was none. A handle is
//!   known only with its key and on the node that opened it; the errors say when it is
//!   unknown (closed, idle past `blob.handle_idle_ms`, another node), expired (older than
//!   `blob.version_grace_ms`), or when `BLOB.OPEN` meets `blob.max_open_handles` or
//!   `blob.max_handle_bytes`. Not inside `MULTI`/`EXEC`.
//!
//! - Keys of S3 buckets (`bucket:…` where `bucket` is one the S3 endpoint owns, see
//!   [`crate::objects::S3Buckets`]): without a `requirepass`, every command naming one is
//!   refused before it runs (`-NOPERM bucket 'B' is served by the S3 endpoint, …`), so an
//!   object only requests signed with the endpoint's keys could reach stays out of reach of
//!   an unauthenticated RESP client. Keyless commands (`KEYS`, `SCAN`, `DBSIZE`) still list.
//!
//! Where the bytes come from: on a single node the RESP executor is synchronous over the
//! keyspace, so a read that needs chunks is handed back to the connection as a *deferred*
//! reply ([`Deferred`]), which the connection task awaits in place (in request order)
//! before it parses the next request; the chunk store runs on the blocking pool when it
//! touches the disk, so no tokio worker waits on it. In cluster mode the key commands are
//! async already (`cluster_exec`). Inside `MULTI`/`EXEC`, and on transactional buckets in
//! cluster mode (whose commands run over a synchronous snapshot view), `GET` and
//! `BLOB.READ` serve plain values and inline objects and refuse chunked ones (read them
//! outside a transaction).
//!
//! The check costs nothing for ordinary values: a manifest starts with byte `0xFF`
//! (`meridian_blob::MAGIC`), which is looked at before anything else.

use crate::blob_handles::HandleFault;
use crate::objects::{BlobConfig, ObjectError, ObjectHead, Objects};
use crate::resp::context::RespContext;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use meridian_blob::Manifest;
use meridian_redis::Args;
use meridian_redis::Cmd;
use meridian_redis::Reply;
use meridian_redis::error::{CmdError, int_arg, raw};
pub(crate) use meridian_redis::large_object::{
    manifest, range_args, read_args, shown_now, slice, span,
};
use meridian_replication::ReplicationError;
use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The refusal of a request naming a key of an S3 bucket by a client that cannot hold the
/// node's password (there is none): `NOPERM …` (see the module docs). `None` when it may run:
/// with a `requirepass`, without an object service, and for every key outside S3 buckets
/// (one atomic load while none exists).
#[inline]
pub(crate) fn s3_key_refusal(ctx: &RespContext, cmd: Cmd, args: Args<'_>) -> Option<String> {
    if ctx.config.requirepass.is_some() {
        return None;
    }
    let objects = ctx.objects()?;
    if matches!(cmd, Cmd::Flushall | Cmd::Flushdb) {
        return objects
            .check_keyspace_write(false)
            .err()
            .map(|refused| format!("NOPERM {refused}"));
    }
    cmd.spec()
        .key_positions(&args)
        .find_map(|i| objects.check_key_access(args.get(i), false).err())
        .map(|refused| format!("NOPERM {refused}"))
}

/// What a stored value shows the string commands (and what a handle pins): a plain value
/// or an inline object's bytes, or an object whose bytes are in chunks.
pub(crate) use crate::blob_handles::Pinned as Shown;

/// What `value` shows: itself, an inline object's bytes, or a chunked object.
#[inline]
pub(crate) fn shown(value: Bytes) -> Shown {
    match manifest(&value) {
        None => Shown::Bytes(value),
        Some(m) if m.chunks.is_empty() => Shown::Bytes(m.inline.unwrap_or_default()),
        Some(m) => Shown::Chunked(Arc::new(m)),
    }
}

/// `GET`'s error for an object above `blob.resp_get_max`.
pub(crate) fn too_large(size: u64, max: u64) -> String {
    format!(
        "ERR object is {size} bytes, above blob.resp_get_max ({max}): read it with BLOB.READ \
         key offset len or the S3 endpoint"
    )
}

/// The error when chunks are needed and the server has no object service.
pub(crate) fn no_service(size: u64) -> Cow<'static, str> {
    Cow::Owned(format!(
        "ERR the key holds a large object of {size} bytes stored in chunks, and this server \
         has no object service to read them"
    ))
}

/// A reply the single-node connection awaits before the next request: the bytes of a
/// chunked object's range, or the error line to answer.
pub(crate) struct Deferred(pub(crate) Pin<Box<dyn Future<Output = Deferral> + Send>>);

/// What a [`Deferred`] reply yields.
pub(crate) type Deferral = Result<Bytes, Cow<'static, str>>;

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deferred")
    }
}

/// Reads `first..=last` of the chunked object `m` stored at `key` through `objects`.
/// `repl` formats a replication error (cluster mode counts it in the metrics).
pub(crate) async fn read_chunked(
    objects: &Objects,
    key: &[u8],
    m: Arc<Manifest>,
    first: u64,
    last: u64,
    repl: impl Fn(ReplicationError) -> Cow<'static, str>,
) -> Deferral {
    // The object service names an object by bucket and key, and finds its chunks by
    // `bucket:key` (`objects::object_key`): the RESP key split at its first ':'.
    let (bucket, rest) = meridian_cluster::bucket_and_key(key);
    let Ok(bucket) = std::str::from_utf8(bucket) else {
        return Err(Cow::Borrowed(
            "ERR the key's bucket is not UTF-8 text: its large object cannot be read",
        ));
    };
    let want = (last - first + 1) as usize;
    let head = ObjectHead { manifest: m };
    let mut stream = objects
        .read(bucket, rest, &head, first, last)
        .await
        .map_err(|e| object_error(e, &repl))?;
    let mut out = BytesMut::with_capacity(want);
    while let Some(piece) = stream.next().await {
        out.extend_from_slice(&piece.map_err(|e| object_error(e, &repl))?);
    }
    if out.len() != want {
        return Err(Cow::Owned(format!(
            "ERR the large object's chunks held {} bytes of the {want} asked for",
            out.len()
        )));
    }
    Ok(out.freeze())
}

/// The RESP error line of an object-service failure.
fn object_error(
    e: ObjectError,
    repl: &impl Fn(ReplicationError) -> Cow<'static, str>,
) -> Cow<'static, str> {
    match e {
        ObjectError::Replication(r) => repl(r),
        ObjectError::TooManyTransfers(t) => Cow::Owned(format!("TRYAGAIN {t}")),
        ObjectError::NoSuchKey => Cow::Borrowed("ERR no such key"),
        other => Cow::Owned(format!("ERR {other}")),
    }
}

/// The handle argument at `at`: a non-negative integer (`BLOB.OPEN` draws them).
fn handle_arg(args: Args<'_>, at: usize) -> Result<u64, CmdError> {
    u64::try_from(int_arg(args.get(at))?)
        .map_err(|_| raw("ERR invalid blob handle: handles are non-negative integers"))
}

/// `BLOB.PREAD`'s handle, offset and len.
pub(crate) fn pread_args(args: Args<'_>, max: u64) -> Result<(u64, u64, u64), CmdError> {
    let handle = handle_arg(args, 2)?;
    let (offset, len) = range_args(args, 3, max, "BLOB.PREAD")?;
    Ok((handle, offset, len))
}

/// `BLOB.CLOSE`'s handle.
pub(crate) fn close_args(args: Args<'_>) -> Result<u64, CmdError> {
    handle_arg(args, 2)
}

/// The error line of a handle that could not be opened or used.
pub(crate) fn handle_error(fault: HandleFault, id: u64, cfg: &BlobConfig) -> CmdError {
    raw(match fault {
        HandleFault::Limit { open, pinned } => format!(
            "ERR blob handle limit reached: {open} handles open pinning {pinned} bytes on this \
             node (blob.max_open_handles {}, blob.max_handle_bytes {}): close handles with \
             BLOB.CLOSE or let idle ones close after {} ms",
            cfg.max_open_handles, cfg.max_handle_bytes, cfg.handle_idle_ms
        ),
        HandleFault::Unknown => format!(
            "ERR no such blob handle {id} for this key: never opened on this node, closed, or \
             idle for more than blob.handle_idle_ms ({} ms); open one with BLOB.OPEN",
            cfg.handle_idle_ms
        ),
        HandleFault::Expired => format!(
            "ERR blob handle {id} expired: a handle reads its version for at most \
             blob.version_grace_ms ({} ms) after BLOB.OPEN; open it again",
            cfg.version_grace_ms
        ),
    })
}

/// `BLOB.OPEN`'s reply.
pub(crate) fn opened(reply: &mut Reply, handle: u64, size: u64) {
    reply.array(2);
    reply.int(handle as i64);
    reply.int(size.min(i64::MAX as u64) as i64);
}
