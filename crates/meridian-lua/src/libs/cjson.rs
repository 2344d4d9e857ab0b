//! The `cjson` library: lua-cjson 2.1.0's JSON encoder and decoder, as Redis 7.0 bundles it
//! (`cjson.encode`, `cjson.decode`, `cjson.null`, `cjson.new` and the configuration functions
//! `encode_sparse_array`, `encode_max_depth`, `decode_max_depth`, `encode_number_precision`,
//! `encode_keep_buffer`, `encode_invalid_numbers`, `decode_invalid_numbers`).
//!
//! What it guarantees, as lua-cjson does:
//! - **Encoding.** A table whose keys are all positive integers becomes an array of its
//!   largest key's length (holes are `null`) unless it is "excessively sparse" by the
//!   `encode_sparse_array` rules; any other table becomes an object whose number keys are
//!   written as strings, in `next` order; an empty table is `{}`. Strings are written byte for
//!   byte (Lua strings are not UTF-8), escaping `"`, `\`, `/`, control characters and DEL.
//!   Numbers are written as C's `%.14g` (the precision is configurable). `nil` and
//!   `cjson.null` are `null`.
//! - **Decoding.** `null` is `cjson.null` (a NULL light userdata), arrays are tables `1..n`,
//!   objects are tables with string keys, numbers are read as C's `strtod` reads them
//!   (including, with `decode_invalid_numbers` on, the default, hex, `Infinity` and `NaN`),
//!   `\uXXXX` escapes (surrogate pairs too) become UTF-8, and other bytes pass through. As in
//!   C, the text ends at its first NUL byte.
//! - **Errors** carry lua-cjson's messages ("Cannot serialise function: type not supported",
//!   "Expected value but found invalid token at character 1", ...) and are raised as plain Lua
//!   strings, so a script's `pcall` sees what it sees on Redis.
//! - **Configuration** functions take and return lua-cjson's values, with its defaults: sparse
//!   arrays `(false, 2, 10)`, both maximum depths 1000, precision 14, keep buffer on,
//!   encoding invalid numbers off, decoding them on. Each module table (`cjson.new()` makes
//!   another) has its own settings.
//!
//! Hostile input cannot panic the node, recurse without bound or exhaust memory unnoticed:
//! both directions walk nested data with explicit stacks rather than recursion, never nest
//! deeper than [`DEPTH_CEILING`] whatever the configured maximum, and `encode` stops at
//! [`MAX_OUTPUT`] bytes. Those two limits are where this module knowingly differs from
//! lua-cjson (whose own ceiling is Lua's C stack, about 4000 to 8000 levels, and which has no
//! output limit). A table whose largest integer key is beyond C's `int` encodes as an object
//! (C's conversion is undefined there).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use mlua::{Function, LightUserData, Lua, MultiValue, Table, Value};

use super::raise::{Args, Fault, Results, lua_type_name, raising_function};
use crate::numfmt::format_g;

/// The deepest nesting `encode` and `decode` accept, whatever the configured maximum. Each
/// level holds one `mlua` reference to its table, and `mlua` cannot hold more than about 8000
/// at a time under Lua 5.1 (running out panics), so the walk stays well below that.
const DEPTH_CEILING: usize = 3000;

/// The longest text `encode` produces: Redis's default `proto-max-bulk-len`, the largest
/// string a client could be sent anyway. Without it a sparse-array setting (`ratio` 0) or a
/// table reachable many times over would let one call allocate without bound.
const MAX_OUTPUT: usize = 512 * 1024 * 1024;

/// Installs the library as a global table.
pub(crate) fn open(lua: &mlua::Lua) -> mlua::Result<()> {
    let module = module_table(lua)?;
    lua.globals().raw_set("cjson", module)
}

// ===== Module and calling convention =====

/// The body of a `cjson` function.
type CjsonFn = fn(&Call<'_>) -> Result<MultiValue, Fault>;

/// Everything a `cjson` function sees of its call.
struct Call<'a> {
    lua: &'a Lua,
    config: &'a Mutex<Config>,
    args: &'a Args,
}

impl Call<'_> {
    /// Argument `pos` (1-based), `nil` when absent (lua-cjson pads with nils).
    fn arg(&self, pos: usize) -> mlua::Result<Value> {
        Ok(self.args.get(pos)?.unwrap_or(Value::Nil))
    }

    /// This module table's settings. A poisoned lock only means a panic elsewhere; the
    /// settings themselves are always valid.
    fn config(&self) -> MutexGuard<'_, Config> {
        self.config.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Builds a module table with its own settings (what `luaopen_cjson` and `cjson.new` return).
fn module_table(lua: &Lua) -> mlua::Result<Table> {
    const FUNCTIONS: [(&str, CjsonFn); 9] = [
        ("encode", encode),
        ("decode", decode),
        ("encode_sparse_array", encode_sparse_array),
        ("encode_max_depth", encode_max_depth),
        ("decode_max_depth", decode_max_depth),
        ("encode_number_precision", encode_number_precision),
        ("encode_keep_buffer", encode_keep_buffer),
        ("encode_invalid_numbers", encode_invalid_numbers),
        ("decode_invalid_numbers", decode_invalid_numbers),
    ];
    let config = Arc::new(Mutex::new(Config::default()));
    let module = lua.create_table_with_capacity(0, FUNCTIONS.len() + 4)?;
    for (name, body) in FUNCTIONS {
        let config = Arc::clone(&config);
        let function: Function = raising_function(lua, "cjson", name, move |lua, args| {
            let call = Call {
                lua,
                config: &config,
                args,
            };
            Ok(Results::from_values(lua, body(&call)?)?)
        })?;
        module.raw_set(name, function)?;
    }
    let new = lua.create_function(|lua, ()| module_table(lua))?;
    module.raw_set("new", new)?;
    module.raw_set("null", null())?;
    module.raw_set("_NAME", "cjson")?;
    module.raw_set("_VERSION", "2.1.0")?;
    Ok(module)
}

/// `cjson.null`: the NULL light userdata that stands for JSON `null` inside tables.
fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

/// One result value.
fn one(value: Value) -> MultiValue {
    MultiValue::from_vec(vec![value])
}

// ===== Configuration =====

/// How `encode` treats NaN and the infinities (`encode_invalid_numbers`' three choices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InvalidNumbers {
    /// Raise "must not be NaN or Inf" (`false` / "off", the default).
    Refuse,
    /// Write `nan`, `inf` or `-inf`, which is not JSON (`true` / "on").
    Write,
    /// Write `null` ("null").
    AsNull,
}

/// One module table's settings, with lua-cjson's defaults.
#[derive(Clone, Copy, Debug)]
struct Config {
    sparse_convert: bool,
    sparse_ratio: i32,
    sparse_safe: i32,
    encode_max_depth: i32,
    decode_max_depth: i32,
    number_precision: i32,
    /// Only reported back: buffer reuse is a C allocation detail with no visible effect.
    keep_buffer: bool,
    encode_invalid_numbers: InvalidNumbers,
    decode_invalid_numbers: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            number_precision: 14,
            keep_buffer: true,
            encode_invalid_numbers: InvalidNumbers::Refuse,
            decode_invalid_numbers: true,
        }
    }
}

/// The choices of an on/off setting, in lua-cjson's order (the index is the setting).
const OFF_ON: &[&str] = &["off", "on"];

/// Rejects calls with more than `max` arguments, as lua-cjson's configuration functions do.
fn check_arg_count(call: &Call<'_>, max: usize) -> Result<(), Fault> {
    if call.args.len() > max {
        return Err(Fault::arg(max + 1, "found too many arguments"));
    }
    Ok(())
}

/// Applies argument `pos` (1-based) of an integer setting: `nil` keeps `current`, any other
/// value must be a number (or numeric string) whose integer part is within `[min, max]`.
/// Returns the new setting.
fn integer_option(
    call: &Call<'_>,
    pos: usize,
    current: i32,
    (min, max): (i32, i32),
) -> Result<i32, Fault> {
    if call.arg(pos)?.is_nil() {
        return Ok(current);
    }
    let setting = c_int_of(call.args.number(call.lua, pos)?);
    if !(min..=max).contains(&setting) {
        // lua-cjson names argument #1 here whichever argument it is.
        let detail = format!("expected integer between {min} and {max}");
        return Err(Fault::arg(1, detail));
    }
    Ok(setting)
}

/// What C's `(int)(ptrdiff_t)number` gives on x86-64: truncation toward zero, the
/// out-of-range value `INT64_MIN`, then the low 32 bits.
fn c_int_of(number: f64) -> i32 {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    let wide = if number.abs() < TWO_POW_63 {
        number as i64
    } else {
        i64::MIN
    };
    // Keeping the low 32 bits is the point.
    wide as i32
}

/// Applies argument `pos` (1-based) of a setting chosen among `choices`: `nil` keeps
/// `current`, a boolean picks choice 0 or 1, a string must name a choice. Returns the index
/// of the new choice.
fn choice_option(
    call: &Call<'_>,
    pos: usize,
    current: usize,
    choices: &[&str],
) -> Result<usize, Fault> {
    let name = match call.arg(pos)? {
        Value::Nil => return Ok(current),
        Value::Boolean(on) => return Ok(usize::from(on)),
        // `luaL_checkoption` reads numbers as their string form, which never names a choice.
        _ => call.args.string(call.lua, pos)?,
    };
    match choices
        .iter()
        .position(|choice| choice.as_bytes() == &*name.as_bytes())
    {
        Some(choice) => Ok(choice),
        None => {
            let mut message = b"invalid option '".to_vec();
            message.extend_from_slice(&name.as_bytes());
            message.push(b'\'');
            Err(Fault::arg(pos, message))
        }
    }
}

/// How a choice setting reads back: `false`/`true` for the first two, the name otherwise.
fn choice_value(lua: &Lua, choice: usize, choices: &[&str]) -> mlua::Result<Value> {
    match choice {
        0 | 1 => Ok(Value::Boolean(choice == 1)),
        _ => Ok(Value::String(lua.create_string(choices[choice])?)),
    }
}

