//! Clients blocked on keys — BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX,
//! BZMPOP, and XREAD/XREADGROUP with BLOCK — as Redis 7 serves them on one node.
//!
//! What it guarantees:
//!
//! - **no lost wake-up**: a command blocks only if, under the stripes of all its keys, none of
//!   its source keys exists; it registers under those same stripes, and every write of a list
//!   or sorted set marks its key *ready* under its stripe. So a push either came before the
//!   check (the command is served at once) or finds the waiter registered;
//! - **Redis's order**: the clients blocked on a key are served first blocked, first served,
//!   each by running its own command over the keyspace exactly as if it had just arrived
//!   (so a BLMOVE's push readies its destination, WATCH sees the pop, and a client blocked on
//!   several keys is served by whichever becomes ready);
//! - **served after the command that readied the key**: ready keys are served once the
//!   writing command (or whole EXEC) is done, never in the middle of it, so `LPUSH k x; DEL k`
//!   in one EXEC wakes nobody; a list or sorted set stored over a key only readies waiters of
//!   that type (a SET to a string wakes no BLPOP);
//! - **streams**: a client blocked on XREAD or XREADGROUP is served for the one key that
//!   became ready, with the entries after the ID it blocked with (`$` fixed then, `>`
//!   following its group), by `meridian_redis::streams::serve_blocked`; every blocked stream
//!   reader is tried (they do not consume each other's entries, except group readers of one
//!   group, served in blocking order). Any write to the key readies it, a delete or a type
//!   change too: a blocked XREADGROUP then fails as in Redis (`-UNBLOCKED` when the key is
//!   gone, `-NOGROUP` when its group is);
//! - **answered after the writer**: the served clients' replies are handed over
//!   ([`ServedReplies`]) once the writer's own reply has gone to its socket (as far as the
//!   socket takes it), as Redis writes its replies in the order the clients were served, so
//!   a job queue's producer learns its push succeeded before a worker that popped the job
//!   can tell it anything (over pub/sub, say);
//! - a waiter that gave up (timeout, closed connection) is removed before it could be served;
//!   one whose connection closed while being served is the only way an element can be popped
//!   and not delivered — as with Redis, whose reply would sit in a closed socket's buffer.

use super::Keyspace;
use bytes::{Bytes, BytesMut};
use meridian_redis::{Cmd, Group, Kind, OwnedArgs, Reply};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::oneshot;

/// The reply a served waiter receives: its command's reply bytes, in its protocol.
pub(crate) type Served = BytesMut;

/// The replies of clients served by a connection's commands, held until that connection's
/// own replies are written ([`ServedReplies::deliver`]); delivered on drop whatever happens, so
/// a popped element always reaches its client.
#[derive(Default)]
pub(crate) struct ServedReplies(Vec<(oneshot::Sender<Served>, Served)>);

impl ServedReplies {
    /// Whether no reply is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Hands every held reply to its blocked client.
    pub(crate) fn deliver(&mut self) {
        for (tx, reply) in self.0.drain(..) {
            let _ = tx.send(reply);
        }
    }
}

impl Drop for ServedReplies {
    fn drop(&mut self) {
        self.deliver();
    }
}

impl std::fmt::Debug for ServedReplies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServedReplies({})", self.0.len())
    }
}

/// A blocked client's registration.
struct Waiter {
    /// The blocked connection's client id (CLIENT UNBLOCK).
    client: u64,
    cmd: Cmd,
    args: OwnedArgs,
    resp3: bool,
    /// Its source keys, each once.
    keys: Vec<Bytes>,
    tx: oneshot::Sender<Served>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    /// Per key, the waiters blocked on it, first blocked first.
    by_key: FxHashMap<Bytes, VecDeque<u64>>,
    waiters: FxHashMap<u64, Waiter>,
    /// Keys a list or sorted-set write readied since the last serve, each once, in the order
    /// they became ready (Redis serves its ready keys in that order).
    ready: VecDeque<Bytes>,
}

/// The keyspace's blocked clients (see the module docs).
#[derive(Default)]
pub(crate) struct Blocking {
    /// How many clients are blocked: a writer checks it (under its key's stripe) before
    /// anything else, so a node nobody blocks on pays one load per list write.
    blocked: AtomicUsize,
    /// How many keys are ready (a connection checks it after each command).
    ready: AtomicUsize,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Blocking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocking")
            .field("blocked", &self.blocked.load(Ordering::Relaxed))
            .finish()
    }
}

