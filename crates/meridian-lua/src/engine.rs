//! One Lua interpreter with Redis 7's script environment, and the scripts loaded into it.
//!
//! - [`Engine::load`] compiles a body once, named by the SHA-1 of its bytes as Redis names
//!   it; [`Engine::run`] calls a loaded script with `KEYS` and `ARGV`, its `redis.call`s going
//!   to the [`Host`], and writes its return value (or its error, with Redis's `script: <sha>,
//!   on @user_script:<line>.` suffix) to the caller's reply;
//! - the environment is sealed (see `prelude.lua`): no OS, file or module access, no
//!   bytecode, no new globals, read-only libraries;
//! - every [`HOOK_EVERY`] VM instructions a hook checks the [`Control`]: once killed, the
//!   script fails at its next check and at every one after, so `pcall` cannot swallow it;
//! - the interpreter's memory is capped: past the limit allocations fail and the script gets
//!   Lua's `not enough memory`, the node is untouched.
//!
//! An engine is not shared between threads while it runs: the node holds it under a lock,
//! which is also what makes a script atomic against other scripts.

use crate::convert::{self, ReturnProtocol};
use crate::error::{Error, Result, message_of, reply_error, reply_of};
use crate::shebang::{self, Flags};
use meridian_redis::{Args, Reply};
use mlua::chunk::ChunkMode;
use mlua::{Function, HookTriggers, Lua, LuaOptions, StdLib, Table, Value, Variadic, VmState};
use sha1::{Digest, Sha1};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// How many VM instructions run between two checks of the [`Control`].
pub const HOOK_EVERY: u32 = 1000;

/// The node's side of a running script: its `redis.call`s.
pub trait Host {
    /// Runs one command the script called (`args[0]` is its name) and appends its reply, in
    /// RESP3 if `reply.resp3`, to `reply`; a refused command is an error reply.
    fn call(&mut self, args: Args<'_>, reply: &mut Reply);

    /// `redis.acl_check_cmd`: whether the script's user may run `args` (`args[0]` its
    /// name); `None` for a command the node does not know. A host without users allows all.
    fn acl_check(&mut self, args: Args<'_>) -> Option<bool> {
        let _ = args;
        Some(true)
    }
}

/// What can stop a running script from outside it: SCRIPT KILL, or a deadline (FUNCTION
/// LOAD's).
pub struct Control {
    killed: AtomicBool,
    /// Set for good (the node shuts down): every run fails at its next check.
    halted: AtomicBool,
    /// Nanoseconds after `base` past which the running code fails (0: none).
    deadline_ns: std::sync::atomic::AtomicU64,
    base: std::time::Instant,
    /// Nanoseconds after `base` when the running call started, or when [`Control::on_long`]
    /// last ran for it.
    long_ns: std::sync::atomic::AtomicU64,
    /// What a call that has run past [`LONG_RUN`] runs, every [`LONG_RUN`] from then on (the
    /// node hands its worker thread's other tasks to another thread).
    on_long: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// How long a call runs before [`Control::on_long`] is called.
pub const LONG_RUN: std::time::Duration = std::time::Duration::from_millis(2);

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("killed", &self.killed)
            .field("halted", &self.halted)
            .finish_non_exhaustive()
    }
}

impl Default for Control {
    fn default() -> Self {
        Self {
            killed: AtomicBool::new(false),
            halted: AtomicBool::new(false),
            deadline_ns: std::sync::atomic::AtomicU64::new(0),
            base: std::time::Instant::now(),
            long_ns: std::sync::atomic::AtomicU64::new(0),
            on_long: std::sync::OnceLock::new(),
        }
    }
}

