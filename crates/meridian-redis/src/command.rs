//! The command table: every command the RESP front end knows, with Redis's name, arity,
//! flags and key positions (what `COMMAND INFO` reports), and a case-insensitive lookup.
//!
//! Arity follows Redis: a positive arity is the exact argument count (the name included), a
//! negative one the minimum. [`Cmd`] values index per-command tables (metrics handles), so
//! [`Cmd::ALL`] lists them in declaration order.

use crate::args::Args;

macro_rules! commands {
    ($(
        $id:ident $name:literal $arity:literal [$($flag:literal)*]
        $first:literal $last:literal $step:literal $(numkeys $nk:literal)? $(keyword $($kw:literal)+)? $(streams $sf:literal)?;
    )*) => {
        /// A command the front end implements.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Cmd {
            $(
                #[doc = concat!("`", $name, "`")]
                $id,
            )*
        }

        impl Cmd {
            /// Every command, in declaration order (`Cmd::ALL[c as usize] == c`).
            pub const ALL: &'static [Cmd] = &[$(Cmd::$id),*];

            /// The command's static description.
            #[inline]
            pub fn spec(self) -> &'static CommandSpec {
                &SPECS[self as usize]
            }

            /// Finds a command by name, ignoring ASCII case.
            pub fn lookup(name: &[u8]) -> Option<Cmd> {
                // The benchmark-critical commands first, without any copy.
                if name.len() == 3 {
                    if name.eq_ignore_ascii_case(b"GET") {
                        return Some(Cmd::Get);
                    }
                    if name.eq_ignore_ascii_case(b"SET") {
                        return Some(Cmd::Set);
                    }
                }
                let mut buf = [0u8; 24];
                let lower = buf.get_mut(..name.len())?;
                for (d, s) in lower.iter_mut().zip(name) {
                    *d = s.to_ascii_lowercase();
                }
                match std::str::from_utf8(lower).ok()? {
                    $($name => Some(Cmd::$id),)*
                    _ => None,
                }
            }
        }

        static SPECS: &[CommandSpec] = &[$(
            CommandSpec {
                name: $name,
                arity: $arity,
                flags: &[$($flag),*],
                first_key: $first,
                last_key: $last,
                step: $step,
                numkeys_at: commands!(@numkeys $($nk)?),
                key_after: &[$($($kw),+)?],
                streams_from: commands!(@numkeys $($sf)?),
            },
        )*];
    };
    (@numkeys) => { 0 };
    (@numkeys $nk:literal) => { $nk };
}

/// Static facts about a command, as `COMMAND INFO` reports them.
#[derive(Debug)]
pub struct CommandSpec {
    /// Lowercase name.
    pub name: &'static str,
    /// Exact (positive) or minimum (negative) argument count, the name included.
    pub arity: i32,
    /// Redis's command flags.
    pub flags: &'static [&'static str],
    /// Position of the first key argument (0: none).
    pub first_key: i32,
    /// Position of the last key argument (-1: the last argument).
    pub last_key: i32,
    /// Step between key arguments.
    pub step: i32,
    /// Position of a `numkeys` argument that counts the key arguments following it (0: none;
    /// Redis's "movablekeys" commands: ZUNIONSTORE, LMPOP, SINTERCARD, ...).
    pub numkeys_at: usize,
    /// Keywords whose next argument is a key (SORT's `STORE destination`, GEORADIUS's
    /// `STORE`/`STOREDIST`).
    pub key_after: &'static [&'static str],
    /// Where to start looking for a `STREAMS` keyword whose following arguments are keys
    /// then as many IDs (XREAD, XREADGROUP; 0: none), as Redis's key specification finds
    /// them.
    pub streams_from: usize,
}

impl CommandSpec {
    /// Whether `argc` arguments (the name included) satisfy the arity.
    #[inline]
    pub fn arity_ok(&self, argc: usize) -> bool {
        if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= (-self.arity) as usize
        }
    }

    /// Whether the command takes key arguments at all.
    pub fn has_keys(&self) -> bool {
        self.first_key > 0 || self.numkeys_at > 0 || self.streams_from > 0
    }

    /// Positions of the key arguments of `args` (the name at 0): Redis's first/last/step rule
    /// (a negative last counts from the end), then, for a command with a `numkeys` argument,
    /// the keys it counts. A `numkeys` that is not a positive integer names no key (the
    /// command refuses it); one larger than the arguments left is cut to them. Empty for
    /// keyless commands.
    pub fn key_positions(&self, args: &Args<'_>) -> KeyPositions {
        let argc = args.len();
        let first = self.first_key.max(0) as usize;
        let last = if self.last_key < 0 {
            argc as i64 + i64::from(self.last_key)
        } else {
            i64::from(self.last_key)
        };
        let end = if first == 0 {
            0
        } else {
            (last + 1).clamp(0, argc as i64) as usize
        };
        let fixed = (first..end.max(first)).step_by(self.step.max(1) as usize);
        let counted = match self.numkeys_at {
            0 if self.streams_from > 0 => streams_keys(args, self.streams_from),
            0 => 0..0,
            at if at < argc => {
                let n = crate::value::parse_i64(args.get(at)).unwrap_or(0).max(0);
                let start = at + 1;
                start
                    ..start
                        .saturating_add(usize::try_from(n).unwrap_or(0))
                        .min(argc)
            }
            _ => 0..0,
        };
        // The last such keyword counts (an option repeated wins, and a pattern or key may
        // spell a keyword too).
        let after = (first.max(1)..argc)
            .rev()
            .find(|&i| {
                self.key_after
                    .iter()
                    .any(|kw| args.get(i).eq_ignore_ascii_case(kw.as_bytes()))
            })
            .map(|at| at + 1)
            .filter(|&k| k < argc);
        KeyPositions {
            fixed,
            counted,
            after,
        }
    }
}

