//! The server's request parser: multibulk (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) and inline
//! (`GET k\r\n`) commands, incremental and zero-copy, with Redis's exact protocol errors.
//!
//! Contract: call [`RequestParser::parse`] with the unconsumed input starting at the current
//! request. It returns `Ok(Some(n))` when a whole request of `n` bytes is there (its
//! arguments are then available from [`RequestParser::args`] until the next call),
//! `Ok(None)` when more input is needed — call again with the same request at the front,
//! after appending more bytes — and a [`ProtocolError`] for malformed input, after which the
//! connection must be closed. Progress through a partial request is kept, so a request that
//! arrives in many pieces is scanned once, not once per piece.
//!
//! Arguments of multibulk requests are ranges into the caller's buffer (no copies); inline
//! arguments are unescaped into a scratch buffer the parser owns. Cluster mode, which runs
//! requests concurrently, takes them as `OwnedArgs` instead: the request's bytes split off
//! the read buffer (a reference count, not a copy) plus the ranges. A request with no
//! arguments (`*0`, `*-1`, a blank line) parses as an empty request, which the server skips
//! without a reply, as Redis does.

use crate::resp::RespLimits;
use bytes::Bytes;
use meridian_redis::args::{Args, OwnedArgs};
use meridian_redis::value::parse_i64;
use thiserror::Error;

/// Headers of bulk strings larger than this are refused before authentication (Redis).
const UNAUTHENTICATED_BULK: usize = 16 * 1024;
/// Multibulk headers larger than this are refused before authentication (Redis).
const UNAUTHENTICATED_MULTIBULK: usize = 10;

/// A malformed request. Messages are Redis's, minus the `ERR ` prefix.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// `*` followed by something that is not a valid count.
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// `$` followed by something that is not a valid length, or a length over the limit.
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// An argument of a multibulk request does not start with `$`.
    #[error("Protocol error: expected '$', got '{}'", printable(*.0))]
    ExpectedDollar(u8),
    /// An inline request longer than the limit without a newline.
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    /// A `*` header line longer than the limit.
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    /// A `$` header line longer than the limit.
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    /// An inline request with an unterminated quote (or a quote not followed by a space).
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// More than 10 arguments before authenticating.
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    /// A bulk string over 16 KiB before authenticating.
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
}

/// Redis replaces CR and LF with spaces in error replies.
fn printable(c: u8) -> char {
    match c {
        b'\r' | b'\n' => ' ',
        c => c as char,
    }
}

/// Incremental request parser for one connection. See the module docs.
#[derive(Debug)]
pub struct RequestParser {
    max_bulk_len: usize,
    max_multibulk_len: usize,
    max_inline_len: usize,
    /// Whether a multibulk request is partially parsed.
    in_progress: bool,
    /// Offset (from the request start) of the next unparsed byte.
    pos: usize,
    /// Arguments still expected.
    remaining: usize,
    /// Length of the bulk string whose header was parsed but whose data has not arrived.
    bulk_len: Option<usize>,
    /// Argument ranges, into the input (multibulk) or into `scratch` (inline).
    args: Vec<(usize, usize)>,
    inline: bool,
    scratch: Vec<u8>,
}

impl RequestParser {
    /// A parser enforcing `limits`.
    pub fn new(limits: &RespLimits) -> Self {
        Self {
            max_bulk_len: limits.max_bulk_len,
            max_multibulk_len: limits.max_multibulk_len,
            max_inline_len: limits.max_inline_len,
            in_progress: false,
            pos: 0,
            remaining: 0,
            bulk_len: None,
            args: Vec::with_capacity(8),
            inline: false,
            scratch: Vec::new(),
        }
    }

