//! The bit arithmetic of the bitmap commands, as pure functions over byte slices: Redis's bit
//! order (bit 0 is the most significant bit of byte 0), population counts and first-bit
//! searches over inclusive bit ranges, BITFIELD's integers at any bit offset, and
//! `bitops.c`'s overflow rules (`checkUnsignedBitfieldOverflow`,
//! `checkSignedBitfieldOverflow`) ported operation for operation, wrapping where C wraps.
//!
//! Nothing here allocates or panics on its documented inputs.

/// BITFIELD's `OVERFLOW` mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Overflow {
    /// Wrap around (modular arithmetic; signed values wrap towards the most negative).
    Wrap,
    /// Saturate at the type's minimum or maximum.
    Sat,
    /// Refuse the operation: nothing written, nil replied.
    Fail,
}

/// The bit at `offset` (0 past the end).
#[inline]
pub(crate) fn get_bit(data: &[u8], offset: u64) -> bool {
    let Ok(byte) = usize::try_from(offset >> 3) else {
        return false;
    };
    data.get(byte)
        .is_some_and(|b| b & (0x80 >> (offset & 7)) != 0)
}

/// The number of set bits in `data`: `redisPopcount`'s method, a word at a time without a
/// popcount instruction (the baseline x86-64 target has none): each word's per-byte counts
/// are summed over a block of words (at most 240 per byte, no carry), then folded once.
pub(crate) fn popcount(data: &[u8]) -> u64 {
    const M1: u64 = 0x5555_5555_5555_5555;
    const M2: u64 = 0x3333_3333_3333_3333;
    const M4: u64 = 0x0f0f_0f0f_0f0f_0f0f;
    const M8: u64 = 0x00ff_00ff_00ff_00ff;
    const BLOCK_WORDS: usize = 30;
    let mut total = 0u64;
    let mut blocks = data.chunks_exact(8 * BLOCK_WORDS);
    for block in &mut blocks {
        let mut per_byte = 0u64;
        for w in block.chunks_exact(8) {
            let mut x = word(w);
            x -= (x >> 1) & M1;
            x = (x & M2) + ((x >> 2) & M2);
            per_byte += (x + (x >> 4)) & M4;
        }
        // Pairs of bytes into 16-bit lanes (at most 480 each), then the lanes' sum.
        let lanes = (per_byte & M8) + ((per_byte >> 8) & M8);
        total += lanes.wrapping_mul(0x0001_0001_0001_0001) >> 48;
    }
    let mut words = blocks.remainder().chunks_exact(8);
    for w in &mut words {
        total += u64::from(word(w).count_ones());
    }
    total
        + words
            .remainder()
            .iter()
            .map(|x| u64::from(x.count_ones()))
            .sum::<u64>()
}

#[inline(always)]
fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    u64::from_ne_bytes(w)
}

/// The mask of the bits of a byte at and after bit `first` (0..=7, 0 the most significant).
#[inline]
fn from_bit(first: u64) -> u8 {
    0xff >> (first & 7)
}

/// The mask of the bits of a byte at and before bit `last` (0..=7).
#[inline]
fn to_bit(last: u64) -> u8 {
    0xff << (7 - (last & 7))
}

/// The number of set bits among bits `first..=last` of `data`; `first <= last` and `last`
/// within `data`.
pub(crate) fn count_range(data: &[u8], first: u64, last: u64) -> u64 {
    let (fb, lb) = ((first >> 3) as usize, (last >> 3) as usize);
    let (head, tail) = (from_bit(first), to_bit(last));
    if fb == lb {
        return u64::from((data[fb] & head & tail).count_ones());
    }
    u64::from((data[fb] & head).count_ones())
        + popcount(&data[fb + 1..lb])
        + u64::from((data[lb] & tail).count_ones())
}

/// The position of the first bit equal to `bit` among bits `first..=last` of `data`;
/// `first <= last` and `last` within `data`.
pub(crate) fn first_bit(data: &[u8], first: u64, last: u64, bit: bool) -> Option<u64> {
    let (fb, lb) = ((first >> 3) as usize, (last >> 3) as usize);
    // Searching for a 0 is searching the complement for a 1.
    let flip = if bit { 0 } else { 0xff };
    let hit = |i: usize, mask: u8| {
        let x = (data[i] ^ flip) & mask;
        (x != 0).then(|| i as u64 * 8 + u64::from(x.leading_zeros()))
    };
    let (head, tail) = (from_bit(first), to_bit(last));
    if fb == lb {
        return hit(fb, head & tail);
    }
    if let Some(p) = hit(fb, head) {
        return Some(p);
    }
    if let Some(i) = first_byte_not(&data[fb + 1..lb], flip) {
        return hit(fb + 1 + i, 0xff);
    }
    hit(lb, tail)
}

