//! The `COMMAND` family, answered from the command table ([`crate::command`]): `COMMAND`,
//! `COMMAND INFO`, `COUNT`, `LIST [FILTERBY MODULE|ACLCAT|PATTERN]`, `DOCS`, `GETKEYS`,
//! `GETKEYSANDFLAGS` and `HELP`, in Redis 7's shapes and with its errors.
//!
//! What a `COMMAND INFO` entry holds, in Redis's order: name, arity, flags, first key, last
//! key, step, ACL categories (the command's own plus those Redis derives from its flags:
//! `@write`, `@read`, `@admin @dangerous`, `@fast` or else `@slow`), tips (none), key
//! specifications, subcommands (none: containers such as `CONFIG` and `CLIENT` are listed as
//! one command).
//!
//! Where it departs from Redis: `COMMAND DOCS` answers each command's `group` only (no
//! summary, complexity or argument list); containers (`CONFIG`, `CLIENT`, `CLUSTER`) list no
//! subcommands, so `COMMAND LIST` and `COMMAND COUNT` count them once.

use crate::args::Args;
use crate::command::{Cmd, Group};
use crate::error::{CmdResult, raw, subcommand_arity, unknown_subcommand};
use crate::reply::Reply;
use crate::value::glob_match;

/// Redis's ACL categories, in the order `COMMAND INFO` lists them (`ACLCommandCategories`).
pub const ACL_CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

impl Cmd {
    /// Whether the command has `flag` (Redis's lowercase flag name).
    pub fn has_flag(self, flag: &str) -> bool {
        self.spec().flags.contains(&flag)
    }

