//! The `cmsgpack` library of Redis's Lua environment: MessagePack encoding and decoding of Lua
//! values, with the behaviour of lua-cmsgpack 0.4 as Redis 7.0 bundles it
//! (`deps/lua/src/lua_cmsgpack.c`).
//!
//! Scripts see a global table `cmsgpack` with:
//!
//! - `cmsgpack.pack(v1, ...)`: each argument encoded, the encodings concatenated;
//! - `cmsgpack.unpack(s)`: every value encoded in `s`, as multiple results;
//! - `cmsgpack.unpack_one(s [, offset])` and `cmsgpack.unpack_limit(s, limit [, offset])`: the
//!   offset of the next value (-1 once `s` is exhausted), then the next one or `limit` values
//!   decoded from byte `offset` (0-based);
//!
//! and the metadata fields `_NAME`, `_VERSION`, `_COPYRIGHT`, `_DESCRIPTION`.
//!
//! Encoding follows lua-cmsgpack: numbers with an integral value that fits an int64 take the
//! smallest integer encoding, others a float32 if that is exact, else a float64; strings
//! (byte strings: Lua strings need not be UTF-8) are fixstr/str8/str16/str32; a table whose
//! keys are exactly 1..n is an array, any other a map (in `next` order); tables nested deeper
//! than 16 ([`MAX_NESTING`]), functions and other values are nil, so circular references
//! terminate. Decoding knows the types lua-cmsgpack 0.4 knows: bin and ext are bad data, and a
//! uint64 from 2^63 up wraps to a negative number, as the C code pushes it as a signed integer.
//!
//! Guarantees, whatever the script passes: no panic; decoding is iterative (no recursion on
//! nested input) and allocates only for bytes actually present, never for a length or count a
//! header claims (a map claiming 2^32 entries fails with "Missing bytes in input." once the
//! bytes run out); nesting and result counts are bounded by the Lua stack budget the C library
//! runs into (LUAI_MAXCSTACK), with its error message; encoding recurses at most 16 levels.
//! However many values pass, the Rust side holds a bounded number of mlua references (Lua 5.1
//! leaves mlua about 8000 for the whole interpreter): arguments and results travel in tables
//! and containers being decoded wait in a Lua table. Errors are raised in Lua as plain strings
//! with the C library's messages ("Missing bytes in input.", "Bad data format in input.", ...),
//! so `pcall` sees what it sees in Redis.
//!
//! Differences from the C library, all where it is wrong or unbounded: the negative
//! offset/limit error prints the limit (the C code prints the input length); `pack` accepts any
//! number of arguments (the C code refuses more than about 4000); an encoding that would
//! exceed [`MAX_OUTPUT`] fails with "MessagePack output too large." (the C code grows its buffer
//! until memory runs out, which a table referencing itself many times reaches in a few levels);
//! results are returned through Lua's `unpack`, whose own three arguments take stack slots, so
//! the largest result count is 7997 values where the C library allows 7998.

use mlua::{Function, Lua, Table, Value};

use super::raise::{Args, Fault, LibFn, Results, raising_function};

/// Deepest table nesting encoded (LUACMSGPACK_MAX_NESTING): a table at this depth packs as
/// nil, which is how self-referencing tables terminate.
const MAX_NESTING: usize = 16;

/// Lua stack slots the decoded values may take: LUAI_MAXCSTACK (8000, what a C function may
/// use in Lua 5.1) less the three arguments of the `unpack` that returns them. lua-cmsgpack
/// decodes onto the Lua stack (each open array or map holds two slots, each decoded top-level
/// value one) and fails past its budget; keeping one also bounds the nesting we build.
const STACK_SLOTS: usize = 7997;

/// Largest encoding `pack` produces: Redis's limit on a string value (proto-max-bulk-len's
/// default). It bounds the work a table referencing itself can cause.
const MAX_OUTPUT: usize = 512 * 1024 * 1024;

/// Installs the library as a global table.
pub(crate) fn open(lua: &Lua) -> mlua::Result<()> {
    const FUNCTIONS: [(&str, LibFn); 4] = [
        ("pack", pack),
        ("unpack", unpack),
        ("unpack_one", unpack_one),
        ("unpack_limit", unpack_limit),
    ];
    let lib = lua.create_table()?;
    for (name, body) in FUNCTIONS {
        let function: Function = raising_function(lua, "cmsgpack", name, body)?;
        lib.raw_set(name, function)?;
    }
    lib.raw_set("_NAME", "cmsgpack")?;
    lib.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    lib.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    lib.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    lua.globals().raw_set("cmsgpack", lib)
}

// ---------------------------------------------------------------------------------------------
// Errors: lua-cmsgpack's messages.

fn missing_bytes() -> Fault {
    Fault::plain("Missing bytes in input.")
}

fn bad_format() -> Fault {
    Fault::plain("Bad data format in input.")
}

fn too_large() -> Fault {
    Fault::plain("MessagePack output too large.")
}

// ---------------------------------------------------------------------------------------------
// Encoding.

/// `cmsgpack.pack(...)`.
fn pack(lua: &Lua, args: &Args) -> Result<Results, Fault> {
    if args.is_empty() {
        return Err(Fault::arg(0, "MessagePack pack needs input."));
    }
    let mut encoder = Encoder::new(MAX_OUTPUT);
    for pos in 1..=args.len() {
        encoder.value(&args.get(pos)?.unwrap_or(Value::Nil), 0)?;
    }
    let mut results = Results::new(lua)?;
    results.push(Value::String(lua.create_string(encoder.out)?))?;
    Ok(results)
}

/// The encoding being built.
struct Encoder {
    out: Vec<u8>,
    /// Size past which encoding fails ([`MAX_OUTPUT`]; smaller in tests).
    limit: usize,
}

impl Encoder {
    fn new(limit: usize) -> Self {
        Encoder {
            out: Vec::new(),
            limit,
        }
    }

    /// Encodes `value`, found `level` tables deep.
    fn value(&mut self, value: &Value, level: usize) -> Result<(), Fault> {
        // Every value adds at least a byte: capping the output caps the work.
        if self.out.len() > self.limit {
            return Err(too_large());
        }
        match value {
            Value::String(s) => self.string(&s.as_bytes())?,
            Value::Boolean(b) => self.out.push(if *b { 0xc3 } else { 0xc2 }),
            // mlua reads a Lua 5.1 number as `Integer` exactly when it is integral and fits.
            Value::Integer(i) => self.integer(*i),
            Value::Number(n) => self.number(*n),
            Value::Table(t) if level < MAX_NESTING => self.table(t, level)?,
            // Deeper tables, functions, userdata, threads: nil.
            _ => self.out.push(0xc0),
        }
        Ok(())
    }