/// The value type a blocking command waits for.
fn wanted_kind(cmd: Cmd) -> Kind {
    match cmd.group() {
        Group::SortedSets => Kind::ZSet,
        Group::Streams => Kind::Stream,
        _ => Kind::List,
    }
}

/// A registered waiter: the receiver of its reply and what removes it.
pub(crate) struct Registration {
    pub(crate) id: u64,
    pub(crate) rx: oneshot::Receiver<Served>,
}

/// A client blocked by its command: what its connection waits on.
pub(crate) struct BlockedWait {
    /// The blocking command (its timeout reply depends on it).
    pub(crate) cmd: Cmd,
    pub(crate) registration: Registration,
    /// How long it may wait; `None`: for ever.
    pub(crate) timeout: Option<std::time::Duration>,
}

impl std::fmt::Debug for BlockedWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockedWait")
            .field("cmd", &self.cmd)
            .field("id", &self.registration.id)
            .finish()
    }
}

impl Blocking {
    /// Called for every write of `key` under its stripe (a store of any type, or a delete):
    /// a key where clients wait becomes ready, and its serve decides who can be served.
    #[inline]
    pub(super) fn touched(&self, key: &[u8]) {
        if self.blocked.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut inner = self.inner.lock();
        if inner.by_key.contains_key(key) && !inner.ready.iter().any(|k| k == key) {
            inner.ready.push_back(Bytes::copy_from_slice(key));
            self.ready.fetch_add(1, Ordering::Release);
        }
    }

    /// Registers a waiter; the caller holds the stripes of `keys`.
    fn register(
        &self,
        client: u64,
        cmd: Cmd,
        args: OwnedArgs,
        resp3: bool,
        keys: Vec<Bytes>,
    ) -> Registration {
        let (tx, rx) = oneshot::channel();
        let mut inner = self.inner.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        for k in &keys {
            inner.by_key.entry(k.clone()).or_default().push_back(id);
        }
        inner.waiters.insert(
            id,
            Waiter {
                client,
                cmd,
                args,
                resp3,
                keys,
                tx,
            },
        );
        self.blocked.fetch_add(1, Ordering::Release);
        Registration { id, rx }
    }

    /// Takes waiter `id` out of every queue; `None` if it is gone (served, or being served).
    fn take(&self, inner: &mut Inner, id: u64) -> Option<Waiter> {
        let w = inner.waiters.remove(&id)?;
        for k in &w.keys {
            if let Some(q) = inner.by_key.get_mut(k) {
                q.retain(|&x| x != id);
                if q.is_empty() {
                    inner.by_key.remove(k);
                }
            }
        }
        self.blocked.fetch_sub(1, Ordering::Release);
        Some(w)
    }

    /// Puts a waiter that could not be served back at the head of its queues.
    fn put_back(&self, id: u64, w: Waiter) {
        let mut inner = self.inner.lock();
        for k in &w.keys {
            inner.by_key.entry(k.clone()).or_default().push_front(id);
        }
        inner.waiters.insert(id, w);
        self.blocked.fetch_add(1, Ordering::Release);
    }

    /// Removes waiter `id` (timed out or gone); false if it is being served right now.
    pub(crate) fn unblock(&self, id: u64) -> bool {
        let mut inner = self.inner.lock();
        self.take(&mut inner, id).is_some()
    }

    /// CLIENT UNBLOCK: ends the wait of client `client`, answering the timeout reply or, with
    /// `error`, Redis's `-UNBLOCKED` error; false when that client is not blocked.
    pub(crate) fn unblock_client(&self, client: u64, error: bool) -> bool {
        let mut inner = self.inner.lock();
        let Some(id) = inner
            .waiters
            .iter()
            .find_map(|(&id, w)| (w.client == client).then_some(id))
        else {
            return false;
        };
        let Some(w) = self.take(&mut inner, id) else {
            return false;
        };
        drop(inner);
        let mut out = Reply::new(64);
        out.resp3 = w.resp3;
        if error {
            out.error("UNBLOCKED client unblocked via CLIENT UNBLOCK");
        } else {
            timeout_reply(w.cmd, &mut out);
        }
        let _ = w.tx.send(out.out);
        true
    }

    /// The waiters on `key` waiting for `kind`, first blocked first (not taken).
    fn waiting_for(&self, key: &[u8], kind: Kind) -> Vec<u64> {
        let inner = self.inner.lock();
        let Some(q) = inner.by_key.get(key) else {
            return Vec::new();
        };
        q.iter()
            .copied()
            .filter(|id| {
                inner
                    .waiters
                    .get(id)
                    .is_some_and(|w| wanted_kind(w.cmd) == kind)
            })
            .collect()
    }