/// The index of the first byte of `data` other than `skip`, a word at a time.
fn first_byte_not(data: &[u8], skip: u8) -> Option<usize> {
    let skip_word = u64::from_ne_bytes([skip; 8]);
    let mut at = 0;
    for w in data.chunks_exact(8) {
        if word(w) != skip_word {
            break;
        }
        at += 8;
    }
    data[at..].iter().position(|&b| b != skip).map(|i| at + i)
}

/// The `bits`-wide (1..=64) unsigned integer at bit `offset`, reading past the end of
/// `data` as zeros.
pub(crate) fn get_field(data: &[u8], offset: u64, bits: u32) -> u64 {
    let mut w = [0u8; 16];
    if let Ok(byte) = usize::try_from(offset >> 3)
        && byte < data.len()
    {
        let src = &data[byte..data.len().min(byte + 9)];
        w[..src.len()].copy_from_slice(src);
    }
    let v = u128::from_be_bytes(w) << (offset & 7);
    (v >> (128 - bits)) as u64
}

/// The `bits`-wide (1..=64) signed integer at bit `offset` (two's complement, sign-extended).
pub(crate) fn get_signed_field(data: &[u8], offset: u64, bits: u32) -> i64 {
    let v = get_field(data, offset, bits);
    if bits < 64 && v & (1 << (bits - 1)) != 0 {
        (v | (u64::MAX << bits)) as i64
    } else {
        v as i64
    }
}

/// Writes the low `bits` (1..=64) bits of `value` at bit `offset`; `data` must hold bit
/// `offset + bits - 1`.
pub(crate) fn set_field(data: &mut [u8], offset: u64, bits: u32, value: u64) {
    let byte = (offset >> 3) as usize;
    let shift = (offset & 7) as u32;
    let n = (shift + bits).div_ceil(8) as usize;
    let mut w = [0u8; 16];
    w[..n].copy_from_slice(&data[byte..byte + n]);
    let low = 128 - shift - bits;
    let ones = u128::MAX >> (128 - bits);
    let v = (u128::from_be_bytes(w) & !(ones << low)) | ((u128::from(value) & ones) << low);
    data[byte..byte + n].copy_from_slice(&v.to_be_bytes()[..n]);
}

/// Whether `value + incr` overflows a `bits`-wide (1..=63) unsigned integer (`value` itself
/// may already be out of range: SET's value), as `checkUnsignedBitfieldOverflow`: the value
/// to store instead under `ow` (`None` to fail), or `Ok` when it fits.
pub(crate) fn unsigned_overflow(
    value: u64,
    incr: i64,
    bits: u32,
    ow: Overflow,
) -> Result<(), Option<u64>> {
    let max: u64 = if bits == 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    };
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = (value as i64).wrapping_neg();
    let wrapped = || {
        let mask = if bits == 64 { 0 } else { u64::MAX << bits };
        value.wrapping_add(incr as u64) & !mask
    };
    let limit = if value > max || (incr > 0 && incr > max_incr) {
        max
    } else if incr < 0 && incr < min_incr {
        0
    } else {
        return Ok(());
    };
    Err(match ow {
        Overflow::Wrap => Some(wrapped()),
        Overflow::Sat => Some(limit),
        Overflow::Fail => None,
    })
}

/// Whether `value + incr` overflows a `bits`-wide (1..=64) signed integer, as
/// `checkSignedBitfieldOverflow` (its wrapping intermediate values included): the value to
/// store instead under `ow` (`None` to fail), or `Ok` when it fits.
pub(crate) fn signed_overflow(
    value: i64,
    incr: i64,
    bits: u32,
    ow: Overflow,
) -> Result<(), Option<i64>> {
    let max: i64 = if bits == 64 {
        i64::MAX
    } else {
        (1 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wrapped = || {
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1 << (bits - 1)) != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    let limit = if value > max
        || (bits != 64 && incr > max_incr)
        || (value >= 0 && incr > 0 && incr > max_incr)
    {
        max
    } else if value < min
        || (bits != 64 && incr < min_incr)
        || (value < 0 && incr < 0 && incr < min_incr)
    {
        min
    } else {
        return Ok(());
    };
    Err(match ow {
        Overflow::Wrap => Some(wrapped()),
        Overflow::Sat => Some(limit),
        Overflow::Fail => None,
    })
}
