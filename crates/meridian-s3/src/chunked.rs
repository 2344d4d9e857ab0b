//! Incremental decoder for `Content-Encoding: aws-chunked` request bodies.
//!
//! The body is a sequence of `<hex-size>[;chunk-signature=<sig>]\r\n<data>\r\n`, ended
//! by a zero-size chunk, then optional trailer lines (`x-amz-checksum-crc32:<b64>`,
//! `x-amz-trailer-signature:<sig>`) and a final empty line. [`ChunkedDecoder`] is fed
//! the body as it arrives, in pieces of any size (down to one byte), and hands back the
//! decoded payload as zero-copy [`Bytes`] slices of its input.
//!
//! Guarantees: no panics on any input; size lines and trailers are bounded (4 KiB),
//! chunks are bounded (16 MiB by default), the decoded length is bounded and checked
//! against `x-amz-decoded-content-length`. When the payload is signed, each chunk's
//! signature is verified (chained from the request's seed signature, constant-time)
//! as soon as the chunk's data is complete, and a signed trailer's signature at
//! [`ChunkedDecoder::finish`]. Payload bytes are emitted before their chunk's
//! signature is checked, so a server must treat output as provisional until `finish`
//! returns `Ok` (S3 semantics: an object only becomes visible once complete). After an
//! error the decoder stays failed.

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::checksum::{ChecksumAlgorithm, Checksummer, decode_checksum};
use crate::error::{S3Code, S3Error};
use crate::sigv4::{
    Authenticated, EMPTY_SHA256, Header, PayloadMode, hmac_sha256, parse_signature,
    signatures_match, single_header,
};

/// Longest accepted chunk-size line or trailer line, in bytes.
pub const MAX_LINE_LEN: usize = 4 * 1024;
/// Default largest accepted chunk, in bytes.
pub const DEFAULT_MAX_CHUNK_SIZE: u64 = 16 * 1024 * 1024;
/// Default largest accepted decoded body (S3's single-PUT limit, 5 GiB).
pub const DEFAULT_MAX_DECODED_LEN: u64 = 5 * 1024 * 1024 * 1024;
const MAX_TRAILER_BYTES: usize = 4 * 1024;
const MAX_TRAILER_LINES: usize = 8;

/// What chunk signatures are chained from.
#[derive(Clone, PartialEq, Eq)]
pub struct ChunkSigning {
    /// The SigV4 signing key of the request.
    pub signing_key: [u8; 32],
    /// The request time, `yyyymmddThhmmssZ`.
    pub timestamp: String,
    /// The credential scope, `yyyymmdd/region/s3/aws4_request`.
    pub scope: String,
    /// The request's signature (hex), which the first chunk signature chains from.
    pub seed_signature: String,
}

impl std::fmt::Debug for ChunkSigning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkSigning")
            .field("timestamp", &self.timestamp)
            .field("scope", &self.scope)
            .field("seed_signature", &self.seed_signature)
            .finish_non_exhaustive()
    }
}

impl ChunkSigning {
    /// The chunk-signing context of an authenticated request.
    pub fn from_auth(auth: &Authenticated) -> Self {
        ChunkSigning {
            signing_key: auth.signing_key,
            timestamp: auth.timestamp.clone(),
            scope: auth.scope.clone(),
            seed_signature: auth.seed_signature.clone(),
        }
    }

    /// The signature (hex) of a chunk whose SHA-256 is `chunk_sha256_hex`, chained
    /// from `prev_signature`.
    pub fn chunk_signature(&self, prev_signature: &str, chunk_sha256_hex: &str) -> String {
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{prev_signature}\n{EMPTY_SHA256}\n{chunk_sha256_hex}",
            self.timestamp, self.scope
        );
        hex::encode(hmac_sha256(&self.signing_key, sts.as_bytes()))
    }

    /// The signature (hex) of trailer lines (`name:value\n` each, in order), chained
    /// from the final chunk's signature.
    pub fn trailer_signature(&self, prev_signature: &str, canonical_trailers: &[u8]) -> String {
        let sts = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{prev_signature}\n{}",
            self.timestamp,
            self.scope,
            hex::encode(Sha256::digest(canonical_trailers))
        );
        hex::encode(hmac_sha256(&self.signing_key, sts.as_bytes()))
    }
}