/// `cjson.encode_sparse_array([convert [, ratio [, safe]]])`: when an all-integer-keys table
/// with largest key `max` and `n` items is too sparse to be an array (`ratio > 0`,
/// `max > n * ratio` and `max > safe`), convert it to an object or (default) raise.
fn encode_sparse_array(call: &Call<'_>) -> Result<MultiValue, Fault> {
    check_arg_count(call, 3)?;
    let mut config = call.config();
    let range = (0, i32::MAX);
    let convert = choice_option(call, 1, usize::from(config.sparse_convert), OFF_ON)?;
    config.sparse_convert = convert == 1;
    config.sparse_ratio = integer_option(call, 2, config.sparse_ratio, range)?;
    config.sparse_safe = integer_option(call, 3, config.sparse_safe, range)?;
    Ok(MultiValue::from_vec(vec![
        Value::Boolean(config.sparse_convert),
        Value::Number(config.sparse_ratio.into()),
        Value::Number(config.sparse_safe.into()),
    ]))
}

/// Applies a single integer setting, the whole body of the depth and precision functions.
fn integer_setting(
    call: &Call<'_>,
    field: fn(&mut Config) -> &mut i32,
    range: (i32, i32),
) -> Result<MultiValue, Fault> {
    check_arg_count(call, 1)?;
    let mut config = call.config();
    let setting = field(&mut config);
    *setting = integer_option(call, 1, *setting, range)?;
    Ok(one(Value::Number((*setting).into())))
}

/// `cjson.encode_max_depth([depth])`: the deepest table nesting `encode` accepts.
fn encode_max_depth(call: &Call<'_>) -> Result<MultiValue, Fault> {
    integer_setting(call, |config| &mut config.encode_max_depth, (1, i32::MAX))
}

/// `cjson.decode_max_depth([depth])`: the deepest array/object nesting `decode` accepts.
fn decode_max_depth(call: &Call<'_>) -> Result<MultiValue, Fault> {
    integer_setting(call, |config| &mut config.decode_max_depth, (1, i32::MAX))
}

/// `cjson.encode_number_precision([digits])`: significant digits written (1 to 14).
fn encode_number_precision(call: &Call<'_>) -> Result<MultiValue, Fault> {
    integer_setting(call, |config| &mut config.number_precision, (1, 14))
}

/// `cjson.encode_keep_buffer([keep])`: accepted and reported; it changes nothing visible.
fn encode_keep_buffer(call: &Call<'_>) -> Result<MultiValue, Fault> {
    check_arg_count(call, 1)?;
    let mut config = call.config();
    config.keep_buffer = choice_option(call, 1, usize::from(config.keep_buffer), OFF_ON)? == 1;
    Ok(one(Value::Boolean(config.keep_buffer)))
}

/// `cjson.encode_invalid_numbers([setting])`: `false` (raise), `true` (write `nan`/`inf`) or
/// `"null"`.
fn encode_invalid_numbers(call: &Call<'_>) -> Result<MultiValue, Fault> {
    const CHOICES: &[&str] = &["off", "on", "null"];
    const SETTINGS: [InvalidNumbers; 3] = [
        InvalidNumbers::Refuse,
        InvalidNumbers::Write,
        InvalidNumbers::AsNull,
    ];
    check_arg_count(call, 1)?;
    let mut config = call.config();
    let current = SETTINGS
        .iter()
        .position(|setting| *setting == config.encode_invalid_numbers)
        .unwrap_or(0);
    let choice = choice_option(call, 1, current, CHOICES)?;
    config.encode_invalid_numbers = SETTINGS[choice];
    Ok(one(choice_value(call.lua, choice, CHOICES)?))
}

/// `cjson.decode_invalid_numbers([accept])`: whether `decode` reads hex numbers, `Infinity`,
/// `NaN`, leading zeros and a leading `+`, as C's `strtod` does (default), or rejects them.
fn decode_invalid_numbers(call: &Call<'_>) -> Result<MultiValue, Fault> {
    check_arg_count(call, 1)?;
    let mut config = call.config();
    let current = usize::from(config.decode_invalid_numbers);
    config.decode_invalid_numbers = choice_option(call, 1, current, OFF_ON)? == 1;
    Ok(one(Value::Boolean(config.decode_invalid_numbers)))
}

// ===== Encoding =====

/// `cjson.encode(value)`: the JSON text of `value`.
fn encode(call: &Call<'_>) -> Result<MultiValue, Fault> {
    if call.args.len() != 1 {
        return Err(Fault::arg(1, "expected 1 argument"));
    }
    let config = *call.config();
    let mut encoder = Encoder::new(config, MAX_OUTPUT);
    encoder.encode(call.lua, call.arg(1)?)?;
    Ok(one(Value::String(call.lua.create_string(&encoder.out)?)))
}

/// lua-cjson's message for a value it cannot encode.
fn cannot_serialise(type_name: &str, reason: &str) -> Fault {
    Fault::plain(format!("Cannot serialise {type_name}: {reason}"))
}

/// The state of one `encode` call: the text so far and the tables being written, innermost
/// last (an explicit stack, so nesting depth costs heap, not Rust stack).
struct Encoder {
    config: Config,
    /// The most bytes the text may take ([`MAX_OUTPUT`] outside tests).
    limit: usize,
    out: Vec<u8>,
    open: Vec<OpenTable>,
}

/// A table being written.
enum OpenTable {
    /// Writing members `1..=len`; `next` is the next index to write.
    Array { table: Table, next: u32, len: u32 },
    /// Writing members in the order `next` gave their keys.
    Object {
        table: Table,
        keys: std::vec::IntoIter<Key>,
        first: bool,
    },
}

/// An object key, copied out of Lua so that an open table costs no `mlua` reference per key.
enum Key {
    Number(f64),
    String(Vec<u8>),
    /// A key JSON cannot have; the name of its Lua type.
    Unsupported(&'static str),
}

impl Encoder {
    fn new(config: Config, limit: usize) -> Self {
        Encoder {
            config,
            limit,
            out: Vec::new(),
            open: Vec::new(),
        }
    }

    /// Writes `root` and everything it contains.
    fn encode(&mut self, lua: &Lua, root: Value) -> Result<(), Fault> {
        self.value(root)?;
        while let Some(member) = self.next_member(lua)? {
            self.value(member)?;
            if self.out.len() > self.limit {
                return Err(too_long(self.limit));
            }
        }
        Ok(())
    }

    /// Writes a scalar, or the opening bracket of a table (its members come from
    /// [`Encoder::next_member`]).
    fn value(&mut self, value: Value) -> Result<(), Fault> {
        match value {
            Value::Nil => self.out.extend_from_slice(b"null"),
            Value::LightUserData(pointer) if pointer.0.is_null() => {
                self.out.extend_from_slice(b"null");
            }
            Value::Boolean(true) => self.out.extend_from_slice(b"true"),
            Value::Boolean(false) => self.out.extend_from_slice(b"false"),
            Value::Integer(integer) => write_number(&mut self.out, &self.config, integer as f64)?,
            Value::Number(number) => write_number(&mut self.out, &self.config, number)?,
            Value::String(string) => write_string(&mut self.out, &string.as_bytes()),
            Value::Table(table) => self.open_table(table)?,
            other => {
                return Err(cannot_serialise(
                    lua_type_name(&other),
                    "type not supported",
                ));
            }
        }
        Ok(())
    }

    /// Starts writing `table` as an array or an object, after checking the depth.
    fn open_table(&mut self, table: Table) -> Result<(), Fault> {
        let depth = self.open.len() + 1;
        if depth > DEPTH_CEILING || depth > depth_limit(self.config.encode_max_depth) {
            return Err(Fault::plain(format!(
                "Cannot serialise, excessive nesting ({depth})"
            )));
        }
        match array_length(&table, &self.config)? {
            Some(len) => {
                // Each member takes at least two bytes: refuse hopeless sizes before looping.
                if len as usize > self.limit / 2 {
                    return Err(too_long(self.limit));
                }
                self.out.push(b'[');
                self.open.push(OpenTable::Array {
                    table,
                    next: 1,
                    len,
                });
            }
            None => {
                let keys = object_keys(&table)?.into_iter();
                self.out.push(b'{');
                self.open.push(OpenTable::Object {
                    table,
                    keys,
                    first: true,
                });
            }
        }
        Ok(())
    }

