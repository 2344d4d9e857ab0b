//! Values crossing between Redis and Lua, with Redis 7's conversion rules.
//!
//! - [`reply_to_lua`]: a command's RESP2/RESP3 reply, as the script's `redis.call` returns it
//!   (status → `{ok=…}`, error → `{err=…}`, integer → number, bulk → string, RESP2 null →
//!   `false`, RESP3 null → `nil`, double → `{double=…}`, map → `{map={…}}`, set →
//!   `{set={…}}`, big number → `{big_number=…}`, verbatim → `{verbatim_string={…}}`);
//! - [`lua_to_reply`]: the script's return value, written for the caller's protocol (number
//!   → integer, string → bulk, table → array up to its first nil, or the reply a `{ok}`,
//!   `{err}`, `{double}`, `{map}`, `{set}`, `{big_number}` or `{verbatim_string}` table
//!   stands for; booleans as RESP2 `1`/null unless the script chose RESP3).
//!
//! Both are bounded: nesting deeper than [`MAX_DEPTH`] is refused, not recursed into.

use crate::numfmt::format_g;
use meridian_redis::Reply;
use mlua::{Lua, Table, Value};

/// How deep replies and returned tables may nest: deep enough for any reply, shallow enough
/// for a thread's stack (a table that contains itself stops here).
pub const MAX_DEPTH: usize = 200;

/// A reply that is not valid RESP (never produced by the node's own commands).
#[derive(Debug)]
pub struct Malformed;

/// Converts one complete reply in `bytes` to a Lua value.
pub fn reply_to_lua(lua: &Lua, bytes: &[u8]) -> mlua::Result<Value> {
    let mut parser = Parser { lua, bytes, pos: 0 };
    parser
        .value(0)
        .map_err(|Malformed| mlua::Error::runtime("malformed reply from a command"))
}