    /// Parses the request at the front of `buf`; see the module docs. `authenticated`
    /// false applies Redis's stricter limits for clients that still owe a password.
    pub fn parse(
        &mut self,
        buf: &[u8],
        authenticated: bool,
    ) -> Result<Option<usize>, ProtocolError> {
        if !self.in_progress {
            let Some(&first) = buf.first() else {
                return Ok(None);
            };
            self.args.clear();
            self.inline = false;
            if first != b'*' {
                return self.parse_inline(buf);
            }
            let Some(cr) = memchr::memchr(b'\r', buf) else {
                if buf.len() > self.max_inline_len {
                    return Err(ProtocolError::TooBigMultibulkCount);
                }
                return Ok(None);
            };
            if cr + 1 >= buf.len() {
                return Ok(None);
            }
            let n = parse_i64(&buf[1..cr]).ok_or(ProtocolError::InvalidMultibulkLength)?;
            if n > self.max_multibulk_len as i64 {
                return Err(ProtocolError::InvalidMultibulkLength);
            }
            if n > UNAUTHENTICATED_MULTIBULK as i64 && !authenticated {
                return Err(ProtocolError::UnauthenticatedMultibulkLength);
            }
            if n <= 0 {
                return Ok(Some(cr + 2));
            }
            self.in_progress = true;
            self.pos = cr + 2;
            self.remaining = n as usize;
            self.bulk_len = None;
            self.args.reserve((n as usize).min(1024));
        }
        while self.remaining > 0 {
            let len = match self.bulk_len {
                Some(len) => len,
                None => {
                    let rest = &buf[self.pos..];
                    let Some(cr) = memchr::memchr(b'\r', rest) else {
                        if rest.len() > self.max_inline_len {
                            return Err(ProtocolError::TooBigBulkCount);
                        }
                        return Ok(None);
                    };
                    if cr + 1 >= rest.len() {
                        return Ok(None);
                    }
                    if rest[0] != b'$' {
                        return Err(ProtocolError::ExpectedDollar(rest[0]));
                    }
                    let len = parse_i64(&rest[1..cr])
                        .filter(|&l| l >= 0 && l as u64 <= self.max_bulk_len as u64)
                        .ok_or(ProtocolError::InvalidBulkLength)?
                        as usize;
                    if len > UNAUTHENTICATED_BULK && !authenticated {
                        return Err(ProtocolError::UnauthenticatedBulkLength);
                    }
                    self.pos += cr + 2;
                    self.bulk_len = Some(len);
                    len
                }
            };
            // Like Redis, the two bytes after the data are skipped unchecked.
            if buf.len() - self.pos < len + 2 {
                return Ok(None);
            }
            self.args.push((self.pos, self.pos + len));
            self.pos += len + 2;
            self.bulk_len = None;
            self.remaining -= 1;
        }
        self.in_progress = false;
        Ok(Some(self.pos))
    }

    /// How many bytes the partially received request needs in all, when known (to size the
    /// read buffer for a large argument at once).
    pub fn needed(&self) -> Option<usize> {
        match (self.in_progress, self.bulk_len) {
            (true, Some(len)) => Some(self.pos + len + 2),
            _ => None,
        }
    }

    /// The arguments of the request the last successful [`RequestParser::parse`] returned;
    /// `buf` must be the same input.
    #[inline]
    pub fn args<'a>(&'a self, buf: &'a [u8]) -> Args<'a> {
        Args::from_parts(if self.inline { &self.scratch } else { buf }, &self.args)
    }

    /// Whether the last parsed request's arguments lie in its input (multibulk), rather
    /// than in the parser's own scratch, which the next parse overwrites (inline).
    pub(crate) fn args_in_input(&self) -> bool {
        !self.inline
    }

    /// Like [`RequestParser::args`], but owning `request`: the whole request's bytes, split
    /// from the input the last successful [`RequestParser::parse`] saw (multibulk arguments
    /// stay ranges into it; inline ones, unescaped, are copied).
    pub(crate) fn owned_args(&self, request: Bytes) -> OwnedArgs {
        let base = if self.inline {
            Bytes::copy_from_slice(&self.scratch)
        } else {
            request
        };
        OwnedArgs::from_parts(base, self.args.as_slice().into())
    }

    fn parse_inline(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let Some(nl) = memchr::memchr(b'\n', buf) else {
            if buf.len() > self.max_inline_len {
                return Err(ProtocolError::TooBigInline);
            }
            return Ok(None);
        };
        let mut line = &buf[..nl];
        if let [rest @ .., b'\r'] = line {
            line = rest;
        }
        self.inline = true;
        split_args(line, &mut self.scratch, &mut self.args)?;
        Ok(Some(nl + 1))
    }
}

