//! Client-side caching on one node (Redis's `CLIENT TRACKING`): which clients read which
//! keys, and the invalidation messages they get when those keys change.
//!
//! The [`Tracking`] table holds, under one lock:
//! - every connection's *endpoint*, the pub/sub [`Mailbox`] its connection writes out between
//!   commands (so an invalidation is a message like any other, under the same
//!   `client-output-buffer-limit`), by client id: where a redirect points;
//! - the clients with tracking on, with their mode (redirect, BCAST, OPTIN, OPTOUT, NOLOOP,
//!   prefixes, broken redirect);
//! - default mode: per key, the ids of the clients that read it (Redis's tracking table),
//!   at most `tracking-table-max-keys` keys (0: no limit), keys past it evicted with an
//!   invalidation;
//! - BCAST: per prefix, its clients and the keys under it modified since the last
//!   [`Tracking::flush_broadcasts`], with the client that last modified each.
//!
//! A key modified on a node reaches the table two ways: while a command runs, the keyspace
//! [`record`]s each key it modifies on the running thread (where WATCH's modification count is
//! raised) and the RESP layer hands them over once the command is done
//! ([`Tracking::begin`]/[`Collecting::finish`]), with the command's client for NOLOOP;
//! expiry and eviction outside a command call [`Tracking::modified`] directly.
//!
//! Guarantees:
//! - a client that read a key in default mode gets one invalidation when it next changes,
//!   then forgets it (it must read it again to hear of the next change); a flush sends every
//!   tracking client one null invalidation and empties the table;
//! - a BCAST client gets, per prefix and per command (or expiry step), one message with
//!   every key under the prefix that changed, without the keys it changed itself under
//!   NOLOOP;
//! - messages go to the client itself in RESP3 (`>2 invalidate [keys]`), or to its redirect
//!   target: as a push if the target speaks RESP3, else as a `message` on
//!   `__redis__:invalidate` if the target subscribes to that channel (otherwise nothing, as
//!   Redis sends nothing to a RESP2 client without a redirect). A redirect to a client that
//!   is gone marks the client's redirect broken and sends it `tracking-redir-broken` (RESP3);
//! - messages are queued on mailboxes, never written into another reply: a connection
//!   writes them between its commands, after the reply of the command that caused them;
//! - memory is bounded: the key table by `tracking-table-max-keys`, each client's prefixes
//!   by [`MAX_PREFIXES`] and [`MAX_PREFIX_BYTES`], queued messages by the mailbox limit;
//! - nothing is recorded and no lock is taken while no client has tracking on.
//!
//! The table never calls back into the keyspace, so the keyspace may call it with a stripe
//! locked. Lock order: the table, then the hub's registry.

use crate::pubsub::{Hub, Kind, Mailbox};
use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use rustc_hash::{FxHashMap, FxHashSet};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The channel a RESP2 redirect target subscribes to for invalidations.
pub const CHANNEL: &[u8] = b"__redis__:invalidate";
/// The most prefixes one client may register (Redis has no limit; a hostile client could
/// otherwise make every write pay for millions of prefixes).
pub const MAX_PREFIXES: usize = 1024;
/// The most bytes one client's prefixes may hold in all.
pub const MAX_PREFIX_BYTES: usize = 64 * 1024;
/// Redis's default `tracking-table-max-keys`.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// What `CLIENT TRACKING on` asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The client id invalidations go to (0: the client itself).
    pub redirect: u64,
    /// BCAST: every change under the prefixes, not only keys read.
    pub bcast: bool,
    /// OPTIN: only reads after `CLIENT CACHING yes` are tracked.
    pub optin: bool,
    /// OPTOUT: reads after `CLIENT CACHING no` are not tracked.
    pub optout: bool,
    /// NOLOOP: no invalidation for the client's own writes.
    pub noloop: bool,
    /// BCAST's prefixes (none: every key).
    pub prefixes: Vec<Bytes>,
}

/// A client's tracking state, as CLIENT TRACKINGINFO and CLIENT LIST show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// The redirect target (0: none).
    pub redirect: u64,
    /// BCAST mode.
    pub bcast: bool,
    /// OPTIN mode.
    pub optin: bool,
    /// OPTOUT mode.
    pub optout: bool,
    /// NOLOOP mode.
    pub noloop: bool,
    /// The redirect target was found gone.
    pub broken: bool,
    /// The registered prefixes, sorted.
    pub prefixes: Vec<Bytes>,
}

