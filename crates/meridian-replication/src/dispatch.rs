//! The dispatch facade: the one place that decides which protocol serves a client request.
//!
//! Front ends (RESP, HTTP) parse the wire into the protocol-neutral requests below and format
//! the results; they never ask which bucket type a key has. [`Dispatch`] guarantees:
//!
//! - **One decision per request.** Every operation reads the key's bucket type once, from the
//!   bucket registry ([`EventualNode::bucket_type`]), and hands the request to the eventual
//!   quorum protocol or the timeline protocol. No extra lock, allocation or copy on the way:
//!   a `Dispatch` is a clone of the node handle.
//! - **Refusals by bucket type come from here.** A request that carries what only the other
//!   type understands (a read mode or version precondition on an eventual bucket; a causal
//!   context or quorum option on a timeline bucket) is `wrong_bucket_type`, naming what to do
//!   instead; a command that has no meaning on the key's type (`INCR`, `SETNX` on eventual
//!   buckets, `SET` options) is [`ReplicationError::Unsupported`] with the replacement. Both
//!   are `ErrorClass::BadRequest`, so the edge maps them like every other error.
//! - **The Redis view of a bucket.** [`Dispatch::get`] is what a plain GET shows: on an
//!   eventual bucket the sibling last-writer-wins would keep (greatest `(meta.ts_us, dot)`),
//!   on a timeline bucket the value `read_any` sees. [`Dispatch::set`] on an eventual bucket
//!   is a write that supersedes every value its coordinating primary holds, taking that
//!   replica's own clock as the context under the key's lock (`PutOptions::supersede_local`:
//!   no quorum read first, as Riak's coordinating vnode does); on a timeline bucket it is a
//!   `write`.
//!   [`Dispatch::del`] deletes with the context it read (eventual) or writes a tombstone over
//!   the master's version ([`Dispatch::delete`] with [`DeleteOpts::Plain`]).
//!   On a transactional bucket every one of them is a one-key snapshot-isolation transaction
//!   over the value's envelope ([`meridian_txn::Entry`], expiry included), retried on
//!   conflicts so that, as on Redis, the command always takes effect
//!   ([`Dispatch::txn_update`] is the read-modify-write the front ends build commands on).
//! - **Results say which protocol answered** ([`Read`], [`Written`], [`Deleted`]) where their
//!   shapes differ, so a front end only formats.

use crate::bucket::BucketType;
use crate::error::{ReplicationError, Result};
use crate::timeline::{Content, Expect};
use crate::txn::TxnOptions;
use crate::{
    EventualNode, GetOptions, GetResult, PutOptions, PutResult, ReadMode, TlReadResult,
    TlWriteResult,
};
use bytes::Bytes;
use meridian_cluster::{Props, bucket_and_key};
use meridian_core::Timestamp;
use meridian_txn::Entry;

/// How many times a one-key transaction of the Redis view runs before its conflict is
/// returned.
const TXN_ATTEMPTS: u32 = 32;

/// How many times a plain timeline delete tries a test-and-set before it deletes
/// unconditionally (see [`Dispatch::delete`]).
const TL_DELETE_ATTEMPTS: u32 = 3;

/// The options of a read ([`Dispatch::read`]), as the front end parsed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadOpts {
    /// None: the bucket's defaults (eventual: its quorum; timeline: `read_any`).
    #[default]
    Default,
    /// Per-request quorum parameters (eventual buckets only).
    Quorum(Props),
    /// A timeline read mode (timeline buckets only).
    Mode(ReadMode),
}

/// The options of a write ([`Dispatch::write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteOpts<'a> {
    /// None: eventual → a blind write with the bucket's quorum (it adds a sibling);
    /// timeline → a `write`.
    #[default]
    Default,
    /// A causal context (`None`: blind) and quorum parameters (eventual buckets only).
    Eventual {
        /// The context a read returned.
        context: Option<&'a [u8]>,
        /// Per-request quorum parameters.
        props: Props,
    },
    /// A precondition (timeline buckets only): any, a version (test-and-set), absent.
    Timeline(Expect),
}

