//! S3's XML documents: response writers and bounded request-body parsers.
//!
//! Writers produce exactly the documents S3 sends: the `<?xml version="1.0"
//! encoding="UTF-8"?>` declaration, the `http://s3.amazonaws.com/doc/2006-03-01/`
//! namespace on the root (except `Error`, which S3 sends without one), elements in
//! S3's order, text escaped (`& < > " '`) so any key yields well-formed XML, timestamps
//! as `2009-10-12T17:50:30.000Z`. With `EncodingType=url`, keys and prefixes are
//! percent-encoded as S3 does.
//!
//! Parsers (`CompleteMultipartUpload`, `Delete`, `CreateBucketConfiguration`) accept
//! at most 1 MiB, reject DTDs and unknown entities, bound nesting depth and element
//! count, tolerate the namespace being present or absent, ignore unknown elements
//! (e.g. checksum fields), and fail with `MalformedXML` (or the specific S3 code, such
//! as `InvalidPartOrder`) naming the element at fault. No panics on any input.

use quick_xml::Reader;
use quick_xml::events::Event;

use crate::error::{S3Code, S3Error};
use crate::names::{MAX_PART_NUMBER, validate_object_key};

/// The S3 XML namespace.
pub const S3_NAMESPACE: &str = "http://s3.amazonaws.com/doc/2006-03-01/";
/// The XML declaration S3 starts documents with.
pub const XML_DECLARATION: &str = r#"<?xml version="1.0" encoding="UTF-8"?>"#;
/// Largest request body the parsers accept.
pub const MAX_XML_BODY: usize = 1024 * 1024;
/// Most parts in a `CompleteMultipartUpload`.
pub const MAX_PARTS: usize = 10_000;
/// Most objects in a `Delete` (DeleteObjects).
pub const MAX_DELETE_OBJECTS: usize = 1000;
const MAX_DEPTH: usize = 16;
const MAX_NODES: usize = 100_000;

/// Formats epoch milliseconds as S3's XML timestamp, `2009-10-12T17:50:30.000Z`.
pub fn iso8601_millis(epoch_ms: u64) -> String {
    crate::time::iso8601_millis(epoch_ms)
}

/// Formats epoch seconds as an HTTP date (`Last-Modified`), `Fri, 24 May 2013 00:00:00 GMT`.
pub fn http_date(epoch_secs: u64) -> String {
    crate::time::http_date(epoch_secs)
}

/// Parses an HTTP date (`If-Modified-Since`…) into epoch seconds.
pub fn parse_http_date(value: &str) -> Option<i64> {
    crate::time::parse_http_date(value)
}

// ---------------------------------------------------------------------------------------
// Writing.

/// Escapes text for element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s);
    out
}

fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
}

/// S3's `EncodingType=url` encoding of a key or prefix: every byte outside
/// `A-Za-z0-9-._~` and `/` percent-encoded (a space is `%20`, `+` is `%2B`).
pub fn url_encode_key(s: &str) -> String {
    crate::uri::encode(s.as_bytes(), true)
}

struct W {
    out: String,
}

impl W {
    fn new(root: &str, ns: bool) -> Self {
        let mut out = String::with_capacity(512);
        out.push_str(XML_DECLARATION);
        out.push('\n');
        out.push('<');
        out.push_str(root);
        if ns {
            out.push_str(" xmlns=\"");
            out.push_str(S3_NAMESPACE);
            out.push('"');
        }
        out.push('>');
        W { out }
    }
    fn open(&mut self, name: &str) {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push('>');
    }
    fn close(&mut self, name: &str) {
        self.out.push_str("</");
        self.out.push_str(name);
        self.out.push('>');
    }
    fn el(&mut self, name: &str, text: &str) {
        self.open(name);
        escape_into(&mut self.out, text);
        self.close(name);
    }
    fn opt(&mut self, name: &str, text: Option<&str>) {
        if let Some(t) = text {
            self.el(name, t);
        }
    }
    fn num(&mut self, name: &str, n: u64) {
        self.el(name, &n.to_string());
    }
    fn boolean(&mut self, name: &str, b: bool) {
        self.el(name, if b { "true" } else { "false" });
    }
    fn owner(&mut self, name: &str, o: &Owner) {
        self.open(name);
        self.el("ID", &o.id);
        self.el("DisplayName", &o.display_name);
        self.close(name);
    }
    fn finish(mut self, root: &str) -> String {
        self.close(root);
        self.out
    }
}

/// The XML `Error` document S3 sends with an error status.
pub fn error_xml(err: &S3Error, request_id: &str) -> String {
    let mut w = W::new("Error", false);
    w.el("Code", err.code.as_str());
    w.el("Message", &err.message);
    w.opt("Resource", err.resource.as_deref());
    w.el("RequestId", request_id);
    w.finish("Error")
}

