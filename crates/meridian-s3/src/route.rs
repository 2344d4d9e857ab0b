//! Request routing: which S3 operation a request names, decided from its method, what its
//! path addresses and its query string's sub-resources, in one pure table.
//!
//! Guarantees:
//! - a request naming a sub-resource S3 defines but Meridian does not serve
//!   ([`UNSERVED_SUBRESOURCES`]: `?acl`, `?tagging`, `?retention`, …) is answered
//!   `501 NotImplemented` naming it, whatever its method: it never falls through to the
//!   plain object or bucket operation (a `PUT /b/k?acl` never replaces the object, a
//!   `DELETE /b?cors` never deletes the bucket);
//! - a served sub-resource sent with a method or to a resource it does not apply to
//!   (`PUT /b?uploads`, `DELETE /b/k?partNumber=1`) is `405 MethodNotAllowed`;
//! - a `versionId` other than `null` is `400 InvalidArgument` ("Invalid version id
//!   specified"), what S3 answers on a bucket without versioning (every Meridian bucket):
//!   it never reads, overwrites or deletes the current object in its place;
//! - any other query parameter (`response-content-type`, `x-id`, `list-type`, …) is left to
//!   the operation, as before.

use crate::error::{S3Code, S3Error};
use crate::names::S3Path;

/// What a request's path addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `/`.
    Service,
    /// `/bucket`.
    Bucket,
    /// `/bucket/key`.
    Object,
}

impl Target {
    /// The target of a parsed path.
    pub fn of(path: &S3Path) -> Target {
        match path {
            S3Path::Root => Target::Service,
            S3Path::Bucket(_) => Target::Bucket,
            S3Path::Object { .. } => Target::Object,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Target::Service => "service",
            Target::Bucket => "bucket",
            Target::Object => "object",
        }
    }
}

/// The operations Meridian's S3 endpoint serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `GET /`.
    ListBuckets,
    /// `PUT /b`.
    CreateBucket,
    /// `HEAD /b`.
    HeadBucket,
    /// `DELETE /b`.
    DeleteBucket,
    /// `GET /b?location`.
    GetBucketLocation,
    /// `GET /b?uploads`.
    ListMultipartUploads,
    /// `GET /b?list-type=2`.
    ListObjectsV2,
    /// `GET /b` without `list-type=2` (answered `NotImplemented` by the endpoint).
    ListObjectsV1,
    /// `POST /b?delete`.
    DeleteObjects,
    /// `GET /b/k`.
    GetObject,
    /// `HEAD /b/k`.
    HeadObject,
    /// `PUT /b/k`.
    PutObject,
    /// `PUT /b/k` with `x-amz-copy-source`.
    CopyObject,
    /// `PUT /b/k?partNumber&uploadId`.
    UploadPart,
    /// `PUT /b/k?partNumber&uploadId` with `x-amz-copy-source`.
    UploadPartCopy,
    /// `DELETE /b/k`.
    DeleteObject,
    /// `DELETE /b/k?uploadId`.
    AbortMultipartUpload,
    /// `POST /b/k?uploads`.
    CreateMultipartUpload,
    /// `POST /b/k?uploadId`.
    CompleteMultipartUpload,
    /// `GET`/`HEAD /b/k?uploadId`.
    ListParts,
}

/// Sub-resources S3 defines for buckets and objects that Meridian does not serve. A request
/// naming any of them is refused before it touches anything.
pub const UNSERVED_SUBRESOURCES: &[&str] = &[
    "abac",
    "accelerate",
    "acl",
    "analytics",
    "attributes",
    "cors",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "logging",
    "metadataConfiguration",
    "metadataInventoryTable",
    "metadataJournalTable",
    "metadataTable",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "renameObject",
    "replication",
    "requestPayment",
    "restore",
    "retention",
    "select",
    "select-type",
    "session",
    "tagging",
    "torrent",
    "versioning",
    "versions",
    "website",
];

/// Sub-resources Meridian serves (each for some methods and targets only).
const SERVED_SUBRESOURCES: &[&str] = &["delete", "location", "partNumber", "uploadId", "uploads"];