/// How to decode one aws-chunked body.
#[derive(Debug, Clone)]
pub struct ChunkedConfig {
    /// Verify chunk signatures (and the trailer signature when `trailer` is set).
    pub signing: Option<ChunkSigning>,
    /// The body has a trailer section (`…-TRAILER` payload modes).
    pub trailer: bool,
    /// The checksum trailer declared by `x-amz-trailer`; it must be present and match.
    pub trailer_checksum: Option<ChecksumAlgorithm>,
    /// `x-amz-decoded-content-length`, checked exactly at `finish`.
    pub decoded_content_length: Option<u64>,
    /// Largest accepted chunk.
    pub max_chunk_size: u64,
    /// Largest accepted decoded body.
    pub max_decoded_len: u64,
}

impl Default for ChunkedConfig {
    fn default() -> Self {
        ChunkedConfig {
            signing: None,
            trailer: false,
            trailer_checksum: None,
            decoded_content_length: None,
            max_chunk_size: DEFAULT_MAX_CHUNK_SIZE,
            max_decoded_len: DEFAULT_MAX_DECODED_LEN,
        }
    }
}

impl ChunkedConfig {
    /// The configuration for an authenticated streaming request: signing from `auth`,
    /// `x-amz-trailer` and `x-amz-decoded-content-length` from `headers`. Errors if the
    /// payload mode is not streaming, or a header is malformed (naming it).
    pub fn for_request(auth: &Authenticated, headers: &[Header<'_>]) -> Result<Self, S3Error> {
        let PayloadMode::Streaming { signed, trailer } = auth.payload else {
            return Err(S3Error::invalid_request(
                "x-amz-content-sha256 is not a STREAMING- value; the body is not aws-chunked",
            ));
        };
        let trailer_checksum = match single_header(headers, "x-amz-trailer")? {
            None => None,
            Some(_) if !trailer => {
                return Err(S3Error::invalid_request(
                    "x-amz-trailer requires a STREAMING-…-TRAILER x-amz-content-sha256",
                ));
            }
            Some(v) => Some(ChecksumAlgorithm::from_trailer_header(v)?),
        };
        let decoded_content_length = match single_header(headers, "x-amz-decoded-content-length")? {
            None => None,
            Some(v) => Some(parse_decimal(v).ok_or_else(|| {
                S3Error::invalid_argument("x-amz-decoded-content-length must be a decimal integer")
            })?),
        };
        Ok(ChunkedConfig {
            signing: signed.then(|| ChunkSigning::from_auth(auth)),
            trailer,
            trailer_checksum,
            decoded_content_length,
            ..ChunkedConfig::default()
        })
    }
}

fn parse_decimal(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |a, &b| {
        a.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// What followed the last chunk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trailers {
    /// The checksum trailer (algorithm and base64 value), verified against the payload.
    pub checksum: Option<(ChecksumAlgorithm, String)>,
    /// The decoded payload length.
    pub decoded_len: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Data { remaining: u64 },
    DataCr,
    DataLf,
    Trailer,
    Done,
}

/// An incremental aws-chunked decoder; see the module docs.
pub struct ChunkedDecoder {
    cfg: ChunkedConfig,
    state: State,
    line: Vec<u8>,
    prev_signature: String,
    claimed: Option<[u8; 32]>,
    chunk_hash: Sha256,
    checksum: Option<Checksummer>,
    decoded: u64,
    trailer_canonical: Vec<u8>,
    trailer_lines: usize,
    trailer_value: Option<(ChecksumAlgorithm, String)>,
    trailer_signature: Option<[u8; 32]>,
    failed: Option<S3Error>,
}

impl std::fmt::Debug for ChunkedDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkedDecoder")
            .field("state", &self.state)
            .field("decoded", &self.decoded)
            .finish_non_exhaustive()
    }
}

fn bad(msg: impl Into<String>) -> S3Error {
    S3Error::invalid_request(format!("aws-chunked body: {}", msg.into()))
}