/// An owner (bucket or object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Canonical user id.
    pub id: String,
    /// Display name.
    pub display_name: String,
}

/// One bucket in `ListAllMyBucketsResult`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketInfo {
    /// Bucket name.
    pub name: String,
    /// Creation time, epoch milliseconds.
    pub creation_date_ms: u64,
}

/// `ListAllMyBucketsResult` (ListBuckets).
pub fn list_all_my_buckets(owner: &Owner, buckets: &[BucketInfo]) -> String {
    let mut w = W::new("ListAllMyBucketsResult", true);
    w.owner("Owner", owner);
    w.open("Buckets");
    for b in buckets {
        w.open("Bucket");
        w.el("Name", &b.name);
        w.el("CreationDate", &iso8601_millis(b.creation_date_ms));
        w.close("Bucket");
    }
    w.close("Buckets");
    w.finish("ListAllMyBucketsResult")
}

/// One object in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The key.
    pub key: String,
    /// Last modification, epoch milliseconds.
    pub last_modified_ms: u64,
    /// The ETag as sent in the `ETag` header, quotes included (`"9b2c…"`).
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// Owner, included when `fetch-owner=true`.
    pub owner: Option<Owner>,
}

/// `ListBucketResult` of ListObjectsV2.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListObjectsV2Result {
    /// Bucket name.
    pub name: String,
    /// `prefix` as requested.
    pub prefix: String,
    /// `delimiter` as requested.
    pub delimiter: Option<String>,
    /// Effective `max-keys`.
    pub max_keys: u32,
    /// Whether more results follow.
    pub is_truncated: bool,
    /// The request's `continuation-token`, echoed.
    pub continuation_token: Option<String>,
    /// Token for the next page (when truncated).
    pub next_continuation_token: Option<String>,
    /// The request's `start-after`, echoed.
    pub start_after: Option<String>,
    /// Objects, in key order.
    pub contents: Vec<ObjectInfo>,
    /// Common prefixes, in order.
    pub common_prefixes: Vec<String>,
    /// `encoding-type=url` was requested.
    pub encoding_url: bool,
}

impl ListObjectsV2Result {
    /// The XML document.
    pub fn to_xml(&self) -> String {
        let enc = |s: &str| {
            if self.encoding_url {
                url_encode_key(s)
            } else {
                s.to_owned()
            }
        };
        let mut w = W::new("ListBucketResult", true);
        w.el("Name", &self.name);
        w.el("Prefix", &enc(&self.prefix));
        if let Some(d) = &self.delimiter {
            w.el("Delimiter", &enc(d));
        }
        w.num("MaxKeys", u64::from(self.max_keys));
        if self.encoding_url {
            w.el("EncodingType", "url");
        }
        w.num(
            "KeyCount",
            (self.contents.len() + self.common_prefixes.len()) as u64,
        );
        w.boolean("IsTruncated", self.is_truncated);
        w.opt("ContinuationToken", self.continuation_token.as_deref());
        w.opt(
            "NextContinuationToken",
            self.next_continuation_token.as_deref(),
        );
        if let Some(s) = &self.start_after {
            w.el("StartAfter", &enc(s));
        }
        for o in &self.contents {
            w.open("Contents");
            w.el("Key", &enc(&o.key));
            w.el("LastModified", &iso8601_millis(o.last_modified_ms));
            w.el("ETag", &o.etag);
            w.num("Size", o.size);
            if let Some(owner) = &o.owner {
                w.owner("Owner", owner);
            }
            w.el("StorageClass", "STANDARD");
            w.close("Contents");
        }
        for p in &self.common_prefixes {
            w.open("CommonPrefixes");
            w.el("Prefix", &enc(p));
            w.close("CommonPrefixes");
        }
        w.finish("ListBucketResult")
    }
}

/// `InitiateMultipartUploadResult` (CreateMultipartUpload).
pub fn initiate_multipart_upload(bucket: &str, key: &str, upload_id: &str) -> String {
    let mut w = W::new("InitiateMultipartUploadResult", true);
    w.el("Bucket", bucket);
    w.el("Key", key);
    w.el("UploadId", upload_id);
    w.finish("InitiateMultipartUploadResult")
}

/// `CompleteMultipartUploadResult`; `etag` quotes included.
pub fn complete_multipart_upload(location: &str, bucket: &str, key: &str, etag: &str) -> String {
    let mut w = W::new("CompleteMultipartUploadResult", true);
    w.el("Location", location);
    w.el("Bucket", bucket);
    w.el("Key", key);
    w.el("ETag", etag);
    w.finish("CompleteMultipartUploadResult")
}

