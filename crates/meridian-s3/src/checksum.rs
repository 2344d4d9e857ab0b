//! Flexible checksums (`x-amz-checksum-*`) and the `x-amz-content-sha256` body check.
//!
//! [`ChecksumVerifier`] hashes a body incrementally and compares the result with the
//! base64 value a client sent (header or aws-chunked trailer), as S3 encodes it: the
//! big-endian CRC bytes or the raw digest, standard base64 with padding. Values are
//! validated up front (`InvalidArgument` naming the header); a mismatch at the end is
//! `BadDigest`. [`ContentSha256Verifier`] does the same for a signed body hash
//! (`XAmzContentSHA256Mismatch`). Comparisons are constant-time.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{S3Code, S3Error};
use crate::sigv4::Header;

const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
const CRC64NVME: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_NVME);

/// A checksum algorithm of S3's flexible checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChecksumAlgorithm {
    /// CRC-32 (ISO-HDLC, as zlib).
    Crc32,
    /// CRC-32C (Castagnoli).
    Crc32c,
    /// CRC-64/NVME.
    Crc64Nvme,
    /// SHA-1.
    Sha1,
    /// SHA-256.
    Sha256,
}

impl ChecksumAlgorithm {
    /// All algorithms.
    pub const ALL: [ChecksumAlgorithm; 5] = [
        ChecksumAlgorithm::Crc32,
        ChecksumAlgorithm::Crc32c,
        ChecksumAlgorithm::Crc64Nvme,
        ChecksumAlgorithm::Sha1,
        ChecksumAlgorithm::Sha256,
    ];

    /// The header (and trailer) name carrying this checksum, `x-amz-checksum-crc32`….
    pub fn header_name(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Crc32 => "x-amz-checksum-crc32",
            ChecksumAlgorithm::Crc32c => "x-amz-checksum-crc32c",
            ChecksumAlgorithm::Crc64Nvme => "x-amz-checksum-crc64nvme",
            ChecksumAlgorithm::Sha1 => "x-amz-checksum-sha1",
            ChecksumAlgorithm::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// The name used in `x-amz-checksum-algorithm` and XML (`CRC32`, `SHA256`…).
    pub fn name(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Crc32 => "CRC32",
            ChecksumAlgorithm::Crc32c => "CRC32C",
            ChecksumAlgorithm::Crc64Nvme => "CRC64NVME",
            ChecksumAlgorithm::Sha1 => "SHA1",
            ChecksumAlgorithm::Sha256 => "SHA256",
        }
    }

    /// The algorithm whose header name is `name` (case-insensitive).
    pub fn from_header_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.header_name().eq_ignore_ascii_case(name))
    }

    /// The algorithm called `name` in `x-amz-checksum-algorithm` (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// Length of the raw checksum in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            ChecksumAlgorithm::Crc32 | ChecksumAlgorithm::Crc32c => 4,
            ChecksumAlgorithm::Crc64Nvme => 8,
            ChecksumAlgorithm::Sha1 => 20,
            ChecksumAlgorithm::Sha256 => 32,
        }
    }

    /// Parses an `x-amz-trailer` header value naming one checksum trailer.
    pub fn from_trailer_header(value: &[u8]) -> Result<Self, S3Error> {
        std::str::from_utf8(value)
            .ok()
            .and_then(|v| Self::from_header_name(v.trim()))
            .ok_or_else(|| {
                S3Error::invalid_argument(
                    "x-amz-trailer must name one of x-amz-checksum-crc32, -crc32c, -crc64nvme, -sha1, -sha256",
                )
            })
    }
}

