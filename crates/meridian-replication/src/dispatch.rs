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
//!   instead; a command the key's type cannot honour is [`ReplicationError::Unsupported`]
//!   ([`Dispatch::refuse`], with the front end's reason). Both are `ErrorClass::BadRequest`,
//!   so the edge maps them like every other error.
//! - **The Redis view of a bucket.** Every bucket type stores a value in the envelope
//!   `[flags][expiry][data]` ([`Entry`]), so a Redis TTL is part of the value and replicates
//!   with it: eventual buckets resolve it with the value's causal context (the sibling shown
//!   carries its own expiry), timeline buckets through the record's master. An expired value
//!   is invisible at once to every read here, the full reads ([`Dispatch::read`]) included.
//!   [`Dispatch::get`] is what a plain GET shows: on an eventual bucket the sibling
//!   last-writer-wins would keep (greatest `(meta.ts_us, dot)`), on a timeline bucket the
//!   master's value (`read_latest`: as on Redis Cluster, a client reads its own writes; the
//!   HTTP API's `?mode=any` reads a nearby replica). [`Dispatch::set`] / [`Dispatch::store`] on an eventual bucket is
//!   a write that supersedes every value its coordinating primary holds, taking that
//!   replica's own clock as the context under the key's lock (`PutOptions::supersede_local`:
//!   no quorum read first, as Riak's coordinating vnode does); on a timeline bucket it is a
//!   `write`. [`Dispatch::del`] deletes with the context it read (eventual) or writes a
//!   tombstone over the master's version ([`Dispatch::delete`] with [`DeleteOpts::Plain`]).
//!   [`Dispatch::update`] is the one-key read-modify-write the front ends build the other
//!   Redis commands on, as atomic as the bucket type allows (a test-and-set at the master, a
//!   write with the context read, or a transaction).
//!   On a transactional bucket every one of them is a one-key snapshot-isolation transaction,
//!   retried on conflicts so that, as on Redis, the command always takes effect.
//! - **CRDTs on eventual buckets.** `INCRBY` ([`Dispatch::incr_by`]) and the hash commands
//!   `HSET`/`HDEL`/`HINCRBY`/`HSETNX` ([`Dispatch::hash_update`]) are applied by the key's
//!   coordinating replica to a PN-counter or a map CRDT (`eventual::counter`,
//!   `eventual::map`), so concurrent updates in different DCs merge instead of one winning.
//!   A hash command on a string and an increment of a hash are `wrong_type`. What a key shows
//!   is its last-writer-wins sibling's type: every counter sibling merged into one integer,
//!   every map sibling merged into one hash ([`Entry`] of kind `Hash`). [`Dispatch::update`]
//!   keeps a counter or a map a CRDT when the command kept its value (`EXPIRE`, `PERSIST`).
//! - **`maxmemory` before any write.** Every write of every bucket type through here
//!   ([`Dispatch::store`], [`Dispatch::update`] when it stores a new value, the CRDT updates
//!   and [`Dispatch::write`]) is refused with `out_of_memory` (Redis's `-OOM`) before
//!   anything is applied when this node or a node of the key's preference list reports
//!   itself full ([`EventualNode::write_refused`], module [`crate::memory`]); deletes are
//!   always served. Reads and writes record the key's access for LRU/LFU eviction.
//! - **Results say which protocol answered** ([`Read`], [`Written`], [`Deleted`]) where their
//!   shapes differ, so a front end only formats.

use crate::bucket::BucketType;
use crate::error::{ReplicationError, Result};
use crate::eventual::map::{self, Stamp};
use crate::eventual::{
    CrdtOp, CrdtReply, HashOps, HashReply, counter, elements, registers, sequence, shared::Expiring,
};
use crate::timeline::{Content, Expect, GroupItem, GroupOutcome, Record};
use crate::txn::TxnOptions;
use crate::{
    EventualNode, GetOptions, GetResult, PutOptions, PutResult, ReadMode, TlReadResult,
    TlWriteResult,
};
use bytes::Bytes;
use meridian_cluster::{Props, bucket_and_key};
use meridian_core::Timestamp;
use meridian_core::envelope::Kind;
use meridian_txn::Entry;

/// How many times a one-key transaction of the Redis view runs before its conflict is
/// returned.
const TXN_ATTEMPTS: u32 = 32;

/// How many times a plain timeline delete tries a test-and-set before it deletes
/// unconditionally (see [`Dispatch::delete`]).
const TL_DELETE_ATTEMPTS: u32 = 3;

/// How many times a timeline read-modify-write ([`Dispatch::update`]) tries its
/// test-and-set before the lost race is returned.
const TL_UPDATE_ATTEMPTS: u32 = 32;

/// How a group of keys is made atomic ([`Dispatch::atomic_group`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicGroup {
    /// One snapshot-isolation transaction (transactional buckets; keys of any slots).
    Transaction,
    /// One timeline group at the records' master (timeline buckets; keys of one slot's
    /// partition).
    Timeline,
}