impl ChunkedDecoder {
    /// A decoder for one body.
    pub fn new(cfg: ChunkedConfig) -> Self {
        let prev_signature = cfg
            .signing
            .as_ref()
            .map(|s| s.seed_signature.clone())
            .unwrap_or_default();
        let checksum = cfg.trailer_checksum.map(Checksummer::new);
        ChunkedDecoder {
            cfg,
            state: State::Size,
            line: Vec::new(),
            prev_signature,
            claimed: None,
            chunk_hash: Sha256::new(),
            checksum,
            decoded: 0,
            trailer_canonical: Vec::new(),
            trailer_lines: 0,
            trailer_value: None,
            trailer_signature: None,
            failed: None,
        }
    }

    /// Decoded payload bytes so far.
    pub fn decoded_len(&self) -> u64 {
        self.decoded
    }

    /// Whether the final empty line has been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Feeds the next piece of the body; decoded payload slices (sharing `input`'s
    /// buffer) are appended to `out`.
    pub fn push(&mut self, input: Bytes, out: &mut Vec<Bytes>) -> Result<(), S3Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut input = input;
        let r = self.push_inner(&mut input, out);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// Like [`push`](Self::push) for a borrowed buffer (copied once); decoded payload
    /// pieces are passed to `out`.
    pub fn push_slice(&mut self, input: &[u8], out: &mut impl FnMut(&[u8])) -> Result<(), S3Error> {
        let mut pieces = Vec::new();
        let r = self.push(Bytes::copy_from_slice(input), &mut pieces);
        for p in &pieces {
            out(p);
        }
        r
    }

    fn push_inner(&mut self, input: &mut Bytes, out: &mut Vec<Bytes>) -> Result<(), S3Error> {
        while !input.is_empty() {
            match self.state {
                State::Data { remaining } => {
                    let n = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(input.len());
                    let piece = input.split_to(n);
                    self.consume_data(&piece)?;
                    out.push(piece);
                    let remaining = remaining - n as u64;
                    if remaining == 0 {
                        self.end_chunk()?;
                        self.state = State::DataCr;
                    } else {
                        self.state = State::Data { remaining };
                    }
                }
                State::DataCr | State::DataLf => {
                    let want = if self.state == State::DataCr {
                        b'\r'
                    } else {
                        b'\n'
                    };
                    if input.first() != Some(&want) {
                        return Err(bad("chunk data is not followed by CRLF"));
                    }
                    let _ = input.split_to(1);
                    self.state = if self.state == State::DataCr {
                        State::DataLf
                    } else {
                        State::Size
                    };
                }
                State::Size | State::Trailer => {
                    let nl = input.iter().position(|&b| b == b'\n');
                    let take = nl.map_or(input.len(), |p| p + 1);
                    let limit = if self.state == State::Size {
                        MAX_LINE_LEN
                    } else {
                        MAX_TRAILER_BYTES
                    };
                    if self.line.len() + take > limit + 2 {
                        return Err(bad(if self.state == State::Size {
                            "chunk-size line is too long"
                        } else {
                            "trailer is too long"
                        }));
                    }
                    let part = input.split_to(take);
                    self.line.extend_from_slice(&part);
                    if nl.is_some() {
                        let mut line = std::mem::take(&mut self.line);
                        // Drop "\n" and require the "\r" before it.
                        line.pop();
                        if line.pop() != Some(b'\r') {
                            return Err(bad("line is not terminated by CRLF"));
                        }
                        if self.state == State::Size {
                            self.size_line(&line)?;
                        } else {
                            self.trailer_line(&line)?;
                        }
                    }
                }
                State::Done => return Err(bad("data after the end of the body")),
            }
        }
        Ok(())
    }

