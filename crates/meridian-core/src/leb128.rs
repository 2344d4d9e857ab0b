//! Unsigned LEB128 varints: the length prefixes of every collection encoding (hashes here,
//! sets and sorted sets in the Redis layer). Reading never panics and never reads past its
//! input: a truncated or overlong (more than 64 bits) varint is an error.

/// Appends `n` as an unsigned LEB128.
pub fn put(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// How many bytes [`put`] writes for `n`.
pub fn size(n: u64) -> usize {
    (u64::BITS - (n | 1).leading_zeros()).div_ceil(7) as usize
}

/// Why a varint does not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// The input ends inside it.
    Truncated,
    /// It does not fit 64 bits.
    Overflow,
}

/// Reads the varint at `data[*at..]`, advancing `at` past it.
pub fn get(data: &[u8], at: &mut usize) -> Result<u64, Bad> {
    let mut n: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *data.get(*at).ok_or(Bad::Truncated)?;
        *at += 1;
        let bits = u64::from(byte & 0x7f);
        n |= bits
            .checked_shl(shift)
            .filter(|v| v >> shift == bits)
            .ok_or(Bad::Overflow)?;
        if byte & 0x80 == 0 {
            return Ok(n);
        }
    }
    Err(Bad::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips_with_its_size(n in any::<u64>()) {
            let mut out = Vec::new();
            put(&mut out, n);
            prop_assert_eq!(out.len(), size(n));
            let mut at = 0;
            prop_assert_eq!(get(&out, &mut at), Ok(n));
            prop_assert_eq!(at, out.len());
            for cut in 0..out.len() {
                prop_assert_eq!(get(&out[..cut], &mut 0), Err(Bad::Truncated));
            }
        }
    }

    #[test]
    fn overlong_varints_are_refused() {
        assert_eq!(get(&[0xff; 10], &mut 0), Err(Bad::Overflow));
        assert_eq!(
            get(
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
                &mut 0
            ),
            Err(Bad::Overflow)
        );
        assert_eq!(
            get(
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                &mut 0
            ),
            Ok(u64::MAX)
        );
    }
}
