//! Bucket and key validation, and parsing of S3 request parameters.
//!
//! Bucket names follow S3's general-purpose rules; object keys are 1–1024 bytes of
//! UTF-8 without characters XML 1.0 cannot carry (so every key can be listed).
//! Query-parameter parsers decode strictly (a bad `%` escape is an error) and every
//! error names the parameter or header at fault. Continuation tokens are opaque to
//! clients but validated on the way back in.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;

use crate::error::{S3Code, S3Error};
use crate::sigv4::Header;
use crate::uri;

/// Longest object key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// Largest total size of user metadata (names after `x-amz-meta-` plus values).
pub const MAX_USER_METADATA: usize = 2 * 1024;
/// Largest `max-keys` honoured (larger values are clamped).
pub const MAX_KEYS: u32 = 1000;
/// Highest part number.
pub const MAX_PART_NUMBER: u32 = 10_000;
const MAX_UPLOAD_ID_LEN: usize = 256;

/// Validates a bucket name: 3–63 characters of `a-z0-9.-`, starting and ending with a
/// letter or digit, no `..`, not an IPv4 address, no `xn--`/`sthree-` prefix, no
/// `-s3alias`/`--ol-s3` suffix. `InvalidBucketName` otherwise.
pub fn validate_bucket_name(name: &str) -> Result<(), S3Error> {
    let err = |why: &str| {
        S3Error::new(
            S3Code::InvalidBucketName,
            format!("The specified bucket is not valid: {why}"),
        )
        .with_resource(format!("/{}", name.chars().take(80).collect::<String>()))
    };
    let b = name.as_bytes();
    if !(3..=63).contains(&b.len()) {
        return Err(err("bucket names must be 3 to 63 characters long"));
    }
    if !b
        .iter()
        .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
    {
        return Err(err(
            "bucket names may only contain lower-case letters, digits, dots and hyphens",
        ));
    }
    let alnum = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !alnum(b.first()) || !alnum(b.last()) {
        return Err(err(
            "bucket names must begin and end with a letter or digit",
        ));
    }
    if name.contains("..") {
        return Err(err("bucket names must not contain two adjacent periods"));
    }
    if name.parse::<std::net::Ipv4Addr>().is_ok() {
        return Err(err("bucket names must not be formatted as an IP address"));
    }
    if name.starts_with("xn--") || name.starts_with("sthree-") {
        return Err(err("bucket names must not start with xn-- or sthree-"));
    }
    if name.ends_with("-s3alias") || name.ends_with("--ol-s3") {
        return Err(err("bucket names must not end with -s3alias or --ol-s3"));
    }
    Ok(())
}

fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Validates an object key: non-empty (`InvalidArgument`), at most 1024 bytes
/// (`KeyTooLongError`), only characters XML 1.0 can represent (`InvalidArgument`).
pub fn validate_object_key(key: &str) -> Result<(), S3Error> {
    if key.is_empty() {
        return Err(S3Error::invalid_argument("object key must not be empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(S3Error::new(
            S3Code::KeyTooLongError,
            "Your key is too long (max 1024 bytes)",
        ));
    }
    if !key.chars().all(xml_char) {
        return Err(S3Error::invalid_argument(
            "object key contains a character XML cannot represent",
        ));
    }
    Ok(())
}

/// What a path-style request path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum S3Path {
    /// `/`: the service (ListBuckets).
    Root,
    /// `/bucket` or `/bucket/`.
    Bucket(String),
    /// `/bucket/key…` (the key may contain `/`).
    Object {
        /// The bucket.
        bucket: String,
        /// The decoded key.
        key: String,
    },
}