/// The keys after the first `STREAMS` at or after `from`: the first half of what follows it
/// (none when the rest is odd or there is no such keyword).
fn streams_keys(args: &Args<'_>, from: usize) -> std::ops::Range<usize> {
    let argc = args.len();
    let Some(at) = (from..argc).find(|&i| args.get(i).eq_ignore_ascii_case(b"STREAMS")) else {
        return 0..0;
    };
    let rest = argc - at - 1;
    if !rest.is_multiple_of(2) {
        return 0..0;
    }
    at + 1..at + 1 + rest / 2
}

/// The positions of a request's key arguments, in order ([`CommandSpec::key_positions`]).
#[derive(Clone, Debug)]
pub struct KeyPositions {
    fixed: std::iter::StepBy<std::ops::Range<usize>>,
    counted: std::ops::Range<usize>,
    after: Option<usize>,
}

impl Iterator for KeyPositions {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        self.fixed
            .next()
            .or_else(|| self.counted.next())
            .or_else(|| self.after.take())
    }
}

commands! {
    Get "get" 2 ["readonly" "fast"] 1 1 1;
    Set "set" -3 ["write" "denyoom"] 1 1 1;
    Del "del" -2 ["write"] 1 -1 1;
    Unlink "unlink" -2 ["write" "fast"] 1 -1 1;
    Exists "exists" -2 ["readonly" "fast"] 1 -1 1;
    Touch "touch" -2 ["readonly" "fast"] 1 -1 1;
    Mget "mget" -2 ["readonly" "fast"] 1 -1 1;
    Mset "mset" -3 ["write" "denyoom"] 1 -1 2;
    Msetnx "msetnx" -3 ["write" "denyoom"] 1 -1 2;
    Incr "incr" 2 ["write" "denyoom" "fast"] 1 1 1;
    Decr "decr" 2 ["write" "denyoom" "fast"] 1 1 1;
    Incrby "incrby" 3 ["write" "denyoom" "fast"] 1 1 1;
    Decrby "decrby" 3 ["write" "denyoom" "fast"] 1 1 1;
    Incrbyfloat "incrbyfloat" 3 ["write" "denyoom" "fast"] 1 1 1;
    Append "append" 3 ["write" "denyoom" "fast"] 1 1 1;
    Strlen "strlen" 2 ["readonly" "fast"] 1 1 1;
    Getdel "getdel" 2 ["write" "fast"] 1 1 1;
    Getex "getex" -2 ["write" "fast"] 1 1 1;
    Getset "getset" 3 ["write" "denyoom" "fast"] 1 1 1;
    Getrange "getrange" 4 ["readonly"] 1 1 1;
    Lcs "lcs" -3 ["readonly"] 1 2 1;
    Substr "substr" 4 ["readonly"] 1 1 1;
    Setrange "setrange" 4 ["write" "denyoom"] 1 1 1;
    Setnx "setnx" 3 ["write" "denyoom" "fast"] 1 1 1;
    Setex "setex" 4 ["write" "denyoom"] 1 1 1;
    Psetex "psetex" 4 ["write" "denyoom"] 1 1 1;
    Expire "expire" -3 ["write" "fast"] 1 1 1;
    Pexpire "pexpire" -3 ["write" "fast"] 1 1 1;
    Expireat "expireat" -3 ["write" "fast"] 1 1 1;
    Pexpireat "pexpireat" -3 ["write" "fast"] 1 1 1;
    Ttl "ttl" 2 ["readonly" "fast"] 1 1 1;
    Pttl "pttl" 2 ["readonly" "fast"] 1 1 1;
    Expiretime "expiretime" 2 ["readonly" "fast"] 1 1 1;
    Pexpiretime "pexpiretime" 2 ["readonly" "fast"] 1 1 1;
    Persist "persist" 2 ["write" "fast"] 1 1 1;
    Type "type" 2 ["readonly" "fast"] 1 1 1;
    Rename "rename" 3 ["write"] 1 2 1;
    Renamenx "renamenx" 3 ["write" "fast"] 1 2 1;
    Copy "copy" -3 ["write" "denyoom"] 1 2 1;
    Sort "sort" -2 ["write" "denyoom" "movablekeys"] 1 1 1 keyword "STORE";
    SortRo "sort_ro" -2 ["readonly" "movablekeys"] 1 1 1;
    Dump "dump" 2 ["readonly"] 1 1 1;
    Restore "restore" -4 ["write" "denyoom"] 1 1 1;
    Object "object" -2 ["readonly"] 2 2 1;
    Scan "scan" -2 ["readonly"] 0 0 0;
    Keys "keys" 2 ["readonly"] 0 0 0;
    Dbsize "dbsize" 1 ["readonly" "fast"] 0 0 0;
    Randomkey "randomkey" 1 ["readonly"] 0 0 0;
    Flushdb "flushdb" -1 ["write"] 0 0 0;
    Flushall "flushall" -1 ["write"] 0 0 0;
    Ping "ping" -1 ["fast"] 0 0 0;
    Echo "echo" 2 ["loading" "stale" "fast"] 0 0 0;
    Info "info" -1 ["loading" "stale"] 0 0 0;
    Command "command" -1 ["loading" "stale"] 0 0 0;
    Config "config" -2 [] 0 0 0;
    Function "function" -2 ["noscript"] 0 0 0;
    Eval "eval" -3 ["noscript" "skip_monitor" "may_replicate" "no_mandatory_keys" "stale" "movablekeys"] 0 0 0 numkeys 2;
    Evalsha "evalsha" -3 ["noscript" "skip_monitor" "may_replicate" "no_mandatory_keys" "stale" "movablekeys"] 0 0 0 numkeys 2;
    EvalRo "eval_ro" -3 ["readonly" "noscript" "skip_monitor" "no_mandatory_keys" "stale" "movablekeys"] 0 0 0 numkeys 2;
    EvalshaRo "evalsha_ro" -3 ["readonly" "noscript" "skip_monitor" "no_mandatory_keys" "stale" "movablekeys"] 0 0 0 numkeys 2;
    Script "script" -2 ["noscript"] 0 0 0;
    Fcall "fcall" -3 ["noscript" "skip_monitor" "may_replicate" "no_mandatory_keys" "stale" "movablekeys"] 0 0 0 numkeys 2;
    FcallRo "fcall_ro" -3 ["readonly" "noscript" "skip_monitor" "no_mandatory_keys" "stale" "movablekeys"] 0 0 0 numkeys 2;
    Memory "memory" -2 [] 2 2 1;
    Client "client" -2 [] 0 0 0;
    Acl "acl" -2 [] 0 0 0;
    Select "select" 2 ["loading" "stale" "fast"] 0 0 0;
    Move "move" 3 ["write" "fast"] 1 1 1;
    Swapdb "swapdb" 3 ["write" "fast"] 0 0 0;
    Hello "hello" -1 ["noscript" "loading" "stale" "fast" "no_auth" "allow_busy"] 0 0 0;
    Auth "auth" -2 ["noscript" "loading" "stale" "fast" "no_auth" "allow_busy"] 0 0 0;
    Quit "quit" -1 ["noscript" "loading" "stale" "fast" "no_auth" "allow_busy"] 0 0 0;
    Reset "reset" 1 ["noscript" "loading" "stale" "fast" "no_auth" "allow_busy"] 0 0 0;
    Multi "multi" 1 ["noscript" "loading" "stale" "fast" "allow_busy"] 0 0 0;
    Exec "exec" 1 ["noscript" "loading" "stale" "skip_slowlog"] 0 0 0;
    Discard "discard" 1 ["noscript" "loading" "stale" "fast" "allow_busy"] 0 0 0;
    Watch "watch" -2 ["noscript" "loading" "stale" "fast" "allow_busy"] 1 -1 1;
    Unwatch "unwatch" 1 ["noscript" "loading" "stale" "fast" "allow_busy"] 0 0 0;
    Time "time" 1 ["loading" "stale" "fast"] 0 0 0;
    Role "role" 1 ["noscript" "loading" "stale" "fast"] 0 0 0;
    Cluster "cluster" -2 [] 0 0 0;
    Readonly "readonly" 1 ["loading" "stale" "fast"] 0 0 0;
    Readwrite "readwrite" 1 ["loading" "stale" "fast"] 0 0 0;
    Asking "asking" 1 ["fast"] 0 0 0;
    MeridianGet "meridian.get" -2 ["readonly"] 1 1 1;
    MeridianPut "meridian.put" -3 ["write" "denyoom"] 1 1 1;
    MeridianDel "meridian.del" -2 ["write"] 1 1 1;
    MeridianSet "meridian.set" -3 ["write" "denyoom"] 1 1 1;
    TlGetlatest "tl.getlatest" 2 ["readonly"] 1 1 1;
    TlGetcrit "tl.getcrit" 3 ["readonly"] 1 1 1;
    TlTas "tl.tas" 4 ["write" "denyoom"] 1 1 1;
    MeridianBegin "meridian.begin" -1 ["noscript" "fast"] 0 0 0;
    MeridianCommit "meridian.commit" 1 ["noscript"] 0 0 0;
    MeridianAbort "meridian.abort" 1 ["noscript" "fast"] 0 0 0;
    BlobRead "blob.read" 4 ["readonly"] 1 1 1;
    BlobOpen "blob.open" 2 ["readonly"] 1 1 1;
    BlobPread "blob.pread" 5 ["readonly"] 1 1 1;
    BlobClose "blob.close" 3 ["readonly" "fast"] 1 1 1;
    Hset "hset" -4 ["write" "denyoom" "fast"] 1 1 1;
    Hsetnx "hsetnx" 4 ["write" "denyoom" "fast"] 1 1 1;
    Hmset "hmset" -4 ["write" "denyoom" "fast"] 1 1 1;
    Hget "hget" 3 ["readonly" "fast"] 1 1 1;
    Hmget "hmget" -3 ["readonly" "fast"] 1 1 1;
    Hgetall "hgetall" 2 ["readonly"] 1 1 1;
    Hdel "hdel" -3 ["write" "fast"] 1 1 1;
    Hexists "hexists" 3 ["readonly" "fast"] 1 1 1;
    Hlen "hlen" 2 ["readonly" "fast"] 1 1 1;
    Hstrlen "hstrlen" 3 ["readonly" "fast"] 1 1 1;
    Hincrby "hincrby" 4 ["write" "denyoom" "fast"] 1 1 1;
    Hincrbyfloat "hincrbyfloat" 4 ["write" "denyoom" "fast"] 1 1 1;
    Hkeys "hkeys" 2 ["readonly"] 1 1 1;
    Hvals "hvals" 2 ["readonly"] 1 1 1;
    Hscan "hscan" -3 ["readonly"] 1 1 1;
    Hrandfield "hrandfield" -2 ["readonly"] 1 1 1;
    Lpush "lpush" -3 ["write" "denyoom" "fast"] 1 1 1;
    Rpush "rpush" -3 ["write" "denyoom" "fast"] 1 1 1;
    Lpushx "lpushx" -3 ["write" "denyoom" "fast"] 1 1 1;
    Rpushx "rpushx" -3 ["write" "denyoom" "fast"] 1 1 1;
    Linsert "linsert" 5 ["write" "denyoom"] 1 1 1;
    Lpop "lpop" -2 ["write" "fast"] 1 1 1;
    Rpop "rpop" -2 ["write" "fast"] 1 1 1;
    Llen "llen" 2 ["readonly" "fast"] 1 1 1;
    Lrange "lrange" 4 ["readonly"] 1 1 1;
    Lindex "lindex" 3 ["readonly"] 1 1 1;
    Lset "lset" 4 ["write" "denyoom"] 1 1 1;
    Lrem "lrem" 4 ["write"] 1 1 1;
    Ltrim "ltrim" 4 ["write"] 1 1 1;
    Lpos "lpos" -3 ["readonly"] 1 1 1;
    Lmove "lmove" 5 ["write" "denyoom"] 1 2 1;
    Rpoplpush "rpoplpush" 3 ["write" "denyoom"] 1 2 1;
    Lmpop "lmpop" -4 ["write" "movablekeys"] 0 0 0 numkeys 1;
    Blpop "blpop" -3 ["write" "noscript" "blocking"] 1 -2 1;
    Brpop "brpop" -3 ["write" "noscript" "blocking"] 1 -2 1;
    Blmove "blmove" 6 ["write" "denyoom" "noscript" "blocking"] 1 2 1;
    Brpoplpush "brpoplpush" 4 ["write" "denyoom" "noscript" "blocking"] 1 2 1;
    Blmpop "blmpop" -5 ["write" "blocking" "movablekeys"] 0 0 0 numkeys 2;
    Sadd "sadd" -3 ["write" "denyoom" "fast"] 1 1 1;
    Srem "srem" -3 ["write" "fast"] 1 1 1;
    Smove "smove" 4 ["write" "fast"] 1 2 1;
    Sismember "sismember" 3 ["readonly" "fast"] 1 1 1;
    Smismember "smismember" -3 ["readonly" "fast"] 1 1 1;
    Scard "scard" 2 ["readonly" "fast"] 1 1 1;
    Spop "spop" -2 ["write" "fast"] 1 1 1;
    Srandmember "srandmember" -2 ["readonly"] 1 1 1;
    Sinter "sinter" -2 ["readonly"] 1 -1 1;
    Sintercard "sintercard" -3 ["readonly" "movablekeys"] 0 0 0 numkeys 1;
    Sinterstore "sinterstore" -3 ["write" "denyoom"] 1 -1 1;
    Sunion "sunion" -2 ["readonly"] 1 -1 1;
    Sunionstore "sunionstore" -3 ["write" "denyoom"] 1 -1 1;
    Sdiff "sdiff" -2 ["readonly"] 1 -1 1;
    Sdiffstore "sdiffstore" -3 ["write" "denyoom"] 1 -1 1;
    Smembers "smembers" 2 ["readonly"] 1 1 1;
    Sscan "sscan" -3 ["readonly"] 1 1 1;
    Zadd "zadd" -4 ["write" "denyoom" "fast"] 1 1 1;
    Zincrby "zincrby" 4 ["write" "denyoom" "fast"] 1 1 1;
    Zrem "zrem" -3 ["write" "fast"] 1 1 1;
    Zremrangebyscore "zremrangebyscore" 4 ["write"] 1 1 1;
    Zremrangebyrank "zremrangebyrank" 4 ["write"] 1 1 1;
    Zremrangebylex "zremrangebylex" 4 ["write"] 1 1 1;
    Zunionstore "zunionstore" -4 ["write" "denyoom" "movablekeys"] 1 1 1 numkeys 2;
    Zinterstore "zinterstore" -4 ["write" "denyoom" "movablekeys"] 1 1 1 numkeys 2;
    Zdiffstore "zdiffstore" -4 ["write" "denyoom" "movablekeys"] 1 1 1 numkeys 2;
    Zunion "zunion" -3 ["readonly" "movablekeys"] 0 0 0 numkeys 1;
    Zinter "zinter" -3 ["readonly" "movablekeys"] 0 0 0 numkeys 1;
    Zintercard "zintercard" -3 ["readonly" "movablekeys"] 0 0 0 numkeys 1;
    Zdiff "zdiff" -3 ["readonly" "movablekeys"] 0 0 0 numkeys 1;
    Zrange "zrange" -4 ["readonly"] 1 1 1;
    Zrangestore "zrangestore" -5 ["write" "denyoom"] 1 2 1;
    Zrangebyscore "zrangebyscore" -4 ["readonly"] 1 1 1;
    Zrevrangebyscore "zrevrangebyscore" -4 ["readonly"] 1 1 1;
    Zrangebylex "zrangebylex" -4 ["readonly"] 1 1 1;
    Zrevrangebylex "zrevrangebylex" -4 ["readonly"] 1 1 1;
    Zcount "zcount" 4 ["readonly" "fast"] 1 1 1;
    Zlexcount "zlexcount" 4 ["readonly" "fast"] 1 1 1;
    Zrevrange "zrevrange" -4 ["readonly"] 1 1 1;
    Zcard "zcard" 2 ["readonly" "fast"] 1 1 1;
    Zscore "zscore" 3 ["readonly" "fast"] 1 1 1;
    Zmscore "zmscore" -3 ["readonly" "fast"] 1 1 1;
    Zrank "zrank" 3 ["readonly" "fast"] 1 1 1;
    Zrevrank "zrevrank" 3 ["readonly" "fast"] 1 1 1;
    Zscan "zscan" -3 ["readonly"] 1 1 1;
    Zpopmin "zpopmin" -2 ["write" "fast"] 1 1 1;
    Zpopmax "zpopmax" -2 ["write" "fast"] 1 1 1;
    Bzpopmin "bzpopmin" -3 ["write" "noscript" "blocking" "fast"] 1 -2 1;
    Bzpopmax "bzpopmax" -3 ["write" "noscript" "blocking" "fast"] 1 -2 1;
    Zmpop "zmpop" -4 ["write" "movablekeys"] 0 0 0 numkeys 1;
    Bzmpop "bzmpop" -5 ["write" "blocking" "movablekeys"] 0 0 0 numkeys 2;
    Zrandmember "zrandmember" -2 ["readonly"] 1 1 1;
    Setbit "setbit" 4 ["write" "denyoom"] 1 1 1;
    Getbit "getbit" 3 ["readonly" "fast"] 1 1 1;
    Bitcount "bitcount" -2 ["readonly"] 1 1 1;
    Bitpos "bitpos" -3 ["readonly"] 1 1 1;
    Bitop "bitop" -4 ["write" "denyoom"] 2 -1 1;
    Bitfield "bitfield" -2 ["write" "denyoom"] 1 1 1;
    BitfieldRo "bitfield_ro" -2 ["readonly" "fast"] 1 1 1;
    Pfadd "pfadd" -2 ["write" "denyoom" "fast"] 1 1 1;
    Pfcount "pfcount" -2 ["readonly"] 1 -1 1;
    Pfmerge "pfmerge" -2 ["write" "denyoom"] 1 -1 1;
    Geoadd "geoadd" -5 ["write" "denyoom"] 1 1 1;
    Geodist "geodist" -4 ["readonly"] 1 1 1;
    Geohash "geohash" -2 ["readonly"] 1 1 1;
    Geopos "geopos" -2 ["readonly"] 1 1 1;
    Georadius "georadius" -6 ["write" "denyoom" "movablekeys"] 1 1 1 keyword "STORE" "STOREDIST";
    Georadiusbymember "georadiusbymember" -5 ["write" "denyoom" "movablekeys"] 1 1 1 keyword "STORE" "STOREDIST";
    GeoradiusRo "georadius_ro" -6 ["readonly"] 1 1 1;
    GeoradiusbymemberRo "georadiusbymember_ro" -5 ["readonly"] 1 1 1;
    Geosearch "geosearch" -7 ["readonly"] 1 1 1;
    Geosearchstore "geosearchstore" -8 ["write" "denyoom"] 1 2 1;
    Subscribe "subscribe" -2 ["pubsub" "noscript" "loading" "stale"] 0 0 0;
    Unsubscribe "unsubscribe" -1 ["pubsub" "noscript" "loading" "stale"] 0 0 0;
    Psubscribe "psubscribe" -2 ["pubsub" "noscript" "loading" "stale"] 0 0 0;
    Punsubscribe "punsubscribe" -1 ["pubsub" "noscript" "loading" "stale"] 0 0 0;
    Publish "publish" 3 ["pubsub" "loading" "stale" "fast"] 0 0 0;
    Pubsub "pubsub" -2 [] 0 0 0;
    Ssubscribe "ssubscribe" -2 ["pubsub" "noscript" "loading" "stale"] 1 -1 1;
    Sunsubscribe "sunsubscribe" -1 ["pubsub" "noscript" "loading" "stale"] 1 -1 1;
    Spublish "spublish" 3 ["pubsub" "loading" "stale" "fast"] 1 1 1;
    Xadd "xadd" -5 ["write" "denyoom" "fast"] 1 1 1;
    Xrange "xrange" -4 ["readonly"] 1 1 1;
    Xrevrange "xrevrange" -4 ["readonly"] 1 1 1;
    Xlen "xlen" 2 ["readonly" "fast"] 1 1 1;
    Xdel "xdel" -3 ["write" "fast"] 1 1 1;
    Xtrim "xtrim" -4 ["write"] 1 1 1;
    Xsetid "xsetid" -3 ["write" "denyoom" "fast"] 1 1 1;
    Xread "xread" -4 ["readonly" "blocking" "movablekeys"] 0 0 0 streams 1;
    Xreadgroup "xreadgroup" -7 ["write" "blocking" "movablekeys"] 0 0 0 streams 4;
    Xgroup "xgroup" -2 [] 2 2 1;
    Xack "xack" -4 ["write" "fast"] 1 1 1;
    Xpending "xpending" -3 ["readonly"] 1 1 1;
    Xclaim "xclaim" -6 ["write" "fast"] 1 1 1;
    Xautoclaim "xautoclaim" -6 ["write" "fast"] 1 1 1;
    Xinfo "xinfo" -2 ["readonly"] 2 2 1;
}

