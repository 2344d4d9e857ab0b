//! Replication errors on the wire: the one mapping from a [`ReplicationError`] to a RESP
//! error line and to an HTTP status, headers and JSON body (spec `placement-and-quorums.md`
//! §11, `timeline.md` §7). Both front ends use only this module, so a client sees the same
//! class of error over either protocol and can act on it: fix the request, retry later, retry
//! with a fresh version.
//!
//! | [`ErrorClass`] | RESP | HTTP |
//! |---|---|---|
//! | `BadRequest` | `-ERR <code> <figures>` | 400 |
//! | `Unavailable` | `-UNAVAILABLE <code> <figures>` (`need=<x> got=<y>` for quorums) | 503 + `Retry-After` |
//! | `Overload` | `-TRYAGAIN overload` | 503 + `Retry-After` |
//! | `Timeout` | `-TIMEOUT need=… ok=… nf=… fail=… missing=… (<how long, and what sets it>)` | 504 |
//! | `TooLarge` | `-ERR <code> <figures>` | 413 |
//! | `Conflict` | `-CONFLICT <code> current=<ver\|none>` | 412 + `X-Meridian-Version` (a transaction's abort: 409 and its `key`) |
//! | `Internal` | `-ERR <code> <figures>` | 500 |
//! | `Moving` | `-TRYAGAIN key_moving key=<key> …` / `-TRYAGAIN wrong_partition …` | 503 + `Retry-After` |
//!
//! **Keys moving between partitions** (spec `repartitioning.md` §6). A transactional key
//! being moved refuses writes (and reads above its export timestamp) with the retryable
//! `KeyMoving`; a leader it left answers `WrongPartition`. Neither is a conflict on the
//! client's data: nothing was applied and the same request succeeds once the move ends, so
//! both are `-TRYAGAIN`, which cluster clients (redis-py, go-redis, Jedis, ...) retry as they
//! do during Redis Cluster resharding, and HTTP 503 + `Retry-After`. The front ends retry them
//! first themselves (a non-WATCH `EXEC` or a single command backs off and runs again), so a
//! client only sees one when a move outlasts those retries. Never `-MOVED`: a key move does
//! not move its hash slot — `CLUSTER SLOTS` stays right, any node coordinates a transaction
//! on any key and routes it by the key directory — so redirecting a client would be false.
//!
//! `wrong_type` (a hash command on a string, an increment on a hash) is a `BadRequest` (HTTP
//! 400) whose RESP line is Redis's own, `-WRONGTYPE Operation against a key holding the wrong
//! kind of value`, so Redis clients raise their usual type error.
//!
//! `master_unavailable` keeps the spec's form that leads with what an operator acts on:
//! `-UNAVAILABLE master_unavailable dc=<name> node=<id> key=<key> <reason>`, the DC by its
//! configured name. The HTTP body is `{"error":{"code":"<CODE>","message":"<code> <figures>"}}`
//! (the code in upper case); the timeline codes add the spec's flat fields at the top level
//! (`code`, `key`, `master`, `dc`, `maybe_applied`, `current`, `required`, `local`,
//! `partition`, `node`). Every error mapped here is counted in
//! `meridian_replication_errors_total{frontend,code}`.
//!
//! A quorum `timeout` ends with what bounds the wait and how to change it — the bucket
//! property `timeout_ms` (default 60 000 ms) or the request's `TIMEOUT ms` (RESP) /
//! `?timeout_ms=` (HTTP) — after the figures, so a client parsing `need=… missing=…` keeps
//! working ([`timeout_hint`]).

use crate::cluster_backend::ClusterBackend;
use crate::http_common::ApiError;
use crate::metrics::{Frontend, Metrics};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use meridian_core::DcId;
use meridian_replication::timeline::Version;
use meridian_replication::{ErrorClass, ReplicationError};
use std::borrow::Cow;

/// The header carrying a timeline record's version (`gen.mepoch.seq`).
pub const VERSION_HEADER: &str = "x-meridian-version";

/// Seconds a client should wait before retrying an `Unavailable` or `Overload` error. The
/// failure detector and the master timeout act within about a second, so one is the scale.
pub const RETRY_AFTER_SECS: u32 = 1;