/// Why `key`, of bucket type `ty`, cannot join an atomic group.
fn no_group(key: &[u8], ty: BucketType) -> String {
    let bucket = String::from_utf8_lossy(bucket_and_key(key).0).into_owned();
    format!(
        "key '{}' is in bucket '{bucket}' of type {ty}; MULTI/EXEC and WATCH need the keys of \
         one timeline bucket (type = \"timeline\") or of transactional buckets \
         (type = \"transactional\")",
        String::from_utf8_lossy(key)
    )
}

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
    /// `ANY` with a replica-selection strategy: `read_any` with that strategy on a timeline
    /// bucket; on another bucket type, the read mode `ANY` (refused, `wrong_bucket_type`).
    AnyWith(Props),
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

/// What a Redis command needs of its key's bucket, as the front end classifies the command
/// (the Redis layer's semantics); [`Dispatch::plan`] decides how the key's bucket type
/// serves it, or refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// It only reads the key.
    Read,
    /// A write whose value does not depend on what the key held (a plain SET, a SET with
    /// only a future expiry).
    Blind,
    /// A read-modify-write whose outcome a racing write cannot change (the EXPIRE family,
    /// PERSIST, GETEX, SET KEEPTTL): served with the causal context it read on eventual
    /// buckets.
    Reconcilable,
    /// A read-modify-write whose outcome depends on the value it replaces (SET NX/XX/GET,
    /// SETNX, GETSET, GETDEL, APPEND, SETRANGE, INCRBYFLOAT, HINCRBYFLOAT): needs a bucket
    /// that orders the key's writes.
    Ordered,
    /// An integer increment (INCR, DECR, INCRBY, DECRBY): a PN-counter on eventual buckets.
    Counter,
    /// A hash write (HSET, HMSET, HSETNX, HDEL, HINCRBY): a map CRDT on eventual buckets.
    MapUpdate,
    /// A set or sorted-set write whose reply does not need one order of the key's writes
    /// (SADD, SREM, ZADD, ZINCRBY, ZREM, ZREMRANGEBY*): an observed-remove set CRDT on
    /// eventual buckets; `true` when it increments scores (ZINCRBY, ZADD ... INCR).
    ElementUpdate(bool),
    /// A HyperLogLog write (PFADD): a register-maximum CRDT on eventual buckets.
    RegisterMax,
    /// A list write whose reply does not need one order of the key's writes (pushes,
    /// LINSERT, LSET, LREM, LTRIM): a sequence CRDT on eventual buckets.
    SequenceUpdate,
    /// Several keys written atomically (MSETNX): needs a transactional bucket.
    AtomicGroup,
}

/// How [`Dispatch::plan`] serves a [`Need`] on a key's bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Read what a plain GET reads ([`Dispatch::get_entry`]).
    Read,
    /// A blind write ([`Dispatch::store`]).
    Store,
    /// A one-key read-modify-write ([`Dispatch::update`]).
    Update,
    /// The key's PN-counter ([`Dispatch::incr_by`]).
    Counter,
    /// The key's map CRDT ([`Dispatch::hash_update`]).
    Map,
    /// The key's set or sorted-set CRDT ([`Dispatch::element_update`]); `true` when the
    /// command increments scores.
    Elements(bool),
    /// The key's HLL CRDT ([`Dispatch::register_update`]).
    Registers,
    /// The key's list CRDT ([`Dispatch::sequence_update`]).
    Sequence,
}

/// Why an eventual bucket refuses a command whose outcome a racing write would change.
const NOT_ATOMIC_ON_EVENTUAL: &str = ": replicas of an eventual bucket accept writes \
     concurrently, so a read-modify-write is not atomic there and one of two racing writes \
     would be lost; use a timeline bucket (its record's master orders the writes) or a \
     transactional one";

/// Why a timeline or eventual bucket refuses a command that must write several keys at once.
const SEVERAL_KEYS_AT_ONCE: &str = ": it must write several keys atomically, and a timeline \
     bucket orders each key's writes on its own; use a transactional bucket (MULTI/EXEC)";

/// [`Dispatch::plan`]'s decision for a bucket of type `ty`, or why it refuses.
fn plan_for(ty: BucketType, need: Need) -> std::result::Result<Plan, &'static str> {
    match (ty, need) {
        (_, Need::Read) => Ok(Plan::Read),
        (_, Need::Blind) => Ok(Plan::Store),
        (BucketType::Transactional, _) => Ok(Plan::Update),
        (_, Need::AtomicGroup) => Err(SEVERAL_KEYS_AT_ONCE),
        (BucketType::Timeline, _) => Ok(Plan::Update),
        (BucketType::Eventual, Need::Reconcilable) => Ok(Plan::Update),
        (BucketType::Eventual, Need::Ordered) => Err(NOT_ATOMIC_ON_EVENTUAL),
        (BucketType::Eventual, Need::Counter) => Ok(Plan::Counter),
        (BucketType::Eventual, Need::MapUpdate) => Ok(Plan::Map),
        (BucketType::Eventual, Need::ElementUpdate(incr)) => Ok(Plan::Elements(incr)),
        (BucketType::Eventual, Need::RegisterMax) => Ok(Plan::Registers),
        (BucketType::Eventual, Need::SequenceUpdate) => Ok(Plan::Sequence),
    }
}

