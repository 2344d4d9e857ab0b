//! S3 error codes and the crate's single error type.
//!
//! Every fallible function in this crate returns [`S3Error`]: an S3 error code (which
//! fixes the HTTP status and the `<Code>` string of the XML error document), a
//! human-readable message that names the offending field, and optionally the resource.
//! Messages never echo secrets (signing keys, secret access keys); they may echo the
//! canonical request or string-to-sign, as S3 itself does, to help client debugging.

use std::fmt;

/// The S3 error codes this layer (and the server on top of it) can answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // Each variant is the S3 code of the same name.
pub enum S3Code {
    AccessDenied,
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    BadDigest,
    BucketAlreadyExists,
    BucketAlreadyOwnedByYou,
    BucketNotEmpty,
    EntityTooLarge,
    EntityTooSmall,
    ExpiredToken,
    IncompleteBody,
    InternalError,
    InvalidAccessKeyId,
    InvalidArgument,
    InvalidBucketName,
    InvalidDigest,
    InvalidPart,
    InvalidPartOrder,
    InvalidRange,
    InvalidRequest,
    KeyTooLongError,
    MalformedXML,
    MaxMessageLengthExceeded,
    MetadataTooLarge,
    MethodNotAllowed,
    MissingContentLength,
    MissingRequestBodyError,
    NoSuchBucket,
    NoSuchKey,
    NoSuchUpload,
    NotImplemented,
    PreconditionFailed,
    RequestTimeTooSkewed,
    ServiceUnavailable,
    SignatureDoesNotMatch,
    SlowDown,
    XAmzContentSHA256Mismatch,
}

impl S3Code {
    /// Every code, for exhaustive tests and tables.
    pub const ALL: [S3Code; 37] = [
        S3Code::AccessDenied,
        S3Code::AuthorizationHeaderMalformed,
        S3Code::AuthorizationQueryParametersError,
        S3Code::BadDigest,
        S3Code::BucketAlreadyExists,
        S3Code::BucketAlreadyOwnedByYou,
        S3Code::BucketNotEmpty,
        S3Code::EntityTooLarge,
        S3Code::EntityTooSmall,
        S3Code::ExpiredToken,
        S3Code::IncompleteBody,
        S3Code::InternalError,
        S3Code::InvalidAccessKeyId,
        S3Code::InvalidArgument,
        S3Code::InvalidBucketName,
        S3Code::InvalidDigest,
        S3Code::InvalidPart,
        S3Code::InvalidPartOrder,
        S3Code::InvalidRange,
        S3Code::InvalidRequest,
        S3Code::KeyTooLongError,
        S3Code::MalformedXML,
        S3Code::MaxMessageLengthExceeded,
        S3Code::MetadataTooLarge,
        S3Code::MethodNotAllowed,
        S3Code::MissingContentLength,
        S3Code::MissingRequestBodyError,
        S3Code::NoSuchBucket,
        S3Code::NoSuchKey,
        S3Code::NoSuchUpload,
        S3Code::NotImplemented,
        S3Code::PreconditionFailed,
        S3Code::RequestTimeTooSkewed,
        S3Code::ServiceUnavailable,
        S3Code::SignatureDoesNotMatch,
        S3Code::SlowDown,
        S3Code::XAmzContentSHA256Mismatch,
    ];