impl Control {
    /// Asks the running script to stop (SCRIPT KILL); it fails at its next check.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
    }

    /// Stops the running script and every later one, for good (a node shutting down).
    pub fn halt(&self) {
        self.halted.store(true, Ordering::Release);
    }

    /// Whether [`Control::halt`] was called.
    pub fn is_halted(&self) -> bool {
        self.halted.load(Ordering::Acquire)
    }

    fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire) || self.is_halted()
    }

    fn past_deadline(&self) -> bool {
        let d = self.deadline_ns.load(Ordering::Relaxed);
        d != 0 && self.base.elapsed().as_nanos() as u64 > d
    }

    fn set_deadline(&self, after: Option<std::time::Duration>) {
        let ns = after.map_or(0, |a| (self.base.elapsed() + a).as_nanos() as u64);
        self.deadline_ns.store(ns, Ordering::Relaxed);
    }

    /// A call starts: not killed.
    fn reset(&self) {
        self.killed.store(false, Ordering::Release);
        let now = self.base.elapsed().as_nanos() as u64;
        self.long_ns.store(now, Ordering::Relaxed);
    }

    /// Sets what a long call runs (once; later calls are ignored): see [`LONG_RUN`].
    pub fn on_long(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_long.set(Box::new(f));
    }

    /// Runs [`Control::on_long`] when the call has run [`LONG_RUN`] since it started or
    /// since the last time it ran.
    fn long_check(&self) {
        let Some(f) = self.on_long.get() else {
            return;
        };
        let now = self.base.elapsed().as_nanos() as u64;
        let last = self.long_ns.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= LONG_RUN.as_nanos() as u64 {
            self.long_ns.store(now, Ordering::Relaxed);
            f();
        }
    }
}

/// An engine's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The most memory the interpreter may hold, in bytes.
    pub memory_limit: usize,
    /// `redis.REDIS_VERSION` (`major.minor.patch`).
    pub redis_version: String,
    /// The seed of `math.random`.
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            memory_limit: 256 << 20,
            redis_version: "7.2.0".into(),
            seed: 0,
        }
    }
}

/// A loaded script.
#[derive(Clone, Debug)]
pub struct Script {
    /// Its `#!` flags.
    pub flags: Flags,
    func: Function,
}

/// An interpreter and its script cache.
pub struct Engine {
    config: Config,
    lua: Lua,
    real: Table,
    redis_api: Table,
    env: Table,
    runner: Function,
    handler: Function,
    scripts: HashMap<String, Script>,
    scripts_bytes: usize,
    control: Arc<Control>,
    /// The protocol the running script chose (`redis.setresp`).
    resp: Arc<AtomicU8>,
    /// FUNCTION's libraries (see `engine::functions`).
    libs: functions::Libraries,
    /// Switches the scripts' globals to the library API while a library loads.
    set_loading: Function,
    runs: u64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("scripts", &self.scripts.len())
            .finish_non_exhaustive()
    }
}

/// The SHA-1 of `body`, in lowercase hex: a script's name.
pub fn sha1_hex(body: &[u8]) -> String {
    hex::encode(Sha1::digest(body))
}

impl Engine {
    /// A fresh interpreter with Redis's environment and no scripts.
    pub fn new(config: Config) -> Result<Self> {
        Self::with_control(config, Arc::new(Control::default()))
    }