/// What an eventual read returned: the siblings' values and which one last-writer-wins
/// shows (`None`: notfound).
struct Siblings {
    values: Vec<Bytes>,
    latest: Option<usize>,
}

impl Siblings {
    /// The value last-writer-wins shows, if the key has any.
    fn latest(&self) -> Option<&Bytes> {
        self.values.get(self.latest?)
    }
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

    /// The `maxmemory` pre-check of a write (see the module docs); records the access.
    fn admit_write(&self, key: &[u8]) -> Result<()> {
        self.node.write_refused(key)?;
        self.node.touch_key(key);
        Ok(())
    }

    // ----- the Redis view -----------------------------------------------------------------

    /// The command's time in the Redis view: what expiry is judged by.
    fn now(&self) -> Timestamp {
        self.node.clock_now()
    }

    /// The live entry a plain GET shows, with its expiry (`None`: notfound, deleted, expired
    /// or absent).
    pub async fn get_entry(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.node.touch_key(key);
        let raw = match self.kind(key) {
            // At the master, as Redis Cluster reads: a client reads its own writes, and a
            // WATCH loop's GET sees at least the version WATCH holds.
            BucketType::Timeline => self
                .node
                .tl_get(key, ReadMode::Latest)
                .await?
                .value()
                .cloned(),
            BucketType::Transactional => return Ok(self.txn_get(key).await?.0),
            BucketType::Eventual => {
                return Ok(match self.node.get(key, GetOptions::default()).await? {
                    GetResult::Found { values, latest, .. } => {
                        counter::resolve(&values, latest, self.now())
                    }
                    GetResult::NotFound { .. } => None,
                });
            }
        };
        Ok(Entry::live(raw, self.now()))
    }