    /// The command's own ACL categories (those its Redis definition names), before the
    /// ones its flags imply.
    fn own_acl_categories(self) -> &'static [&'static str] {
        use Cmd::*;
        match self {
            Del | Unlink | Exists | Touch | Expire | Pexpire | Expireat | Pexpireat | Ttl
            | Pttl | Expiretime | Pexpiretime | Persist | Type | Scan | Dbsize | Randomkey
            | Rename | Renamenx | Copy => &["keyspace"],
            Sort | SortRo => &["set", "sortedset", "list", "dangerous"],
            Dump | Restore => &["keyspace", "dangerous"],
            Object => &[],
            Keys | Flushdb | Flushall => &["keyspace", "dangerous"],
            Info => &["dangerous"],
            Role => &["admin", "dangerous"],
            Ping | Echo | Command | Select | Hello | Auth | Quit | Reset | Readonly | Readwrite
            | Asking => &["connection"],
            // Containers (their subcommands carry the categories in Redis).
            Time | Config | Client | Acl | Cluster | Function | Memory | Pubsub => &[],
            _ => match self.group() {
                Group::Strings | Group::Replication | Group::Handles => &["string"],
                Group::Hashes => &["hash"],
                Group::Lists => &["list"],
                Group::Sets => &["set"],
                Group::SortedSets => &["sortedset"],
                Group::Bitmaps => &["bitmap"],
                Group::HyperLogLog => &["hyperloglog"],
                Group::Geo => &["geo"],
                Group::Streams => &["stream"],
                Group::Transaction | Group::Interactive => &["transaction"],
                Group::Keyspace | Group::Keys | Group::Connection => &[],
            },
        }
    }

    /// The command's ACL categories as `COMMAND INFO` lists them (without the `@`), in
    /// Redis's order: its own, plus what Redis's `setImplicitACLCategories` derives from its
    /// flags.
    pub fn acl_categories(self) -> impl Iterator<Item = &'static str> {
        let own = self.own_acl_categories();
        let implied = move |c: &str| match c {
            "write" => self.has_flag("write"),
            "read" => self.has_flag("readonly"),
            "admin" => self.has_flag("admin"),
            "dangerous" => self.has_flag("admin"),
            "fast" => self.has_flag("fast"),
            "slow" => !self.has_flag("fast"),
            "blocking" => self.has_flag("blocking"),
            "pubsub" => self.has_flag("pubsub"),
            _ => false,
        };
        ACL_CATEGORIES
            .iter()
            .copied()
            .filter(move |c| own.contains(c) || implied(c))
    }

    /// Redis's documentation group (`COMMAND DOCS`'s `group`).
    pub fn doc_group(self) -> &'static str {
        use Cmd::*;
        match self {
            Del | Unlink | Exists | Touch | Expire | Pexpire | Expireat | Pexpireat | Ttl
            | Pttl | Expiretime | Pexpiretime | Persist | Type | Scan | Keys | Randomkey
            | Rename | Renamenx | Copy | Sort | SortRo | Dump | Restore | Object => "generic",
            Dbsize | Flushdb | Flushall | Info | Command | Config | Acl | Time | Role | Memory => {
                "server"
            }
            Cluster | Readonly | Readwrite | Asking => "cluster",
            Subscribe | Unsubscribe | Psubscribe | Punsubscribe | Publish | Pubsub | Ssubscribe
            | Sunsubscribe | Spublish => "pubsub",
            Function => "scripting",
            _ => match self.group() {
                Group::Strings | Group::Replication | Group::Handles => "string",
                Group::Hashes => "hash",
                Group::Lists => "list",
                Group::Sets => "set",
                Group::SortedSets => "sorted-set",
                Group::Bitmaps => "bitmap",
                Group::HyperLogLog => "hyperloglog",
                Group::Geo => "geo",
                Group::Streams => "stream",
                Group::Transaction | Group::Interactive => "transactions",
                Group::Keyspace | Group::Keys => "generic",
                Group::Connection => "connection",
            },
        }
    }

    /// The flags of the command's key specification, as Redis 7 spells them (the access
    /// type uppercase, the operation lowercase).
    fn key_spec_flags(self) -> &'static [&'static str] {
        use Cmd::*;
        match self {
            Del | Unlink | MeridianDel => &["RM", "delete"],
            Ssubscribe | Sunsubscribe | Spublish => &["NOT_KEY"],
            Getdel => &["RW", "access", "delete"],
            Hdel => &["RW", "delete"],
            Set => &["RW", "access", "update", "variable_flags"],
            Mset | Setex | Psetex | MeridianPut | MeridianSet => &["OW", "update"],
            Msetnx | Setnx => &["OW", "insert"],
            Append | Hsetnx => &["RW", "insert"],
            Incr | Decr | Incrby | Decrby | Incrbyfloat | Getex | Getset | Hincrby
            | Hincrbyfloat | TlTas => &["RW", "access", "update"],
            Setrange | Expire | Pexpire | Expireat | Pexpireat | Persist | Hset | Hmset => {
                &["RW", "update"]
            }
            Exists | Touch | Strlen | Type | Watch | Hexists | Hlen | Hstrlen | BlobClose => {
                &["RO"]
            }
            _ if self.has_flag("write") => &["RW", "access", "update"],
            _ => &["RO", "access"],
        }
    }

    /// The key flags `COMMAND GETKEYSANDFLAGS` reports for a request: the key
    /// specification's, with SET's variable flags resolved as Redis resolves them (`OW
    /// update` unless `GET` asks for the old value).
    pub(crate) fn request_key_flags(self, args: Args<'_>) -> &'static [&'static str] {
        if self == Cmd::Set {
            let get = args.iter_from(5).any(|a| a.eq_ignore_ascii_case(b"GET"));
            return if get {
                &["RW", "access", "update"]
            } else {
                &["OW", "update"]
            };
        }
        self.key_spec_flags()
    }
}

/// Redis's command flags in the order `COMMAND INFO` lists them.
const FLAG_ORDER: &[&str] = &[
    "write",
    "readonly",
    "denyoom",
    "module",
    "admin",
    "pubsub",
    "noscript",
    "blocking",
    "loading",
    "stale",
    "skip_monitor",
    "skip_slowlog",
    "asking",
    "fast",
    "no_auth",
    "may_replicate",
    "no_mandatory_keys",
    "no_async_loading",
    "no_multi",
    "movablekeys",
    "allow_busy",
];

/// Runs `COMMAND [subcommand ...]` (the arity of `COMMAND` itself was checked).
pub fn command(reply: &mut Reply, args: Args<'_>) -> CmdResult {
    if args.len() == 1 {
        return all_entries(reply);
    }
    let sub = args.get(1);
    let argc = args.len();
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    if is("COUNT") {
        subcommand_arity("command", sub, argc == 2)?;
        reply.int(Cmd::ALL.len() as i64);
    } else if is("INFO") {
        if argc == 2 {
            return all_entries(reply);
        }
        reply.array(argc - 2);
        for name in args.iter_from(2) {
            match Cmd::lookup(name) {
                Some(c) => entry(reply, c),
                None => reply.null_array(),
            }
        }
    } else if is("DOCS") {
        docs(reply, args);
    } else if is("LIST") {
        list(reply, args)?;
    } else if is("GETKEYS") || is("GETKEYSANDFLAGS") {
        subcommand_arity("command", sub, argc >= 3)?;
        getkeys(reply, args, is("GETKEYSANDFLAGS"))?;
    } else if is("HELP") {
        subcommand_arity("command", sub, argc == 2)?;
        reply.help(HELP);
    } else {
        return Err(unknown_subcommand("command", sub));
    }
    Ok(())
}