/// `CopyObjectResult`; `etag` quotes included.
pub fn copy_object_result(etag: &str, last_modified_ms: u64) -> String {
    copy_result("CopyObjectResult", etag, last_modified_ms)
}

/// `CopyPartResult` (UploadPartCopy); `etag` quotes included.
pub fn copy_part_result(etag: &str, last_modified_ms: u64) -> String {
    copy_result("CopyPartResult", etag, last_modified_ms)
}

fn copy_result(root: &str, etag: &str, last_modified_ms: u64) -> String {
    let mut w = W::new(root, true);
    w.el("LastModified", &iso8601_millis(last_modified_ms));
    w.el("ETag", etag);
    w.finish(root)
}

/// One part in `ListPartsResult`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartInfo {
    /// Part number.
    pub part_number: u32,
    /// Upload time, epoch milliseconds.
    pub last_modified_ms: u64,
    /// ETag, quotes included.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
}

/// `ListPartsResult`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListPartsResult {
    /// Bucket.
    pub bucket: String,
    /// Key.
    pub key: String,
    /// Upload id.
    pub upload_id: String,
    /// `part-number-marker` as requested (0 if none).
    pub part_number_marker: u32,
    /// Marker for the next page.
    pub next_part_number_marker: Option<u32>,
    /// Effective `max-parts`.
    pub max_parts: u32,
    /// Whether more parts follow.
    pub is_truncated: bool,
    /// The parts.
    pub parts: Vec<PartInfo>,
    /// Initiator and owner.
    pub owner: Option<Owner>,
}

impl ListPartsResult {
    /// The XML document.
    pub fn to_xml(&self) -> String {
        let mut w = W::new("ListPartsResult", true);
        w.el("Bucket", &self.bucket);
        w.el("Key", &self.key);
        w.el("UploadId", &self.upload_id);
        if let Some(o) = &self.owner {
            w.owner("Initiator", o);
            w.owner("Owner", o);
        }
        w.el("StorageClass", "STANDARD");
        w.num("PartNumberMarker", u64::from(self.part_number_marker));
        if let Some(n) = self.next_part_number_marker {
            w.num("NextPartNumberMarker", u64::from(n));
        }
        w.num("MaxParts", u64::from(self.max_parts));
        w.boolean("IsTruncated", self.is_truncated);
        for p in &self.parts {
            w.open("Part");
            w.num("PartNumber", u64::from(p.part_number));
            w.el("LastModified", &iso8601_millis(p.last_modified_ms));
            w.el("ETag", &p.etag);
            w.num("Size", p.size);
            w.close("Part");
        }
        w.finish("ListPartsResult")
    }
}

/// One in-progress upload in `ListMultipartUploadsResult`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadInfo {
    /// Key.
    pub key: String,
    /// Upload id.
    pub upload_id: String,
    /// Initiation time, epoch milliseconds.
    pub initiated_ms: u64,
}

/// `ListMultipartUploadsResult` (minimal: no markers beyond the next ones).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListMultipartUploadsResult {
    /// Bucket.
    pub bucket: String,
    /// `key-marker` as requested.
    pub key_marker: String,
    /// `upload-id-marker` as requested.
    pub upload_id_marker: String,
    /// Next key marker (when truncated).
    pub next_key_marker: Option<String>,
    /// Next upload-id marker (when truncated).
    pub next_upload_id_marker: Option<String>,
    /// `prefix` as requested.
    pub prefix: String,
    /// `delimiter` as requested.
    pub delimiter: Option<String>,
    /// Effective `max-uploads`.
    pub max_uploads: u32,
    /// Whether more uploads follow.
    pub is_truncated: bool,
    /// The uploads.
    pub uploads: Vec<UploadInfo>,
    /// Common prefixes.
    pub common_prefixes: Vec<String>,
}

impl ListMultipartUploadsResult {
    /// The XML document.
    pub fn to_xml(&self) -> String {
        let mut w = W::new("ListMultipartUploadsResult", true);
        w.el("Bucket", &self.bucket);
        w.el("KeyMarker", &self.key_marker);
        w.el("UploadIdMarker", &self.upload_id_marker);
        w.opt("NextKeyMarker", self.next_key_marker.as_deref());
        w.opt("NextUploadIdMarker", self.next_upload_id_marker.as_deref());
        w.el("Prefix", &self.prefix);
        w.opt("Delimiter", self.delimiter.as_deref());
        w.num("MaxUploads", u64::from(self.max_uploads));
        w.boolean("IsTruncated", self.is_truncated);
        for u in &self.uploads {
            w.open("Upload");
            w.el("Key", &u.key);
            w.el("UploadId", &u.upload_id);
            w.el("StorageClass", "STANDARD");
            w.el("Initiated", &iso8601_millis(u.initiated_ms));
            w.close("Upload");
        }
        for p in &self.common_prefixes {
            w.open("CommonPrefixes");
            w.el("Prefix", p);
            w.close("CommonPrefixes");
        }
        w.finish("ListMultipartUploadsResult")
    }
}

