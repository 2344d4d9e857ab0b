//! Redis 7 functions: libraries of named Lua functions (`#!lua name=<library>`), registered
//! with `redis.register_function` while FUNCTION LOAD runs the library's code, called by
//! FCALL with their KEYS and ARGV as arguments.
//!
//! Guarantees: a library loads whole or not at all (a compile error, a failing or looping
//! body — stopped after [`LOAD_TIMEOUT`] — no function registered, or a name another
//! library has, leave the registry as it was); function and library names are Redis's
//! (letters, digits, `_`); FUNCTION DUMP's payload carries a version and a checksum, and
//! RESTORE refuses any other bytes.

use super::{Engine, Host};
use crate::error::{message_of, reply_error};
use crate::shebang::{self, Flags};
use meridian_redis::{Args, Reply};
use mlua::chunk::ChunkMode;
use mlua::{Function, Lua, Table, Value, Variadic};
use sha1::{Digest, Sha1};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a library's code may run while it loads.
pub const LOAD_TIMEOUT: Duration = Duration::from_millis(500);

const DUMP_MAGIC: &[u8] = b"MERIDIAN-FUNCTIONS\x01";

/// One function of a library.
#[derive(Clone, Debug)]
pub struct FunctionInfo {
    /// Its name (what FCALL names).
    pub name: String,
    /// `description`, if given.
    pub description: Option<String>,
    /// Its flags.
    pub flags: Flags,
    callback: Function,
}

/// One library.
#[derive(Clone, Debug)]
pub struct LibraryInfo {
    /// Its name.
    pub name: String,
    /// Its code, as loaded.
    pub code: Vec<u8>,
    /// Its functions, by lowercase name (function names ignore case, as in Redis).
    pub functions: BTreeMap<String, FunctionInfo>,
}

/// FUNCTION RESTORE's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestorePolicy {
    /// Add the libraries; one that exists fails the restore.
    Append,
    /// Add them, replacing libraries of the same name.
    Replace,
    /// Drop every library first.
    Flush,
}

/// The registry, and the registrations of the library loading now.
#[derive(Debug)]
pub(super) struct Libraries {
    by_name: BTreeMap<String, LibraryInfo>,
    pending: Arc<Mutex<Option<Vec<FunctionInfo>>>>,
}

impl Libraries {
    /// An empty registry; installs `redis.register_function` into `redis_api`.
    pub(super) fn install(lua: &Lua, hidden: &Table) -> mlua::Result<Self> {
        let pending: Arc<Mutex<Option<Vec<FunctionInfo>>>> = Arc::default();
        let slot = pending.clone();
        let register = lua.create_function(move |_, args: Variadic<Value>| {
            let mut slot = slot
                .lock()
                .map_err(|_| reply_error("ERR poisoned".into()))?;
            let Some(list) = slot.as_mut() else {
                return Err(reply_error(
                    "ERR redis.register_function can only be called on FUNCTION LOAD command"
                        .into(),
                ));
            };
            let f = registration(&args).map_err(|e| reply_error(format!("ERR {e}")))?;
            if !valid_name(&f.name) {
                return Err(reply_error(
                    "ERR Library names can only contain letters, numbers, or underscores(_) \
                     and must be at least one character long"
                        .into(),
                ));
            }
            if list.iter().any(|g| g.name.eq_ignore_ascii_case(&f.name)) {
                return Err(reply_error(
                    "ERR Function already exists in the library".into(),
                ));
            }
            list.push(f);
            Ok(())
        })?;
        // The prelude puts it in the library API only (see `prelude.lua`).
        hidden.raw_set("register_function", register)?;
        Ok(Self {
            by_name: BTreeMap::new(),
            pending,
        })
    }
}

/// `redis.register_function(name, callback)` or `redis.register_function{function_name=…,
/// callback=…, flags={…}, description=…}`.
fn registration(args: &[Value]) -> Result<FunctionInfo, &'static str> {
    match args {
        [Value::Table(t)] => named_registration(t),
        [_] => Err(
            "calling redis.register_function with a single argument is only applicable to Lua \
             table (representing named arguments).",
        ),
        [name, callback] => {
            let name = string_of(name)
                .ok_or("first argument to redis.register_function must be a string")?;
            let Value::Function(callback) = callback else {
                return Err("second argument to redis.register_function must be a function");
            };
            Ok(FunctionInfo {
                name,
                description: None,
                flags: Flags::default(),
                callback: callback.clone(),
            })
        }
        _ => Err("wrong number of arguments to redis.register_function"),
    }
}