    /// [`Engine::new`] stopped through an existing `control` (a flushed engine stays
    /// killable by whoever held the old one).
    pub fn with_control(config: Config, control: Arc<Control>) -> Result<Self> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::new())?;
        crate::libs::open_all(&lua)?;
        let real = lua.globals();
        let resp = Arc::new(AtomicU8::new(2));
        let hidden = hidden_table(&lua, &config, &control, &resp)?;
        let libs = functions::Libraries::install(&lua, &hidden)?;
        // Lua's own xpcall, taken before the prelude wraps the scripts' one.
        let runner: Function = lua
            .load(
                "local xpcall = xpcall\nreturn function(f, h, k, a)\n\
                 if k == nil then return xpcall(f, h) end\n\
                 return xpcall(function() return f(k, a) end, h)\nend",
            )
            .set_name("=runner")
            .eval()?;
        let env: Table = lua
            .load(include_str!("prelude.lua"))
            .set_name("=prelude")
            .call((hidden.clone(), real.clone()))?;

        let handler = lua.create_function(error_handler)?;
        let redis_api: Table = hidden.raw_get("redis")?;
        outside_calls(&lua, &redis_api)?;
        let set_loading: Function = hidden.raw_get("set_loading")?;
        install_hook(&lua, control.clone())?;
        lua.set_memory_limit(config.memory_limit)?;
        Ok(Self {
            config,
            lua,
            real,
            redis_api,
            env,
            runner,
            handler,
            scripts: HashMap::new(),
            scripts_bytes: 0,
            control,
            resp,
            libs,
            set_loading,
            runs: 0,
        })
    }

    /// What stops this engine's running script.
    pub fn control(&self) -> Arc<Control> {
        self.control.clone()
    }

    /// Compiles `body` (once: a loaded body is found by its SHA-1) and returns its name.
    pub fn load(&mut self, body: &[u8]) -> Result<String> {
        let sha = sha1_hex(body);
        if self.scripts.contains_key(&sha) {
            return Ok(sha);
        }
        let (flags, shebang_len) = shebang::parse(body).map_err(Error::Shebang)?;
        let func = self
            .lua
            .load(&body[shebang_len..])
            .set_name("@user_script")
            .set_mode(ChunkMode::Text)
            .set_environment(self.env.clone())
            .into_function()
            .map_err(|e| Error::Compile(message_of(&e)))?;
        self.scripts_bytes += body.len() + sha.len();
        self.scripts.insert(sha.clone(), Script { flags, func });
        Ok(sha)
    }

    /// The loaded script named `sha` (40 hex digits, any case).
    pub fn script(&self, sha: &[u8]) -> Option<&Script> {
        if sha.len() != 40 {
            return None;
        }
        let lower = std::str::from_utf8(sha).ok()?.to_ascii_lowercase();
        self.scripts.get(&lower)
    }

    /// Whether a script named `sha` is loaded.
    pub fn exists(&self, sha: &[u8]) -> bool {
        self.script(sha).is_some()
    }

    /// Forgets every script and starts a fresh interpreter (SCRIPT FLUSH).
    pub fn flush(&mut self) -> Result<()> {
        *self = Self::with_control(self.config.clone(), self.control.clone())?;
        Ok(())
    }

    /// How many scripts are loaded, and the bytes of their bodies and names.
    pub fn cached(&self) -> (usize, usize) {
        (self.scripts.len(), self.scripts_bytes)
    }

    /// Runs a full garbage collection.
    pub fn collect_garbage_fully(&mut self) {
        let _ = self.lua.gc_collect();
    }

    /// The interpreter's memory in bytes.
    pub fn used_memory(&self) -> usize {
        self.lua.used_memory()
    }

    /// Runs the loaded script `sha` (see [`Engine::script`]) with `keys` and `argv`, its
    /// commands going to `host`, and writes its result to `reply`. Returns whether the script
    /// failed.
    pub fn run(
        &mut self,
        sha: &[u8],
        keys: Args<'_>,
        argv: Args<'_>,
        host: &mut dyn Host,
        reply: &mut Reply,
    ) -> bool {
        let Some(script) = self.script(sha).cloned() else {
            reply.error("NOSCRIPT No matching script. Please use EVAL.");
            return true;
        };
        let name = String::from_utf8_lossy(sha).to_ascii_lowercase();
        let out = self.call(&script.func, true, keys, argv, host);
        self.answer(out, &name, reply)
    }

    fn answer(&self, out: mlua::Result<(bool, Value)>, name: &str, reply: &mut Reply) -> bool {
        match out {
            Ok((true, v)) => {
                let resp3 = self.resp.load(Ordering::Relaxed) == 3;
                convert::lua_to_reply(
                    &v,
                    ReturnProtocol {
                        script_resp3: resp3,
                    },
                    reply,
                );
                false
            }
            Ok((false, err)) => {
                reply.error(&script_error(&err, name));
                true
            }
            Err(e) => {
                reply.error(&format!(
                    "ERR Error running script {name}, {}",
                    message_of(&e)
                ));
                true
            }
        }
    }

    /// Calls `func` with the handler: a script (`eval`, KEYS and ARGV as globals) or a
    /// function (KEYS and ARGV as its arguments).
    fn call(
        &mut self,
        func: &Function,
        eval: bool,
        keys: Args<'_>,
        argv: Args<'_>,
        host: &mut dyn Host,
    ) -> mlua::Result<(bool, Value)> {
        self.control.reset();
        let (keys, argv) = (self.array(keys)?, self.array(argv)?);
        let args = if eval {
            self.real.raw_set("KEYS", keys)?;
            self.real.raw_set("ARGV", argv)?;
            (Value::Nil, Value::Nil)
        } else {
            (Value::Table(keys), Value::Table(argv))
        };
        self.resp.store(2, Ordering::Relaxed);
        let resp = &self.resp;
        // Both functions reach the one host; the script calls them one at a time.
        let host = std::cell::RefCell::new(host);
        let scratch = std::cell::RefCell::new(CallScratch::default());
        let out = self.lua.scope(|scope| {
            let call = |raise: bool| {
                let (host, scratch) = (&host, &scratch);
                scope.create_function(move |lua, args: Variadic<Value>| {
                    let (Ok(mut host), Ok(mut scratch)) =
                        (host.try_borrow_mut(), scratch.try_borrow_mut())
                    else {
                        return Err(reply_error(
                            "ERR redis.call/pcall recursive call detected".into(),
                        ));
                    };
                    scratch.call(lua, resp, &args, &mut **host, raise)
                })
            };
            self.redis_api.raw_set("call", call(true)?)?;
            self.redis_api.raw_set("pcall", call(false)?)?;
            let (host, scratch) = (&host, &scratch);
            let acl_check = scope.create_function(move |_, args: Variadic<Value>| {
                let (Ok(mut host), Ok(mut scratch)) =
                    (host.try_borrow_mut(), scratch.try_borrow_mut())
                else {
                    return Err(reply_error(
                        "ERR redis.call/pcall recursive call detected".into(),
                    ));
                };
                scratch.acl_check(&args, &mut **host)
            })?;
            self.redis_api.raw_set("acl_check_cmd", acl_check)?;
            self.runner
                .call::<(bool, Value)>((func.clone(), self.handler.clone(), args.0, args.1))
        });
        if !matches!(out, Ok((true, _))) {
            self.reclaim();
        }
        outside_calls(&self.lua, &self.redis_api)?;
        self.collect_garbage();
        out
    }

    /// Collects what a failed script left (Lua 5.1 has no emergency collection). The limit
    /// is lifted meanwhile: a collection itself allocates (shrinking the string table), and
    /// must not fail for the memory it is about to free.
    fn reclaim(&self) {
        let _ = self.lua.set_memory_limit(usize::MAX);
        let _ = self.lua.gc_collect();
        let _ = self.lua.set_memory_limit(self.config.memory_limit);
    }

    fn array(&self, args: Args<'_>) -> mlua::Result<Table> {
        let t = self.lua.create_table_with_capacity(args.len(), 0)?;
        for (i, a) in args.iter_from(0).enumerate() {
            t.raw_set(i + 1, self.lua.create_string(a)?)?;
        }
        Ok(t)
    }

    /// A step of garbage collection every 50 runs, as Redis does, so that no run pays for a
    /// full cycle.
    fn collect_garbage(&mut self) {
        self.runs += 1;
        if self.runs.is_multiple_of(50) {
            let _ = self.lua.gc_step();
        }
    }
}

