//! The `bit` library: LuaBitOp 1.0.2's bitwise operations on 32-bit integers, as Redis bundles
//! them (`bit.tobit`, `bnot`, `band`, `bor`, `bxor`, `lshift`, `rshift`, `arshift`, `rol`,
//! `ror`, `bswap`, `tohex`).
//!
//! Guarantees, matching LuaBitOp on a little-endian, double-number Lua 5.1:
//! - every argument is normalized the way LuaBitOp does it: the number (or numeric string,
//!   converted as Lua converts it) is rounded to an integer, ties to even, and wrapped modulo
//!   2^32; every result is that 32-bit pattern read as a *signed* integer;
//! - shift counts use their low 5 bits; `tohex`'s digit count defaults to 8, a negative count
//!   asks for upper-case digits and `|n|` is capped at 8;
//! - a missing or non-numeric argument raises LuaBitOp's message (`bad argument #1 to 'band'
//!   (number expected, got nil)`) as a plain Lua string, so scripts that `pcall` a `bit`
//!   function get the same error value as on Redis.
//!
//! Nothing here can panic or overflow: all arithmetic is done on `u32` with wrapping
//! operations, and inputs LuaBitOp leaves to C's undefined behaviour (`tohex(x, -2^31)`) get
//! the nearest defined answer (eight upper-case digits).

use mlua::{Function, Lua, Value};

use super::raise::{Args, Fault, Results, raising_function};

/// A `bit` function: the Lua arguments in, one Lua value (or why not) out.
type BitFn = fn(&Lua, &Args) -> Result<Value, Fault>;

/// Installs the library as a global table.
pub(crate) fn open(lua: &mlua::Lua) -> mlua::Result<()> {
    const FUNCTIONS: [(&str, BitFn); 12] = [
        ("tobit", tobit),
        ("bnot", bnot),
        ("band", band),
        ("bor", bor),
        ("bxor", bxor),
        ("lshift", lshift),
        ("rshift", rshift),
        ("arshift", arshift),
        ("rol", rol),
        ("ror", ror),
        ("bswap", bswap),
        ("tohex", tohex),
    ];
    let table = lua.create_table_with_capacity(0, FUNCTIONS.len())?;
    for (name, function) in FUNCTIONS {
        let wrapped: Function = raising_function(lua, "bit", name, move |lua, args| {
            Ok(Results::from_values(lua, [function(lua, args)?])?)
        })?;
        table.raw_set(name, wrapped)?;
    }
    lua.globals().raw_set("bit", table)
}

/// Converts a number to LuaBitOp's 32-bit pattern. Adding 2^52 + 2^51 moves the integer part
/// (rounded to nearest, ties to even, by the FPU) into the low 32 bits of the double's
/// mantissa; this is LuaBitOp's own trick, so even out-of-range numbers, infinities and NaNs
/// give the same bits as on Redis.
fn number_to_bits(number: f64) -> u32 {
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 2^52 + 2^51
    // Truncation to the low 32 bits is the point.
    (number + MAGIC).to_bits() as u32
}

/// Returns a 32-bit pattern as the signed Lua number LuaBitOp returns.
fn bits_to_value(bits: u32) -> Value {
    // Reinterpreting as signed is the point: results are in [-2^31, 2^31).
    Value::Number(f64::from(bits as i32))
}

/// Reads argument `pos` (1-based) as a 32-bit pattern, or LuaBitOp's error ("number
/// expected").
fn arg(lua: &Lua, args: &Args, pos: usize) -> Result<u32, Fault> {
    args.number(lua, pos).map(number_to_bits)
}

/// `bit.tobit(x)`: normalizes `x` to a signed 32-bit number.
fn tobit(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    arg(lua, args, 1).map(bits_to_value)
}

/// `bit.bnot(x)`: bitwise not.
fn bnot(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    arg(lua, args, 1).map(|bits| bits_to_value(!bits))
}