    /// Takes waiter `id` out of every queue; `None` if it is gone.
    fn take_id(&self, id: u64) -> Option<Waiter> {
        let mut inner = self.inner.lock();
        self.take(&mut inner, id)
    }

    /// Readies every key someone waits on (FLUSHALL, FLUSHDB: blocked group readers fail).
    pub(super) fn touch_all(&self) {
        if self.blocked.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut inner = self.inner.lock();
        let keys: Vec<Bytes> = inner.by_key.keys().cloned().collect();
        for k in keys {
            if !inner.ready.contains(&k) {
                inner.ready.push_back(k);
                self.ready.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// The first waiter on `key` waiting for `kind`, taken out of the queues.
    fn next_waiter(&self, key: &[u8], kind: Kind) -> Option<(u64, Waiter)> {
        let mut inner = self.inner.lock();
        let id = inner.by_key.get(key)?.iter().copied().find(|id| {
            inner
                .waiters
                .get(id)
                .is_some_and(|w| wanted_kind(w.cmd) == kind)
        })?;
        self.take(&mut inner, id).map(|w| (id, w))
    }

    fn next_ready(&self) -> Option<Bytes> {
        let mut inner = self.inner.lock();
        let k = inner.ready.pop_front()?;
        self.ready.fetch_sub(1, Ordering::Release);
        Some(k)
    }

    /// How many clients are blocked (INFO's `blocked_clients`).
    pub(crate) fn blocked_clients(&self) -> usize {
        self.blocked.load(Ordering::Relaxed)
    }
}

/// What [`Keyspace::execute_blocking`] did.
pub(crate) enum BlockingOutcome {
    /// The command ran (its reply, or error, is written): a source key held data, or a key
    /// was of another type.
    Ran,
    /// Nothing to pop: the client waits on the registration.
    Blocked(Registration),
}

impl Keyspace {
    /// Runs a blocking command: at once if any of its source keys exists, else registers the
    /// client as blocked on them (both under the stripes of every key of the command).
    pub(crate) fn execute_blocking(
        &self,
        cmd: Cmd,
        args: meridian_redis::Args<'_>,
        reply: &mut Reply,
        source: &[usize],
        client: u64,
    ) -> Result<BlockingOutcome, meridian_redis::CmdError> {
        let guards = self.lock_many(cmd.spec().key_positions(&args).map(|i| args.get(i)));
        let mut any = false;
        for &i in source {
            if self
                .stored(args.get(i))?
                .is_some_and(|e| !e.is_expired(self.clock.now()))
            {
                any = true;
                break;
            }
        }
        if any {
            self.execute_locked(guards, cmd, args, reply)?;
            return Ok(BlockingOutcome::Ran);
        }
        {
            let mut keys: Vec<Bytes> = Vec::with_capacity(source.len());
            for &i in source {
                let k = Bytes::copy_from_slice(args.get(i));
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            let r =
                self.blocking
                    .register(client, cmd, OwnedArgs::copy_of(args), reply.resp3, keys);
            drop(guards);
            Ok(BlockingOutcome::Blocked(r))
        }
    }

    /// Whether some key is ready for its blocked clients ([`Keyspace::serve_blocked`]).
    #[inline]
    pub(crate) fn has_ready_keys(&self) -> bool {
        self.blocking.ready.load(Ordering::Acquire) > 0
    }

    /// Serves the clients blocked on every ready key, first blocked first, while the key holds
    /// what they wait for (see the module docs). Called after each command; their replies go
    /// to `served`, for the caller to deliver once its own reply is written.
    pub(crate) fn serve_blocked(&self, served: &mut ServedReplies) {
        while let Some(key) = self.blocking.next_ready() {
            self.serve_key(&key, served);
        }
    }

    /// Runs a blocking XREAD or XREADGROUP (its arguments checked): served at once if a
    /// stream has something for it, else (BLOCK given) the client is registered on its keys
    /// under their stripes with its `$` IDs fixed, as Redis fixes them when it blocks.
    pub(crate) fn execute_stream_read(
        &self,
        cmd: Cmd,
        args: meridian_redis::Args<'_>,
        reply: &mut Reply,
        client: u64,
    ) -> Result<BlockingOutcome, meridian_redis::CmdError> {
        use meridian_redis::streams;
        let guards = self.lock_many(cmd.spec().key_positions(&args).map(|i| args.get(i)));
        let mut ov = super::views::Overlay::new(self, guards);
        let resolved = streams::resolve_last_ids(cmd, args, &mut ov)?;
        let mark = reply.out.len();
        let outcome = streams::read(cmd, resolved.get(), &mut ov, reply)?;
        if outcome == streams::ReadOutcome::Nothing {
            let mut keys: Vec<Bytes> = Vec::new();
            for i in streams::source_keys(cmd, args) {
                let k = Bytes::copy_from_slice(args.get(i));
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            let r = self
                .blocking
                .register(client, cmd, resolved, reply.resp3, keys);
            drop(ov);
            return Ok(BlockingOutcome::Blocked(r));
        }
        ov.commit().inspect_err(|_| reply.out.truncate(mark))?;
        Ok(BlockingOutcome::Ran)
    }

    /// Serves the stream readers blocked on `key`, in blocking order; those with nothing yet
    /// keep waiting, in their order.
    fn serve_stream_readers(&self, key: &[u8], served: &mut ServedReplies) {
        use meridian_redis::streams::{BlockedServe, serve_blocked};
        let mut still = Vec::new();
        for id in self.blocking.waiting_for(key, Kind::Stream) {
            let Some(w) = self.blocking.take_id(id) else {
                continue;
            };
            if w.tx.is_closed() {
                continue;
            }
            let mut out = Reply::new(64);
            out.resp3 = w.resp3;
            let ran = {
                let mut s = self.lock(key);
                serve_blocked(w.cmd, w.args.get(), key, &mut self.locked(&mut s), &mut out)
            };
            match ran {
                Ok(BlockedServe::Served) => served.0.push((w.tx, out.out)),
                Ok(BlockedServe::Wait) => still.push((id, w)),
                Err(e) => {
                    out.out.clear();
                    out.command_error(e);
                    served.0.push((w.tx, out.out));
                }
            }
        }
        for (id, w) in still.into_iter().rev() {
            self.blocking.put_back(id, w);
        }
    }

    fn serve_key(&self, key: &[u8], served: &mut ServedReplies) {
        self.serve_stream_readers(key, served);
        loop {
            // The type alone: a held collection is not materialized.
            let kind = match self.stored(key) {
                Ok(Some(st))
                    if !st.is_expired(self.clock.now())
                        && matches!(st.kind(), Kind::List | Kind::ZSet) =>
                {
                    st.kind()
                }
                _ => return,
            };
            let Some((id, w)) = self.blocking.next_waiter(key, kind) else {
                return;
            };
            if w.tx.is_closed() {
                continue;
            }
            let mut out = Reply::new(64);
            out.resp3 = w.resp3;
            let ran = self.execute(w.cmd, w.args.get(), &mut out);
            let timed_out_reply = {
                let mut null = Reply::new(8);
                null.resp3 = w.resp3;
                timeout_reply(w.cmd, &mut null);
                null.out
            };
            match ran {
                // Someone else emptied the key in between: still blocked.
                Ok(()) if out.out == timed_out_reply => self.blocking.put_back(id, w),
                Ok(()) => served.0.push((w.tx, out.out)),
                Err(e) => {
                    out.out.clear();
                    out.command_error(e);
                    served.0.push((w.tx, out.out));
                }
            }
        }
    }
}

/// The reply of a blocking command that timed out: a null bulk for BLMOVE and BRPOPLPUSH
/// (they answer an element), a null array for the others (XREAD and XREADGROUP too).
pub(crate) fn timeout_reply(cmd: Cmd, reply: &mut Reply) {
    if matches!(cmd, Cmd::Blmove | Cmd::Brpoplpush) {
        reply.null();
    } else {
        reply.null_array();
    }
}

/// The argument positions of the keys `cmd` pops from.
pub(crate) fn source_keys(cmd: Cmd, args: meridian_redis::Args<'_>) -> Vec<usize> {
    if cmd.group() == Group::SortedSets {
        meridian_redis::zsets::blocking_source_keys(cmd, args)
    } else {
        meridian_redis::lists::blocking_source_keys(cmd, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(served: &mut ServedReplies, text: &[u8]) -> oneshot::Receiver<Served> {
        let (tx, rx) = oneshot::channel();
        served.0.push((tx, BytesMut::from(text)));
        rx
    }

    #[test]
    fn served_replies_wait_for_delivery_and_are_never_lost() {
        let mut served = ServedReplies::default();
        let mut first = held(&mut served, b"one");
        assert!(first.try_recv().is_err(), "held until delivered");
        served.deliver();
        assert_eq!(&first.try_recv().unwrap()[..], b"one");
        assert!(served.is_empty());
        // A connection that ends (its session dropped) still answers whom it served.
        let mut second = held(&mut served, b"two");
        drop(served);
        assert_eq!(&second.try_recv().unwrap()[..], b"two");
    }
}
