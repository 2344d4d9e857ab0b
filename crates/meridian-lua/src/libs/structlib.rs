//! The `struct` library of Redis's Lua environment: binary packing of numbers and strings
//! driven by a format string, with the behaviour of Roberto Ierusalimschy's `struct` library
//! as Redis 7.0 bundles it (`deps/lua/src/lua_struct.c`).
//!
//! Scripts see a global table `struct` with:
//!
//! - `struct.pack(fmt, ...)`: the arguments packed into one string;
//! - `struct.unpack(fmt, s [, init])`: the values read from `s` (from byte `init`, 1-based),
//!   followed by the position of the first byte not read;
//! - `struct.size(fmt)`: the length of what `pack` makes of `fmt`.
//!
//! The format language: `<` little endian, `>` big endian, `!n` maximum alignment `n` (a power
//! of two; `!` alone is the platform's strictest), `x` a zero byte, `b`/`B` `h`/`H` `l`/`L` the
//! C `char`, `short` and `long` (lower case signed), `T` a `size_t`, `i`/`I` an `int` or, as
//! `in`/`In`, an integer of `n` bytes (at most 32), `f`/`d` a float and a double, `s` a
//! zero-terminated string, `cn` `n` bytes of a string (`c0`: the whole string when packing, the
//! length read just before when unpacking), and spaces, ignored. Sizes are those of the C ABI
//! this is built for, so packed strings match Redis's on the same platform byte for byte.
//!
//! Guarantees, whatever the script passes: no panic, no read outside the data string, no
//! allocation sized by a count the input merely claims (`cn` is checked against the bytes
//! actually there, `in` is at most 32), no arithmetic overflow (counts beyond `INT_MAX` are
//! "integral size overflow", as in Redis's hardened copy), at most [`STACK_SLOTS`] results (as
//! the C library, "stack overflow (too many results)"). However many values pass, the Rust side
//! holds a bounded number of mlua references (Lua 5.1 leaves mlua about 8000 for the whole
//! interpreter): arguments and results travel in tables. Errors are raised in Lua as plain
//! strings with the C library's messages (`bad argument #2 to 'unpack' (data string too
//! short)`, ...), so `pcall` sees what it would see in Redis.
//!
//! Differences from the C library, all on inputs where it is wrong or undefined: a `string too
//! short` error names the argument at fault (the C code names the next one); an `init` below 1
//! is always refused (the C code wraps a negative one around); an integer of 9 to 31 bytes
//! unpacks from its low 8 bytes with the sign of bit 63 (the C code shifts by more than the
//! width, which is undefined); a `c0` length that is not a valid size is `data string too
//! short`; results are returned through Lua's `unpack`, whose own arguments take stack slots,
//! so the largest result count is a few values below the C library's.

use std::ffi::{c_int, c_long, c_short};

use mlua::{Function, Lua, Table, Value};

use super::raise::{Args, Fault, LibFn, Results, raising_function, to_number};

/// Largest integer `i[n]`/`I[n]` may name (MAXINTSIZE): bigger counts are refused before any
/// buffer is sized by them.
const MAX_INT_SIZE: usize = 32;

/// Alignment `!` sets without a number (MAXALIGN): a `double`'s alignment, the strictest of
/// the C types the library knows, or the size of an `int` if larger.
const MAX_ALIGN: usize = {
    let double = std::mem::align_of::<f64>();
    let int = std::mem::size_of::<c_int>();
    if double > int { double } else { int }
};

/// Values `unpack` may return: LUAI_MAXCSTACK (8000, the stack a C function may use in Lua
/// 5.1) less the three arguments of the `unpack` that returns them. The C library fails with
/// "too many results" near there too.
const STACK_SLOTS: usize = 7997;

/// Installs the library as a global table.
pub(crate) fn open(lua: &Lua) -> mlua::Result<()> {
    const FUNCTIONS: [(&str, LibFn); 3] = [("pack", pack), ("unpack", unpack), ("size", size)];
    let lib: Table = lua.create_table()?;
    for (name, body) in FUNCTIONS {
        let function: Function = raising_function(lua, "struct", name, body)?;
        lib.raw_set(name, function)?;
    }
    lua.globals().raw_set("struct", lib)
}

// ---------------------------------------------------------------------------------------------
// The format language.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Endian {
    Big,
    Little,
}

impl Endian {
    const NATIVE: Endian = if cfg!(target_endian = "big") {
        Endian::Big
    } else {
        Endian::Little
    };
}

/// What the control options (`<`, `>`, `!`) have set so far.
struct Settings {
    endian: Endian,
    align: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            endian: Endian::NATIVE,
            align: 1,
        }
    }
}

/// A format string being read option by option.
struct Format<'a> {
    rest: &'a [u8],
}