fn named_registration(t: &Table) -> Result<FunctionInfo, &'static str> {
    let (mut name, mut description, mut callback, mut flags) = (None, None, None, Flags::default());
    for pair in t.pairs::<Value, Value>() {
        let (k, v) = pair
            .map_err(|_| "named argument key given to redis.register_function is not a string")?;
        let key = string_of(&k)
            .ok_or("named argument key given to redis.register_function is not a string")?;
        match key.to_ascii_lowercase().as_str() {
            "function_name" => {
                name = Some(string_of(&v).ok_or(
                    "function_name argument given to redis.register_function must be a string",
                )?)
            }
            "description" => {
                description = Some(string_of(&v).ok_or(
                    "description argument given to redis.register_function must be a string",
                )?)
            }
            "callback" => match v {
                Value::Function(f) => callback = Some(f),
                _ => {
                    return Err(
                        "callback argument given to redis.register_function must be a function",
                    );
                }
            },
            "flags" => {
                let Value::Table(list) = v else {
                    return Err(
                        "flags argument to redis.register_function must be a table representing function flags",
                    );
                };
                flags = read_flags(&list)?;
            }
            _ => return Err("unknown argument given to redis.register_function"),
        }
    }
    Ok(FunctionInfo {
        name: name.ok_or("redis.register_function must get a function name argument")?,
        description,
        flags,
        callback: callback.ok_or("redis.register_function must get a callback argument")?,
    })
}

fn read_flags(list: &Table) -> Result<Flags, &'static str> {
    let mut flags = Flags::default();
    for v in list.sequence_values::<Value>() {
        let name = v
            .ok()
            .as_ref()
            .and_then(string_of)
            .ok_or("unknown flag given")?;
        shebang::set_flag(&mut flags, &name.to_ascii_lowercase())
            .map_err(|_| "unknown flag given")?;
    }
    Ok(flags)
}

fn string_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
        _ => None,
    }
}

/// Redis's rule for library and function names.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `#!lua name=<library>`: the library's name and where its code starts (the line's
/// newline, kept so that line numbers stay the user's), or Redis's error.
fn library_name(code: &[u8]) -> Result<(String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let end = code
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("Invalid library metadata")?;
    let line = String::from_utf8_lossy(&code[..end]).into_owned();
    // Redis splits the line as arguments: quotes group, and are not part of the value.
    let mut parts = line.split_ascii_whitespace().map(|p| p.replace('"', ""));
    let first = parts.next().ok_or("Invalid library metadata")?;
    let engine = first.get(2..).unwrap_or_default().to_string();
    let mut name = None;
    for part in parts {
        match part.get(..5) {
            Some(p) if p.eq_ignore_ascii_case("name=") => {
                if name.is_some() {
                    return Err(
                        "Invalid metadata value, name argument was given multiple times".into(),
                    );
                }
                name = Some(part[5..].to_string());
            }
            _ => return Err(format!("Invalid metadata value given: {part}")),
        }
    }
    let name = name.ok_or("Library name was not given")?;
    if !valid_name(&name) {
        return Err(
            "Library names can only contain letters, numbers, or underscores(_) and must \
                    be at least one character long"
                .into(),
        );
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("Engine '{engine}' not found"));
    }
    Ok((name, end))
}

impl Engine {
    /// FUNCTION LOAD: compiles and runs `code`, registering its functions; the library's
    /// name, or Redis's error text (code included).
    pub fn load_library(&mut self, code: &[u8], replace: bool) -> Result<String, String> {
        let (name, start) = library_name(code).map_err(|e| format!("ERR {e}"))?;
        if self.libs.by_name.contains_key(&name) && !replace {
            return Err(format!("ERR Library '{name}' already exists"));
        }
        let functions = self.run_library(&code[start..])?;
        for f in &functions {
            let clash = self.libs.by_name.values().any(|lib| {
                lib.name != name && lib.functions.contains_key(&f.name.to_ascii_lowercase())
            });
            if clash {
                return Err(format!("ERR Function {} already exists", f.name));
            }
        }
        let library = LibraryInfo {
            name: name.clone(),
            code: code.to_vec(),
            functions: functions
                .into_iter()
                .map(|f| (f.name.to_ascii_lowercase(), f))
                .collect(),
        };
        self.libs.by_name.insert(name.clone(), library);
        Ok(name)
    }