/// INFO's counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Clients with tracking on (`tracking_clients`).
    pub clients: usize,
    /// Keys in the table (`tracking_total_keys`).
    pub keys: usize,
    /// (key, client) pairs in the table (`tracking_total_items`).
    pub items: usize,
    /// BCAST prefixes registered (`tracking_total_prefixes`).
    pub prefixes: usize,
}

/// One BCAST prefix: its clients and the keys under it changed since the last flush, each
/// with the client that last changed it (`None`: expiry, eviction).
#[derive(Debug, Default)]
struct Prefix {
    clients: FxHashSet<u64>,
    pending: Pending,
}

/// Keys changed under a prefix, each with the client that last changed it.
type Pending = BTreeMap<Bytes, Option<u64>>;

#[derive(Debug, Default)]
struct Table {
    endpoints: FxHashMap<u64, Arc<Mailbox>>,
    clients: FxHashMap<u64, State>,
    keys: FxHashMap<Bytes, FxHashSet<u64>>,
    items: usize,
    prefixes: FxHashMap<Bytes, Prefix>,
    /// Prefix length → how many prefixes have it: a key is matched by looking up its
    /// leading bytes once per distinct length, not by walking every prefix.
    lengths: BTreeMap<usize, usize>,
}

/// What an invalidation names: keys, or every key (a flush).
#[derive(Clone, Copy)]
enum Keys<'a> {
    Some(&'a [&'a [u8]]),
    All,
}

/// The node's tracking table (see the module docs).
#[derive(Debug)]
pub struct Tracking {
    hub: OnceLock<Arc<Hub>>,
    table: Mutex<Table>,
    /// Clients with tracking on: 0 makes every hook a single load.
    clients: AtomicUsize,
    /// Whether some prefix has pending keys.
    pending: AtomicBool,
    max_keys: AtomicUsize,
}

impl Default for Tracking {
    fn default() -> Self {
        Self {
            hub: OnceLock::new(),
            table: Mutex::default(),
            clients: AtomicUsize::new(0),
            pending: AtomicBool::new(false),
            max_keys: AtomicUsize::new(DEFAULT_MAX_KEYS),
        }
    }
}

/// A connection's registration as an endpoint; dropping it (the connection closing)
/// removes the endpoint and turns the client's tracking off.
#[derive(Debug)]
pub struct Endpoint {
    tracking: Arc<Tracking>,
    id: u64,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.tracking.disconnect(self.id);
    }
}

thread_local! {
    static COLLECTING: Cell<bool> = const { Cell::new(false) };
    static MODIFIED: RefCell<Vec<Bytes>> = const { RefCell::new(Vec::new()) };
    static SCRIPT_READ: Cell<bool> = const { Cell::new(false) };
}

/// Records that the running command modified `key` (a no-op unless this thread collects
/// for [`Tracking::begin`]).
#[inline]
pub fn record(key: &[u8]) {
    if COLLECTING.with(Cell::get) {
        MODIFIED.with_borrow_mut(|m| m.push(Bytes::copy_from_slice(key)));
    }
}

/// Notes that a script on this thread ran a read-only command (Redis then tracks the
/// script's declared keys).
pub fn note_script_read() {
    SCRIPT_READ.set(true);
}

/// Whether a script on this thread ran a read-only command since the last call.
pub fn take_script_read() -> bool {
    SCRIPT_READ.replace(false)
}

/// The collection of one command's modified keys on this thread (see [`Tracking::begin`]).
#[derive(Debug)]
pub struct Collecting(());

impl Collecting {
    /// Ends the collection: invalidates every key the command modified, `by` client `by`
    /// (for NOLOOP), then sends the BCAST messages.
    pub fn finish(self, tracking: &Tracking, by: u64) {
        COLLECTING.set(false);
        let keys = MODIFIED.with_borrow_mut(std::mem::take);
        if !keys.is_empty() {
            let mut seen = FxHashSet::default();
            let keys: Vec<&[u8]> = keys
                .iter()
                .map(|k| &k[..])
                .filter(|k| seen.insert(*k))
                .collect();
            tracking.modified_all(&keys, Some(by));
        }
        tracking.flush_broadcasts();
    }
}