/// Argument buffers reused by one run's `redis.call`s.
#[derive(Default)]
struct CallScratch {
    bytes: Vec<u8>,
    ranges: Vec<(usize, usize)>,
    reply: Option<Reply>,
}

impl CallScratch {
    /// One `redis.call` (`raise`) or `redis.pcall`: the reply as a Lua value; an error reply
    /// raised, or returned as `{err=…}`.
    fn call(
        &mut self,
        lua: &Lua,
        resp: &AtomicU8,
        args: &[Value],
        host: &mut dyn Host,
        raise: bool,
    ) -> mlua::Result<Value> {
        let refuse = |msg: &str| {
            if raise {
                Err(reply_error(msg.into()))
            } else {
                err_table(lua, msg)
            }
        };
        if args.is_empty() {
            return refuse("ERR Please specify at least one argument for this redis lib call");
        }
        if !self.collect(args) {
            return refuse("ERR Lua redis lib command arguments must be strings or integers");
        }
        let reply = self.reply.get_or_insert_with(|| Reply::new(256));
        reply.out.clear();
        reply.resp3 = resp.load(Ordering::Relaxed) == 3;
        host.call(Args::from_parts(&self.bytes, &self.ranges), reply);
        if raise && reply.out.first() == Some(&b'-') {
            let line = &reply.out[1..reply.out.len().saturating_sub(2)];
            return Err(reply_error(String::from_utf8_lossy(line).into_owned()));
        }
        convert::reply_to_lua(lua, &reply.out)
    }