/// What a command works on: the one table every mode and the transaction state machine
/// decide by (exhaustive, so a new command must be placed here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// A data command on string values ([`crate::strings`] runs it over any view), large
    /// objects' `BLOB.READ` included (`resp::blob`: the async paths read chunks, a view
    /// serves what it holds).
    Strings,
    /// A data command on hashes (`crate::hashes` runs it over any view): HSET, HGET, ...
    Hashes,
    /// A data command on lists (`crate::lists`): LPUSH, LRANGE, LMOVE, BLPOP, ...
    Lists,
    /// A data command on sets (`crate::sets`): SADD, SINTER, SPOP, ...
    Sets,
    /// A data command on sorted sets (`crate::zsets`): ZADD, ZRANGE, ZUNIONSTORE, ...
    SortedSets,
    /// Moving or copying a whole value of any type: RENAME, RENAMENX, COPY, DUMP, RESTORE
    /// (`crate::keys`), SORT (`crate::sort`).
    Keys,
    /// Bit operations on string values (`crate::bitmaps`): SETBIT, BITCOUNT, BITFIELD, ...
    Bitmaps,
    /// HyperLogLog cardinality estimates in string values (`crate::hyperloglog`).
    HyperLogLog,
    /// Geospatial indexes in sorted sets (`crate::geo`): GEOADD, GEOSEARCH, ...
    Geo,
    /// A data command on streams (`crate::streams`): XADD, XRANGE, XREADGROUP, ...
    Streams,
    /// Over the whole keyspace: SCAN, KEYS, DBSIZE, FLUSHDB, FLUSHALL.
    Keyspace,
    /// The replication layer's own operations: MERIDIAN.GET/PUT/DEL/SET, TL.* (cluster mode).
    Replication,
    /// Redis transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
    Transaction,
    /// Interactive transactions: MERIDIAN.BEGIN/COMMIT/ABORT (cluster mode).
    Interactive,
    /// Large-object handles: BLOB.OPEN/PREAD/CLOSE (`crate::blob_handles`), outside
    /// transactions.
    Handles,
    /// Connection and server commands, touching no key.
    Connection,
}