    fn consume_data(&mut self, piece: &[u8]) -> Result<(), S3Error> {
        // Counted only once accepted: a refused piece is not handed out, so `decoded_len`
        // must not include it (it overcounted by the refused piece; found by fuzzing).
        let decoded = self.decoded + piece.len() as u64;
        if decoded > self.cfg.max_decoded_len {
            return Err(S3Error::new(
                S3Code::EntityTooLarge,
                "aws-chunked body: decoded body is too large",
            ));
        }
        if let Some(want) = self.cfg.decoded_content_length
            && decoded > want
        {
            return Err(bad(format!(
                "body is longer than x-amz-decoded-content-length {want}"
            )));
        }
        self.decoded = decoded;
        if self.cfg.signing.is_some() {
            self.chunk_hash.update(piece);
        }
        if let Some(c) = &mut self.checksum {
            c.update(piece);
        }
        Ok(())
    }

    /// Verifies the signature of the chunk just completed.
    fn end_chunk(&mut self) -> Result<(), S3Error> {
        let Some(signing) = &self.cfg.signing else {
            return Ok(());
        };
        let hash = hex::encode(std::mem::take(&mut self.chunk_hash).finalize());
        let computed = signing.chunk_signature(&self.prev_signature, &hash);
        let mut computed_raw = [0u8; 32];
        hex::decode_to_slice(&computed, &mut computed_raw)
            .map_err(|_| S3Error::from_code(S3Code::InternalError))?;
        let claimed = self
            .claimed
            .take()
            .ok_or_else(|| bad("missing chunk-signature"))?;
        if !signatures_match(&computed_raw, &claimed) {
            return Err(S3Error::new(
                S3Code::SignatureDoesNotMatch,
                format!(
                    "aws-chunked body: chunk signature does not match after {} bytes",
                    self.decoded
                ),
            ));
        }
        self.prev_signature = computed;
        Ok(())
    }

    fn size_line(&mut self, line: &[u8]) -> Result<(), S3Error> {
        let (size_part, ext) = match line.iter().position(|&b| b == b';') {
            Some(p) => (line.get(..p).unwrap_or_default(), line.get(p + 1..)),
            None => (line, None),
        };
        if size_part.is_empty()
            || size_part.len() > 16
            || !size_part.iter().all(u8::is_ascii_hexdigit)
        {
            return Err(bad("invalid chunk size"));
        }
        let size = size_part.iter().try_fold(0u64, |a, &b| {
            let d = u64::from(char::from(b).to_digit(16)?);
            a.checked_mul(16)?.checked_add(d)
        });
        let size = size.ok_or_else(|| bad("invalid chunk size"))?;
        if size > self.cfg.max_chunk_size {
            return Err(bad(format!(
                "chunk size {size} exceeds {}",
                self.cfg.max_chunk_size
            )));
        }
        if self.cfg.signing.is_some() {
            let ext = ext.ok_or_else(|| bad("missing chunk-signature"))?;
            let sig = ext
                .strip_prefix(b"chunk-signature=")
                .and_then(|s| std::str::from_utf8(s).ok())
                .and_then(parse_signature)
                .ok_or_else(|| bad("chunk-signature must be 64 lower-case hex characters"))?;
            self.claimed = Some(sig);
        }
        if size == 0 {
            self.end_chunk()?;
            self.state = State::Trailer;
        } else {
            self.state = State::Data { remaining: size };
        }
        Ok(())
    }