    /// `redis.acl_check_cmd(name, args…)`: whether the script's user may run the command.
    fn acl_check(&mut self, args: &[Value], host: &mut dyn Host) -> mlua::Result<bool> {
        if args.is_empty() {
            return Err(reply_error(
                "ERR Please specify at least one argument for this redis lib call".into(),
            ));
        }
        if !self.collect(args) {
            return Err(reply_error(
                "ERR Lua redis lib command arguments must be strings or integers".into(),
            ));
        }
        host.acl_check(Args::from_parts(&self.bytes, &self.ranges))
            .ok_or_else(|| {
                reply_error("ERR Invalid command passed to redis.acl_check_cmd()".into())
            })
    }

    /// The arguments as command arguments (numbers as Redis formats them); false if one is
    /// neither a string nor a number.
    fn collect(&mut self, args: &[Value]) -> bool {
        self.bytes.clear();
        self.ranges.clear();
        for a in args {
            let start = self.bytes.len();
            match a {
                Value::String(s) => self.bytes.extend_from_slice(&s.as_bytes()),
                Value::Number(n) => self
                    .bytes
                    .extend_from_slice(convert::number_arg(*n).as_bytes()),
                Value::Integer(i) => self.bytes.extend_from_slice(i.to_string().as_bytes()),
                _ => return false,
            }
            self.ranges.push((start, self.bytes.len()));
        }
        true
    }
}

/// `redis.call` and `redis.pcall` between runs (a function a script kept, called later).
fn outside_calls(lua: &Lua, redis_api: &Table) -> mlua::Result<()> {
    let call =
        |_: &Lua, _: Variadic<Value>| -> mlua::Result<Value> { Err(reply_error(OUTSIDE.into())) };
    redis_api.raw_set("call", lua.create_function(call)?)?;
    let pcall = |lua: &Lua, _: Variadic<Value>| err_table(lua, OUTSIDE);
    redis_api.raw_set("pcall", lua.create_function(pcall)?)?;
    let acl_check = |_: &Lua, _: Variadic<Value>| -> mlua::Result<Value> {
        Err(reply_error(
            "ERR redis.acl_check_cmd can only be called inside a script invocation".into(),
        ))
    };
    redis_api.raw_set("acl_check_cmd", lua.create_function(acl_check)?)?;
    Ok(())
}

const OUTSIDE: &str = "ERR redis.call/pcall can only be called inside a script invocation";

fn err_table(lua: &Lua, msg: &str) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set("err", msg)?;
    Ok(Value::Table(t))
}