    fn string(&mut self, bytes: &[u8]) -> Result<(), Fault> {
        let len = bytes.len();
        if len > self.limit.saturating_sub(self.out.len()) {
            return Err(too_large());
        }
        match u8::try_from(len) {
            Ok(short) if short < 32 => self.out.push(0xa0 | short),
            Ok(short) => self.out.extend_from_slice(&[0xd9, short]),
            Err(_) => self.header(len, 0xda, 0xdb)?,
        }
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    /// A 16-bit (`tag16`) or 32-bit (`tag32`) big-endian length after its tag.
    fn header(&mut self, len: usize, tag16: u8, tag32: u8) -> Result<(), Fault> {
        if let Ok(len) = u16::try_from(len) {
            push_tagged(&mut self.out, tag16, &len.to_be_bytes());
        } else {
            let len = u32::try_from(len).map_err(|_| too_large())?;
            push_tagged(&mut self.out, tag32, &len.to_be_bytes());
        }
        Ok(())
    }

    /// An array (`fix` 0x90) or map (`fix` 0x80) header for `len` elements.
    fn container(&mut self, len: usize, fix: u8, tag16: u8, tag32: u8) -> Result<(), Fault> {
        match u8::try_from(len) {
            Ok(small) if small < 16 => {
                self.out.push(fix | small);
                Ok(())
            }
            _ => self.header(len, tag16, tag32),
        }
    }

    /// Lua 5.1 numbers are all doubles: integral ones that fit an int64 go as integers.
    fn number(&mut self, n: f64) {
        const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
        if n.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&n) {
            // Exact: integral and in range (-0.0 becomes 0, as in C).
            self.integer(n as i64);
        } else if f64::from(n as f32) == n {
            // Also the infinities; never NaN, which compares unequal.
            push_tagged(&mut self.out, 0xca, &(n as f32).to_be_bytes());
        } else {
            push_tagged(&mut self.out, 0xcb, &n.to_be_bytes());
        }
    }

    /// The smallest encoding of `n`: fixint, then 8, 16, 32, 64 bits (unsigned if positive).
    fn integer(&mut self, n: i64) {
        let out = &mut self.out;
        if let Ok(n) = u64::try_from(n) {
            if let Ok(byte) = u8::try_from(n) {
                if byte <= 0x7f {
                    out.push(byte);
                } else {
                    push_tagged(out, 0xcc, &[byte]);
                }
            } else if let Ok(n) = u16::try_from(n) {
                push_tagged(out, 0xcd, &n.to_be_bytes());
            } else if let Ok(n) = u32::try_from(n) {
                push_tagged(out, 0xce, &n.to_be_bytes());
            } else {
                push_tagged(out, 0xcf, &n.to_be_bytes());
            }
        } else if let Ok(n) = i8::try_from(n) {
            // Down to -32 the byte alone (negative fixint, its two's complement) says it all.
            let tag: &[u8] = if n >= -32 { &[] } else { &[0xd0] };
            out.extend_from_slice(tag);
            out.extend_from_slice(&n.to_be_bytes());
        } else if let Ok(n) = i16::try_from(n) {
            push_tagged(out, 0xd1, &n.to_be_bytes());
        } else if let Ok(n) = i32::try_from(n) {
            push_tagged(out, 0xd2, &n.to_be_bytes());
        } else {
            push_tagged(out, 0xd3, &n.to_be_bytes());
        }
    }

    /// A table as an array if its keys are exactly 1..n, else as a map. The table is walked
    /// rather than copied, to hold few mlua references.
    fn table(&mut self, table: &Table, level: usize) -> Result<(), Fault> {
        match shape(table)? {
            Shape::Array(len) => {
                self.container(len, 0x90, 0xdc, 0xdd)?;
                for index in 1..=len {
                    self.value(&table.raw_get::<Value>(index)?, level + 1)?;
                }
            }
            Shape::Map(len) => {
                self.container(len, 0x80, 0xde, 0xdf)?;
                for pair in table.pairs::<Value, Value>() {
                    let (key, value) = pair?;
                    self.value(&key, level + 1)?;
                    self.value(&value, level + 1)?;
                }
            }
        }
        Ok(())
    }
}

fn push_tagged(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    out.extend_from_slice(bytes);
}

/// How lua-cmsgpack encodes a table, with its number of elements.
enum Shape {
    Array(usize),
    Map(usize),
}

/// An array if every key is a positive C `int` and there are as many keys as the largest (so
/// they are exactly 1..n), the C library's test; else a map.
fn shape(table: &Table) -> Result<Shape, Fault> {
    let (mut count, mut max, mut array) = (0usize, 0i32, true);
    for pair in table.pairs::<Value, Value>() {
        let (key, _) = pair?;
        count += 1;
        // Integral keys arrive as `Integer`; a `Number` key is fractional, huge or -0.
        match key {
            Value::Integer(index) if array => match i32::try_from(index) {
                Ok(index) if index > 0 => max = max.max(index),
                _ => array = false,
            },
            _ => array = false,
        }
    }
    Ok(match usize::try_from(max) {
        Ok(max) if array && max == count => Shape::Array(count),
        _ => Shape::Map(count),
    })
}

// ---------------------------------------------------------------------------------------------
// Decoding.

/// `cmsgpack.unpack(s)`: every value.
fn unpack(lua: &Lua, args: &Args) -> Result<Results, Fault> {
    unpack_values(lua, args, 0, 0)
}

/// `cmsgpack.unpack_one(s [, offset])`.
fn unpack_one(lua: &Lua, args: &Args) -> Result<Results, Fault> {
    let offset = args.opt_integer(lua, 2, 0)?;
    unpack_values(lua, args, 1, offset)
}

/// `cmsgpack.unpack_limit(s, limit [, offset])`.
fn unpack_limit(lua: &Lua, args: &Args) -> Result<Results, Fault> {
    let limit = args.integer(lua, 2)?;
    let offset = args.opt_integer(lua, 3, 0)?;
    unpack_values(lua, args, limit, offset)
}

