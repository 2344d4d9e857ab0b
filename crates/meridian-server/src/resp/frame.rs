//! RESP values ([`Frame`]) with an incremental decoder and an encoder, RESP2 and RESP3.
//!
//! [`Frame::parse`] consumes exactly one complete value from the front of a buffer, returns
//! `Ok(None)` (consuming nothing) while the value is incomplete, and a typed [`FrameError`]
//! for malformed input. [`Frame::encode`] writes a value for a RESP2 or a RESP3 peer: RESP3
//! types a RESP2 peer cannot read are downgraded the way Redis does (maps to flat arrays,
//! sets to arrays, doubles and big numbers to bulk strings, booleans to 1/0, null to the
//! null bulk string).
//!
//! The server reads requests with the faster [`crate::resp::request::RequestParser`] and
//! writes hot replies with [`crate::resp::reply`]; this module is for everything else:
//! clients, tests, and composite replies built as values.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Nesting deeper than this is refused (a guard against stack exhaustion).
const MAX_DEPTH: usize = 64;
/// Aggregates longer than this are refused.
const MAX_ELEMENTS: i64 = 1 << 32;
/// Bulk strings longer than this are refused (Redis's largest).
const MAX_BULK: i64 = 512 * 1024 * 1024;

/// One RESP value.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// `+text`
    Simple(Bytes),
    /// `-CODE message`
    Error(Bytes),
    /// `:123`
    Integer(i64),
    /// `$3\r\nabc`
    Bulk(Bytes),
    /// RESP3 `_`; also RESP2's null bulk string `$-1` and null array `*-1`.
    Null,
    /// `*n` followed by `n` values.
    Array(Vec<Frame>),
    /// RESP3 `%n` followed by `n` key/value pairs.
    Map(Vec<(Frame, Frame)>),
    /// RESP3 `~n` followed by `n` values.
    Set(Vec<Frame>),
    /// RESP3 `>n` followed by `n` values.
    Push(Vec<Frame>),
    /// RESP3 `,1.5`
    Double(f64),
    /// RESP3 `#t` / `#f`
    Boolean(bool),
    /// RESP3 `(123...` (kept as text).
    BigNumber(Bytes),
    /// RESP3 `=n\r\ntxt:...`: a three-letter format and the text.
    Verbatim {
        /// The format, e.g. `txt` or `mkd`.
        format: [u8; 3],
        /// The text.
        text: Bytes,
    },
    /// RESP3 `!n`: an error with a binary-safe message.
    BlobError(Bytes),
}

/// Why a buffer does not hold a valid RESP value.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The first byte of a value is not a RESP type marker.
    #[error("invalid RESP type marker {0:?}")]
    BadMarker(char),
    /// A length or integer line does not parse.
    #[error("invalid number in RESP line")]
    BadNumber,
    /// A length is negative (other than -1) or too large.
    #[error("invalid RESP length {0}")]
    BadLength(i64),
    /// A bulk string is not followed by CRLF.
    #[error("bulk string not terminated by CRLF")]
    MissingCrlf,
    /// A boolean is neither `t` nor `f`, a double does not parse, or a verbatim string has
    /// no format.
    #[error("malformed RESP3 value")]
    Malformed,
    /// Aggregates nest more than 64 deep.
    #[error("RESP value nested too deeply")]
    TooDeep,
}

impl Frame {
    /// A bulk string from anything byte-like.
    pub fn bulk(b: impl Into<Bytes>) -> Frame {
        Frame::Bulk(b.into())
    }

    /// A simple string from static text.
    pub fn simple(s: &'static str) -> Frame {
        Frame::Simple(Bytes::from_static(s.as_bytes()))
    }

    /// An array of bulk strings.
    pub fn bulks<I, B>(items: I) -> Frame
    where
        I: IntoIterator<Item = B>,
        B: Into<Bytes>,
    {
        Frame::Array(items.into_iter().map(|b| Frame::Bulk(b.into())).collect())
    }