/// Splits an inline command like Redis's `sdssplitargs`: blanks separate arguments;
/// `"..."` understands `\n \r \t \b \a \xHH` and `\<any>`; `'...'` understands only `\'`; a
/// closing quote must be followed by a blank or the end; a NUL byte ends the line.
fn split_args(
    line: &[u8],
    scratch: &mut Vec<u8>,
    args: &mut Vec<(usize, usize)>,
) -> Result<(), ProtocolError> {
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let is_space = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    scratch.clear();
    args.clear();
    let mut p = 0;
    loop {
        while at(p) != 0 && is_space(at(p)) {
            p += 1;
        }
        if at(p) == 0 {
            return Ok(());
        }
        let start = scratch.len();
        let (mut in_dq, mut in_sq) = (false, false);
        loop {
            let c = at(p);
            if in_dq {
                if c == b'\\'
                    && at(p + 1) == b'x'
                    && at(p + 2).is_ascii_hexdigit()
                    && at(p + 3).is_ascii_hexdigit()
                {
                    let hex = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
                    scratch.push(hex(at(p + 2)) * 16 + hex(at(p + 3)));
                    p += 3;
                } else if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    scratch.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return Err(ProtocolError::UnbalancedQuotes);
                } else {
                    scratch.push(c);
                }
            } else if in_sq {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    scratch.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return Err(ProtocolError::UnbalancedQuotes);
                } else {
                    scratch.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => break,
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    _ => scratch.push(c),
                }
            }
            p += 1;
        }
        args.push((start, scratch.len()));
        // A closing quote already stepped past itself; a blank is skipped by the next round.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser() -> RequestParser {
        RequestParser::new(&RespLimits {
            max_bulk_len: 100,
            max_multibulk_len: 50,
            max_inline_len: 64,
            ..RespLimits::default()
        })
    }

    fn parse_all(input: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut p = parser();
        let mut pos = 0;
        let mut out = Vec::new();
        while let Some(n) = p.parse(&input[pos..], true)? {
            let args = p.args(&input[pos..]);
            out.push(args.iter_from(0).map(|a| a.to_vec()).collect());
            pos += n;
        }
        Ok(out)
    }

    fn strs(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn multibulk_and_inline_requests() {
        let got = parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nSET a  \"b c\"\r\n*0\r\n\r\n").unwrap();
        assert_eq!(
            got,
            vec![
                strs(&["GET", "k"]),
                strs(&["SET", "a", "b c"]),
                vec![],
                vec![]
            ]
        );
    }

    #[test]
    fn every_split_point_resumes() {
        let input = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$10\r\n0123456789\r\n";
        for cut in 0..input.len() {
            let mut p = parser();
            let first = p.parse(&input[..cut], true).unwrap();
            assert_eq!(first, None, "cut at {cut}");
            let n = p.parse(input, true).unwrap().unwrap();
            assert_eq!(n, input.len());
            let args = p.args(input);
            assert_eq!(args.get(2), b"0123456789");
        }
    }

    #[test]
    fn owned_args_outlive_the_input_and_the_scratch_buffer() {
        let mut p = parser();
        let mut buf =
            bytes::BytesMut::from(&b"SET a  \"b c\"\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n"[..]);
        let mut owned = Vec::new();
        while let Some(n) = p.parse(&buf, true).unwrap() {
            owned.push(p.owned_args(buf.split_to(n).freeze()));
        }
        buf.clear();
        buf.extend_from_slice(b"overwritten");
        let got: Vec<Vec<&[u8]>> = owned
            .iter()
            .map(|a| a.get().iter_from(0).collect())
            .collect();
        assert_eq!(
            got,
            vec![
                vec![&b"SET"[..], b"a", b"b c"],
                vec![&b"GET"[..], b"k"],
                vec![&b"PING"[..]],
            ]
        );
    }

    #[test]
    fn inline_quoting_like_sdssplitargs() {
        let got = parse_all(b"set k \"a\\x41\\n\" 'it\\'s'\n").unwrap();
        assert_eq!(
            got,
            vec![vec![
                b"set".to_vec(),
                b"k".to_vec(),
                b"aA\n".to_vec(),
                b"it's".to_vec()
            ]]
        );
        assert_eq!(
            parse_all(b"get \"k\n"),
            Err(ProtocolError::UnbalancedQuotes)
        );
        assert_eq!(
            parse_all(b"get \"k\"x\n"),
            Err(ProtocolError::UnbalancedQuotes)
        );
        assert_eq!(
            parse_all(b"get 'k\r\n"),
            Err(ProtocolError::UnbalancedQuotes)
        );
    }

    #[test]
    fn protocol_errors_match_redis() {
        let cases: [(&[u8], &str); 8] = [
            (b"*x\r\n", "Protocol error: invalid multibulk length"),
            (b"*51\r\n", "Protocol error: invalid multibulk length"),
            (b"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"),
            (b"*1\r\n$101\r\n", "Protocol error: invalid bulk length"),
            (b"*1\r\nGET\r\n", "Protocol error: expected '$', got 'G'"),
            (&[b'a'; 65], "Protocol error: too big inline request"),
            (&[b'*'; 65], "Protocol error: too big mbulk count string"),
            (
                b"*1\r\n$1111111111111111111111111111111111111111111111111111111111111111111",
                "Protocol error: too big bulk count string",
            ),
        ];
        for (input, msg) in cases {
            let err = parse_all(input).unwrap_err();
            assert_eq!(
                err.to_string(),
                msg,
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
        assert_eq!(
            ProtocolError::ExpectedDollar(b'\r').to_string(),
            "Protocol error: expected '$', got ' '"
        );
    }

    #[test]
    fn unauthenticated_limits() {
        let mut p = parser();
        assert_eq!(
            p.parse(b"*11\r\n", false),
            Err(ProtocolError::UnauthenticatedMultibulkLength)
        );
        let mut p = RequestParser::new(&RespLimits::default());
        assert_eq!(
            p.parse(b"*1\r\n$16385\r\n", false),
            Err(ProtocolError::UnauthenticatedBulkLength)
        );
    }
}