/// The options of a delete ([`Dispatch::delete`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeleteOpts<'a> {
    /// Delete what is there: eventual → read the context with the bucket's R and delete with
    /// it; timeline → read the master's version and write a tombstone over it. Nothing is
    /// written when there is no value ([`Deleted::Nothing`]).
    #[default]
    Plain,
    /// A causal context and quorum parameters (eventual buckets only). Without a context the
    /// key's context is read first, as [`DeleteOpts::Plain`] does.
    Eventual {
        /// The context a read returned.
        context: Option<&'a [u8]>,
        /// Per-request quorum parameters.
        props: Props,
    },
    /// A precondition (timeline buckets only); `Expect::Any` is [`DeleteOpts::Plain`].
    Timeline(Expect),
}

/// What a read found, by protocol.
#[derive(Debug, Clone)]
pub enum Read {
    /// Values and a causal context (or notfound).
    Eventual(GetResult),
    /// A record with its version (or absent).
    Timeline(TlReadResult),
    /// A transactional bucket's value at a fresh snapshot (`None`: absent or expired), and
    /// the commit timestamp of the version read.
    Transactional {
        /// The value.
        value: Option<Bytes>,
        /// Its commit timestamp.
        ts: Option<Timestamp>,
    },
}

/// What a write issued, by protocol.
#[derive(Debug, Clone)]
pub enum Written {
    /// The new causal context.
    Eventual(PutResult),
    /// The new record and its version.
    Timeline(TlWriteResult),
    /// The commit timestamp of the one-key transaction.
    Transactional(Timestamp),
}

/// What a delete did.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// A plain delete found no value and wrote nothing.
    Nothing,
    /// The tombstone's causal context.
    Eventual(PutResult),
    /// The tombstone record and its version.
    Timeline(TlWriteResult),
    /// The commit timestamp of the one-key transaction that deleted it.
    Transactional(Timestamp),
}

/// The dispatch facade over a node. Cheap to clone (it is the node handle). See the module
/// docs.
#[derive(Debug, Clone)]
pub struct Dispatch {
    node: EventualNode,
}

impl Dispatch {
    /// The facade over `node`.
    pub fn new(node: EventualNode) -> Dispatch {
        Dispatch { node }
    }

    /// The node it dispatches to.
    pub fn node(&self) -> &EventualNode {
        &self.node
    }

    /// The one bucket-type read of a request.
    fn kind(&self, key: &[u8]) -> BucketType {
        self.node.bucket_type(key)
    }

    // ----- the Redis view -----------------------------------------------------------------