    /// Decodes one value from the front of `buf`, consuming it; `Ok(None)` if incomplete.
    pub fn parse(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let mut pos = 0;
        match parse_at(buf, &mut pos, 0)? {
            Some(f) => {
                buf.advance(pos);
                Ok(Some(f))
            }
            None => Ok(None),
        }
    }

    /// Appends the encoding of this value for a RESP3 (`resp3`) or RESP2 peer.
    pub fn encode(&self, out: &mut BytesMut, resp3: bool) {
        match self {
            Frame::Simple(s) => line(out, b'+', s),
            Frame::Error(s) => line(out, b'-', s),
            Frame::Integer(i) => int_line(out, b':', *i),
            Frame::Bulk(b) => blob(out, b'$', b),
            Frame::Null if resp3 => out.put_slice(b"_\r\n"),
            Frame::Null => out.put_slice(b"$-1\r\n"),
            Frame::Array(items) => aggregate(out, b'*', items, resp3),
            Frame::Set(items) => aggregate(out, if resp3 { b'~' } else { b'*' }, items, resp3),
            Frame::Push(items) => aggregate(out, if resp3 { b'>' } else { b'*' }, items, resp3),
            Frame::Map(pairs) => {
                if resp3 {
                    int_line(out, b'%', pairs.len() as i64);
                } else {
                    int_line(out, b'*', 2 * pairs.len() as i64);
                }
                for (k, v) in pairs {
                    k.encode(out, resp3);
                    v.encode(out, resp3);
                }
            }
            Frame::Double(d) => {
                let text = format_double(*d);
                if resp3 {
                    line(out, b',', text.as_bytes());
                } else {
                    blob(out, b'$', text.as_bytes());
                }
            }
            Frame::Boolean(b) if resp3 => out.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Frame::Boolean(b) => int_line(out, b':', *b as i64),
            Frame::BigNumber(n) if resp3 => line(out, b'(', n),
            Frame::BigNumber(n) => blob(out, b'$', n),
            Frame::Verbatim { format, text } if resp3 => {
                int_line(out, b'=', text.len() as i64 + 4);
                out.put_slice(format);
                out.put_u8(b':');
                out.put_slice(text);
                out.put_slice(b"\r\n");
            }
            Frame::Verbatim { text, .. } => blob(out, b'$', text),
            Frame::BlobError(e) if resp3 => blob(out, b'!', e),
            Frame::BlobError(e) => line(out, b'-', e),
        }
    }

    /// The encoding as a new buffer.
    pub fn to_bytes(&self, resp3: bool) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(&mut out, resp3);
        out.freeze()
    }
}

/// Formats a double as Redis's RESP3 does (`inf`, `-inf`, `nan`, shortest round-trip text).
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        "nan".into()
    } else if d.is_infinite() {
        if d > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        format!("{d}")
    }
}

fn line(out: &mut BytesMut, marker: u8, s: &[u8]) {
    out.reserve(s.len() + 3);
    out.put_u8(marker);
    out.put_slice(s);
    out.put_slice(b"\r\n");
}

fn int_line(out: &mut BytesMut, marker: u8, i: i64) {
    let mut buf = itoa::Buffer::new();
    line(out, marker, buf.format(i).as_bytes());
}

fn blob(out: &mut BytesMut, marker: u8, b: &[u8]) {
    int_line(out, marker, b.len() as i64);
    out.reserve(b.len() + 2);
    out.put_slice(b);
    out.put_slice(b"\r\n");
}

fn aggregate(out: &mut BytesMut, marker: u8, items: &[Frame], resp3: bool) {
    int_line(out, marker, items.len() as i64);
    for f in items {
        f.encode(out, resp3);
    }
}

/// The line starting at `pos` (without its CRLF), advancing `pos` past the CRLF.
fn read_line<'a>(buf: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let rest = &buf[*pos..];
    let cr = memchr::memchr(b'\r', rest)?;
    if cr + 1 >= rest.len() {
        return None;
    }
    *pos += cr + 2;
    Some(&rest[..cr])
}