/// The outcome for one key of a DeleteObjects request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Deleted (or did not exist).
    Deleted {
        /// Key.
        key: String,
        /// Version id, if the request named one.
        version_id: Option<String>,
    },
    /// Failed.
    Error {
        /// Key.
        key: String,
        /// Version id, if the request named one.
        version_id: Option<String>,
        /// The S3 error.
        code: S3Code,
        /// Its message.
        message: String,
    },
}

/// `DeleteResult` (DeleteObjects). With `quiet`, only errors are listed.
pub fn delete_result(outcomes: &[DeleteOutcome], quiet: bool) -> String {
    let mut w = W::new("DeleteResult", true);
    for o in outcomes {
        match o {
            DeleteOutcome::Deleted { key, version_id } => {
                if quiet {
                    continue;
                }
                w.open("Deleted");
                w.el("Key", key);
                w.opt("VersionId", version_id.as_deref());
                w.close("Deleted");
            }
            DeleteOutcome::Error {
                key,
                version_id,
                code,
                message,
            } => {
                w.open("Error");
                w.el("Key", key);
                w.opt("VersionId", version_id.as_deref());
                w.el("Code", code.as_str());
                w.el("Message", message);
                w.close("Error");
            }
        }
    }
    w.finish("DeleteResult")
}

/// `LocationConstraint` (GetBucketLocation); `None` (us-east-1) is an empty element.
pub fn location_constraint(region: Option<&str>) -> String {
    let mut w = W::new("LocationConstraint", true);
    if let Some(r) = region {
        escape_into(&mut w.out, r);
    }
    w.finish("LocationConstraint")
}

// ---------------------------------------------------------------------------------------
// Parsing.

#[derive(Debug, Default)]
struct Node {
    name: String,
    text: String,
    children: Vec<Node>,
}

impl Node {
    fn child(&self, name: &str) -> Result<Option<&Node>, S3Error> {
        let mut it = self.children.iter().filter(|c| c.name == name);
        let first = it.next();
        if it.next().is_some() {
            return Err(S3Error::malformed_xml(format!(
                "element {name} is repeated in {}",
                self.name
            )));
        }
        Ok(first)
    }
}

fn predefined_entity(name: &[u8]) -> Option<char> {
    match name {
        b"lt" => Some('<'),
        b"gt" => Some('>'),
        b"amp" => Some('&'),
        b"apos" => Some('\''),
        b"quot" => Some('"'),
        _ => None,
    }
}

/// Parses a body into an element tree, bounded in size, depth and element count.
fn parse_tree(body: &[u8]) -> Result<Node, S3Error> {
    if body.len() > MAX_XML_BODY {
        return Err(S3Error::new(
            S3Code::MaxMessageLengthExceeded,
            "XML body is larger than 1 MiB",
        ));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(S3Error::new(
            S3Code::MissingRequestBodyError,
            "Request Body is empty",
        ));
    }
    let bad = |what: &str| {
        S3Error::malformed_xml(format!("The XML you provided was not well-formed: {what}"))
    };
    let mut reader = Reader::from_reader(body);
    let cfg = reader.config_mut();
    cfg.check_end_names = true;
    cfg.expand_empty_elements = true;
    let mut stack: Vec<Node> = Vec::new();
    let mut root: Option<Node> = None;
    let mut nodes = 0usize;
    loop {
        let ev = reader.read_event().map_err(|e| bad(&e.to_string()))?;
        match ev {
            Event::Start(e) => {
                if root.is_some() {
                    return Err(bad("content after the root element"));
                }
                nodes += 1;
                if stack.len() >= MAX_DEPTH || nodes > MAX_NODES {
                    return Err(bad("document is too deep or has too many elements"));
                }
                let name = std::str::from_utf8(e.local_name().as_ref())
                    .map_err(|_| bad("element name is not UTF-8"))?
                    .to_owned();
                stack.push(Node {
                    name,
                    ..Node::default()
                });
            }
            Event::End(_) => {
                let node = stack.pop().ok_or_else(|| bad("unbalanced end tag"))?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(node),
                    None => root = Some(node),
                }
            }
            Event::Text(t) => {
                let s = t.decode().map_err(|_| bad("text is not UTF-8"))?;
                match stack.last_mut() {
                    Some(n) => n.text.push_str(&s),
                    None if s.trim().is_empty() => {}
                    None => return Err(bad("text outside the root element")),
                }
            }
            Event::CData(t) => {
                let s = t.decode().map_err(|_| bad("CDATA is not UTF-8"))?;
                stack
                    .last_mut()
                    .ok_or_else(|| bad("CDATA outside the root element"))?
                    .text
                    .push_str(&s);
            }
            Event::GeneralRef(r) => {
                let c = match r.resolve_char_ref() {
                    Ok(Some(c)) => c,
                    Ok(None) => {
                        predefined_entity(&r).ok_or_else(|| bad("unknown entity reference"))?
                    }
                    Err(_) => return Err(bad("invalid character reference")),
                };
                stack
                    .last_mut()
                    .ok_or_else(|| bad("reference outside the root element"))?
                    .text
                    .push(c);
            }
            Event::DocType(_) => return Err(bad("DTDs are not allowed")),
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Empty(_) => return Err(bad("unexpected empty element")),
            Event::Eof => break,
        }
    }
    if !stack.is_empty() {
        return Err(bad("document ended inside an element"));
    }
    root.ok_or_else(|| bad("no root element"))
}