/// The operation a request names, or the error that refuses it (see the module docs).
/// `query` is the decoded query string, `copy_source` whether `x-amz-copy-source` is set.
pub fn route(
    method: &str,
    target: Target,
    query: &[(String, String)],
    copy_source: bool,
) -> Result<Operation, S3Error> {
    let has = |name: &str| query.iter().any(|(n, _)| n == name);
    if let Some(sub) = UNSERVED_SUBRESOURCES.iter().find(|s| has(s)) {
        return Err(unserved(target, sub));
    }
    check_version_id(query)?;
    let served: Vec<&str> = SERVED_SUBRESOURCES
        .iter()
        .copied()
        .filter(|s| has(s))
        .collect();
    let only = |allowed: &[&str]| served.iter().all(|s| allowed.contains(s));
    let op = match (target, method) {
        (Target::Service, "GET") if served.is_empty() => Operation::ListBuckets,
        (Target::Bucket, "PUT") if served.is_empty() => Operation::CreateBucket,
        (Target::Bucket, "HEAD") if served.is_empty() => Operation::HeadBucket,
        (Target::Bucket, "DELETE") if served.is_empty() => Operation::DeleteBucket,
        (Target::Bucket, "POST") if has("delete") && only(&["delete"]) => Operation::DeleteObjects,
        (Target::Bucket, "GET") => bucket_get(query, &served)?,
        (Target::Object, "GET" | "HEAD") => object_read(method, &served)?,
        (Target::Object, "PUT") => object_put(&served, copy_source)?,
        (Target::Object, "DELETE") if served.is_empty() => Operation::DeleteObject,
        (Target::Object, "DELETE") if has("uploadId") && only(&["uploadId"]) => {
            Operation::AbortMultipartUpload
        }
        (Target::Object, "POST") if has("uploads") && only(&["uploads"]) => {
            Operation::CreateMultipartUpload
        }
        (Target::Object, "POST") if has("uploadId") && only(&["uploadId"]) => {
            Operation::CompleteMultipartUpload
        }
        _ => return Err(not_allowed(method, target, &served)),
    };
    Ok(op)
}

fn bucket_get(query: &[(String, String)], served: &[&str]) -> Result<Operation, S3Error> {
    match served {
        [] => {
            let v2 = query.iter().any(|(n, v)| n == "list-type" && v == "2");
            Ok(if v2 {
                Operation::ListObjectsV2
            } else {
                Operation::ListObjectsV1
            })
        }
        ["location"] => Ok(Operation::GetBucketLocation),
        ["uploads"] => Ok(Operation::ListMultipartUploads),
        _ => Err(not_allowed("GET", Target::Bucket, served)),
    }
}

fn object_read(method: &str, served: &[&str]) -> Result<Operation, S3Error> {
    match served {
        [] if method == "HEAD" => Ok(Operation::HeadObject),
        [] => Ok(Operation::GetObject),
        ["uploadId"] => Ok(Operation::ListParts),
        ["partNumber"] => Err(S3Error::new(
            S3Code::NotImplemented,
            "object sub-resource 'partNumber' on GET/HEAD (reading one part of an object) is \
             not supported by Meridian's S3 endpoint: read a byte Range instead",
        )),
        _ => Err(not_allowed(method, Target::Object, served)),
    }
}

fn object_put(served: &[&str], copy_source: bool) -> Result<Operation, S3Error> {
    match (served, copy_source) {
        ([], false) => Ok(Operation::PutObject),
        ([], true) => Ok(Operation::CopyObject),
        (s, copy) if s.iter().all(|x| *x == "uploadId" || *x == "partNumber") => Ok(if copy {
            Operation::UploadPartCopy
        } else {
            Operation::UploadPart
        }),
        _ => Err(not_allowed("PUT", Target::Object, served)),
    }
}

/// `versionId` may only name the null version: Meridian's buckets are never versioned.
fn check_version_id(query: &[(String, String)]) -> Result<(), S3Error> {
    match query.iter().find(|(n, _)| n == "versionId") {
        Some((_, v)) if v != "null" => Err(S3Error::new(
            S3Code::InvalidArgument,
            "Invalid version id specified: versionId must be 'null' (Meridian's buckets are \
             not versioned)",
        )),
        _ => Ok(()),
    }
}

fn unserved(target: Target, sub: &str) -> S3Error {
    S3Error::new(
        S3Code::NotImplemented,
        format!(
            "{} sub-resource '{sub}' is not supported by Meridian's S3 endpoint; the request \
             changed nothing",
            target.noun()
        ),
    )
}

