//! Pub/Sub on a connection: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their UNSUBSCRIBEs,
//! PUBLISH, SPUBLISH and PUBSUB, over the node's [`Hub`](crate::pubsub::Hub).
//!
//! A connection's subscriptions live in its session ([`Subscriptions`], with the connection's
//! mailbox, present from the connection's start: client tracking's invalidations arrive in
//! it too, see `crate::tracking`); the connection loop writes the messages its mailbox
//! receives whenever no command is running ([`next`], [`take`], [`deliver`]).
//!
//! Replies follow Redis 7: each (un)subscription is confirmed by its own `[kind, name,
//! count]` (a push in RESP3), where the count is the connection's channels plus patterns,
//! or its shard channels for the `S` commands; a RESP2 connection with subscriptions runs
//! only the (P|S)(UN)SUBSCRIBE commands, PING, QUIT and RESET.
//!
//! Cluster mode: a message published on a node is delivered to its own subscribers, then
//! sent to every other node of every DC (`meridian_replication::pubsub`), which delivers it
//! to theirs; PUBLISH answers the publishing node's count, as Redis Cluster's does. Shard
//! channels go to every node too (a superset of Redis Cluster's shard, whose master differs
//! per DC here).

use crate::pubsub::{Hub, Inbox, Kind, Mailbox, OutputLimit};
use crate::resp::context::RespContext;
use bytes::Bytes;
use meridian_redis::error::{CmdResult, subcommand_arity, unknown_subcommand};
use meridian_redis::{Args, Cmd, Reply};
use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::time::Duration;

/// The most queued bytes one wake-up of the connection copies out before writing.
const DRAIN_AT_ONCE: usize = 1024 * 1024;

/// A connection's subscriptions, in the order it made them (for the replies of an
/// UNSUBSCRIBE without arguments). Dropping it removes them from the hub.
pub(crate) struct Subscriptions {
    hub: Arc<Hub>,
    mailbox: Arc<Mailbox>,
    inbox: Inbox,
    channels: Names,
    patterns: Names,
    shards: Names,
}

/// One kind of a connection's subscriptions: O(1) to add, find and remove (a client may
/// hold very many), each with its place in subscription order.
#[derive(Default)]
struct Names {
    order: FxHashMap<Bytes, u64>,
    next: u64,
}

impl Names {
    fn len(&self) -> usize {
        self.order.len()
    }

    fn contains(&self, name: &[u8]) -> bool {
        self.order.contains_key(name)
    }

    fn insert(&mut self, name: Bytes) {
        self.order.insert(name, self.next);
        self.next += 1;
    }

    fn remove(&mut self, name: &[u8]) -> bool {
        self.order.remove(name).is_some()
    }

    /// Every name, in subscription order.
    fn ordered(&self) -> Vec<Bytes> {
        let mut all: Vec<(&Bytes, u64)> = self.order.iter().map(|(n, &i)| (n, i)).collect();
        all.sort_unstable_by_key(|&(_, i)| i);
        all.into_iter().map(|(n, _)| n.clone()).collect()
    }
}

impl std::fmt::Debug for Subscriptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriptions")
            .field("channels", &self.channels.len())
            .field("patterns", &self.patterns.len())
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl Subscriptions {
    fn names(&mut self, kind: Kind) -> &mut Names {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shards,
        }
    }

    /// The count a confirmation reports for `kind`.
    fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Channel | Kind::Pattern => self.channels.len() + self.patterns.len(),
            Kind::Shard => self.shards.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.channels.len() + self.patterns.len() + self.shards.len() == 0
    }

    /// Unsubscribes from everything (RESET), keeping the mailbox.
    fn clear(&mut self) {
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for name in std::mem::take(self.names(kind)).order.into_keys() {
                self.hub.unsubscribe(kind, &name, &self.mailbox);
            }
        }
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        self.clear();
    }
}

/// A connection's subscriptions and mailbox (a session's field; `None` only for the
/// sessions of scripts and worker shards, which are no connection).
pub(crate) type Subscribed = Option<Box<Subscriptions>>;

/// A connection's mailbox and (no) subscriptions, at its start.
pub(crate) fn open(ctx: &RespContext) -> Subscribed {
    Some(new_subscriptions(ctx, false))
}

fn new_subscriptions(ctx: &RespContext, resp3: bool) -> Box<Subscriptions> {
    let (mailbox, inbox) = ctx.pubsub.mailbox(resp3);
    Box::new(Subscriptions {
        hub: ctx.pubsub.clone(),
        mailbox,
        inbox,
        channels: Names::default(),
        patterns: Names::default(),
        shards: Names::default(),
    })
}