enum State {
    Crc32(crc32fast::Hasher),
    Crc32c(crc::Digest<'static, u32>),
    Crc64(crc::Digest<'static, u64>),
    Sha1(Sha1),
    Sha256(Sha256),
}

/// An incremental checksum of one algorithm.
pub struct Checksummer {
    alg: ChecksumAlgorithm,
    state: State,
}

impl std::fmt::Debug for Checksummer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checksummer")
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

impl Checksummer {
    /// A fresh checksum.
    pub fn new(alg: ChecksumAlgorithm) -> Self {
        let state = match alg {
            ChecksumAlgorithm::Crc32 => State::Crc32(crc32fast::Hasher::new()),
            ChecksumAlgorithm::Crc32c => State::Crc32c(CRC32C.digest()),
            ChecksumAlgorithm::Crc64Nvme => State::Crc64(CRC64NVME.digest()),
            ChecksumAlgorithm::Sha1 => State::Sha1(Sha1::new()),
            ChecksumAlgorithm::Sha256 => State::Sha256(Sha256::new()),
        };
        Checksummer { alg, state }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> ChecksumAlgorithm {
        self.alg
    }

    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        match &mut self.state {
            State::Crc32(h) => h.update(data),
            State::Crc32c(h) => h.update(data),
            State::Crc64(h) => h.update(data),
            State::Sha1(h) => h.update(data),
            State::Sha256(h) => h.update(data),
        }
    }

    /// The raw checksum (big-endian for CRCs).
    pub fn finalize(self) -> Vec<u8> {
        match self.state {
            State::Crc32(h) => h.finalize().to_be_bytes().to_vec(),
            State::Crc32c(h) => h.finalize().to_be_bytes().to_vec(),
            State::Crc64(h) => h.finalize().to_be_bytes().to_vec(),
            State::Sha1(h) => h.finalize().to_vec(),
            State::Sha256(h) => h.finalize().to_vec(),
        }
    }

    /// The checksum base64-encoded as S3 sends it.
    pub fn finalize_base64(self) -> String {
        B64.encode(self.finalize())
    }
}

/// The checksum of `data` base64-encoded as S3 sends it.
pub fn checksum_base64(alg: ChecksumAlgorithm, data: &[u8]) -> String {
    let mut c = Checksummer::new(alg);
    c.update(data);
    c.finalize_base64()
}

/// Decodes a base64 checksum value for `alg`; `InvalidArgument` naming `field` when it
/// is not valid base64 of the right length.
pub fn decode_checksum(
    alg: ChecksumAlgorithm,
    value: &[u8],
    field: &str,
) -> Result<Vec<u8>, S3Error> {
    let bad = || S3Error::invalid_argument(format!("Value for {field} header is invalid."));
    if value.len() > 64 {
        return Err(bad());
    }
    let raw = B64.decode(value.trim_ascii()).map_err(|_| bad())?;
    if raw.len() != alg.digest_len() {
        return Err(bad());
    }
    Ok(raw)
}

/// Verifies a body against an expected checksum as the body streams.
#[derive(Debug)]
pub struct ChecksumVerifier {
    expected: Vec<u8>,
    hasher: Checksummer,
}

impl ChecksumVerifier {
    /// A verifier for `alg` expecting the base64 `value` (as in the header).
    pub fn new(alg: ChecksumAlgorithm, value: &[u8]) -> Result<Self, S3Error> {
        Ok(ChecksumVerifier {
            expected: decode_checksum(alg, value, alg.header_name())?,
            hasher: Checksummer::new(alg),
        })
    }

    /// The verifier for the request's `x-amz-checksum-*` header, if it has one.
    /// More than one checksum header is `InvalidRequest`; an
    /// `x-amz-checksum-algorithm`/`x-amz-sdk-checksum-algorithm` naming a different
    /// algorithm than the header present is `InvalidRequest`.
    pub fn from_headers(headers: &[Header<'_>]) -> Result<Option<Self>, S3Error> {
        let mut found: Option<(ChecksumAlgorithm, &[u8])> = None;
        for (n, v) in headers {
            if let Some(alg) = ChecksumAlgorithm::from_header_name(n) {
                if found.is_some() {
                    return Err(S3Error::invalid_request(
                        "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
                    ));
                }
                found = Some((alg, v));
            }
        }
        if let Some((alg, _)) = found {
            for name in ["x-amz-sdk-checksum-algorithm", "x-amz-checksum-algorithm"] {
                if let Some(v) = crate::sigv4::single_header(headers, name)? {
                    let named = std::str::from_utf8(v)
                        .ok()
                        .and_then(|s| ChecksumAlgorithm::from_name(s.trim()));
                    if named != Some(alg) {
                        return Err(S3Error::invalid_request(format!(
                            "{name} does not match the x-amz-checksum- header sent ({})",
                            alg.header_name()
                        )));
                    }
                }
            }
        }
        found.map(|(alg, v)| Self::new(alg, v)).transpose()
    }

    /// The algorithm.
    pub fn algorithm(&self) -> ChecksumAlgorithm {
        self.hasher.algorithm()
    }

    /// Feeds body bytes.
    pub fn update(&mut self, data: &[u8]) {
        self.hasher.update(data);
    }

    /// Checks the body; `BadDigest` on mismatch. Returns the base64 checksum (to store
    /// and echo in responses).
    pub fn finish(self) -> Result<String, S3Error> {
        let alg = self.hasher.algorithm();
        let got = self.hasher.finalize();
        if bool::from(got.ct_eq(&self.expected)) {
            Ok(B64.encode(got))
        } else {
            Err(S3Error::new(
                S3Code::BadDigest,
                format!(
                    "The {} you specified did not match the calculated checksum.",
                    alg.header_name()
                ),
            ))
        }
    }
}

/// Verifies a body against the SHA-256 signed in `x-amz-content-sha256`.
#[derive(Debug, Clone)]
pub struct ContentSha256Verifier {
    expected: [u8; 32],
    hasher: Sha256,
}

impl ContentSha256Verifier {
    /// A verifier expecting `expected` (from [`crate::sigv4::PayloadMode::Sha256`]).
    pub fn new(expected: [u8; 32]) -> Self {
        ContentSha256Verifier {
            expected,
            hasher: Sha256::new(),
        }
    }

    /// Feeds body bytes.
    pub fn update(&mut self, data: &[u8]) {
        self.hasher.update(data);
    }

    /// Checks the body; `XAmzContentSHA256Mismatch` on mismatch.
    pub fn finish(self) -> Result<(), S3Error> {
        let got: [u8; 32] = self.hasher.finalize().into();
        if bool::from(got.ct_eq(&self.expected)) {
            Ok(())
        } else {
            Err(S3Error::new(
                S3Code::XAmzContentSHA256Mismatch,
                format!(
                    "The provided 'x-amz-content-sha256' header does not match what was computed. Client: {}, server: {}",
                    hex::encode(self.expected),
                    hex::encode(got)
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // Standard check values over "123456789".
        let d = b"123456789";
        let be = |alg| B64.decode(checksum_base64(alg, d)).unwrap();
        assert_eq!(be(ChecksumAlgorithm::Crc32), 0xcbf4_3926u32.to_be_bytes());
        assert_eq!(be(ChecksumAlgorithm::Crc32c), 0xe306_9283u32.to_be_bytes());
        assert_eq!(
            be(ChecksumAlgorithm::Crc64Nvme),
            0xae8b_1486_0a79_9888u64.to_be_bytes()
        );
        // Values S3 documents / returns for well-known inputs.
        assert_eq!(checksum_base64(ChecksumAlgorithm::Crc32, b""), "AAAAAA==");
        assert_eq!(checksum_base64(ChecksumAlgorithm::Crc32c, b""), "AAAAAA==");
        assert_eq!(
            checksum_base64(ChecksumAlgorithm::Sha256, b""),
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
        assert_eq!(
            checksum_base64(ChecksumAlgorithm::Sha1, b""),
            "2jmj7l5rSw0yVb/vlWAYkK/YBwk="
        );
        assert_eq!(
            checksum_base64(ChecksumAlgorithm::Crc32, b"Hello world"),
            "i9aeUg=="
        );
    }

    #[test]
    fn incremental_verifier() {
        for alg in ChecksumAlgorithm::ALL {
            let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
            let want = checksum_base64(alg, &data);
            let mut v = ChecksumVerifier::new(alg, want.as_bytes()).unwrap();
            for c in data.chunks(333) {
                v.update(c);
            }
            assert_eq!(v.finish().unwrap(), want);
            let mut v = ChecksumVerifier::new(alg, want.as_bytes()).unwrap();
            v.update(&data[1..]);
            assert_eq!(v.finish().unwrap_err().code, S3Code::BadDigest);
            assert_eq!(
                ChecksumAlgorithm::from_header_name(alg.header_name()),
                Some(alg)
            );
            assert_eq!(
                ChecksumAlgorithm::from_name(&alg.name().to_lowercase()),
                Some(alg)
            );
        }
    }

    #[test]
    fn bad_values() {
        for v in [&b"****"[..], b"AAAA", b"AAAAAAAA", &[b'A'; 100]] {
            let e = ChecksumVerifier::new(ChecksumAlgorithm::Crc32, v).unwrap_err();
            assert_eq!(e.code, S3Code::InvalidArgument);
            assert!(e.message.contains("x-amz-checksum-crc32"));
        }
    }

    #[test]
    fn from_headers() {
        let h: Vec<Header<'_>> = vec![
            ("x-amz-checksum-crc32c", b"AAAAAA=="),
            ("x-amz-sdk-checksum-algorithm", b"CRC32C"),
        ];
        let v = ChecksumVerifier::from_headers(&h).unwrap().unwrap();
        assert_eq!(v.algorithm(), ChecksumAlgorithm::Crc32c);
        assert_eq!(v.finish().unwrap(), "AAAAAA==");
        let h: Vec<Header<'_>> = vec![
            ("x-amz-checksum-crc32c", b"AAAAAA=="),
            ("x-amz-checksum-crc32", b"AAAAAA=="),
        ];
        assert_eq!(
            ChecksumVerifier::from_headers(&h).unwrap_err().code,
            S3Code::InvalidRequest
        );
        let h: Vec<Header<'_>> = vec![
            ("x-amz-checksum-crc32c", b"AAAAAA=="),
            ("x-amz-sdk-checksum-algorithm", b"SHA1"),
        ];
        assert_eq!(
            ChecksumVerifier::from_headers(&h).unwrap_err().code,
            S3Code::InvalidRequest
        );
        assert!(
            ChecksumVerifier::from_headers(&[("host", b"x")])
                .unwrap()
                .is_none()
        );
        assert_eq!(
            ChecksumAlgorithm::from_trailer_header(b" x-amz-checksum-crc32 ").unwrap(),
            ChecksumAlgorithm::Crc32
        );
        assert!(ChecksumAlgorithm::from_trailer_header(b"x-amz-foo").is_err());
    }

    #[test]
    fn content_sha256() {
        let want: [u8; 32] = Sha256::digest(b"abc").into();
        let mut v = ContentSha256Verifier::new(want);
        v.update(b"a");
        v.update(b"bc");
        v.finish().unwrap();
        let mut v = ContentSha256Verifier::new(want);
        v.update(b"abd");
        assert_eq!(
            v.finish().unwrap_err().code,
            S3Code::XAmzContentSHA256Mismatch
        );
    }
}
