//! Pub/Sub on one node: who listens to which channel, pattern and shard channel, and the
//! delivery of a published message to each of them.
//!
//! A subscribing connection owns a [`Mailbox`]: an unbounded queue of encoded messages it
//! writes out whenever it is not running a command. The [`Hub`] maps channels, patterns and
//! shard channels to the mailboxes subscribed to them; a publish encodes the message once per
//! protocol (RESP2 arrays, RESP3 pushes) and queues it on every matching mailbox.
//!
//! Guarantees:
//! - a connection receives each message at most once per subscription that matches it
//!   (a channel subscription first, then each matching pattern, as Redis), in publish order:
//!   queues are FIFO and a publish queues on every mailbox under one lock of the registry;
//! - memory stays bounded: a mailbox holding more than the hard limit of queued bytes, or
//!   more than the soft limit for longer than the soft period (Redis's
//!   `client-output-buffer-limit pubsub`), is closed: it takes no more messages and its
//!   connection is disconnected, as Redis disconnects a subscriber that falls behind;
//! - a connection's subscriptions are gone from the registry once it unsubscribes, resets or
//!   closes (dropping its [`Subscriptions`](crate::resp) removes them).

use bytes::{BufMut, Bytes, BytesMut};
use meridian_redis::value::glob_match;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Redis's `client-output-buffer-limit` for the `pubsub` class: a subscriber is disconnected
/// once `hard` bytes are queued for it, or more than `soft` bytes for `soft_for` (0: no
/// limit of that kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimit {
    /// Bytes queued at which the subscriber is disconnected at once.
    pub hard: u64,
    /// Bytes queued that, held for `soft_for`, disconnect the subscriber.
    pub soft: u64,
    /// How long the soft limit may be exceeded.
    pub soft_for: Duration,
}

impl Default for OutputLimit {
    /// Redis's default: `pubsub 32mb 8mb 60`.
    fn default() -> Self {
        Self {
            hard: 32 << 20,
            soft: 8 << 20,
            soft_for: Duration::from_secs(60),
        }
    }
}

/// The three namespaces of subscriptions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// SUBSCRIBE / PUBLISH.
    Channel,
    /// PSUBSCRIBE: glob patterns over PUBLISH's channels.
    Pattern,
    /// SSUBSCRIBE / SPUBLISH (Redis 7's shard channels: a namespace of their own).
    Shard,
}

/// One subscribing connection's queue of encoded messages (see the module docs).
#[derive(Debug)]
pub struct Mailbox {
    id: u64,
    /// Whether the connection speaks RESP3 (messages are pushes); read at each publish, so a
    /// HELLO while subscribed takes effect from the next message.
    resp3: AtomicBool,
    tx: mpsc::UnboundedSender<Bytes>,
    queued: AtomicUsize,
    /// Milliseconds since the hub's start at which the queue went over the soft limit
    /// (0: it is not over).
    over_soft_since: AtomicU64,
    /// Cancelled when the hub closes the mailbox (its subscriber fell too far behind), so
    /// a connection blocked writing to a client that does not read gives up.
    closed: CancellationToken,
    /// Whether anything was ever queued here (the connection's writes watch `closed` from
    /// then on).
    used: AtomicBool,
}

impl Mailbox {
    /// Whether the hub closed this mailbox (its subscriber fell too far behind).
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Resolves once the hub closed this mailbox.
    pub fn closed(&self) -> CancellationToken {
        self.closed.clone()
    }

    /// Accounts `n` bytes the connection took off the queue.
    pub fn taken(&self, n: usize) {
        let left = self.queued.fetch_sub(n, Ordering::AcqRel).saturating_sub(n);
        if left == 0 {
            self.over_soft_since.store(0, Ordering::Relaxed);
        }
    }

    /// Records the connection's protocol (HELLO, RESET).
    pub fn set_resp3(&self, resp3: bool) {
        self.resp3.store(resp3, Ordering::Relaxed);
    }

    /// Whether the connection speaks RESP3.
    pub(crate) fn speaks_resp3(&self) -> bool {
        self.resp3.load(Ordering::Relaxed)
    }