/// Parses a path-style raw path (`/bucket/key`, percent-encoded as sent), validating
/// the bucket name and the key.
pub fn parse_path_style(raw_path: &str) -> Result<S3Path, S3Error> {
    let rest = raw_path
        .strip_prefix('/')
        .ok_or_else(|| S3Error::invalid_request("request path must start with '/'"))?;
    if rest.is_empty() {
        return Ok(S3Path::Root);
    }
    let (bucket_raw, key_raw) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket = uri::decode_utf8(bucket_raw).ok_or_else(|| {
        S3Error::new(
            S3Code::InvalidBucketName,
            "bucket name is not valid percent-encoded UTF-8",
        )
    })?;
    validate_bucket_name(&bucket)?;
    if key_raw.is_empty() {
        return Ok(S3Path::Bucket(bucket));
    }
    if key_raw.len() > 3 * MAX_KEY_LEN {
        return Err(S3Error::new(
            S3Code::KeyTooLongError,
            "Your key is too long (max 1024 bytes)",
        ));
    }
    let key = uri::decode_utf8(key_raw).ok_or_else(|| {
        S3Error::invalid_argument("object key is not valid percent-encoded UTF-8")
    })?;
    validate_object_key(&key)?;
    Ok(S3Path::Object { bucket, key })
}

/// Parses a raw query string into decoded (name, value) pairs, in order. A parameter
/// without `=` has an empty value; `+` is a literal plus.
pub fn parse_query(raw_query: Option<&str>) -> Result<Vec<(String, String)>, S3Error> {
    let Some(q) = raw_query else {
        return Ok(Vec::new());
    };
    if q.len() > crate::sigv4::MAX_QUERY_LEN {
        return Err(S3Error::invalid_argument("query string is too long"));
    }
    let mut out = Vec::new();
    for seg in q.split('&').filter(|s| !s.is_empty()) {
        if out.len() >= 256 {
            return Err(S3Error::invalid_argument("too many query parameters"));
        }
        let (n, v) = seg.split_once('=').unwrap_or((seg, ""));
        let name = uri::decode_utf8(n).ok_or_else(|| {
            S3Error::invalid_argument("query parameter name is not valid percent-encoded UTF-8")
        })?;
        let value = uri::decode_utf8(v).ok_or_else(|| {
            S3Error::invalid_argument(format!(
                "query parameter {name} is not valid percent-encoded UTF-8"
            ))
        })?;
        out.push((name, value));
    }
    Ok(out)
}

/// Encodes the key to resume a listing after (opaque to clients).
pub fn continuation_token_encode(last_key: &str) -> String {
    let mut raw = Vec::with_capacity(last_key.len() + 1);
    raw.push(1u8); // format version
    raw.extend_from_slice(last_key.as_bytes());
    B64URL.encode(raw)
}

/// Decodes a continuation token back into the key to resume after;
/// `InvalidArgument` naming `continuation-token` if it was not produced by
/// [`continuation_token_encode`].
pub fn continuation_token_decode(token: &str) -> Result<String, S3Error> {
    let bad = || {
        S3Error::invalid_argument(
            "The continuation token provided is incorrect (continuation-token)",
        )
    };
    if token.len() > 4 * (MAX_TOKEN_KEY_LEN + 1) / 3 + 4 {
        return Err(bad());
    }
    let raw = B64URL.decode(token).map_err(|_| bad())?;
    let (version, key) = raw.split_first().ok_or_else(bad)?;
    if *version != 1 {
        return Err(bad());
    }
    let key = String::from_utf8(key.to_vec()).map_err(|_| bad())?;
    if key.is_empty() || key.len() > MAX_TOKEN_KEY_LEN {
        return Err(bad());
    }
    Ok(key)
}

/// The longest key a continuation token carries: a key, or a common prefix (itself up to a
/// key's length) with the one 4-byte UTF-8 character a listing appends to mark it as one.
const MAX_TOKEN_KEY_LEN: usize = MAX_KEY_LEN + 4;

/// The parameters of a ListObjectsV2 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListObjectsV2Params {
    /// `prefix` (empty when absent).
    pub prefix: String,
    /// `delimiter` (`None` when absent or empty).
    pub delimiter: Option<String>,
    /// `max-keys`, clamped to 0..=1000 (default 1000).
    pub max_keys: u32,
    /// `continuation-token` as sent (echoed in the response).
    pub continuation_token: Option<String>,
    /// The key the continuation token resumes after.
    pub continue_after: Option<String>,
    /// `start-after`.
    pub start_after: Option<String>,
    /// `encoding-type=url`.
    pub encoding_url: bool,
    /// `fetch-owner=true`.
    pub fetch_owner: bool,
}