impl<'a> Format<'a> {
    /// The C library sees the format as a C string: it ends at the first NUL byte.
    fn new(fmt: &'a [u8]) -> Self {
        let end = fmt.iter().position(|&b| b == 0).unwrap_or(fmt.len());
        Format { rest: &fmt[..end] }
    }

    fn next_option(&mut self) -> Option<u8> {
        let (&opt, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(opt)
    }

    /// The decimal count following an option, or `default` if none; counts that do not fit a
    /// C `int` are refused rather than wrapped.
    fn count(&mut self, default: usize) -> Result<usize, Fault> {
        let digits = self.rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return Ok(default);
        }
        let (number, rest) = self.rest.split_at(digits);
        self.rest = rest;
        number
            .iter()
            .try_fold(c_int::default(), |acc, &d| {
                acc.checked_mul(10)?.checked_add(c_int::from(d - b'0'))
            })
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| Fault::plain("integral size overflow"))
    }
}

/// The size in bytes of option `opt`, reading its count if it takes one; 0 for options
/// without a fixed size or that are not data (`s`, controls, unknown letters).
fn option_size(opt: u8, fmt: &mut Format<'_>) -> Result<usize, Fault> {
    use std::mem::size_of;
    Ok(match opt {
        b'b' | b'B' | b'x' => 1,
        b'h' | b'H' => size_of::<c_short>(),
        b'l' | b'L' => size_of::<c_long>(),
        b'T' => size_of::<usize>(),
        b'f' => size_of::<f32>(),
        b'd' => size_of::<f64>(),
        b'c' => fmt.count(1)?,
        b'i' | b'I' => {
            let size = fmt.count(size_of::<c_int>())?;
            if size > MAX_INT_SIZE {
                return Err(Fault::plain(format!(
                    "integral size {size} is larger than limit of {MAX_INT_SIZE}"
                )));
            }
            size
        }
        _ => 0,
    })
}

/// Zero bytes to insert before an item of `size` bytes at offset `len`, so that it sits at a
/// multiple of its size capped by the alignment in force. Strings (`c`) are never aligned.
fn padding(len: usize, settings: &Settings, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(settings.align);
    // `size` is at least 1 and `len & (size - 1)` below it: no underflow. For sizes that are
    // not powers of two (`i3`) this is the C library's formula, odd as its result is.
    (size - (len & (size - 1))) & (size - 1)
}

/// Applies a non-data option: spaces, endianness, alignment; anything else is invalid.
fn control(opt: u8, fmt: &mut Format<'_>, settings: &mut Settings) -> Result<(), Fault> {
    match opt {
        b' ' => {}
        b'>' => settings.endian = Endian::Big,
        b'<' => settings.endian = Endian::Little,
        b'!' => {
            let align = fmt.count(MAX_ALIGN)?;
            if !align.is_power_of_two() {
                return Err(Fault::plain(format!(
                    "alignment {align} is not a power of 2"
                )));
            }
            settings.align = align;
        }
        _ => {
            // The option byte goes into the message raw, as `%c` puts it.
            let mut msg = b"invalid format option '".to_vec();
            msg.push(opt);
            msg.push(b'\'');
            return Err(Fault::arg(1, msg));
        }
    }
    Ok(())
}

fn is_integer_option(opt: u8) -> bool {
    matches!(
        opt,
        b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I'
    )
}

// ---------------------------------------------------------------------------------------------
// Integers and floats.

/// Appends `n` as a `size`-byte integer. Like the C library it computes in 64 bits: negative
/// numbers in two's complement, bytes beyond the eighth zero.
fn put_integer(out: &mut Vec<u8>, n: f64, endian: Endian, size: usize) {
    // `as` truncates toward zero like the C casts, and saturates where they are undefined.
    let value = if n < 0.0 { n as i64 as u64 } else { n as u64 };
    let mut field = [0u8; MAX_INT_SIZE];
    let low = size.min(8);
    field[..low].copy_from_slice(&value.to_le_bytes()[..low]);
    let field = &mut field[..size];
    if endian == Endian::Big {
        field.reverse();
    }
    out.extend_from_slice(field);
}

/// Reads a `bytes.len()`-byte integer as a Lua number. Bytes beyond the low eight shift out
/// of the 64-bit accumulator, as in the C library; signed values extend their top bit.
fn get_integer(bytes: &[u8], endian: Endian, signed: bool) -> f64 {
    let push = |acc: u64, &b: &u8| (acc << 8) | u64::from(b);
    let value = match endian {
        Endian::Big => bytes.iter().fold(0, push),
        Endian::Little => bytes.iter().rev().fold(0, push),
    };
    if !signed {
        return value as f64;
    }
    let bits = bytes.len() * 8;
    let signed = match bits {
        0 => 0,
        1..=63 => {
            // Move the field's top bit to bit 63, then shift back arithmetically.
            let shift = 64 - bits;
            ((value << shift) as i64) >> shift
        }
        _ => value as i64,
    };
    signed as f64
}