/// Decodes `limit` values from byte `offset` of argument 1, preceded by the next offset; with
/// `limit == 0 && offset == 0` every value and no offset, as in C.
fn unpack_values(lua: &Lua, args: &Args, limit: i64, offset: i64) -> Result<Results, Fault> {
    let decode_all = limit == 0 && offset == 0;
    let input = args.string(lua, 1)?;
    let data = input.as_bytes();
    if offset < 0 || limit < 0 {
        return Err(Fault::plain(format!(
            "Invalid request to unpack with offset of {offset} and limit of {limit}."
        )));
    }
    let start = usize::try_from(offset)
        .ok()
        .filter(|&start| start <= data.len())
        .ok_or_else(|| {
            let len = data.len();
            Fault::plain(format!(
                "Start offset {offset} greater than input length {len}."
            ))
        })?;
    let limit = match usize::try_from(limit) {
        Ok(limit) if !decode_all => limit,
        _ => usize::MAX,
    };
    let mut results = Results::new(lua)?;
    // The next offset goes first; its slot is filled once known.
    let reserved = usize::from(!decode_all);
    results.len = reserved;
    let mut decoder = Decoder::new(
        lua,
        Reader {
            data: &data,
            pos: start,
        },
    )?;
    while decoder.reader.remaining() > 0 && results.len - reserved < limit {
        let value = decoder.value(results.len)?;
        results.push(value)?;
    }
    if !decode_all {
        let next = match decoder.reader.remaining() {
            0 => -1.0,
            _ => decoder.reader.pos as f64,
        };
        results.values.raw_set(1, next)?;
    }
    Ok(results)
}

/// A cursor over the input.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes, if there are that many.
    fn take(&mut self, n: usize) -> Result<&'a [u8], Fault> {
        let end = self.pos.checked_add(n).ok_or_else(missing_bytes)?;
        let bytes = self.data.get(self.pos..end).ok_or_else(missing_bytes)?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Fault> {
        <[u8; N]>::try_from(self.take(N)?).map_err(|_| missing_bytes())
    }

    fn byte(&mut self) -> Result<u8, Fault> {
        Ok(self.array::<1>()?[0])
    }

    fn len16(&mut self) -> Result<usize, Fault> {
        Ok(usize::from(u16::from_be_bytes(self.array()?)))
    }

    fn len32(&mut self) -> Result<usize, Fault> {
        usize::try_from(u32::from_be_bytes(self.array()?)).map_err(|_| missing_bytes())
    }
}

/// What one MessagePack header introduces: a whole value, or a container whose elements (for
/// a map, keys and values alternating) follow.
enum Item {
    Value(Value),
    Array(usize),
    Map(usize),
}

/// Reads one header and, for scalars, the value it introduces.
fn read_item(lua: &Lua, r: &mut Reader<'_>) -> Result<Item, Fault> {
    let number = |n: f64| Ok(Item::Value(Value::Number(n)));
    let tag = r.byte()?;
    match tag {
        0x00..=0x7f => number(f64::from(tag)),
        0x80..=0x8f => Ok(Item::Map(usize::from(tag & 0x0f))),
        0x90..=0x9f => Ok(Item::Array(usize::from(tag & 0x0f))),
        0xa0..=0xbf => string(lua, r, usize::from(tag & 0x1f)),
        0xc0 => Ok(Item::Value(Value::Nil)),
        0xc2 => Ok(Item::Value(Value::Boolean(false))),
        0xc3 => Ok(Item::Value(Value::Boolean(true))),
        0xca => number(f64::from(f32::from_be_bytes(r.array()?))),
        0xcb => number(f64::from_be_bytes(r.array()?)),
        0xcc => number(f64::from(r.byte()?)),
        0xcd => number(f64::from(u16::from_be_bytes(r.array()?))),
        0xce => number(f64::from(u32::from_be_bytes(r.array()?))),
        // lua-cmsgpack pushes a uint64 as a signed lua_Integer: from 2^63 up it wraps.
        0xcf => number(u64::from_be_bytes(r.array()?) as i64 as f64),
        0xd0 => number(f64::from(i8::from_be_bytes(r.array()?))),
        0xd1 => number(f64::from(i16::from_be_bytes(r.array()?))),
        0xd2 => number(f64::from(i32::from_be_bytes(r.array()?))),
        0xd3 => number(i64::from_be_bytes(r.array()?) as f64),
        0xd9 => {
            let len = usize::from(r.byte()?);
            string(lua, r, len)
        }
        0xda => {
            let len = r.len16()?;
            string(lua, r, len)
        }
        0xdb => {
            let len = r.len32()?;
            string(lua, r, len)
        }
        0xdc => Ok(Item::Array(r.len16()?)),
        0xdd => Ok(Item::Array(r.len32()?)),
        0xde => Ok(Item::Map(r.len16()?)),
        0xdf => Ok(Item::Map(r.len32()?)),
        0xe0..=0xff => number(f64::from(i8::from_be_bytes([tag]))),
        // 0xc1 (unused), bin 8/16/32, ext 8/16/32 and fixext: unknown to lua-cmsgpack 0.4.
        _ => Err(bad_format()),
    }
}

/// A string of `len` bytes; created only once they are all there.
fn string(lua: &Lua, r: &mut Reader<'_>, len: usize) -> Result<Item, Fault> {
    let bytes = r.take(len)?;
    Ok(Item::Value(Value::String(lua.create_string(bytes)?)))
}

/// An open container: how many elements it still expects, and where the next one goes.
struct Frame {
    remaining: usize,
    slot: Slot,
}

enum Slot {
    /// Arrays: at this index.
    Index(i64),
    /// Maps: the next element is a key.
    Key,
    /// Maps: the next element is the value of the key waiting in `Decoder::keys`.
    Value,
}

/// What became of a decoded value handed to the open containers.
enum Handed {
    /// No container is open: the value is a top-level result.
    TopLevel(Value),
    /// Stored in the innermost container, which expects more.
    Stored,
    /// Stored, completing the innermost container, now closed and a value itself.
    Completed(Table),
}

/// Decodes values iteratively: a container's header opens a [`Frame`] and its elements are
/// read in the same loop. Open containers wait in Lua tables, not Rust ones: mlua has few
/// reference slots in Lua 5.1, shared by the whole interpreter, so the Rust side holds only
/// the innermost container.
struct Decoder<'a> {
    lua: &'a Lua,
    reader: Reader<'a>,
    frames: Vec<Frame>,
    /// The innermost open container.
    current: Option<Table>,
    /// `containers[d]`: the open container at depth `d` (1-based).
    containers: Table,
    /// `keys[d]`: the key read for the map at depth `d`, waiting for its value.
    keys: Table,
}