/// Redis 7's `COMMAND HELP` text.
const HELP: &[&str] = &[
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
    "HELP",
    "    Print this help.",
];

fn all_entries(reply: &mut Reply) -> CmdResult {
    reply.array(Cmd::ALL.len());
    for &c in Cmd::ALL {
        entry(reply, c);
    }
    Ok(())
}

/// One `COMMAND INFO` entry (see the module docs).
fn entry(reply: &mut Reply, cmd: Cmd) {
    let spec = cmd.spec();
    reply.array(10);
    reply.bulk(spec.name.as_bytes());
    reply.int(i64::from(spec.arity));
    reply.set(spec.flags.len());
    for f in FLAG_ORDER.iter().filter(|f| spec.flags.contains(f)) {
        reply.simple(f.as_bytes());
    }
    reply.int(i64::from(spec.first_key));
    reply.int(i64::from(spec.last_key));
    reply.int(i64::from(spec.step));
    let categories: Vec<&str> = cmd.acl_categories().collect();
    reply.set(categories.len());
    for c in categories {
        reply.simple(format!("@{c}").as_bytes());
    }
    reply.array(0); // tips
    key_specs(reply, cmd);
    reply.array(0); // subcommands
}

/// The command's key specifications: a range from its first key, the keys a `numkeys`
/// argument counts, and the first half of what follows XREAD's `STREAMS`, as Redis 7
/// describes them (`range`, `keynum`, a `keyword` search with a range limited to half).
fn key_specs(reply: &mut Reply, cmd: Cmd) {
    let spec = cmd.spec();
    let specs = usize::from(spec.first_key > 0)
        + usize::from(spec.numkeys_at > 0)
        + usize::from(spec.streams_from > 0);
    reply.array(specs);
    if spec.first_key > 0 {
        // `find_keys.range.lastkey` is relative to the first key (-1: to the last argument).
        let last = if spec.last_key < 0 {
            i64::from(spec.last_key)
        } else {
            i64::from(spec.last_key) - i64::from(spec.first_key)
        };
        key_spec_head(reply, cmd, spec.first_key as usize);
        reply.bulk(b"range");
        reply.bulk(b"spec");
        reply.map(3);
        reply.bulk(b"lastkey");
        reply.int(last);
        reply.bulk(b"keystep");
        reply.int(i64::from(spec.step));
        reply.bulk(b"limit");
        reply.int(0);
    }
    if spec.numkeys_at > 0 {
        key_spec_head(reply, cmd, spec.numkeys_at);
        reply.bulk(b"keynum");
        reply.bulk(b"spec");
        reply.map(3);
        reply.bulk(b"keynumidx");
        reply.int(0);
        reply.bulk(b"firstkey");
        reply.int(1);
        reply.bulk(b"keystep");
        reply.int(1);
    }
    if spec.streams_from > 0 {
        key_spec_flags(reply, cmd);
        reply.bulk(b"begin_search");
        reply.map(2);
        reply.bulk(b"type");
        reply.bulk(b"keyword");
        reply.bulk(b"spec");
        reply.map(2);
        reply.bulk(b"keyword");
        reply.bulk(b"STREAMS");
        reply.bulk(b"startfrom");
        reply.int(spec.streams_from as i64);
        reply.bulk(b"find_keys");
        reply.map(2);
        reply.bulk(b"type");
        reply.bulk(b"range");
        reply.bulk(b"spec");
        reply.map(3);
        reply.bulk(b"lastkey");
        reply.int(-1);
        reply.bulk(b"keystep");
        reply.int(1);
        reply.bulk(b"limit");
        reply.int(2);
    }
}

/// A key specification's map and its flags.
fn key_spec_flags(reply: &mut Reply, cmd: Cmd) {
    reply.map(3);
    reply.bulk(b"flags");
    let flags = cmd.key_spec_flags();
    reply.set(flags.len());
    for f in flags {
        reply.simple(f.as_bytes());
    }
}

