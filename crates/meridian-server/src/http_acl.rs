//! Users on the HTTP API and the S3 endpoint: who a request acts as, and the Redis command it
//! counts as for the ACL check, so one set of users (`resp.users`, `resp.aclfile`,
//! `requirepass`; [`crate::resp::acl::Users`]) governs every front end.
//!
//! Who (HTTP): `Authorization: Basic base64(user:password)` is that user;
//! `Authorization: Bearer <password>` is the `default` user with that password (what
//! `requirepass` clients send); no header is the `default` user while it needs no password.
//! S3: a request signed with an access key that `s3.users` maps to a user is that user; other
//! keys keep the endpoint's full access.
//!
//! What it counts as:
//!
//! | request | checked as |
//! |---|---|
//! | `GET`/`HEAD /kv/{key}`, `PUT`, `DELETE` | `GET key`, `SET key`, `DEL key` |
//! | `/b/{bucket}/{key}`: `GET`/`HEAD`, `PUT`/`POST`, `DELETE` | `GET`, `SET`, `DEL` of `bucket:key` |
//! | `POST /txn` | `EXEC`, then each operation as `GET`/`SET`/`DEL` of its key |
//! | an admin change (membership, buckets, WAN, service model, force-master) | `CONFIG SET` |
//! | any other read (`/status`, `/cluster`, `/buckets`, `/balance`, `/wan`) | `INFO` |
//! | S3 `GetObject`, `HeadObject`, `ListParts`; `CopyObject`'s source | `GET bucket:key` |
//! | S3 `PutObject`, `CopyObject`, uploads and their parts | `SET bucket:key` |
//! | S3 `DeleteObject`; each key of `DeleteObjects` | `DEL bucket:key` |
//! | S3 listings, `HeadBucket`, `GetBucketLocation` | `SCAN` |
//! | S3 `CreateBucket`, `DeleteBucket` | `CONFIG SET` |
//!
//! A refusal carries Redis's `NOPERM …` text (HTTP 403 `NOPERM`, S3 `AccessDenied`); a
//! disabled or deleted user is refused like a wrong password.

use crate::resp::acl::{SessionUser, Users};
use axum::http::{HeaderMap, Method, header};
use base64::Engine as _;
use meridian_redis::acl::Request;
use meridian_redis::{Cmd, OwnedArgs};
use meridian_s3::Operation;
use meridian_s3::names::S3Path;

/// A request as the Redis command it amounts to: the name (and subcommand), then keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AsCommand {
    parts: Vec<Vec<u8>>,
}

impl AsCommand {
    /// `words` (command, subcommand) with no key.
    pub(crate) fn keyless(words: &[&str]) -> Self {
        Self {
            parts: words.iter().map(|w| w.as_bytes().to_vec()).collect(),
        }
    }

    /// `name key`.
    pub(crate) fn on_key(name: &str, key: &[u8]) -> Self {
        Self {
            parts: vec![name.as_bytes().to_vec(), key.to_vec()],
        }
    }

    /// `name bucket:key`: how an object of a bucket is named in the key space.
    pub(crate) fn on_object(name: &str, bucket: &str, key: &[u8]) -> Self {
        let mut full = Vec::with_capacity(bucket.len() + 1 + key.len());
        full.extend_from_slice(bucket.as_bytes());
        full.push(b':');
        full.extend_from_slice(key);
        Self::on_key(name, &full)
    }

    /// Whether `user` may run it; `Err` is Redis's `NOPERM …` text.
    pub(crate) fn check(&self, user: &mut SessionUser) -> Result<(), String> {
        let owned = OwnedArgs::from_slices(self.parts.iter().map(Vec::as_slice));
        let args = owned.get();
        let cmd = Cmd::lookup(args.get(0)).expect("front ends name known commands");
        let request = Request::new(cmd, args);
        let Some(u) = user.current() else {
            return Err(disabled());
        };
        if !u.enabled() {
            return Err(disabled());
        }
        u.check(&request).map_err(|d| d.error(&request))
    }
}

fn disabled() -> String {
    "NOPERM the user is disabled or was deleted".into()
}

