//! RESP values ([`Frame`]) with an incremental decoder and an encoder, RESP2 and RESP3: the
//! one RESP codec of clients, tests and the load generator (`meridian-bench`'s RESP target).
//!
//! Decoding, all of it bounded by [`DecodeLimits`] (by default [`MAX_FRAME_BYTES`] and
//! [`MAX_DEPTH`]: a longer frame or a deeper nesting is malformed, never an allocation):
//! - [`frame_len`] finds the length of the complete frame at the front of a buffer, `Ok(None)`
//!   while it is incomplete, or a typed [`FrameError`]; it allocates and copies nothing, so a
//!   pipelined client can check replies where they lie and look at each with [`peek`];
//! - [`Frame::parse_with`] (and [`Frame::parse`], with the default limits) consumes exactly one
//!   complete value from the front of a buffer, returns `Ok(None)` (consuming nothing) while
//!   the value is incomplete, and a typed [`FrameError`] (consuming nothing) for malformed
//!   input. Strings are slices of the buffer's storage, not copies.
//!
//! The decoder reads every RESP2 and RESP3 type: simple strings, errors, integers, bulk strings
//! (null `$-1` included), arrays (null `*-1` included), null `_`, doubles, booleans, big
//! numbers, blob errors, verbatim strings, maps, sets and pushes. Attributes (`|`), metadata
//! about the value that follows them, are checked and skipped: the value is what decodes, and
//! inside an aggregate an attribute is not one of its elements. Streamed (`?`) lengths are
//! refused. It is strict: a line holding a lone CR or LF, a length with a sign or spaces, a
//! null `_` with data, a big number that is not digits are all malformed. It never panics.
//!
//! Encoding: [`encode_command`] writes a command (an array of bulk strings) straight into a
//! buffer; [`Frame::encode`] writes a value for a RESP2 or a RESP3 peer: RESP3 types a RESP2
//! peer cannot read are downgraded the way Redis does (maps to flat arrays, sets to arrays,
//! doubles and big numbers to bulk strings, booleans to 1/0, null to the null bulk string).
//!
//! The server reads requests with the faster [`crate::resp::request::RequestParser`] and
//! writes hot replies with [`crate::resp::reply`]; this module is for everything else.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Deepest nesting of aggregates the decoder accepts by default (a guard against stack
/// exhaustion): a value inside 64 nested aggregates is fine, one more level is not.
pub const MAX_DEPTH: usize = 64;
/// Largest frame, headers included, the decoder accepts by default: 512 MiB, Redis's own
/// `proto-max-bulk-len`.
pub const MAX_FRAME_BYTES: usize = 512 * 1024 * 1024;
/// Longest length/integer line (`$`, `*`, `:` ...): 20 digits and a sign are plenty.
const MAX_NUMERIC_LINE: usize = 32;

/// What the decoder accepts; beyond it a frame is malformed ([`FrameError::TooLarge`],
/// [`FrameError::TooDeep`]), and refused as soon as its headers say so, before its bytes are
/// buffered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest frame in bytes, headers included: a declared string length, an element count
    /// (each element takes at least three bytes) or a line that would make the frame longer
    /// is refused, and so is an unfinished frame already longer.
    pub max_frame: usize,
    /// Deepest nesting of aggregates (the top level is depth 0).
    pub max_depth: usize,
}