/// Folds every argument (at least one is required) with `op`, like LuaBitOp's variadic ops.
fn fold_args(lua: &Lua, args: &Args, op: fn(u32, u32) -> u32) -> Result<Value, Fault> {
    let mut bits = arg(lua, args, 1)?;
    // LuaBitOp reads the extra arguments last to first; the order only shows in which bad
    // argument is reported, so keep it.
    for pos in (2..=args.len()).rev() {
        bits = op(bits, arg(lua, args, pos)?);
    }
    Ok(bits_to_value(bits))
}

/// `bit.band(x1 [, x2...])`: bitwise and of all arguments.
fn band(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    fold_args(lua, args, |a, b| a & b)
}

/// `bit.bor(x1 [, x2...])`: bitwise or of all arguments.
fn bor(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    fold_args(lua, args, |a, b| a | b)
}

/// `bit.bxor(x1 [, x2...])`: bitwise exclusive or of all arguments.
fn bxor(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    fold_args(lua, args, |a, b| a ^ b)
}

/// Applies a shift or rotation of `x` (argument 1) by `n` (argument 2, low 5 bits used).
fn shift(lua: &Lua, args: &Args, op: fn(u32, u32) -> u32) -> Result<Value, Fault> {
    let bits = arg(lua, args, 1)?;
    let count = arg(lua, args, 2)? & 31;
    Ok(bits_to_value(op(bits, count)))
}

/// `bit.lshift(x, n)`: logical left shift.
fn lshift(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    shift(lua, args, |bits, n| bits << n)
}

/// `bit.rshift(x, n)`: logical right shift (zero fill).
fn rshift(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    shift(lua, args, |bits, n| bits >> n)
}

/// `bit.arshift(x, n)`: arithmetic right shift (sign fill).
fn arshift(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    // The casts reinterpret the pattern so that `>>` copies the sign bit.
    shift(lua, args, |bits, n| ((bits as i32) >> n) as u32)
}

/// `bit.rol(x, n)`: rotate left.
fn rol(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    shift(lua, args, u32::rotate_left)
}

/// `bit.ror(x, n)`: rotate right.
fn ror(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    shift(lua, args, u32::rotate_right)
}

/// `bit.bswap(x)`: reverses the byte order.
fn bswap(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    arg(lua, args, 1).map(|bits| bits_to_value(bits.swap_bytes()))
}