    /// Whether anything was ever queued on this mailbox.
    pub(crate) fn used(&self) -> bool {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether something is queued (or the mailbox was closed): worth draining.
    pub(crate) fn has_mail(&self) -> bool {
        self.queued.load(Ordering::Acquire) > 0 || self.is_closed()
    }
}

/// A mailbox's receiving end, held by its connection.
pub type Inbox = mpsc::UnboundedReceiver<Bytes>;

#[derive(Default)]
struct Registry {
    channels: FxHashMap<Bytes, Vec<Arc<Mailbox>>>,
    patterns: FxHashMap<Bytes, Vec<Arc<Mailbox>>>,
    shards: FxHashMap<Bytes, Vec<Arc<Mailbox>>>,
}

impl Registry {
    fn map(&mut self, kind: Kind) -> &mut FxHashMap<Bytes, Vec<Arc<Mailbox>>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shards,
        }
    }
}

thread_local! {
    /// Messages published from this thread (a script retried from its start must not have
    /// published anything: see `resp::scripting`).
    static PUBLISHED_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many messages this thread has published (channel and keyspace messages alike).
pub fn published_here() -> u64 {
    PUBLISHED_HERE.get()
}

/// The node's subscriptions (see the module docs).
pub struct Hub {
    registry: Mutex<Registry>,
    limit: Mutex<OutputLimit>,
    next_id: AtomicU64,
    started: Instant,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            registry: Mutex::default(),
            limit: Mutex::new(OutputLimit::default()),
            next_id: AtomicU64::new(1),
            started: Instant::now(),
        }
    }
}