    /// Moves to the next member of the innermost open table: writes its separator (and key)
    /// and returns its value, closing every table that has no members left on the way.
    /// `None` when the whole value has been written.
    fn next_member(&mut self, lua: &Lua) -> Result<Option<Value>, Fault> {
        let Encoder {
            config, out, open, ..
        } = self;
        while let Some(innermost) = open.last_mut() {
            match innermost {
                OpenTable::Array { table, next, len } if *next <= *len => {
                    if *next > 1 {
                        out.push(b',');
                    }
                    let member = table.raw_get(*next)?;
                    *next += 1;
                    return Ok(Some(member));
                }
                OpenTable::Array { .. } => out.push(b']'),
                OpenTable::Object { table, keys, first } => {
                    if let Some(key) = keys.next() {
                        if !std::mem::take(first) {
                            out.push(b',');
                        }
                        return write_key_and_get(lua, out, config, table, key).map(Some);
                    }
                    out.push(b'}');
                }
            }
            open.pop();
        }
        Ok(None)
    }
}

/// The configured maximum depth as a count (settings are at least 1, but stay defensive).
fn depth_limit(configured: i32) -> usize {
    usize::try_from(configured).unwrap_or(0)
}

/// The error for text longer than `limit`.
fn too_long(limit: usize) -> Fault {
    Fault::plain(format!(
        "Cannot serialise, excessive output (over {limit} bytes)"
    ))
}

/// Writes an object member's key and the colon, and returns the member's value.
fn write_key_and_get(
    lua: &Lua,
    out: &mut Vec<u8>,
    config: &Config,
    table: &Table,
    key: Key,
) -> Result<Value, Fault> {
    match key {
        Key::Number(number) => {
            out.push(b'"');
            write_number(out, config, number)?;
            out.extend_from_slice(b"\":");
            Ok(table.raw_get(number)?)
        }
        Key::String(bytes) => {
            write_string(out, &bytes);
            out.push(b':');
            Ok(table.raw_get(lua.create_string(&bytes)?)?)
        }
        Key::Unsupported(type_name) => Err(cannot_serialise(
            type_name,
            "table key must be a number or string",
        )),
    }
}

/// lua-cjson's array test: `Some(max)` when every key is an integer in `1..=max` (and the
/// table is not excessively sparse), `None` for an object (including the empty table).
/// Raises for an excessively sparse array unless those convert to objects.
fn array_length(table: &Table, config: &Config) -> Result<Option<u32>, Fault> {
    let (mut max, mut items, mut array) = (0u32, 0u64, true);
    table.for_each::<Value, Value>(|key, _| {
        match (array, array_index(&key)) {
            (true, Some(index)) => {
                max = max.max(index);
                items += 1;
            }
            _ => array = false,
        }
        Ok(())
    })?;
    if !array || max == 0 {
        return Ok(None);
    }
    let ratio = u64::try_from(config.sparse_ratio).unwrap_or(0);
    let safe = u64::try_from(config.sparse_safe).unwrap_or(0);
    let max_wide = u64::from(max);
    if ratio > 0 && max_wide > items.saturating_mul(ratio) && max_wide > safe {
        if !config.sparse_convert {
            return Err(cannot_serialise("table", "excessively sparse array"));
        }
        return Ok(None);
    }
    Ok(Some(max))
}

/// A key as an array index: a whole number from 1 to C's `INT_MAX` (lua-cjson counts in an
/// `int`; beyond it its conversion is undefined, so such tables are objects here).
fn array_index(key: &Value) -> Option<u32> {
    let number = match key {
        Value::Number(number) => *number,
        Value::Integer(integer) => *integer as f64,
        _ => return None,
    };
    let whole = number.floor() == number && (1.0..=f64::from(i32::MAX)).contains(&number);
    // In range and whole, so the conversion is exact.
    whole.then_some(number as u32)
}

/// An object's keys, in the order Lua's `next` gives them (lua-cjson's member order).
fn object_keys(table: &Table) -> Result<Vec<Key>, Fault> {
    let mut keys = Vec::new();
    table.for_each::<Value, Value>(|key, _| {
        keys.push(match key {
            Value::Number(number) => Key::Number(number),
            Value::Integer(integer) => Key::Number(integer as f64),
            Value::String(string) => Key::String(string.as_bytes().to_vec()),
            other => Key::Unsupported(lua_type_name(&other)),
        });
        Ok(())
    })?;
    Ok(keys)
}

/// Writes `bytes` as a JSON string, escaping as lua-cjson does and passing every other
/// byte (UTF-8 or not) through.
fn write_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut rest = bytes;
    // Copy runs of plain bytes at once.
    while let Some(at) = rest.iter().position(|&byte| needs_escape(byte)) {
        out.extend_from_slice(&rest[..at]);
        write_escape(out, rest[at]);
        rest = &rest[at + 1..];
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

/// Whether lua-cjson escapes `byte`: quote, backslash, slash, control characters and DEL.
fn needs_escape(byte: u8) -> bool {
    matches!(byte, b'"' | b'\\' | b'/' | 0x00..=0x1f | 0x7f)
}

/// Writes lua-cjson's escape for `byte`: a short form where JSON has one, else `\u00XX`.
fn write_escape(out: &mut Vec<u8>, byte: u8) {
    let short = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        0x08 => b'b',
        b'\t' => b't',
        b'\n' => b'n',
        0x0c => b'f',
        b'\r' => b'r',
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let digits = [HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 15)]];
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&digits);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

/// Writes a number as lua-cjson does, applying the invalid-number setting.
fn write_number(out: &mut Vec<u8>, config: &Config, number: f64) -> Result<(), Fault> {
    match config.encode_invalid_numbers {
        InvalidNumbers::Refuse if !number.is_finite() => {
            return Err(cannot_serialise("number", "must not be NaN or Inf"));
        }
        // lua-cjson spells NaN itself: some C libraries print "-nan".
        InvalidNumbers::Write if number.is_nan() => out.extend_from_slice(b"nan"),
        InvalidNumbers::AsNull if !number.is_finite() => out.extend_from_slice(b"null"),
        _ => {
            // C's "%.<precision>g", exactly (the crate's shared formatter).
            let precision = usize::try_from(config.number_precision).unwrap_or(14);
            out.extend_from_slice(format_g(number, precision).as_bytes());
        }
    }
    Ok(())
}

// ===== Decoding =====

/// `cjson.decode(text)`: the Lua value of a JSON text.
fn decode(call: &Call<'_>) -> Result<MultiValue, Fault> {
    if call.args.len() != 1 {
        return Err(Fault::arg(1, "expected 1 argument"));
    }
    let config = *call.config();
    // A string, or a number in its Lua string form (`luaL_checklstring`).
    let source = call.args.string(call.lua, 1)?;
    let bytes = source.as_bytes();
    // lua-cjson's check (RFC 4627 section 3): a NUL among the first two bytes means UTF-16/32.
    if bytes.len() >= 2 && (bytes[0] == 0 || bytes[1] == 0) {
        return Err(Fault::plain(
            "JSON parser does not support UTF-16 or UTF-32",
        ));
    }
    // lua-cjson reads a C string: the text ends at the first NUL.
    let end = bytes
        .iter()
        .position(|&byte| byte == 0)
        .unwrap_or(bytes.len());
    let mut decoder = Decoder {
        lua: call.lua,
        parser: Parser::new(&bytes[..end], config.decode_invalid_numbers),
        max_depth: depth_limit(config.decode_max_depth).min(DEPTH_CEILING),
    };
    Ok(one(decoder.document()?))
}

/// The state of one `decode` call.
struct Decoder<'a> {
    lua: &'a Lua,
    parser: Parser<'a>,
    /// The configured maximum depth, capped at [`DEPTH_CEILING`].
    max_depth: usize,
}

/// An array or object being decoded.
enum Container {
    /// An array and how many members it has so far.
    Array { table: Table, len: i64 },
    /// An object and the key of the member being decoded (kept in Rust until its value is
    /// complete, so an open object costs one `mlua` reference).
    Object { table: Table, key: Vec<u8> },
}

/// What opening an array or object found.
enum Opened {
    /// It was empty (`[]` or `{}`): a finished value.
    Empty(Table),
    /// It has members: the container, and the token starting its first member's value.
    Member(Container, Token),
}

impl Container {
    /// Adds the member just decoded.
    fn store(&mut self, lua: &Lua, value: Value) -> mlua::Result<()> {
        match self {
            Container::Array { table, len } => {
                *len += 1;
                table.raw_set(*len, value)
            }
            Container::Object { table, key } => table.raw_set(lua.create_string(&*key)?, value),
        }
    }

    fn into_table(self) -> Table {
        match self {
            Container::Array { table, .. } | Container::Object { table, .. } => table,
        }
    }
}

impl Decoder<'_> {
    /// Decodes the whole text: one value, then nothing but whitespace. Nested arrays and
    /// objects are kept on an explicit stack, innermost last, so depth costs no Rust stack.
    fn document(&mut self) -> Result<Value, Fault> {
        let mut open: Vec<Container> = Vec::new();
        let mut token = self.parser.next_token();
        loop {
            // `token` starts a value.
            let mut value = match token.kind {
                TokenKind::ObjBegin | TokenKind::ArrBegin => {
                    match self.open_container(token.kind, open.len() + 1)? {
                        Opened::Empty(table) => Value::Table(table),
                        Opened::Member(container, first) => {
                            open.push(container);
                            token = first;
                            continue;
                        }
                    }
                }
                _ => self.scalar(&token)?,
            };
            // Store finished values in their containers until one expects another member.
            token = loop {
                let Some(mut innermost) = open.pop() else {
                    return self.end(value);
                };
                innermost.store(self.lua, value)?;
                if let Some(next) = self.after_member(&mut innermost)? {
                    open.push(innermost);
                    break next;
                }
                // Closed: the container is the value to store next.
                value = Value::Table(innermost.into_table());
            };
        }
    }

    /// Opens the array or object whose bracket was just read, at nesting `depth`, and reads
    /// on to its first member's value (past the first key and colon, for an object).
    fn open_container(&mut self, kind: TokenKind, depth: usize) -> Result<Opened, Fault> {
        if depth > self.max_depth {
            return Err(Fault::plain(format!(
                "Found too many nested data structures ({depth}) at character {}",
                self.parser.pos
            )));
        }
        let table = self.lua.create_table()?;
        let first = self.parser.next_token();
        let container = match (kind, first.kind) {
            (TokenKind::ObjBegin, TokenKind::ObjEnd) | (TokenKind::ArrBegin, TokenKind::ArrEnd) => {
                return Ok(Opened::Empty(table));
            }
            (TokenKind::ObjBegin, _) => Container::Object {
                table,
                key: self.object_key(&first)?,
            },
            _ => return Ok(Opened::Member(Container::Array { table, len: 0 }, first)),
        };
        Ok(Opened::Member(container, self.parser.next_token()))
    }

    /// Reads what follows a member of `container`: its closing bracket (`None`) or a comma
    /// and the token starting the next member's value (after the key, for objects).
    fn after_member(&mut self, container: &mut Container) -> Result<Option<Token>, Fault> {
        let token = self.parser.next_token();
        match (container, &token.kind) {
            (Container::Array { .. }, TokenKind::ArrEnd)
            | (Container::Object { .. }, TokenKind::ObjEnd) => Ok(None),
            (Container::Array { .. }, TokenKind::Comma) => Ok(Some(self.parser.next_token())),
            (Container::Object { key, .. }, TokenKind::Comma) => {
                let token = self.parser.next_token();
                *key = self.object_key(&token)?;
                Ok(Some(self.parser.next_token()))
            }
            (Container::Array { .. }, _) => Err(parse_error("comma or array end", &token)),
            (Container::Object { .. }, _) => Err(parse_error("comma or object end", &token)),
        }
    }

    /// Checks that `token` is an object key and reads the colon after it.
    fn object_key(&mut self, token: &Token) -> Result<Vec<u8>, Fault> {
        if token.kind != TokenKind::String {
            return Err(parse_error("object key string", token));
        }
        let key = self.parser.string.clone();
        let colon = self.parser.next_token();
        if colon.kind != TokenKind::Colon {
            return Err(parse_error("colon", &colon));
        }
        Ok(key)
    }

    /// The value of a scalar token; any other token is a syntax error.
    fn scalar(&self, token: &Token) -> Result<Value, Fault> {
        Ok(match token.kind {
            TokenKind::String => Value::String(self.lua.create_string(&self.parser.string)?),
            TokenKind::Number(number) => Value::Number(number),
            TokenKind::Boolean(boolean) => Value::Boolean(boolean),
            TokenKind::Null => null(),
            _ => return Err(parse_error("value", token)),
        })
    }

    /// Checks that nothing but whitespace follows the top-level value.
    fn end(&mut self, value: Value) -> Result<Value, Fault> {
        let token = self.parser.next_token();
        if token.kind != TokenKind::End {
            return Err(parse_error("the end", &token));
        }
        Ok(value)
    }
}