struct Parser<'a> {
    lua: &'a Lua,
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn line(&mut self) -> Result<&[u8], Malformed> {
        let rest = &self.bytes[self.pos..];
        let end = memchr_crlf(rest).ok_or(Malformed)?;
        self.pos += end + 2;
        Ok(&rest[..end])
    }

    fn int_line(&mut self) -> Result<i64, Malformed> {
        let line = self.line()?;
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(Malformed)
    }

    fn blob(&mut self) -> Result<Option<&[u8]>, Malformed> {
        let len = self.int_line()?;
        if len < 0 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| Malformed)?;
        let end = self.pos.checked_add(len).ok_or(Malformed)?;
        if end.checked_add(2).is_none_or(|e| e > self.bytes.len()) {
            return Err(Malformed);
        }
        let b = &self.bytes[self.pos..end];
        self.pos = end + 2;
        Ok(Some(b))
    }

    fn value(&mut self, depth: usize) -> Result<Value, Malformed> {
        if depth > MAX_DEPTH || self.pos >= self.bytes.len() {
            return Err(Malformed);
        }
        let kind = self.bytes[self.pos];
        self.pos += 1;
        let lua = self.lua;
        let v = match kind {
            b'+' => {
                let s = self.line()?.to_vec();
                self.field_table("ok", Value::String(str_of(lua, &s)?))?
            }
            b'-' => {
                let s = self.line()?.to_vec();
                self.field_table("err", Value::String(str_of(lua, &s)?))?
            }
            b':' => Value::Number(self.int_line()? as f64),
            b'$' => match self.blob()? {
                Some(b) => Value::String(str_of(lua, b)?),
                None => Value::Boolean(false),
            },
            b'*' | b'~' | b'>' => self.aggregate(kind, depth)?,
            b'%' => self.map(depth)?,
            b'_' => {
                self.line()?;
                Value::Nil
            }
            b'#' => Value::Boolean(self.line()? == b"t"),
            b',' => {
                let line = self.line()?;
                let d = parse_double(line).ok_or(Malformed)?;
                self.field_table("double", Value::Number(d))?
            }
            b'(' => {
                let s = self.line()?.to_vec();
                self.field_table("big_number", Value::String(str_of(lua, &s)?))?
            }
            b'=' => self.verbatim()?,
            b'|' => {
                // Attributes carry nothing a script sees: skip them, read what follows.
                self.map(depth)?;
                self.value(depth)?
            }
            _ => return Err(Malformed),
        };
        Ok(v)
    }

    fn aggregate(&mut self, kind: u8, depth: usize) -> Result<Value, Malformed> {
        let n = self.int_line()?;
        if n < 0 {
            return Ok(Value::Boolean(false));
        }
        // No table sized by a count before the elements are there.
        let t = self.lua.create_table().map_err(|_| Malformed)?;
        for i in 1..=n {
            let v = self.value(depth + 1)?;
            if kind == b'~' {
                t.raw_set(v, true).map_err(|_| Malformed)?;
            } else {
                t.raw_set(i, v).map_err(|_| Malformed)?;
            }
        }
        if kind == b'~' {
            return self.field_table("set", Value::Table(t));
        }
        Ok(Value::Table(t))
    }

    fn map(&mut self, depth: usize) -> Result<Value, Malformed> {
        let n = self.int_line()?;
        let t = self.lua.create_table().map_err(|_| Malformed)?;
        for _ in 0..n.max(0) {
            let k = self.value(depth + 1)?;
            let v = self.value(depth + 1)?;
            if !k.is_nil() {
                t.raw_set(k, v).map_err(|_| Malformed)?;
            }
        }
        self.field_table("map", Value::Table(t))
    }

    fn verbatim(&mut self) -> Result<Value, Malformed> {
        let b = self.blob()?.ok_or(Malformed)?.to_vec();
        if b.len() < 4 || b[3] != b':' {
            return Err(Malformed);
        }
        let lua = self.lua;
        let inner = lua.create_table().map_err(|_| Malformed)?;
        inner
            .raw_set("format", str_of(lua, &b[..3])?)
            .map_err(|_| Malformed)?;
        inner
            .raw_set("string", str_of(lua, &b[4..])?)
            .map_err(|_| Malformed)?;
        self.field_table("verbatim_string", Value::Table(inner))
    }

    fn field_table(&self, field: &str, v: Value) -> Result<Value, Malformed> {
        let t = self.lua.create_table().map_err(|_| Malformed)?;
        t.raw_set(field, v).map_err(|_| Malformed)?;
        Ok(Value::Table(t))
    }
}

fn str_of(lua: &Lua, b: &[u8]) -> Result<mlua::LuaString, Malformed> {
    lua.create_string(b).map_err(|_| Malformed)
}

fn memchr_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

fn parse_double(line: &[u8]) -> Option<f64> {
    match line {
        b"inf" => Some(f64::INFINITY),
        b"-inf" => Some(f64::NEG_INFINITY),
        b"nan" => Some(f64::NAN),
        _ => std::str::from_utf8(line).ok()?.parse().ok(),
    }
}

/// How the script's return value is written.
#[derive(Clone, Copy, Debug)]
pub struct ReturnProtocol {
    /// Whether the script chose RESP3 (`redis.setresp(3)`): booleans stay booleans.
    pub script_resp3: bool,
}

/// Writes the script's return value `v` to `reply` (in the caller's protocol).
pub fn lua_to_reply(v: &Value, proto: ReturnProtocol, reply: &mut Reply) {
    write_value(v, proto, reply, 0);
}

fn write_value(v: &Value, proto: ReturnProtocol, reply: &mut Reply, depth: usize) {
    if depth > MAX_DEPTH {
        reply.error("ERR reached lua stack limit");
        return;
    }
    match v {
        Value::String(s) => reply.bulk(&s.as_bytes()),
        Value::Boolean(b) if !proto.script_resp3 => {
            if *b {
                reply.int(1)
            } else {
                reply.null()
            }
        }
        Value::Boolean(b) => write_bool(reply, *b),
        Value::Integer(i) => reply.int(*i),
        Value::Number(n) => reply.int(saturating_i64(*n)),
        Value::Table(t) => write_table(t, proto, reply, depth),
        _ => reply.null(),
    }
}