impl Hub {
    /// A new mailbox for a connection (speaking RESP3 or not).
    pub fn mailbox(&self, resp3: bool) -> (Arc<Mailbox>, Inbox) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mailbox = Arc::new(Mailbox {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            resp3: AtomicBool::new(resp3),
            tx,
            queued: AtomicUsize::new(0),
            over_soft_since: AtomicU64::new(0),
            closed: CancellationToken::new(),
            used: AtomicBool::new(false),
        });
        (mailbox, rx)
    }

    /// The output limit subscribers are held to.
    pub fn limit(&self) -> OutputLimit {
        *self.limit.lock()
    }

    /// Sets the output limit subscribers are held to (CONFIG SET
    /// `client-output-buffer-limit`).
    pub fn set_limit(&self, limit: OutputLimit) {
        *self.limit.lock() = limit;
    }

    /// Subscribes `mailbox` to `name` (a channel, pattern or shard channel); the caller keeps
    /// its own set and calls this only for names new to it.
    pub fn subscribe(&self, kind: Kind, name: Bytes, mailbox: &Arc<Mailbox>) {
        let mut reg = self.registry.lock();
        reg.map(kind).entry(name).or_default().push(mailbox.clone());
    }

    /// Removes `mailbox`'s subscription to `name`.
    pub fn unsubscribe(&self, kind: Kind, name: &[u8], mailbox: &Mailbox) {
        let mut reg = self.registry.lock();
        let map = reg.map(kind);
        if let Some(list) = map.get_mut(name) {
            list.retain(|m| m.id != mailbox.id);
            if list.is_empty() {
                map.remove(name);
            }
        }
    }

    /// Queues an encoded message on one mailbox (client tracking's invalidations), under the
    /// same output limit as published messages.
    pub fn push(&self, mailbox: &Mailbox, bytes: Bytes) {
        self.deliver(mailbox, bytes, self.limit());
    }

    /// Whether `mailbox` subscribes to `name`.
    pub fn subscribed(&self, kind: Kind, name: &[u8], mailbox: &Mailbox) -> bool {
        let mut reg = self.registry.lock();
        reg.map(kind)
            .get(name)
            .is_some_and(|list| list.iter().any(|m| m.id == mailbox.id))
    }

    /// PUBLISH: queues `message` on every subscriber of `channel` and of every pattern
    /// matching it; returns how many receive it.
    pub fn publish(&self, channel: &[u8], message: &[u8]) -> usize {
        PUBLISHED_HERE.set(PUBLISHED_HERE.get() + 1);
        let reg = self.registry.lock();
        let limit = self.limit();
        let mut receivers = 0;
        if let Some(list) = reg.channels.get(channel) {
            receivers += self.deliver_all(list, &[b"message", channel, message], limit);
        }
        for (pattern, list) in &reg.patterns {
            if glob_match(pattern, channel, false) {
                let parts: [&[u8]; 4] = [b"pmessage", pattern, channel, message];
                receivers += self.deliver_all(list, &parts, limit);
            }
        }
        receivers
    }

    /// [`Hub::publish_shard`] if `shard` (SPUBLISH), else [`Hub::publish`]: this node's
    /// receivers, what PUBLISH answers (in Redis Cluster too).
    pub fn publish_to(&self, shard: bool, channel: &[u8], message: &[u8]) -> usize {
        if shard {
            self.publish_shard(channel, message)
        } else {
            self.publish(channel, message)
        }
    }

    /// SPUBLISH: queues `message` on every subscriber of shard channel `channel`; returns how
    /// many receive it.
    pub fn publish_shard(&self, channel: &[u8], message: &[u8]) -> usize {
        PUBLISHED_HERE.set(PUBLISHED_HERE.get() + 1);
        let reg = self.registry.lock();
        let limit = self.limit();
        reg.shards.get(channel).map_or(0, |list| {
            self.deliver_all(list, &[b"smessage", channel, message], limit)
        })
    }

    /// Queues the message `parts` on every mailbox of `list` (encoded at most once per
    /// protocol); returns how many count as receivers.
    fn deliver_all(&self, list: &[Arc<Mailbox>], parts: &[&[u8]], limit: OutputLimit) -> usize {
        let mut encoded = Encoded::default();
        list.iter()
            .filter(|m| self.deliver(m, encoded.get(m.speaks_resp3(), parts), limit))
            .count()
    }

    /// Queues `bytes` on `m` unless that would break the output limit, which closes `m`.
    /// Returns whether `m` counts as a receiver (a closed mailbox does, as Redis counts a
    /// client it is about to disconnect).
    fn deliver(&self, m: &Mailbox, bytes: Bytes, limit: OutputLimit) -> bool {
        if m.is_closed() {
            return true;
        }
        if !m.used.load(Ordering::Relaxed) {
            m.used.store(true, Ordering::Relaxed);
        }
        let queued = (m.queued.fetch_add(bytes.len(), Ordering::AcqRel) + bytes.len()) as u64;
        if self.over_limit(m, queued, limit) {
            m.closed.cancel();
            // An empty message wakes the connection, which sees the mailbox closed.
            let _ = m.tx.send(Bytes::new());
            return true;
        }
        let _ = m.tx.send(bytes);
        true
    }

    fn over_limit(&self, m: &Mailbox, queued: u64, limit: OutputLimit) -> bool {
        if limit.hard > 0 && queued >= limit.hard {
            return true;
        }
        if limit.soft == 0 || queued < limit.soft {
            return false;
        }
        // At least 1, so 0 keeps meaning "not over".
        let now_ms = self.started.elapsed().as_millis() as u64 + 1;
        match m
            .over_soft_since
            .compare_exchange(0, now_ms, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => false,
            Err(since) => Duration::from_millis(now_ms.saturating_sub(since)) > limit.soft_for,
        }
    }

    /// PUBSUB CHANNELS / SHARDCHANNELS: the channels (`Kind::Channel` or `Kind::Shard`) with
    /// at least one subscriber, matching `pattern` when given.
    pub fn channels(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let mut reg = self.registry.lock();
        reg.map(kind)
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob_match(p, c, false)))
            .cloned()
            .collect()
    }

    /// PUBSUB NUMSUB / SHARDNUMSUB: how many connections subscribe to `channel`.
    pub fn subscribers(&self, kind: Kind, channel: &[u8]) -> usize {
        self.registry
            .lock()
            .map(kind)
            .get(channel)
            .map_or(0, Vec::len)
    }

    /// Every subscription of the mailbox `id` (O(all subscriptions): for ACL changes, which
    /// close connections subscribed to a channel their user no longer allows).
    pub fn subscriptions_of(&self, id: u64) -> Vec<(Kind, Bytes)> {
        let mut registry = self.registry.lock();
        let mut found = Vec::new();
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for (name, boxes) in registry.map(kind).iter() {
                if boxes.iter().any(|m| m.id == id) {
                    found.push((kind, name.clone()));
                }
            }
        }
        found
    }

    /// Whose mailbox `mailbox` is (its id).
    pub fn mailbox_id(mailbox: &Mailbox) -> u64 {
        mailbox.id
    }

    /// PUBSUB NUMPAT: how many distinct patterns have subscribers.
    pub fn patterns(&self) -> usize {
        self.count(Kind::Pattern)
    }

    /// How many distinct channels, patterns or shard channels have subscribers (INFO).
    pub fn count(&self, kind: Kind) -> usize {
        self.registry.lock().map(kind).len()
    }
}

/// A message encoded at most once per protocol version.
#[derive(Default)]
struct Encoded {
    resp2: Option<Bytes>,
    resp3: Option<Bytes>,
}