impl<'a> Decoder<'a> {
    fn new(lua: &'a Lua, reader: Reader<'a>) -> mlua::Result<Self> {
        Ok(Decoder {
            lua,
            reader,
            frames: Vec::new(),
            current: None,
            containers: lua.create_table()?,
            keys: lua.create_table()?,
        })
    }

    /// Decodes one complete value. `used_slots` is the Lua stack the results so far hold.
    fn value(&mut self, used_slots: usize) -> Result<Value, Fault> {
        loop {
            // Every open container holds two slots, as in the C library; the value one more.
            if used_slots + 2 * self.frames.len() + 1 > STACK_SLOTS {
                return Err(Fault::plain(
                    "stack overflow (too many return values at once; \
                     use unpack_one or unpack_limit instead.)",
                ));
            }
            let mut value = match read_item(self.lua, &mut self.reader)? {
                Item::Value(value) => value,
                Item::Array(0) | Item::Map(0) => Value::Table(self.lua.create_table()?),
                Item::Array(len) => {
                    self.open(len, Slot::Index(1))?;
                    continue;
                }
                Item::Map(len) => {
                    self.open(len, Slot::Key)?;
                    continue;
                }
            };
            // A value completing its container makes that container a value in turn.
            loop {
                match self.hand(value)? {
                    Handed::TopLevel(value) => return Ok(value),
                    Handed::Stored => break,
                    Handed::Completed(table) => value = Value::Table(table),
                }
            }
        }
    }

    /// Opens a container of `len` (> 0) elements.
    fn open(&mut self, len: usize, slot: Slot) -> Result<(), Fault> {
        let table = self.lua.create_table()?;
        self.frames.push(Frame {
            remaining: len,
            slot,
        });
        self.containers.raw_set(self.frames.len(), &table)?;
        self.current = Some(table);
        Ok(())
    }

    /// Stores `value` as the innermost container's next element.
    fn hand(&mut self, value: Value) -> Result<Handed, Fault> {
        let depth = self.frames.len();
        let (Some(frame), Some(table)) = (self.frames.last_mut(), &self.current) else {
            return Ok(Handed::TopLevel(value));
        };
        match frame.slot {
            Slot::Index(index) => {
                table.raw_set(index, value)?;
                frame.slot = Slot::Index(index + 1);
            }
            Slot::Key => {
                self.keys.raw_set(depth, value)?;
                frame.slot = Slot::Value;
                return Ok(Handed::Stored);
            }
            Slot::Value => {
                let key: Value = self.keys.raw_get(depth)?;
                self.keys.raw_set(depth, Value::Nil)?;
                set_field(table, key, value)?;
                frame.slot = Slot::Key;
            }
        }
        frame.remaining -= 1;
        if frame.remaining > 0 {
            return Ok(Handed::Stored);
        }
        Ok(Handed::Completed(self.close()?))
    }

    /// Closes the innermost container, returning it; its parent becomes the innermost.
    fn close(&mut self) -> Result<Table, Fault> {
        let depth = self.frames.len();
        self.frames.pop();
        self.containers.raw_set(depth, Value::Nil)?;
        let parent = match depth {
            0 | 1 => None,
            _ => Some(self.containers.raw_get::<Table>(depth - 1)?),
        };
        let closed = std::mem::replace(&mut self.current, parent);
        // `current` is set whenever a frame is open.
        closed.ok_or_else(bad_format)
    }
}

