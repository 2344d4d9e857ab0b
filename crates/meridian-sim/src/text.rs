//! Readable, round-trippable text for byte strings (keys and values), used in saved histories
//! and in checker explanations.
//!
//! Rule: a byte string that is valid UTF-8 and does not start with [`HEX_PREFIX`] is written as
//! itself; anything else is written as `hex:` followed by two lowercase hex digits per byte.
//! Guarantees: [`decode`]`(`[`encode`]`(b)) == b` for every byte string (property-tested), and
//! the text of a typical workload value (`"v17"`, `"user:42"`) is the value itself, so a saved
//! history can be read and grepped by eye.

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serializer};
use std::borrow::Cow;

/// The tag that marks a hex-encoded byte string.
pub const HEX_PREFIX: &str = "hex:";

/// The text form of `bytes`: itself when it is UTF-8 not starting with `hex:`, else `hex:...`.
pub fn encode(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.starts_with(HEX_PREFIX) => Cow::Borrowed(s),
        _ => {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            let mut out = String::with_capacity(HEX_PREFIX.len() + 2 * bytes.len());
            out.push_str(HEX_PREFIX);
            for &b in bytes {
                out.push(DIGITS[usize::from(b >> 4)] as char);
                out.push(DIGITS[usize::from(b & 0xf)] as char);
            }
            Cow::Owned(out)
        }
    }
}

/// The byte string whose text form is `text` (the inverse of [`encode`]).
///
/// Text starting with `hex:` must be followed by an even number of hex digits (either case);
/// the error says what is wrong.
pub fn decode(text: &str) -> Result<Bytes, String> {
    let Some(hex) = text.strip_prefix(HEX_PREFIX) else {
        return Ok(Bytes::copy_from_slice(text.as_bytes()));
    };
    if hex.len() % 2 != 0 {
        return Err(format!("odd number of hex digits in {text:?}"));
    }
    let digit = |c: u8| -> Result<u8, String> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!("invalid hex digit {:?} in {text:?}", c as char)),
        }
    };
    hex.as_bytes()
        .chunks_exact(2)
        .map(|pair| Ok(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect::<Result<Vec<u8>, String>>()
        .map(Bytes::from)
}

/// `bytes` quoted for an explanation: `"v1"`, `"hex:ff00"`.
pub(crate) fn show(bytes: &[u8]) -> String {
    format!("{:?}", encode(bytes))
}

/// A set of values shown as `{"v1", "v2"}` (in the order given).
pub(crate) fn show_set<'a>(values: impl IntoIterator<Item = &'a Bytes>) -> String {
    let items: Vec<String> = values.into_iter().map(|v| show(v)).collect();
    format!("{{{}}}", items.join(", "))
}

/// Serde adapter for one byte string as text (`#[serde(with = "crate::text::one")]`).
pub(crate) mod one {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(bytes))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        let text = Cow::<str>::deserialize(d)?;
        decode(&text).map_err(serde::de::Error::custom)
    }
}

/// Serde adapter for an optional byte string (`null` when absent).
pub(crate) mod opt {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(bytes: &Option<Bytes>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => s.serialize_some(&encode(b)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Bytes>, D::Error> {
        Option::<Cow<str>>::deserialize(d)?
            .map(|text| decode(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Serde adapter for a list of byte strings.
pub(crate) mod many {
    use super::*;
    use serde::ser::SerializeSeq;

    pub(crate) fn serialize<S: Serializer>(list: &[Bytes], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(list.len()))?;
        for b in list {
            seq.serialize_element(&encode(b))?;
        }
        seq.end()
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Bytes>, D::Error> {
        Vec::<Cow<str>>::deserialize(d)?
            .iter()
            .map(|text| decode(text).map_err(serde::de::Error::custom))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_is_itself_and_the_rest_is_tagged_hex() {
        assert_eq!(encode(b"v17"), "v17");
        assert_eq!(encode(b""), "");
        assert_eq!(encode(&[0xff, 0x00]), "hex:ff00");
        assert_eq!(encode(b"hex:12"), "hex:6865783a3132");
        for bytes in [&b"v17"[..], b"", &[0xff, 0x00], b"hex:12", "é\n".as_bytes()] {
            assert_eq!(decode(&encode(bytes)).unwrap(), bytes);
        }
    }

    #[test]
    fn bad_hex_is_an_error() {
        assert!(decode("hex:abc").is_err());
        assert!(decode("hex:zz").is_err());
        assert_eq!(decode("hex:AB").unwrap(), &[0xab][..]);
    }
}