/// The Rust primitives the prelude builds `redis.*`, `math.random` and `pcall` on.
fn hidden_table(
    lua: &Lua,
    config: &Config,
    control: &Arc<Control>,
    resp: &Arc<AtomicU8>,
) -> mlua::Result<Table> {
    let hidden = lua.create_table()?;
    hidden.raw_set("sha1hex", lua.create_function(sha1hex)?)?;
    hidden.raw_set("log", lua.create_function(log)?)?;
    hidden.raw_set("set_repl", lua.create_function(set_repl)?)?;
    let resp = resp.clone();
    hidden.raw_set(
        "setresp",
        lua.create_function(move |_, args: Variadic<Value>| {
            let [v] = args.as_slice() else {
                return Err(reply_error(
                    "ERR redis.setresp() requires one argument.".into(),
                ));
            };
            match number_of(v) {
                Some(n) if n == 2.0 || n == 3.0 => {
                    resp.store(n as u8, Ordering::Relaxed);
                    Ok(())
                }
                _ => Err(reply_error("ERR RESP version must be 2 or 3.".into())),
            }
        })?,
    )?;
    let control = control.clone();
    hidden.raw_set(
        "killed",
        lua.create_function(move |_, ()| Ok(control.is_killed()))?,
    )?;
    hidden.raw_set(
        "message",
        lua.create_function(|lua, e: Value| {
            Ok(match e {
                Value::Error(e) => Value::String(lua.create_string(message_of(&e))?),
                Value::String(s) => Value::String(s),
                other => Value::String(lua.create_string(other.to_string()?)?),
            })
        })?,
    )?;
    let (random, randomseed) = crate::random::functions(lua, config.seed)?;
    hidden.raw_set("random", random)?;
    hidden.raw_set("randomseed", randomseed)?;
    hidden.raw_set("version", config.redis_version.as_str())?;
    hidden.raw_set("version_num", version_num(&config.redis_version))?;
    Ok(hidden)
}

/// A Lua value as a number, as `lua_tonumber` reads it (numeric strings included).
fn number_of(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => Some(*n),
        Value::Integer(i) => Some(*i as f64),
        Value::String(s) => std::str::from_utf8(&s.as_bytes()).ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// `redis.sha1hex(s)`.
fn sha1hex(_: &Lua, args: Variadic<Value>) -> mlua::Result<String> {
    let [v] = args.as_slice() else {
        return Err(reply_error("ERR wrong number of arguments".into()));
    };
    let bytes = match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Number(n) => convert::lua_number_string(*n).into_bytes(),
        Value::Integer(i) => i.to_string().into_bytes(),
        _ => Vec::new(),
    };
    Ok(sha1_hex(&bytes))
}