/// The RESP error prefix (the first word of the error line) of a class.
pub fn resp_prefix(class: ErrorClass) -> &'static str {
    match class {
        ErrorClass::BadRequest | ErrorClass::TooLarge | ErrorClass::Internal => "ERR",
        ErrorClass::Unavailable => "UNAVAILABLE",
        ErrorClass::Overload => "TRYAGAIN",
        ErrorClass::Timeout => "TIMEOUT",
        ErrorClass::Conflict => "CONFLICT",
        ErrorClass::DiskFull => "MISCONF",
        ErrorClass::Moving => "TRYAGAIN",
    }
}

/// The HTTP status of a class.
pub fn http_status(class: ErrorClass) -> StatusCode {
    match class {
        ErrorClass::BadRequest => StatusCode::BAD_REQUEST,
        ErrorClass::Unavailable | ErrorClass::Overload | ErrorClass::Moving => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        ErrorClass::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorClass::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorClass::Conflict => StatusCode::PRECONDITION_FAILED,
        ErrorClass::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorClass::DiskFull => StatusCode::INSUFFICIENT_STORAGE,
    }
}

/// Whether a class tells the client to retry later (`Retry-After`).
pub fn retry_later(class: ErrorClass) -> bool {
    matches!(
        class,
        ErrorClass::Unavailable | ErrorClass::Overload | ErrorClass::Moving
    )
}

/// The explanation a quorum `timeout` error ends with: how long the coordinator waited by
/// default and the bucket property and request option that change it. `per_request` is the
/// front end's own spelling of the request option.
pub fn timeout_hint(per_request: &str) -> String {
    format!(
        " (not enough replies within the request timeout: bucket property timeout_ms, default \
         {} ms; per request {per_request})",
        meridian_cluster::quorum::Params::default().timeout_ms
    )
}

/// The RESP error line of `e`, without the leading `-` and the CRLF. `dc_name` names a DC.
pub fn resp_line(e: &ReplicationError, dc_name: impl Fn(DcId) -> String) -> String {
    let class = e.class();
    match e {
        // The spec's form (timeline.md §7) leads with the DC and the node, the figures an
        // operator acts on; the DC by its configured name.
        ReplicationError::MasterUnavailable {
            key,
            master,
            dc,
            reason,
            maybe_applied,
        } => format!(
            "UNAVAILABLE master_unavailable dc={} node={master} key={key} {reason}{}",
            dc_name(*dc),
            if *maybe_applied {
                " (the write may have applied)"
            } else {
                ""
            }
        ),
        ReplicationError::Overload => "TRYAGAIN overload".to_owned(),
        // Redis's own line, which clients recognise by its prefix.
        ReplicationError::WrongType => format!("WRONGTYPE {e}"),
        // The code first, as every other line (`Display` of an abort leads with
        // `txn_aborted`), then what the client should do.
        ReplicationError::Txn(t) if class == ErrorClass::Moving => {
            let text = t.to_string();
            let what = text.strip_prefix("txn_aborted ").unwrap_or(&text);
            format!(
                "TRYAGAIN {what} (the key is moving between partitions; nothing was applied, \
                 retry)"
            )
        }
        // As a standalone node says it (`meridian_redis::RedisError::line`).
        ReplicationError::DiskFull { reason } => {
            format!("MISCONF Errors writing to the disk: {reason}")
        }
        // Redis's own line (`maxmemory` under `noeviction`), which clients recognise.
        ReplicationError::OutOfMemory { .. } => meridian_core::memory::OOM.to_owned(),
        // The prefix is the code: `-TIMEOUT need=2 ok=1 ... (what bounds the wait)`.
        ReplicationError::Timeout { .. } => {
            let text = e.to_string();
            let figures = text.strip_prefix("timeout ").unwrap_or(&text);
            format!("TIMEOUT {figures}{}", timeout_hint("TIMEOUT <ms>"))
        }
        _ => format!("{} {e}", resp_prefix(class)),
    }
}

