//! Keyspace notifications on a single node (Redis's `notify-keyspace-events`): a change to
//! a key is published on `__keyspace@0__:<key>` (the event as the message) and
//! `__keyevent@0__:<event>` (the key as the message) through the node's pub/sub hub.
//!
//! Which changes are published is the configured flag set, as Redis spells it: `K`
//! (keyspace channel), `E` (keyevent channel), and the classes `g` (generic: DEL, EXPIRE,
//! RENAME, ...), `$` (strings), `l`, `s`, `h`, `z` (lists, sets, hashes, sorted sets), `x`
//! (expired), `e` (evicted), `t` (streams), `d` (modules), `m` (key misses), `n` (new keys),
//! `A` for `g$lshzxetd`.
//!
//! How a command's events are found: while it runs, the keyspace records every key it
//! modifies on the running thread ([`record`], called where WATCH's modification count is
//! raised and where a transaction's overlay takes a write); afterwards [`CommandEvents`]
//! names an event per modified key from the command (Redis's event names, below), adds
//! `new` for a key that did not exist before and `del` for one a command other than DEL
//! emptied. Expiry and eviction are published by the keyspace where they happen.
//!
//! Guarantees: nothing is recorded or published while no flag is set (one atomic load per
//! command); events of one command are published in the order of its key arguments, before
//! its reply is written; a command that changed nothing publishes nothing.

use crate::pubsub::Hub;
use bytes::Bytes;
use meridian_redis::{Args, Cmd, Group};
use rustc_hash::FxHashSet;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, OnceLock};

/// `K`: publish on `__keyspace@0__:<key>`.
pub const KEYSPACE: u16 = 1 << 0;
/// `E`: publish on `__keyevent@0__:<event>`.
pub const KEYEVENT: u16 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME, ...).
pub const GENERIC: u16 = 1 << 2;
/// `$`: string commands.
pub const STRING: u16 = 1 << 3;
/// `l`: list commands.
pub const LIST: u16 = 1 << 4;
/// `s`: set commands.
pub const SET: u16 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u16 = 1 << 6;
/// `z`: sorted-set commands.
pub const ZSET: u16 = 1 << 7;
/// `x`: a key expired.
pub const EXPIRED: u16 = 1 << 8;
/// `e`: a key was evicted under `maxmemory`.
pub const EVICTED: u16 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u16 = 1 << 10;
/// `m`: a key miss.
pub const KEY_MISS: u16 = 1 << 11;
/// `d`: module events.
pub const MODULE: u16 = 1 << 12;
/// `n`: a new key.
pub const NEW: u16 = 1 << 13;
/// `A`: every class but `m` and `n`.
pub const ALL: u16 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The class letters in Redis's order, after `A`.
const LETTERS: [(u8, u16); 10] = [
    (b'g', GENERIC),
    (b'$', STRING),
    (b'l', LIST),
    (b's', SET),
    (b'h', HASH),
    (b'z', ZSET),
    (b'x', EXPIRED),
    (b'e', EVICTED),
    (b't', STREAM),
    (b'd', MODULE),
];

/// Parses a `notify-keyspace-events` value; `None` for an unknown letter.
pub fn parse(value: &[u8]) -> Option<u16> {
    value.iter().try_fold(0, |flags, &c| {
        let flag = match c {
            b'A' => ALL,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b'm' => KEY_MISS,
            b'n' => NEW,
            _ => LETTERS.iter().find(|(l, _)| *l == c)?.1,
        };
        Some(flags | flag)
    })
}

/// Formats flags as Redis's CONFIG GET does (`A` for all the classes it covers).
pub fn format(flags: u16) -> String {
    let mut out = String::new();
    if flags & ALL == ALL {
        out.push('A');
    } else {
        for (letter, flag) in LETTERS {
            if flags & flag != 0 {
                out.push(letter as char);
            }
        }
    }
    for (letter, flag) in [
        ('K', KEYSPACE),
        ('E', KEYEVENT),
        ('m', KEY_MISS),
        ('n', NEW),
    ] {
        if flags & flag != 0 {
            out.push(letter);
        }
    }
    out
}

/// The configured flags and where events are published (see the module docs).
#[derive(Debug, Default)]
pub struct Notifier {
    flags: AtomicU16,
    hub: OnceLock<Arc<Hub>>,
}