    /// The value a plain GET shows (`None`: notfound, deleted or absent).
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.kind(key) {
            BucketType::Timeline => {
                Ok(self.node.tl_get(key, ReadMode::Any).await?.value().cloned())
            }
            BucketType::Transactional => Ok(self.txn_get(key).await?.0),
            BucketType::Eventual => Ok(self
                .node
                .get(key, GetOptions::default())
                .await?
                .latest()
                .cloned()),
        }
    }

    /// Whether a plain GET would show a value.
    pub async fn exists(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get(key).await?.is_some())
    }

    /// A plain SET (see the module docs).
    pub async fn set(&self, key: &[u8], value: Bytes) -> Result<()> {
        match self.kind(key) {
            BucketType::Timeline => {
                self.node
                    .tl_put(key, Content::Value(value), Expect::Any)
                    .await?;
            }
            BucketType::Transactional => {
                self.txn_put(key, Some(value)).await?;
            }
            BucketType::Eventual => {
                // No quorum read first: the coordinating primary supersedes what it holds.
                let opts = PutOptions {
                    supersede_local: true,
                    ..PutOptions::default()
                };
                self.node.put(key, value, None, opts).await?;
            }
        }
        Ok(())
    }

    /// `SET key value <options>` (Redis's form): only `NX` has a meaning, and only on
    /// timeline buckets (an insert-if-absent). Returns whether it wrote.
    ///
    /// # Errors
    /// `unsupported` naming the first option the bucket type cannot take.
    pub async fn set_with<'o>(
        &self,
        key: &[u8],
        value: Bytes,
        mut options: impl Iterator<Item = &'o [u8]>,
    ) -> Result<bool> {
        let ty = self.kind(key);
        let refused = match ty {
            BucketType::Timeline | BucketType::Transactional => {
                options.find(|o| !o.eq_ignore_ascii_case(b"NX"))
            }
            BucketType::Eventual => options.next(),
        };
        if let Some(o) = refused {
            return Err(ReplicationError::Unsupported {
                command: format!("SET option '{}'", String::from_utf8_lossy(o)),
                bucket_type: ty,
                hint: match ty {
                    BucketType::Timeline => " (no expiry, no XX, no GET); use SET key value [NX], \
                                             or MERIDIAN.SET key value IFVERSION <version> for a \
                                             test-and-set"
                        .into(),
                    BucketType::Transactional => {
                        "; the RESP front end serves every SET option on transactional \
                         buckets"
                            .into()
                    }
                    BucketType::Eventual => "; use MERIDIAN.PUT".into(),
                },
            });
        }
        self.set_nx(key, value).await
    }

    /// `SETNX`: an insert-if-absent on a timeline bucket; returns whether it wrote.
    ///
    /// # Errors
    /// `unsupported` on eventual buckets (no atomic read-modify-write across replicas).
    pub async fn set_nx(&self, key: &[u8], value: Bytes) -> Result<bool> {
        match self.kind(key) {
            BucketType::Timeline => self.tl_insert(key, value).await,
            BucketType::Transactional => self.txn_set_nx(key, value).await,
            ty => Err(read_modify_write(ty, "SETNX")),
        }
    }

    async fn tl_insert(&self, key: &[u8], value: Bytes) -> Result<bool> {
        match self
            .node
            .tl_put(key, Content::Value(value), Expect::Absent)
            .await
        {
            Ok(_) => Ok(true),
            Err(ReplicationError::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A plain DEL of one key; returns whether it had a value.
    pub async fn del(&self, key: &[u8]) -> Result<bool> {
        Ok(!matches!(
            self.delete(key, DeleteOpts::Plain).await?,
            Deleted::Nothing
        ))
    }

    /// The refusal of a read-modify-write command (`INCR`, `APPEND`, `GETDEL`, `EXPIRE`, ...)
    /// on `key`'s bucket, naming what to use instead.
    pub fn refuse_read_modify_write(&self, key: &[u8], command: &str) -> ReplicationError {
        read_modify_write(self.kind(key), command)
    }

    /// The refusal of a substring command (`GETRANGE`, `SUBSTR`) on `key`'s bucket.
    pub fn refuse_substring(&self, key: &[u8], command: &str) -> ReplicationError {
        ReplicationError::Unsupported {
            command: command.into(),
            bucket_type: self.kind(key),
            hint: "; use GET".into(),
        }
    }

    // ----- the full operations -------------------------------------------------------------

    /// A read with its options (`MERIDIAN.GET`, `TL.GETLATEST`, `TL.GETCRIT`, `GET /kv`).
    ///
    /// # Errors
    /// `wrong_bucket_type` for a read mode on an eventual bucket or quorum options on a
    /// timeline bucket; the protocol's own errors.
    pub async fn read(&self, key: &[u8], opts: ReadOpts) -> Result<Read> {
        match (self.kind(key), opts) {
            (BucketType::Transactional, ReadOpts::Default) => {
                let (value, ts) = self.txn_get(key).await?;
                Ok(Read::Transactional { value, ts })
            }
            (ty @ BucketType::Transactional, _) => Err(wrong_type(key, ty, OPTIONS_ON_TXN)),
            (BucketType::Timeline, ReadOpts::Default) => {
                Ok(Read::Timeline(self.node.tl_get(key, ReadMode::Any).await?))
            }
            (BucketType::Timeline, ReadOpts::Mode(mode)) => {
                Ok(Read::Timeline(self.node.tl_get(key, mode).await?))
            }
            // A replica-selection strategy alone is a read_any's option too.
            (BucketType::Timeline, ReadOpts::Quorum(p))
                if p.replica_selection.is_some()
                    && Props {
                        replica_selection: None,
                        ..p
                    } == Props::default() =>
            {
                let r = self
                    .node
                    .tl_get_with(key, ReadMode::Any, p.replica_selection)
                    .await?;
                Ok(Read::Timeline(r))
            }
            (ty @ BucketType::Timeline, ReadOpts::Quorum(_)) => Err(wrong_type(
                key,
                ty,
                "timeline reads take a read mode (ANY, LATEST or CRITICAL <version>; HTTP \
                 read=any|latest|critical&version=<version>), not quorum options, which are \
                 for eventual buckets",
            )),
            (ty, ReadOpts::Mode(_)) => Err(wrong_type(
                key,
                ty,
                "read modes and versions need a timeline bucket; eventual reads take quorum \
                 options (R, PR, ...)",
            )),
            (_, ReadOpts::Default) => Ok(Read::Eventual(
                self.node.get(key, GetOptions::default()).await?,
            )),
            (_, ReadOpts::Quorum(props)) => Ok(Read::Eventual(
                self.node
                    .get(
                        key,
                        GetOptions {
                            props,
                            ..GetOptions::default()
                        },
                    )
                    .await?,
            )),
        }
    }

    /// A write with its options (`MERIDIAN.PUT`, `MERIDIAN.SET`, `TL.TAS`, `PUT /kv`).
    ///
    /// # Errors
    /// `wrong_bucket_type` for a precondition on an eventual bucket or a context or quorum
    /// options on a timeline bucket; the protocol's own errors (`version_mismatch`,
    /// `already_exists`, quorum failures, ...).
    pub async fn write(&self, key: &[u8], value: Bytes, opts: WriteOpts<'_>) -> Result<Written> {
        match (self.kind(key), opts) {
            (BucketType::Transactional, WriteOpts::Default) => Ok(Written::Transactional(
                self.txn_put(key, Some(value)).await?.1,
            )),
            (ty @ BucketType::Transactional, _) => Err(wrong_type(key, ty, OPTIONS_ON_TXN)),
            (BucketType::Timeline, WriteOpts::Default) => Ok(Written::Timeline(
                self.node
                    .tl_put(key, Content::Value(value), Expect::Any)
                    .await?,
            )),
            (BucketType::Timeline, WriteOpts::Timeline(expect)) => Ok(Written::Timeline(
                self.node.tl_put(key, Content::Value(value), expect).await?,
            )),
            (ty @ BucketType::Timeline, WriteOpts::Eventual { .. }) => {
                Err(wrong_type(key, ty, CONTEXT_ON_TIMELINE))
            }
            (ty, WriteOpts::Timeline(_)) => Err(wrong_type(key, ty, PRECONDITION_ON_EVENTUAL)),
            (_, WriteOpts::Default) => Ok(Written::Eventual(
                self.node
                    .put(key, value, None, PutOptions::default())
                    .await?,
            )),
            (_, WriteOpts::Eventual { context, props }) => Ok(Written::Eventual(
                self.node
                    .put(
                        key,
                        value,
                        context,
                        PutOptions {
                            props,
                            ..PutOptions::default()
                        },
                    )
                    .await?,
            )),
        }
    }

    /// A delete with its options (`MERIDIAN.DEL`, `DELETE /kv`).
    ///
    /// A plain timeline delete reads the master's record (`read_latest`) and, if it holds a
    /// value, writes a tombstone with a test-and-set on the version read. Why not a blind
    /// tombstone: a delete answers whether the key had a value, and a blind write of an
    /// absent key would make the insert arbiter create a generation only to hold a
    /// tombstone. The test-and-set makes the answer exact when writes race; after
    /// `TL_DELETE_ATTEMPTS` (3) lost races the last attempt deletes whatever is there (a
    /// plain delete is ordered after the writes it raced, as any write would be).
    ///
    /// # Errors
    /// As [`Dispatch::write`].
    pub async fn delete(&self, key: &[u8], opts: DeleteOpts<'_>) -> Result<Deleted> {
        match (self.kind(key), opts) {
            (BucketType::Transactional, DeleteOpts::Plain) => {
                match self.txn_put(key, None).await? {
                    (None, _) => Ok(Deleted::Nothing),
                    (Some(_), ts) => Ok(Deleted::Transactional(ts)),
                }
            }
            (ty @ BucketType::Transactional, _) => Err(wrong_type(key, ty, OPTIONS_ON_TXN)),
            (BucketType::Timeline, DeleteOpts::Plain | DeleteOpts::Timeline(Expect::Any)) => {
                self.tl_delete(key).await
            }
            (BucketType::Timeline, DeleteOpts::Timeline(expect)) => Ok(Deleted::Timeline(
                self.node.tl_put(key, Content::Tombstone, expect).await?,
            )),
            (ty @ BucketType::Timeline, DeleteOpts::Eventual { .. }) => {
                Err(wrong_type(key, ty, CONTEXT_ON_TIMELINE))
            }
            (ty, DeleteOpts::Timeline(_)) => Err(wrong_type(key, ty, PRECONDITION_ON_EVENTUAL)),
            (_, DeleteOpts::Plain) => self.eventual_delete(key, None, Props::default()).await,
            (_, DeleteOpts::Eventual { context, props }) => {
                self.eventual_delete(key, context, props).await
            }
        }
    }

    async fn eventual_delete(
        &self,
        key: &[u8],
        context: Option<&[u8]>,
        props: Props,
    ) -> Result<Deleted> {
        let opts = PutOptions {
            props,
            ..PutOptions::default()
        };
        let out = match context {
            Some(ctx) => self.node.delete(key, Some(ctx), opts).await?,
            None => match self.node.get(key, GetOptions::default()).await? {
                GetResult::NotFound { .. } => return Ok(Deleted::Nothing),
                found => {
                    let ctx = found.context();
                    self.node.delete(key, Some(&ctx), opts).await?
                }
            },
        };
        Ok(Deleted::Eventual(out))
    }

    /// A transactional key's live value and its commit timestamp, read by a read-only
    /// transaction at a fresh snapshot.
    async fn txn_get(&self, key: &[u8]) -> Result<(Option<Bytes>, Option<Timestamp>)> {
        let mut t = self.node.begin(TxnOptions {
            read_only: true,
            session: None,
        });
        let found = t.read_versions(&[Bytes::copy_from_slice(key)]).await?;
        let now = self.node.kernel().clock.now();
        Ok(match found.into_iter().next().flatten() {
            Some((ts, raw)) => (Entry::live(raw, now).map(|e| e.data), Some(ts)),
            None => (None, None),
        })
    }

    /// One-key read-modify-write transactions, retried on conflicts (a Redis command on a
    /// transactional bucket always takes effect, as it would on Redis): `f` gets the live
    /// value and returns what to write (`None`: write nothing) and a result.
    pub async fn txn_update<T>(
        &self,
        key: &[u8],
        mut f: impl FnMut(Option<Entry>) -> (Option<Option<Entry>>, T),
    ) -> Result<(T, Timestamp)> {
        let key = Bytes::copy_from_slice(key);
        let node = &self.node;
        // Each run borrows `f`; the runs never overlap.
        let f = parking_lot::Mutex::new(&mut f);
        let (f, key) = (&f, &key);
        Ok(node
            .retry_txn(TxnOptions::default(), TXN_ATTEMPTS, |mut t| async move {
                let raw = t.read(std::slice::from_ref(key)).await?;
                let now = node.kernel().clock.now();
                let (write, out) = (f.lock())(Entry::live(raw.into_iter().next().flatten(), now));
                if let Some(w) = write {
                    t.write(key.clone(), w.map(|e| e.encode()))?;
                }
                Ok((t, out))
            })
            .await?)
    }

    /// Writes (or deletes) a transactional key; returns the value it replaced.
    async fn txn_put(
        &self,
        key: &[u8],
        value: Option<Bytes>,
    ) -> Result<(Option<Bytes>, Timestamp)> {
        let (old, ts) = self
            .txn_update(key, |old| {
                let write = match (&value, &old) {
                    (None, None) => None,
                    _ => Some(value.clone().map(Entry::new)),
                };
                (write, old.map(|e| e.data))
            })
            .await?;
        Ok((old, ts))
    }

    async fn txn_set_nx(&self, key: &[u8], value: Bytes) -> Result<bool> {
        Ok(self
            .txn_update(key, |old| match old {
                Some(_) => (None, false),
                None => (Some(Some(Entry::new(value.clone()))), true),
            })
            .await?
            .0)
    }

    async fn tl_delete(&self, key: &[u8]) -> Result<Deleted> {
        let mut attempt = 1;
        loop {
            let latest = self.node.tl_get(key, ReadMode::Latest).await?;
            let Some(ver) = latest.record.filter(|r| !r.is_tombstone()).map(|r| r.ver) else {
                return Ok(Deleted::Nothing);
            };
            let expect = if attempt < TL_DELETE_ATTEMPTS {
                Expect::Version(ver)
            } else {
                Expect::Any
            };
            match self.node.tl_put(key, Content::Tombstone, expect).await {
                Err(ReplicationError::VersionMismatch { .. }) => attempt += 1,
                r => return r.map(Deleted::Timeline),
            }
        }
    }
}

/// The hint of a causal context or quorum option sent to a timeline bucket.
const CONTEXT_ON_TIMELINE: &str = "causal contexts and quorum options are for eventual buckets \
     (MERIDIAN.PUT, X-Meridian-Context); timeline writes take SET key value or MERIDIAN.SET key \
     value [IFVERSION <version>] (HTTP If-Match: <version>) for a test-and-set";

/// The hint of options sent to a transactional bucket.
const OPTIONS_ON_TXN: &str = "transactional buckets take no quorum options, causal contexts, \
     read modes or versions: each command is a snapshot-isolation transaction (use MULTI/EXEC, \
     WATCH or MERIDIAN.BEGIN for several keys)";

/// The hint of a version precondition sent to an eventual bucket.
const PRECONDITION_ON_EVENTUAL: &str = "versions and preconditions (IFVERSION, TL.TAS, If-Match, \
     If-None-Match) need a timeline bucket; eventual writes take a causal context (CONTEXT, \
     X-Meridian-Context)";

/// A `wrong_bucket_type` refusal of `key`'s bucket (of type `ty`).
fn wrong_type(key: &[u8], ty: BucketType, hint: &str) -> ReplicationError {
    ReplicationError::WrongBucketType {
        bucket: String::from_utf8_lossy(bucket_and_key(key).0).into_owned(),
        actual: ty.as_str().into(),
        hint: hint.into(),
    }
}

/// The refusal of a read-modify-write `command` on a bucket of type `ty`.
fn read_modify_write(ty: BucketType, command: &str) -> ReplicationError {
    ReplicationError::Unsupported {
        command: command.into(),
        bucket_type: ty,
        hint: match ty {
            BucketType::Timeline => "; read with MERIDIAN.GET key LATEST and write with \
                                     MERIDIAN.SET key value IFVERSION <version> (a \
                                     test-and-set) instead"
                .into(),
            _ => " (no atomic read-modify-write across replicas)".into(),
        },
    }
}