impl Drop for Collecting {
    fn drop(&mut self) {
        COLLECTING.set(false);
    }
}

impl Tracking {
    /// Sends messages through `hub` (its output limit, its subscriptions); a second call
    /// changes nothing.
    pub fn attach(&self, hub: Arc<Hub>) {
        let _ = self.hub.set(hub);
    }

    /// Whether some client has tracking on.
    #[inline]
    pub fn active(&self) -> bool {
        self.clients.load(Ordering::Relaxed) > 0
    }

    /// Registers a connection's mailbox under its client id, until the [`Endpoint`] drops.
    pub fn connect(self: &Arc<Self>, id: u64, mailbox: Arc<Mailbox>) -> Endpoint {
        self.table.lock().endpoints.insert(id, mailbox);
        Endpoint {
            tracking: self.clone(),
            id,
        }
    }

    fn disconnect(&self, id: u64) {
        let mut t = self.table.lock();
        t.endpoints.remove(&id);
        self.turn_off(&mut t, id);
    }

    /// Whether client `id` is connected (a redirect target must be).
    pub fn connected(&self, id: u64) -> bool {
        self.table.lock().endpoints.contains_key(&id)
    }

    /// `tracking-table-max-keys`.
    pub fn max_keys(&self) -> usize {
        self.max_keys.load(Ordering::Relaxed)
    }

    /// CONFIG SET `tracking-table-max-keys`: evicts keys past the new limit at once, each
    /// with an invalidation.
    pub fn set_max_keys(&self, max: usize) {
        self.max_keys.store(max, Ordering::Relaxed);
        let mut t = self.table.lock();
        self.evict(&mut t, max);
    }

    /// INFO's counts.
    pub fn stats(&self) -> Stats {
        let t = self.table.lock();
        Stats {
            clients: t.clients.len(),
            keys: t.keys.len(),
            items: t.items,
            prefixes: t.prefixes.len(),
        }
    }

    /// Client `id`'s tracking state, `None` while its tracking is off.
    pub fn state(&self, id: u64) -> Option<State> {
        self.table.lock().clients.get(&id).cloned()
    }