fn expect_root(node: &Node, name: &str) -> Result<(), S3Error> {
    if node.name == name {
        Ok(())
    } else {
        Err(S3Error::malformed_xml(format!(
            "root element must be {name}, not {}",
            node.name
        )))
    }
}

/// One part of a `CompleteMultipartUpload` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedPart {
    /// Part number, 1..=10000.
    pub part_number: u32,
    /// ETag with surrounding quotes removed.
    pub etag: String,
}

/// Strips one pair of surrounding double quotes (and whitespace) from an ETag.
pub fn trim_etag(etag: &str) -> &str {
    let t = etag.trim();
    t.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(t)
}

/// Parses a `CompleteMultipartUpload` body: 1..=10000 `Part`s, each with a
/// `PartNumber` (1..=10000) and `ETag`, in strictly ascending order
/// (`InvalidPartOrder`); checksum elements are ignored.
pub fn parse_complete_multipart_upload(body: &[u8]) -> Result<Vec<CompletedPart>, S3Error> {
    let root = parse_tree(body)?;
    expect_root(&root, "CompleteMultipartUpload")?;
    let mut parts = Vec::new();
    for p in root.children.iter().filter(|c| c.name == "Part") {
        if parts.len() == MAX_PARTS {
            return Err(S3Error::malformed_xml("more than 10000 parts"));
        }
        let num = p
            .child("PartNumber")?
            .ok_or_else(|| S3Error::malformed_xml("Part lacks PartNumber"))?;
        let t = num.text.trim();
        let part_number = (!t.is_empty() && t.len() <= 5 && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse::<u32>().ok())
            .flatten()
            .filter(|n| (1..=MAX_PART_NUMBER).contains(n))
            .ok_or_else(|| {
                S3Error::invalid_argument(
                    "PartNumber must be an integer between 1 and 10000, inclusive",
                )
            })?;
        let etag = p
            .child("ETag")?
            .ok_or_else(|| S3Error::malformed_xml("Part lacks ETag"))?;
        let etag = trim_etag(&etag.text);
        if etag.is_empty() || etag.len() > 128 {
            return Err(S3Error::new(
                S3Code::InvalidPart,
                "Part has an invalid ETag",
            ));
        }
        if parts
            .last()
            .is_some_and(|last: &CompletedPart| last.part_number >= part_number)
        {
            return Err(S3Error::from_code(S3Code::InvalidPartOrder));
        }
        parts.push(CompletedPart {
            part_number,
            etag: etag.to_owned(),
        });
    }
    if parts.is_empty() {
        return Err(S3Error::malformed_xml(
            "CompleteMultipartUpload must list at least one Part",
        ));
    }
    Ok(parts)
}

/// One object of a `Delete` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectToDelete {
    /// Key.
    pub key: String,
    /// Version id, if given.
    pub version_id: Option<String>,
}

/// A parsed `Delete` (DeleteObjects) body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRequest {
    /// `Quiet`: report only errors.
    pub quiet: bool,
    /// The objects, 1..=1000.
    pub objects: Vec<ObjectToDelete>,
}