fn read_int(buf: &[u8], pos: &mut usize) -> Result<Option<i64>, FrameError> {
    match read_line(buf, pos) {
        None => Ok(None),
        Some(l) => std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Some)
            .ok_or(FrameError::BadNumber),
    }
}

fn read_blob(buf: &[u8], pos: &mut usize, len: i64) -> Result<Option<Bytes>, FrameError> {
    if !(0..=MAX_BULK).contains(&len) {
        return Err(FrameError::BadLength(len));
    }
    let len = len as usize;
    if buf.len() - *pos < len + 2 {
        return Ok(None);
    }
    if &buf[*pos + len..*pos + len + 2] != b"\r\n" {
        return Err(FrameError::MissingCrlf);
    }
    let b = Bytes::copy_from_slice(&buf[*pos..*pos + len]);
    *pos += len + 2;
    Ok(Some(b))
}

macro_rules! need {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return Ok(None),
        }
    };
}

fn parse_items(
    buf: &[u8],
    pos: &mut usize,
    n: i64,
    depth: usize,
) -> Result<Option<Vec<Frame>>, FrameError> {
    if !(0..=MAX_ELEMENTS).contains(&n) {
        return Err(FrameError::BadLength(n));
    }
    let mut items = Vec::with_capacity((n as usize).min(1024));
    for _ in 0..n {
        items.push(need!(parse_at(buf, pos, depth + 1)?));
    }
    Ok(Some(items))
}

