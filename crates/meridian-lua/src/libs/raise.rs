//! The calling convention of the `bit`, `cjson`, `cmsgpack` and `struct` libraries: how a
//! library function written in Rust receives its arguments, returns its results and raises
//! errors the way a C library of Redis's Lua does. Every function of the four libraries that
//! can fail (all but `cjson.new`) is made by [`raising_function`]: a Rust callback behind a
//! small Lua shim ([`RAISE_SHIM`]), defined here once for all of them.
//!
//! Guarantees, whatever the script passes:
//!
//! - **Errors are plain strings.** A [`Fault`] is raised in Lua by `error(message, 0)`, as
//!   `luaL_error` raises it: the message alone, no position prefix, so a script's `pcall` sees
//!   what it sees on Redis. Argument errors are worded as `luaL_argerror` words them ("bad
//!   argument #n to 'f' (message)"). Messages are bytes, not UTF-8: they may quote the
//!   script's input raw. (An mlua callback error would reach the script as an opaque
//!   userdata; only failures of the interpreter itself, such as running out of memory, pass
//!   through as mlua errors.)
//! - **Bounded mlua references.** Arguments arrive in Rust as `(count, {...})` and results
//!   leave as `(true, count, {...})`, each argument being fetched from its table only when
//!   read, so however many values pass, the Rust side holds a few mlua references (Lua 5.1
//!   leaves mlua about 8000 for the whole interpreter). An argument list is only bounded by
//!   Lua's own stack; results return through Lua's `unpack`, whose own three arguments take
//!   stack slots, so a call can return at most 7997 values (LUAI_MAXCSTACK less 3).
//! - **Scripts cannot interfere.** `error`, `select` and `unpack` are captured when a function
//!   is made (when its library opens, or `cjson.new` runs), so redefining them later changes
//!   nothing.

use mlua::{BString, Function, Lua, MaybeSend, Table, Value};

/// Why a library function fails.
pub(super) enum Fault {
    /// `luaL_error`: the message alone.
    Plain(BString),
    /// `luaL_argerror`: "bad argument #n to 'f' (message)", `f` being the function's name.
    Arg(usize, BString),
    /// A failure of mlua itself (out of memory): passed on as mlua reports it.
    Lua(mlua::Error),
}

impl From<mlua::Error> for Fault {
    fn from(err: mlua::Error) -> Self {
        Fault::Lua(err)
    }
}

impl Fault {
    /// `luaL_error(message)`.
    pub(super) fn plain(msg: impl Into<BString>) -> Self {
        Fault::Plain(msg.into())
    }

    /// `luaL_argerror(pos, message)`.
    pub(super) fn arg(pos: usize, msg: impl Into<BString>) -> Self {
        Fault::Arg(pos, msg.into())
    }

    /// The message Lua's `error` receives, `func` being the function's name.
    fn into_message(self, func: &str) -> mlua::Result<Vec<u8>> {
        match self {
            Fault::Plain(msg) => Ok(msg.into()),
            Fault::Arg(pos, msg) => {
                let mut full = format!("bad argument #{pos} to '{func}' (").into_bytes();
                full.extend_from_slice(&msg);
                full.push(b')');
                Ok(full)
            }
            Fault::Lua(err) => Err(err),
        }
    }
}

/// A library function: arguments in, results (or why not) out.
pub(super) type LibFn = fn(&Lua, &Args) -> Result<Results, Fault>;

/// Lua side of [`raising_function`]: calls the Rust callback `raw` with `(count, {...})`,
/// returns the `count` values of `(true, count, {...})` and turns `(false, message)` into
/// `error(message, 0)`. `error`, `select` and `unpack` are captured when it runs, once per
/// function made.
const RAISE_SHIM: &str = "
local raw, error, select, unpack = ..., error, select, unpack
local function finish(ok, n, t)
    if not ok then error(n, 0) end
    return unpack(t, 1, n)
end
return function(...) return finish(raw(select('#', ...), {...})) end
";

/// Wraps `body` as the Lua function `<library>.<name>` (the name its argument errors give,
/// and its chunk name).
pub(super) fn raising_function<F>(
    lua: &Lua,
    library: &str,
    name: &'static str,
    body: F,
) -> mlua::Result<Function>
where
    F: Fn(&Lua, &Args) -> Result<Results, Fault> + MaybeSend + 'static,
{
    let raw = lua.create_function(move |lua, (count, values): (usize, Table)| {
        Ok(match body(lua, &Args { count, values }) {
            Ok(results) => (
                true,
                Value::Number(results.len as f64),
                Some(results.values),
            ),
            Err(fault) => {
                let msg = lua.create_string(fault.into_message(name)?)?;
                (false, Value::String(msg), None)
            }
        })
    })?;
    lua.load(RAISE_SHIM)
        .set_name(format!("={library}.{name}"))
        .call(raw)
}