    /// The `<Code>` string S3 sends.
    pub fn as_str(self) -> &'static str {
        match self {
            S3Code::AccessDenied => "AccessDenied",
            S3Code::AuthorizationHeaderMalformed => "AuthorizationHeaderMalformed",
            S3Code::AuthorizationQueryParametersError => "AuthorizationQueryParametersError",
            S3Code::BadDigest => "BadDigest",
            S3Code::BucketAlreadyExists => "BucketAlreadyExists",
            S3Code::BucketAlreadyOwnedByYou => "BucketAlreadyOwnedByYou",
            S3Code::BucketNotEmpty => "BucketNotEmpty",
            S3Code::EntityTooLarge => "EntityTooLarge",
            S3Code::EntityTooSmall => "EntityTooSmall",
            S3Code::ExpiredToken => "ExpiredToken",
            S3Code::IncompleteBody => "IncompleteBody",
            S3Code::InternalError => "InternalError",
            S3Code::InvalidAccessKeyId => "InvalidAccessKeyId",
            S3Code::InvalidArgument => "InvalidArgument",
            S3Code::InvalidBucketName => "InvalidBucketName",
            S3Code::InvalidDigest => "InvalidDigest",
            S3Code::InvalidPart => "InvalidPart",
            S3Code::InvalidPartOrder => "InvalidPartOrder",
            S3Code::InvalidRange => "InvalidRange",
            S3Code::InvalidRequest => "InvalidRequest",
            S3Code::KeyTooLongError => "KeyTooLongError",
            S3Code::MalformedXML => "MalformedXML",
            S3Code::MaxMessageLengthExceeded => "MaxMessageLengthExceeded",
            S3Code::MetadataTooLarge => "MetadataTooLarge",
            S3Code::MethodNotAllowed => "MethodNotAllowed",
            S3Code::MissingContentLength => "MissingContentLength",
            S3Code::MissingRequestBodyError => "MissingRequestBodyError",
            S3Code::NoSuchBucket => "NoSuchBucket",
            S3Code::NoSuchKey => "NoSuchKey",
            S3Code::NoSuchUpload => "NoSuchUpload",
            S3Code::NotImplemented => "NotImplemented",
            S3Code::PreconditionFailed => "PreconditionFailed",
            S3Code::RequestTimeTooSkewed => "RequestTimeTooSkewed",
            S3Code::ServiceUnavailable => "ServiceUnavailable",
            S3Code::SignatureDoesNotMatch => "SignatureDoesNotMatch",
            S3Code::SlowDown => "SlowDown",
            S3Code::XAmzContentSHA256Mismatch => "XAmzContentSHA256Mismatch",
        }
    }

    /// The HTTP status S3 answers this code with.
    pub fn http_status(self) -> u16 {
        match self {
            S3Code::AccessDenied
            | S3Code::InvalidAccessKeyId
            | S3Code::RequestTimeTooSkewed
            | S3Code::SignatureDoesNotMatch => 403,
            S3Code::AuthorizationHeaderMalformed
            | S3Code::AuthorizationQueryParametersError
            | S3Code::BadDigest
            | S3Code::EntityTooLarge
            | S3Code::EntityTooSmall
            | S3Code::ExpiredToken
            | S3Code::IncompleteBody
            | S3Code::InvalidArgument
            | S3Code::InvalidBucketName
            | S3Code::InvalidDigest
            | S3Code::InvalidPart
            | S3Code::InvalidPartOrder
            | S3Code::InvalidRequest
            | S3Code::KeyTooLongError
            | S3Code::MalformedXML
            | S3Code::MaxMessageLengthExceeded
            | S3Code::MetadataTooLarge
            | S3Code::MissingRequestBodyError
            | S3Code::XAmzContentSHA256Mismatch => 400,
            S3Code::NoSuchBucket | S3Code::NoSuchKey | S3Code::NoSuchUpload => 404,
            S3Code::MethodNotAllowed => 405,
            S3Code::BucketAlreadyExists
            | S3Code::BucketAlreadyOwnedByYou
            | S3Code::BucketNotEmpty => 409,
            S3Code::MissingContentLength => 411,
            S3Code::PreconditionFailed => 412,
            S3Code::InvalidRange => 416,
            S3Code::InternalError => 500,
            S3Code::NotImplemented => 501,
            S3Code::ServiceUnavailable | S3Code::SlowDown => 503,
        }
    }

    /// S3's stock message for the code, used when no more specific one is given.
    pub fn default_message(self) -> &'static str {
        match self {
            S3Code::AccessDenied => "Access Denied",
            S3Code::AuthorizationHeaderMalformed => "The authorization header is malformed.",
            S3Code::AuthorizationQueryParametersError => {
                "The authorization query parameters are malformed."
            }
            S3Code::BadDigest => {
                "The Content-MD5 or checksum you specified did not match what we received."
            }
            S3Code::BucketAlreadyExists => "The requested bucket name is not available.",
            S3Code::BucketAlreadyOwnedByYou => {
                "Your previous request to create the named bucket succeeded and you already own it."
            }
            S3Code::BucketNotEmpty => "The bucket you tried to delete is not empty.",
            S3Code::EntityTooLarge => "Your proposed upload exceeds the maximum allowed size.",
            S3Code::EntityTooSmall => {
                "Your proposed upload is smaller than the minimum allowed object size."
            }
            S3Code::ExpiredToken => "The provided token has expired.",
            S3Code::IncompleteBody => {
                "You did not provide the number of bytes specified by the Content-Length HTTP header."
            }
            S3Code::InternalError => "We encountered an internal error. Please try again.",
            S3Code::InvalidAccessKeyId => {
                "The AWS access key Id you provided does not exist in our records."
            }
            S3Code::InvalidArgument => "Invalid Argument",
            S3Code::InvalidBucketName => "The specified bucket is not valid.",
            S3Code::InvalidDigest => "The Content-MD5 or checksum you specified is not valid.",
            S3Code::InvalidPart => {
                "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag."
            }
            S3Code::InvalidPartOrder => {
                "The list of parts was not in ascending order. The parts list must be specified in order by part number."
            }
            S3Code::InvalidRange => "The requested range is not satisfiable",
            S3Code::InvalidRequest => "Invalid Request",
            S3Code::KeyTooLongError => "Your key is too long",
            S3Code::MalformedXML => {
                "The XML you provided was not well-formed or did not validate against our published schema."
            }
            S3Code::MaxMessageLengthExceeded => "Your request was too big.",
            S3Code::MetadataTooLarge => {
                "Your metadata headers exceed the maximum allowed metadata size."
            }
            S3Code::MethodNotAllowed => {
                "The specified method is not allowed against this resource."
            }
            S3Code::MissingContentLength => "You must provide the Content-Length HTTP header.",
            S3Code::MissingRequestBodyError => "Request Body is empty",
            S3Code::NoSuchBucket => "The specified bucket does not exist",
            S3Code::NoSuchKey => "The specified key does not exist.",
            S3Code::NoSuchUpload => {
                "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed."
            }
            S3Code::NotImplemented => {
                "A header you provided implies functionality that is not implemented."
            }
            S3Code::PreconditionFailed => {
                "At least one of the pre-conditions you specified did not hold"
            }
            S3Code::RequestTimeTooSkewed => {
                "The difference between the request time and the current time is too large."
            }
            S3Code::ServiceUnavailable => "Please reduce your request rate.",
            S3Code::SignatureDoesNotMatch => {
                "The request signature we calculated does not match the signature you provided. Check your key and signing method."
            }
            S3Code::SlowDown => "Please reduce your request rate.",
            S3Code::XAmzContentSHA256Mismatch => {
                "The provided 'x-amz-content-sha256' header does not match what was computed."
            }
        }
    }
}