/// Parses a `Delete` body: 1..=1000 `Object`s with a valid `Key` and optional
/// `VersionId`, and an optional `Quiet`.
pub fn parse_delete(body: &[u8]) -> Result<DeleteRequest, S3Error> {
    let root = parse_tree(body)?;
    expect_root(&root, "Delete")?;
    let quiet = match root.child("Quiet")? {
        None => false,
        Some(q) => match q.text.trim() {
            "true" => true,
            "false" => false,
            _ => return Err(S3Error::malformed_xml("Quiet must be true or false")),
        },
    };
    let mut objects = Vec::new();
    for o in root.children.iter().filter(|c| c.name == "Object") {
        if objects.len() == MAX_DELETE_OBJECTS {
            return Err(S3Error::malformed_xml(
                "Delete may list at most 1000 objects",
            ));
        }
        let key = o
            .child("Key")?
            .ok_or_else(|| S3Error::malformed_xml("Object lacks Key"))?;
        validate_object_key(&key.text)?;
        let version_id = o
            .child("VersionId")?
            .map(|v| v.text.trim().to_owned())
            .filter(|v| !v.is_empty());
        objects.push(ObjectToDelete {
            key: key.text.clone(),
            version_id,
        });
    }
    if objects.is_empty() {
        return Err(S3Error::malformed_xml(
            "Delete must list at least one Object",
        ));
    }
    Ok(DeleteRequest { quiet, objects })
}