/// What the HTTP API's `method path` counts as before its handler runs; `None` for the open
/// routes (`/health`, `/metrics`) and for a path whose key does not decode (the handler
/// refuses it with 400). `/txn`'s keys are checked by its handler.
pub(crate) fn http_request(method: &Method, path: &str, admin: bool) -> Option<AsCommand> {
    let read = method == Method::GET || method == Method::HEAD;
    let verb = if read {
        "GET"
    } else if method == Method::DELETE {
        "DEL"
    } else {
        "SET"
    };
    if let Some(raw) = path.strip_prefix("/kv/") {
        let key = crate::percent::decode(raw.as_bytes())?;
        return Some(AsCommand::on_key(verb, &key));
    }
    if let Some(raw) = path.strip_prefix("/b/") {
        let (bucket, key) = raw.split_once('/')?;
        let bucket = String::from_utf8(crate::percent::decode(bucket.as_bytes())?).ok()?;
        let key = crate::percent::decode(key.as_bytes())?;
        return Some(AsCommand::on_object(verb, &bucket, &key));
    }
    Some(match path {
        "/health" | "/metrics" => return None,
        "/txn" => AsCommand::keyless(&["EXEC"]),
        _ if admin => AsCommand::keyless(&["CONFIG", "SET"]),
        _ => AsCommand::keyless(&["INFO"]),
    })
}

/// What S3 operation `op` on `path` counts as.
pub(crate) fn s3_request(op: Operation, path: &S3Path) -> AsCommand {
    use Operation as O;
    let verb = match op {
        O::GetObject | O::HeadObject | O::ListParts => "GET",
        O::PutObject
        | O::CopyObject
        | O::UploadPart
        | O::UploadPartCopy
        | O::CreateMultipartUpload
        | O::CompleteMultipartUpload
        | O::AbortMultipartUpload => "SET",
        O::DeleteObject => "DEL",
        O::CreateBucket | O::DeleteBucket => return AsCommand::keyless(&["CONFIG", "SET"]),
        // Listings, bucket probes, and DeleteObjects (whose keys its handler checks).
        O::ListBuckets
        | O::HeadBucket
        | O::GetBucketLocation
        | O::ListMultipartUploads
        | O::ListObjectsV2
        | O::ListObjectsV1
        | O::DeleteObjects => return AsCommand::keyless(&["SCAN"]),
    };
    match path {
        S3Path::Object { bucket, key } => AsCommand::on_object(verb, bucket, key.as_bytes()),
        // An object operation routed without a key does not happen; count it as a listing.
        S3Path::Root | S3Path::Bucket(_) => AsCommand::keyless(&["SCAN"]),
    }
}

/// The credentials an HTTP request carries.
enum Credentials {
    None,
    Bearer(Vec<u8>),
    Basic { user: Vec<u8>, password: Vec<u8> },
    Malformed,
}

fn credentials(headers: &HeaderMap) -> Credentials {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Credentials::None;
    };
    let v = value.as_bytes();
    if let Some(token) = v.strip_prefix(b"Bearer ") {
        return Credentials::Bearer(token.to_vec());
    }
    let Some(encoded) = v.strip_prefix(b"Basic ") else {
        return Credentials::Malformed;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim_ascii()) else {
        return Credentials::Malformed;
    };
    match decoded.iter().position(|&b| b == b':') {
        Some(at) => Credentials::Basic {
            user: decoded[..at].to_vec(),
            password: decoded[at + 1..].to_vec(),
        },
        None => Credentials::Malformed,
    }
}

/// The user an HTTP request acts as, or `None` when its credentials fail (or it has none
/// and the `default` user needs a password).
pub(crate) fn authenticate(users: &Users, headers: &HeaderMap) -> Option<SessionUser> {
    match credentials(headers) {
        Credentials::None => users
            .default_needs_no_auth()
            .then(|| users.default_session()),
        // A bearer is the default user's password; one sent to a node whose default user
        // takes none is accepted, as HTTP clients configured with a password always send it.
        Credentials::Bearer(_) if users.default_needs_no_auth() => Some(users.default_session()),
        Credentials::Bearer(pass) => users.authenticate(b"default", &pass),
        Credentials::Basic { user, password } => users.authenticate(&user, &password),
        Credentials::Malformed => None,
    }
}