/// `bit.tohex(x [, n])`: the low `|n|` hex digits of `x` (default 8, at most 8), upper case
/// when `n` is negative.
fn tohex(lua: &Lua, args: &Args) -> Result<Value, Fault> {
    let mut bits = arg(lua, args, 1)?;
    // Only an absent `n` takes the default: an explicit nil is a bad argument, as in LuaBitOp.
    let count = if args.len() < 2 {
        8
    } else {
        // The pattern read as signed: its sign picks the case.
        arg(lua, args, 2)? as i32
    };
    let digits: &[u8; 16] = if count < 0 {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    // `unsigned_abs` keeps i32::MIN defined (C's `-n` overflows there).
    let width = count.unsigned_abs().min(8) as usize;
    let mut hex = [0u8; 8];
    for slot in hex[..width].iter_mut().rev() {
        *slot = digits[(bits & 15) as usize];
        bits >>= 4;
    }
    // A failure here (out of memory) is raised as a string, as `bit` always has.
    let text = lua
        .create_string(&hex[..width])
        .map_err(|e| Fault::plain(e.to_string()))?;
    Ok(Value::String(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lua() -> Lua {
        let lua = Lua::new();
        open(&lua).expect("open bit");
        lua
    }

    fn eval_f64(lua: &Lua, code: &str) -> f64 {
        lua.load(code)
            .eval::<f64>()
            .unwrap_or_else(|e| panic!("{code}: {e}"))
    }

    fn eval_string(lua: &Lua, code: &str) -> String {
        lua.load(code)
            .eval::<String>()
            .unwrap_or_else(|e| panic!("{code}: {e}"))
    }

    /// Runs `code` under `pcall` and returns the error value, which must be a plain string.
    fn error_of(lua: &Lua, code: &str) -> String {
        let wrapped = format!("local ok, e = pcall(function() {code} end) assert(not ok) return e");
        eval_string(lua, &wrapped)
    }

    #[test]
    fn redis_suite_cases() {
        // tests/unit/scripting.tcl's bit library check.
        let lua = lua();
        lua.load(
            "assert(bit.tobit(1) == 1);
             assert(bit.band(1) == 1);
             assert(bit.bxor(1,2) == 3);
             assert(bit.bor(1,2,4,8,16,32,64,128) == 255)",
        )
        .exec()
        .unwrap();
        // tests/unit/functions.tcl unpacks a version number with band/rshift.
        let version = "local v = 0x070012
            return bit.band(bit.rshift(v, 16), 0xff) .. '.' .. bit.band(bit.rshift(v, 8), 0xff)
                .. '.' .. bit.band(v, 0xff)";
        assert_eq!(eval_string(&lua, version), "7.0.18");
    }

    #[test]
    fn tobit_wraps_and_signs() {
        let lua = lua();
        for (code, want) in [
            ("bit.tobit(0xffffffff)", -1.0),
            ("bit.tobit(0xffffffff + 1)", 0.0),
            ("bit.tobit(2^40 + 1234)", 1234.0),
            ("bit.tobit(-1)", -1.0),
            ("bit.tobit(2^31)", -2147483648.0),
            ("bit.tobit(-2^31 - 1)", 2147483647.0),
            ("bit.tobit(0.5)", 0.0),
            ("bit.tobit(1.5)", 2.0),
            ("bit.tobit(2.5)", 2.0),
            ("bit.tobit(-1.5)", -2.0),
            ("bit.tobit(1/0)", 0.0),
            ("bit.tobit(-1/0)", 0.0),
            // Beyond 2^51 LuaBitOp's trick keeps mantissa bits, not the value modulo 2^32.
            ("bit.tobit(1e300)", -2013235812.0),
            ("bit.tobit(-1e20)", 2025163840.0),
            ("bit.tobit('10')", 10.0),
            ("bit.tobit(' 0x10 ')", 16.0),
        ] {
            assert_eq!(eval_f64(&lua, &format!("return {code}")), want, "{code}");
        }
    }

    #[test]
    fn logic_ops() {
        let lua = lua();
        for (code, want) in [
            ("bit.bnot(0)", -1.0),
            ("bit.bnot(-1)", 0.0),
            ("bit.bnot(0x12345678)", -305419897.0),
            ("bit.band(0x12345678, 0xff)", 120.0),
            ("bit.band(-1, -1, 7)", 7.0),
            ("bit.bor(0xf0000000, 1)", -268435455.0),
            ("bit.bxor(-1, 0xffff)", -65536.0),
            ("bit.bxor(1, 2, 4, 8)", 15.0),
        ] {
            assert_eq!(eval_f64(&lua, &format!("return {code}")), want, "{code}");
        }
    }

    #[test]
    fn shifts_and_rotations() {
        let lua = lua();
        for (code, want) in [
            ("bit.lshift(1, 0)", 1.0),
            ("bit.lshift(1, 31)", -2147483648.0),
            ("bit.lshift(1, 32)", 1.0),
            ("bit.lshift(1, 33)", 2.0),
            ("bit.lshift(1, -1)", -2147483648.0),
            ("bit.rshift(-1, 28)", 15.0),
            ("bit.rshift(-1, 0)", -1.0),
            ("bit.rshift(0x80000000, 31)", 1.0),
            ("bit.arshift(-256, 4)", -16.0),
            ("bit.arshift(0x80000000, 31)", -1.0),
            ("bit.arshift(256, 4)", 16.0),
            ("bit.rol(0x12345678, 12)", 1164411171.0),
            ("bit.ror(0x12345678, 12)", 1736516421.0),
            ("bit.rol(0x12345678, 0)", 305419896.0),
            ("bit.ror(0x12345678, 32)", 305419896.0),
            ("bit.bswap(0x12345678)", 2018915346.0),
            ("bit.bswap(0x78563412)", 305419896.0),
            ("bit.bswap(0xff)", -16777216.0),
        ] {
            assert_eq!(eval_f64(&lua, &format!("return {code}")), want, "{code}");
        }
    }

    #[test]
    fn tohex_widths_and_case() {
        let lua = lua();
        for (code, want) in [
            ("bit.tohex(0xdeadbeef)", "deadbeef"),
            ("bit.tohex(1)", "00000001"),
            ("bit.tohex(-1)", "ffffffff"),
            ("bit.tohex(-1, -8)", "FFFFFFFF"),
            ("bit.tohex(0x12345678, 2)", "78"),
            ("bit.tohex(0x12345678, -3)", "678"),
            ("bit.tohex(0x12345678, 0)", ""),
            ("bit.tohex(0x12345678, 100)", "12345678"),
            ("bit.tohex(0x1abcdef2, -100)", "1ABCDEF2"),
            ("bit.tohex(0x1abcdef2, -2^31)", "1ABCDEF2"),
            ("bit.tohex(255, 2^32 + 4)", "00ff"),
        ] {
            assert_eq!(eval_string(&lua, &format!("return {code}")), want, "{code}");
        }
    }

    #[test]
    fn bad_arguments_raise_lua_strings() {
        let lua = lua();
        for (code, want) in [
            (
                "bit.tobit()",
                "bad argument #1 to 'tobit' (number expected, got no value)",
            ),
            (
                "bit.band()",
                "bad argument #1 to 'band' (number expected, got no value)",
            ),
            (
                "bit.bor(1, {})",
                "bad argument #2 to 'bor' (number expected, got table)",
            ),
            (
                "bit.bxor(1, 2, 'x')",
                "bad argument #3 to 'bxor' (number expected, got string)",
            ),
            (
                "bit.lshift(1)",
                "bad argument #2 to 'lshift' (number expected, got no value)",
            ),
            (
                "bit.tohex(1, nil)",
                "bad argument #2 to 'tohex' (number expected, got nil)",
            ),
            (
                "bit.bnot(true)",
                "bad argument #1 to 'bnot' (number expected, got boolean)",
            ),
            (
                "bit.bswap(print)",
                "bad argument #1 to 'bswap' (number expected, got function)",
            ),
        ] {
            assert_eq!(error_of(&lua, code), want, "{code}");
        }
        // Uncaught, the message reaches Rust without a position prefix, like luaL_error's.
        let err = lua.load("bit.tobit()").exec().unwrap_err().to_string();
        assert!(
            err.starts_with("runtime error: bad argument #1 to 'tobit'"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn integers_behave_like_u32(a in any::<i32>(), b in any::<i32>(), n in 0u32..64) {
            let lua = lua();
            let (ua, ub) = (a as u32, b as u32);
            let code = format!(
                "return {{bit.band({a},{b}), bit.bor({a},{b}), bit.bxor({a},{b}), bit.bnot({a}),
                          bit.lshift({a},{n}), bit.rshift({a},{n}), bit.arshift({a},{n}),
                          bit.rol({a},{n}), bit.ror({a},{n}), bit.bswap({a}), bit.tobit({a} + 2^32)}}"
            );
            let got: Vec<f64> = lua.load(&code).eval().unwrap();
            let s = n & 31;
            let want: Vec<f64> = [
                ua & ub, ua | ub, ua ^ ub, !ua, ua << s, ua >> s, (a >> s) as u32,
                ua.rotate_left(s), ua.rotate_right(s), ua.swap_bytes(), ua,
            ].iter().map(|&x| f64::from(x as i32)).collect();
            prop_assert_eq!(got, want);
            let hex = lua.load(format!("return bit.tohex({a})")).eval::<String>().unwrap();
            prop_assert_eq!(hex, format!("{ua:08x}"));
        }

        #[test]
        fn any_number_is_safe(x in any::<f64>(), n in any::<f64>()) {
            let lua = lua();
            let f: Function = lua.load("return function(x, n)
                return {bit.tobit(x), bit.lshift(x, n), bit.tohex(x, n), bit.arshift(x, n)}
            end").eval().unwrap();
            let got: Vec<Value> = f.call((x, n)).unwrap();
            prop_assert_eq!(got.len(), 4);
        }
    }
}