    /// Runs a library's body with registration open; its functions.
    fn run_library(&mut self, code: &[u8]) -> Result<Vec<FunctionInfo>, String> {
        let body = self
            .lua
            .load(code)
            .set_name("@user_function")
            .set_mode(ChunkMode::Text)
            .set_environment(self.env.clone())
            .into_function()
            .map_err(|e| format!("ERR Error compiling function: {}", message_of(&e)))?;
        self.set_pending(Some(Vec::new()));
        let _ = self.set_loading.call::<()>(true);
        self.control.reset();
        self.control.set_deadline(Some(LOAD_TIMEOUT));
        let out =
            self.runner
                .call::<(bool, Value)>((body, self.handler.clone(), Value::Nil, Value::Nil));
        self.control.set_deadline(None);
        let _ = self.set_loading.call::<()>(false);
        let registered = self.set_pending(None).unwrap_or_default();
        match out {
            Ok((true, _)) => {}
            Ok((false, err)) => {
                let msg = super::error_text(&err);
                return Err(format!("ERR Error registering functions: {msg}"));
            }
            Err(e) => {
                return Err(format!(
                    "ERR Error registering functions: {}",
                    message_of(&e)
                ));
            }
        }
        if registered.is_empty() {
            return Err("ERR No functions registered".into());
        }
        Ok(registered)
    }

    fn set_pending(&self, v: Option<Vec<FunctionInfo>>) -> Option<Vec<FunctionInfo>> {
        match self.libs.pending.lock() {
            Ok(mut slot) => std::mem::replace(&mut *slot, v),
            Err(_) => None,
        }
    }

    /// The function FCALL names (in any case), if loaded.
    pub fn function(&self, name: &[u8]) -> Option<&FunctionInfo> {
        let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        self.libs
            .by_name
            .values()
            .find_map(|lib| lib.functions.get(&name))
    }

    /// FCALL: runs function `name` (see [`Engine::function`]) with `keys` and `argv`, as
    /// [`Engine::run`] runs a script. Returns whether it failed.
    pub fn run_function(
        &mut self,
        name: &[u8],
        keys: Args<'_>,
        argv: Args<'_>,
        host: &mut dyn Host,
        reply: &mut Reply,
    ) -> bool {
        let Some(f) = self.function(name).cloned() else {
            reply.error("ERR Function not found");
            return true;
        };
        let out = self.call(&f.callback, false, keys, argv, host);
        self.answer(out, &f.name, reply)
    }

    /// Every library, by name.
    pub fn libraries(&self) -> impl Iterator<Item = &LibraryInfo> {
        self.libs.by_name.values()
    }

    /// FUNCTION DELETE: whether the library existed.
    pub fn delete_library(&mut self, name: &[u8]) -> bool {
        let name = String::from_utf8_lossy(name);
        self.libs.by_name.remove(name.as_ref()).is_some()
    }

    /// FUNCTION FLUSH.
    pub fn flush_libraries(&mut self) {
        self.libs.by_name.clear();
    }

    /// FUNCTION DUMP: every library's code, versioned and checksummed.
    pub fn dump_libraries(&self) -> Vec<u8> {
        let mut out = DUMP_MAGIC.to_vec();
        for lib in self.libs.by_name.values() {
            out.extend_from_slice(&(lib.code.len() as u64).to_le_bytes());
            out.extend_from_slice(&lib.code);
        }
        let sum = Sha1::digest(&out);
        out.extend_from_slice(&sum);
        out
    }

    /// FUNCTION RESTORE: loads a [`Engine::dump_libraries`] payload under `policy`, all or
    /// nothing.
    pub fn restore_libraries(
        &mut self,
        payload: &[u8],
        policy: RestorePolicy,
    ) -> Result<(), String> {
        let codes = parse_dump(payload).ok_or("ERR DUMP payload version or checksum are wrong")?;
        if policy == RestorePolicy::Append {
            for code in &codes {
                if let Ok((name, _)) = library_name(code)
                    && self.libs.by_name.contains_key(&name)
                {
                    return Err(format!("ERR Library {name} already exists"));
                }
            }
        }
        let before = self.libs.by_name.clone();
        if policy == RestorePolicy::Flush {
            self.libs.by_name.clear();
        }
        for code in codes {
            if let Err(e) = self.load_library(code, policy != RestorePolicy::Append) {
                self.libs.by_name = before;
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The library codes of a dump, if its magic and checksum hold.
fn parse_dump(payload: &[u8]) -> Option<Vec<&[u8]>> {
    let body_len = payload.len().checked_sub(20)?;
    let (body, sum) = payload.split_at(body_len);
    if Sha1::digest(body).as_slice() != sum {
        return None;
    }
    let mut rest = body.strip_prefix(DUMP_MAGIC)?;
    let mut codes = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_at_checked(8)?;
        let len = usize::try_from(u64::from_le_bytes(len.try_into().ok()?)).ok()?;
        let (code, tail) = tail.split_at_checked(len)?;
        codes.push(code);
        rest = tail;
    }
    Some(codes)
}