    fn trailer_line(&mut self, line: &[u8]) -> Result<(), S3Error> {
        if line.is_empty() {
            self.state = State::Done;
            return Ok(());
        }
        if !self.cfg.trailer {
            return Err(bad("unexpected trailer after the final chunk"));
        }
        if self.trailer_signature.is_some() {
            return Err(bad("x-amz-trailer-signature must be the last trailer"));
        }
        self.trailer_lines += 1;
        if self.trailer_lines > MAX_TRAILER_LINES {
            return Err(bad("too many trailers"));
        }
        let line = std::str::from_utf8(line).map_err(|_| bad("trailer is not valid UTF-8"))?;
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad("trailer is not name:value"))?;
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim();
        if name == "x-amz-trailer-signature" {
            if self.cfg.signing.is_none() {
                return Err(bad("x-amz-trailer-signature in an unsigned body"));
            }
            self.trailer_signature = Some(parse_signature(value).ok_or_else(|| {
                bad("x-amz-trailer-signature must be 64 lower-case hex characters")
            })?);
            return Ok(());
        }
        match ChecksumAlgorithm::from_header_name(&name) {
            Some(alg) if Some(alg) == self.cfg.trailer_checksum && self.trailer_value.is_none() => {
                decode_checksum(alg, value.as_bytes(), &name)?;
                self.trailer_value = Some((alg, value.to_owned()));
            }
            _ => {
                return Err(bad(format!(
                    "trailer {name} was not declared in x-amz-trailer"
                )));
            }
        }
        self.trailer_canonical.extend_from_slice(name.as_bytes());
        self.trailer_canonical.push(b':');
        self.trailer_canonical.extend_from_slice(value.as_bytes());
        self.trailer_canonical.push(b'\n');
        Ok(())
    }

    /// Ends the body: checks it was complete, the trailer signature, the declared
    /// checksum (`BadDigest`) and `x-amz-decoded-content-length` (`IncompleteBody`).
    /// A missing final empty line after the trailers is tolerated.
    pub fn finish(self) -> Result<Trailers, S3Error> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let complete =
            self.state == State::Done || (self.state == State::Trailer && self.line.is_empty());
        if !complete {
            return Err(S3Error::incomplete_body(
                "aws-chunked body ended before its final chunk",
            ));
        }
        if let Some(want) = self.cfg.decoded_content_length
            && self.decoded != want
        {
            return Err(S3Error::incomplete_body(format!(
                "aws-chunked body decoded to {} bytes, x-amz-decoded-content-length is {want}",
                self.decoded
            )));
        }
        if self.cfg.trailer
            && let Some(signing) = &self.cfg.signing
        {
            let claimed = self
                .trailer_signature
                .ok_or_else(|| bad("missing x-amz-trailer-signature"))?;
            let computed = signing.trailer_signature(&self.prev_signature, &self.trailer_canonical);
            let ok = parse_signature(&computed).is_some_and(|c| signatures_match(&c, &claimed));
            if !ok {
                return Err(S3Error::new(
                    S3Code::SignatureDoesNotMatch,
                    "aws-chunked body: trailer signature does not match",
                ));
            }
        }
        let mut checksum = None;
        if let Some(hasher) = self.checksum {
            let alg = hasher.algorithm();
            let (_, sent) = self.trailer_value.ok_or_else(|| {
                S3Error::incomplete_body(format!(
                    "aws-chunked body lacks the declared {} trailer",
                    alg.header_name()
                ))
            })?;
            let got = hasher.finalize_base64();
            if got != sent {
                return Err(S3Error::new(
                    S3Code::BadDigest,
                    format!(
                        "The {} you specified did not match the calculated checksum.",
                        alg.header_name()
                    ),
                ));
            }
            checksum = Some((alg, got));
        }
        Ok(Trailers {
            checksum,
            decoded_len: self.decoded,
        })
    }
}