/// Appends `n` as a float or double in `endian` byte order.
fn put_float(out: &mut Vec<u8>, n: f64, endian: Endian, double: bool) {
    match (double, endian) {
        (true, Endian::Big) => out.extend_from_slice(&n.to_be_bytes()),
        (true, Endian::Little) => out.extend_from_slice(&n.to_le_bytes()),
        // `as` rounds to nearest like the C conversion (and gives ±inf out of range).
        (false, Endian::Big) => out.extend_from_slice(&(n as f32).to_be_bytes()),
        (false, Endian::Little) => out.extend_from_slice(&(n as f32).to_le_bytes()),
    }
}

/// Reads a float (4 bytes) or double (8 bytes) in `endian` byte order.
fn get_float(bytes: &[u8], endian: Endian) -> Option<f64> {
    if let Ok(b) = <[u8; 8]>::try_from(bytes) {
        return Some(match endian {
            Endian::Big => f64::from_be_bytes(b),
            Endian::Little => f64::from_le_bytes(b),
        });
    }
    let b = <[u8; 4]>::try_from(bytes).ok()?;
    Some(f64::from(match endian {
        Endian::Big => f32::from_be_bytes(b),
        Endian::Little => f32::from_le_bytes(b),
    }))
}

// ---------------------------------------------------------------------------------------------
// struct.pack

/// `struct.pack(fmt, ...)`.
fn pack(lua: &Lua, args: &Args) -> Result<Results, Fault> {
    let fmt = args.string(lua, 1)?;
    let fmt = fmt.as_bytes();
    let mut format = Format::new(&fmt);
    let mut settings = Settings::default();
    let mut out = Vec::new();
    let mut next_arg = 2;
    while let Some(opt) = format.next_option() {
        let size = option_size(opt, &mut format)?;
        out.resize(out.len() + padding(out.len(), &settings, opt, size), 0);
        match opt {
            _ if is_integer_option(opt) => {
                let n = args.number(lua, next_arg)?;
                put_integer(&mut out, n, settings.endian, size);
                next_arg += 1;
            }
            b'x' => out.push(0),
            b'f' | b'd' => {
                let n = args.number(lua, next_arg)?;
                put_float(&mut out, n, settings.endian, opt == b'd');
                next_arg += 1;
            }
            b'c' | b's' => {
                pack_string(lua, args, next_arg, opt, size, &mut out)?;
                next_arg += 1;
            }
            _ => control(opt, &mut format, &mut settings)?,
        }
    }
    let mut results = Results::new(lua)?;
    results.push(Value::String(lua.create_string(out)?))?;
    Ok(results)
}