impl DecodeLimits {
    /// [`MAX_FRAME_BYTES`] and [`MAX_DEPTH`].
    pub const DEFAULT: DecodeLimits = DecodeLimits {
        max_frame: MAX_FRAME_BYTES,
        max_depth: MAX_DEPTH,
    };
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits::DEFAULT
    }
}

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
    /// RESP3 `>n` followed by `n` values: out-of-band data (pub/sub, invalidations), not a
    /// reply to a request.
    Push(Vec<Frame>),
    /// RESP3 `,1.5` (`inf`, `-inf` and `nan` included).
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
    /// A length or integer line does not parse (or is too long to be a number).
    #[error("invalid number in RESP line")]
    BadNumber,
    /// A length is negative (other than a null's -1).
    #[error("invalid RESP length {0}")]
    BadLength(i64),
    /// A bulk string is not followed by CRLF.
    #[error("bulk string not terminated by CRLF")]
    MissingCrlf,
    /// A line holds a carriage return not followed by a line feed, or a lone line feed.
    #[error("RESP line with a lone CR or LF")]
    BadLine,
    /// A boolean is neither `t` nor `f`, a double or a big number does not parse, a null has
    /// data, or a verbatim string has no format.
    #[error("malformed RESP3 value")]
    Malformed,
    /// Aggregates nest deeper than [`DecodeLimits::max_depth`].
    #[error("RESP value nested too deeply")]
    TooDeep,
    /// The frame is, or says it will be, longer than [`DecodeLimits::max_frame`].
    #[error("RESP frame longer than {limit} bytes")]
    TooLarge {
        /// The limit exceeded.
        limit: usize,
    },
    /// A RESP3 streamed string or aggregate (`$?`, `*?`): not supported.
    #[error("streamed RESP3 lengths (`?`) are not supported")]
    Streamed,
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
    /// [`Frame::parse_with`] with [`DecodeLimits::DEFAULT`].
    ///
    /// # Errors
    /// [`FrameError`] if `buf` does not start with a valid RESP value.
    pub fn parse(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        Frame::parse_with(buf, &DecodeLimits::DEFAULT)
    }

    /// Removes and returns the complete value at the front of `buf`; `Ok(None)` (and `buf`
    /// untouched) if it holds only part of one. Strings are slices of `buf`'s storage, not
    /// copies.
    ///
    /// # Errors
    /// [`FrameError`] if `buf` does not start with a valid value within `limits`; `buf` is
    /// then left untouched.
    pub fn parse_with(
        buf: &mut BytesMut,
        limits: &DecodeLimits,
    ) -> Result<Option<Frame>, FrameError> {
        let Some(len) = frame_len(buf, limits)? else {
            return Ok(None);
        };
        let src = buf.split_to(len).freeze();
        let walker = Walker {
            buf: &src,
            src: Some(&src),
            limits: *limits,
        };
        match walker.walk(0, 0, true)? {
            Some((_, Some(frame))) => Ok(Some(frame)),
            // Unreachable: the same bytes were just checked as one complete value.
            _ => Err(FrameError::Malformed),
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
                    len_line(out, b'%', pairs.len());
                } else {
                    len_line(out, b'*', 2 * pairs.len());
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
            Frame::Boolean(b) => int_line(out, b':', i64::from(*b)),
            Frame::BigNumber(n) if resp3 => line(out, b'(', n),
            Frame::BigNumber(n) => blob(out, b'$', n),
            Frame::Verbatim { format, text } if resp3 => {
                len_line(out, b'=', text.len() + 4);
                out.put_slice(format);
                out.put_u8(b':');
                out.put_slice(text);
                out.put_slice(b"\r\n");
            }
            Frame::Verbatim { text, .. } => blob(out, b'$', text),
            Frame::BlobError(e) if resp3 => blob(out, b'!', e),
            Frame::BlobError(e) => {
                // RESP2 has no blob errors, only a line: CR and LF become spaces, as Redis
                // does for error replies; raw, they ended the line early and the rest of the
                // message read as further replies (found by fuzzing).
                let flat: Vec<u8> = e
                    .iter()
                    .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c })
                    .collect();
                line(out, b'-', &flat)
            }
        }
    }

    /// The encoding as a new buffer.
    pub fn to_bytes(&self, resp3: bool) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(&mut out, resp3);
        out.freeze()
    }
}