impl fmt::Display for S3Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The crate's error: an S3 code, a message naming the field at fault, and optionally the
/// resource (bucket or key path) it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct S3Error {
    /// The S3 error code (fixes the HTTP status).
    pub code: S3Code,
    /// A human-readable message; names the offending field or header.
    pub message: String,
    /// The resource the error concerns (`/bucket/key`), if known.
    pub resource: Option<String>,
}

impl S3Error {
    /// An error with the given code and message.
    pub fn new(code: S3Code, message: impl Into<String>) -> Self {
        S3Error {
            code,
            message: message.into(),
            resource: None,
        }
    }

    /// An error with the code's stock message.
    pub fn from_code(code: S3Code) -> Self {
        S3Error::new(code, code.default_message())
    }

    /// Attaches the resource the error concerns.
    pub fn with_resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// The HTTP status to answer with.
    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }

    pub(crate) fn access_denied(msg: impl Into<String>) -> Self {
        S3Error::new(S3Code::AccessDenied, msg)
    }
    pub(crate) fn malformed_auth(msg: impl Into<String>) -> Self {
        S3Error::new(S3Code::AuthorizationHeaderMalformed, msg)
    }
    pub(crate) fn query_auth(msg: impl Into<String>) -> Self {
        S3Error::new(S3Code::AuthorizationQueryParametersError, msg)
    }
    pub(crate) fn invalid_argument(msg: impl Into<String>) -> Self {
        S3Error::new(S3Code::InvalidArgument, msg)
    }
    pub(crate) fn invalid_request(msg: impl Into<String>) -> Self {
        S3Error::new(S3Code::InvalidRequest, msg)
    }
    pub(crate) fn incomplete_body(msg: impl Into<String>) -> Self {
        S3Error::new(S3Code::IncompleteBody, msg)
    }
    pub(crate) fn malformed_xml(msg: impl Into<String>) -> Self {
        S3Error::new(S3Code::MalformedXML, msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_statuses() {
        let mut seen = std::collections::HashSet::new();
        for code in S3Code::ALL {
            assert!(seen.insert(code.as_str()), "duplicate {code}");
            assert_eq!(format!("{code:?}"), code.as_str());
            let s = code.http_status();
            assert!((400..=599).contains(&s));
            assert!(!code.default_message().is_empty());
        }
        assert_eq!(S3Code::NoSuchKey.http_status(), 404);
        assert_eq!(S3Code::SignatureDoesNotMatch.http_status(), 403);
        assert_eq!(S3Code::InvalidRange.http_status(), 416);
        assert_eq!(S3Code::SlowDown.http_status(), 503);
        assert_eq!(S3Code::MissingContentLength.http_status(), 411);
        assert_eq!(S3Code::BucketNotEmpty.http_status(), 409);
    }

    #[test]
    fn display_and_resource() {
        let e = S3Error::new(S3Code::NoSuchKey, "key a/b").with_resource("/b/a/b");
        assert_eq!(e.to_string(), "NoSuchKey: key a/b");
        assert_eq!(e.resource.as_deref(), Some("/b/a/b"));
        assert_eq!(
            S3Error::from_code(S3Code::AccessDenied).message,
            "Access Denied"
        );
    }
}