impl ListObjectsV2Params {
    /// The exclusive lower bound of the listing: the later of the continuation point
    /// and `start-after`.
    pub fn list_after(&self) -> Option<&str> {
        match (self.continue_after.as_deref(), self.start_after.as_deref()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

fn parse_bool(name: &str, v: &str) -> Result<bool, S3Error> {
    match v {
        "true" | "TRUE" | "True" => Ok(true),
        "false" | "FALSE" | "False" | "" => Ok(false),
        _ => Err(S3Error::invalid_argument(format!(
            "{name} must be true or false"
        ))),
    }
}

/// Parses the query of a ListObjectsV2 request (`list-type=2`, `prefix`, `delimiter`,
/// `max-keys`, `continuation-token`, `start-after`, `encoding-type`, `fetch-owner`).
/// Unknown parameters are ignored; repeated known ones are `InvalidArgument`.
pub fn parse_list_objects_v2(raw_query: Option<&str>) -> Result<ListObjectsV2Params, S3Error> {
    let mut p = ListObjectsV2Params {
        prefix: String::new(),
        delimiter: None,
        max_keys: MAX_KEYS,
        continuation_token: None,
        continue_after: None,
        start_after: None,
        encoding_url: false,
        fetch_owner: false,
    };
    let mut seen: Vec<String> = Vec::new();
    for (name, value) in parse_query(raw_query)? {
        let known = matches!(
            name.as_str(),
            "list-type"
                | "prefix"
                | "delimiter"
                | "max-keys"
                | "continuation-token"
                | "start-after"
                | "encoding-type"
                | "fetch-owner"
        );
        if !known {
            continue;
        }
        if seen.contains(&name) {
            return Err(S3Error::invalid_argument(format!(
                "query parameter {name} is repeated"
            )));
        }
        match name.as_str() {
            "list-type" => {
                if value != "2" {
                    return Err(S3Error::invalid_argument("list-type must be 2"));
                }
            }
            "prefix" => {
                if value.len() > MAX_KEY_LEN {
                    return Err(S3Error::new(
                        S3Code::KeyTooLongError,
                        "prefix is longer than 1024 bytes",
                    ));
                }
                p.prefix = value;
            }
            "delimiter" => {
                if value.len() > MAX_KEY_LEN {
                    return Err(S3Error::invalid_argument("delimiter is too long"));
                }
                p.delimiter = (!value.is_empty()).then_some(value);
            }
            "max-keys" => {
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(S3Error::invalid_argument(
                        "max-keys must be a non-negative integer",
                    ));
                }
                // Long digit strings saturate, then clamp.
                let n = value.parse::<u64>().unwrap_or(u64::MAX);
                p.max_keys = u32::try_from(n.min(u64::from(MAX_KEYS))).unwrap_or(MAX_KEYS);
            }
            "continuation-token" => {
                p.continue_after = Some(continuation_token_decode(&value)?);
                p.continuation_token = Some(value);
            }
            "start-after" => {
                if value.len() > MAX_KEY_LEN {
                    return Err(S3Error::new(
                        S3Code::KeyTooLongError,
                        "start-after is longer than 1024 bytes",
                    ));
                }
                p.start_after = (!value.is_empty()).then_some(value);
            }
            "encoding-type" => {
                if value != "url" {
                    return Err(S3Error::invalid_argument(
                        "Invalid Encoding Method specified in Request (encoding-type)",
                    ));
                }
                p.encoding_url = true;
            }
            _ => p.fetch_owner = parse_bool("fetch-owner", &value)?,
        }
        seen.push(name);
    }
    Ok(p)
}

/// Parses `partNumber`: an integer in 1..=10000 (`InvalidArgument` otherwise).
pub fn parse_part_number(value: &str) -> Result<u32, S3Error> {
    let err = || {
        S3Error::invalid_argument(
            "Part number must be an integer between 1 and 10000, inclusive (partNumber)",
        )
    };
    if value.is_empty() || value.len() > 5 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    match value.parse::<u32>() {
        Ok(n) if (1..=MAX_PART_NUMBER).contains(&n) => Ok(n),
        _ => Err(err()),
    }
}

/// Validates an `uploadId`: 1–256 characters of `A-Za-z0-9-_.~+/=` (the server mints
/// them; anything else cannot exist, so it is `NoSuchUpload`).
pub fn parse_upload_id(value: &str) -> Result<&str, S3Error> {
    let ok = !value.is_empty()
        && value.len() <= MAX_UPLOAD_ID_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.~+/=".contains(&b));
    if ok {
        Ok(value)
    } else {
        Err(S3Error::from_code(S3Code::NoSuchUpload))
    }
}

/// A parsed `x-amz-copy-source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySource {
    /// Source bucket.
    pub bucket: String,
    /// Source key (decoded).
    pub key: String,
    /// `?versionId=` if given.
    pub version_id: Option<String>,
}

/// Parses `x-amz-copy-source`: `/bucket/key` or `bucket/key`, percent-encoded, with an
/// optional `?versionId=…`. `InvalidArgument` naming the header on error (or the
/// bucket/key validation error).
pub fn parse_copy_source(value: &[u8]) -> Result<CopySource, S3Error> {
    let err = |why: &str| S3Error::invalid_argument(format!("x-amz-copy-source: {why}"));
    if value.len() > 4 * MAX_KEY_LEN {
        return Err(err("value is too long"));
    }
    let v = std::str::from_utf8(value)
        .map_err(|_| err("not valid UTF-8"))?
        .trim();
    let (path, query) = match v.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (v, None),
    };
    let version_id = match query {
        None => None,
        Some(q) => {
            let raw = q
                .strip_prefix("versionId=")
                .ok_or_else(|| err("only ?versionId= may follow the key"))?;
            let id = uri::decode_utf8(raw)
                .ok_or_else(|| err("versionId is not valid percent-encoded UTF-8"))?;
            if id.is_empty() || id.len() > 1024 {
                return Err(err("invalid versionId"));
            }
            Some(id)
        }
    };
    let path = path.strip_prefix('/').unwrap_or(path);
    let decoded = uri::decode_utf8(path).ok_or_else(|| err("not valid percent-encoded UTF-8"))?;
    let (bucket, key) = decoded
        .split_once('/')
        .ok_or_else(|| err("must be bucket/key"))?;
    validate_bucket_name(bucket)?;
    validate_object_key(key)?;
    Ok(CopySource {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        version_id,
    })
}