/// lua-cjson's syntax error: what was expected, what was found, and where (1-based).
fn parse_error(expected: &str, token: &Token) -> Fault {
    Fault::plain(format!(
        "Expected {expected} but found {} at character {}",
        token.kind.name(),
        token.index + 1
    ))
}

/// A JSON token.
#[derive(Clone, Copy, Debug, PartialEq)]
enum TokenKind {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    /// A string, whose decoded bytes are in [`Parser::string`].
    String,
    Number(f64),
    Boolean(bool),
    Null,
    Colon,
    Comma,
    End,
    /// Not a token: lua-cjson's description of what is wrong.
    Error(&'static str),
}

impl TokenKind {
    /// How lua-cjson names the token in syntax errors.
    fn name(&self) -> &'static str {
        match self {
            TokenKind::ObjBegin => "T_OBJ_BEGIN",
            TokenKind::ObjEnd => "T_OBJ_END",
            TokenKind::ArrBegin => "T_ARR_BEGIN",
            TokenKind::ArrEnd => "T_ARR_END",
            TokenKind::String => "T_STRING",
            TokenKind::Number(_) => "T_NUMBER",
            TokenKind::Boolean(_) => "T_BOOLEAN",
            TokenKind::Null => "T_NULL",
            TokenKind::Colon => "T_COLON",
            TokenKind::Comma => "T_COMMA",
            TokenKind::End => "T_END",
            TokenKind::Error(description) => description,
        }
    }
}

/// A token and its 0-based position: where it starts, or for an error inside a string, where
/// the error is.
#[derive(Clone, Copy, Debug)]
struct Token {
    kind: TokenKind,
    index: usize,
}

/// lua-cjson's tokenizer over a JSON text (already cut at its first NUL).
struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    /// Whether numbers JSON forbids but `strtod` reads are accepted.
    invalid_numbers: bool,
    /// The decoded bytes of the last string token.
    string: Vec<u8>,
}

impl<'a> Parser<'a> {
    fn new(text: &'a [u8], invalid_numbers: bool) -> Self {
        Parser {
            text,
            pos: 0,
            invalid_numbers,
            string: Vec::new(),
        }
    }

    /// The byte at `at`, or 0 past the end (C's terminating NUL, which ends every scan).
    fn byte(&self, at: usize) -> u8 {
        self.text.get(at).copied().unwrap_or(0)
    }