/// The arguments of a call: how many, and a table holding them (nil ones leave holes).
pub(super) struct Args {
    count: usize,
    values: Table,
}

impl Args {
    /// How many arguments were passed, trailing nils included.
    pub(super) fn len(&self) -> usize {
        self.count
    }

    pub(super) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Argument `pos` (1-based), `None` past the last.
    pub(super) fn get(&self, pos: usize) -> mlua::Result<Option<Value>> {
        if pos > self.count {
            return Ok(None);
        }
        self.values.raw_get(pos).map(Some)
    }

    /// Lua's name for argument `pos`'s type, as `luaL_typerror` words it.
    fn type_name(&self, pos: usize) -> mlua::Result<&'static str> {
        Ok(self.get(pos)?.as_ref().map_or("no value", lua_type_name))
    }

    /// `luaL_typerror`: "bad argument #pos to 'f' (<expected> expected, got <type>)".
    pub(super) fn type_error(&self, pos: usize, expected: &str) -> Fault {
        match self.type_name(pos) {
            Ok(got) => Fault::arg(pos, format!("{expected} expected, got {got}")),
            Err(err) => Fault::Lua(err),
        }
    }

    /// `luaL_checklstring`: a string, or a number in Lua's string form.
    pub(super) fn string(&self, lua: &Lua, pos: usize) -> Result<mlua::LuaString, Fault> {
        let string = match self.get(pos)? {
            Some(Value::String(s)) => Some(s),
            Some(v @ (Value::Integer(_) | Value::Number(_))) => lua.coerce_string(v)?,
            _ => None,
        };
        string.ok_or_else(|| self.type_error(pos, "string"))
    }

    /// `luaL_checknumber`: a number, or a string Lua reads as one (`lua_tonumber`).
    pub(super) fn number(&self, lua: &Lua, pos: usize) -> Result<f64, Fault> {
        let number = match self.get(pos)? {
            Some(value) => to_number(lua, value)?,
            None => None,
        };
        number.ok_or_else(|| self.type_error(pos, "number"))
    }

    /// `luaL_checkinteger`: a number (or numeric string) truncated toward zero.
    pub(super) fn integer(&self, lua: &Lua, pos: usize) -> Result<i64, Fault> {
        // `as` saturates out-of-range values where the C cast is undefined.
        Ok(self.number(lua, pos)? as i64)
    }

    /// `luaL_optinteger`: `default` when absent or nil, else [`Args::integer`].
    pub(super) fn opt_integer(&self, lua: &Lua, pos: usize, default: i64) -> Result<i64, Fault> {
        match self.get(pos)? {
            None | Some(Value::Nil) => Ok(default),
            Some(_) => self.integer(lua, pos),
        }
    }
}

/// The results of a call, in a table (nil results leave holes, counted by `len`).
pub(super) struct Results {
    pub(super) values: Table,
    pub(super) len: usize,
}

impl Results {
    pub(super) fn new(lua: &Lua) -> mlua::Result<Self> {
        Ok(Results {
            values: lua.create_table()?,
            len: 0,
        })
    }

    /// `values`, in order.
    pub(super) fn from_values(
        lua: &Lua,
        values: impl IntoIterator<Item = Value>,
    ) -> mlua::Result<Self> {
        let mut results = Results::new(lua)?;
        for value in values {
            results.push(value)?;
        }
        Ok(results)
    }

    pub(super) fn push(&mut self, value: Value) -> mlua::Result<()> {
        self.len += 1;
        self.values.raw_set(self.len, value)
    }

    /// Removes and returns the last result.
    pub(super) fn pop(&mut self) -> mlua::Result<Option<Value>> {
        if self.len == 0 {
            return Ok(None);
        }
        let last = self.values.raw_get(self.len)?;
        self.values.raw_set(self.len, Value::Nil)?;
        self.len -= 1;
        Ok(Some(last))
    }
}

/// `lua_tonumber`: numbers, and strings Lua reads as numbers.
pub(super) fn to_number(lua: &Lua, value: Value) -> mlua::Result<Option<f64>> {
    Ok(match value {
        // mlua reports Lua 5.1's integral numbers as `Integer`s; they came from a double.
        Value::Integer(i) => Some(i as f64),
        Value::Number(n) => Some(n),
        v @ Value::String(_) => lua.coerce_number(v)?,
        _ => None,
    })
}

/// The name Lua 5.1's `type()` gives a value (mlua's names differ for light userdata).
pub(super) fn lua_type_name(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    }
}