/// Collects `x-amz-meta-*` headers as (lower-case suffix, value) pairs, sorted by name;
/// repeated names are joined with `,`. Names must be non-empty tokens and values valid
/// UTF-8 (`InvalidArgument`); the total of names and values is at most 2 KiB
/// (`MetadataTooLarge`).
pub fn collect_user_metadata(headers: &[Header<'_>]) -> Result<Vec<(String, String)>, S3Error> {
    const PREFIX: &str = "x-amz-meta-";
    let mut out: Vec<(String, String)> = Vec::new();
    let mut total = 0usize;
    for (n, v) in headers {
        let Some(prefix) = n.get(..PREFIX.len()) else {
            continue;
        };
        if !prefix.eq_ignore_ascii_case(PREFIX) {
            continue;
        }
        let name = n
            .get(PREFIX.len()..)
            .unwrap_or_default()
            .to_ascii_lowercase();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b))
        {
            return Err(S3Error::invalid_argument(format!(
                "metadata header {n} has an invalid name"
            )));
        }
        let value = std::str::from_utf8(v)
            .map_err(|_| {
                S3Error::invalid_argument(format!("metadata header {n} is not valid UTF-8"))
            })?
            .trim();
        total += value.len();
        match out.iter_mut().find(|(k, _)| *k == name) {
            Some((_, existing)) => {
                existing.push(',');
                existing.push_str(value);
                total += 1;
            }
            None => {
                total += name.len();
                out.push((name, value.to_owned()));
            }
        }
        if total > MAX_USER_METADATA {
            return Err(S3Error::new(
                S3Code::MetadataTooLarge,
                format!(
                    "Your metadata headers exceed the maximum allowed metadata size ({MAX_USER_METADATA} bytes)"
                ),
            ));
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names() {
        for ok in [
            "abc",
            "my-bucket.example",
            "a1b",
            "1bucket",
            &"a".repeat(63),
            "192.168.5.4x",
        ] {
            validate_bucket_name(ok).unwrap();
        }
        for bad in [
            "ab",
            &"a".repeat(64),
            "My-Bucket",
            "-abc",
            "abc-",
            ".abc",
            "abc.",
            "a..b",
            "192.168.5.4",
            "xn--abc",
            "sthree-x",
            "abc-s3alias",
            "abc--ol-s3",
            "a_b",
            "a b",
            "ab\u{e9}",
            "",
        ] {
            let e = validate_bucket_name(bad).unwrap_err();
            assert_eq!(e.code, S3Code::InvalidBucketName, "{bad}");
        }
    }

    #[test]
    fn object_keys() {
        validate_object_key("a").unwrap();
        validate_object_key(&"k".repeat(1024)).unwrap();
        validate_object_key("dir/sub dir/\u{e9}\u{1F600}").unwrap();
        assert_eq!(
            validate_object_key("").unwrap_err().code,
            S3Code::InvalidArgument
        );
        assert_eq!(
            validate_object_key(&"k".repeat(1025)).unwrap_err().code,
            S3Code::KeyTooLongError
        );
        assert_eq!(
            validate_object_key(&"\u{e9}".repeat(513)).unwrap_err().code,
            S3Code::KeyTooLongError
        );
        assert_eq!(
            validate_object_key("a\0b").unwrap_err().code,
            S3Code::InvalidArgument
        );
        assert_eq!(
            validate_object_key("a\u{1b}b").unwrap_err().code,
            S3Code::InvalidArgument
        );
    }

    #[test]
    fn path_style() {
        assert_eq!(parse_path_style("/").unwrap(), S3Path::Root);
        assert_eq!(
            parse_path_style("/bkt").unwrap(),
            S3Path::Bucket("bkt".into())
        );
        assert_eq!(
            parse_path_style("/bkt/").unwrap(),
            S3Path::Bucket("bkt".into())
        );
        assert_eq!(
            parse_path_style("/bkt/a%20b/c%2Fd+").unwrap(),
            S3Path::Object {
                bucket: "bkt".into(),
                key: "a b/c/d+".into()
            }
        );
        assert_eq!(
            parse_path_style("/BKT/x").unwrap_err().code,
            S3Code::InvalidBucketName
        );
        assert_eq!(
            parse_path_style("/bkt/%ff").unwrap_err().code,
            S3Code::InvalidArgument
        );
        assert_eq!(
            parse_path_style("/bkt/%").unwrap_err().code,
            S3Code::InvalidArgument
        );
        assert!(parse_path_style("bkt").is_err());
    }

    #[test]
    fn continuation_tokens() {
        // The longest: a 1024-byte common prefix with the listing's U+10FFFF mark after it.
        let longest = format!("{}\u{10FFFF}", "z".repeat(1024));
        for k in ["a", "dir/\u{e9}/x y", &"z".repeat(1024), &longest] {
            assert_eq!(
                continuation_token_decode(&continuation_token_encode(k)).unwrap(),
                k
            );
        }
        let too_long = continuation_token_encode(&format!("{longest}z"));
        for bad in ["", "!!!", "AQ", "Ag", "AmFi", &"A".repeat(5000), &too_long] {
            let e = continuation_token_decode(bad).unwrap_err();
            assert_eq!(e.code, S3Code::InvalidArgument, "{bad}");
            assert!(e.message.contains("continuation-token"));
        }
    }

    #[test]
    fn list_v2_params() {
        let p = parse_list_objects_v2(Some("list-type=2&prefix=photos%2F&delimiter=%2F&max-keys=50&encoding-type=url&fetch-owner=true&start-after=b")).unwrap();
        assert_eq!(p.prefix, "photos/");
        assert_eq!(p.delimiter.as_deref(), Some("/"));
        assert_eq!(p.max_keys, 50);
        assert!(p.encoding_url && p.fetch_owner);
        assert_eq!(p.list_after(), Some("b"));
        let p = parse_list_objects_v2(None).unwrap();
        assert_eq!(p.max_keys, 1000);
        assert_eq!(p.delimiter, None);
        assert_eq!(
            parse_list_objects_v2(Some("max-keys=5000"))
                .unwrap()
                .max_keys,
            1000
        );
        assert_eq!(
            parse_list_objects_v2(Some("max-keys=99999999999999999999999"))
                .unwrap()
                .max_keys,
            1000
        );
        assert_eq!(
            parse_list_objects_v2(Some("max-keys=0")).unwrap().max_keys,
            0
        );
        let tok = continuation_token_encode("k9");
        let p = parse_list_objects_v2(Some(&format!("continuation-token={tok}&start-after=k1")))
            .unwrap();
        assert_eq!(p.continuation_token.as_deref(), Some(tok.as_str()));
        assert_eq!(p.list_after(), Some("k9"));
        for (q, field) in [
            ("max-keys=-1", "max-keys"),
            ("max-keys=abc", "max-keys"),
            ("list-type=1", "list-type"),
            ("encoding-type=xml", "encoding-type"),
            ("fetch-owner=maybe", "fetch-owner"),
            ("continuation-token=zz", "continuation-token"),
            ("prefix=a&prefix=b", "prefix"),
            ("prefix=%zz", "prefix"),
        ] {
            let e = parse_list_objects_v2(Some(q)).unwrap_err();
            assert!(e.message.contains(field), "{q}: {e}");
        }
    }

    #[test]
    fn part_numbers_and_upload_ids() {
        assert_eq!(parse_part_number("1").unwrap(), 1);
        assert_eq!(parse_part_number("10000").unwrap(), 10_000);
        for bad in ["0", "10001", "-1", "", "1.0", "99999999999", "+1"] {
            assert!(
                parse_part_number(bad)
                    .unwrap_err()
                    .message
                    .contains("partNumber")
            );
        }
        assert_eq!(parse_upload_id("abc-DEF_123").unwrap(), "abc-DEF_123");
        for bad in ["", "a b", "<x>", &"a".repeat(257)] {
            assert_eq!(parse_upload_id(bad).unwrap_err().code, S3Code::NoSuchUpload);
        }
    }

    #[test]
    fn copy_source() {
        let c = parse_copy_source(b"/src-bucket/dir/my%20key.txt").unwrap();
        assert_eq!(
            c,
            CopySource {
                bucket: "src-bucket".into(),
                key: "dir/my key.txt".into(),
                version_id: None
            }
        );
        let c = parse_copy_source(b"src-bucket/k%3Fq?versionId=abc%2B1").unwrap();
        assert_eq!(c.key, "k?q");
        assert_eq!(c.version_id.as_deref(), Some("abc+1"));
        for bad in [
            &b"bucket"[..],
            b"/bucket/",
            b"bucket/k?foo=1",
            b"bucket/%zz",
            b"\xff",
            b"BUCKET/k",
        ] {
            assert!(
                parse_copy_source(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(parse_copy_source(b"bucket/k").is_ok());
        assert!(parse_copy_source(b"bucket/k?versionId=").is_err());
    }

    #[test]
    fn user_metadata() {
        let h: Vec<Header<'_>> = vec![
            ("x-amz-meta-b", b" 2 "),
            ("X-Amz-Meta-A", b"1"),
            ("content-type", b"text/plain"),
            ("x-amz-meta-b", b"3"),
        ];
        assert_eq!(
            collect_user_metadata(&h).unwrap(),
            vec![
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "2,3".to_owned())
            ]
        );
        let big = "v".repeat(2047);
        let h: Vec<Header<'_>> = vec![("x-amz-meta-k", big.as_bytes())];
        collect_user_metadata(&h).unwrap();
        let big = "v".repeat(2048);
        let h: Vec<Header<'_>> = vec![("x-amz-meta-k", big.as_bytes())];
        assert_eq!(
            collect_user_metadata(&h).unwrap_err().code,
            S3Code::MetadataTooLarge
        );
        let h: Vec<Header<'_>> = vec![("x-amz-meta-", b"x")];
        assert_eq!(
            collect_user_metadata(&h).unwrap_err().code,
            S3Code::InvalidArgument
        );
        let h: Vec<Header<'_>> = vec![("x-amz-meta-k", b"\xff")];
        assert_eq!(
            collect_user_metadata(&h).unwrap_err().code,
            S3Code::InvalidArgument
        );
    }
}