fn not_allowed(method: &str, target: Target, served: &[&str]) -> S3Error {
    let what = if served.is_empty() {
        String::new()
    } else {
        format!(" with sub-resource '{}'", served.join("', '"))
    };
    S3Error::new(
        S3Code::MethodNotAllowed,
        format!(
            "The specified method is not allowed against this resource: {method} on a {}{what}",
            target.noun()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const METHODS: [&str; 5] = ["GET", "PUT", "DELETE", "POST", "HEAD"];

    fn q(s: &str) -> Vec<(String, String)> {
        crate::names::parse_query(Some(s)).unwrap()
    }

    fn op(method: &str, target: Target, query: &str) -> Result<Operation, S3Code> {
        route(method, target, &q(query), false).map_err(|e| e.code)
    }

    #[test]
    fn every_unserved_subresource_is_not_implemented_for_every_method_and_target() {
        for sub in UNSERVED_SUBRESOURCES {
            for target in [Target::Service, Target::Bucket, Target::Object] {
                for m in METHODS {
                    for query in [sub.to_string(), format!("{sub}="), format!("x-id=A&{sub}")] {
                        let e = route(m, target, &q(&query), false).unwrap_err();
                        assert_eq!(e.code, S3Code::NotImplemented, "{m} {target:?} ?{query}");
                        assert!(e.message.contains(&format!("'{sub}'")), "{}", e.message);
                    }
                }
            }
        }
    }

    #[test]
    fn the_served_operations_route_as_before() {
        use Operation::*;
        let b = Target::Bucket;
        let o = Target::Object;
        assert_eq!(op("GET", Target::Service, ""), Ok(ListBuckets));
        assert_eq!(op("PUT", b, ""), Ok(CreateBucket));
        assert_eq!(op("HEAD", b, ""), Ok(HeadBucket));
        assert_eq!(op("DELETE", b, ""), Ok(DeleteBucket));
        assert_eq!(op("GET", b, "location"), Ok(GetBucketLocation));
        assert_eq!(op("GET", b, "uploads&prefix=a"), Ok(ListMultipartUploads));
        assert_eq!(op("GET", b, "list-type=2&prefix=a"), Ok(ListObjectsV2));
        assert_eq!(op("GET", b, "prefix=a"), Ok(ListObjectsV1));
        assert_eq!(op("POST", b, "delete"), Ok(DeleteObjects));
        assert_eq!(
            op("GET", o, "response-content-type=a%2Fb&x-id=GetObject"),
            Ok(GetObject)
        );
        assert_eq!(op("HEAD", o, "versionId=null"), Ok(HeadObject));
        assert_eq!(op("PUT", o, "x-id=PutObject"), Ok(PutObject));
        assert_eq!(op("PUT", o, "partNumber=1&uploadId=x"), Ok(UploadPart));
        assert_eq!(op("DELETE", o, ""), Ok(DeleteObject));
        assert_eq!(op("DELETE", o, "uploadId=x"), Ok(AbortMultipartUpload));
        assert_eq!(op("POST", o, "uploads"), Ok(CreateMultipartUpload));
        assert_eq!(op("POST", o, "uploadId=x"), Ok(CompleteMultipartUpload));
        assert_eq!(op("GET", o, "uploadId=x&max-parts=5"), Ok(ListParts));
        let copy = |query: &str| route("PUT", o, &q(query), true).unwrap();
        assert_eq!(copy(""), CopyObject);
        assert_eq!(copy("partNumber=1&uploadId=x"), UploadPartCopy);
    }

    #[test]
    fn a_served_subresource_in_the_wrong_place_is_not_allowed() {
        let b = Target::Bucket;
        let o = Target::Object;
        for (m, t, query) in [
            ("PUT", b, "uploads"),
            ("PUT", b, "location"),
            ("DELETE", b, "delete"),
            ("DELETE", b, "uploads"),
            ("HEAD", b, "location"),
            ("GET", b, "delete"),
            ("POST", b, ""),
            ("PUT", o, "uploads"),
            ("PUT", o, "delete"),
            ("DELETE", o, "uploads"),
            ("DELETE", o, "partNumber=1"),
            ("POST", o, ""),
            ("POST", o, "uploads&uploadId=x"),
            ("GET", o, "location"),
            ("PUT", Target::Service, ""),
            ("GET", Target::Service, "uploads"),
            ("PATCH", o, ""),
        ] {
            assert_eq!(
                op(m, t, query),
                Err(S3Code::MethodNotAllowed),
                "{m} {t:?} ?{query}"
            );
        }
        assert_eq!(op("GET", o, "partNumber=1"), Err(S3Code::NotImplemented));
    }

    #[test]
    fn a_version_id_other_than_null_is_refused_everywhere() {
        for m in METHODS {
            for t in [Target::Bucket, Target::Object] {
                assert_eq!(
                    op(m, t, "versionId=3HL4kqtJlcpXroDTDmJ"),
                    Err(S3Code::InvalidArgument)
                );
                assert_eq!(op(m, t, "versionId="), Err(S3Code::InvalidArgument));
            }
        }
        assert_eq!(
            op("DELETE", Target::Object, "versionId=null"),
            Ok(Operation::DeleteObject)
        );
    }

    #[test]
    fn subresource_names_are_case_sensitive_and_exact() {
        assert_eq!(op("PUT", Target::Object, "ACL"), Ok(Operation::PutObject));
        assert_eq!(op("PUT", Target::Object, "acls"), Ok(Operation::PutObject));
        assert_eq!(
            op("PUT", Target::Object, "%61cl"),
            Err(S3Code::NotImplemented),
            "a percent-encoded name is decoded first"
        );
    }
}