/// The connection's mailbox.
pub(crate) fn mailbox(subs: &Subscribed) -> Option<&Arc<Mailbox>> {
    subs.as_ref().map(|s| &s.mailbox)
}

/// RESET: no subscriptions any more; the mailbox stays.
pub(crate) fn reset(subs: &mut Subscribed) {
    if let Some(s) = subs {
        s.clear();
    }
}

/// Whether a connection is in RESP2's subscribed mode, where only a few commands run.
pub(crate) fn in_subscribed_mode(subs: &Subscribed, resp3: bool) -> bool {
    !resp3 && subs.as_ref().is_some_and(|s| !s.is_empty())
}

/// The refusal of `cmd` on a connection in RESP2's subscribed mode, if it is refused.
pub(crate) fn refusal(subs: &Subscribed, resp3: bool, cmd: Cmd) -> Option<String> {
    use Cmd::*;
    let allowed = matches!(
        cmd,
        Subscribe
            | Unsubscribe
            | Psubscribe
            | Punsubscribe
            | Ssubscribe
            | Sunsubscribe
            | Ping
            | Quit
            | Reset
    );
    (in_subscribed_mode(subs, resp3) && !allowed).then(|| {
        format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            cmd.spec().name
        )
    })
}

/// Whether `cmd`'s reply is sent even under CLIENT REPLY OFF or SKIP: Redis pushes the
/// (un)subscribe confirmations whatever that setting says.
pub(crate) fn always_replied(cmd: Cmd) -> bool {
    use Cmd::*;
    matches!(
        cmd,
        Subscribe | Unsubscribe | Psubscribe | Punsubscribe | Ssubscribe | Sunsubscribe
    )
}

/// Runs one of the pub/sub commands.
pub(crate) fn command(
    ctx: &RespContext,
    subs: &mut Subscribed,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
) -> CmdResult {
    match cmd {
        Cmd::Subscribe => subscribe(ctx, subs, reply, Kind::Channel, args),
        Cmd::Psubscribe => subscribe(ctx, subs, reply, Kind::Pattern, args),
        Cmd::Ssubscribe => subscribe(ctx, subs, reply, Kind::Shard, args),
        Cmd::Unsubscribe => unsubscribe(subs, reply, Kind::Channel, args),
        Cmd::Punsubscribe => unsubscribe(subs, reply, Kind::Pattern, args),
        Cmd::Sunsubscribe => unsubscribe(subs, reply, Kind::Shard, args),
        Cmd::Publish | Cmd::Spublish => {
            let (shard, channel, message) = (cmd == Cmd::Spublish, args.get(1), args.get(2));
            reply.int(ctx.pubsub.publish_to(shard, channel, message) as i64);
            if let Some(cluster) = &ctx.cluster {
                cluster.node.publish_to_peers(shard, channel, message);
            }
            Ok(())
        }
        Cmd::Pubsub => pubsub(ctx, reply, args),
        _ => unreachable!("{cmd:?} is not a pub/sub command"),
    }
}

/// The confirmation verb of a (un)subscription of `kind`.
fn verb(kind: Kind, subscribe: bool) -> &'static [u8] {
    match (kind, subscribe) {
        (Kind::Channel, true) => b"subscribe",
        (Kind::Pattern, true) => b"psubscribe",
        (Kind::Shard, true) => b"ssubscribe",
        (Kind::Channel, false) => b"unsubscribe",
        (Kind::Pattern, false) => b"punsubscribe",
        (Kind::Shard, false) => b"sunsubscribe",
    }
}

/// One confirmation: `[verb, name or null, count]`, a push in RESP3.
fn confirm(reply: &mut Reply, verb: &[u8], name: Option<&[u8]>, count: usize) {
    if reply.resp3 {
        reply.out.extend_from_slice(b">3\r\n");
    } else {
        reply.array(3);
    }
    reply.bulk(verb);
    match name {
        Some(n) => reply.bulk(n),
        None => reply.null(),
    }
    reply.int(count as i64);
}