impl Notifier {
    /// Publishes through `hub` from now on (the RESP front end's); a second call changes
    /// nothing.
    pub fn attach(&self, hub: Arc<Hub>) {
        let _ = self.hub.set(hub);
    }

    /// The configured flags.
    pub fn flags(&self) -> u16 {
        self.flags.load(Ordering::Relaxed)
    }

    /// CONFIG SET `notify-keyspace-events`.
    pub fn set_flags(&self, flags: u16) {
        self.flags.store(flags, Ordering::Relaxed);
    }

    /// Whether any event would be published: a channel (`K` or `E`) and some class.
    pub fn enabled(&self) -> bool {
        let f = self.flags();
        f & (KEYSPACE | KEYEVENT) != 0 && f & !(KEYSPACE | KEYEVENT) != 0
    }

    /// Publishes `event` of `class` on `key`, if the flags ask for it (Redis's
    /// `notifyKeyspaceEvent`).
    pub fn notify(&self, class: u16, event: &str, key: &[u8]) {
        let flags = self.flags();
        let Some(hub) = self.hub.get() else {
            return;
        };
        if flags & class == 0 {
            return;
        }
        if flags & KEYSPACE != 0 {
            let mut channel = b"__keyspace@0__:".to_vec();
            channel.extend_from_slice(key);
            hub.publish(&channel, event.as_bytes());
        }
        if flags & KEYEVENT != 0 {
            let channel = format!("__keyevent@0__:{event}");
            hub.publish(channel.as_bytes(), key);
        }
    }
}

thread_local! {
    static COLLECTING: Cell<bool> = const { Cell::new(false) };
    /// The keys the running command modified (a set: a command may name very many keys).
    static MODIFIED: RefCell<FxHashSet<Bytes>> = RefCell::new(FxHashSet::default());
}

/// Records that the running command modified `key` (a no-op unless its events are being
/// collected on this thread).
#[inline]
pub fn record(key: &[u8]) {
    if COLLECTING.with(Cell::get) {
        MODIFIED.with_borrow_mut(|m| {
            if !m.contains(key) {
                m.insert(Bytes::copy_from_slice(key));
            }
        });
    }
}

/// One command's events: started before it runs, published after (see the module docs).
pub struct CommandEvents {
    /// Whether each key argument existed before the command.
    existed: Vec<bool>,
}

impl CommandEvents {
    /// Starts collecting `cmd`'s modifications when events are on and it is a data command;
    /// `exists` tells whether a key exists now.
    pub fn begin(
        notifier: &Notifier,
        cmd: Cmd,
        args: Args<'_>,
        mut exists: impl FnMut(&[u8]) -> bool,
    ) -> Option<CommandEvents> {
        if !notifier.enabled() || !cmd.spec().has_keys() || cmd.group() == Group::Handles {
            return None;
        }
        let existed = cmd
            .spec()
            .key_positions(&args)
            .map(|i| exists(args.get(i)))
            .collect();
        MODIFIED.with_borrow_mut(FxHashSet::clear);
        COLLECTING.set(true);
        meridian_redis::streams::groups::take_consumer_created();
        Some(CommandEvents { existed })
    }

    /// Publishes the events of the command that ran; `exists` tells whether a key exists
    /// now.
    pub fn finish(
        self,
        notifier: &Notifier,
        cmd: Cmd,
        args: Args<'_>,
        mut exists: impl FnMut(&[u8]) -> bool,
    ) {
        COLLECTING.set(false);
        let modified = MODIFIED.with_borrow_mut(std::mem::take);
        if modified.is_empty() {
            return;
        }
        // A key named twice (SMOVE a a) is published once, at its first position.
        let mut published: FxHashSet<&[u8]> = FxHashSet::default();
        for (nth, pos) in cmd.spec().key_positions(&args).enumerate() {
            let key = args.get(pos);
            if !modified.contains(key) || !published.insert(key) {
                continue;
            }
            let existed = self.existed.get(nth).copied().unwrap_or(true);
            let exists_now = exists(key);
            if !existed && exists_now {
                notifier.notify(NEW, "new", key);
            }
            let expiring = matches!(
                cmd,
                Cmd::Expire | Cmd::Pexpire | Cmd::Expireat | Cmd::Pexpireat | Cmd::Getex
            );
            // An expiry in the past deletes the key: Redis publishes `del` for it.
            let (class, event) = if expiring && !exists_now {
                (GENERIC, "del")
            } else {
                event_of(cmd, args, nth)
            };
            let event = match cmd {
                Cmd::Xreadgroup | Cmd::Xclaim | Cmd::Xautoclaim
                    if !meridian_redis::streams::groups::take_consumer_created() =>
                {
                    ""
                }
                _ => event,
            };
            if !event.is_empty() && (event != "del" || existed) {
                notifier.notify(class, event, key);
            }
            if existed && !exists_now && event != "del" && class != GENERIC {
                notifier.notify(GENERIC, "del", key);
            }
        }
    }
}