impl Encoded {
    fn get(&mut self, resp3: bool, parts: &[&[u8]]) -> Bytes {
        let slot = if resp3 {
            &mut self.resp3
        } else {
            &mut self.resp2
        };
        slot.get_or_insert_with(|| encode(resp3, parts)).clone()
    }
}

/// `parts` as a RESP2 array or RESP3 push of bulk strings.
pub fn encode(resp3: bool, parts: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::with_capacity(16 + parts.iter().map(|p| p.len() + 16).sum::<usize>());
    header(&mut out, if resp3 { b'>' } else { b'*' }, parts.len());
    for p in parts {
        header(&mut out, b'$', p.len());
        out.put_slice(p);
        out.put_slice(b"\r\n");
    }
    out.freeze()
}

fn header(out: &mut BytesMut, marker: u8, n: usize) {
    let mut buf = itoa::Buffer::new();
    out.put_u8(marker);
    out.put_slice(buf.format(n).as_bytes());
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    fn subscriber(hub: &Hub, resp: u8) -> (Arc<Mailbox>, Inbox) {
        hub.mailbox(resp == 3)
    }

    fn drain(rx: &mut Inbox) -> Vec<Bytes> {
        let mut out = Vec::new();
        while let Ok(b) = rx.try_recv() {
            out.push(b);
        }
        out
    }

    #[test]
    fn a_message_reaches_channel_then_pattern_subscribers_once_each() {
        let hub = Hub::default();
        let (a, mut ra) = subscriber(&hub, 2);
        let (b, mut rb) = subscriber(&hub, 3);
        hub.subscribe(Kind::Channel, Bytes::from_static(b"news.1"), &a);
        hub.subscribe(Kind::Pattern, Bytes::from_static(b"news.*"), &a);
        hub.subscribe(Kind::Pattern, Bytes::from_static(b"sport.*"), &b);
        assert_eq!(hub.publish(b"news.1", b"hi"), 2);
        assert_eq!(
            drain(&mut ra),
            [
                encode(false, &[b"message", b"news.1", b"hi"]),
                encode(false, &[b"pmessage", b"news.*", b"news.1", b"hi"]),
            ]
        );
        assert!(drain(&mut rb).is_empty());
        assert_eq!(hub.publish(b"sport.x", b"goal"), 1);
        assert_eq!(
            drain(&mut rb),
            [Bytes::from_static(
                b">4\r\n$8\r\npmessage\r\n$7\r\nsport.*\r\n$7\r\nsport.x\r\n$4\r\ngoal\r\n"
            )]
        );
        // Shard channels are a namespace of their own.
        assert_eq!(hub.publish_shard(b"news.1", b"x"), 0);
        hub.unsubscribe(Kind::Channel, b"news.1", &a);
        hub.unsubscribe(Kind::Pattern, b"news.*", &a);
        assert_eq!(hub.publish(b"news.1", b"hi"), 0);
        assert!(hub.channels(Kind::Channel, None).is_empty());
        assert_eq!(hub.patterns(), 1);
    }

    /// A hub with only a hard limit of `hard` bytes and one RESP2 subscriber of channel `c`.
    fn subscribed_under_hard_limit(hard: u64) -> (Hub, Arc<Mailbox>, Inbox) {
        let hub = Hub::default();
        hub.set_limit(OutputLimit {
            hard,
            soft: 0,
            soft_for: Duration::ZERO,
        });
        let (m, rx) = subscriber(&hub, 2);
        hub.subscribe(Kind::Channel, Bytes::from_static(b"c"), &m);
        (hub, m, rx)
    }

    #[test]
    fn a_subscriber_past_the_hard_limit_is_closed_and_holds_no_more() {
        let (hub, m, mut rx) = subscribed_under_hard_limit(1000);
        let payload = vec![b'x'; 100];
        for _ in 0..100 {
            hub.publish(b"c", &payload);
        }
        assert!(m.is_closed());
        let got = drain(&mut rx);
        let bytes: usize = got.iter().map(Bytes::len).sum();
        assert!(bytes < 1000, "{bytes} bytes queued past the limit");
        assert!(
            got.last().is_some_and(Bytes::is_empty),
            "the wake-up comes last"
        );
    }

    #[test]
    fn taking_messages_off_the_queue_keeps_a_subscriber_under_the_limit() {
        let (hub, m, mut rx) = subscribed_under_hard_limit(1000);
        for _ in 0..100 {
            hub.publish(b"c", &[b'x'; 100]);
            for b in drain(&mut rx) {
                m.taken(b.len());
            }
        }
        assert!(!m.is_closed());
    }
}
