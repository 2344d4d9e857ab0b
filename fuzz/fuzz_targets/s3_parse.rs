//! Fuzzes the S3 request-parsing functions the endpoint runs on every request's pieces:
//! path-style paths, query strings, ListObjectsV2 parameters, continuation tokens,
//! `x-amz-copy-source`, part numbers and upload ids, user metadata headers, `Range`, HTTP
//! dates, bucket and key names, operation routing, and the XML request bodies
//! (CompleteMultipartUpload, DeleteObjects, CreateBucketConfiguration).
//!
//! Properties: no panic; a parsed path names a valid bucket and key; continuation tokens
//! round-trip; a parsed range resolves inside any object it is satisfiable in; a parsed
//! HTTP date formats back to a date that parses to the same instant.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use meridian_blob::range::parse_range;
use meridian_s3::{names, xml};

#[derive(Debug, Arbitrary)]
struct Input {
    path: String,
    query: Option<String>,
    method: String,
    header: String,
    raw_header: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
    size: u64,
    body: Vec<u8>,
}

fn paths(input: &Input) {
    if let Ok(p) = names::parse_path_style(&input.path) {
        match &p {
            names::S3Path::Root => {}
            names::S3Path::Bucket(b) => assert!(names::validate_bucket_name(b).is_ok()),
            names::S3Path::Object { bucket, key } => {
                assert!(names::validate_bucket_name(bucket).is_ok());
                assert!(names::validate_object_key(key).is_ok());
            }
        }
        if let Ok(q) = names::parse_query(input.query.as_deref()) {
            let copy = !input.raw_header.is_empty();
            let _ = meridian_s3::route(&input.method, meridian_s3::Target::of(&p), &q, copy);
        }
    }
    let _ = names::parse_list_objects_v2(input.query.as_deref());
}

fn headers(input: &Input) {
    let h = &input.header;
    if let Ok(key) = names::continuation_token_decode(h) {
        assert_eq!(
            names::continuation_token_decode(&names::continuation_token_encode(&key)).ok(),
            Some(key)
        );
    }
    if names::validate_object_key(h).is_ok() {
        let token = names::continuation_token_encode(h);
        assert_eq!(
            names::continuation_token_decode(&token).ok().as_deref(),
            Some(h.as_str())
        );
    }
    let _ = names::parse_copy_source(&input.raw_header);
    let _ = names::parse_part_number(h);
    let _ = names::parse_upload_id(h);
    let list: Vec<(&str, &[u8])> = input
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), &v[..]))
        .collect();
    let _ = names::collect_user_metadata(&list);
    if let Some(spec) = parse_range(h)
        && let Ok((first, last)) = spec.resolve(input.size)
    {
        assert!(
            first <= last && last < input.size,
            "{spec:?} in {} gave {first}-{last}",
            input.size
        );
    }
    if let Some(t) = xml::parse_http_date(h)
        && let Ok(secs) = u64::try_from(t)
    {
        assert_eq!(xml::parse_http_date(&xml::http_date(secs)), Some(t), "{h}");
    }
}

fn bodies(input: &Input) {
    let _ = xml::parse_complete_multipart_upload(&input.body);
    let _ = xml::parse_delete(&input.body);
    let _ = xml::parse_create_bucket_configuration(&input.body);
}

fuzz_target!(|input: Input| {
    paths(&input);
    headers(&input);
    bodies(&input);
});