impl Cmd {
    /// The command's [`Group`].
    pub fn group(self) -> Group {
        use Cmd::*;
        match self {
            Get | Set | Del | Unlink | Exists | Touch | Mget | Mset | Msetnx | Incr | Decr
            | Incrby | Decrby | Incrbyfloat | Append | Strlen | Getdel | Getex | Getset
            | Getrange | Lcs | Substr | Setrange | Setnx | Setex | Psetex | Expire | Pexpire
            | Expireat | Pexpireat | Ttl | Pttl | Expiretime | Pexpiretime | Persist | Type
            | BlobRead => Group::Strings,
            Hset | Hsetnx | Hmset | Hget | Hmget | Hgetall | Hdel | Hexists | Hlen | Hstrlen
            | Hincrby | Hincrbyfloat | Hkeys | Hvals | Hscan | Hrandfield => Group::Hashes,
            Lpush | Rpush | Lpushx | Rpushx | Linsert | Lpop | Rpop | Llen | Lrange | Lindex
            | Lset | Lrem | Ltrim | Lpos | Lmove | Rpoplpush | Lmpop | Blpop | Brpop | Blmove
            | Brpoplpush | Blmpop => Group::Lists,
            Sadd | Srem | Smove | Sismember | Smismember | Scard | Spop | Srandmember | Sinter
            | Sintercard | Sinterstore | Sunion | Sunionstore | Sdiff | Sdiffstore | Smembers
            | Sscan => Group::Sets,
            Zadd | Zincrby | Zrem | Zremrangebyscore | Zremrangebyrank | Zremrangebylex
            | Zunionstore | Zinterstore | Zdiffstore | Zunion | Zinter | Zintercard | Zdiff
            | Zrange | Zrangestore | Zrangebyscore | Zrevrangebyscore | Zrangebylex
            | Zrevrangebylex | Zcount | Zlexcount | Zrevrange | Zcard | Zscore | Zmscore
            | Zrank | Zrevrank | Zscan | Zpopmin | Zpopmax | Bzpopmin | Bzpopmax | Zmpop
            | Bzmpop | Zrandmember => Group::SortedSets,
            Rename | Renamenx | Copy | Sort | SortRo | Dump | Restore => Group::Keys,
            Setbit | Getbit | Bitcount | Bitpos | Bitop | Bitfield | BitfieldRo => Group::Bitmaps,
            Pfadd | Pfcount | Pfmerge => Group::HyperLogLog,
            Geoadd | Geodist | Geohash | Geopos | Georadius | Georadiusbymember | GeoradiusRo
            | GeoradiusbymemberRo | Geosearch | Geosearchstore => Group::Geo,
            Xadd | Xrange | Xrevrange | Xlen | Xdel | Xtrim | Xsetid | Xread | Xreadgroup
            | Xgroup | Xack | Xpending | Xclaim | Xautoclaim | Xinfo => Group::Streams,
            Scan | Keys | Dbsize | Randomkey | Flushdb | Flushall => Group::Keyspace,
            MeridianGet | MeridianPut | MeridianDel | MeridianSet | TlGetlatest | TlGetcrit
            | TlTas => Group::Replication,
            Multi | Exec | Discard | Watch | Unwatch => Group::Transaction,
            MeridianBegin | MeridianCommit | MeridianAbort => Group::Interactive,
            BlobOpen | BlobPread | BlobClose => Group::Handles,
            Ping | Echo | Info | Command | Config | Client | Acl | Select | Hello | Auth | Quit
            | Reset | Time | Role | Cluster | Readonly | Readwrite | Asking | Move | Swapdb
            | Function | Memory | Object => Group::Connection,
            // Scripts run as one unit over the keys they declare (`numkeys`).
            Eval | Evalsha | EvalRo | EvalshaRo | Script | Fcall | FcallRo => Group::Connection,
            // Channels are not keys of the store (shard channels hash to a slot, as in Redis
            // Cluster, so their key specification names them).
            Subscribe | Unsubscribe | Psubscribe | Punsubscribe | Publish | Pubsub | Ssubscribe
            | Sunsubscribe | Spublish => Group::Connection,
        }
    }