fn parse_at(buf: &[u8], pos: &mut usize, depth: usize) -> Result<Option<Frame>, FrameError> {
    if depth > MAX_DEPTH {
        return Err(FrameError::TooDeep);
    }
    let Some(&marker) = buf.get(*pos) else {
        return Ok(None);
    };
    *pos += 1;
    let copy = |l: &[u8]| Bytes::copy_from_slice(l);
    Ok(Some(match marker {
        b'+' => Frame::Simple(copy(need!(read_line(buf, pos)))),
        b'-' => Frame::Error(copy(need!(read_line(buf, pos)))),
        b':' => Frame::Integer(need!(read_int(buf, pos)?)),
        b'(' => Frame::BigNumber(copy(need!(read_line(buf, pos)))),
        b'_' => {
            need!(read_line(buf, pos));
            Frame::Null
        }
        b'#' => match need!(read_line(buf, pos)) {
            b"t" => Frame::Boolean(true),
            b"f" => Frame::Boolean(false),
            _ => return Err(FrameError::Malformed),
        },
        b',' => {
            let l = need!(read_line(buf, pos));
            let s = std::str::from_utf8(l).map_err(|_| FrameError::Malformed)?;
            Frame::Double(match s {
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                _ => s.parse().map_err(|_| FrameError::Malformed)?,
            })
        }
        b'$' => match need!(read_int(buf, pos)?) {
            -1 => Frame::Null,
            n => Frame::Bulk(need!(read_blob(buf, pos, n)?)),
        },
        b'!' => {
            let n = need!(read_int(buf, pos)?);
            Frame::BlobError(need!(read_blob(buf, pos, n)?))
        }
        b'=' => {
            let n = need!(read_int(buf, pos)?);
            let b = need!(read_blob(buf, pos, n)?);
            if b.len() < 4 || b[3] != b':' {
                return Err(FrameError::Malformed);
            }
            Frame::Verbatim {
                format: [b[0], b[1], b[2]],
                text: b.slice(4..),
            }
        }
        b'*' | b'~' | b'>' => {
            let n = need!(read_int(buf, pos)?);
            if n == -1 && marker == b'*' {
                return Ok(Some(Frame::Null));
            }
            let items = need!(parse_items(buf, pos, n, depth)?);
            match marker {
                b'*' => Frame::Array(items),
                b'~' => Frame::Set(items),
                _ => Frame::Push(items),
            }
        }
        b'%' => {
            let n = need!(read_int(buf, pos)?);
            if !(0..=MAX_ELEMENTS / 2).contains(&n) {
                return Err(FrameError::BadLength(n));
            }
            let mut items = need!(parse_items(buf, pos, 2 * n, depth)?).into_iter();
            let mut pairs = Vec::with_capacity(n as usize);
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                pairs.push((k, v));
            }
            Frame::Map(pairs)
        }
        other => return Err(FrameError::BadMarker(other as char)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(f: Frame, resp3: bool) -> Frame {
        let mut buf = BytesMut::from(&f.to_bytes(resp3)[..]);
        let back = Frame::parse(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty());
        back
    }

    #[test]
    fn resp3_values_roundtrip() {
        let f = Frame::Map(vec![
            (Frame::bulk("a"), Frame::Integer(-3)),
            (Frame::simple("b"), Frame::Double(1.5)),
            (
                Frame::bulk("c"),
                Frame::Set(vec![Frame::Boolean(true), Frame::Null]),
            ),
            (
                Frame::bulk("d"),
                Frame::Verbatim {
                    format: *b"txt",
                    text: Bytes::from_static(b"hi\r\nthere"),
                },
            ),
            (
                Frame::bulk("e"),
                Frame::BigNumber(Bytes::from_static(b"123456789012345678901")),
            ),
            (
                Frame::bulk("f"),
                Frame::BlobError(Bytes::from_static(b"ERR x")),
            ),
            (
                Frame::bulk("g"),
                Frame::Push(vec![Frame::Error(Bytes::from_static(b"E"))]),
            ),
        ]);
        assert_eq!(roundtrip(f.clone(), true), f);
    }

    #[test]
    fn resp2_downgrades_like_redis() {
        let f = Frame::Map(vec![(Frame::bulk("k"), Frame::Boolean(true))]);
        assert_eq!(&f.to_bytes(false)[..], b"*2\r\n$1\r\nk\r\n:1\r\n");
        assert_eq!(&Frame::Null.to_bytes(false)[..], b"$-1\r\n");
        assert_eq!(&Frame::Null.to_bytes(true)[..], b"_\r\n");
        assert_eq!(&Frame::Double(2.5).to_bytes(false)[..], b"$3\r\n2.5\r\n");
        assert_eq!(
            &Frame::Double(f64::INFINITY).to_bytes(true)[..],
            b",inf\r\n"
        );
    }

    #[test]
    fn incomplete_values_consume_nothing() {
        let full = Frame::Array(vec![Frame::bulk("hello"), Frame::Integer(7)]).to_bytes(false);
        for cut in 0..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert_eq!(Frame::parse(&mut buf), Ok(None), "cut at {cut}");
            assert_eq!(buf.len(), cut);
        }
    }

    #[test]
    fn malformed_values_are_typed_errors() {
        let cases: [(&[u8], FrameError); 5] = [
            (b"?x\r\n", FrameError::BadMarker('?')),
            (b":12a\r\n", FrameError::BadNumber),
            (b"$-5\r\n", FrameError::BadLength(-5)),
            (b"$1\r\nabc\r\n", FrameError::MissingCrlf),
            (b"#x\r\n", FrameError::Malformed),
        ];
        for (input, want) in cases {
            assert_eq!(Frame::parse(&mut BytesMut::from(input)), Err(want));
        }
        let deep = "*1\r\n".repeat(100);
        assert_eq!(
            Frame::parse(&mut BytesMut::from(deep.as_bytes())),
            Err(FrameError::TooDeep)
        );
    }

    #[test]
    fn null_bulk_and_null_array_decode_as_null() {
        let mut buf = BytesMut::from(&b"$-1\r\n*-1\r\n"[..]);
        assert_eq!(Frame::parse(&mut buf), Ok(Some(Frame::Null)));
        assert_eq!(Frame::parse(&mut buf), Ok(Some(Frame::Null)));
    }
}