/// Appends `args` to `out` as a RESP command (an array of bulk strings, what every server
/// reads), with one reservation and no intermediate value: the load generator's hot path.
pub fn encode_command(out: &mut BytesMut, args: &[&[u8]]) {
    // A header is at most 1 + 20 digits + CRLF; a bulk string adds its own CRLF.
    let size = args.iter().fold(HEADER, |n, a| n + a.len() + HEADER + 2);
    out.reserve(size);
    let mut scratch = [0u8; HEADER];
    header(out, &mut scratch, b'*', args.len());
    for arg in args {
        header(out, &mut scratch, b'$', arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Longest `*`/`$` header: a marker, 20 digits, CRLF.
const HEADER: usize = 24;

/// Appends `marker`, `n` in decimal and CRLF in one copy (measured twice as fast as writing
/// them one by one).
fn header(out: &mut BytesMut, scratch: &mut [u8; HEADER], marker: u8, mut n: usize) {
    scratch[HEADER - 2] = b'\r';
    scratch[HEADER - 1] = b'\n';
    let mut i = HEADER - 2;
    loop {
        i -= 1;
        // `n % 10` is a digit: the cast cannot truncate.
        scratch[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    i -= 1;
    scratch[i] = marker;
    out.extend_from_slice(&scratch[i..]);
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

fn len_line(out: &mut BytesMut, marker: u8, n: usize) {
    let mut buf = itoa::Buffer::new();
    line(out, marker, buf.format(n).as_bytes());
}

fn blob(out: &mut BytesMut, marker: u8, b: &[u8]) {
    len_line(out, marker, b.len());
    out.reserve(b.len() + 2);
    out.put_slice(b);
    out.put_slice(b"\r\n");
}

fn aggregate(out: &mut BytesMut, marker: u8, items: &[Frame], resp3: bool) {
    len_line(out, marker, items.len());
    for f in items {
        f.encode(out, resp3);
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

/// The length in bytes of the complete value at the front of `buf` (attributes before it
/// included), `Ok(None)` if `buf` holds only part of one (read more and call again), or why
/// it is malformed. Allocates and copies nothing.
///
/// # Errors
/// [`FrameError`] if `buf` does not start with a valid RESP2/RESP3 value within `limits`:
/// in particular [`FrameError::TooLarge`] as soon as a header declares more than
/// [`DecodeLimits::max_frame`] bytes, or an unfinished value is already longer.
pub fn frame_len(buf: &[u8], limits: &DecodeLimits) -> Result<Option<usize>, FrameError> {
    let walker = Walker {
        buf,
        src: None,
        limits: *limits,
    };
    match walker.walk(0, 0, false)? {
        Some((end, _)) => Ok(Some(end)),
        None if buf.len() > limits.max_frame => Err(FrameError::TooLarge {
            limit: limits.max_frame,
        }),
        None => Ok(None),
    }
}

/// The top level of a value, read where it lies (see [`peek`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peek<'a> {
    /// RESP3 `_`, RESP2's `$-1` and `*-1`.
    Null,
    /// `-message` or RESP3 `!n message`: the message.
    Error(&'a [u8]),
    /// An aggregate (`*`, `~`, `%` or `>`): its type byte, its length (in pairs for a map),
    /// and the bytes from its first element on (which [`peek`] reads in turn).
    Aggregate {
        /// The type byte.
        kind: u8,
        /// How many elements (pairs for `%`).
        len: usize,
        /// The bytes after the header: the elements, then whatever followed the value.
        items: &'a [u8],
    },
    /// Any other value: its type byte and its text (a line's, or a string's bytes; a verbatim
    /// string's with its `fmt:` prefix).
    Scalar {
        /// The type byte.
        kind: u8,
        /// The text.
        data: &'a [u8],
    },
}

/// The top level of the value at the front of `bytes` (after any attributes), without decoding
/// the rest of it: what a client needs to tell a reply's outcome without allocating. Meant for
/// a value [`frame_len`] accepted (anything may follow it), where it always answers; on other
/// input it answers `None` or a best effort, and never panics.
pub fn peek(bytes: &[u8]) -> Option<Peek<'_>> {
    let mut at = 0;
    while bytes.get(at) == Some(&b'|') {
        let walker = Walker {
            buf: bytes,
            src: None,
            limits: DecodeLimits {
                max_frame: bytes.len(),
                max_depth: MAX_DEPTH,
            },
        };
        at = walker.value(at, 0, false).ok()??.0;
    }
    let value = bytes.get(at..)?;
    let kind = *value.first()?;
    // Header lines are short: a plain scan beats memchr's setup here.
    let cr = 1 + value.get(1..)?.iter().position(|&b| b == b'\r')?;
    let line = &value[1..cr];
    let rest = value.get(cr + 2..)?;
    Some(match kind {
        b'_' => Peek::Null,
        b'$' | b'*' if line == b"-1" => Peek::Null,
        b'-' => Peek::Error(line),
        b'$' | b'!' | b'=' => {
            let data = rest.get(..parse_length(line).ok()??)?;
            if kind == b'!' {
                Peek::Error(data)
            } else {
                Peek::Scalar { kind, data }
            }
        }
        b'*' | b'~' | b'%' | b'>' => Peek::Aggregate {
            kind,
            len: parse_length(line).ok()??,
            items: rest,
        },
        _ => Peek::Scalar { kind, data: line },
    })
}

/// A value's end and, when decoding, the value; `None` when more bytes are needed.
type Step = Result<Option<(usize, Option<Frame>)>, FrameError>;

/// One pass over a buffer: checks a value (`src: None`) or decodes it (slicing `src`).
struct Walker<'a> {
    buf: &'a [u8],
    /// The same bytes as `buf`, to slice strings from when decoding.
    src: Option<&'a Bytes>,
    limits: DecodeLimits,
}

impl Walker<'_> {
    fn slice(&self, from: usize, to: usize) -> Bytes {
        self.src.map(|s| s.slice(from..to)).unwrap_or_default()
    }

    fn too_large(&self) -> FrameError {
        FrameError::TooLarge {
            limit: self.limits.max_frame,
        }
    }

    /// The index of the `\r` ending the line that starts at `start`; `Ok(None)` until it
    /// has arrived.
    fn line_end(&self, start: usize, numeric: bool) -> Result<Option<usize>, FrameError> {
        let rest = self.buf.get(start..).unwrap_or_default();
        // Longest the line may be: a number's, or what keeps the value within the limit.
        let (limit, too_long) = if numeric {
            (MAX_NUMERIC_LINE, FrameError::BadNumber)
        } else {
            (
                self.limits
                    .max_frame
                    .saturating_sub(start.saturating_add(2)),
                self.too_large(),
            )
        };
        let window = &rest[..rest.len().min(limit.saturating_add(2))];
        // Numbers are a few bytes: a plain scan beats memchr's setup there.
        let found = if numeric {
            window.iter().position(|&b| b == b'\r' || b == b'\n')
        } else {
            memchr::memchr2(b'\r', b'\n', window)
        };
        match found {
            Some(i) if i > limit => Err(too_long),
            Some(i) if window[i] == b'\n' => Err(FrameError::BadLine),
            Some(i) => match rest.get(i + 1) {
                None => Ok(None),
                Some(b'\n') => Ok(Some(start + i)),
                Some(_) => Err(FrameError::BadLine),
            },
            None if rest.len() > limit => Err(too_long),
            None => Ok(None),
        }
    }

    /// The value at `pos`, after any attributes (checked and skipped).
    fn walk(&self, mut pos: usize, depth: usize, build: bool) -> Step {
        while self.buf.get(pos) == Some(&b'|') {
            match self.value(pos, depth, false)? {
                Some((end, _)) => pos = end,
                None => return Ok(None),
            }
        }
        self.value(pos, depth, build)
    }

    /// The value (or attribute) at `pos`, `depth` aggregates deep; decoded if `build`.
    fn value(&self, pos: usize, depth: usize, build: bool) -> Step {
        let Some(&kind) = self.buf.get(pos) else {
            return Ok(None);
        };
        if depth > self.limits.max_depth {
            return Err(FrameError::TooDeep);
        }
        let numeric = match kind {
            b'+' | b'-' | b',' | b'(' => false,
            b':' | b'_' | b'#' | b'$' | b'!' | b'=' | b'*' | b'~' | b'>' | b'%' | b'|' => true,
            other => return Err(FrameError::BadMarker(char::from(other))),
        };
        let Some(cr) = self.line_end(pos + 1, numeric)? else {
            return Ok(None);
        };
        let line = &self.buf[pos + 1..cr];
        let next = cr + 2;
        let build = build && self.src.is_some();
        let frame = match kind {
            b'+' => build.then(|| Frame::Simple(self.slice(pos + 1, cr))),
            b'-' => build.then(|| Frame::Error(self.slice(pos + 1, cr))),
            b':' => {
                let n = parse_i64(line).ok_or(FrameError::BadNumber)?;
                build.then_some(Frame::Integer(n))
            }
            b'_' if line.is_empty() => build.then_some(Frame::Null),
            b'_' => return Err(FrameError::Malformed),
            b'#' => {
                let b = match line {
                    b"t" => true,
                    b"f" => false,
                    _ => return Err(FrameError::Malformed),
                };
                build.then_some(Frame::Boolean(b))
            }
            b',' => {
                let d = std::str::from_utf8(line)
                    .ok()
                    .and_then(|s| s.parse::<f64>().ok())
                    .ok_or(FrameError::Malformed)?;
                build.then_some(Frame::Double(d))
            }
            b'(' => {
                let digits = line.strip_prefix(b"-").unwrap_or(line);
                if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                    return Err(FrameError::Malformed);
                }
                build.then(|| Frame::BigNumber(self.slice(pos + 1, cr)))
            }
            b'$' | b'!' | b'=' => return self.blob(kind, line, next, build),
            _ => return self.aggregate(kind, line, next, depth, build),
        };
        Ok(Some((next, frame)))
    }

    /// A string (`$`, `!`, `=`) whose header line is `line` and whose bytes start at `start`.
    fn blob(&self, kind: u8, line: &[u8], start: usize, build: bool) -> Step {
        let Some(len) = parse_length(line)? else {
            return match kind {
                b'$' => Ok(Some((start, build.then_some(Frame::Null)))),
                _ => Err(FrameError::BadLength(-1)),
            };
        };
        if len
            > self
                .limits
                .max_frame
                .saturating_sub(start.saturating_add(2))
        {
            return Err(self.too_large());
        }
        let end = start + len;
        let Some(crlf) = self.buf.get(end..end + 2) else {
            return Ok(None);
        };
        if crlf != b"\r\n" {
            return Err(FrameError::MissingCrlf);
        }
        let frame = match kind {
            b'$' => build.then(|| Frame::Bulk(self.slice(start, end))),
            b'!' => build.then(|| Frame::BlobError(self.slice(start, end))),
            _ => {
                if len < 4 || self.buf[start + 3] != b':' {
                    return Err(FrameError::Malformed);
                }
                let b = &self.buf[start..start + 3];
                build.then(|| Frame::Verbatim {
                    format: [b[0], b[1], b[2]],
                    text: self.slice(start + 4, end),
                })
            }
        };
        Ok(Some((end + 2, frame)))
    }

    /// An aggregate (`*`, `~`, `>`, `%`, or an attribute `|`) whose header line is `line`
    /// and whose elements start at `start`.
    fn aggregate(&self, kind: u8, line: &[u8], start: usize, depth: usize, build: bool) -> Step {
        let Some(count) = parse_length(line)? else {
            return match kind {
                b'*' => Ok(Some((start, build.then_some(Frame::Null)))),
                _ => Err(FrameError::BadLength(-1)),
            };
        };
        let pairs = matches!(kind, b'%' | b'|');
        let items = if pairs {
            count.saturating_mul(2)
        } else {
            count
        };
        // Every element takes at least 3 bytes (`_\r\n`): more cannot fit in the limit.
        if items > self.limits.max_frame.saturating_sub(start) / 3 {
            return Err(self.too_large());
        }
        let build = build && kind != b'|';
        let mut out = Vec::with_capacity(if build { items.min(1024) } else { 0 });
        let mut at = start;
        for _ in 0..items {
            match self.walk(at, depth + 1, build)? {
                None => return Ok(None),
                Some((end, frame)) => {
                    at = end;
                    out.extend(frame);
                }
            }
        }
        if !build {
            return Ok(Some((at, None)));
        }
        let frame = match kind {
            b'*' => Frame::Array(out),
            b'~' => Frame::Set(out),
            b'>' => Frame::Push(out),
            _ => {
                let mut kv = Vec::with_capacity(out.len() / 2);
                let mut it = out.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    kv.push((k, v));
                }
                Frame::Map(kv)
            }
        };
        Ok(Some((at, Some(frame))))
    }
}

/// A length: `-1` is `None` (a null), otherwise decimal digits only.
fn parse_length(line: &[u8]) -> Result<Option<usize>, FrameError> {
    if line.first().is_some_and(u8::is_ascii_digit) {
        // The hot path (every bulk string and aggregate): digits, by hand.
        let mut n: usize = 0;
        for &d in line {
            if !d.is_ascii_digit() {
                return Err(FrameError::BadNumber);
            }
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(usize::from(d - b'0')))
                .ok_or(FrameError::BadNumber)?;
        }
        return Ok(Some(n));
    }
    match line {
        b"-1" => Ok(None),
        b"?" => Err(FrameError::Streamed),
        [b'-', digits @ ..] if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) => {
            Err(parse_i64(line).map_or(FrameError::BadNumber, FrameError::BadLength))
        }
        _ => Err(FrameError::BadNumber),
    }
}

fn parse_i64(line: &[u8]) -> Option<i64> {
    std::str::from_utf8(line).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn roundtrip(f: Frame, resp3: bool) -> Frame {
        let mut buf = BytesMut::from(&f.to_bytes(resp3)[..]);
        let back = Frame::parse(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty());
        back
    }

    fn one(input: &[u8]) -> Frame {
        let mut buf = BytesMut::from(input);
        let frame = Frame::parse(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty(), "left over: {buf:?}");
        frame
    }

    /// The error for `input`, checking that nothing was consumed and that [`frame_len`]
    /// agrees.
    fn malformed(input: &[u8]) -> FrameError {
        let mut buf = BytesMut::from(input);
        let err = Frame::parse(&mut buf).unwrap_err();
        assert_eq!(buf.len(), input.len(), "a refused frame is not consumed");
        assert_eq!(frame_len(input, &DecodeLimits::DEFAULT), Err(err.clone()));
        err
    }

    /// One encoding of every type, with what it decodes to.
    fn corpus() -> Vec<(&'static [u8], Frame)> {
        vec![
            (b"+OK\r\n", Frame::Simple(b("OK"))),
            (b"+\r\n", Frame::Simple(b(""))),
            (
                b"-ERR unknown command\r\n",
                Frame::Error(b("ERR unknown command")),
            ),
            (b":0\r\n", Frame::Integer(0)),
            (b":-42\r\n", Frame::Integer(-42)),
            (b":+7\r\n", Frame::Integer(7)),
            (b":9223372036854775807\r\n", Frame::Integer(i64::MAX)),
            (b":-9223372036854775808\r\n", Frame::Integer(i64::MIN)),
            (b"$3\r\nabc\r\n", Frame::Bulk(b("abc"))),
            (b"$0\r\n\r\n", Frame::Bulk(b(""))),
            (b"$4\r\na\r\nb\r\n", Frame::Bulk(b("a\r\nb"))),
            (b"$-1\r\n", Frame::Null),
            (b"*-1\r\n", Frame::Null),
            (b"*0\r\n", Frame::Array(vec![])),
            (
                b"*3\r\n:1\r\n$1\r\nx\r\n*1\r\n$-1\r\n",
                Frame::Array(vec![
                    Frame::Integer(1),
                    Frame::Bulk(b("x")),
                    Frame::Array(vec![Frame::Null]),
                ]),
            ),
            (b"_\r\n", Frame::Null),
            (b",3.5\r\n", Frame::Double(3.5)),
            (b",-inf\r\n", Frame::Double(f64::NEG_INFINITY)),
            (b",inf\r\n", Frame::Double(f64::INFINITY)),
            (b",1e3\r\n", Frame::Double(1000.0)),
            (b"#t\r\n", Frame::Boolean(true)),
            (b"#f\r\n", Frame::Boolean(false)),
            (
                b"(-3492890328409238509324850943850943825024385\r\n",
                Frame::BigNumber(b("-3492890328409238509324850943850943825024385")),
            ),
            (
                b"!21\r\nSYNTAX invalid syntax\r\n",
                Frame::BlobError(b("SYNTAX invalid syntax")),
            ),
            (
                b"=15\r\ntxt:Some string\r\n",
                Frame::Verbatim {
                    format: *b"txt",
                    text: b("Some string"),
                },
            ),
            (
                b"%2\r\n+first\r\n:1\r\n+second\r\n_\r\n",
                Frame::Map(vec![
                    (Frame::Simple(b("first")), Frame::Integer(1)),
                    (Frame::Simple(b("second")), Frame::Null),
                ]),
            ),
            (
                b"~2\r\n#t\r\n,0.5\r\n",
                Frame::Set(vec![Frame::Boolean(true), Frame::Double(0.5)]),
            ),
            // An attribute is skipped: the value after it is what decodes.
            (b"|1\r\n+ttl\r\n:3600\r\n+OK\r\n", Frame::Simple(b("OK"))),
            // Inside an aggregate, it is not one of the elements.
            (
                b"*2\r\n|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.1923\r\n:2039123\r\n:9543892\r\n",
                Frame::Array(vec![Frame::Integer(2039123), Frame::Integer(9543892)]),
            ),
            (
                b">2\r\n+message\r\n$2\r\nhi\r\n",
                Frame::Push(vec![Frame::Simple(b("message")), Frame::Bulk(b("hi"))]),
            ),
        ]
    }

    #[test]
    fn every_type_decodes() {
        for (input, expected) in corpus() {
            let text = String::from_utf8_lossy(input);
            assert_eq!(one(input), expected, "{text}");
            assert_eq!(
                frame_len(input, &DecodeLimits::DEFAULT),
                Ok(Some(input.len())),
                "{text}"
            );
        }
        match one(b",nan\r\n") {
            Frame::Double(d) => assert!(d.is_nan()),
            other => panic!("{other:?}"),
        }
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
    fn commands_encode_as_arrays_of_bulk_strings() {
        let mut out = BytesMut::new();
        encode_command(&mut out, &[b"SET", b"user1", b""]);
        assert_eq!(&out[..], b"*3\r\n$3\r\nSET\r\n$5\r\nuser1\r\n$0\r\n\r\n");
        let long = vec![b'x'; 1234];
        out.clear();
        encode_command(&mut out, &[b"HSET", b"k", b"field0", &long]);
        assert_eq!(
            Frame::parse(&mut out),
            Ok(Some(Frame::bulks([
                b"HSET".to_vec(),
                b"k".to_vec(),
                b"field0".to_vec(),
                long
            ])))
        );
        encode_command(&mut out, &[]);
        assert_eq!(&out[..], b"*0\r\n");
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
    fn partial_frames_need_more_at_every_split_point() {
        let all: Vec<u8> = corpus().iter().flat_map(|(i, _)| i.to_vec()).collect();
        let expected: Vec<Frame> = corpus().into_iter().map(|(_, f)| f).collect();
        for (input, frame) in corpus() {
            for cut in 0..input.len() {
                let mut buf = BytesMut::from(&input[..cut]);
                assert_eq!(Frame::parse(&mut buf), Ok(None), "cut {cut}");
                assert_eq!(buf.len(), cut, "a partial frame is not consumed");
                assert_eq!(frame_len(&input[..cut], &DecodeLimits::DEFAULT), Ok(None));
                buf.extend_from_slice(&input[cut..]);
                assert_eq!(Frame::parse(&mut buf), Ok(Some(frame.clone())));
            }
        }
        // The whole stream, fed in two pieces split anywhere, decodes to the same frames.
        for cut in 0..=all.len() {
            let mut buf = BytesMut::from(&all[..cut]);
            let mut got = Vec::new();
            while let Some(f) = Frame::parse(&mut buf).unwrap() {
                got.push(f);
            }
            buf.extend_from_slice(&all[cut..]);
            while let Some(f) = Frame::parse(&mut buf).unwrap() {
                got.push(f);
            }
            assert!(buf.is_empty());
            assert_eq!(got, expected, "cut {cut}");
        }
    }

    #[test]
    fn malformed_values_are_typed_errors() {
        let cases: [(&[u8], FrameError); 29] = [
            (b"?x\r\n", FrameError::BadMarker('?')),
            (b"?", FrameError::BadMarker('?')),
            (b":12a\r\n", FrameError::BadNumber),
            (b":\r\n", FrameError::BadNumber),
            (b":99999999999999999999\r\n", FrameError::BadNumber),
            (b"$-5\r\n", FrameError::BadLength(-5)),
            (b"$-2\r\n", FrameError::BadLength(-2)),
            (b"*-2\r\n", FrameError::BadLength(-2)),
            (b"%-1\r\n", FrameError::BadLength(-1)),
            (b"!-1\r\n", FrameError::BadLength(-1)),
            (b"$x\r\n", FrameError::BadNumber),
            (b"$+3\r\nabc\r\n", FrameError::BadNumber),
            (b"$\r\n", FrameError::BadNumber),
            (b"$?\r\n", FrameError::Streamed),
            (b"*?\r\n", FrameError::Streamed),
            (b"$1\r\nabc\r\n", FrameError::MissingCrlf),
            (b"$3\r\nabcX\r\n", FrameError::MissingCrlf),
            (b"+OK\rX", FrameError::BadLine),
            (b"+O\nK\r\n", FrameError::BadLine),
            (b"*2\r\n:1\r\n?\r\n", FrameError::BadMarker('?')),
            (b"#x\r\n", FrameError::Malformed),
            (b"_x\r\n", FrameError::Malformed),
            (b",abc\r\n", FrameError::Malformed),
            (b",\r\n", FrameError::Malformed),
            (b"(12a\r\n", FrameError::Malformed),
            (b"(\r\n", FrameError::Malformed),
            (b"=2\r\nab\r\n", FrameError::Malformed),
            (b"=5\r\ntxtab\r\n", FrameError::Malformed),
            (
                b"$123456789012345678901234567890123\r\n",
                FrameError::BadNumber,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(malformed(input), want, "{}", String::from_utf8_lossy(input));
        }
        // A header that never ends is refused once it is too long to be a length.
        assert_eq!(malformed(&[b'$'; 64]), FrameError::BadNumber);
        let deep = "*1\r\n".repeat(100);
        assert_eq!(malformed(deep.as_bytes()), FrameError::TooDeep);
    }

    #[test]
    fn oversized_frames_are_refused_before_buffering_them() {
        let too_large = FrameError::TooLarge {
            limit: MAX_FRAME_BYTES,
        };
        // The declared length alone is enough to refuse, with nothing else received.
        assert_eq!(malformed(b"$536870913\r\n"), too_large);
        // The limit counts the whole frame, headers included.
        assert_eq!(malformed(b"$536870900\r\n"), too_large);
        assert_eq!(
            frame_len(b"$536870898\r\n", &DecodeLimits::DEFAULT),
            Ok(None)
        );
        assert_eq!(malformed(b"*536870912\r\n"), too_large);
        assert_eq!(malformed(b"%268435456\r\n"), too_large);
        // A small limit, for the record: 17 bytes hold a 10-byte string, not 11.
        let small = DecodeLimits {
            max_frame: 17,
            max_depth: MAX_DEPTH,
        };
        let refused = Err(FrameError::TooLarge { limit: 17 });
        assert_eq!(frame_len(b"$10\r\nhelloworld\r\n", &small), Ok(Some(17)));
        assert_eq!(frame_len(b"$11\r\nhello world\r\n", &small), refused);
        assert_eq!(
            frame_len(b"*2\r\n$3\r\nabc\r\n$3\r\nabc\r\n", &small),
            refused
        );
        assert_eq!(frame_len(b"+0123456789abcdefghij", &small), refused);
        assert_eq!(frame_len(b"*9\r\n", &small), refused);
        // Nesting is bounded: no stack overflow from a hostile peer.
        let deep: Vec<u8> = b"*1\r\n".repeat(MAX_DEPTH + 2);
        assert_eq!(malformed(&deep), FrameError::TooDeep);
        let ok: Vec<u8> = [b"*1\r\n".repeat(MAX_DEPTH), b":1\r\n".to_vec()].concat();
        assert_eq!(frame_len(&ok, &DecodeLimits::DEFAULT), Ok(Some(ok.len())));
        let shallow = DecodeLimits {
            max_frame: MAX_FRAME_BYTES,
            max_depth: 2,
        };
        assert_eq!(frame_len(b"*1\r\n*1\r\n:1\r\n", &shallow), Ok(Some(12)));
        assert_eq!(
            frame_len(b"*1\r\n*1\r\n*1\r\n:1\r\n", &shallow),
            Err(FrameError::TooDeep)
        );
    }

    #[test]
    fn null_bulk_and_null_array_decode_as_null() {
        let mut buf = BytesMut::from(&b"$-1\r\n*-1\r\n"[..]);
        assert_eq!(Frame::parse(&mut buf), Ok(Some(Frame::Null)));
        assert_eq!(Frame::parse(&mut buf), Ok(Some(Frame::Null)));
    }

    /// Fuzzing (resp_frame): a RESP3 blob error with CR/LF, sent to a RESP2 peer, is still one
    /// error line.
    #[test]
    fn blob_error_with_newlines_is_one_resp2_line() {
        let f = Frame::BlobError(Bytes::from_static(b"\r2\r\nx"));
        let mut buf = BytesMut::from(&f.to_bytes(false)[..]);
        assert_eq!(&buf[..], b"- 2  x\r\n");
        let back = Frame::parse(&mut buf).unwrap().unwrap();
        assert_eq!(back, Frame::Error(Bytes::from_static(b" 2  x")));
        assert!(buf.is_empty());
    }

    #[test]
    fn peek_reads_the_top_level_in_place() {
        let cases: [(&[u8], Peek<'_>); 12] = [
            (b"_\r\n", Peek::Null),
            (b"$-1\r\n", Peek::Null),
            (b"*-1\r\n", Peek::Null),
            (b"-ERR no\r\n", Peek::Error(b"ERR no")),
            (b"!6\r\nERR no\r\n", Peek::Error(b"ERR no")),
            (b"-\r\n", Peek::Error(b"")),
            (
                b"$3\r\nabc\r\n",
                Peek::Scalar {
                    kind: b'$',
                    data: b"abc",
                },
            ),
            (
                b"+OK\r\n",
                Peek::Scalar {
                    kind: b'+',
                    data: b"OK",
                },
            ),
            (
                b"=7\r\ntxt:abc\r\n",
                Peek::Scalar {
                    kind: b'=',
                    data: b"txt:abc",
                },
            ),
            (
                b"*2\r\n$-1\r\n:1\r\n",
                Peek::Aggregate {
                    kind: b'*',
                    len: 2,
                    items: b"$-1\r\n:1\r\n",
                },
            ),
            (
                b"%0\r\n",
                Peek::Aggregate {
                    kind: b'%',
                    len: 0,
                    items: b"",
                },
            ),
            (b"|1\r\n+a\r\n+b\r\n_\r\n", Peek::Null),
        ];
        for (input, want) in cases {
            assert!(frame_len(input, &DecodeLimits::DEFAULT).unwrap().is_some());
            assert_eq!(
                peek(input),
                Some(want),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
        // Whatever follows the value does not matter.
        assert_eq!(peek(b"_\r\n+OK\r\n"), Some(Peek::Null));
        for junk in [
            &b""[..],
            b"\r\n",
            b"$",
            b"$3\r\na",
            b"|1\r\n",
            b"|x\r\n_\r\n",
            b"$x\r\n",
        ] {
            assert_eq!(peek(junk), None, "{junk:?}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut buf = BytesMut::from(&data[..]);
            let small = DecodeLimits { max_frame: 32, max_depth: 4 };
            let _ = Frame::parse_with(&mut buf, &small);
            let _ = Frame::parse(&mut buf);
            let _ = peek(&data);
        }

        #[test]
        fn arbitrary_replies_split_anywhere_agree(
            picks in proptest::collection::vec(0usize..64, 1..8),
            cut in 0usize..400,
        ) {
            let c = corpus();
            let stream: Vec<u8> =
                picks.iter().flat_map(|&i| c[i % c.len()].0.to_vec()).collect();
            let cut = cut.min(stream.len());
            let mut buf = BytesMut::from(&stream[..cut]);
            let mut got = 0;
            while Frame::parse(&mut buf).unwrap().is_some() {
                got += 1;
            }
            buf.extend_from_slice(&stream[cut..]);
            while Frame::parse(&mut buf).unwrap().is_some() {
                got += 1;
            }
            prop_assert!(buf.is_empty());
            prop_assert_eq!(got, picks.len());
        }
    }
}