    /// Whether the command runs a Lua script or function (EVAL, EVALSHA, FCALL and their
    /// `_RO` forms).
    #[inline]
    pub fn runs_script(self) -> bool {
        matches!(
            self,
            Cmd::Eval | Cmd::Evalsha | Cmd::EvalRo | Cmd::EvalshaRo | Cmd::Fcall | Cmd::FcallRo
        )
    }

    /// Whether the command runs before authentication.
    #[inline]
    pub fn no_auth(self) -> bool {
        matches!(self, Cmd::Hello | Cmd::Auth | Cmd::Quit | Cmd::Reset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_ignores_case_and_indexes_match() {
        assert_eq!(Cmd::lookup(b"gEt"), Some(Cmd::Get));
        assert_eq!(Cmd::lookup(b"INCRBYFLOAT"), Some(Cmd::Incrbyfloat));
        assert_eq!(Cmd::lookup(b"nope"), None);
        assert_eq!(Cmd::lookup(b"TL.GETLATEST"), Some(Cmd::TlGetlatest));
        assert_eq!(Cmd::lookup(b"blob.READ"), Some(Cmd::BlobRead));
        assert_eq!(Cmd::lookup(b"HINCRBYFLOAT"), Some(Cmd::Hincrbyfloat));
        assert_eq!(Cmd::lookup(b"a-command-name-longer-than-the-buffer"), None);
        for (i, c) in Cmd::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(Cmd::lookup(c.spec().name.as_bytes()), Some(*c));
        }
    }

    #[test]
    fn key_positions() {
        let keys = |parts: &[&str]| {
            let owned = crate::OwnedArgs::from_slices(parts.iter().map(|p| p.as_bytes()));
            let args = owned.get();
            let cmd = Cmd::lookup(args.get(0)).unwrap();
            cmd.spec().key_positions(&args).collect::<Vec<_>>()
        };
        assert_eq!(keys(&["GET", "k"]), [1]);
        assert_eq!(keys(&["SET", "k", "v", "EX", "1"]), [1]);
        assert_eq!(keys(&["DEL", "a", "b", "c"]), [1, 2, 3]);
        assert_eq!(keys(&["MSET", "a", "1", "b", "2"]), [1, 3]);
        assert_eq!(keys(&["TL.TAS", "k", "1", "v"]), [1]);
        assert!(keys(&["PING", "x"]).is_empty());
        assert!(keys(&["SCAN", "0", "COUNT", "1"]).is_empty());
        assert_eq!(keys(&["HMGET", "h", "a", "b", "c"]), [1]);
        assert_eq!(keys(&["BLPOP", "a", "b", "0"]), [1, 2]);
        assert_eq!(keys(&["LMOVE", "a", "b", "LEFT", "RIGHT"]), [1, 2]);
        // numkeys: the keys it counts, after the fixed ones.
        assert_eq!(
            keys(&["ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"]),
            [1, 3, 4]
        );
        assert_eq!(keys(&["ZUNION", "2", "a", "b", "WITHSCORES"]), [2, 3]);
        assert_eq!(keys(&["LMPOP", "1", "a", "LEFT"]), [2]);
        assert_eq!(keys(&["BLMPOP", "0", "2", "a", "b", "LEFT"]), [3, 4]);
        // A numkeys past the arguments is cut to them; a bad one names no key.
        assert_eq!(keys(&["ZUNION", "9", "a", "b"]), [2, 3]);
        assert!(keys(&["ZUNION", "-1", "a"]).is_empty());
        assert!(keys(&["ZUNION", "x", "a"]).is_empty());
        assert!(keys(&["SINTERCARD", "99999999999999999999", "a"]).is_empty());
        assert_eq!(keys(&["SINTERCARD", "9223372036854775807", "a"]), [2]);
        // SORT's STORE destination (the last STORE: a BY pattern may be named "store").
        assert_eq!(keys(&["SORT", "l", "BY", "w_*", "STORE", "d"]), [1, 5]);
        assert_eq!(keys(&["SORT", "l", "store", "d", "ALPHA"]), [1, 3]);
        assert_eq!(keys(&["SORT", "l", "STORE"]), [1]);
        assert_eq!(keys(&["SORT", "l"]), [1]);
        assert_eq!(
            keys(&["GEORADIUS", "g", "0", "0", "1", "km", "STOREDIST", "d"]),
            [1, 7]
        );
        assert_eq!(keys(&["OBJECT", "ENCODING", "k"]), [2]);
        assert!(keys(&["OBJECT", "HELP"]).is_empty());
    }

    #[test]
    fn arity() {
        assert!(Cmd::Get.spec().arity_ok(2));
        assert!(!Cmd::Get.spec().arity_ok(3));
        assert!(Cmd::Del.spec().arity_ok(5));
        assert!(!Cmd::Del.spec().arity_ok(1));
    }
}