/// Appends argument `pos` for `s` (whole, then a NUL) or `cn` (its first `n` bytes; all of
/// it for `c0`). The string must have those bytes: nothing is padded or allocated for them.
fn pack_string(
    lua: &Lua,
    args: &Args,
    pos: usize,
    opt: u8,
    size: usize,
    out: &mut Vec<u8>,
) -> Result<(), Fault> {
    let s = args.string(lua, pos)?;
    let s = s.as_bytes();
    let size = if size == 0 { s.len() } else { size };
    let bytes = s
        .get(..size)
        .ok_or_else(|| Fault::arg(pos, "string too short"))?;
    out.extend_from_slice(bytes);
    if opt == b's' {
        out.push(0);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// struct.unpack

/// `struct.unpack(fmt, s [, init])`.
fn unpack(lua: &Lua, args: &Args) -> Result<Results, Fault> {
    let fmt = args.string(lua, 1)?;
    let fmt = fmt.as_bytes();
    let data = args.string(lua, 2)?;
    let data = data.as_bytes();
    let init = args.opt_integer(lua, 3, 1)?;
    if init < 1 {
        return Err(Fault::arg(3, "offset must be 1 or greater"));
    }
    // Positions are 0-based from here.
    let mut pos = usize::try_from(init - 1).unwrap_or(usize::MAX);
    let mut format = Format::new(&fmt);
    let mut settings = Settings::default();
    let mut results = Results::new(lua)?;
    while let Some(opt) = format.next_option() {
        let size = option_size(opt, &mut format)?;
        pos = pos.saturating_add(padding(pos, &settings, opt, size));
        // Every option, controls included, must start within the data.
        let bytes = field(&data, pos, size)?;
        // Room for this item and the final position.
        if results.len + 2 > STACK_SLOTS {
            return Err(Fault::plain("stack overflow (too many results)"));
        }
        pos += match opt {
            _ if is_integer_option(opt) => {
                let signed = opt.is_ascii_lowercase();
                let n = get_integer(bytes, settings.endian, signed);
                results.push(Value::Number(n))?;
                size
            }
            b'x' => size,
            b'f' | b'd' => {
                let n = get_float(bytes, settings.endian).ok_or_else(too_short)?;
                results.push(Value::Number(n))?;
                size
            }
            b'c' => unpack_chars(lua, &data, pos, size, &mut results)?,
            b's' => unpack_zstring(lua, &data, pos, &mut results)?,
            _ => {
                control(opt, &mut format, &mut settings)?;
                0
            }
        };
    }
    // The position after the last byte read, 1-based.
    results.push(Value::Number(pos.saturating_add(1) as f64))?;
    Ok(results)
}

fn too_short() -> Fault {
    Fault::arg(2, "data string too short")
}

/// The `size` bytes of `data` at `pos`, or "data string too short".
fn field(data: &[u8], pos: usize, size: usize) -> Result<&[u8], Fault> {
    let end = pos.checked_add(size).ok_or_else(too_short)?;
    data.get(pos..end).ok_or_else(too_short)
}

/// Unpacks `cn`: `n` bytes, or for `c0` as many as the previous result says (which it
/// replaces). Returns the bytes read.
fn unpack_chars(
    lua: &Lua,
    data: &[u8],
    pos: usize,
    size: usize,
    results: &mut Results,
) -> Result<usize, Fault> {
    let size = if size == 0 {
        previous_size(lua, results)?
    } else {
        size
    };
    let bytes = field(data, pos, size)?;
    results.push(Value::String(lua.create_string(bytes)?))?;
    Ok(size)
}

/// For `c0`: takes the previous result as a length. Like `lua_isnumber`, a numeric string
/// counts; a length that is no valid size cannot be in the data.
fn previous_size(lua: &Lua, results: &mut Results) -> Result<usize, Fault> {
    let needs_size = || Fault::plain("format 'c0' needs a previous size");
    let n = match results.len {
        0 => None,
        last => to_number(lua, results.values.raw_get(last)?)?,
    };
    let n = n.ok_or_else(needs_size)?.trunc();
    results.pop()?;
    if !(0.0..u64::MAX as f64).contains(&n) {
        return Err(too_short());
    }
    usize::try_from(n as u64).map_err(|_| too_short())
}

/// Unpacks `s`: the bytes up to the next NUL, which is consumed too. Returns the bytes read.
fn unpack_zstring(
    lua: &Lua,
    data: &[u8],
    pos: usize,
    results: &mut Results,
) -> Result<usize, Fault> {
    let rest = data.get(pos..).unwrap_or_default();
    let len = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| Fault::plain("unfinished string in data"))?;
    results.push(Value::String(lua.create_string(&rest[..len])?))?;
    Ok(len + 1)
}

// ---------------------------------------------------------------------------------------------
// struct.size

/// `struct.size(fmt)`. Like the C library it ignores unknown letters and digits (only other
/// bytes go through the control options).
fn size(lua: &Lua, args: &Args) -> Result<Results, Fault> {
    let fmt = args.string(lua, 1)?;
    let fmt = fmt.as_bytes();
    let mut format = Format::new(&fmt);
    let mut settings = Settings::default();
    let mut total: usize = 0;
    let overflow = || Fault::plain("format size overflow");
    while let Some(opt) = format.next_option() {
        let size = option_size(opt, &mut format)?;
        total = total
            .checked_add(padding(total, &settings, opt, size))
            .ok_or_else(overflow)?;
        if opt == b's' {
            return Err(Fault::arg(1, "option 's' has no fixed size"));
        }
        if opt == b'c' && size == 0 {
            return Err(Fault::arg(1, "option 'c0' has no fixed size"));
        }
        if !opt.is_ascii_alphanumeric() {
            control(opt, &mut format, &mut settings)?;
        }
        total = total.checked_add(size).ok_or_else(overflow)?;
    }
    let mut results = Results::new(lua)?;
    results.push(Value::Number(total as f64))?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lua() -> Lua {
        crate::libs::test_support::lua_with(open)
    }

    /// The hex of `struct.pack(<args>)`.
    fn packed(lua: &Lua, args: &str) -> String {
        crate::libs::test_support::packed_hex(lua, "struct", args)
    }

    /// `struct.unpack(<args>)`'s results, through `tostring`, joined by spaces.
    fn unpacked(lua: &Lua, args: &str) -> String {
        let code = format!(
            "local r = {{struct.unpack({args})}} \
             for i = 1, #r do r[i] = tostring(r[i]) end return table.concat(r, ' ')"
        );
        lua.load(code).eval().unwrap()
    }

    /// The error `code` raises, which must be a string.
    fn error_of(lua: &Lua, code: &str) -> String {
        let code = format!(
            "local ok, e = pcall(function() return {code} end) \
             assert(not ok, 'no error') assert(type(e) == 'string') return e"
        );
        lua.load(code).eval().unwrap()
    }

    #[test]
    fn integer_options_have_c_sizes() {
        let lua = lua();
        let size = |fmt: &str| -> i64 {
            lua.load(format!("return struct.size('{fmt}')"))
                .eval()
                .unwrap()
        };
        assert_eq!(size("b"), 1);
        assert_eq!(size("B"), 1);
        assert_eq!(size("h"), 2);
        assert_eq!(size("H"), 2);
        assert_eq!(size("i"), 4);
        assert_eq!(size("I"), 4);
        assert_eq!(size("l"), std::mem::size_of::<c_long>() as i64);
        assert_eq!(size("T"), std::mem::size_of::<usize>() as i64);
        assert_eq!(size("f"), 4);
        assert_eq!(size("d"), 8);
        assert_eq!(size("x"), 1);
        assert_eq!(size("c7"), 7);
        assert_eq!(size("c"), 1);
        assert_eq!(size("i3 I7 i32"), 42);
        assert_eq!(size(""), 0);
        assert_eq!(size("<>"), 0);
    }

    #[test]
    fn pack_integers_in_either_byte_order() {
        let lua = lua();
        assert_eq!(packed(&lua, "'>I2', 258"), "0102");
        assert_eq!(packed(&lua, "'<I2', 258"), "0201");
        assert_eq!(packed(&lua, "'>i4', -2"), "fffffffe");
        assert_eq!(packed(&lua, "'<i4', -2"), "feffffff");
        assert_eq!(packed(&lua, "'<b B', -1, 255"), "ffff");
        assert_eq!(packed(&lua, "'>h H', -2, 65535"), "fffeffff");
        assert_eq!(packed(&lua, "'>i3', 0x010203"), "010203");
        assert_eq!(
            packed(&lua, "'>l', -1"),
            "ff".repeat(std::mem::size_of::<c_long>())
        );
        assert_eq!(
            packed(&lua, "'>T', 1"),
            format!("{}01", "00".repeat(std::mem::size_of::<usize>() - 1))
        );
        // Out-of-range values keep their low bytes; fractions truncate toward zero.
        assert_eq!(packed(&lua, "'>B', 257"), "01");
        assert_eq!(packed(&lua, "'>b', 2.9"), "02");
        assert_eq!(packed(&lua, "'>b', -2.9"), "fe");
        assert_eq!(packed(&lua, "'>I8', 2^53"), "0020000000000000");
        // Numeric strings are numbers.
        assert_eq!(packed(&lua, "'>I2', '258'"), "0102");
        // The default byte order is the machine's.
        let native = if cfg!(target_endian = "little") {
            "0201"
        } else {
            "0102"
        };
        assert_eq!(packed(&lua, "'H', 258"), native);
    }

    #[test]
    fn integers_wider_than_64_bits_zero_fill_like_c() {
        let lua = lua();
        assert_eq!(
            packed(&lua, "'<i16', -1"),
            format!("{}{}", "ff".repeat(8), "00".repeat(8))
        );
        assert_eq!(packed(&lua, "'>I10', 1"), format!("{}01", "00".repeat(9)));
        assert_eq!(packed(&lua, "'<i0', 5"), "");
        assert_eq!(unpacked(&lua, "'<i16', struct.pack('<i16', -1)"), "-1 17");
        assert_eq!(unpacked(&lua, "'>i32', struct.pack('>i32', -5)"), "-5 33");
        assert_eq!(
            unpacked(&lua, "'>I12', struct.pack('>I12', 2^40)"),
            "1099511627776 13"
        );
        assert_eq!(unpacked(&lua, "'i0', ''"), "0 1");
    }

    #[test]
    fn unpack_integers_sign_extend() {
        let lua = lua();
        assert_eq!(unpacked(&lua, "'>i2', '\\255\\254'"), "-2 3");
        assert_eq!(unpacked(&lua, "'>I2', '\\255\\254'"), "65534 3");
        assert_eq!(unpacked(&lua, "'<i3', '\\255\\255\\127'"), "8388607 4");
        assert_eq!(unpacked(&lua, "'<i3', '\\0\\0\\128'"), "-8388608 4");
        assert_eq!(unpacked(&lua, "'b B', '\\128\\128'"), "-128 128 3");
        assert_eq!(
            unpacked(&lua, "'<i8', struct.pack('<i8', -2^53)"),
            "-9.007199254741e+15 9"
        );
        assert_eq!(
            unpacked(&lua, "'>I8', '\\255\\255\\255\\255\\255\\255\\255\\255'"),
            "1.844674407371e+19 9"
        );
    }

    #[test]
    fn floats_and_doubles() {
        let lua = lua();
        assert_eq!(packed(&lua, "'>f', 1.5"), "3fc00000");
        assert_eq!(packed(&lua, "'<f', 1.5"), "0000c03f");
        assert_eq!(packed(&lua, "'>d', 0.1"), "3fb999999999999a");
        assert_eq!(packed(&lua, "'<d', -2"), "00000000000000c0");
        assert_eq!(packed(&lua, "'>f', 1e300"), "7f800000");
        assert_eq!(
            unpacked(&lua, "'>f', struct.pack('>f', 0.1)"),
            "0.10000000149012 5"
        );
        assert_eq!(
            unpacked(&lua, "'<d >d', struct.pack('<d >d', 0.1, -1/0)"),
            "0.1 -inf 17"
        );
    }

    #[test]
    fn strings_fixed_whole_and_zero_terminated() {
        let lua = lua();
        assert_eq!(packed(&lua, "'c3', 'abcdef'"), "616263");
        assert_eq!(packed(&lua, "'c0', 'abc'"), "616263");
        assert_eq!(packed(&lua, "'s', 'ab'"), "616200");
        assert_eq!(packed(&lua, "'s', 'a\\0b'"), "61006200");
        assert_eq!(packed(&lua, "'c2', 12"), "3132");
        assert_eq!(unpacked(&lua, "'c3 c2', 'abcdef'"), "abc de 6");
        assert_eq!(unpacked(&lua, "'s s', 'ab\\0\\0z'"), "ab  5");
        // `c0` reads as many bytes as the number just read, which it replaces.
        assert_eq!(unpacked(&lua, "'B c0 B', '\\3abc\\9'"), "abc 9 6");
        assert_eq!(unpacked(&lua, "'c1 c0', '3abcd'"), "abc 5");
        assert_eq!(
            unpacked(&lua, "'>I2 c0', struct.pack('>I2 c0', 2, 'xy')"),
            "xy 5"
        );
        assert_eq!(unpacked(&lua, "'x c1 x', 'abc'"), "b 4");
        // Bytes that are not UTF-8 pass unchanged.
        let same: bool = lua
            .load("local s = '\\255\\0\\128' return struct.unpack('c3', struct.pack('c3', s)) == s")
            .eval()
            .unwrap();
        assert!(same);
    }

    #[test]
    fn alignment_pads_to_the_item_size_capped_by_the_setting() {
        let lua = lua();
        assert_eq!(packed(&lua, "'>!4 b i4', 1, 2"), "0100000000000002");
        assert_eq!(packed(&lua, "'>!2 b i4', 1, 2"), "010000000002");
        assert_eq!(packed(&lua, "'>b i4', 1, 2"), "0100000002");
        assert_eq!(
            packed(&lua, "'>! b d', 1, 0"),
            format!("01{}", "00".repeat(15))
        );
        assert_eq!(packed(&lua, "'!4 b c3', 1, 'abc'"), "01616263");
        assert_eq!(packed(&lua, "'!4 b x h', 1, 2").len(), 8);
        let (a, b): (i64, i64) = lua
            .load("return struct.size('!4 b i4'), struct.size('! b d b')")
            .eval()
            .unwrap();
        assert_eq!((a, b), (8, 17));
        assert_eq!(
            unpacked(&lua, "'!4 b i4', struct.pack('!4 b i4', 7, -9)"),
            "7 -9 9"
        );
    }

    #[test]
    fn unpack_starts_at_init_and_returns_the_next_position() {
        let lua = lua();
        assert_eq!(unpacked(&lua, "'b', 'abc', 2"), "98 3");
        assert_eq!(unpacked(&lua, "'b', 'abc', 3"), "99 4");
        assert_eq!(unpacked(&lua, "'', 'abc', 4"), "4");
        assert_eq!(unpacked(&lua, "'', 'abc', 1000"), "1000");
        assert_eq!(unpacked(&lua, "'b', 'abc', 2.7"), "98 3");
        assert_eq!(unpacked(&lua, "' b', 'abc', '3'"), "99 4");
    }

    #[test]
    fn formats_end_at_a_nul_byte_like_c_strings() {
        let lua = lua();
        assert_eq!(packed(&lua, "'b\\0z', 1"), "01");
        let size: i64 = lua.load("return struct.size('i\\0s')").eval().unwrap();
        assert_eq!(size, 4);
    }

    #[test]
    fn bad_formats_are_errors() {
        let lua = lua();
        let cases = [
            (
                "struct.pack('z', 1)",
                "bad argument #1 to 'pack' (invalid format option 'z')",
            ),
            (
                "struct.unpack('bq', 'ab')",
                "bad argument #1 to 'unpack' (invalid format option 'q')",
            ),
            (
                "struct.pack('b5', 1)",
                "bad argument #1 to 'pack' (invalid format option '5')",
            ),
            (
                "struct.pack('i33', 1)",
                "integral size 33 is larger than limit of 32",
            ),
            (
                "struct.unpack('I64', '')",
                "integral size 64 is larger than limit of 32",
            ),
            ("struct.size('i99999999999')", "integral size overflow"),
            ("struct.pack('c2147483648', '')", "integral size overflow"),
            ("struct.pack('!3 b', 1)", "alignment 3 is not a power of 2"),
            ("struct.pack('!0 b', 1)", "alignment 0 is not a power of 2"),
            (
                "struct.size('s')",
                "bad argument #1 to 'size' (option 's' has no fixed size)",
            ),
            (
                "struct.size('c0')",
                "bad argument #1 to 'size' (option 'c0' has no fixed size)",
            ),
            (
                "struct.size('?')",
                "bad argument #1 to 'size' (invalid format option '?')",
            ),
        ];
        for (code, expected) in cases {
            assert_eq!(error_of(&lua, code), expected, "{code}");
        }
        // The option byte is quoted raw, not as UTF-8.
        let raw: mlua::LuaString = lua
            .load("local ok, e = pcall(struct.pack, '\\200') return e")
            .eval()
            .unwrap();
        assert_eq!(
            &*raw.as_bytes(),
            b"bad argument #1 to 'pack' (invalid format option '\xc8')"
        );
        // `size` skips letters it does not know, as the C library does.
        let size: i64 = lua.load("return struct.size('zb')").eval().unwrap();
        assert_eq!(size, 1);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let lua = lua();
        let cases = [
            (
                "struct.pack()",
                "bad argument #1 to 'pack' (string expected, got no value)",
            ),
            (
                "struct.pack('b')",
                "bad argument #2 to 'pack' (number expected, got no value)",
            ),
            (
                "struct.pack('b b', 1, {})",
                "bad argument #3 to 'pack' (number expected, got table)",
            ),
            (
                "struct.pack('d', 'x')",
                "bad argument #2 to 'pack' (number expected, got string)",
            ),
            (
                "struct.pack('s', nil)",
                "bad argument #2 to 'pack' (string expected, got nil)",
            ),
            (
                "struct.pack('c5', 'abc')",
                "bad argument #2 to 'pack' (string too short)",
            ),
            (
                "struct.unpack('b')",
                "bad argument #2 to 'unpack' (string expected, got no value)",
            ),
            (
                "struct.unpack('b', 'a', 0)",
                "bad argument #3 to 'unpack' (offset must be 1 or greater)",
            ),
            (
                "struct.unpack('b', 'a', -5)",
                "bad argument #3 to 'unpack' (offset must be 1 or greater)",
            ),
            (
                "struct.unpack('b', 'a', true)",
                "bad argument #3 to 'unpack' (number expected, got boolean)",
            ),
            (
                "struct.size(nil)",
                "bad argument #1 to 'size' (string expected, got nil)",
            ),
        ];
        for (code, expected) in cases {
            assert_eq!(error_of(&lua, code), expected, "{code}");
        }
    }

    #[test]
    fn data_too_short_and_hostile_sizes_are_errors() {
        let lua = lua();
        let too_short = "bad argument #2 to 'unpack' (data string too short)";
        let cases = [
            "struct.unpack('i4', 'abc')",
            "struct.unpack('b', '')",
            "struct.unpack('d', string.rep('x', 7))",
            "struct.unpack('c4', 'abc')",
            "struct.unpack('b b', 'a')",
            "struct.unpack('b', 'abc', 4)",
            "struct.unpack('<', 'abc', 5)",
            "struct.unpack('i4', 'abcd', 2^53)",
            "struct.unpack('b', 'abc', 2^63)",
            "struct.unpack('c2147483647', 'x')",
            "struct.unpack('i4 c2147483647', 'abcdefgh')",
            "struct.unpack('!8 b d', string.rep('x', 15))",
            // `c0` lengths that cannot be in the data.
            "struct.unpack('b c0', '\\5abc')",
            "struct.unpack('c3 c0', '1e9xyz')",
            "struct.unpack('c2 c0', '-1xyz')",
            "struct.unpack('>d c0', struct.pack('>d', 0/0))",
            "struct.unpack('>d c0', struct.pack('>d', 2^70))",
        ];
        for code in cases {
            assert_eq!(error_of(&lua, code), too_short, "{code}");
        }
        assert_eq!(
            error_of(&lua, "struct.unpack('c0', 'abc')"),
            "format 'c0' needs a previous size"
        );
        assert_eq!(
            error_of(&lua, "struct.unpack('c1 c0', 'abc')"),
            "format 'c0' needs a previous size"
        );
        assert_eq!(
            error_of(&lua, "struct.unpack('s', 'abc')"),
            "unfinished string in data"
        );
        assert_eq!(
            error_of(&lua, "struct.unpack('b s', 'a')"),
            "unfinished string in data"
        );
    }

    #[test]
    fn result_count_is_bounded() {
        let lua = lua();
        // Thousands of string results must not exhaust mlua's references either.
        let n: i64 = lua
            .load(
                "return select('#', struct.unpack(string.rep('c1', 7996), string.rep('x', 7996)))",
            )
            .eval()
            .unwrap();
        assert_eq!(n, 7997);
        assert_eq!(
            error_of(
                &lua,
                "struct.unpack(string.rep('b', 7997), string.rep('x', 7997))"
            ),
            "stack overflow (too many results)"
        );
        let packed: i64 = lua
            .load(
                "local t = {} for i = 1, 7000 do t[i] = 'v' .. i end \
                 return #struct.pack(string.rep('s', 7000), unpack(t))",
            )
            .eval()
            .unwrap();
        assert!(packed > 7000 * 3);
    }

    #[test]
    fn errors_are_plain_strings_without_position() {
        let lua = lua();
        let err = lua
            .load("struct.pack('i40', 1)")
            .exec()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("integral size 40 is larger than limit of 32"),
            "{err}"
        );
        let kind: String = lua
            .load("local ok, e = pcall(struct.unpack, 'b', '') return type(e)")
            .eval()
            .unwrap();
        assert_eq!(kind, "string");
    }

    /// An integer format item with a value in its range (and exact in a double).
    fn item() -> impl Strategy<Value = (String, f64)> {
        const SAFE: f64 = 9_007_199_254_740_992.0;
        let option = prop_oneof![
            Just(("b".to_string(), 1usize, true)),
            Just(("B".to_string(), 1, false)),
            Just(("h".to_string(), 2, true)),
            Just(("H".to_string(), 2, false)),
            Just(("l".to_string(), std::mem::size_of::<c_long>(), true)),
            Just(("L".to_string(), std::mem::size_of::<c_long>(), false)),
            Just(("T".to_string(), std::mem::size_of::<usize>(), false)),
            Just(("i".to_string(), 4, true)),
            Just(("I".to_string(), 4, false)),
            (1usize..=8).prop_map(|n| (format!("i{n}"), n, true)),
            (1usize..=8).prop_map(|n| (format!("I{n}"), n, false)),
        ];
        option.prop_flat_map(|(opt, size, signed)| {
            let bits = (size * 8) as i32;
            let (lo, hi) = if signed {
                let half = 2f64.powi(bits - 1);
                ((-half).max(-SAFE), (half - 1.0).min(SAFE))
            } else {
                (0.0, (2f64.powi(bits) - 1.0).min(SAFE))
            };
            ((lo as i64)..=(hi as i64)).prop_map(move |v| (opt.clone(), v as f64))
        })
    }

    fn header() -> impl Strategy<Value = String> {
        let endian = prop_oneof![Just(""), Just("<"), Just(">")];
        let align = prop_oneof![
            Just(""),
            Just("!"),
            Just("!1"),
            Just("!2"),
            Just("!4"),
            Just("!8"),
            Just("!16")
        ];
        (endian, align).prop_map(|(e, a)| format!("{e}{a}"))
    }

    proptest! {
        #[test]
        fn random_integers_round_trip(head in header(), items in prop::collection::vec(item(), 1..12)) {
            let lua = lua();
            let lib: Table = lua.globals().get("struct").unwrap();
            let (pack, unpack, size): (Function, Function, Function) =
                (lib.get("pack").unwrap(), lib.get("unpack").unwrap(), lib.get("size").unwrap());
            let fmt = items.iter().fold(head, |mut fmt, (opt, _)| { fmt.push(' '); fmt.push_str(opt); fmt });
            let mut args = vec![Value::String(lua.create_string(&fmt).unwrap())];
            args.extend(items.iter().map(|(_, v)| Value::Number(*v)));
            let packed: mlua::LuaString = pack.call(mlua::MultiValue::from(args)).unwrap();
            let len = packed.as_bytes().len();
            prop_assert_eq!(size.call::<usize>(fmt.as_str()).unwrap(), len);
            let values: Vec<f64> = unpack.call::<mlua::Variadic<f64>>((fmt.as_str(), packed)).unwrap().to_vec();
            prop_assert_eq!(values.len(), items.len() + 1);
            for ((_, expected), got) in items.iter().zip(&values) {
                prop_assert_eq!(*expected, *got);
            }
            prop_assert_eq!(values[items.len()], (len + 1) as f64);
        }

        #[test]
        fn random_formats_and_data_never_panic(
            fmt in prop::collection::vec(prop::sample::select(b"<>!xbBhHlLTiIfdsc0123456789 z\0".to_vec()), 0..16),
            data in prop::collection::vec(any::<u8>(), 0..32),
            init in -2i64..40,
        ) {
            let lua = lua();
            let run: Function = lua
                .load("return function(f, d, i) \
                         local ok1 = pcall(struct.unpack, f, d, i) \
                         local ok2 = pcall(struct.size, f) \
                         local ok3 = pcall(struct.pack, f, 1, 2, 'abc', 4, 5, 'de', 6) \
                         return true end")
                .eval()
                .unwrap();
            let fmt = lua.create_string(&fmt).unwrap();
            let data = lua.create_string(&data).unwrap();
            prop_assert!(run.call::<bool>((fmt, data, init)).unwrap());
        }
    }
}