    /// The value a plain GET shows (`None`: notfound, deleted, expired or absent).
    ///
    /// # Errors
    /// `wrong_type` when the key holds a hash, as Redis's GET answers.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.get_entry(key).await? {
            Some(e) if e.kind != Kind::String => Err(ReplicationError::WrongType),
            e => Ok(e.map(|e| e.data)),
        }
    }

    /// Whether a plain GET would show a value.
    pub async fn exists(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get_entry(key).await?.is_some())
    }

    /// A plain SET: `value` with no expiry (see the module docs).
    pub async fn set(&self, key: &[u8], value: Bytes) -> Result<()> {
        self.store(key, Entry::new(value)).await
    }

    /// A SET of a whole entry, value and expiry, superseding what is there (a blind write:
    /// no read first on timeline and eventual buckets).
    pub async fn store(&self, key: &[u8], entry: Entry) -> Result<()> {
        self.admit_write(key)?;
        match self.kind(key) {
            BucketType::Timeline => {
                self.node
                    .tl_put(key, Content::Value(entry.encode()), Expect::Any)
                    .await?;
            }
            BucketType::Transactional => {
                let entry = Some(entry);
                self.txn_update(key, |_, _| (Some(entry.clone()), ()))
                    .await?;
            }
            BucketType::Eventual => {
                // No quorum read first: the coordinating primary supersedes what it holds.
                let opts = PutOptions {
                    supersede_local: true,
                    ..PutOptions::default()
                };
                self.node.put(key, entry.encode(), None, opts).await?;
            }
        }
        Ok(())
    }

    /// A plain DEL of one key; returns whether it had a value.
    pub async fn del(&self, key: &[u8]) -> Result<bool> {
        Ok(!matches!(
            self.delete(key, DeleteOpts::Plain).await?,
            Deleted::Nothing
        ))
    }

    /// A one-key read-modify-write in the Redis view: `f` gets the key's live entry and the
    /// command's time, and returns what to store (`None`: nothing, `Some(None)`: delete) and
    /// a result. How atomic it is depends on the bucket type:
    ///
    /// - timeline: the master's record is read (`read_latest`) and the write is a
    ///   test-and-set on its version (insert-if-absent over no record), retried with a
    ///   jittered backoff when another write won, up to `TL_UPDATE_ATTEMPTS` times: the
    ///   master orders every write of the key, so no update is lost and `f`'s decision is
    ///   made on the value it replaces (`f` may run several times);
    /// - eventual: one read with the bucket's R, then one write (or delete) with the causal
    ///   context it returned, which supersedes exactly the values read. A write the read
    ///   missed stays a sibling, and last-writer-wins chooses what GET shows: only commands
    ///   whose outcome does not depend on such a race (expiry changes) are run this way;
    /// - transactional: a one-key snapshot-isolation transaction, retried on conflicts.
    ///
    /// # Errors
    /// The protocol's errors; `version_mismatch` when every attempt lost its race.
    pub async fn update<T>(
        &self,
        key: &[u8],
        mut f: impl FnMut(Option<Entry>, Timestamp) -> (Option<Option<Entry>>, T),
    ) -> Result<T> {
        match self.kind(key) {
            // The value is decided at the master or in the transaction: refused up front.
            BucketType::Timeline => {
                self.admit_write(key)?;
                self.tl_update(key, f).await
            }
            BucketType::Transactional => {
                self.admit_write(key)?;
                Ok(self.txn_update(key, f).await?.0)
            }
            BucketType::Eventual => {
                let got = self
                    .node
                    .get(
                        key,
                        GetOptions {
                            deleted_context: true,
                            ..GetOptions::default()
                        },
                    )
                    .await?;
                let ctx = got.context();
                let ctx = (!ctx.is_empty()).then_some(&ctx[..]);
                let now = self.now();
                let (shown, count, hash, collection, hll, list) = match &got {
                    GetResult::Found { values, latest, .. } => {
                        let all = || values.iter().map(|v| &v[..]);
                        let shown_raw = values.get(*latest);
                        (
                            counter::resolve(values, *latest, now),
                            counter::shown_counter(values, *latest),
                            shown_raw
                                .filter(|v| map::is_map(v))
                                .and_then(|_| map::merge_all(all())),
                            shown_raw
                                .filter(|v| elements::is_elements(v))
                                .and_then(|_| elements::merge_all(all())),
                            shown_raw
                                .filter(|v| registers::is_registers(v))
                                .and_then(|_| registers::merge_all(all())),
                            shown_raw
                                .filter(|v| sequence::is_sequence(v))
                                .and_then(|_| sequence::merge_all(all())),
                        )
                    }
                    GetResult::NotFound { .. } => (None, None, None, None, None, None),
                };
                let before = shown.as_ref().map(|e| e.data.clone());
                let (write, out) = f(shown, now);
                match write {
                    Some(Some(e)) => {
                        // A new value may add memory; a kept one (EXPIRE, PERSIST) does not,
                        // and Redis serves those over the limit.
                        if before.as_ref() != Some(&e.data) {
                            self.admit_write(key)?;
                        }
                        // A counter or a hash whose value the command kept (EXPIRE, PERSIST)
                        // stays a CRDT, so updates racing with it are still merged; a hash's
                        // new expiry is stamped now, so it wins over the older one.
                        let kept = before.as_ref() == Some(&e.data);
                        let at = Stamp {
                            ts: now.0,
                            id: u64::from(self.node.id().0),
                        };
                        let raw = match (count, hash, collection) {
                            (Some(c), _, _) if kept => c.encode(e.expiry),
                            (_, Some(mut m), _) if kept && e.kind == Kind::Hash => {
                                m.set_expiry(e.expiry, at);
                                m.encode()
                            }
                            (_, _, Some(mut c)) if kept && e.kind == c.kind() => {
                                c.set_expiry(e.expiry, at);
                                c.encode()
                            }
                            (_, _, _) if kept && hll.is_some() => {
                                let mut r = hll.unwrap_or_default();
                                r.set_expiry(e.expiry, at);
                                r.encode()
                            }
                            (_, _, _) if kept && list.is_some() => {
                                let mut l = list.unwrap_or_default();
                                l.set_expiry(e.expiry, at);
                                l.encode()
                            }
                            _ => e.encode(),
                        };
                        self.node.put(key, raw, ctx, PutOptions::default()).await?;
                    }
                    Some(None) if ctx.is_some() => {
                        self.node.delete(key, ctx, PutOptions::default()).await?;
                    }
                    _ => {}
                }
                Ok(out)
            }
        }
    }

    async fn tl_update<T>(
        &self,
        key: &[u8],
        mut f: impl FnMut(Option<Entry>, Timestamp) -> (Option<Option<Entry>>, T),
    ) -> Result<T> {
        let mut backoff_us = 500u64;
        let mut attempt = 1;
        loop {
            let record = self.node.tl_get(key, ReadMode::Latest).await?.record;
            let now = self.now();
            let live = Entry::live(
                record.as_ref().and_then(|r| r.content.value().cloned()),
                now,
            );
            let (write, out) = f(live, now);
            let content = match write {
                None => return Ok(out),
                Some(Some(e)) => Content::Value(e.encode()),
                Some(None) => Content::Tombstone,
            };
            // Nothing to delete: no record, or a tombstone already.
            if content.is_tombstone() && record.as_ref().is_none_or(|r| r.is_tombstone()) {
                return Ok(out);
            }
            let expect = record
                .as_ref()
                .map_or(Expect::Absent, |r| Expect::Version(r.ver));
            match self.node.tl_put(key, content, expect).await {
                Ok(_) => return Ok(out),
                Err(
                    ReplicationError::VersionMismatch { .. }
                    | ReplicationError::AlreadyExists { .. },
                ) if attempt < TL_UPDATE_ATTEMPTS => {
                    attempt += 1;
                    let jitter = {
                        use rand::Rng;
                        self.node.kernel().rng.lock().random_range(0..=backoff_us)
                    };
                    tokio::time::sleep(std::time::Duration::from_micros(
                        backoff_us / 2 + jitter / 2,
                    ))
                    .await;
                    backoff_us = (backoff_us * 2).min(50_000);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Redis's `INCRBY key delta` on an eventual bucket: an increment of the key's
    /// PN-counter ([`crate::eventual::counter`]) at its coordinating replica, merged with
    /// every concurrent increment rather than overwritten; returns the counter's value at
    /// that replica after the increment.
    ///
    /// # Errors
    /// `wrong_type` over a hash, `not_an_integer` over a value that is no integer,
    /// `increment_overflow`, `unsupported` on a bucket with `allow_mult = false` or of another
    /// type; the protocol's errors.
    pub async fn incr_by(&self, key: &[u8], delta: i64) -> Result<i64> {
        let ty = self.kind(key);
        if ty != BucketType::Eventual {
            return Err(self.refuse(key, "MERIDIAN counter increment", "; use INCRBY"));
        }
        match self
            .put_crdt(key, CrdtOp::CounterAdd(delta), false)
            .await?
            .crdt
        {
            Some(CrdtReply::Counter(v)) => Ok(v),
            _ => Err(ReplicationError::Storage {
                reason: "the coordinator's reply to an increment held no counter".into(),
            }),
        }
    }

    /// A Redis hash command (`HSET`, `HDEL`, `HINCRBY`, `HSETNX`) on an eventual bucket: an
    /// update of the key's map CRDT ([`crate::eventual::map`]) at its coordinating replica,
    /// merged field by field with every concurrent update; returns the command's answer at
    /// that replica. Timeline and transactional buckets run hash commands as ordinary values
    /// through [`Dispatch::update`] (this refuses them); `HINCRBYFLOAT` is not served on
    /// eventual buckets.
    ///
    /// # Errors
    /// `wrong_type` when the key holds a string (plain or counter); `not_an_integer` /
    /// `increment_overflow` for `HINCRBY`; `unsupported` on a bucket with `allow_mult =
    /// false` or of another type; the protocol's errors.
    pub async fn hash_update(&self, key: &[u8], ops: HashOps) -> Result<HashReply> {
        if self.kind(key) != BucketType::Eventual {
            return Err(self.refuse(
                key,
                ops.command(),
                "; hashes of this bucket type are updated as whole values (Dispatch::update)",
            ));
        }
        // HDEL frees memory: as in Redis (no `denyoom` flag), it runs over the limit.
        let frees = matches!(ops, HashOps::Del(_));
        match self
            .put_crdt(key, CrdtOp::HashUpdate(ops), frees)
            .await?
            .crdt
        {
            Some(CrdtReply::Hash(r)) => Ok(r),
            _ => Err(ReplicationError::Storage {
                reason: "the coordinator's reply to a hash command held no answer".into(),
            }),
        }
    }

    /// A set or sorted-set command on an eventual bucket (see
    /// [`crate::eventual::elements`]): `f` runs the command over the collection a read with
    /// the bucket's R shows, as [`Dispatch::update`]'s does, and what it changed — members
    /// added, re-scored (increments when `increments`) or removed, with the clock of what it
    /// read — is applied by the key's coordinator to its collection, merged member by member
    /// with every concurrent change. The answer is `f`'s, over what the read showed.
    ///
    /// # Errors
    /// `wrong_type` when the coordinator holds another type; `unsupported` on another bucket
    /// type or with `allow_mult = false`; the protocol's errors.
    pub async fn element_update<T>(
        &self,
        key: &[u8],
        increments: bool,
        f: impl FnOnce(Option<Entry>, Timestamp) -> (Option<Option<Entry>>, T),
    ) -> Result<T> {
        self.crdt_command(key, "a set CRDT update", f, |read, shown, stored| {
            // What the read observed: the collection's clock; nothing to observe when it
            // showed no collection (a removal then removes what the coordinator holds).
            let observed = match read.latest() {
                None => Some(Vec::new()),
                Some(v) if elements::is_elements(v) => {
                    elements::merge_all(read.values.iter().map(|v| &v[..])).map(|c| c.observed())
                }
                Some(_) => None,
            };
            let ops = elements::diff(shown, stored.as_ref(), increments, observed)?;
            let frees = ops.only_removes();
            Ok((!ops.is_empty()).then(|| (CrdtOp::Elements(Box::new(ops)), frees)))
        })
        .await
    }

    /// PFADD on an eventual bucket (see [`crate::eventual::registers`]): `f` runs it over
    /// the HLL a read with the bucket's R shows, and the registers it raised are raised in
    /// the key's HLL at its coordinator, merged by maximum with every concurrent PFADD. The
    /// answer is `f`'s, over what the read showed.
    ///
    /// # Errors
    /// `wrong_type` when the coordinator holds another value; `unsupported` on another
    /// bucket type or with `allow_mult = false`; the protocol's errors.
    pub async fn register_update<T>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<Entry>, Timestamp) -> (Option<Option<Entry>>, T),
    ) -> Result<T> {
        self.crdt_command(key, "an HLL CRDT update", f, |_, shown, stored| {
            let Some(stored) = stored else {
                return Ok(None);
            };
            let regs = registers::raised(shown, &stored).ok_or(ReplicationError::WrongType)?;
            // Nothing rose over an HLL that exists: nothing to write.
            Ok((!regs.is_empty() || shown.is_none()).then(|| (CrdtOp::Registers(regs), false)))
        })
        .await
    }

    /// A list command on an eventual bucket (see [`crate::eventual::sequence`]): `f` runs it
    /// over the list a read with the bucket's R shows, and the run of the list it replaced
    /// (the elements removed, by place, and the new ones between their neighbours) is applied
    /// by the key's coordinator to its sequence, merged with every concurrent change. The
    /// answer is `f`'s, over what the read showed.
    ///
    /// # Errors
    /// `wrong_type` when the coordinator holds another type; `unsupported` on another bucket
    /// type or with `allow_mult = false`; the protocol's errors.
    pub async fn sequence_update<T>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<Entry>, Timestamp) -> (Option<Option<Entry>>, T),
    ) -> Result<T> {
        self.crdt_command(key, "a list CRDT update", f, |read, shown, stored| {
            let places = match read.latest() {
                Some(v) if sequence::is_sequence(v) => {
                    sequence::merge_all(read.values.iter().map(|v| &v[..]))
                        .map(|s| s.places())
                        .unwrap_or_default()
                }
                // A plain list's places, as its coordinator gives them.
                _ => shown
                    .filter(|e| e.kind == Kind::List)
                    .and_then(|e| meridian_core::list_data::decode(&e.data).ok())
                    .map_or_else(Vec::new, |l| sequence::plain_places(l.len())),
            };
            let ops = sequence::diff(shown, &places, stored.as_ref())?;
            let frees = ops.values.is_empty();
            Ok((!ops.is_empty()).then(|| (CrdtOp::Sequence(Box::new(ops)), frees)))
        })
        .await
    }

    /// The one flow of a command run over an eventual CRDT (`element_update`,
    /// `register_update`, `sequence_update`): refuses another bucket type; reads with the
    /// bucket's R; runs `f` over the value it shows; asks `change` what to send the key's
    /// coordinator, given the read's siblings, the shown value and what `f` stored (`None`:
    /// nothing to send; `true` beside the op: it only frees memory); sends it. `f`'s answer
    /// is the command's.
    async fn crdt_command<T>(
        &self,
        key: &[u8],
        what: &str,
        f: impl FnOnce(Option<Entry>, Timestamp) -> (Option<Option<Entry>>, T),
        change: impl FnOnce(&Siblings, Option<&Entry>, Option<Entry>) -> Result<Option<(CrdtOp, bool)>>,
    ) -> Result<T> {
        if self.kind(key) != BucketType::Eventual {
            return Err(self.refuse(key, what, "; use Dispatch::update"));
        }
        let now = self.now();
        let read = match self.node.get(key, GetOptions::default()).await? {
            GetResult::Found { values, latest, .. } => Siblings {
                values,
                latest: Some(latest),
            },
            GetResult::NotFound { .. } => Siblings {
                values: Vec::new(),
                latest: None,
            },
        };
        let shown = read
            .latest
            .and_then(|latest| counter::resolve(&read.values, latest, now));
        let (write, out) = f(shown.clone(), now);
        let Some(stored) = write else {
            return Ok(out);
        };
        if let Some((op, frees)) = change(&read, shown.as_ref(), stored)? {
            self.put_crdt(key, op, frees).await?;
        }
        Ok(out)
    }

    /// Sends CRDT operation `op` on `key` to its coordinator. An operation that only frees
    /// memory (a removal: Redis's commands without `denyoom`) runs over `maxmemory`.
    async fn put_crdt(&self, key: &[u8], op: CrdtOp, frees: bool) -> Result<PutResult> {
        if frees {
            self.node.touch_key(key);
        } else {
            self.admit_write(key)?;
        }
        let opts = PutOptions {
            crdt: Some(op),
            ..PutOptions::default()
        };
        self.node.put(key, Bytes::new(), None, opts).await
    }

    /// The refusal of `command` on `key`'s bucket: `why` says why the bucket type cannot
    /// honour it (starting with its separator, as `"; use GET"`).
    pub fn refuse(&self, key: &[u8], command: &str, why: &str) -> ReplicationError {
        ReplicationError::Unsupported {
            command: command.into(),
            bucket_type: self.kind(key),
            hint: why.into(),
        }
    }

    /// How `key`'s bucket serves a command that needs `need` — the one decision of what a
    /// bucket type can honour (see [`Need`]): timeline and transactional buckets order each
    /// key's writes, so every one-key command is an [`Plan::Update`] there; eventual buckets
    /// serve counters and hash writes as CRDTs and refuse what a race would change.
    ///
    /// # Errors
    /// `unsupported` naming `command` (as a client wrote it) and what to use instead.
    pub fn plan(&self, key: &[u8], need: Need, command: &str) -> Result<Plan> {
        let ty = self.kind(key);
        plan_for(ty, need).map_err(|why| ReplicationError::Unsupported {
            command: command.into(),
            bucket_type: ty,
            hint: why.into(),
        })
    }

    /// How `keys` can be written as one atomic group (MULTI/EXEC, WATCH): as one transaction
    /// when every key is in a transactional bucket, as one timeline group
    /// ([`Dispatch::tl_commit_group`]) when every key is in a timeline bucket and one hash slot's
    /// partition; else why not, as the error line's text.
    ///
    /// # Errors
    /// The reason, naming the first key of another bucket type (eventual buckets have no
    /// atomic groups: their replicas accept concurrent writes), or Redis Cluster's
    /// `CROSSSLOT` when timeline keys span partitions.
    pub fn atomic_group<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> std::result::Result<AtomicGroup, String> {
        let Some(first) = keys.first().map(AsRef::as_ref) else {
            return Ok(AtomicGroup::Transaction);
        };
        let ty = self.kind(first);
        let group = match ty {
            BucketType::Transactional => AtomicGroup::Transaction,
            BucketType::Timeline => AtomicGroup::Timeline,
            BucketType::Eventual => return Err(no_group(first, ty)),
        };
        if let Some(k) = keys.iter().map(AsRef::as_ref).find(|k| self.kind(k) != ty) {
            return Err(no_group(k, self.kind(k)));
        }
        if group == AtomicGroup::Timeline && !self.node.same_partition(keys) {
            return Err("CROSSSLOT Keys in request don't hash to the same slot".into());
        }
        Ok(group)
    }

    /// The records of `keys` of a timeline group, each read at its master (`read_latest`),
    /// in parallel.
    ///
    /// # Errors
    /// The first read's error (`master_unavailable`, ...).
    pub async fn tl_group_read<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Record>>> {
        let reads = keys
            .iter()
            .map(|k| self.node.tl_get(k.as_ref(), ReadMode::Latest));
        futures_util::future::join_all(reads)
            .await
            .into_iter()
            .map(|r| r.map(|r| r.record))
            .collect()
    }

    /// Commits a timeline group: `items` checked against and written over the records
    /// `read` returned ([`crate::EventualNode::tl_commit_group`]); refused before anything
    /// applies when this node or a replica reports itself full and the group writes.
    ///
    /// # Errors
    /// `out_of_memory`; the errors of a timeline write.
    pub async fn tl_commit_group(
        &self,
        items: Vec<GroupItem>,
        read: &[Option<Record>],
    ) -> Result<GroupOutcome> {
        for item in items.iter().filter(|i| i.content.is_some()) {
            self.admit_write(&item.key)?;
        }
        self.node.tl_commit_group(items, read).await
    }

    /// Live objects' keys in `[start, end)`, at most `limit`, and whether more may follow
    /// ([`EventualNode::blob_list`]).
    ///
    /// # Errors
    /// `unsupported` unless `start` is in an eventual bucket: timeline records and
    /// transactional versions live in other key spaces, which listings do not scan yet.
    pub async fn list_objects(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<(Vec<crate::blob::Listed>, bool)> {
        let ty = self.kind(start);
        if ty != BucketType::Eventual {
            return Err(ReplicationError::Unsupported {
                command: "listing the keys".into(),
                bucket_type: ty,
                hint: " yet (objects in it are read and written by key); list an eventual \
                       bucket"
                    .into(),
            });
        }
        self.node.blob_list(start, end, limit).await
    }

    // ----- the full operations -------------------------------------------------------------

    /// A read with its options (`MERIDIAN.GET`, `TL.GETLATEST`, `TL.GETCRIT`, `GET /kv`).
    ///
    /// # Errors
    /// `wrong_bucket_type` for a read mode on an eventual bucket or quorum options on a
    /// timeline bucket; the protocol's own errors.
    pub async fn read(&self, key: &[u8], opts: ReadOpts) -> Result<Read> {
        self.node.touch_key(key);
        let read = self.read_stored(key, opts).await?;
        let now = self.now();
        Ok(match read {
            Read::Eventual(got) => Read::Eventual(live_siblings(got, now)),
            Read::Timeline(got) => Read::Timeline(live_record(got, now)),
            txn @ Read::Transactional { .. } => txn,
        })
    }

    /// [`Dispatch::read`] before the envelopes of eventual and timeline values are opened.
    async fn read_stored(&self, key: &[u8], opts: ReadOpts) -> Result<Read> {
        let ty = self.kind(key);
        let opts = match opts {
            ReadOpts::AnyWith(props) if ty == BucketType::Timeline => ReadOpts::Quorum(props),
            opts => opts,
        };
        match (ty, opts) {
            (BucketType::Transactional, ReadOpts::Default) => {
                let (entry, ts) = self.txn_get(key).await?;
                Ok(Read::Transactional {
                    value: entry.map(|e| e.data),
                    ts,
                })
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
            (ty, ReadOpts::Mode(_) | ReadOpts::AnyWith(_)) => Err(wrong_type(
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
        let ty = self.kind(key);
        self.admit_write(key)?;
        // Eventual and timeline values are stored in the envelope too (no expiry).
        let value = match ty {
            BucketType::Transactional => value,
            _ => Entry::new(value).encode(),
        };
        match (ty, opts) {
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
            // An expired value is no value to delete, as on Redis (the sweep reaps it).
            None => {
                match live_siblings(self.node.get(key, GetOptions::default()).await?, self.now()) {
                    GetResult::NotFound { .. } => return Ok(Deleted::Nothing),
                    found => {
                        let ctx = found.context();
                        self.node.delete(key, Some(&ctx), opts).await?
                    }
                }
            }
        };
        Ok(Deleted::Eventual(out))
    }

    /// A transactional key's live entry and the commit timestamp of the version read, read
    /// by a read-only transaction at a fresh snapshot.
    async fn txn_get(&self, key: &[u8]) -> Result<(Option<Entry>, Option<Timestamp>)> {
        let mut t = self.node.begin(TxnOptions {
            read_only: true,
            session: None,
        });
        let found = t.read_versions(&[Bytes::copy_from_slice(key)]).await?;
        let now = self.node.kernel().clock.now();
        Ok(match found.into_iter().next().flatten() {
            Some((ts, raw)) => (Entry::live(raw, now), Some(ts)),
            None => (None, None),
        })
    }

    /// One-key read-modify-write transactions, retried on conflicts (a Redis command on a
    /// transactional bucket always takes effect, as it would on Redis): `f` gets the live
    /// value and the transaction's time and returns what to write (`None`: write nothing)
    /// and a result.
    async fn txn_update<T>(
        &self,
        key: &[u8],
        mut f: impl FnMut(Option<Entry>, Timestamp) -> (Option<Option<Entry>>, T),
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
                let (write, out) =
                    (f.lock())(Entry::live(raw.into_iter().next().flatten(), now), now);
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
            .txn_update(key, |old, _| {
                let write = match (&value, &old) {
                    (None, None) => None,
                    _ => Some(value.clone().map(Entry::new)),
                };
                (write, old.map(|e| e.data))
            })
            .await?;
        Ok((old, ts))
    }

    async fn tl_delete(&self, key: &[u8]) -> Result<Deleted> {
        let mut attempt = 1;
        loop {
            // An expired value is no value to delete, as on Redis (the sweep reaps it).
            let latest = live_record(self.node.tl_get(key, ReadMode::Latest).await?, self.now());
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

/// `got` as the Redis view shows it: each sibling's data out of its envelope and the
/// counter siblings merged into one integer (`counter::show`), expired ones (and any that
/// is not an envelope) left out; notfound, with the context, when none is live.
fn live_siblings(got: GetResult, now: Timestamp) -> GetResult {
    let GetResult::Found {
        values,
        context,
        latest,
    } = got
    else {
        return got;
    };
    let (live, shown) = counter::show(values, latest, now);
    if live.is_empty() {
        return GetResult::NotFound {
            deleted_context: Some(context),
        };
    }
    GetResult::Found {
        latest: shown.unwrap_or(live.len() - 1),
        values: live,
        context,
    }
}

/// `got` as the Redis view shows it: the value out of its envelope; an expired value (or one
/// that is not an envelope) reads as the tombstone it will become, keeping its version.
fn live_record(mut got: TlReadResult, now: Timestamp) -> TlReadResult {
    if let Some(r) = &mut got.record
        && let Content::Value(raw) = &r.content
    {
        r.content = match Entry::live(Some(raw.clone()), now) {
            Some(e) => Content::Value(e.data),
            None => Content::Tombstone,
        };
    }
    got
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_each_bucket_type_honours() {
        use BucketType::*;
        for need in [
            Need::Ordered,
            Need::Reconcilable,
            Need::Counter,
            Need::MapUpdate,
        ] {
            assert_eq!(plan_for(Timeline, need), Ok(Plan::Update), "{need:?}");
            assert_eq!(plan_for(Transactional, need), Ok(Plan::Update), "{need:?}");
        }
        assert_eq!(
            plan_for(Eventual, Need::Ordered),
            Err(NOT_ATOMIC_ON_EVENTUAL)
        );
        assert_eq!(plan_for(Eventual, Need::Reconcilable), Ok(Plan::Update));
        assert_eq!(plan_for(Eventual, Need::Counter), Ok(Plan::Counter));
        assert_eq!(plan_for(Eventual, Need::MapUpdate), Ok(Plan::Map));
        assert_eq!(
            plan_for(Eventual, Need::AtomicGroup),
            Err(SEVERAL_KEYS_AT_ONCE)
        );
        assert_eq!(
            plan_for(Timeline, Need::AtomicGroup),
            Err(SEVERAL_KEYS_AT_ONCE)
        );
        assert_eq!(plan_for(Transactional, Need::AtomicGroup), Ok(Plan::Update));
        for ty in [Eventual, Timeline, Transactional] {
            assert_eq!(plan_for(ty, Need::Read), Ok(Plan::Read));
            assert_eq!(plan_for(ty, Need::Blind), Ok(Plan::Store));
        }
    }
}