/// A key specification up to its `find_keys` type: its flags, and a search that begins at
/// argument `index`.
fn key_spec_head(reply: &mut Reply, cmd: Cmd, index: usize) {
    key_spec_flags(reply, cmd);
    reply.bulk(b"begin_search");
    reply.map(2);
    reply.bulk(b"type");
    reply.bulk(b"index");
    reply.bulk(b"spec");
    reply.map(1);
    reply.bulk(b"index");
    reply.int(index as i64);
    reply.bulk(b"find_keys");
    reply.map(2);
    reply.bulk(b"type");
}

/// `COMMAND DOCS [name ...]`: a map of name → `{group}`; unknown names are left out, as
/// Redis does.
fn docs(reply: &mut Reply, args: Args<'_>) {
    let cmds: Vec<Cmd> = if args.len() == 2 {
        Cmd::ALL.to_vec()
    } else {
        args.iter_from(2).filter_map(Cmd::lookup).collect()
    };
    reply.map(cmds.len());
    for c in cmds {
        reply.bulk(c.spec().name.as_bytes());
        reply.map(1);
        reply.bulk(b"group");
        reply.bulk(c.doc_group().as_bytes());
    }
}

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]`.
fn list(reply: &mut Reply, args: Args<'_>) -> CmdResult {
    let filter: Box<dyn Fn(Cmd) -> bool> = match args.len() {
        2 => Box::new(|_| true),
        5 if args.get(2).eq_ignore_ascii_case(b"FILTERBY") => {
            let (by, arg) = (args.get(3), args.get(4));
            if by.eq_ignore_ascii_case(b"MODULE") {
                // No modules are loaded.
                Box::new(|_| false)
            } else if by.eq_ignore_ascii_case(b"ACLCAT") {
                let cat = String::from_utf8_lossy(arg).to_ascii_lowercase();
                Box::new(move |c: Cmd| c.acl_categories().any(|k| k == cat))
            } else if by.eq_ignore_ascii_case(b"PATTERN") {
                Box::new(move |c: Cmd| glob_match(arg, c.spec().name.as_bytes(), true))
            } else {
                return Err(raw(crate::error::SYNTAX));
            }
        }
        _ => return Err(raw(crate::error::SYNTAX)),
    };
    let names: Vec<&str> = Cmd::ALL
        .iter()
        .filter(|&&c| filter(c))
        .map(|c| c.spec().name)
        .collect();
    reply.array(names.len());
    for n in names {
        reply.bulk(n.as_bytes());
    }
    Ok(())
}

/// `COMMAND GETKEYS cmd args...` (and `GETKEYSANDFLAGS`), with Redis 7's errors.
fn getkeys(reply: &mut Reply, args: Args<'_>, with_flags: bool) -> CmdResult {
    let Some(cmd) = Cmd::lookup(args.get(2)) else {
        return Err(raw("ERR Invalid command specified"));
    };
    let spec = cmd.spec();
    if !spec.has_keys() {
        return Err(raw("ERR The command has no key arguments"));
    }
    let argc = args.len() - 2;
    if !spec.arity_ok(argc) {
        return Err(raw("ERR Invalid number of arguments specified for command"));
    }
    let keys: Vec<usize> = spec.key_positions(&args.skip(2)).collect();
    if keys.is_empty() {
        return Err(raw("ERR Invalid arguments specified for command"));
    }
    reply.array(keys.len());
    for i in keys {
        let key = args.get(i + 2);
        if with_flags {
            reply.array(2);
            reply.bulk(key);
            let flags = cmd.request_key_flags(args);
            reply.set(flags.len());
            for f in flags {
                reply.simple(f.as_bytes());
            }
        } else {
            reply.bulk(key);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> String {
        let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let owned = crate::OwnedArgs::from_slices(parts.iter().copied());
        let mut reply = Reply::new(64);
        if let Err(e) = command(&mut reply, owned.get()) {
            reply.command_error(e);
        }
        String::from_utf8(reply.out.to_vec()).unwrap()
    }

    #[test]
    fn acl_categories_follow_redis() {
        let cats = |c: Cmd| c.acl_categories().collect::<Vec<_>>();
        assert_eq!(cats(Cmd::Get), ["read", "string", "fast"]);
        assert_eq!(cats(Cmd::Set), ["write", "string", "slow"]);
        assert_eq!(cats(Cmd::Del), ["keyspace", "write", "slow"]);
        assert_eq!(cats(Cmd::Hset), ["write", "hash", "fast"]);
        assert_eq!(
            cats(Cmd::Flushall),
            ["keyspace", "write", "slow", "dangerous"]
        );
        assert_eq!(cats(Cmd::Config), ["slow"]);
        assert_eq!(cats(Cmd::Keys), ["keyspace", "read", "slow", "dangerous"]);
        assert_eq!(cats(Cmd::Role), ["admin", "fast", "dangerous"]);
        assert_eq!(cats(Cmd::Ping), ["fast", "connection"]);
        assert_eq!(cats(Cmd::Multi), ["fast", "transaction"]);
    }

    #[test]
    fn info_entry_has_redis_shape() {
        let get = run("COMMAND INFO get");
        assert!(
            get.starts_with("*1\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*3\r\n+@read\r\n+@string\r\n+@fast\r\n*0\r\n*1\r\n"),
            "{get}"
        );
        assert_eq!(run("COMMAND INFO nope"), "*1\r\n*-1\r\n");
        let mset = run("COMMAND INFO mset");
        assert!(
            mset.contains("$7\r\nlastkey\r\n:-1\r\n$7\r\nkeystep\r\n:2\r\n"),
            "{mset}"
        );
    }

    #[test]
    fn getkeys_and_its_errors() {
        assert_eq!(
            run("COMMAND GETKEYS mset a 1 b 2"),
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(
            run("COMMAND GETKEYS nope x"),
            "-ERR Invalid command specified\r\n"
        );
        assert_eq!(
            run("COMMAND GETKEYS ping x"),
            "-ERR The command has no key arguments\r\n"
        );
        assert_eq!(
            run("COMMAND GETKEYS get"),
            "-ERR Invalid number of arguments specified for command\r\n"
        );
        assert_eq!(
            run("COMMAND GETKEYS"),
            "-ERR wrong number of arguments for 'command|getkeys' command\r\n"
        );
        assert_eq!(
            run("COMMAND GETKEYSANDFLAGS del k"),
            "*1\r\n*2\r\n$1\r\nk\r\n*2\r\n+RM\r\n+delete\r\n"
        );
    }

    #[test]
    fn getkeysandflags_as_redis_7() {
        // Redis 7.0's unit/introspection-2.tcl.
        assert_eq!(
            run("COMMAND GETKEYSANDFLAGS set k1 v1"),
            "*1\r\n*2\r\n$2\r\nk1\r\n*2\r\n+OW\r\n+update\r\n"
        );
        assert_eq!(
            run("COMMAND GETKEYSANDFLAGS mset k1 v1 k2 v2"),
            "*2\r\n*2\r\n$2\r\nk1\r\n*2\r\n+OW\r\n+update\r\n*2\r\n$2\r\nk2\r\n*2\r\n+OW\r\n+update\r\n"
        );
        assert_eq!(run("COMMAND GETKEYS get key"), "*1\r\n$3\r\nkey\r\n");
        assert_eq!(
            run("COMMAND LIST FILTERBY PATTERN set"),
            "*1\r\n$3\r\nset\r\n"
        );
        assert_eq!(
            run("COMMAND LIST FILTERBY ACLCAT non_existing_category"),
            "*0\r\n"
        );
        assert_eq!(run("COMMAND LIST bad_arg"), "-ERR syntax error\r\n");
        assert_eq!(
            run("COMMAND LIST FILTERBY bad_arg"),
            "-ERR syntax error\r\n"
        );
    }

    #[test]
    fn list_filters_and_count() {
        assert_eq!(run("COMMAND COUNT"), format!(":{}\r\n", Cmd::ALL.len()));
        assert_eq!(
            run("COMMAND LIST FILTERBY PATTERN hg*"),
            "*2\r\n$4\r\nhget\r\n$7\r\nhgetall\r\n"
        );
        let hashes = run("COMMAND LIST FILTERBY ACLCAT hash");
        assert!(hashes.starts_with("*16\r\n"), "{hashes}");
        assert_eq!(run("COMMAND LIST FILTERBY MODULE m"), "*0\r\n");
        assert_eq!(run("COMMAND LIST FILTERBY X y"), "-ERR syntax error\r\n");
        assert_eq!(
            run("COMMAND NOPE"),
            "-ERR unknown subcommand 'NOPE'. Try COMMAND HELP.\r\n"
        );
        assert_eq!(
            run("COMMAND DOCS get"),
            "*2\r\n$3\r\nget\r\n*2\r\n$5\r\ngroup\r\n$6\r\nstring\r\n"
        );
    }
}