/// Whether `user` got in without a password (a `nopass` user): admin changes from beyond
/// loopback need a real credential.
pub(crate) fn without_password(user: &mut SessionUser) -> bool {
    user.current().is_none_or(|u| u.nopass())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::acl::AclConfig;

    fn users(lines: &[&str], requirepass: Option<&str>) -> Users {
        let config = AclConfig {
            users: lines.iter().map(|l| l.to_string()).collect(),
            ..AclConfig::default()
        };
        Users::new(&config, requirepass).unwrap()
    }

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, auth.parse().unwrap());
        h
    }

    fn basic(user: &str, pass: &str) -> HeaderMap {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        headers(&format!("Basic {token}"))
    }

    #[test]
    fn credentials_name_the_user_or_the_default_one() {
        let u = users(&["user app on >apppass ~app:* +get"], Some("secret"));
        assert!(
            authenticate(&u, &HeaderMap::new()).is_none(),
            "a password is needed"
        );
        let def = authenticate(&u, &headers("Bearer secret")).unwrap();
        assert_eq!(def.name(), b"default");
        assert!(authenticate(&u, &headers("Bearer wrong")).is_none());
        let app = authenticate(&u, &basic("app", "apppass")).unwrap();
        assert_eq!(app.name(), b"app");
        assert!(authenticate(&u, &basic("app", "secret")).is_none());
        assert!(authenticate(&u, &basic("nobody", "x")).is_none());
        for bad in ["Basic !!!", "Basic YXBw", "Digest x", "Bearer"] {
            assert!(authenticate(&u, &headers(bad)).is_none(), "{bad}");
        }
        // Without a password the default user needs no header, and a bearer is accepted.
        let open = users(&[], None);
        assert!(authenticate(&open, &HeaderMap::new()).is_some());
        assert!(authenticate(&open, &headers("Bearer anything")).is_some());
    }

    #[test]
    fn routes_count_as_the_commands_they_amount_to() {
        let get = Method::GET;
        let put = Method::PUT;
        assert_eq!(
            http_request(&get, "/kv/app%3A1", false),
            Some(AsCommand::on_key("GET", b"app:1"))
        );
        assert_eq!(
            http_request(&Method::DELETE, "/kv/k", false),
            Some(AsCommand::on_key("DEL", b"k"))
        );
        assert_eq!(
            http_request(&put, "/b/photos/a/b.jpg", false),
            Some(AsCommand::on_key("SET", b"photos:a/b.jpg"))
        );
        assert_eq!(http_request(&get, "/kv/bad%zz", false), None);
        assert_eq!(http_request(&get, "/health", false), None);
        assert_eq!(
            http_request(&put, "/wan", true),
            Some(AsCommand::keyless(&["CONFIG", "SET"]))
        );
        assert_eq!(
            http_request(&get, "/status", false),
            Some(AsCommand::keyless(&["INFO"]))
        );
    }

    #[test]
    fn s3_operations_count_as_commands_on_bucket_keys() {
        let object = S3Path::Object {
            bucket: "photos".into(),
            key: "a/b.jpg".into(),
        };
        let on = |verb| AsCommand::on_key(verb, b"photos:a/b.jpg");
        assert_eq!(s3_request(Operation::GetObject, &object), on("GET"));
        assert_eq!(s3_request(Operation::UploadPart, &object), on("SET"));
        assert_eq!(s3_request(Operation::DeleteObject, &object), on("DEL"));
        let bucket = S3Path::Bucket("photos".into());
        assert_eq!(
            s3_request(Operation::ListObjectsV2, &bucket),
            AsCommand::keyless(&["SCAN"])
        );
        assert_eq!(
            s3_request(Operation::DeleteBucket, &bucket),
            AsCommand::keyless(&["CONFIG", "SET"])
        );
    }

    #[test]
    fn checks_give_redis_refusals() {
        let u = users(&["user app on >p ~app:* +get +set"], None);
        let mut app = u.authenticate(b"app", b"p").unwrap();
        assert!(AsCommand::on_key("GET", b"app:1").check(&mut app).is_ok());
        assert_eq!(
            AsCommand::on_key("GET", b"other")
                .check(&mut app)
                .unwrap_err(),
            "NOPERM this user has no permissions to access one of the keys used as arguments"
        );
        assert_eq!(
            AsCommand::keyless(&["CONFIG", "SET"])
                .check(&mut app)
                .unwrap_err(),
            "NOPERM this user has no permissions to run the 'config|set' command"
        );
        let mut def = u.default_session();
        assert!(AsCommand::keyless(&["INFO"]).check(&mut def).is_ok());
    }
}