    /// `CLIENT TRACKING on`: turns tracking on for client `id` (or changes its mode), after
    /// Redis's checks; the error is Redis's message (without `ERR `).
    pub fn enable(&self, id: u64, req: Request) -> Result<(), String> {
        let mut t = self.table.lock();
        let current = t.clients.get(&id).cloned();
        let current = current.as_ref();
        if !req.bcast && !req.prefixes.is_empty() {
            return Err("PREFIX option requires BCAST mode to be enabled".into());
        }
        if let Some(c) = current
            && c.bcast != req.bcast
        {
            return Err(
                "You can't switch BCAST mode on/off before disabling tracking for \
                        this client, and then re-enabling it with a different mode."
                    .into(),
            );
        }
        if req.bcast && (req.optin || req.optout) {
            return Err("OPTIN and OPTOUT are not compatible with BCAST".into());
        }
        if req.optin && req.optout {
            return Err("You can't specify both OPTIN mode and OPTOUT mode".into());
        }
        if let Some(c) = current
            && ((req.optin && c.optout) || (req.optout && c.optin))
        {
            return Err(
                "You can't switch OPTIN/OPTOUT mode before disabling tracking for \
                        this client, and then re-enabling it with a different mode."
                    .into(),
            );
        }
        let existing: &[Bytes] = current.map_or(&[], |c| &c.prefixes);
        if req.bcast {
            check_prefixes(existing, &req.prefixes)?;
        }
        let mut prefixes: Vec<Bytes> = existing.to_vec();
        if req.bcast {
            if req.prefixes.is_empty() {
                prefixes.push(Bytes::new());
            }
            prefixes.extend(req.prefixes.iter().cloned());
            prefixes.sort_unstable();
            prefixes.dedup();
        }
        let bytes: usize = prefixes.iter().map(Bytes::len).sum();
        if prefixes.len() > MAX_PREFIXES || bytes > MAX_PREFIX_BYTES {
            return Err(format!(
                "A client may track at most {MAX_PREFIXES} prefixes of {MAX_PREFIX_BYTES} \
                 bytes in all"
            ));
        }
        for p in &prefixes {
            if t.prefixes.get(p).is_none_or(|s| !s.clients.contains(&id)) {
                if !t.prefixes.contains_key(p) {
                    *t.lengths.entry(p.len()).or_default() += 1;
                }
                t.prefixes.entry(p.clone()).or_default().clients.insert(id);
            }
        }
        let state = State {
            redirect: req.redirect,
            bcast: req.bcast,
            optin: req.optin,
            optout: req.optout,
            noloop: req.noloop,
            broken: false,
            prefixes,
        };
        if t.clients.insert(id, state).is_none() {
            self.clients.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// `CLIENT TRACKING off` (and RESET, and a closing connection).
    pub fn disable(&self, id: u64) {
        let mut t = self.table.lock();
        self.turn_off(&mut t, id);
    }

    fn turn_off(&self, t: &mut Table, id: u64) {
        let Some(state) = t.clients.remove(&id) else {
            return;
        };
        self.clients.fetch_sub(1, Ordering::Relaxed);
        for p in &state.prefixes {
            if let Some(s) = t.prefixes.get_mut(p) {
                s.clients.remove(&id);
                if s.clients.is_empty() {
                    t.prefixes.remove(p);
                    if let Some(n) = t.lengths.get_mut(&p.len()) {
                        *n -= 1;
                        if *n == 0 {
                            t.lengths.remove(&p.len());
                        }
                    }
                }
            }
        }
        // Its ids in the key table go when those keys are invalidated or evicted (Redis
        // keeps them too); the table stays bounded by `tracking-table-max-keys`.
    }

    /// Remembers that client `id` read `keys` (default mode), evicting keys past
    /// `tracking-table-max-keys`.
    pub fn remember<'a>(&self, id: u64, keys: impl IntoIterator<Item = &'a [u8]>) {
        let mut t = self.table.lock();
        if t.clients.get(&id).is_none_or(|c| c.bcast) {
            return;
        }
        for key in keys {
            let ids = match t.keys.get_mut(key) {
                Some(ids) => ids,
                None => t.keys.entry(Bytes::copy_from_slice(key)).or_default(),
            };
            if ids.insert(id) {
                t.items += 1;
            }
        }
        self.evict(&mut t, self.max_keys());
    }

    /// Invalidates keys until at most `max` remain (0: no limit), as Redis's
    /// `trackingLimitUsedSlots` does (it picks them at random; these are the hash order's
    /// first).
    fn evict(&self, t: &mut Table, max: usize) {
        if max == 0 || t.keys.len() <= max {
            return;
        }
        let excess = t.keys.len() - max;
        let victims: Vec<Bytes> = t.keys.keys().take(excess).cloned().collect();
        for key in victims {
            self.invalidate(t, &key, None);
        }
    }

    /// A key changed outside a command (expiry, eviction): invalidates it and sends the
    /// BCAST messages at once.
    pub fn modified(&self, key: &[u8]) {
        if !self.active() {
            return;
        }
        self.modified_all(&[key], None);
        self.flush_broadcasts();
    }

    /// Starts collecting the keys the running command modifies on this thread; `None` while
    /// no client tracks, or when an outer command on this thread already collects.
    pub fn begin(&self) -> Option<Collecting> {
        if !self.active() || COLLECTING.with(Cell::get) {
            return None;
        }
        MODIFIED.with_borrow_mut(Vec::clear);
        COLLECTING.set(true);
        Some(Collecting(()))
    }

    fn modified_all(&self, keys: &[&[u8]], by: Option<u64>) {
        let mut t = self.table.lock();
        for key in keys {
            self.invalidate(&mut t, key, by);
            if !t.prefixes.is_empty() {
                self.broadcast_later(&mut t, key, by);
            }
        }
    }

    /// Default mode: tells every client that read `key` (but `by` under NOLOOP) and forgets
    /// them.
    fn invalidate(&self, t: &mut Table, key: &[u8], by: Option<u64>) {
        let Some((key, ids)) = t.keys.remove_entry(key) else {
            return;
        };
        t.items -= ids.len();
        for id in ids {
            let Some(c) = t.clients.get(&id) else {
                continue;
            };
            if c.bcast || (c.noloop && by == Some(id)) {
                continue;
            }
            let k: &[u8] = &key;
            self.send(t, id, Keys::Some(&[k]));
        }
    }

    fn broadcast_later(&self, t: &mut Table, key: &[u8], by: Option<u64>) {
        let Table {
            prefixes, lengths, ..
        } = t;
        for &len in lengths.range(..=key.len()).map(|(l, _)| l) {
            if let Some(p) = prefixes.get_mut(&key[..len]) {
                p.pending.insert(Bytes::copy_from_slice(key), by);
                self.pending.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Sends each BCAST client the keys changed under its prefixes since the last call: one
    /// message per prefix, without the keys it changed itself under NOLOOP.
    pub fn flush_broadcasts(&self) {
        if !self.pending.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut t = self.table.lock();
        let batches: Vec<(Vec<u64>, Pending)> = t
            .prefixes
            .values_mut()
            .filter(|p| !p.pending.is_empty())
            .map(|p| {
                let mut ids: Vec<u64> = p.clients.iter().copied().collect();
                ids.sort_unstable();
                (ids, std::mem::take(&mut p.pending))
            })
            .collect();
        for (ids, pending) in batches {
            for id in ids {
                let noloop = t.clients.get(&id).is_some_and(|c| c.noloop);
                let keys: Vec<&[u8]> = pending
                    .iter()
                    .filter(|(_, by)| !(noloop && **by == Some(id)))
                    .map(|(k, _)| &k[..])
                    .collect();
                if !keys.is_empty() {
                    self.send(&mut t, id, Keys::Some(&keys));
                }
            }
        }
    }

    /// FLUSHALL/FLUSHDB: every tracking client gets a null invalidation; the key table
    /// empties.
    pub fn flushed(&self) {
        let mut t = self.table.lock();
        let mut ids: Vec<u64> = t.clients.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.send(&mut t, id, Keys::All);
        }
        t.keys = FxHashMap::default();
        t.items = 0;
    }

    /// Delivers an invalidation of `keys` meant for tracking client `id` (see the module
    /// docs for where it goes).
    fn send(&self, t: &mut Table, id: u64, keys: Keys<'_>) {
        let Some(hub) = self.hub.get() else {
            return;
        };
        let Some(c) = t.clients.get_mut(&id) else {
            return;
        };
        let redirect = c.redirect;
        if redirect != 0 && !t.endpoints.contains_key(&redirect) {
            c.broken = true;
            if let Some(own) = t.endpoints.get(&id)
                && own.speaks_resp3()
            {
                hub.push(own, redir_broken(redirect));
            }
            return;
        }
        let target = if redirect != 0 { redirect } else { id };
        let Some(m) = t.endpoints.get(&target) else {
            return;
        };
        if m.speaks_resp3() {
            hub.push(m, invalidation(true, keys));
        } else if redirect != 0 && hub.subscribed(Kind::Channel, CHANNEL, m) {
            hub.push(m, invalidation(false, keys));
        }
    }
}

/// Redis's prefix checks: no new prefix may be a prefix of (or start with) a prefix the
/// client has, nor of another new one.
fn check_prefixes(existing: &[Bytes], new: &[Bytes]) -> Result<(), String> {
    let overlap = |a: &[u8], b: &[u8]| a.starts_with(b) || b.starts_with(a);
    let show = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (i, p) in new.iter().enumerate() {
        if let Some(e) = existing.iter().find(|e| overlap(e, p)) {
            return Err(format!(
                "Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single \
                 client must not overlap.",
                show(p),
                show(e)
            ));
        }
        if let Some(q) = new[i + 1..].iter().find(|q| overlap(p, q)) {
            return Err(format!(
                "Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a \
                 single client must not overlap.",
                show(p),
                show(q)
            ));
        }
    }
    Ok(())
}

/// An invalidation: a RESP3 push `>2 invalidate [keys]`, or a RESP2 pub/sub message on
/// [`CHANNEL`]; a flush names no keys (a null).
fn invalidation(resp3: bool, keys: Keys<'_>) -> Bytes {
    let mut out = BytesMut::with_capacity(64);
    if resp3 {
        out.put_slice(b">2\r\n$10\r\ninvalidate\r\n");
    } else {
        out.put_slice(b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n");
    }
    match keys {
        Keys::All => out.put_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" }),
        Keys::Some(keys) => {
            header(&mut out, b'*', keys.len());
            for k in keys {
                header(&mut out, b'$', k.len());
                out.put_slice(k);
                out.put_slice(b"\r\n");
            }
        }
    }
    out.freeze()
}

/// `>2 tracking-redir-broken <id>`.
fn redir_broken(id: u64) -> Bytes {
    let mut out = BytesMut::with_capacity(48);
    out.put_slice(b">2\r\n$21\r\ntracking-redir-broken\r\n:");
    out.put_slice(itoa::Buffer::new().format(id).as_bytes());
    out.put_slice(b"\r\n");
    out.freeze()
}

fn header(out: &mut BytesMut, marker: u8, n: usize) {
    out.put_u8(marker);
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pubsub::Inbox;

    struct Node {
        hub: Arc<Hub>,
        tracking: Arc<Tracking>,
    }

    /// A connected client: its endpoint (kept alive) and what it received.
    struct Conn {
        id: u64,
        mailbox: Arc<Mailbox>,
        inbox: Inbox,
        endpoint: Option<Endpoint>,
    }

    impl Conn {
        fn received(&mut self) -> Vec<Bytes> {
            let mut out = Vec::new();
            while let Ok(b) = self.inbox.try_recv() {
                self.mailbox.taken(b.len());
                out.push(b);
            }
            out
        }
    }

    impl Node {
        fn new() -> Self {
            let hub = Arc::new(Hub::default());
            let tracking = Arc::new(Tracking::default());
            tracking.attach(hub.clone());
            Self { hub, tracking }
        }

        fn conn(&self, id: u64, resp3: bool) -> Conn {
            let (mailbox, inbox) = self.hub.mailbox(resp3);
            let endpoint = Some(self.tracking.connect(id, mailbox.clone()));
            Conn {
                id,
                mailbox,
                inbox,
                endpoint,
            }
        }

        /// A command by `by` that modified `keys`.
        fn write(&self, by: u64, keys: &[&[u8]]) {
            let c = self.tracking.begin().expect("tracking is on");
            for k in keys {
                record(k);
            }
            c.finish(&self.tracking, by);
        }
    }

    fn push(keys: &[&[u8]]) -> Bytes {
        invalidation(true, Keys::Some(keys))
    }

    fn on() -> Request {
        Request::default()
    }

    #[test]
    fn a_read_key_is_invalidated_once_then_forgotten() {
        let node = Node::new();
        let mut a = node.conn(1, true);
        let _w = node.conn(2, true);
        node.tracking.enable(a.id, on()).unwrap();
        node.tracking.remember(a.id, [&b"k"[..], b"j"]);
        assert_eq!(
            node.tracking.stats(),
            Stats {
                clients: 1,
                keys: 2,
                items: 2,
                prefixes: 0
            }
        );
        node.write(2, &[b"k", b"other"]);
        assert_eq!(
            a.received(),
            [Bytes::from_static(
                b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
            )]
        );
        node.write(2, &[b"k"]);
        assert!(a.received().is_empty(), "forgotten after one invalidation");
        assert_eq!(node.tracking.stats().keys, 1);
    }

    #[test]
    fn noloop_skips_own_writes_and_off_stops_everything() {
        let node = Node::new();
        let mut a = node.conn(1, true);
        node.tracking
            .enable(
                a.id,
                Request {
                    noloop: true,
                    ..on()
                },
            )
            .unwrap();
        node.tracking.remember(a.id, [&b"k"[..]]);
        node.write(a.id, &[b"k"]);
        assert!(a.received().is_empty());
        node.tracking.remember(a.id, [&b"k"[..]]);
        node.write(9, &[b"k"]);
        assert_eq!(a.received(), [push(&[b"k"])]);
        node.tracking.remember(a.id, [&b"k"[..]]);
        node.tracking.disable(a.id);
        assert!(!node.tracking.active());
        node.tracking.modified(b"k");
        assert!(a.received().is_empty());
    }

    #[test]
    fn resp2_redirect_needs_the_target_subscribed_and_a_gone_target_is_reported() {
        let node = Node::new();
        let mut a = node.conn(1, true);
        let mut r = node.conn(2, false);
        node.tracking
            .enable(
                a.id,
                Request {
                    redirect: r.id,
                    ..on()
                },
            )
            .unwrap();
        node.tracking.remember(a.id, [&b"k"[..]]);
        node.tracking.modified(b"k");
        assert!(r.received().is_empty(), "RESP2 target not subscribed");
        node.hub
            .subscribe(Kind::Channel, Bytes::from_static(CHANNEL), &r.mailbox);
        node.tracking.remember(a.id, [&b"k"[..]]);
        node.tracking.modified(b"k");
        assert_eq!(
            r.received(),
            [Bytes::from_static(
                b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\nk\r\n"
            )]
        );
        assert!(a.received().is_empty());
        node.hub.unsubscribe(Kind::Channel, CHANNEL, &r.mailbox);
        drop(r.endpoint.take());
        node.tracking.remember(a.id, [&b"k"[..]]);
        node.tracking.modified(b"k");
        assert_eq!(
            a.received(),
            [Bytes::from_static(
                b">2\r\n$21\r\ntracking-redir-broken\r\n:2\r\n"
            )]
        );
        assert!(node.tracking.state(a.id).unwrap().broken);
    }

    #[test]
    fn bcast_sends_one_message_per_prefix_per_command() {
        let node = Node::new();
        let mut a = node.conn(1, true);
        let prefixes = vec![Bytes::from_static(b"a:"), Bytes::from_static(b"b:")];
        node.tracking
            .enable(
                a.id,
                Request {
                    bcast: true,
                    noloop: true,
                    prefixes,
                    ..on()
                },
            )
            .unwrap();
        node.write(9, &[b"a:1", b"a:2", b"b:1", b"c:1", b"a:1"]);
        let mut got = a.received();
        got.sort();
        let mut want = [push(&[b"a:1", b"a:2"]), push(&[b"b:1"])];
        want.sort();
        assert_eq!(got, want);
        // NOLOOP: its own writes are left out of the batch.
        node.write(a.id, &[b"a:3"]);
        assert!(a.received().is_empty());
        // Reads are not remembered in BCAST mode.
        node.tracking.remember(a.id, [&b"a:1"[..]]);
        assert_eq!(node.tracking.stats().keys, 0);
        assert_eq!(node.tracking.stats().prefixes, 2);
        node.tracking.disable(a.id);
        assert_eq!(node.tracking.stats().prefixes, 0);
    }

    #[test]
    fn the_empty_prefix_matches_every_key_and_expiry_is_sent_at_once() {
        let node = Node::new();
        let mut a = node.conn(1, true);
        node.tracking
            .enable(
                a.id,
                Request {
                    bcast: true,
                    ..on()
                },
            )
            .unwrap();
        node.tracking.modified(b"anything");
        assert_eq!(a.received(), [push(&[b"anything"])]);
        assert_eq!(node.tracking.state(a.id).unwrap().prefixes, [Bytes::new()]);
    }

    #[test]
    fn redis_refuses_what_it_refuses() {
        let node = Node::new();
        let a = node.conn(1, true);
        let t = &node.tracking;
        let p = |s: &'static [u8]| Bytes::from_static(s);
        let err = |r: Result<(), String>| r.unwrap_err();
        assert_eq!(
            err(t.enable(
                a.id,
                Request {
                    prefixes: vec![p(b"x")],
                    ..on()
                }
            )),
            "PREFIX option requires BCAST mode to be enabled"
        );
        assert_eq!(
            err(t.enable(
                a.id,
                Request {
                    optin: true,
                    optout: true,
                    ..on()
                }
            )),
            "You can't specify both OPTIN mode and OPTOUT mode"
        );
        assert!(
            err(t.enable(
                a.id,
                Request {
                    bcast: true,
                    optin: true,
                    ..on()
                }
            ))
            .contains("not compatible with BCAST")
        );
        assert!(
            err(t.enable(
                a.id,
                Request {
                    bcast: true,
                    prefixes: vec![p(b"FOOBAR"), p(b"FOO")],
                    ..on()
                }
            ))
            .starts_with("Prefix 'FOOBAR' overlaps with another provided prefix 'FOO'")
        );
        let bcast = |prefixes| Request {
            bcast: true,
            prefixes,
            ..on()
        };
        t.enable(a.id, bcast(vec![p(b"FOO"), p(b"BAR")])).unwrap();
        assert!(
            err(t.enable(a.id, bcast(vec![p(b"FO")])))
                .starts_with("Prefix 'FO' overlaps with an existing prefix 'FOO'")
        );
        assert!(err(t.enable(a.id, on())).contains("switch BCAST mode"));
        t.enable(a.id, bcast(vec![p(b"BAZ")])).unwrap();
        assert_eq!(t.state(a.id).unwrap().prefixes.len(), 3);
        t.disable(a.id);
        t.enable(
            a.id,
            Request {
                optin: true,
                ..on()
            },
        )
        .unwrap();
        assert!(
            err(t.enable(
                a.id,
                Request {
                    optout: true,
                    ..on()
                }
            ))
            .contains("switch OPTIN/OPTOUT")
        );
        // Hostile: too many prefixes.
        t.disable(a.id);
        let many = (0..=MAX_PREFIXES)
            .map(|i| Bytes::from(format!("{i:05}:")))
            .collect();
        assert!(err(t.enable(a.id, bcast(many))).contains("at most"));
        assert!(t.state(a.id).is_none());
        assert_eq!(t.stats().prefixes, 0);
    }

    #[test]
    fn the_table_keeps_at_most_max_keys_and_evicts_with_an_invalidation() {
        let node = Node::new();
        let mut a = node.conn(1, true);
        node.tracking.enable(a.id, on()).unwrap();
        let keys: Vec<String> = (0..250).map(|i| format!("key{i}")).collect();
        node.tracking
            .remember(a.id, keys.iter().map(|k| k.as_bytes()));
        assert_eq!(node.tracking.stats().keys, 250);
        node.tracking.set_max_keys(1);
        assert_eq!(node.tracking.stats().keys, 1);
        assert_eq!(a.received().len(), 249);
        // A read past the limit evicts too.
        node.tracking.remember(a.id, [&b"new"[..]]);
        assert_eq!(node.tracking.stats().keys, 1);
        assert_eq!(a.received().len(), 1);
    }

    #[test]
    fn a_flush_sends_every_tracking_client_a_null_invalidation() {
        let node = Node::new();
        let mut a = node.conn(1, true);
        let mut b = node.conn(2, false);
        node.hub
            .subscribe(Kind::Channel, Bytes::from_static(CHANNEL), &b.mailbox);
        node.tracking.enable(a.id, on()).unwrap();
        node.tracking.remember(a.id, [&b"k"[..]]);
        let c = node.conn(3, false);
        node.tracking
            .enable(
                c.id,
                Request {
                    redirect: b.id,
                    ..on()
                },
            )
            .unwrap();
        node.tracking.flushed();
        assert_eq!(
            a.received(),
            [Bytes::from_static(b">2\r\n$10\r\ninvalidate\r\n_\r\n")]
        );
        assert_eq!(
            b.received(),
            [Bytes::from_static(
                b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n"
            )]
        );
        assert_eq!(node.tracking.stats().keys, 0);
        assert_eq!(node.tracking.stats().items, 0);
    }

    #[test]
    fn a_flush_empties_the_table_even_with_no_client_tracking() {
        let node = Node::new();
        let a = node.conn(1, true);
        node.tracking.enable(a.id, on()).unwrap();
        node.tracking.remember(a.id, [&b"k"[..]]);
        node.tracking.disable(a.id);
        node.tracking.flushed();
        assert_eq!(node.tracking.stats(), Stats::default());
    }

    #[test]
    fn a_closed_connection_stops_tracking() {
        let node = Node::new();
        let mut a = node.conn(1, true);
        node.tracking.enable(a.id, on()).unwrap();
        assert!(node.tracking.active());
        drop(a.endpoint.take());
        assert!(!node.tracking.active());
        assert!(!node.tracking.connected(1));
        assert!(node.tracking.begin().is_none());
    }
}
