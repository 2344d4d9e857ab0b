//! The hot-path reply writer: appends RESP replies to a connection's output buffer.
//!
//! One [`Reply`] per connection knows whether the peer speaks RESP3 (after `HELLO 3`) and
//! writes each reply in that dialect: null is `_` in RESP3 and `$-1` in RESP2, maps are `%`
//! or flat arrays, doubles are `,` or bulk strings. Integers are formatted with `itoa`, and
//! nothing allocates except the buffer growing. Error messages have CR and LF replaced by
//! spaces, as Redis does, so a reply can never break the stream.

use crate::error::CmdError;
use bytes::{BufMut, BytesMut};

/// Writes replies into an output buffer. See the module docs.
#[derive(Debug)]
pub struct Reply {
    /// The output buffer; written to the socket once per batch of requests.
    pub out: BytesMut,
    /// Whether the peer speaks RESP3.
    pub resp3: bool,
}

impl Reply {
    /// A writer with an empty buffer of `capacity` bytes, speaking RESP2.
    pub fn new(capacity: usize) -> Self {
        Self {
            out: BytesMut::with_capacity(capacity),
            resp3: false,
        }
    }

    #[inline]
    fn header(&mut self, marker: u8, n: usize) {
        let mut buf = itoa::Buffer::new();
        let s = buf.format(n);
        self.out.reserve(s.len() + 3);
        self.out.put_u8(marker);
        self.out.put_slice(s.as_bytes());
        self.out.put_slice(b"\r\n");
    }

    /// A failed command's error line.
    pub fn command_error(&mut self, e: CmdError) {
        self.error(&e.into_line());
    }

    /// A HELP reply: one simple string per line.
    pub fn help(&mut self, lines: &[&str]) {
        self.array(lines.len());
        for l in lines {
            self.simple(l.as_bytes());
        }
    }

    /// `+OK`
    #[inline]
    pub fn ok(&mut self) {
        self.out.extend_from_slice(b"+OK\r\n");
    }

    /// A simple string (must not contain CR or LF).
    #[inline]
    pub fn simple(&mut self, s: &[u8]) {
        self.out.reserve(s.len() + 3);
        self.out.put_u8(b'+');
        self.out.put_slice(s);
        self.out.put_slice(b"\r\n");
    }

    /// An error reply; `msg` includes its code (`ERR ...`, `NOAUTH ...`).
    pub fn error(&mut self, msg: &str) {
        self.out.reserve(msg.len() + 3);
        self.out.put_u8(b'-');
        for &b in msg.as_bytes() {
            self.out
                .put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
        }
        self.out.put_slice(b"\r\n");
    }

    /// An integer.
    #[inline]
    pub fn int(&mut self, i: i64) {
        match i {
            0 => self.out.extend_from_slice(b":0\r\n"),
            1 => self.out.extend_from_slice(b":1\r\n"),
            _ => {
                let mut buf = itoa::Buffer::new();
                let s = buf.format(i);
                self.out.reserve(s.len() + 3);
                self.out.put_u8(b':');
                self.out.put_slice(s.as_bytes());
                self.out.put_slice(b"\r\n");
            }
        }
    }

    /// A bulk string.
    #[inline]
    pub fn bulk(&mut self, b: &[u8]) {
        self.header(b'$', b.len());
        self.out.reserve(b.len() + 2);
        self.out.put_slice(b);
        self.out.put_slice(b"\r\n");
    }

    /// A bulk string, or null.
    #[inline]
    pub fn opt_bulk(&mut self, b: Option<&[u8]>) {
        match b {
            Some(b) => self.bulk(b),
            None => self.null(),
        }
    }

    /// The null value (`_` in RESP3, the null bulk string in RESP2).
    #[inline]
    pub fn null(&mut self) {
        self.out
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"$-1\r\n" });
    }

    /// A double (`,` in RESP3, a bulk string in RESP2), formatted as Redis 7.0 does
    /// ([`crate::value::format_double`]).
    pub fn double(&mut self, v: f64) {
        let text = crate::value::format_double(v);
        if self.resp3 {
            self.out.put_u8(b',');
            self.out.put_slice(text.as_bytes());
            self.out.put_slice(b"\r\n");
        } else {
            self.bulk(text.as_bytes());
        }
    }

    /// The null array (`_` in RESP3, `*-1` in RESP2).
    pub fn null_array(&mut self) {
        self.out
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"*-1\r\n" });
    }

    /// The header of an array of `n` elements.
    #[inline]
    pub fn array(&mut self, n: usize) {
        self.header(b'*', n);
    }

    /// The header of a map of `n` pairs (a flat array of `2n` in RESP2).
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.header(b'%', n);
        } else {
            self.header(b'*', 2 * n);
        }
    }

    /// The header of a set of `n` elements (an array in RESP2).
    pub fn set(&mut self, n: usize) {
        self.header(if self.resp3 { b'~' } else { b'*' }, n);
    }

    /// A verbatim string (`=` in RESP3, a bulk string in RESP2).
    pub fn verbatim(&mut self, format: &[u8; 3], text: &[u8]) {
        if self.resp3 {
            self.header(b'=', text.len() + 4);
            self.out.reserve(text.len() + 6);
            self.out.put_slice(format);
            self.out.put_u8(b':');
            self.out.put_slice(text);
            self.out.put_slice(b"\r\n");
        } else {
            self.bulk(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialects() {
        let mut r = Reply::new(64);
        r.null();
        r.map(1);
        r.int(-12);
        r.error("ERR bad\r\nthing");
        assert_eq!(&r.out[..], b"$-1\r\n*2\r\n:-12\r\n-ERR bad  thing\r\n");
        let mut r = Reply::new(64);
        r.resp3 = true;
        r.null();
        r.map(1);
        r.verbatim(b"txt", b"hi");
        assert_eq!(&r.out[..], b"_\r\n%1\r\n=6\r\ntxt:hi\r\n");
    }
}