impl Drop for CommandEvents {
    fn drop(&mut self) {
        COLLECTING.set(false);
    }
}

/// The class and name of the event `cmd` publishes for its `nth` key argument (Redis 7's
/// names: mostly the command's own, with these exceptions).
fn event_of(cmd: Cmd, args: Args<'_>, nth: usize) -> (u16, &'static str) {
    use Cmd::*;
    let word = |i: usize| args.get(i);
    let left = |w: &[u8]| w.eq_ignore_ascii_case(b"LEFT");
    let min = |w: &[u8]| w.eq_ignore_ascii_case(b"MIN");
    match cmd {
        Set | Setnx | Setex | Psetex | Mset | Msetnx | Getset => (STRING, "set"),
        Incr | Decr | Incrby | Decrby => (STRING, "incrby"),
        Del | Unlink | Getdel => (GENERIC, "del"),
        Expire | Pexpire | Expireat | Pexpireat | Getex => (GENERIC, "expire"),
        Persist => (GENERIC, "persist"),
        Rename | Renamenx if nth == 0 => (GENERIC, "rename_from"),
        Rename | Renamenx => (GENERIC, "rename_to"),
        Copy => (GENERIC, "copy_to"),
        Restore => (GENERIC, "restore"),
        Sort => (LIST, "sortstore"),
        Hset | Hmset | Hsetnx => (HASH, "hset"),
        Lpushx => (LIST, "lpush"),
        Rpushx => (LIST, "rpush"),
        Blpop => (LIST, "lpop"),
        Brpop => (LIST, "rpop"),
        Rpoplpush | Brpoplpush if nth == 0 => (LIST, "rpop"),
        Rpoplpush | Brpoplpush => (LIST, "lpush"),
        Lmove | Blmove => {
            let side = word(3 + nth);
            match (nth, left(side)) {
                (0, true) => (LIST, "lpop"),
                (0, false) => (LIST, "rpop"),
                (_, true) => (LIST, "lpush"),
                (_, false) => (LIST, "rpush"),
            }
        }
        Lmpop | Blmpop => {
            let side = args
                .iter_from(1)
                .find(|w| left(w) || w.eq_ignore_ascii_case(b"RIGHT"));
            (
                LIST,
                if side.is_some_and(left) {
                    "lpop"
                } else {
                    "rpop"
                },
            )
        }
        Smove if nth == 0 => (SET, "srem"),
        Smove => (SET, "sadd"),
        Zadd if args.iter_from(2).any(|w| w.eq_ignore_ascii_case(b"INCR")) => (ZSET, "zincr"),
        Zincrby => (ZSET, "zincr"),
        Bzpopmin => (ZSET, "zpopmin"),
        Bzpopmax => (ZSET, "zpopmax"),
        Zmpop | Bzmpop => {
            let side = args
                .iter_from(1)
                .find(|w| min(w) || w.eq_ignore_ascii_case(b"MAX"));
            (
                ZSET,
                if side.is_some_and(min) {
                    "zpopmin"
                } else {
                    "zpopmax"
                },
            )
        }
        Geoadd => (ZSET, "zadd"),
        Bitop => (STRING, "set"),
        Bitfield => (STRING, "setbit"),
        Pfmerge => (STRING, "pfadd"),
        Xgroup => {
            let sub = word(1);
            let named = [
                (&b"CREATE"[..], "xgroup-create"),
                (b"SETID", "xgroup-setid"),
                (b"DESTROY", "xgroup-destroy"),
                (b"CREATECONSUMER", "xgroup-createconsumer"),
                (b"DELCONSUMER", "xgroup-delconsumer"),
            ];
            let event = named
                .iter()
                .find(|(n, _)| sub.eq_ignore_ascii_case(n))
                .map_or("xgroup", |(_, e)| *e);
            (STREAM, event)
        }
        // A group read or claim publishes only the consumer it created (`finish` checks);
        // deliveries, acknowledgements and claims themselves publish nothing in Redis 7.0
        // (the empty name: no event).
        Xreadgroup | Xclaim | Xautoclaim => (STREAM, "xgroup-createconsumer"),
        Xack => (STREAM, ""),
        _ => (class_of(cmd.group()), cmd.spec().name),
    }
}

