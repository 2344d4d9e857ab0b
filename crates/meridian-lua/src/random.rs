//! `math.random` and `math.randomseed` as Redis 7 defines them: Lua's own functions over a
//! 48-bit linear congruential generator (`rand48`) instead of libc's `rand()`, so a seed gives
//! the same sequence on every machine.

use mlua::{Function, Lua, Variadic};
use std::sync::{Arc, Mutex};

const MULTIPLIER: u64 = 0x5_DEEC_E66D;
const INCREMENT: u64 = 0xB;
const MASK: u64 = (1 << 48) - 1;
/// The largest value `lrand48` draws from (`REDIS_LRAND48_MAX`).
const LRAND48_MAX: u64 = i32::MAX as u64;

/// A `rand48` generator.
#[derive(Debug, Clone, Copy)]
struct Rand48(u64);

impl Rand48 {
    /// `srand48(seed)`.
    fn seeded(seed: i64) -> Self {
        Self((((seed as u64) << 16) | 0x330E) & MASK)
    }

    /// `lrand48()`: 31 random bits.
    fn next(&mut self) -> u64 {
        self.0 = (self.0.wrapping_mul(MULTIPLIER).wrapping_add(INCREMENT)) & MASK;
        self.0 >> 17
    }
}

/// The two functions, sharing one generator seeded with `seed`.
pub(crate) fn functions(lua: &Lua, seed: u64) -> mlua::Result<(Function, Function)> {
    let state = Arc::new(Mutex::new(Rand48::seeded(seed as i64)));
    let draw = state.clone();
    let random = lua.create_function(move |_, args: Variadic<f64>| {
        let raw = draw.lock().map_or(0, |mut g| g.next());
        let r = (raw % LRAND48_MAX) as f64 / LRAND48_MAX as f64;
        match args.as_slice() {
            [] => Ok(r),
            [u] => {
                let u = u.floor();
                if u < 1.0 {
                    return Err(mlua::Error::runtime(
                        "bad argument #1 to 'random' (interval is empty)",
                    ));
                }
                Ok((r * u).floor() + 1.0)
            }
            [l, u] => {
                let (l, u) = (l.floor(), u.floor());
                if l > u {
                    return Err(mlua::Error::runtime(
                        "bad argument #2 to 'random' (interval is empty)",
                    ));
                }
                Ok((r * (u - l + 1.0)).floor() + l)
            }
            _ => Err(mlua::Error::runtime("wrong number of arguments")),
        }
    })?;
    let randomseed = lua.create_function(move |_, seed: f64| {
        if let Ok(mut g) = state.lock() {
            *g = Rand48::seeded(seed as i64);
        }
        Ok(())
    })?;
    Ok((random, randomseed))
}

#[cfg(test)]
mod tests {
    use super::Rand48;

    #[test]
    fn rand48_matches_libc() {
        // glibc: srand48(0); lrand48() x3.
        let mut g = Rand48::seeded(0);
        assert_eq!(
            [g.next(), g.next(), g.next()],
            [366850414, 1610402240, 206956554]
        );
    }
}