/// Parses a `CreateBucketConfiguration` body; an empty body means no constraint.
/// Returns the `LocationConstraint`, if any.
pub fn parse_create_bucket_configuration(body: &[u8]) -> Result<Option<String>, S3Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let root = parse_tree(body)?;
    expect_root(&root, "CreateBucketConfiguration")?;
    let Some(lc) = root.child("LocationConstraint")? else {
        return Ok(None);
    };
    let region = lc.text.trim();
    if region.is_empty() {
        return Ok(None);
    }
    if region.len() > 64
        || !region
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(S3Error::invalid_argument(
            "LocationConstraint is not a valid region name",
        ));
    }
    Ok(Some(region.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_document() {
        let e = S3Error::new(S3Code::NoSuchKey, "The specified key does not exist.")
            .with_resource("/b/a&b<c>");
        assert_eq!(
            error_xml(&e, "4442587FB7D0A2F9"),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message><Resource>/b/a&amp;b&lt;c&gt;</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>"
        );
    }

    #[test]
    fn list_buckets() {
        let owner = Owner {
            id: "id1".into(),
            display_name: "me".into(),
        };
        let x = list_all_my_buckets(
            &owner,
            &[BucketInfo {
                name: "b1".into(),
                creation_date_ms: 1_255_369_830_000,
            }],
        );
        assert_eq!(
            x,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListAllMyBucketsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Owner><ID>id1</ID><DisplayName>me</DisplayName></Owner><Buckets><Bucket><Name>b1</Name><CreationDate>2009-10-12T17:50:30.000Z</CreationDate></Bucket></Buckets></ListAllMyBucketsResult>"
        );
    }

    #[test]
    fn list_objects_v2() {
        let mut r = ListObjectsV2Result {
            name: "bucket".into(),
            prefix: "a b/".into(),
            delimiter: Some("/".into()),
            max_keys: 2,
            is_truncated: true,
            next_continuation_token: Some("tok".into()),
            contents: vec![ObjectInfo {
                key: "a b/c+d&e".into(),
                last_modified_ms: 1_255_369_830_000,
                etag: "\"fba9dede5f27731c9771645a39863328\"".into(),
                size: 434_234,
                owner: None,
            }],
            common_prefixes: vec!["a b/sub/".into()],
            ..Default::default()
        };
        let x = r.to_xml();
        assert_eq!(
            x,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>bucket</Name><Prefix>a b/</Prefix><Delimiter>/</Delimiter><MaxKeys>2</MaxKeys><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated><NextContinuationToken>tok</NextContinuationToken><Contents><Key>a b/c+d&amp;e</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified><ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag><Size>434234</Size><StorageClass>STANDARD</StorageClass></Contents><CommonPrefixes><Prefix>a b/sub/</Prefix></CommonPrefixes></ListBucketResult>"
        );
        r.encoding_url = true;
        let x = r.to_xml();
        assert!(x.contains("<EncodingType>url</EncodingType>"));
        assert!(x.contains("<Key>a%20b/c%2Bd%26e</Key>"));
        assert!(x.contains("<Prefix>a%20b/</Prefix>"));
        assert!(x.contains("<Prefix>a%20b/sub/</Prefix>"));
        // The writer's output parses back (well-formed, with the namespace).
        parse_tree(x.as_bytes()).unwrap();
    }

    #[test]
    fn small_documents() {
        assert_eq!(
            initiate_multipart_upload("b", "k<", "u1"),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>b</Bucket><Key>k&lt;</Key><UploadId>u1</UploadId></InitiateMultipartUploadResult>"
        );
        let x = complete_multipart_upload("http://h/b/k", "b", "k", "\"e-2\"");
        assert!(x.ends_with("<Location>http://h/b/k</Location><Bucket>b</Bucket><Key>k</Key><ETag>&quot;e-2&quot;</ETag></CompleteMultipartUploadResult>"));
        let x = copy_object_result("\"e\"", 0);
        assert!(x.contains("<CopyObjectResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LastModified>1970-01-01T00:00:00.000Z</LastModified><ETag>&quot;e&quot;</ETag></CopyObjectResult>"));
        assert!(copy_part_result("\"e\"", 0).contains("<CopyPartResult"));
        assert_eq!(
            location_constraint(None),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<LocationConstraint xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"></LocationConstraint>"
        );
        assert!(location_constraint(Some("eu-west-1")).contains(">eu-west-1</LocationConstraint>"));
        let lp = ListPartsResult {
            bucket: "b".into(),
            key: "k".into(),
            upload_id: "u".into(),
            max_parts: 1000,
            parts: vec![PartInfo {
                part_number: 1,
                last_modified_ms: 0,
                etag: "\"x\"".into(),
                size: 5,
            }],
            ..Default::default()
        };
        let x = lp.to_xml();
        assert!(x.contains("<PartNumberMarker>0</PartNumberMarker><MaxParts>1000</MaxParts><IsTruncated>false</IsTruncated><Part><PartNumber>1</PartNumber>"));
        parse_tree(x.as_bytes()).unwrap();
        let lu = ListMultipartUploadsResult {
            bucket: "b".into(),
            max_uploads: 1000,
            uploads: vec![UploadInfo {
                key: "k".into(),
                upload_id: "u".into(),
                initiated_ms: 0,
            }],
            ..Default::default()
        };
        let x = lu.to_xml();
        assert!(x.contains("<Upload><Key>k</Key><UploadId>u</UploadId><StorageClass>STANDARD</StorageClass><Initiated>1970-01-01T00:00:00.000Z</Initiated></Upload>"));
        parse_tree(x.as_bytes()).unwrap();
        let outcomes = vec![
            DeleteOutcome::Deleted {
                key: "a".into(),
                version_id: None,
            },
            DeleteOutcome::Error {
                key: "b".into(),
                version_id: None,
                code: S3Code::AccessDenied,
                message: "Access Denied".into(),
            },
        ];
        let x = delete_result(&outcomes, false);
        assert!(x.contains("<Deleted><Key>a</Key></Deleted><Error><Key>b</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"));
        assert!(!delete_result(&outcomes, true).contains("<Deleted>"));
    }

    #[test]
    fn parse_complete() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Part><PartNumber>1</PartNumber><ETag>"a54357aff0632cce46d942af68356b38"</ETag><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part>
  <Part>
    <ETag>&quot;0c78aef83f66abc1fa1e8477f296d394&quot;</ETag>
    <PartNumber> 2 </PartNumber>
  </Part>
</CompleteMultipartUpload>"#;
        let parts = parse_complete_multipart_upload(body).unwrap();
        assert_eq!(
            parts,
            vec![
                CompletedPart {
                    part_number: 1,
                    etag: "a54357aff0632cce46d942af68356b38".into()
                },
                CompletedPart {
                    part_number: 2,
                    etag: "0c78aef83f66abc1fa1e8477f296d394".into()
                },
            ]
        );
        // Without namespace, without quotes.
        let p = parse_complete_multipart_upload(b"<CompleteMultipartUpload><Part><PartNumber>3</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>").unwrap();
        assert_eq!(p[0].part_number, 3);
        let cases: Vec<(&[u8], S3Code)> = vec![
            (b"", S3Code::MissingRequestBodyError),
            (b"<CompleteMultipartUpload></CompleteMultipartUpload>", S3Code::MalformedXML),
            (b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part></CompleteMultipartUpload>", S3Code::MalformedXML),
            (b"<CompleteMultipartUpload><Part><ETag>x</ETag></Part></CompleteMultipartUpload>", S3Code::MalformedXML),
            (b"<CompleteMultipartUpload><Part><PartNumber>0</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>", S3Code::InvalidArgument),
            (b"<CompleteMultipartUpload><Part><PartNumber>10001</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>", S3Code::InvalidArgument),
            (b"<CompleteMultipartUpload><Part><PartNumber>2</PartNumber><ETag>x</ETag></Part><Part><PartNumber>1</PartNumber><ETag>y</ETag></Part></CompleteMultipartUpload>", S3Code::InvalidPartOrder),
            (b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part><Part><PartNumber>1</PartNumber><ETag>y</ETag></Part></CompleteMultipartUpload>", S3Code::InvalidPartOrder),
            (b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><PartNumber>2</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>", S3Code::MalformedXML),
            (b"<CompleteMultipartUpload><Part>", S3Code::MalformedXML),
            (b"<CompleteMultipartUpload></Other>", S3Code::MalformedXML),
            (b"<Other><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></Other>", S3Code::MalformedXML),
            (b"<!DOCTYPE x [<!ENTITY e \"boom\">]><CompleteMultipartUpload/>", S3Code::MalformedXML),
            (b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&e;</ETag></Part></CompleteMultipartUpload>", S3Code::MalformedXML),
            (b"<CompleteMultipartUpload/><CompleteMultipartUpload/>", S3Code::MalformedXML),
            (b"\xff\xfe<", S3Code::MalformedXML),
        ];
        for (body, code) in cases {
            let e = parse_complete_multipart_upload(body).unwrap_err();
            assert_eq!(e.code, code, "{}: {e}", String::from_utf8_lossy(body));
        }
        let big = vec![b' '; MAX_XML_BODY + 1];
        assert_eq!(
            parse_complete_multipart_upload(&big).unwrap_err().code,
            S3Code::MaxMessageLengthExceeded
        );
        let deep = "<a>".repeat(100);
        assert_eq!(
            parse_complete_multipart_upload(deep.as_bytes())
                .unwrap_err()
                .code,
            S3Code::MalformedXML
        );
    }

    #[test]
    fn parse_complete_limits() {
        let mut body = String::from("<CompleteMultipartUpload>");
        for i in 1..=10_000 {
            body.push_str(&format!(
                "<Part><PartNumber>{i}</PartNumber><ETag>e</ETag></Part>"
            ));
        }
        body.push_str("</CompleteMultipartUpload>");
        assert_eq!(
            parse_complete_multipart_upload(body.as_bytes())
                .unwrap()
                .len(),
            10_000
        );
    }

    #[test]
    fn parse_delete_body() {
        let body = br#"<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet><Object><Key> a &amp; b </Key></Object><Object><Key>c&#47;d&#x20;</Key><VersionId>v1</VersionId></Object><Object><Key><![CDATA[<raw>]]></Key></Object></Delete>"#;
        let d = parse_delete(body).unwrap();
        assert!(d.quiet);
        assert_eq!(
            d.objects[0],
            ObjectToDelete {
                key: " a & b ".into(),
                version_id: None
            }
        );
        assert_eq!(
            d.objects[1],
            ObjectToDelete {
                key: "c/d ".into(),
                version_id: Some("v1".into())
            }
        );
        assert_eq!(d.objects[2].key, "<raw>");
        assert!(
            !parse_delete(b"<Delete><Object><Key>k</Key></Object></Delete>")
                .unwrap()
                .quiet
        );
        for (body, code) in [
            (&b"<Delete></Delete>"[..], S3Code::MalformedXML),
            (b"<Delete><Object></Object></Delete>", S3Code::MalformedXML),
            (
                b"<Delete><Object><Key></Key></Object></Delete>",
                S3Code::InvalidArgument,
            ),
            (
                b"<Delete><Quiet>yes</Quiet><Object><Key>k</Key></Object></Delete>",
                S3Code::MalformedXML,
            ),
            (
                b"<Delete><Object><Key>a&#0;</Key></Object></Delete>",
                S3Code::MalformedXML,
            ),
        ] {
            assert_eq!(
                parse_delete(body).unwrap_err().code,
                code,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let mut body = String::from("<Delete>");
        for i in 0..1001 {
            body.push_str(&format!("<Object><Key>k{i}</Key></Object>"));
        }
        body.push_str("</Delete>");
        assert_eq!(
            parse_delete(body.as_bytes()).unwrap_err().code,
            S3Code::MalformedXML
        );
    }

    #[test]
    fn parse_create_bucket() {
        assert_eq!(parse_create_bucket_configuration(b"").unwrap(), None);
        assert_eq!(
            parse_create_bucket_configuration(b"<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>").unwrap(),
            Some("eu-west-1".into())
        );
        assert_eq!(
            parse_create_bucket_configuration(b"<CreateBucketConfiguration/>").unwrap(),
            None
        );
        assert!(parse_create_bucket_configuration(b"<CreateBucketConfiguration><LocationConstraint>a b</LocationConstraint></CreateBucketConfiguration>").is_err());
        assert!(parse_create_bucket_configuration(b"<Nope/>").is_err());
    }

    #[test]
    fn helpers() {
        assert_eq!(
            iso8601_millis(1_255_369_830_000),
            "2009-10-12T17:50:30.000Z"
        );
        assert_eq!(http_date(1_369_353_600), "Fri, 24 May 2013 00:00:00 GMT");
        assert_eq!(
            parse_http_date("Fri, 24 May 2013 00:00:00 GMT"),
            Some(1_369_353_600)
        );
        assert_eq!(trim_etag(" \"abc\" "), "abc");
        assert_eq!(trim_etag("abc"), "abc");
        assert_eq!(escape("a'\"\r"), "a&apos;&quot;&#13;");
    }
}