/// The HTTP error of `e`: status, headers and JSON body. `dc_name` names a DC.
pub fn http_error(e: &ReplicationError, dc_name: impl Fn(DcId) -> String) -> ApiError {
    let class = e.class();
    let code = e.code();
    let mut message = e.to_string();
    if matches!(e, ReplicationError::Timeout { .. }) {
        message.push_str(&timeout_hint("?timeout_ms=<ms>"));
    }
    let mut api = ApiError::new(http_status(class), code.to_ascii_uppercase(), message);
    if retry_later(class) {
        api = api.with_header(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    }
    let ver = |v: &Option<Version>| v.map_or(serde_json::Value::Null, |v| v.to_string().into());
    let mut fields: Vec<(&str, serde_json::Value)> = Vec::new();
    let mut current = None;
    match e {
        ReplicationError::MasterUnavailable {
            key,
            master,
            dc,
            maybe_applied,
            ..
        } => {
            fields.push(("key", key.clone().into()));
            fields.push(("master", master.to_string().into()));
            fields.push(("dc", dc_name(*dc).into()));
            fields.push(("maybe_applied", (*maybe_applied).into()));
        }
        ReplicationError::StaleVersionUnavailable {
            required,
            local,
            master,
            ..
        } => {
            fields.push(("required", required.to_string().into()));
            fields.push(("local", ver(local)));
            fields.push(("master", master.to_string().into()));
        }
        ReplicationError::InsertArbiterUnavailable {
            partition,
            node,
            maybe_applied,
            ..
        } => {
            fields.push(("partition", (*partition).into()));
            fields.push(("node", node.to_string().into()));
            fields.push(("maybe_applied", (*maybe_applied).into()));
        }
        ReplicationError::VersionMismatch { current: v } => {
            fields.push(("current", ver(v)));
            current = *v;
        }
        ReplicationError::AlreadyExists { current: v } => {
            fields.push(("current", v.to_string().into()));
            current = Some(*v);
        }
        // A transaction's conflict is not a failed precondition the client sent: 409, with
        // the key to retry around (spec `transactions.md` API).
        ReplicationError::Txn(meridian_replication::TxnError::Aborted(
            meridian_replication::TxnAbort::KeyMoving(k),
        )) => {
            fields.push(("key", String::from_utf8_lossy(k).into_owned().into()));
        }
        ReplicationError::Txn(meridian_replication::TxnError::WrongPartition {
            hint,
            dir_epoch,
        }) => {
            fields.push(("partition", hint.0.into()));
            fields.push(("dir_epoch", (*dir_epoch).into()));
        }
        ReplicationError::Txn(t @ meridian_replication::TxnError::Aborted(_)) => {
            api.status = StatusCode::CONFLICT;
            if let Some(k) = t.conflict_key() {
                fields.push(("key", String::from_utf8_lossy(k).into_owned().into()));
            }
        }
        _ => {}
    }
    if !fields.is_empty() {
        api = api.with_field("code", code.into());
        for (k, v) in fields {
            api = api.with_field(k, v);
        }
    }
    if let Some(v) = current {
        api = api.with_header(
            HeaderName::from_static(VERSION_HEADER),
            HeaderValue::from_str(&v.to_string()).expect("a version is a valid header value"),
        );
    }
    api
}

/// The RESP reply to `e` on a cluster node, counted in `m`.
pub(crate) fn resp(c: &ClusterBackend, m: &Metrics, e: &ReplicationError) -> Cow<'static, str> {
    m.replication_error(Frontend::Resp, e.code());
    Cow::Owned(resp_line(e, |dc| c.dc_name(dc)))
}