/// `t[key] = value` as `lua_settable` does it, with its errors for keys a table cannot have.
fn set_field(table: &Table, key: Value, value: Value) -> Result<(), Fault> {
    match key {
        Value::Nil => Err(Fault::plain("table index is nil")),
        Value::Number(n) if n.is_nan() => Err(Fault::plain("table index is NaN")),
        key => Ok(table.raw_set(key, value)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::MultiValue;
    use proptest::prelude::*;

    fn lua() -> Lua {
        crate::libs::test_support::lua_with(open)
    }

    /// The hex of `cmsgpack.pack(<args>)`.
    fn packed(lua: &Lua, args: &str) -> String {
        crate::libs::test_support::packed_hex(lua, "cmsgpack", args)
    }

    /// Runs `code` with the global `input` set to the bytes of `input_hex`.
    fn with_input<T: mlua::FromLuaMulti>(lua: &Lua, input_hex: &str, code: &str) -> T {
        let input = lua.create_string(hex::decode(input_hex).unwrap()).unwrap();
        lua.globals().set("input", input).unwrap();
        lua.load(code).eval().unwrap()
    }

    /// The error `cmsgpack.unpack` raises on `input_hex`, which must be a string.
    fn unpack_error(lua: &Lua, input_hex: &str) -> String {
        with_input(
            lua,
            input_hex,
            "local ok, e = pcall(cmsgpack.unpack, input); assert(not ok); \
             assert(type(e) == 'string'); return e",
        )
    }

    #[test]
    fn redis_can_pack_double() {
        assert_eq!(packed(&lua(), "0.1"), "cb3fb999999999999a");
    }

    #[test]
    fn redis_can_pack_negative_int64() {
        assert_eq!(packed(&lua(), "-1099511627776"), "d3ffffff0000000000");
    }

    #[test]
    fn redis_pack_unpack_smoke_test() {
        lua()
            .load(
                r#"
                local str_lt_32 = string.rep("x", 30)
                local str_lt_255 = string.rep("x", 250)
                local str_lt_65535 = string.rep("x", 65530)
                local str_long = string.rep("x", 100000)
                local array_big = {}
                for i=1, 100000 do array_big[i] = i end
                local map_big = {}
                for i=1, 100000 do map_big[tostring(i)] = i end
                local some_map = {
                    s1=str_lt_32, s2=str_lt_255, s3=str_lt_65535, s4=str_long,
                    d1=0.1, i1=1, i2=250, i3=65530, i4=100000, i5=2^40, i6=-1,
                    i7=-120, i8=-32000, i9=-100000, i10=-3147483648,
                    a1={1, 2, 3, 4, 5},
                    a2={1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18},
                    a3=array_big, m1={a=1, b=2}, m2=map_big, b1=false, b2=true, n=nil
                }
                local encoded = cmsgpack.pack(some_map)
                local decoded = cmsgpack.unpack(encoded)
                assert(table.concat(some_map) == table.concat(decoded))
                for k, v in pairs(some_map) do
                    if type(v) ~= "table" then assert(decoded[k] == v, k) end
                end
                assert(#decoded.a3 == 100000 and decoded.a3[99999] == 99999)
                assert(decoded.m2["77777"] == 77777)
                local offset, decoded_one = cmsgpack.unpack_one(encoded, 0)
                assert(table.concat(some_map) == table.concat(decoded_one))
                assert(offset == -1)

                local encoded_multiple = cmsgpack.pack(str_lt_32, str_lt_255, str_lt_65535, str_long)
                local offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, 0)
                assert(obj == str_lt_32)
                offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
                assert(obj == str_lt_255)
                offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
                assert(obj == str_lt_65535)
                offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
                assert(obj == str_long)
                assert(offset == -1)
                "#,
            )
            .exec()
            .unwrap();
    }

    #[test]
    fn redis_circular_references_stop_at_the_nesting_limit() {
        let (h, deep, y): (String, bool, bool) = lua()
            .load(
                r#"
                local a = {x=nil,y=5}
                local b = {x=a}
                a['x'] = b
                local encoded = cmsgpack.pack(a)
                local h = ""
                for i = 1, #encoded do
                    h = h .. string.format("%02x",string.byte(encoded,i))
                end
                local re = cmsgpack.unpack(encoded)
                assert(re)
                assert(re.x)
                assert(re.x.x.y == re.y)
                assert(re.x.x.x.x.y == re.y)
                assert(re.x.x.x.x.x.x.y == re.y)
                assert(re.x.x.x.x.x.x.x.x.x.x.y == re.y)
                assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.y == re.y)
                assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x)
                assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x == nil)
                return h, re.x.x.x.x.x.x.x.x.y == re.y, re.y == 5
                "#,
            )
            .eval()
            .unwrap();
        let expected = "82a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882\
                        a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a178c0";
        assert_eq!(h, expected);
        assert!(deep && y);
    }

    #[test]
    fn library_table_has_the_functions_and_metadata() {
        let lua = lua();
        let (name, version, kinds): (String, String, String) = lua
            .load(
                "return cmsgpack._NAME, cmsgpack._VERSION, type(cmsgpack.pack) .. \
                 type(cmsgpack.unpack) .. type(cmsgpack.unpack_one) .. type(cmsgpack.unpack_limit)",
            )
            .eval()
            .unwrap();
        assert_eq!(name, "cmsgpack");
        assert_eq!(version, "lua-cmsgpack 0.4.0");
        assert_eq!(kinds, "functionfunctionfunctionfunction");
    }

    #[test]
    fn integers_take_the_smallest_encoding() {
        let lua = lua();
        let cases = [
            ("0", "00"),
            ("127", "7f"),
            ("128", "cc80"),
            ("255", "ccff"),
            ("256", "cd0100"),
            ("65535", "cdffff"),
            ("65536", "ce00010000"),
            ("4294967295", "ceffffffff"),
            ("4294967296", "cf0000000100000000"),
            ("2^53", "cf0020000000000000"),
            ("-1", "ff"),
            ("-32", "e0"),
            ("-33", "d0df"),
            ("-128", "d080"),
            ("-129", "d1ff7f"),
            ("-32768", "d18000"),
            ("-32769", "d2ffff7fff"),
            ("-2147483648", "d280000000"),
            ("-2147483649", "d3ffffffff7fffffff"),
            ("-2^63", "d38000000000000000"),
            ("-0.0", "00"),
        ];
        for (expr, expected) in cases {
            assert_eq!(packed(&lua, expr), expected, "{expr}");
        }
    }

    #[test]
    fn other_numbers_are_float32_when_exact_else_float64() {
        let lua = lua();
        assert_eq!(packed(&lua, "0.5"), "ca3f000000");
        assert_eq!(packed(&lua, "-1.25"), "cabfa00000");
        assert_eq!(packed(&lua, "1/0"), "ca7f800000");
        assert_eq!(packed(&lua, "-1/0"), "caff800000");
        // 2^63 is integral but beyond int64: a float, exact in 32 bits.
        assert_eq!(packed(&lua, "2^63"), "ca5f000000");
        assert_eq!(packed(&lua, "2^64 + 2^20"), "cb43f0000000000100");
        assert_eq!(packed(&lua, "0.1"), "cb3fb999999999999a");
        let nan = packed(&lua, "0/0");
        assert!(nan.starts_with("cb") && nan.len() == 18, "{nan}");
        let is_nan: bool = lua
            .load("local v = cmsgpack.unpack(cmsgpack.pack(0/0)); return v ~= v")
            .eval()
            .unwrap();
        assert!(is_nan);
    }

    #[test]
    fn strings_use_fixstr_str8_str16_str32() {
        let lua = lua();
        assert_eq!(packed(&lua, "''"), "a0");
        assert_eq!(packed(&lua, "'abc'"), "a3616263");
        assert_eq!(packed(&lua, "'\\0\\255'"), "a200ff");
        let header = |n: usize| packed(&lua, &format!("string.rep('x', {n})"))[..10].to_string();
        assert!(header(31).starts_with("bf78"));
        assert!(header(32).starts_with("d92078"));
        assert!(header(255).starts_with("d9ff78"));
        assert!(header(256).starts_with("da010078"));
        assert!(header(65535).starts_with("daffff78"));
        assert_eq!(header(65536), "db00010000");
        // Bytes that are not UTF-8 round-trip unchanged.
        let same: bool = lua
            .load(
                "local s = '' for i = 0, 255 do s = s .. string.char(i) end \
                 return cmsgpack.unpack(cmsgpack.pack(s)) == s",
            )
            .eval()
            .unwrap();
        assert!(same);
    }

    #[test]
    fn booleans_nil_and_unencodable_values() {
        let lua = lua();
        assert_eq!(packed(&lua, "true, false, nil"), "c3c2c0");
        assert_eq!(packed(&lua, "print or function() end"), "c0");
        assert_eq!(packed(&lua, "coroutine.create(function() end)"), "c0");
        assert_eq!(packed(&lua, "{f = function() end}"), "81a166c0");
    }

    #[test]
    fn tables_are_arrays_only_with_keys_1_to_n() {
        let lua = lua();
        assert_eq!(packed(&lua, "{}"), "90");
        assert_eq!(packed(&lua, "{1, 2, 3}"), "93010203");
        assert_eq!(packed(&lua, "{'a', {true}}"), "92a16191c3");
        assert_eq!(packed(&lua, "{a = 1}"), "81a16101");
        assert_eq!(packed(&lua, "{[2] = 2}"), "810202");
        assert_eq!(packed(&lua, "{[0] = 0}"), "810000");
        assert_eq!(packed(&lua, "{[-1] = 0}"), "81ff00");
        assert_eq!(packed(&lua, "{[1.5] = 0}"), "81ca3fc0000000");
        assert_eq!(packed(&lua, "{[2^31] = 0}"), "81ce8000000000");
        assert_eq!(packed(&lua, "{[{}] = 1}"), "819001");
        let array16 = packed(&lua, "{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16}");
        assert!(array16.starts_with("dc00100102"), "{array16}");
        let map16: String = packed(
            &lua,
            "(function() local t = {} for i = 1, 16 do t['k'..i] = i end return t end)()",
        );
        assert!(map16.starts_with("de0010"), "{map16}");
        let big = packed(
            &lua,
            "(function() local t = {} for i = 1, 65536 do t[i] = 0 end return t end)()",
        );
        assert!(big.starts_with("dd00010000"));
        let big_map = packed(
            &lua,
            "(function() local t = {} for i = 1, 65536 do t[-i] = 0 end return t end)()",
        );
        assert!(big_map.starts_with("df00010000"));
    }

    #[test]
    fn pack_concatenates_its_arguments_and_needs_one() {
        let lua = lua();
        assert_eq!(packed(&lua, "1, 'a', {}"), "01a16190");
        let err: String = lua
            .load("local ok, e = pcall(function() return cmsgpack.pack() end) return e")
            .eval()
            .unwrap();
        assert_eq!(
            err,
            "bad argument #0 to 'pack' (MessagePack pack needs input.)"
        );
    }

    #[test]
    fn nesting_limit_packs_deeper_tables_as_nil() {
        let lua = lua();
        // 16 nested arrays are kept; the 17th level is nil.
        let h = packed(
            &lua,
            "(function() local t = {} for i = 1, 20 do t = {t} end return t end)()",
        );
        assert_eq!(h, format!("{}c0", "91".repeat(16)));
        let h = packed(
            &lua,
            "(function() local t = 1 for i = 1, 16 do t = {t} end return t end)()",
        );
        assert_eq!(h, format!("{}01", "91".repeat(16)));
    }

    #[test]
    fn output_is_capped() {
        let lua = lua();
        // A table holding itself 4 times: 4^16 leaves if nothing stopped it.
        let t: Value = lua
            .load("local t = {} for i = 1, 4 do t[i] = t end return t")
            .eval()
            .unwrap();
        let mut encoder = Encoder::new(1000);
        assert!(
            matches!(encoder.value(&t, 0), Err(Fault::Plain(m)) if m == "MessagePack output too large.")
        );
        assert!(encoder.out.len() <= 1000 + 9);
        let mut encoder = Encoder::new(10);
        let s = Value::String(lua.create_string("x".repeat(20)).unwrap());
        assert!(encoder.value(&s, 0).is_err());
    }

    #[test]
    fn unpack_decodes_every_type() {
        let lua = lua();
        let cases: [(&str, &str); 24] = [
            ("00", "0"),
            ("7f", "127"),
            ("ff", "-1"),
            ("e0", "-32"),
            ("cc80", "128"),
            ("cdffff", "65535"),
            ("ceffffffff", "4294967295"),
            ("cf0000000100000000", "4294967296"),
            ("d080", "-128"),
            ("d18000", "-32768"),
            ("d280000000", "-2147483648"),
            ("d3ffffff0000000000", "-1099511627776"),
            ("ca3f000000", "0.5"),
            ("cb3fb999999999999a", "0.1"),
            ("c0", "nil"),
            ("c3", "true"),
            ("c2", "false"),
            ("a3616263", "abc"),
            ("d903616263", "abc"),
            ("da0003616263", "abc"),
            ("db00000003616263", "abc"),
            ("a0", ""),
            // A uint64 from 2^63 up wraps negative, as lua-cmsgpack pushes it signed.
            ("cfffffffffffffffff", "-1"),
            ("cf8000000000000000", "-9.2233720368548e+18"),
        ];
        for (input, expected) in cases {
            let got: String = with_input(&lua, input, "return tostring(cmsgpack.unpack(input))");
            assert_eq!(got, expected, "{input}");
        }
    }

    #[test]
    fn unpack_decodes_containers() {
        let lua = lua();
        let code = "local t = cmsgpack.unpack(input) \
                    return #t, t[1], t[2][1], t[3].a, t[3][1]";
        // [1, [2], {"a": 3, 1: 4}] with every container width.
        let forms = [
            "93 01 9102 82a16103 0104",
            "dc0003 01 dc000102 de0002a16103 0104",
            "dd00000003 01 dd0000000102 df00000002a16103 0104",
        ];
        for form in forms {
            let (n, a, b, c, d): (i64, i64, i64, i64, i64) =
                with_input(&lua, &form.replace(' ', ""), code);
            assert_eq!((n, a, b, c, d), (3, 1, 2, 3, 4), "{form}");
        }
        let empties: (i64, i64) = with_input(
            &lua,
            "9080dc0000de0000",
            "local a, b, c, d = cmsgpack.unpack(input) \
             return select('#', cmsgpack.unpack(input)), #a + #b + #c + #d",
        );
        assert_eq!(empties, (4, 0));
        // nil elements leave holes; nil values leave no key.
        let holes: (Option<i64>, i64, bool) = with_input(
            &lua,
            "93c002c081a178c0",
            "local t, m = cmsgpack.unpack(input) return t[1], t[2], next(m) == nil",
        );
        assert_eq!(holes, (None, 2, true));
    }

    #[test]
    fn unpack_returns_every_value_and_nothing_for_empty_input() {
        let lua = lua();
        let (n, a, b, c): (i64, i64, String, bool) = with_input(
            &lua,
            "01a162c3",
            "local a, b, c = cmsgpack.unpack(input) \
             return select('#', cmsgpack.unpack(input)), a, b, c",
        );
        assert_eq!((n, a, b.as_str(), c), (3, 1, "b", true));
        let n: i64 = with_input(&lua, "", "return select('#', cmsgpack.unpack(input))");
        assert_eq!(n, 0);
        let (n, off): (i64, i64) = with_input(
            &lua,
            "",
            "return select('#', cmsgpack.unpack_one(input)), cmsgpack.unpack_one(input)",
        );
        assert_eq!((n, off), (1, -1));
        // Numbers are strings to unpack, as `luaL_checklstring` makes them: "5" is 0x35.
        let n: i64 = lua.load("return cmsgpack.unpack(5)").eval().unwrap();
        assert_eq!(n, 0x35);
    }

    #[test]
    fn unpack_one_and_limit_walk_the_input() {
        let lua = lua();
        let walk: (i64, i64, i64, i64, i64, i64) = with_input(
            &lua,
            "01a2626302",
            "local o1, a = cmsgpack.unpack_one(input) \
             local o2, b = cmsgpack.unpack_one(input, o1) \
             local o3, c = cmsgpack.unpack_one(input, o2) \
             return o1, a, o2, #b, o3, c",
        );
        assert_eq!(walk, (1, 1, 4, 2, -1, 2));
        let limited: (i64, i64, String, i64) = with_input(
            &lua,
            "01a2626302",
            "local n = select('#', cmsgpack.unpack_limit(input, 2)) \
             local o, a, b = cmsgpack.unpack_limit(input, 2) return n, o, b, a",
        );
        assert_eq!(limited, (3, 4, "bc".into(), 1));
        let rest: (i64, i64, i64) = with_input(
            &lua,
            "01a2626302",
            "local n = select('#', cmsgpack.unpack_limit(input, 10, 1)) \
             local o, _, c = cmsgpack.unpack_limit(input, 10, 1) return n, o, c",
        );
        assert_eq!(rest, (3, -1, 2));
        // Limit 0 and offset 0 decode everything without an offset, as in C; limit 0 with an
        // offset decodes nothing.
        let all: (i64, i64) = with_input(
            &lua,
            "0102",
            "return select('#', cmsgpack.unpack_limit(input, 0, 0)), cmsgpack.unpack_limit(input, 0)",
        );
        assert_eq!(all, (2, 1));
        let none: (i64, i64) = with_input(
            &lua,
            "0102",
            "return select('#', cmsgpack.unpack_limit(input, 0, 1)), cmsgpack.unpack_limit(input, 0, 1)",
        );
        assert_eq!(none, (1, 1));
        let at_end: i64 = with_input(&lua, "0102", "return cmsgpack.unpack_one(input, 2)");
        assert_eq!(at_end, -1);
    }

    #[test]
    fn offsets_and_limits_are_checked() {
        let lua = lua();
        let errors: Vec<String> = with_input(
            &lua,
            "0102",
            "local out = {} \
             for _, f in ipairs({ \
               function() return cmsgpack.unpack_one(input, -1) end, \
               function() return cmsgpack.unpack_limit(input, -2, 1) end, \
               function() return cmsgpack.unpack_one(input, 3) end, \
               function() return cmsgpack.unpack_limit(input) end, \
               function() return cmsgpack.unpack_limit(input, 'x') end, \
               function() return cmsgpack.unpack() end, \
               function() return cmsgpack.unpack_one({}) end, \
             }) do local ok, e = pcall(f) assert(not ok) out[#out + 1] = e end \
             return out",
        );
        assert_eq!(
            errors,
            [
                "Invalid request to unpack with offset of -1 and limit of 1.",
                "Invalid request to unpack with offset of 1 and limit of -2.",
                "Start offset 3 greater than input length 2.",
                "bad argument #2 to 'unpack_limit' (number expected, got no value)",
                "bad argument #2 to 'unpack_limit' (number expected, got string)",
                "bad argument #1 to 'unpack' (string expected, got no value)",
                "bad argument #1 to 'unpack_one' (string expected, got table)",
            ]
        );
    }

    #[test]
    fn truncated_input_is_missing_bytes() {
        let lua = lua();
        let full = "93cd0102db00000003616263de0001a178cb3fb999999999999a";
        assert_eq!(
            with_input::<i64>(&lua, full, "return select('#', cmsgpack.unpack(input))"),
            1
        );
        for cut in (2..full.len()).step_by(2) {
            assert_eq!(
                unpack_error(&lua, &full[..cut]),
                "Missing bytes in input.",
                "{cut}"
            );
        }
        for head in [
            "cc", "cd00", "ce000000", "cf", "d0", "d1", "d2", "d3", "ca", "cb", "d9", "da00",
            "db000000", "dc00", "dd", "de00", "df0000", "a1", "91", "81", "8101",
        ] {
            assert_eq!(
                unpack_error(&lua, head),
                "Missing bytes in input.",
                "{head}"
            );
        }
    }

    #[test]
    fn unknown_types_are_bad_data() {
        let lua = lua();
        // 0xc1, bin 8/16/32, ext 8/16/32, fixext 1/2/4/8/16: not in lua-cmsgpack 0.4.
        for tag in [
            "c1", "c40161", "c5000161", "c6", "c7", "c8", "c9", "d40000", "d5", "d6", "d7", "d8",
        ] {
            assert_eq!(
                unpack_error(&lua, tag),
                "Bad data format in input.",
                "{tag}"
            );
        }
        assert_eq!(unpack_error(&lua, "9201c1"), "Bad data format in input.");
        assert_eq!(unpack_error(&lua, "81c101"), "Bad data format in input.");
    }

    #[test]
    fn huge_declared_lengths_fail_without_allocating() {
        let lua = lua();
        for input in [
            "dfffffffff",
            "ddffffffff",
            "dbffffffff",
            "dbffffffff6162",
            "dfffffffff0101",
            "ddffffffffc0c0c0",
        ] {
            assert_eq!(
                unpack_error(&lua, input),
                "Missing bytes in input.",
                "{input}"
            );
        }
    }

    #[test]
    fn keys_a_table_cannot_have_are_errors() {
        let lua = lua();
        assert_eq!(unpack_error(&lua, "81c001"), "table index is nil");
        let nan = format!("81cb{}01", hex::encode(f64::NAN.to_be_bytes()));
        assert_eq!(unpack_error(&lua, &nan), "table index is NaN");
    }

    #[test]
    fn deep_nesting_is_bounded_by_the_stack_budget() {
        let lua = lua();
        // 3000 nested arrays decode (the C library's stack allows about 4000)...
        let depth: i64 = with_input(
            &lua,
            &format!("{}c3", "91".repeat(3000)),
            "local t, n = cmsgpack.unpack(input), 0 \
             while type(t) == 'table' do t = t[1] n = n + 1 end return n",
        );
        assert_eq!(depth, 3000);
        // ... and nesting beyond fails cleanly instead of recursing.
        for tag in ["91", "81c3"] {
            let err = unpack_error(&lua, &tag.repeat(100_000));
            assert!(
                err.starts_with("stack overflow (too many return values"),
                "{err}"
            );
        }
    }

    #[test]
    fn result_count_is_bounded_by_the_stack_budget() {
        let lua = lua();
        let count = |input: &str, call: &str| -> i64 {
            with_input(&lua, input, &format!("return select('#', {call})"))
        };
        assert_eq!(count(&"01".repeat(7997), "cmsgpack.unpack(input)"), 7997);
        // Strings hold mlua references while decoded: thousands of them must not exhaust those.
        assert_eq!(count(&"a161".repeat(7997), "cmsgpack.unpack(input)"), 7997);
        assert_eq!(count(&"90".repeat(7997), "cmsgpack.unpack(input)"), 7997);
        assert_eq!(
            count(&"01".repeat(7996), "cmsgpack.unpack_limit(input, 10000, 0)"),
            7997
        );
        let overflow = "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)";
        assert_eq!(unpack_error(&lua, &"01".repeat(7998)), overflow);
        let err: String = with_input(
            &lua,
            &"01".repeat(7997),
            "local ok, e = pcall(cmsgpack.unpack_limit, input, 10000, 0) return e",
        );
        assert_eq!(err, overflow);
        let walked: i64 = with_input(
            &lua,
            &"01".repeat(20_000),
            "local off, n = 0, 0 \
             while off ~= -1 do local v off, v = cmsgpack.unpack_one(input, off) n = n + v end \
             return n",
        );
        assert_eq!(walked, 20_000);
    }

    #[test]
    fn many_arguments_and_wide_nesting_hold_few_references() {
        let lua = lua();
        // 7000 string arguments, and a map of 3000 levels each waiting on a string key: each
        // would hold an mlua reference if kept in Rust.
        let n: i64 = lua
            .load(
                "local t = {} for i = 1, 7000 do t[i] = 'k' .. i end \
                 return select('#', cmsgpack.unpack(cmsgpack.pack(unpack(t))))",
            )
            .eval()
            .unwrap();
        assert_eq!(n, 7000);
        let depth: i64 = with_input(
            &lua,
            &format!("{}c3", "81a16b".repeat(3000)),
            "local t, n = cmsgpack.unpack(input), 0 \
             while type(t) == 'table' do t = t.k n = n + 1 end return n",
        );
        assert_eq!(depth, 3000);
    }

    #[test]
    fn errors_are_plain_strings_without_position() {
        let lua = lua();
        let (kind, msg): (String, String) = with_input(
            &lua,
            "c1",
            "local ok, e = pcall(cmsgpack.unpack, input) return type(e), e",
        );
        assert_eq!(
            (kind.as_str(), msg.as_str()),
            ("string", "Bad data format in input.")
        );
        let err = lua
            .load("cmsgpack.unpack('\\193')")
            .exec()
            .unwrap_err()
            .to_string();
        assert!(err.contains("Bad data format in input."), "{err}");
    }

    /// A Lua value to round-trip: no nil inside tables (holes make arrays maps and drop keys)
    /// and no NaN (unequal to itself).
    #[derive(Debug, Clone)]
    enum Model {
        Bool(bool),
        Int(i64),
        Float(f64),
        Str(Vec<u8>),
        Array(Vec<Model>),
        Map(Vec<(String, Model)>),
    }

    fn model() -> impl Strategy<Value = Model> {
        const SAFE: i64 = 1 << 53;
        let leaf = prop_oneof![
            any::<bool>().prop_map(Model::Bool),
            (-SAFE..=SAFE).prop_map(Model::Int),
            any::<i64>().prop_map(|i| Model::Int(i >> 11)),
            any::<f64>()
                .prop_filter("NaN", |f| !f.is_nan())
                .prop_map(Model::Float),
            any::<f32>()
                .prop_filter("NaN", |f| !f.is_nan())
                .prop_map(|f| Model::Float(f64::from(f))),
            prop::collection::vec(any::<u8>(), 0..300).prop_map(Model::Str),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Model::Array),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..8)
                    .prop_map(|m| Model::Map(m.into_iter().collect())),
            ]
        })
    }

    fn to_lua(lua: &Lua, model: &Model) -> Value {
        match model {
            Model::Bool(b) => Value::Boolean(*b),
            Model::Int(i) => Value::Number(*i as f64),
            Model::Float(f) => Value::Number(*f),
            Model::Str(s) => Value::String(lua.create_string(s).unwrap()),
            Model::Array(items) => {
                let t = lua.create_table().unwrap();
                for (i, item) in items.iter().enumerate() {
                    t.raw_set(i + 1, to_lua(lua, item)).unwrap();
                }
                Value::Table(t)
            }
            Model::Map(entries) => {
                let t = lua.create_table().unwrap();
                for (k, v) in entries {
                    t.raw_set(k.as_str(), to_lua(lua, v)).unwrap();
                }
                Value::Table(t)
            }
        }
    }

    const DEEP_EQUAL: &str = r#"
        local function eq(a, b)
          if type(a) ~= type(b) then return false end
          if type(a) ~= 'table' then return a == b end
          for k, v in pairs(a) do if not eq(v, b[k]) then return false end end
          for k in pairs(b) do if a[k] == nil then return false end end
          return true
        end
        return function(values, ...)
          local n = select('#', ...)
          if n ~= #values then return false end
          for i = 1, n do if not eq(values[i], (select(i, ...))) then return false end end
          return true
        end
    "#;

    proptest! {
        #[test]
        fn random_values_round_trip(values in prop::collection::vec(model(), 1..4)) {
            let lua = lua();
            let same: Function = lua.load(DEEP_EQUAL).eval().unwrap();
            let lib: Table = lua.globals().get("cmsgpack").unwrap();
            let pack: Function = lib.get("pack").unwrap();
            let unpack: Function = lib.get("unpack").unwrap();
            let args: MultiValue = values.iter().map(|m| to_lua(&lua, m)).collect();
            let originals = lua.create_sequence_from(args.iter().cloned()).unwrap();
            let encoded: mlua::LuaString = pack.call(args).unwrap();
            let decoded: MultiValue = unpack.call(encoded).unwrap();
            prop_assert!(same.call::<bool>((originals, decoded)).unwrap());
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let lua = lua();
            // Called from Rust, not through Lua's `pcall`: Lua 5.1's `pcall` pushes its
            // status past a frame that many results filled, which the API checks of a debug
            // build abort on (a release build's stack has the slack).
            let unpack: Function = lua.load("return cmsgpack.unpack").eval().unwrap();
            if let Err(e) = unpack.call::<MultiValue>(lua.create_string(&bytes).unwrap()) {
                prop_assert!(matches!(e, mlua::Error::RuntimeError(_) | mlua::Error::CallbackError { .. }), "{e:?}");
            }
        }
    }
}