/// Encodes `chunks` (empty ones skipped) as an aws-chunked body: signed when `signing`
/// is given, with a checksum trailer (signed too when `signing` is given) when
/// `trailer` is. For tests and clients.
pub fn encode_aws_chunked(
    chunks: &[&[u8]],
    signing: Option<&ChunkSigning>,
    trailer: Option<ChecksumAlgorithm>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut prev = signing
        .map(|s| s.seed_signature.clone())
        .unwrap_or_default();
    let mut checksum = trailer.map(Checksummer::new);
    let emit = |out: &mut Vec<u8>, data: &[u8], prev: &mut String| {
        out.extend_from_slice(format!("{:x}", data.len()).as_bytes());
        if let Some(s) = signing {
            let sig = s.chunk_signature(prev, &hex::encode(Sha256::digest(data)));
            out.extend_from_slice(b";chunk-signature=");
            out.extend_from_slice(sig.as_bytes());
            *prev = sig;
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(data);
    };
    for c in chunks.iter().filter(|c| !c.is_empty()) {
        if let Some(h) = &mut checksum {
            h.update(c);
        }
        emit(&mut out, c, &mut prev);
        out.extend_from_slice(b"\r\n");
    }
    emit(&mut out, b"", &mut prev);
    if let Some(h) = checksum {
        let line = format!("{}:{}", h.algorithm().header_name(), h.finalize_base64());
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
        if let Some(s) = signing {
            let sig = s.trailer_signature(&prev, format!("{line}\n").as_bytes());
            out.extend_from_slice(format!("x-amz-trailer-signature:{sig}\r\n").as_bytes());
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sigv4::{Credentials, RequestParts, verify};

    const SEED: &str = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
    const SIG1: &str = "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648";
    const SIG2: &str = "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497";
    const SIG3: &str = "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9";

    /// AWS docs, "Signature Calculations for the Authorization Header: Transferring
    /// Payload in Multiple Chunks": the seed request.
    fn example_auth() -> Authenticated {
        let authz = format!(
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature={SEED}"
        );
        let h: Vec<Header<'_>> = vec![
            ("host", b"s3.amazonaws.com"),
            ("x-amz-date", b"20130524T000000Z"),
            ("x-amz-storage-class", b"REDUCED_REDUNDANCY"),
            ("authorization", authz.as_bytes()),
            (
                "x-amz-content-sha256",
                b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            ),
            ("content-encoding", b"aws-chunked"),
            ("x-amz-decoded-content-length", b"66560"),
            ("content-length", b"66824"),
        ];
        let parts = RequestParts {
            method: "PUT",
            raw_path: "/examplebucket/chunkObject.txt",
            raw_query: None,
            headers: &h,
        };
        let creds = Credentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        );
        let a = verify(&parts, &creds, 1_369_353_600).unwrap();
        assert_eq!(a.seed_signature, SEED);
        assert_eq!(
            a.payload,
            PayloadMode::Streaming {
                signed: true,
                trailer: false
            }
        );
        let cfg = ChunkedConfig::for_request(&a, &h).unwrap();
        assert_eq!(cfg.decoded_content_length, Some(66_560));
        a
    }

    fn example_body() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(format!("10000;chunk-signature={SIG1}\r\n").as_bytes());
        b.extend_from_slice(&[b'a'; 65_536]);
        b.extend_from_slice(format!("\r\n400;chunk-signature={SIG2}\r\n").as_bytes());
        b.extend_from_slice(&[b'a'; 1024]);
        b.extend_from_slice(format!("\r\n0;chunk-signature={SIG3}\r\n\r\n").as_bytes());
        assert_eq!(b.len(), 66_824);
        b
    }

    fn example_cfg() -> ChunkedConfig {
        let a = example_auth();
        ChunkedConfig {
            signing: Some(ChunkSigning::from_auth(&a)),
            decoded_content_length: Some(66_560),
            ..ChunkedConfig::default()
        }
    }

    fn decode_in(
        cfg: ChunkedConfig,
        body: &[u8],
        piece: usize,
    ) -> Result<(Vec<u8>, Trailers), S3Error> {
        let mut d = ChunkedDecoder::new(cfg);
        let mut out = Vec::new();
        let bytes = Bytes::copy_from_slice(body);
        let mut pieces = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let end = (at + piece).min(bytes.len());
            d.push(bytes.slice(at..end), &mut pieces)?;
            at = end;
        }
        for p in pieces {
            out.extend_from_slice(&p);
        }
        Ok((out, d.finish()?))
    }

    #[test]
    fn aws_example_multiple_chunks() {
        let body = example_body();
        for piece in [1, 2, 7, 86, 1000, 65_536, body.len()] {
            let (out, t) = decode_in(example_cfg(), &body, piece).unwrap();
            assert_eq!(out.len(), 66_560);
            assert!(out.iter().all(|&b| b == b'a'));
            assert_eq!(t.decoded_len, 66_560);
            assert_eq!(t.checksum, None);
        }
        // The encoder reproduces the example byte for byte.
        let signing = ChunkSigning::from_auth(&example_auth());
        assert_eq!(
            encode_aws_chunked(&[&[b'a'; 65_536], &[b'a'; 1024]], Some(&signing), None),
            body
        );
        assert_eq!(
            signing.chunk_signature(SEED, &hex::encode(Sha256::digest([b'a'; 65_536]))),
            SIG1
        );
    }

    #[test]
    fn zero_copy_output() {
        let body = Bytes::from(example_body());
        let mut d = ChunkedDecoder::new(example_cfg());
        let mut out = Vec::new();
        d.push(body.clone(), &mut out).unwrap();
        assert_eq!(out.len(), 2);
        // The first piece points into the input buffer.
        assert_eq!(out[0].as_ptr(), body[88..].as_ptr());
        d.finish().unwrap();
    }

    #[test]
    fn tampering() {
        let body = example_body();
        // Flip one payload byte in each chunk.
        for at in [100, 65_700] {
            let mut b = body.clone();
            b[at] = b'b';
            assert_eq!(
                decode_in(example_cfg(), &b, 4096).unwrap_err().code,
                S3Code::SignatureDoesNotMatch
            );
        }
        // Swap the final signature.
        let b = String::from_utf8(body.clone()).unwrap().replace(SIG3, SIG2);
        assert_eq!(
            decode_in(example_cfg(), b.as_bytes(), 4096)
                .unwrap_err()
                .code,
            S3Code::SignatureDoesNotMatch
        );
        // Drop the final chunk: incomplete.
        let cut = body.len() - 86;
        assert_eq!(
            decode_in(example_cfg(), &body[..cut], 4096)
                .unwrap_err()
                .code,
            S3Code::IncompleteBody
        );
        // Truncated mid-data.
        assert_eq!(
            decode_in(example_cfg(), &body[..1000], 4096)
                .unwrap_err()
                .code,
            S3Code::IncompleteBody
        );
        // Wrong decoded length.
        let mut cfg = example_cfg();
        cfg.decoded_content_length = Some(66_561);
        assert_eq!(
            decode_in(cfg, &body, 4096).unwrap_err().code,
            S3Code::IncompleteBody
        );
        let mut cfg = example_cfg();
        cfg.decoded_content_length = Some(100);
        assert_eq!(
            decode_in(cfg, &body, 4096).unwrap_err().code,
            S3Code::InvalidRequest
        );
        // Missing signature in signed mode.
        let b = encode_aws_chunked(&[b"hello"], None, None);
        assert_eq!(
            decode_in(example_cfg(), &b, 3).unwrap_err().code,
            S3Code::InvalidRequest
        );
        // Trailing garbage.
        let mut b = body.clone();
        b.push(b'x');
        assert_eq!(
            decode_in(example_cfg(), &b, 4096).unwrap_err().code,
            S3Code::InvalidRequest
        );
        // The decoder stays failed.
        let mut d = ChunkedDecoder::new(example_cfg());
        let mut out = Vec::new();
        assert!(d.push(Bytes::from_static(b"zz\r\n"), &mut out).is_err());
        assert!(d.push(Bytes::from_static(b"0\r\n"), &mut out).is_err());
        assert!(d.finish().is_err());
    }

    #[test]
    fn malformed_framing() {
        let unsigned = || ChunkedConfig {
            trailer: true,
            ..ChunkedConfig::default()
        };
        for body in [
            &b"\r\n"[..],
            b"g\r\nx\r\n0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloX\n0\r\n\r\n",
            b"5\r\nhello\r\n0\r\nnot-a-trailer\r\n\r\n",
            b"5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n",
            b"ffffffffffffffffff\r\n",
            b"1000001\r\n",
        ] {
            let e = decode_in(unsigned(), body, 1).unwrap_err();
            assert_eq!(
                e.code,
                S3Code::InvalidRequest,
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
        let long = vec![b'0'; MAX_LINE_LEN + 10];
        assert_eq!(
            decode_in(unsigned(), &long, 100).unwrap_err().code,
            S3Code::InvalidRequest
        );
        // Chunk extensions are ignored when unsigned; a missing final CRLF is tolerated.
        let (out, _) = decode_in(unsigned(), b"5;foo=bar\r\nhello\r\n0\r\n", 2).unwrap();
        assert_eq!(out, b"hello");
        // Non-trailer mode rejects trailers.
        let e = decode_in(
            ChunkedConfig::default(),
            b"0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n",
            1,
        )
        .unwrap_err();
        assert_eq!(e.code, S3Code::InvalidRequest);
    }

    #[test]
    fn unsigned_trailer_checksums() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        for alg in ChecksumAlgorithm::ALL {
            let body = encode_aws_chunked(&[&data[..70_000], &data[70_000..]], None, Some(alg));
            let cfg = || ChunkedConfig {
                trailer: true,
                trailer_checksum: Some(alg),
                ..ChunkedConfig::default()
            };
            for piece in [1, 13, 65_536, body.len()] {
                let (out, t) = decode_in(cfg(), &body, piece).unwrap();
                assert_eq!(out, data);
                assert_eq!(
                    t.checksum,
                    Some((alg, crate::checksum::checksum_base64(alg, &data)))
                );
            }
            // Corrupt one payload byte: BadDigest.
            let mut b = body.clone();
            b[10] ^= 1;
            assert_eq!(
                decode_in(cfg(), &b, 4096).unwrap_err().code,
                S3Code::BadDigest
            );
            // Declared but absent: IncompleteBody.
            let b = encode_aws_chunked(&[&data], None, None);
            assert_eq!(
                decode_in(cfg(), &b, 4096).unwrap_err().code,
                S3Code::IncompleteBody
            );
        }
        // A boto3-style body: "0\r\nx-amz-checksum-crc32:…\r\n\r\n".
        let body = b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n";
        let cfg = ChunkedConfig {
            trailer: true,
            trailer_checksum: Some(ChecksumAlgorithm::Crc32),
            ..ChunkedConfig::default()
        };
        let (out, t) = decode_in(cfg, body, 1).unwrap();
        assert_eq!(out, b"hello world");
        assert_eq!(t.checksum.unwrap().1, "DUoRhQ==");
    }

    #[test]
    fn signed_trailer() {
        let signing = ChunkSigning::from_auth(&example_auth());
        let cfg = || ChunkedConfig {
            signing: Some(signing.clone()),
            trailer: true,
            trailer_checksum: Some(ChecksumAlgorithm::Crc32c),
            ..ChunkedConfig::default()
        };
        let body = encode_aws_chunked(
            &[b"hello ", b"world"],
            Some(&signing),
            Some(ChecksumAlgorithm::Crc32c),
        );
        let (out, t) = decode_in(cfg(), &body, 1).unwrap();
        assert_eq!(out, b"hello world");
        assert!(t.checksum.is_some());
        // Tamper with the trailer signature.
        let s = String::from_utf8(body.clone()).unwrap();
        let at = s.find("x-amz-trailer-signature:").unwrap() + 24;
        let mut b = body.clone();
        b[at] = if b[at] == b'0' { b'1' } else { b'0' };
        assert_eq!(
            decode_in(cfg(), &b, 7).unwrap_err().code,
            S3Code::SignatureDoesNotMatch
        );
        // Without the trailer signature.
        let cut = s[..at - 24].to_owned() + "\r\n";
        assert_eq!(
            decode_in(cfg(), cut.as_bytes(), 7).unwrap_err().code,
            S3Code::InvalidRequest
        );
    }

    #[test]
    fn slice_api() {
        let body = example_body();
        let mut d = ChunkedDecoder::new(example_cfg());
        let mut n = 0usize;
        for b in body.chunks(999) {
            d.push_slice(b, &mut |p| n += p.len()).unwrap();
        }
        assert!(d.is_done());
        assert_eq!(d.decoded_len(), 66_560);
        assert_eq!(n, 66_560);
        d.finish().unwrap();
    }

    /// Fuzzing (s3_chunked): data beyond `x-amz-decoded-content-length` is refused and not
    /// handed out, and `decoded_len` must not count it either.
    #[test]
    fn refused_data_is_not_counted() {
        let cfg = ChunkedConfig {
            decoded_content_length: Some(0),
            ..ChunkedConfig::default()
        };
        let mut d = ChunkedDecoder::new(cfg);
        let mut out = Vec::new();
        assert!(
            d.push(Bytes::from_static(b"7\r\nabcdefg\r\n0\r\n\r\n"), &mut out)
                .is_err()
        );
        assert!(out.is_empty());
        assert_eq!(d.decoded_len(), 0);
    }
}