fn subscribe(
    ctx: &RespContext,
    subscribed: &mut Subscribed,
    reply: &mut Reply,
    kind: Kind,
    args: Args<'_>,
) -> CmdResult {
    let subs = subscribed.get_or_insert_with(|| new_subscriptions(ctx, reply.resp3));
    // Messages that came before this reply go out before it.
    drain(subs, reply);
    for name in args.iter_from(1) {
        if !subs.names(kind).contains(name) {
            let name = Bytes::copy_from_slice(name);
            ctx.pubsub.subscribe(kind, name.clone(), &subs.mailbox);
            subs.names(kind).insert(name);
        }
        confirm(reply, verb(kind, true), Some(name), subs.count(kind));
    }
    Ok(())
}

fn unsubscribe(
    subscribed: &mut Subscribed,
    reply: &mut Reply,
    kind: Kind,
    args: Args<'_>,
) -> CmdResult {
    let verb = verb(kind, false);
    let Some(subs) = subscribed.as_mut() else {
        // Nothing subscribed: one confirmation per name (or a null one), each with count 0.
        if args.len() == 1 {
            confirm(reply, verb, None, 0);
        }
        for name in args.iter_from(1) {
            confirm(reply, verb, Some(name), 0);
        }
        return Ok(());
    };
    drain(subs, reply);
    let names: Vec<Bytes> = if args.len() == 1 {
        subs.names(kind).ordered()
    } else {
        args.iter_from(1).map(Bytes::copy_from_slice).collect()
    };
    if names.is_empty() {
        confirm(reply, verb, None, subs.count(kind));
    }
    for name in names {
        if subs.names(kind).remove(&name) {
            subs.hub.unsubscribe(kind, &name, &subs.mailbox);
        }
        confirm(reply, verb, Some(&name), subs.count(kind));
    }
    Ok(())
}

/// PUBSUB CHANNELS / NUMSUB / NUMPAT / SHARDCHANNELS / SHARDNUMSUB / HELP.
fn pubsub(ctx: &RespContext, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    let sub = args.get(1);
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    let hub = &ctx.pubsub;
    let argc = args.len();
    if is("CHANNELS") || is("SHARDCHANNELS") {
        subcommand_arity("pubsub", sub, argc <= 3)?;
        let kind = if is("CHANNELS") {
            Kind::Channel
        } else {
            Kind::Shard
        };
        let channels = hub.channels(kind, (argc == 3).then(|| args.get(2)));
        reply.array(channels.len());
        for c in &channels {
            reply.bulk(c);
        }
    } else if is("NUMSUB") || is("SHARDNUMSUB") {
        let kind = if is("NUMSUB") {
            Kind::Channel
        } else {
            Kind::Shard
        };
        reply.map(argc - 2);
        for c in args.iter_from(2) {
            reply.bulk(c);
            reply.int(hub.subscribers(kind, c) as i64);
        }
    } else if is("NUMPAT") {
        subcommand_arity("pubsub", sub, argc == 2)?;
        reply.int(hub.patterns() as i64);
    } else if is("HELP") {
        subcommand_arity("pubsub", sub, argc == 2)?;
        reply.help(HELP);
    } else {
        return Err(unknown_subcommand("pubsub", sub));
    }
    Ok(())
}

const HELP: &[&str] = &[
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Print this help.",
];

/// Copies the messages waiting in `subs`' mailbox into `reply` (at most about
/// [`DRAIN_AT_ONCE`] bytes). Returns `false` when the mailbox was closed for falling behind:
/// the connection must be disconnected.
fn drain(subs: &mut Subscriptions, reply: &mut Reply) -> bool {
    let mut copied = 0;
    while copied < DRAIN_AT_ONCE {
        let Ok(bytes) = subs.inbox.try_recv() else {
            break;
        };
        copied += bytes.len();
        subs.mailbox.taken(bytes.len());
        reply.out.extend_from_slice(&bytes);
    }
    !subs.mailbox.is_closed()
}

/// Between two commands: copies what waits in the connection's mailbox into `reply`, after
/// the reply of the command that ran (one atomic load when nothing waits). Returns `false`
/// when the connection must be disconnected (it fell too far behind).
pub(crate) fn deliver(subs: &mut Subscribed, reply: &mut Reply) -> bool {
    match subs.as_mut() {
        Some(subs) if subs.mailbox.has_mail() => drain(subs, reply),
        _ => true,
    }
}