/// `(long long)` of a Lua number, saturating where C's cast would be undefined.
fn saturating_i64(n: f64) -> i64 {
    n as i64
}

fn write_bool(reply: &mut Reply, b: bool) {
    if reply.resp3 {
        reply
            .out
            .extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
    } else {
        reply.int(i64::from(b));
    }
}

fn write_table(t: &Table, proto: ReturnProtocol, reply: &mut Reply, depth: usize) {
    let field = |name: &str| t.raw_get::<Value>(name).unwrap_or(Value::Nil);
    if let Value::String(e) = field("err") {
        reply.error(&one_line(&e.as_bytes()));
        return;
    }
    if let Value::String(s) = field("ok") {
        reply.simple(one_line(&s.as_bytes()).as_bytes());
        return;
    }
    if let Value::Number(d) = field("double") {
        reply.double(d);
        return;
    }
    if let Value::Integer(d) = field("double") {
        reply.double(d as f64);
        return;
    }
    if let Value::String(s) = field("big_number") {
        write_big_number(reply, one_line(&s.as_bytes()).as_bytes());
        return;
    }
    if let Value::Table(v) = field("verbatim_string")
        && let (Ok(Value::String(f)), Ok(Value::String(s))) =
            (v.raw_get::<Value>("format"), v.raw_get::<Value>("string"))
    {
        write_verbatim(reply, &f.as_bytes(), &s.as_bytes());
        return;
    }
    // Elements are written one at a time: the interpreter can hold only so many values for
    // Rust at once, and a script may return a table of millions.
    if let Value::Table(m) = field("map") {
        reply.map(m.pairs::<Value, Value>().count());
        for (k, v) in m.pairs::<Value, Value>().flatten() {
            write_value(&k, proto, reply, depth + 1);
            write_value(&v, proto, reply, depth + 1);
        }
        return;
    }
    if let Value::Table(s) = field("set") {
        reply.set(s.pairs::<Value, Value>().count());
        for (k, _) in s.pairs::<Value, Value>().flatten() {
            write_value(&k, proto, reply, depth + 1);
        }
        return;
    }
    let present = |i: usize| !matches!(t.raw_get::<Value>(i), Ok(Value::Nil) | Err(_));
    let len = (1..).take_while(|&i| present(i)).count();
    reply.array(len);
    for i in 1..=len {
        let v = t.raw_get::<Value>(i).unwrap_or(Value::Nil);
        write_value(&v, proto, reply, depth + 1);
    }
}

/// An error or status line as Redis writes it: CR and LF become spaces.
fn one_line(b: &[u8]) -> String {
    String::from_utf8_lossy(b).replace(['\r', '\n'], " ")
}

fn write_big_number(reply: &mut Reply, digits: &[u8]) {
    if reply.resp3 {
        reply.out.extend_from_slice(b"(");
        reply.out.extend_from_slice(digits);
        reply.out.extend_from_slice(b"\r\n");
    } else {
        reply.bulk(digits);
    }
}

fn write_verbatim(reply: &mut Reply, format: &[u8], text: &[u8]) {
    match <&[u8; 3]>::try_from(format) {
        Ok(f) => reply.verbatim(f, text),
        Err(_) => reply.bulk(text),
    }
}

/// A Lua number as a command argument: `%.17g`, as Redis formats it.
pub fn number_arg(n: f64) -> String {
    format_g(n, 17)
}

/// A Lua number as Lua's `tostring` prints it (`%.14g`).
pub fn lua_number_string(n: f64) -> String {
    format_g(n, 14)
}