/// `redis.log(level, message, ...)`: to the node's log, under `meridian::script`.
fn log(_: &Lua, args: Variadic<Value>) -> mlua::Result<()> {
    if args.len() < 2 {
        return Err(reply_error(
            "ERR redis.log() requires two arguments or more.".into(),
        ));
    }
    let Some(level) = number_of(&args[0]) else {
        return Err(reply_error(
            "ERR First argument must be a number (log level).".into(),
        ));
    };
    if !(0.0..4.0).contains(&level) {
        return Err(reply_error("ERR Invalid debug level.".into()));
    }
    let parts: Vec<String> = args[1..]
        .iter()
        .filter_map(|v| match v {
            Value::String(s) => Some(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
            Value::Number(n) => Some(convert::lua_number_string(*n)),
            Value::Integer(i) => Some(i.to_string()),
            _ => None,
        })
        .collect();
    let msg = parts.join(" ");
    match level as u8 {
        0 => tracing::debug!(target: "meridian::script", "{msg}"),
        1 | 2 => tracing::info!(target: "meridian::script", "{msg}"),
        _ => tracing::warn!(target: "meridian::script", "{msg}"),
    }
    Ok(())
}

/// `redis.set_repl(flags)`: accepted and checked; a node replicates a script's effects.
fn set_repl(_: &Lua, args: Variadic<Value>) -> mlua::Result<()> {
    let [v] = args.as_slice() else {
        return Err(reply_error(
            "ERR redis.set_repl() requires two arguments.".into(),
        ));
    };
    match number_of(v) {
        Some(f) if (0.0..=3.0).contains(&f) => Ok(()),
        _ => Err(reply_error(
            "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."
                .into(),
        )),
    }
}

/// `7.2.0` → `0x070200`.
fn version_num(v: &str) -> i64 {
    v.split('.')
        .take(3)
        .map(|p| p.parse::<i64>().unwrap_or(0) & 0xff)
        .fold(0, |acc, p| (acc << 8) | p)
}

/// A killed script fails at every check from then on. Global, so that coroutines the script
/// creates (which inherit the hook) find the same callback.
fn install_hook(lua: &Lua, control: Arc<Control>) -> mlua::Result<()> {
    lua.set_global_hook(
        HookTriggers::new().every_nth_instruction(HOOK_EVERY),
        move |_, _| {
            if control.is_killed() {
                Err(mlua::Error::runtime(KILLED))
            } else if control.past_deadline() {
                Err(mlua::Error::runtime("FUNCTION LOAD timeout"))
            } else {
                control.long_check();
                Ok(VmState::Continue)
            }
        },
    )
}

const KILLED: &str = "Script killed by user with SCRIPT KILL...";

/// The error handler a script runs under: turns any error into Redis's error table
/// `{err=…, source=…, line=…}`, the position being the innermost line of the user's code.
fn error_handler(lua: &Lua, err: Value) -> mlua::Result<Table> {
    let table = match err {
        Value::Table(t) if matches!(t.raw_get::<Value>("err"), Ok(Value::String(_))) => t,
        other => {
            let msg = match &other {
                Value::Error(e) if reply_of(e).is_some() => reply_of(e).unwrap_or_default(),
                Value::Error(e) => format!("ERR {}", message_of(e)),
                Value::String(s) => format!("ERR {}", String::from_utf8_lossy(&s.as_bytes())),
                v => format!(
                    "ERR {}",
                    v.to_string().unwrap_or_else(|_| "execution failure".into())
                ),
            };
            let t = lua.create_table()?;
            t.raw_set("err", msg)?;
            t
        }
    };
    if let Some((source, line)) = user_position(lua) {
        table.raw_set("source", source)?;
        table.raw_set("line", line)?;
    }
    Ok(table)
}

/// The innermost frame running the user's code: its chunk name and current line.
fn user_position(lua: &Lua) -> Option<(String, i64)> {
    (1..200).find_map(|level| {
        lua.inspect_stack(level, |d| {
            let src = d.source();
            let source = src.source.as_deref()?;
            if !source.starts_with("@user_") {
                return None;
            }
            Some((
                source.to_string(),
                d.current_line().map_or(-1, |l| l as i64),
            ))
        })?
    })
}

/// The message of an error value (an error table's `err`).
fn error_text(err: &Value) -> String {
    match err {
        Value::Table(t) => match t.raw_get::<Value>("err") {
            Ok(Value::String(s)) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
            _ => "execution failure".into(),
        },
        Value::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
        _ => "execution failure".into(),
    }
}

/// The reply for a script that failed with the error table `err`.
fn script_error(err: &Value, name: &str) -> String {
    let t = match err {
        Value::Table(t) => t,
        // Lua reports running out of memory without the handler: a bare message.
        Value::String(s) => {
            let msg = String::from_utf8_lossy(&s.as_bytes()).into_owned();
            return format!("ERR Error running script {name}, {msg}");
        }
        _ => return format!("ERR Error running script {name}, execution failure"),
    };
    let msg = match t.raw_get::<Value>("err") {
        Ok(Value::String(s)) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
        _ => "ERR execution failure".into(),
    };
    let source = t.raw_get::<Option<String>>("source").ok().flatten();
    let line = t.raw_get::<Option<i64>>("line").ok().flatten();
    match (source, line) {
        (Some(source), Some(line)) => format!("{msg} script: {name}, on {source}:{line}."),
        _ => msg,
    }
}

mod functions;
pub use functions::{FunctionInfo, LibraryInfo, RestorePolicy};
#[cfg(test)]
mod tests;
