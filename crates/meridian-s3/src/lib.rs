//! Meridian's S3 protocol layer: pure functions and state machines, no I/O.
//!
//! - [`sigv4`]: AWS Signature Version 4 verification (header and presigned URL) and
//!   signing helpers.
//! - [`chunked`]: an incremental decoder for `aws-chunked` bodies with chained chunk
//!   signatures and checksum trailers.
//! - [`checksum`]: `x-amz-checksum-*` and `x-amz-content-sha256` body verification.
//! - [`xml`]: S3's XML response documents and bounded request-body parsers.
//! - [`names`]: bucket and key validation, request parameter parsing.
//! - [`route`]: which operation a request names (method, path and sub-resources).
//! - [`error`]: S3 error codes with their HTTP statuses.
//!
//! Every input is treated as hostile: nothing here panics on request data, every
//! buffer is bounded, and every error is an [`S3Error`] naming the field at fault.

pub mod checksum;
pub mod chunked;
pub mod error;
pub mod names;
pub mod route;
pub mod sigv4;
mod time;
mod uri;
pub mod xml;

pub use checksum::{ChecksumAlgorithm, ChecksumVerifier, Checksummer, ContentSha256Verifier};
pub use chunked::{ChunkSigning, ChunkedConfig, ChunkedDecoder, Trailers};
pub use error::{S3Code, S3Error};
pub use names::{
    CopySource, ListObjectsV2Params, S3Path, validate_bucket_name, validate_object_key,
};
pub use route::{Operation, Target, UNSERVED_SUBRESOURCES, route};
pub use sigv4::{
    AuthKind, Authenticated, Credentials, Header, KeyLookup, PayloadMode, RequestParts,
    SigningParams, auth_kind, presign, sign_request, verify,
};
pub use xml::{http_date, iso8601_millis};