/// Waits for the next message to a subscribed connection (forever when it has no
/// subscriptions). Cancel-safe, as `mpsc::Receiver::recv` is: a message is taken only when
/// this resolves.
pub(crate) async fn next(subs: &mut Subscribed) -> Bytes {
    match subs {
        Some(subs) => match subs.inbox.recv().await {
            Some(bytes) => bytes,
            // The mailbox holds the sender, so this never ends; wait like the `None` case.
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// After [`next`] resolved with `first`: copies it and the messages waiting behind it into
/// `reply`. Returns `false` when the connection must be disconnected (it fell too far
/// behind its subscriptions).
pub(crate) fn take(subs: &mut Subscribed, first: Bytes, reply: &mut Reply) -> bool {
    match subs.as_mut() {
        Some(subs) => {
            subs.mailbox.taken(first.len());
            reply.out.extend_from_slice(&first);
            drain(subs, reply)
        }
        None => true,
    }
}

/// CONFIG GET `client-output-buffer-limit`: Redis's three classes. Normal clients have no
/// output limit here (a batch's replies are written as they pass 1 MiB), and there are no
/// Redis replicas, so those two classes report Redis's defaults; the pubsub class is the
/// hub's.
pub(crate) fn output_limit_config(hub: &Hub) -> String {
    let l = hub.limit();
    format!(
        "normal 0 0 0 slave 268435456 67108864 60 pubsub {} {} {}",
        l.hard,
        l.soft,
        l.soft_for.as_secs()
    )
}

/// CONFIG SET `client-output-buffer-limit`: `<class> <hard> <soft> <soft seconds>` groups.
/// The pubsub class sets the hub's limit; the normal and replica classes are accepted only
/// with the values Meridian has (see [`output_limit_config`]), so a setting is never
/// silently ignored. Returns the pubsub limit to apply, or why the value is refused.
pub(crate) fn parse_output_limit(hub: &Hub, value: &[u8]) -> Result<OutputLimit, String> {
    let text = std::str::from_utf8(value)
        .map_err(|_| "Wrong number of arguments in buffer limit configuration.".to_string())?;
    let words: Vec<&str> = text.split_ascii_whitespace().collect();
    if !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    let mut limit = hub.limit();
    for group in words.chunks(4) {
        let size = |w: &str| {
            meridian_core::memory::parse_size(w.as_bytes()).ok_or_else(|| {
                "Error in hard, soft or soft_seconds setting in buffer limit configuration."
                    .to_string()
            })
        };
        let (hard, soft) = (size(group[1])?, size(group[2])?);
        let secs: u64 = group[3].parse().map_err(|_| {
            "Error in hard, soft or soft_seconds setting in buffer limit configuration.".to_string()
        })?;
        let class = group[0].to_ascii_lowercase();
        let unchanged = |want: (u64, u64, u64)| {
            if (hard, soft, secs) == want {
                Ok(())
            } else {
                Err(format!(
                    "Meridian has no output limit of class '{class}' to set: only the pubsub \
                     class changes"
                ))
            }
        };
        match class.as_str() {
            "pubsub" => {
                limit = OutputLimit {
                    hard,
                    soft,
                    soft_for: Duration::from_secs(secs),
                }
            }
            "normal" => unchanged((0, 0, 0))?,
            "slave" | "replica" => unchanged((268_435_456, 67_108_864, 60))?,
            _ => {
                return Err("Invalid client class specified in buffer limit configuration.".into());
            }
        }
    }
    Ok(limit)
}

/// Whether the connection receives messages (it subscribes, or its mailbox was ever used,
/// e.g. for tracking invalidations): its writes then watch [`closed`]; others skip that
/// cost.
pub(crate) fn receiving(subs: &Subscribed) -> bool {
    subs.as_ref()
        .is_some_and(|s| !s.is_empty() || s.mailbox.used())
}

/// Resolves when the connection's mailbox is closed for falling behind (never while it has
/// no mailbox): a write to a client that stopped reading gives up then.
pub(crate) async fn closed(subs: &Subscribed) {
    match subs {
        Some(subs) => subs.mailbox.closed().cancelled_owned().await,
        None => std::future::pending().await,
    }
}

/// A PING's reply in RESP2's subscribed mode: `["pong", message or ""]`.
pub(crate) fn ping(reply: &mut Reply, message: Option<&[u8]>) {
    reply.array(2);
    reply.bulk(b"pong");
    reply.bulk(message.unwrap_or_default());
}

/// Keeps the mailbox's protocol in step with the connection's (after HELLO or RESET).
pub(crate) fn protocol_changed(subs: &Subscribed, resp3: bool) {
    if let Some(subs) = subs {
        subs.mailbox.set_resp3(resp3);
    }
}