/// The event class of a command group's own events.
fn class_of(group: Group) -> u16 {
    match group {
        Group::Lists => LIST,
        Group::Sets => SET,
        Group::SortedSets | Group::Geo => ZSET,
        Group::Hashes => HASH,
        Group::Keys => GENERIC,
        Group::Streams => STREAM,
        _ => STRING,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_format_as_redis() {
        for (set, shown) in [
            ("gKE", "gKE"),
            ("$lshzxeKE", "$lshzxeKE"),
            ("KA", "AK"),
            ("EA", "AE"),
            ("", ""),
            ("Kn", "Kn"),
        ] {
            assert_eq!(format(parse(set.as_bytes()).unwrap()), shown, "{set}");
        }
        assert_eq!(parse(b"Kq"), None);
    }

    #[test]
    fn nothing_is_published_without_a_channel_or_a_class() {
        let n = Notifier::default();
        assert!(!n.enabled());
        n.set_flags(parse(b"K").unwrap());
        assert!(!n.enabled());
        n.set_flags(parse(b"g").unwrap());
        assert!(!n.enabled());
        n.set_flags(parse(b"Kg").unwrap());
        assert!(n.enabled());
    }

    #[test]
    fn events_go_to_the_channels_the_flags_name() {
        let hub = Arc::new(Hub::default());
        let (m, mut rx) = hub.mailbox(false);
        hub.subscribe(crate::pubsub::Kind::Pattern, Bytes::from_static(b"*"), &m);
        let n = Notifier::default();
        n.attach(hub.clone());
        n.set_flags(parse(b"KEl").unwrap());
        n.notify(STRING, "set", b"k");
        n.notify(LIST, "lpush", b"k");
        let got: Vec<Bytes> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(
            got,
            [
                crate::pubsub::encode(false, &[b"pmessage", b"*", b"__keyspace@0__:k", b"lpush"]),
                crate::pubsub::encode(false, &[b"pmessage", b"*", b"__keyevent@0__:lpush", b"k"]),
            ]
        );
    }

    #[test]
    fn event_names_follow_redis() {
        let ev = |line: &str, nth: usize| {
            let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            let owned = meridian_redis::OwnedArgs::from_slices(parts.into_iter());
            let args = owned.get();
            let cmd = Cmd::lookup(args.get(0)).unwrap();
            event_of(cmd, args, nth)
        };
        assert_eq!(ev("SET k v", 0), (STRING, "set"));
        assert_eq!(ev("INCRBY k 2", 0), (STRING, "incrby"));
        assert_eq!(ev("HMSET h a 1", 0), (HASH, "hset"));
        assert_eq!(ev("LPUSH l a", 0), (LIST, "lpush"));
        assert_eq!(ev("LMOVE a b LEFT RIGHT", 0), (LIST, "lpop"));
        assert_eq!(ev("LMOVE a b LEFT RIGHT", 1), (LIST, "rpush"));
        assert_eq!(ev("LMPOP 2 a b RIGHT", 1), (LIST, "rpop"));
        assert_eq!(ev("SMOVE a b m", 1), (SET, "sadd"));
        assert_eq!(ev("ZADD z INCR 1 m", 0), (ZSET, "zincr"));
        assert_eq!(ev("ZMPOP 1 z MIN", 0), (ZSET, "zpopmin"));
        assert_eq!(ev("RENAME a b", 1), (GENERIC, "rename_to"));
        assert_eq!(ev("EXPIRE k 10", 0), (GENERIC, "expire"));
        assert_eq!(ev("SADD s a", 0), (SET, "sadd"));
        assert_eq!(ev("XADD s * f v", 0), (STREAM, "xadd"));
        assert_eq!(ev("XGROUP CREATE s g $", 0), (STREAM, "xgroup-create"));
        assert_eq!(
            ev("XGROUP delconsumer s g c", 0),
            (STREAM, "xgroup-delconsumer")
        );
        assert_eq!(ev("XACK s g 1-0", 0), (STREAM, ""));
    }
}