/// The HTTP reply to `e` on a cluster node, counted in `m`.
pub(crate) fn http(c: &ClusterBackend, m: &Metrics, e: &ReplicationError) -> ApiError {
    m.replication_error(Frontend::Http, e.code());
    http_error(e, |dc| c.dc_name(dc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_cluster::QuorumError;
    use meridian_core::NodeId;
    use meridian_replication::{BucketType, Missing};

    fn dc_name(dc: DcId) -> String {
        format!("east{}", dc.0)
    }

    /// One error of every class, with the RESP line and HTTP status it must map to.
    fn every_class() -> Vec<(ReplicationError, &'static str, u16)> {
        vec![
            (
                ReplicationError::from(QuorumError::NValViolation { n: 3 }),
                "ERR n_val_violation n=3",
                400,
            ),
            (
                ReplicationError::Unsupported {
                    command: "INCR".into(),
                    bucket_type: BucketType::Eventual,
                    hint: " (no atomic read-modify-write across replicas)".into(),
                },
                "ERR INCR is not supported on eventual buckets (no atomic read-modify-write \
                 across replicas)",
                400,
            ),
            (
                ReplicationError::WrongType,
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                400,
            ),
            (
                ReplicationError::from(QuorumError::RValUnsatisfied { need: 2, got: 1 }),
                "UNAVAILABLE r_val_unsatisfied need=2 got=1",
                503,
            ),
            (
                ReplicationError::from(QuorumError::InsufficientVnodes { have: 1, need: 2 }),
                "UNAVAILABLE insufficient_vnodes",
                503,
            ),
            (
                ReplicationError::MasterUnavailable {
                    key: "tl:k".into(),
                    master: NodeId(3),
                    dc: DcId(1),
                    reason: "down".into(),
                    maybe_applied: true,
                },
                "UNAVAILABLE master_unavailable dc=east1 node=n3 key=tl:k down (the write may \
                 have applied)",
                503,
            ),
            (ReplicationError::Overload, "TRYAGAIN overload", 503),
            (
                ReplicationError::DiskFull {
                    reason: "no space left on device".into(),
                },
                "MISCONF Errors writing to the disk: no space left on device",
                507,
            ),
            (
                ReplicationError::Timeout {
                    need: 2,
                    ok: 1,
                    nf: 0,
                    fail: 0,
                    missing: Missing(vec![NodeId(4)]),
                },
                "TIMEOUT need=2 ok=1 nf=0 fail=0 missing=n4",
                504,
            ),
            (
                ReplicationError::ObjectTooLarge { len: 9, max: 8 },
                "ERR object_too_large len=9 max=8",
                413,
            ),
            (
                ReplicationError::ContextRefused(meridian_cluster::ContextError::ClaimsUnissued {
                    claimed: u64::MAX,
                    issued: 1,
                }),
                "ERR invalid_context invalid CONTEXT: claims counter 18446744073709551615 for \
                 this coordinator, which has issued at most 1",
                400,
            ),
            (
                ReplicationError::VersionMismatch {
                    current: Some(Version::new(7, 0, 2)),
                },
                "CONFLICT version_mismatch current=7.0.2",
                412,
            ),
            (
                ReplicationError::Storage {
                    reason: "disk".into(),
                },
                "ERR storage_error disk",
                500,
            ),
            (
                ReplicationError::Txn(meridian_replication::TxnError::Aborted(
                    meridian_replication::TxnAbort::KeyMoving(b"bank:a".to_vec()),
                )),
                "TRYAGAIN key_moving key=bank:a",
                503,
            ),
        ]
    }

    #[test]
    fn every_class_has_its_resp_prefix_and_http_status() {
        let all = every_class();
        let classes = [
            ErrorClass::BadRequest,
            ErrorClass::Unavailable,
            ErrorClass::Overload,
            ErrorClass::Timeout,
            ErrorClass::TooLarge,
            ErrorClass::Conflict,
            ErrorClass::Internal,
            ErrorClass::Moving,
        ];
        for class in classes {
            assert!(
                all.iter().any(|(e, ..)| e.class() == class),
                "{class:?} is not covered"
            );
        }
        for (e, line, status) in &all {
            let got = resp_line(e, dc_name);
            assert!(got.starts_with(line), "{e:?}: {got}");
            // Redis's WRONGTYPE is the one line whose prefix is not its class's.
            if *e != ReplicationError::WrongType {
                assert!(got.starts_with(resp_prefix(e.class())), "{got}");
            }
            let api = http_error(e, dc_name);
            assert_eq!(api.status.as_u16(), *status, "{e:?}");
            assert_eq!(api.status, http_status(e.class()));
        }
    }

    #[test]
    fn retry_after_only_for_retry_later_classes() {
        for (e, ..) in every_class() {
            let r = axum::response::IntoResponse::into_response(http_error(&e, dc_name));
            let retry = r.headers().get(header::RETRY_AFTER);
            if retry_later(e.class()) {
                assert_eq!(retry.unwrap(), "1", "{e:?}");
            } else {
                assert!(retry.is_none(), "{e:?}");
            }
        }
    }

    /// A quorum timeout keeps its figures first (clients parse them) and then says how long
    /// the wait was bounded by and what sets it, on both front ends.
    #[tokio::test]
    async fn a_timeout_names_the_property_that_bounds_it() {
        let e = ReplicationError::Timeout {
            need: 2,
            ok: 1,
            nf: 0,
            fail: 0,
            missing: Missing(vec![NodeId(4), NodeId(5)]),
        };
        assert_eq!(
            resp_line(&e, dc_name),
            "TIMEOUT need=2 ok=1 nf=0 fail=0 missing=n4,n5 (not enough replies within the \
             request timeout: bucket property timeout_ms, default 60000 ms; per request \
             TIMEOUT <ms>)"
        );
        let r = axum::response::IntoResponse::into_response(http_error(&e, dc_name));
        assert_eq!(r.status(), 504);
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(j["error"]["code"], "TIMEOUT");
        let message = j["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("timeout need=2 ok=1 nf=0 fail=0 missing=n4,n5 (")
                && message.contains("bucket property timeout_ms, default 60000 ms")
                && message.contains("?timeout_ms=<ms>"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn conflicts_and_master_failures_carry_the_spec_fields() {
        let e = ReplicationError::VersionMismatch {
            current: Some(Version::new(7, 0, 2)),
        };
        let r = axum::response::IntoResponse::into_response(http_error(&e, dc_name));
        assert_eq!(r.status(), 412);
        assert_eq!(r.headers().get(VERSION_HEADER).unwrap(), "7.0.2");
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(j["code"], "version_mismatch");
        assert_eq!(j["current"], "7.0.2");
        assert_eq!(j["error"]["code"], "VERSION_MISMATCH");

        let e = ReplicationError::MasterUnavailable {
            key: "tl:k".into(),
            master: NodeId(3),
            dc: DcId(1),
            reason: "down".into(),
            maybe_applied: false,
        };
        let r = axum::response::IntoResponse::into_response(http_error(&e, dc_name));
        assert_eq!(r.status(), 503);
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(j["dc"], "east1");
        assert_eq!(j["master"], "n3");
        assert_eq!(j["maybe_applied"], false);
        assert_eq!(j["error"]["code"], "MASTER_UNAVAILABLE");
    }

    /// A key moving between partitions is `-TRYAGAIN` (redis-py's `TryAgainError`, which its
    /// cluster client retries) and HTTP 503 + `Retry-After`, never `-MOVED` (the slot did not
    /// move) nor `-CONFLICT` (nothing the client read changed); other aborts stay conflicts.
    #[tokio::test]
    async fn key_moves_are_tryagain_and_503_and_other_aborts_stay_conflicts() {
        use meridian_replication::{TxnAbort, TxnError};
        let moving =
            ReplicationError::Txn(TxnError::Aborted(TxnAbort::KeyMoving(b"bank:a".to_vec())));
        assert_eq!(moving.class(), ErrorClass::Moving);
        assert_eq!(moving.code(), "key_moving");
        assert_eq!(
            resp_line(&moving, dc_name),
            "TRYAGAIN key_moving key=bank:a (the key is moving between partitions; nothing was \
             applied, retry)"
        );
        let r = axum::response::IntoResponse::into_response(http_error(&moving, dc_name));
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers().get(header::RETRY_AFTER).unwrap(), "1");
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(j["error"]["code"], "KEY_MOVING");
        assert_eq!(j["key"], "bank:a");

        let wrong = ReplicationError::Txn(TxnError::WrongPartition {
            hint: meridian_core::PartitionId(5),
            dir_epoch: 9,
        });
        assert_eq!(wrong.class(), ErrorClass::Moving);
        assert_eq!(
            resp_line(&wrong, dc_name),
            "TRYAGAIN wrong_partition hint=p5 dir_epoch=9 (the key is moving between \
             partitions; nothing was applied, retry)"
        );
        let r = axum::response::IntoResponse::into_response(http_error(&wrong, dc_name));
        assert_eq!(r.status(), 503);
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(j["error"]["code"], "WRONG_PARTITION");
        assert_eq!(
            (j["partition"].as_u64(), j["dir_epoch"].as_u64()),
            (Some(5), Some(9))
        );

        // A write-write conflict is still the client's business: -CONFLICT and 409.
        let ww = ReplicationError::Txn(TxnError::Aborted(TxnAbort::WwConflict(b"bank:a".to_vec())));
        assert_eq!(
            resp_line(&ww, dc_name),
            "CONFLICT txn_aborted ww_conflict key=bank:a"
        );
        assert_eq!(http_error(&ww, dc_name).status, StatusCode::CONFLICT);
        for e in [&moving, &wrong, &ww] {
            assert!(!resp_line(e, dc_name).starts_with("MOVED"), "{e:?}");
        }
    }
}