    /// Reads the next token, skipping whitespace. Errors leave the position at the error.
    fn next_token(&mut self) -> Token {
        while matches!(self.byte(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let index = self.pos;
        let single = match self.byte(index) {
            0 => Some(TokenKind::End),
            b'{' => Some(TokenKind::ObjBegin),
            b'}' => Some(TokenKind::ObjEnd),
            b'[' => Some(TokenKind::ArrBegin),
            b']' => Some(TokenKind::ArrEnd),
            b',' => Some(TokenKind::Comma),
            b':' => Some(TokenKind::Colon),
            _ => None,
        };
        if let Some(kind) = single {
            if kind != TokenKind::End {
                self.pos += 1;
            }
            return Token { kind, index };
        }
        match self.byte(index) {
            b'"' => self.string_token(),
            b'-' | b'0'..=b'9' => Token {
                kind: self.number_token(),
                index,
            },
            b't' | b'f' | b'n' | b'i' | b'I' | b'N' | b'+' => Token {
                kind: self.word_token(),
                index,
            },
            _ => Token {
                kind: TokenKind::Error("invalid token"),
                index,
            },
        }
    }

    /// A number starting with `-` or a digit.
    fn number_token(&mut self) -> TokenKind {
        if !self.invalid_numbers && self.is_invalid_number() {
            return TokenKind::Error("invalid number");
        }
        self.strtod_token()
    }

    /// `true`, `false`, `null`, or (when accepted) `Infinity`, `NaN`, `+1`...
    fn word_token(&mut self) -> TokenKind {
        let rest = &self.text[self.pos..];
        for (word, kind) in [
            (&b"true"[..], TokenKind::Boolean(true)),
            (b"false", TokenKind::Boolean(false)),
            (b"null", TokenKind::Null),
        ] {
            if rest.starts_with(word) {
                self.pos += word.len();
                return kind;
            }
        }
        if self.invalid_numbers && self.is_invalid_number() {
            return self.strtod_token();
        }
        TokenKind::Error("invalid token")
    }

    /// Reads a number as `strtod` would from the current position.
    fn strtod_token(&mut self) -> TokenKind {
        match strtod(self.text, self.pos) {
            Some((number, end)) => {
                self.pos = end;
                TokenKind::Number(number)
            }
            None => TokenKind::Error("invalid number"),
        }
    }

    /// lua-cjson's test for numbers `strtod` reads but JSON forbids: a leading `+`, hex,
    /// leading zeros, infinities and NaNs.
    fn is_invalid_number(&self) -> bool {
        let mut at = self.pos;
        match self.byte(at) {
            b'+' => return true,
            b'-' => at += 1,
            _ => {}
        }
        match self.byte(at) {
            b'0' => {
                let next = self.byte(at + 1);
                next | 0x20 == b'x' || next.is_ascii_digit()
            }
            byte if byte <= b'9' => false,
            _ => {
                starts_with_ignore_case(self.text, at, b"inf")
                    || starts_with_ignore_case(self.text, at, b"nan")
            }
        }
    }

    /// Reads a string token into [`Parser::string`], decoding escapes.
    fn string_token(&mut self) -> Token {
        self.string.clear();
        let start = self.pos;
        self.pos += 1; // the opening quote
        loop {
            // Copy the run of plain bytes at once.
            let rest = &self.text[self.pos..];
            let run = rest
                .iter()
                .position(|&byte| byte == b'"' || byte == b'\\')
                .unwrap_or(rest.len());
            self.string.extend_from_slice(&rest[..run]);
            self.pos += run;
            match self.byte(self.pos) {
                b'"' => {
                    self.pos += 1;
                    return Token {
                        kind: TokenKind::String,
                        index: start,
                    };
                }
                b'\\' => {
                    if let Err(description) = self.escape() {
                        return Token {
                            kind: TokenKind::Error(description),
                            index: self.pos,
                        };
                    }
                }
                _ => {
                    return Token {
                        kind: TokenKind::Error("unexpected end of string"),
                        index: self.pos,
                    };
                }
            }
        }
    }

    /// Decodes the escape at the current position (a backslash) and moves past it; on error
    /// the position stays at the backslash.
    fn escape(&mut self) -> Result<(), &'static str> {
        let decoded = match self.byte(self.pos + 1) {
            byte @ (b'"' | b'\\' | b'/') => byte,
            b'b' => 0x08,
            b't' => b'\t',
            b'n' => b'\n',
            b'f' => 0x0c,
            b'r' => b'\r',
            b'u' => return self.unicode_escape(),
            _ => return Err("invalid escape code"),
        };
        self.string.push(decoded);
        self.pos += 2;
        Ok(())
    }

    /// Decodes `\uXXXX`, or a `\uD8XX\uDCXX` surrogate pair, to UTF-8.
    fn unicode_escape(&mut self) -> Result<(), &'static str> {
        const INVALID: &str = "invalid unicode escape code";
        let high = self.hex4(self.pos + 2).ok_or(INVALID)?;
        let (code_point, length) = if high & 0xF800 == 0xD800 {
            // A surrogate: it must be a high one, followed by an escaped low one.
            let escaped = self.byte(self.pos + 6) == b'\\' && self.byte(self.pos + 7) == b'u';
            let low = if high & 0x400 == 0 && escaped {
                self.hex4(self.pos + 8).ok_or(INVALID)?
            } else {
                return Err(INVALID);
            };
            if low & 0xFC00 != 0xDC00 {
                return Err(INVALID);
            }
            ((((high & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000, 12)
        } else {
            (high, 6)
        };
        let character = char::from_u32(code_point).ok_or(INVALID)?;
        let mut utf8 = [0u8; 4];
        self.string
            .extend_from_slice(character.encode_utf8(&mut utf8).as_bytes());
        self.pos += length;
        Ok(())
    }

    /// Four hex digits at `at` as a number, if they are four hex digits.
    fn hex4(&self, at: usize) -> Option<u32> {
        (at..at + 4).try_fold(0, |value, i| {
            let digit = char::from(self.byte(i)).to_digit(16)?;
            Some(value << 4 | digit)
        })
    }
}

/// Whether `text[at..]` starts with `word` (lower-case ASCII), ignoring ASCII case.
fn starts_with_ignore_case(text: &[u8], at: usize, word: &[u8]) -> bool {
    text.get(at..at + word.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(word))
}

// ===== strtod =====

/// Reads a number as glibc's `strtod` does from `text[start..]` (no leading whitespace
/// there): decimal, hexadecimal (`0x1.8p3`), `inf`/`infinity` and `nan`/`nan(...)`, each with
/// an optional sign. Returns the value and where it ends, or `None` if nothing was read.
fn strtod(text: &[u8], start: usize) -> Option<(f64, usize)> {
    let (negative, at) = match text.get(start) {
        Some(b'-') => (true, start + 1),
        Some(b'+') => (false, start + 1),
        _ => (false, start),
    };
    let (magnitude, end) = special_number(text, at)
        .or_else(|| hex_number(text, at))
        .or_else(|| decimal_number(text, at))?;
    Some((if negative { -magnitude } else { magnitude }, end))
}

/// `inf`, `infinity`, `nan` or `nan(chars)`, any case.
fn special_number(text: &[u8], at: usize) -> Option<(f64, usize)> {
    if starts_with_ignore_case(text, at, b"infinity") {
        return Some((f64::INFINITY, at + 8));
    }
    if starts_with_ignore_case(text, at, b"inf") {
        return Some((f64::INFINITY, at + 3));
    }
    if !starts_with_ignore_case(text, at, b"nan") {
        return None;
    }
    // An optional "(n-char-sequence)" is part of the number only when it is closed.
    let after = at + 3;
    let mut end = after;
    if text.get(after) == Some(&b'(') {
        let chars = text[after + 1..]
            .iter()
            .take_while(|byte| byte.is_ascii_alphanumeric() || **byte == b'_')
            .count();
        if text.get(after + 1 + chars) == Some(&b')') {
            end = after + chars + 2;
        }
    }
    Some((f64::NAN, end))
}

/// The length of the run of bytes from `at` that satisfy `accept`.
fn run_length(text: &[u8], at: usize, accept: impl Fn(u8) -> bool) -> usize {
    text.get(at..).map_or(0, |rest| {
        rest.iter().take_while(|&&byte| accept(byte)).count()
    })
}

/// The length of an exponent (`e`/`p` marker, sign, digits) at `at`, or 0 if there is no
/// complete one (then `strtod` leaves the marker unread).
fn exponent_length(text: &[u8], at: usize, marker: u8) -> usize {
    if text.get(at).map(|byte| byte | 0x20) != Some(marker) {
        return 0;
    }
    let sign = usize::from(matches!(text.get(at + 1), Some(b'+' | b'-')));
    let digits = run_length(text, at + 1 + sign, |byte| byte.is_ascii_digit());
    if digits == 0 { 0 } else { 1 + sign + digits }
}

/// A decimal number: digits with an optional fraction (at least one digit in all) and an
/// optional exponent. Rust's parser rounds exactly, as glibc does.
fn decimal_number(text: &[u8], at: usize) -> Option<(f64, usize)> {
    let whole = run_length(text, at, |byte| byte.is_ascii_digit());
    let mut end = at + whole;
    let mut digits = whole;
    if text.get(end) == Some(&b'.') {
        let fraction = run_length(text, end + 1, |byte| byte.is_ascii_digit());
        digits += fraction;
        end += 1 + fraction;
    }
    if digits == 0 {
        return None;
    }
    end += exponent_length(text, end, b'e');
    // Only ASCII digits, '.', 'e', '+' and '-' were taken.
    let literal = std::str::from_utf8(&text[at..end]).ok()?;
    Some((literal.parse().ok()?, end))
}

/// A hexadecimal number: `0x`, hex digits with an optional fraction (at least one digit in
/// all) and an optional binary exponent `p[+-]digits`. Without digits after `0x`, `strtod`
/// reads just the `0`, which [`decimal_number`] then does.
fn hex_number(text: &[u8], at: usize) -> Option<(f64, usize)> {
    if text.get(at) != Some(&b'0') || text.get(at + 1).map(|byte| byte | 0x20) != Some(b'x') {
        return None;
    }
    let mut mantissa = HexMantissa::default();
    let mut end = at + 2;
    end += mantissa.push_digits(text, end, false);
    if text.get(end) == Some(&b'.') {
        end += 1 + mantissa.push_digits(text, end + 1, true);
    }
    if !mantissa.any_digit {
        return None;
    }
    let exponent_len = exponent_length(text, end, b'p');
    let exponent = parse_exponent(&text[end..end + exponent_len]);
    Some((mantissa.value(exponent), end + exponent_len))
}

/// The value of a `p` exponent (marker, sign, digits), saturated far beyond any double's
/// range; 0 when there is none.
fn parse_exponent(exponent: &[u8]) -> i64 {
    const SATURATED: i64 = 1 << 40;
    let Some((_, signed)) = exponent.split_first() else {
        return 0;
    };
    let (negative, digits) = match signed.split_first() {
        Some((b'-', digits)) => (true, digits),
        Some((b'+', digits)) => (false, digits),
        _ => (false, signed),
    };
    let magnitude = digits.iter().fold(0i64, |value, digit| {
        (value * 10 + i64::from(digit - b'0')).min(SATURATED)
    });
    if negative { -magnitude } else { magnitude }
}

/// The significant digits of a hex float: the first 16 significant hex digits (64 bits) and
/// whether any later digit is non-zero, with the binary exponent that scales them.
#[derive(Default)]
struct HexMantissa {
    bits: u64,
    sticky: bool,
    /// The value is `bits * 2^shift` (before the `p` exponent and the sticky bit).
    shift: i64,
    kept: u32,
    any_digit: bool,
}

impl HexMantissa {
    /// Takes the hex digits at `at` (fraction digits when `fraction`); returns how many.
    fn push_digits(&mut self, text: &[u8], at: usize, fraction: bool) -> usize {
        let count = run_length(text, at, |byte| byte.is_ascii_hexdigit());
        for &byte in &text[at..at + count] {
            let digit = u64::from(char::from(byte).to_digit(16).unwrap_or(0));
            self.any_digit = true;
            if fraction {
                self.shift = self.shift.saturating_sub(4);
            }
            if self.kept < 16 {
                // Leading zeros are not significant.
                if self.bits != 0 || digit != 0 {
                    self.bits = self.bits << 4 | digit;
                    self.kept += 1;
                }
            } else {
                self.shift = self.shift.saturating_add(4);
                self.sticky |= digit != 0;
            }
        }
        count
    }

    /// The correctly rounded (to nearest, ties to even) double `bits * 2^(shift + exponent)`.
    fn value(&self, exponent: i64) -> f64 {
        if self.bits == 0 {
            return 0.0;
        }
        // Normalize to 64 significant bits: the value is `bits * 2^scale`, `bits` in [2^63, 2^64).
        let zeros = self.bits.leading_zeros();
        let bits = self.bits << zeros;
        let scale = self
            .shift
            .saturating_add(exponent)
            .saturating_sub(i64::from(zeros));
        // The exponent of the leading bit, and how many low bits of `bits` a double drops:
        // 11 for a normal number, more for a subnormal one.
        let top = scale.saturating_add(63);
        if top > 1023 {
            return f64::INFINITY;
        }
        let drop = 11 + (-1022 - top).max(0);
        round_to_double(bits, self.sticky, top, drop)
    }
}

/// Rounds `bits` (leading bit set, worth `2^top`) after dropping its low `drop` bits, ties to
/// even, and assembles the double.
fn round_to_double(bits: u64, sticky: bool, top: i64, drop: i64) -> f64 {
    if drop > 64 {
        // Below half the smallest subnormal.
        return 0.0;
    }
    let drop = u32::try_from(drop).unwrap_or(64);
    let wide = u128::from(bits);
    let mut kept = wide >> drop;
    let rest = wide & ((1u128 << drop) - 1);
    let half = 1u128 << (drop - 1);
    if rest > half || (rest == half && (sticky || kept & 1 == 1)) {
        kept += 1;
    }
    // `kept` has at most 54 bits here, so the conversion is exact.
    let kept = u64::try_from(kept).unwrap_or(u64::MAX);
    if top < -1022 {
        // Subnormal: the biased exponent is 0, and a carry into bit 52 makes the smallest
        // normal number, which is exactly what these bits mean.
        return f64::from_bits(kept);
    }
    // Normal: a carry out of 53 bits bumps the exponent.
    let (mantissa, top) = if kept >> 53 == 1 {
        (kept >> 1, top + 1)
    } else {
        (kept, top)
    };
    if top > 1023 {
        return f64::INFINITY;
    }
    let biased = u64::try_from(top + 1023).unwrap_or(0);
    f64::from_bits(biased << 52 | (mantissa & ((1 << 52) - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn lua() -> Lua {
        let lua = Lua::new();
        open(&lua).expect("open cjson");
        lua
    }

    fn eval_string(lua: &Lua, code: &str) -> String {
        lua.load(code)
            .eval::<String>()
            .unwrap_or_else(|e| panic!("{code}: {e}"))
    }

    fn eval_bytes(lua: &Lua, code: &str) -> Vec<u8> {
        let string: mlua::LuaString = lua
            .load(code)
            .eval()
            .unwrap_or_else(|e| panic!("{code}: {e}"));
        string.as_bytes().to_vec()
    }

    fn encode_of(lua: &Lua, lua_value: &str) -> String {
        eval_string(lua, &format!("return cjson.encode({lua_value})"))
    }

    /// Runs `code` under `pcall` and returns the error value, which must be a plain string.
    fn error_of(lua: &Lua, code: &str) -> String {
        let wrapped = format!(
            "local ok, e = pcall(function() {code} end)
             assert(not ok, 'no error')
             assert(type(e) == 'string', 'error is a ' .. type(e))
             return e"
        );
        eval_string(lua, &wrapped)
    }

    fn decode_error(lua: &Lua, json: &str) -> String {
        let literal = lua.create_string(json).unwrap();
        lua.globals().set("input", literal).unwrap();
        error_of(lua, "cjson.decode(input)")
    }

    // ----- Redis's own test suite (tests/unit/scripting.tcl) -----

    #[test]
    fn redis_json_numeric_decoding() {
        let lua = lua();
        let code = r#"return table.concat(
            cjson.decode("[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]"), " ")"#;
        assert_eq!(eval_string(&lua, code), "0 -5000 -1 0.0003 1023.2 0");
    }

    #[test]
    fn redis_json_string_decoding() {
        let lua = lua();
        let code = r#"local decoded = cjson.decode('{"keya": "a", "keyb": "b"}')
            return decoded.keya .. decoded.keyb"#;
        assert_eq!(eval_string(&lua, code), "ab");
    }

    #[test]
    fn redis_json_smoke_test() {
        let lua = lua();
        lua.load(
            r#"
            local some_map = {
                s1="Some string", n1=100, a1={"Some","String","Array"},
                nil1=nil, b1=true, b2=false}
            local encoded = cjson.encode(some_map)
            local decoded = cjson.decode(encoded)
            assert(table.concat(some_map) == table.concat(decoded))

            cjson.encode_keep_buffer(false)
            encoded = cjson.encode(some_map)
            decoded = cjson.decode(encoded)
            assert(table.concat(some_map) == table.concat(decoded))

            local table1 = {one="one", [1]="one"}
            encoded = cjson.encode(table1)
            decoded = cjson.decode(encoded)
            assert(decoded["one"] == table1["one"])
            assert(decoded["1"] == table1[1])

            local array1 = {[1]="one", [2]="two"}
            encoded = cjson.encode(array1)
            decoded = cjson.decode(encoded)
            assert(table.concat(array1) == table.concat(decoded))

            local invalid_map = {}
            invalid_map[false] = "false"
            local ok, encoded = pcall(cjson.encode, invalid_map)
            assert(ok == false)

            cjson.encode_max_depth(1)
            ok, encoded = pcall(cjson.encode, some_map)
            assert(ok == false)

            cjson.decode_max_depth(1)
            ok, decoded = pcall(cjson.decode, '{"obj": {"array": [1,2,3,4]}}')
            assert(ok == false)

            ok, encoded = pcall(cjson.encode, {num1=0/0})
            assert(ok == false)
            cjson.encode_invalid_numbers(true)
            ok, encoded = pcall(cjson.encode, {num1=0/0})
            assert(ok == true)

            cjson.decode_max_depth(1000)
            cjson.encode_max_depth(1000)
            cjson.encode_invalid_numbers(false)
            "#,
        )
        .exec()
        .unwrap();
    }

    // ----- Encoding -----

    #[test]
    fn encodes_scalars() {
        let lua = lua();
        for (value, want) in [
            ("nil", "null"),
            ("cjson.null", "null"),
            ("true", "true"),
            ("false", "false"),
            ("0", "0"),
            ("-0", "-0"),
            ("1", "1"),
            ("-17", "-17"),
            ("0.1", "0.1"),
            ("1/3", "0.33333333333333"),
            ("1e15", "1e+15"),
            ("123456789012345", "1.2345678901234e+14"),
            ("2^53", "9.007199254741e+15"),
            ("1e-5", "1e-05"),
            ("0.0001", "0.0001"),
            ("1e300", "1e+300"),
            ("-1.5e-300", "-1.5e-300"),
            ("'hello'", r#""hello""#),
            ("''", r#""""#),
        ] {
            assert_eq!(encode_of(&lua, value), want, "{value}");
        }
    }

    #[test]
    fn escapes_strings_like_lua_cjson() {
        let lua = lua();
        let got = eval_bytes(
            &lua,
            r#"return cjson.encode('a/b"c\\d' .. string.char(0, 8, 9, 10, 12, 13, 31, 127, 128, 255))"#,
        );
        let want: &[u8] = b"\"a\\/b\\\"c\\\\d\\u0000\\b\\t\\n\\f\\r\\u001f\\u007f\x80\xff\"";
        assert_eq!(got, want);
        // UTF-8 passes through unescaped.
        assert_eq!(encode_of(&lua, "'h\\195\\169'"), "\"h\u{e9}\"");
    }

    #[test]
    fn encodes_arrays_and_objects() {
        let lua = lua();
        for (value, want) in [
            ("{}", "{}"),
            ("{1, 2, 3}", "[1,2,3]"),
            ("{'a', {true, false}, {}}", r#"["a",[true,false],{}]"#),
            ("{1, nil, 3}", "[1,null,3]"),
            ("{cjson.null, cjson.null}", "[null,null]"),
            (
                "{[10] = 1}",
                "[null,null,null,null,null,null,null,null,null,1]",
            ),
            ("{a = 1}", r#"{"a":1}"#),
            ("{[1.5] = 1}", r#"{"1.5":1}"#),
            ("{[0] = 1}", r#"{"0":1}"#),
            ("{[-1] = 1}", r#"{"-1":1}"#),
            ("{[2^31] = 1}", r#"{"2147483648":1}"#),
            ("{['a/b'] = {x = {}}}", r#"{"a\/b":{"x":{}}}"#),
        ] {
            assert_eq!(encode_of(&lua, value), want, "{value}");
        }
        // Array part first, then the hash part: lua-cjson's (next's) order.
        assert_eq!(encode_of(&lua, "{1, a = 2}"), r#"{"1":1,"a":2}"#);
    }

    #[test]
    fn sparse_arrays() {
        let lua = lua();
        let sparse = "cjson.encode({[1] = 1, [20] = 2})";
        assert_eq!(
            error_of(&lua, sparse),
            "Cannot serialise table: excessively sparse array"
        );
        // Convert them to objects instead.
        lua.load("cjson.encode_sparse_array(true)").exec().unwrap();
        let object = eval_string(&lua, &format!("return {sparse}"));
        assert!(
            object == r#"{"1":1,"20":2}"# || object == r#"{"20":2,"1":1}"#,
            "{object}"
        );
        // Ratio 0: always an array.
        lua.load("cjson.encode_sparse_array(false, 0)")
            .exec()
            .unwrap();
        let array = eval_string(&lua, "return cjson.encode({[12] = 1})");
        assert_eq!(array, format!("[{}1]", "null,".repeat(11)));
        // But not one too long to write.
        let huge = error_of(&lua, "cjson.encode({[2^30] = 1})");
        assert!(
            huge.starts_with("Cannot serialise, excessive output"),
            "{huge}"
        );
    }

    #[test]
    fn unsupported_values_and_keys() {
        let lua = lua();
        for (code, want) in [
            (
                "cjson.encode(print)",
                "Cannot serialise function: type not supported",
            ),
            (
                "cjson.encode({coroutine.create(function() end)})",
                "Cannot serialise thread: type not supported",
            ),
            (
                "cjson.encode({[true] = 1})",
                "Cannot serialise boolean: table key must be a number or string",
            ),
            (
                "cjson.encode({[{}] = 1})",
                "Cannot serialise table: table key must be a number or string",
            ),
            (
                "cjson.encode(0/0)",
                "Cannot serialise number: must not be NaN or Inf",
            ),
            (
                "cjson.encode({1/0})",
                "Cannot serialise number: must not be NaN or Inf",
            ),
            (
                "cjson.encode({[1/0] = 1})",
                "Cannot serialise number: must not be NaN or Inf",
            ),
            (
                "cjson.encode()",
                "bad argument #1 to 'encode' (expected 1 argument)",
            ),
            (
                "cjson.encode(1, 2)",
                "bad argument #1 to 'encode' (expected 1 argument)",
            ),
        ] {
            assert_eq!(error_of(&lua, code), want, "{code}");
        }
        // A light userdata other than NULL.
        let pointer = Value::LightUserData(LightUserData(std::ptr::without_provenance_mut(8)));
        let encode: Function = lua.load("return cjson.encode").eval().unwrap();
        let err = encode.call::<String>(pointer).unwrap_err().to_string();
        assert!(
            err.contains("Cannot serialise userdata: type not supported"),
            "{err}"
        );
    }

    #[test]
    fn invalid_number_settings() {
        let lua = lua();
        let code = "return cjson.encode_invalid_numbers(true), cjson.encode({0/0, 1/0, -1/0})";
        let (setting, text): (bool, String) = lua.load(code).eval().unwrap();
        assert!(setting);
        assert_eq!(text, "[nan,inf,-inf]");
        let code = "return cjson.encode_invalid_numbers('null'), cjson.encode({0/0, [1/0] = 1})";
        let (setting, text): (String, String) = lua.load(code).eval().unwrap();
        assert_eq!(setting, "null");
        assert!(text.contains(r#""null":1"#), "{text}");
        let code = "return cjson.encode_invalid_numbers('off'), cjson.encode_invalid_numbers()";
        let (set, get): (bool, bool) = lua.load(code).eval().unwrap();
        assert!(!set && !get);
    }

    #[test]
    fn encode_depth_limits() {
        let lua = lua();
        let nest = |depth: usize| {
            format!("local t = {{}} for i = 2, {depth} do t = {{t}} end return cjson.encode(t)")
        };
        let text = eval_string(&lua, &nest(1000));
        assert_eq!(text.len(), 999 * 2 + 2);
        let err = error_of(&lua, &nest(1001));
        assert_eq!(err, "Cannot serialise, excessive nesting (1001)");
        // A table containing itself.
        let err = error_of(&lua, "local t = {} t.t = t cjson.encode(t)");
        assert_eq!(err, "Cannot serialise, excessive nesting (1001)");
        // A higher setting is honoured up to the ceiling, never beyond.
        lua.load("cjson.encode_max_depth(1000000)").exec().unwrap();
        eval_string(&lua, &nest(DEPTH_CEILING));
        let err = error_of(&lua, &nest(DEPTH_CEILING + 1));
        assert_eq!(
            err,
            format!(
                "Cannot serialise, excessive nesting ({})",
                DEPTH_CEILING + 1
            )
        );
    }

    #[test]
    fn output_limit_stops_exponential_tables() {
        let lua = lua();
        // 2^40 leaves through shared subtables: lua-cjson would try to write them all.
        let root: Value = lua
            .load("local t = {1} for i = 1, 40 do t = {t, t} end return t")
            .eval()
            .unwrap();
        let mut encoder = Encoder::new(Config::default(), 10_000);
        match encoder.encode(&lua, root) {
            Err(Fault::Plain(message)) => assert_eq!(
                String::from_utf8_lossy(&message),
                "Cannot serialise, excessive output (over 10000 bytes)"
            ),
            _ => panic!("expected the output limit"),
        }
    }

    #[test]
    fn number_precision() {
        let lua = lua();
        let code = "local old = cjson.encode_number_precision(3)
                    return old .. ' ' .. cjson.encode({1/3, 12345, 0.00012345, 1})";
        assert_eq!(eval_string(&lua, code), "3 [0.333,1.23e+04,0.000123,1]");
        let err = error_of(&lua, "cjson.encode_number_precision(15)");
        assert_eq!(
            err,
            "bad argument #1 to 'encode_number_precision' (expected integer between 1 and 14)"
        );
    }

    // ----- Decoding -----

    #[test]
    fn decodes_values() {
        let lua = lua();
        for code in [
            r#"cjson.decode('null') == cjson.null"#,
            r#"cjson.decode('[null]')[1] == cjson.null"#,
            r#"cjson.decode('{"a":null}').a == cjson.null"#,
            r#"cjson.decode(' true ') == true"#,
            r#"cjson.decode('false') == false"#,
            r#"next(cjson.decode('[]')) == nil"#,
            r#"next(cjson.decode('{}')) == nil"#,
            r#"#cjson.decode('[1, [2, [3]], {"a": []}]') == 3"#,
            r#"cjson.decode('[1, [2, [3]]]')[2][2][1] == 3"#,
            r#"cjson.decode('{"a": 1, "a": 2}').a == 2"#,
            r#"cjson.decode('{"": 5}')[""] == 5"#,
            r#"cjson.decode('\t\r\n [1] \n') [1] == 1"#,
            r#"cjson.decode(123) == 123"#,
            r#"cjson.decode('[1]\0garbage')[1] == 1"#,
        ] {
            let got: bool = lua
                .load(format!("return {code}"))
                .eval()
                .unwrap_or_else(|e| panic!("{code}: {e}"));
            assert!(got, "{code}");
        }
    }

    #[test]
    fn decodes_escapes_and_raw_bytes() {
        let lua = lua();
        let got = eval_bytes(
            &lua,
            r#"return cjson.decode('"\\u00e9\\u20AC\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\"\\\\\\u0000"')"#,
        );
        let want = "é€😀/\u{8}\u{c}\n\r\t\"\\\0".as_bytes();
        assert_eq!(got, want);
        // Invalid UTF-8 and raw control characters pass through.
        let got = eval_bytes(&lua, r#"return cjson.decode('"\255\254\1\127"')"#);
        assert_eq!(got, b"\xff\xfe\x01\x7f");
    }

    #[test]
    fn decodes_numbers_like_strtod() {
        let lua = lua();
        for (json, want) in [
            ("-0", -0.0),
            ("1.5e3", 1500.0),
            ("1E-2", 0.01),
            ("12345678901234567890", 12345678901234567890.0),
            ("1e400", f64::INFINITY),
            ("-1e400", f64::NEG_INFINITY),
            ("1e-400", 0.0),
            ("0x10", 16.0),
            ("-0X1p-2", -0.25),
            ("0x1.8", 1.5),
            ("007", 7.0),
            ("+1", 1.0),
            ("Infinity", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
            ("1.", 1.0),
            ("-.5", -0.5),
        ] {
            let code = format!("return cjson.decode('{json}')");
            let got: f64 = lua
                .load(&code)
                .eval()
                .unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(got.to_bits(), want.to_bits(), "{json}");
        }
        let nan: f64 = lua.load("return cjson.decode('NaN')").eval().unwrap();
        assert!(nan.is_nan());
        let long = format!("0.{}1", "0".repeat(5000));
        let got: f64 = lua
            .load(format!("return cjson.decode('{long}')"))
            .eval()
            .unwrap();
        assert_eq!(got, 0.0);
    }

    #[test]
    fn strict_numbers_when_invalid_numbers_are_off() {
        let lua = lua();
        let was: bool = lua
            .load("return cjson.decode_invalid_numbers(false)")
            .eval()
            .unwrap();
        assert!(!was);
        for (json, want) in [
            (
                "0x10",
                "Expected value but found invalid number at character 1",
            ),
            (
                "007",
                "Expected value but found invalid number at character 1",
            ),
            (
                "-Infinity",
                "Expected value but found invalid number at character 1",
            ),
            (
                "[1, -nan]",
                "Expected value but found invalid number at character 5",
            ),
            (
                "+1",
                "Expected value but found invalid token at character 1",
            ),
            (
                "NaN",
                "Expected value but found invalid token at character 1",
            ),
            (
                "Infinity",
                "Expected value but found invalid token at character 1",
            ),
        ] {
            assert_eq!(decode_error(&lua, json), want, "{json}");
        }
        let fine: f64 = lua.load("return cjson.decode('-0.5e1')").eval().unwrap();
        assert_eq!(fine, -5.0);
    }

    #[test]
    fn syntax_errors() {
        let lua = lua();
        for (json, want) in [
            ("", "Expected value but found T_END at character 1"),
            ("   ", "Expected value but found T_END at character 4"),
            ("x", "Expected value but found invalid token at character 1"),
            (
                "nul",
                "Expected value but found invalid token at character 1",
            ),
            ("]", "Expected value but found T_ARR_END at character 1"),
            ("[1,]", "Expected value but found T_ARR_END at character 4"),
            (
                "[1 2]",
                "Expected comma or array end but found T_NUMBER at character 4",
            ),
            (
                "[1",
                "Expected comma or array end but found T_END at character 3",
            ),
            (
                r#"{"a" 1}"#,
                "Expected colon but found T_NUMBER at character 6",
            ),
            (
                "{1:2}",
                "Expected object key string but found T_NUMBER at character 2",
            ),
            (
                r#"{"a":1,}"#,
                "Expected object key string but found T_OBJ_END at character 8",
            ),
            (
                r#"{"a":1 "b"}"#,
                "Expected comma or object end but found T_STRING at character 8",
            ),
            (
                r#"{"a": [1, 2"#,
                "Expected comma or array end but found T_END at character 12",
            ),
            (
                "[1] x",
                "Expected the end but found invalid token at character 5",
            ),
            ("1 2", "Expected the end but found T_NUMBER at character 3"),
            (
                "1.5e",
                "Expected the end but found invalid token at character 4",
            ),
            (
                "-",
                "Expected value but found invalid number at character 1",
            ),
            (
                "\"abc",
                "Expected value but found unexpected end of string at character 5",
            ),
            (
                r#""a\x""#,
                "Expected value but found invalid escape code at character 3",
            ),
            (
                r#""a\"#,
                "Expected value but found invalid escape code at character 3",
            ),
            (
                r#""\ud800""#,
                "Expected value but found invalid unicode escape code at character 2",
            ),
            (
                r#""\udc00""#,
                "Expected value but found invalid unicode escape code at character 2",
            ),
            (
                r#""\ud800\u0041""#,
                "Expected value but found invalid unicode escape code at character 2",
            ),
            (
                r#""\u12""#,
                "Expected value but found invalid unicode escape code at character 2",
            ),
            (
                r#"["\u12"#,
                "Expected value but found invalid unicode escape code at character 3",
            ),
            ("\0a", "JSON parser does not support UTF-16 or UTF-32"),
            ("a\0", "JSON parser does not support UTF-16 or UTF-32"),
        ] {
            assert_eq!(decode_error(&lua, json), want, "{json:?}");
        }
        for (code, want) in [
            (
                "cjson.decode()",
                "bad argument #1 to 'decode' (expected 1 argument)",
            ),
            (
                "cjson.decode('1', 2)",
                "bad argument #1 to 'decode' (expected 1 argument)",
            ),
            (
                "cjson.decode({})",
                "bad argument #1 to 'decode' (string expected, got table)",
            ),
            (
                "cjson.decode(nil)",
                "bad argument #1 to 'decode' (string expected, got nil)",
            ),
        ] {
            assert_eq!(error_of(&lua, code), want, "{code}");
        }
    }

    #[test]
    fn decode_depth_limits() {
        let lua = lua();
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let ok = |json: &str| {
            lua.globals().set("input", json).unwrap();
            lua.load("return cjson.decode(input)")
                .eval::<Table>()
                .is_ok()
        };
        assert!(ok(&nested(1000)));
        assert_eq!(
            decode_error(&lua, &nested(1001)),
            "Found too many nested data structures (1001) at character 1001"
        );
        let objects = format!("{}1{}", r#"{"a":"#.repeat(1001), "}".repeat(1001));
        assert_eq!(
            decode_error(&lua, &objects),
            "Found too many nested data structures (1001) at character 5001"
        );
        // Deep unclosed input fails on depth, not on memory or stack.
        assert!(decode_error(&lua, &"[".repeat(1_000_000)).starts_with("Found too many"));
        lua.load("cjson.decode_max_depth(2^31 - 1)").exec().unwrap();
        assert!(ok(&nested(DEPTH_CEILING)));
        let too_deep = DEPTH_CEILING + 1;
        assert_eq!(
            decode_error(&lua, &nested(too_deep)),
            format!("Found too many nested data structures ({too_deep}) at character {too_deep}")
        );
    }

    // ----- Configuration -----

    #[test]
    fn configuration_defaults_and_setters() {
        let lua = lua();
        let defaults = "return table.concat({tostring(cjson.encode_sparse_array()),
            select(2, cjson.encode_sparse_array())}, ',') .. ' ' .. cjson.encode_max_depth()
            .. ' ' .. cjson.decode_max_depth() .. ' ' .. cjson.encode_number_precision()
            .. ' ' .. tostring(cjson.encode_keep_buffer())
            .. ' ' .. tostring(cjson.encode_invalid_numbers())
            .. ' ' .. tostring(cjson.decode_invalid_numbers())";
        assert_eq!(
            eval_string(&lua, defaults),
            "false,2,10 1000 1000 14 true false true"
        );
        let setters = "return table.concat({tostring(cjson.encode_sparse_array('on', 3, '7')),
            select(2, cjson.encode_sparse_array(nil, nil, 8))}, ',')
            .. ' ' .. cjson.encode_max_depth(5.9) .. ' ' .. cjson.decode_max_depth('12')
            .. ' ' .. tostring(cjson.encode_keep_buffer('off'))
            .. ' ' .. tostring(cjson.decode_invalid_numbers(false))
            .. ' ' .. tostring(cjson.decode_invalid_numbers())";
        assert_eq!(
            eval_string(&lua, setters),
            "true,3,8 5 12 false false false"
        );
    }

    #[test]
    fn configuration_errors() {
        let lua = lua();
        for (code, want) in [
            (
                "cjson.encode_max_depth(0)",
                "bad argument #1 to 'encode_max_depth' (expected integer between 1 and 2147483647)",
            ),
            (
                "cjson.decode_max_depth(2^31)",
                "bad argument #1 to 'decode_max_depth' (expected integer between 1 and 2147483647)",
            ),
            (
                "cjson.encode_max_depth('x')",
                "bad argument #1 to 'encode_max_depth' (number expected, got string)",
            ),
            (
                "cjson.encode_max_depth(1, 2)",
                "bad argument #2 to 'encode_max_depth' (found too many arguments)",
            ),
            (
                "cjson.encode_sparse_array(nil, -1)",
                "bad argument #1 to 'encode_sparse_array' (expected integer between 0 and 2147483647)",
            ),
            (
                "cjson.encode_sparse_array(nil, {})",
                "bad argument #2 to 'encode_sparse_array' (number expected, got table)",
            ),
            (
                "cjson.encode_sparse_array(1, 2, 3, 4)",
                "bad argument #4 to 'encode_sparse_array' (found too many arguments)",
            ),
            (
                "cjson.encode_keep_buffer('maybe')",
                "bad argument #1 to 'encode_keep_buffer' (invalid option 'maybe')",
            ),
            (
                "cjson.encode_keep_buffer(1)",
                "bad argument #1 to 'encode_keep_buffer' (invalid option '1')",
            ),
            (
                "cjson.decode_invalid_numbers({})",
                "bad argument #1 to 'decode_invalid_numbers' (string expected, got table)",
            ),
            (
                "cjson.encode_invalid_numbers('nulls')",
                "bad argument #1 to 'encode_invalid_numbers' (invalid option 'nulls')",
            ),
        ] {
            assert_eq!(error_of(&lua, code), want, "{code}");
        }
        // Nothing changed.
        assert_eq!(
            eval_string(&lua, "return tostring(cjson.encode_max_depth())"),
            "1000"
        );
    }

    #[test]
    fn new_makes_independent_modules() {
        let lua = lua();
        let code = "local other = cjson.new()
            other.encode_number_precision(2)
            return other.encode(1/3) .. ' ' .. cjson.encode(1/3) .. ' ' .. other._NAME
                .. ' ' .. cjson._VERSION .. ' ' .. tostring(other.null == cjson.null)";
        assert_eq!(
            eval_string(&lua, code),
            "0.33 0.33333333333333 cjson 2.1.0 true"
        );
    }

    // ----- Number conversions against C (Lua 5.1 formats and parses with libc) -----

    #[test]
    fn hex_rounding_edges() {
        for (text, want) in [
            ("0x1p-1074", 5e-324),
            ("0x1p-1075", 0.0),
            ("0x1.0000000000001p-1075", 5e-324),
            ("0x3p-1076", 5e-324),
            ("0x1.fffffffffffff8p1023", f64::INFINITY),
            ("0x1.fffffffffffff7p1023", f64::MAX),
            // glibc: 0x1.23456789abcdfp+68.
            (
                "0x123456789abcdef123p0",
                0x0012_3456_789a_bcdf_u64 as f64 * 65536.0,
            ),
            ("0x1p99999999999999999999", f64::INFINITY),
            ("0x0.000p-5", 0.0),
        ] {
            let (got, end) = strtod(text.as_bytes(), 0).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "{text}");
            assert_eq!(end, text.len(), "{text}");
        }
        // strtod stops where C's does.
        for (text, end) in [
            ("0x", 1),
            ("0xg", 1),
            ("1e+", 1),
            ("0x1p", 3),
            ("nan(ab", 3),
            ("nan(a_1)x", 8),
            ("infinit", 3),
        ] {
            assert_eq!(
                strtod(text.as_bytes(), 0).map(|(_, end)| end),
                Some(end),
                "{text}"
            );
        }
        assert_eq!(strtod(b"e5", 0), None);
    }

    /// A JSON-ish value, to build Lua values from and compare decoded ones with.
    #[derive(Clone, Debug, PartialEq)]
    enum Json {
        Null,
        Bool(bool),
        Number(f64),
        String(Vec<u8>),
        Array(Vec<Json>),
        Object(BTreeMap<Vec<u8>, Json>),
    }

    /// Values that survive `%.14g`: integers below 10^14 and quarters.
    fn json_strategy() -> impl Strategy<Value = Json> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..12);
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            (-99_999_999_999_999i64..99_999_999_999_999).prop_map(|n| Json::Number(n as f64)),
            any::<i32>().prop_map(|n| Json::Number(f64::from(n) / 4.0)),
            bytes().prop_map(Json::String),
        ];
        leaf.prop_recursive(5, 64, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 1..6).prop_map(Json::Array),
                proptest::collection::btree_map(bytes(), inner, 1..6).prop_map(Json::Object),
            ]
        })
    }

    fn to_lua(lua: &Lua, json: &Json) -> Value {
        match json {
            Json::Null => null(),
            Json::Bool(b) => Value::Boolean(*b),
            Json::Number(n) => Value::Number(*n),
            Json::String(s) => Value::String(lua.create_string(s).unwrap()),
            Json::Array(items) => {
                let table = lua.create_table().unwrap();
                for (i, item) in items.iter().enumerate() {
                    table.raw_set(i + 1, to_lua(lua, item)).unwrap();
                }
                Value::Table(table)
            }
            Json::Object(members) => {
                let table = lua.create_table().unwrap();
                for (key, member) in members {
                    table
                        .raw_set(lua.create_string(key).unwrap(), to_lua(lua, member))
                        .unwrap();
                }
                Value::Table(table)
            }
        }
    }

    fn from_lua(value: Value) -> Json {
        match value {
            Value::LightUserData(p) if p.0.is_null() => Json::Null,
            Value::Boolean(b) => Json::Bool(b),
            Value::Number(n) => Json::Number(n),
            Value::Integer(n) => Json::Number(n as f64),
            Value::String(s) => Json::String(s.as_bytes().to_vec()),
            Value::Table(table) => {
                let len = table.raw_len();
                let pairs: Vec<(Value, Value)> = table.pairs().map(Result::unwrap).collect();
                if len > 0 && pairs.len() == len {
                    let items = (1..=len).map(|i| from_lua(table.raw_get(i).unwrap()));
                    Json::Array(items.collect())
                } else {
                    let members = pairs.into_iter().map(|(key, member)| match key {
                        Value::String(key) => (key.as_bytes().to_vec(), from_lua(member)),
                        other => panic!("decoded a non-string key {other:?}"),
                    });
                    Json::Object(members.collect())
                }
            }
            other => panic!("unexpected decoded value {other:?}"),
        }
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(json in json_strategy()) {
            let lua = lua();
            let codec: mlua::Table = lua.globals().get("cjson").unwrap();
            let encode: Function = codec.get("encode").unwrap();
            let decode: Function = codec.get("decode").unwrap();
            let text: Value = encode.call(to_lua(&lua, &json)).unwrap();
            let back: Value = decode.call(text).unwrap();
            prop_assert_eq!(from_lua(back), json);
        }

        #[test]
        fn numbers_encode_like_printf(x in any::<f64>(), precision in 1u8..=14) {
            prop_assume!(x.is_finite());
            let lua = lua();
            // Lua 5.1's tostring is "%.14g"; string.format hands "%.Ng" to libc.
            let check: Function = lua.load("return function(x, p)
                local default = cjson.encode(x) == tostring(x)
                cjson.encode_number_precision(p)
                return default, cjson.encode(x) == string.format('%.' .. p .. 'g', x)
            end").eval().unwrap();
            let (default, custom): (bool, bool) = check.call((x, precision)).unwrap();
            prop_assert!(default && custom, "{} at precision {}", x, precision);
        }

        #[test]
        fn numbers_parse_like_strtod(
            text in r"-?([0-9]{0,22}(\.[0-9]{0,22})?([eE][-+]?[0-9]{1,4})?|0[xX][0-9a-fA-F]{0,20}(\.[0-9a-fA-F]{0,20})?([pP][-+]?[0-9]{1,5})?)"
        ) {
            let lua = lua();
            // Lua 5.1's tonumber is libc's strtod, plus a check that all was read.
            let tonumber: Function = lua.globals().get("tonumber").unwrap();
            let c: Option<f64> = tonumber.call(text.as_str()).unwrap();
            let ours = strtod(text.as_bytes(), 0).filter(|(_, end)| *end == text.len());
            prop_assert_eq!(ours.map(|(x, _)| x.to_bits()), c.map(f64::to_bits), "{}", text);
        }

        #[test]
        fn hostile_text_never_breaks_decode(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let lua = lua();
            let decode: Function = lua.load("return function(s) return pcall(cjson.decode, s) end").eval().unwrap();
            let (ok, result): (bool, Value) = decode.call(lua.create_string(&bytes).unwrap()).unwrap();
            prop_assert!(ok || matches!(result, Value::String(_)));
        }

        #[test]
        fn json_like_text_never_breaks_decode(text in r#"[\[\]{}:,"\\u0-9a-fA-F.eE+\-ntrulsfxINa ]{0,48}"#) {
            let lua = lua();
            let decode: Function = lua.load("return function(s) return pcall(cjson.decode, s) end").eval().unwrap();
            let (ok, result): (bool, Value) = decode.call(text.as_str()).unwrap();
            prop_assert!(ok || matches!(result, Value::String(_)));
        }
    }
}
