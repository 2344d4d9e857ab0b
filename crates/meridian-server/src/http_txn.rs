//! `POST /txn` (cluster mode): a JSON list of `get`/`set`/`del` operations run as one
//! snapshot-isolation transaction over transactional buckets (at most [`TXN_MAX_OPS`]). 200
//! with each read's value and the commit timestamp; 409 with the conflicting key when it aborts.
//! On a single node the route answers 404 `NOT_CLUSTER`, like the other cluster routes.

use crate::http_acl::AsCommand;
use crate::http_cluster::{backend, base64, repl};
use crate::http_common::{ApiError, HttpState, HttpUser, permit};
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

/// Most operations in one `POST /txn`.
const TXN_MAX_OPS: usize = 10_000;

/// One operation of `POST /txn`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, tag = "op", rename_all = "lowercase")]
enum TxnOp {
    /// Read at the snapshot (sees the transaction's own earlier writes).
    Get { key: String },
    /// Buffer a write of a UTF-8 `value` (binary values go through `PUT /kv` or RESP).
    Set { key: String, value: String },
    /// Buffer a delete.
    Del { key: String },
}

/// The body of `POST /txn`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TxnRequest {
    ops: Vec<TxnOp>,
    #[serde(default)]
    read_only: bool,
    /// The commit timestamp of the client's last transaction (read-your-commits).
    session: Option<u64>,
}

impl TxnOp {
    /// The Redis command the operation counts as for the ACL check.
    fn as_command(&self) -> AsCommand {
        match self {
            TxnOp::Get { key } => AsCommand::on_key("GET", key.as_bytes()),
            TxnOp::Set { key, .. } => AsCommand::on_key("SET", key.as_bytes()),
            TxnOp::Del { key } => AsCommand::on_key("DEL", key.as_bytes()),
        }
    }
}

fn txn_bad(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "BAD_TXN", message)
}

/// `POST /txn`: one snapshot-isolation transaction over transactional buckets, given as a
/// JSON list of operations run in order. 200 with each read's value and the commit
/// timestamp; 409 with the conflicting key when it aborts (nothing applied; retry it).
pub(crate) async fn post_txn(
    State(s): State<Arc<HttpState>>,
    Extension(mut user): Extension<HttpUser>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let c = backend(&s)?;
    let req: TxnRequest = serde_json::from_slice(&body).map_err(|e| {
        txn_bad(format!(
            "{e}; expected {{\"ops\":[{{\"op\":\"get\",\"key\":\"bucket:k\"}},{{\"op\":\"set\",\"key\":\"bucket:k\",\"value\":\"v\"}},{{\"op\":\"del\",\"key\":\"bucket:k\"}}]}}"
        ))
    })?;
    if req.ops.len() > TXN_MAX_OPS {
        return Err(txn_bad(format!(
            "ops: {} operations, at most {TXN_MAX_OPS}",
            req.ops.len()
        )));
    }
    // Every key is checked before the transaction reads anything.
    for op in &req.ops {
        permit(&mut user, &op.as_command())?;
    }
    let mut t = c.node.begin(meridian_replication::TxnOptions {
        read_only: req.read_only,
        session: req.session.map(meridian_core::Timestamp),
    });
    let err = |e: meridian_replication::TxnError| repl(&s, &c, e.into());
    let check = |i: usize, key: &str| {
        if key.is_empty() {
            Err(txn_bad(format!("ops[{i}].key is empty")))
        } else {
            Ok(Bytes::copy_from_slice(key.as_bytes()))
        }
    };
    let mut results = Vec::new();
    for (i, op) in req.ops.into_iter().enumerate() {
        match op {
            TxnOp::Get { key } => {
                let k = check(i, &key)?;
                let raw = t.read(&[k]).await.map_err(err)?;
                let now = c.node.clock_now();
                let v = meridian_txn_entry(raw.into_iter().next().flatten(), now);
                results.push(match v {
                    None => json!({ "key": key, "value": null }),
                    Some(v) => match std::str::from_utf8(&v) {
                        Ok(text) => json!({ "key": key, "value": text }),
                        Err(_) => json!({ "key": key, "value_base64": base64(&v) }),
                    },
                });
            }
            TxnOp::Set { key, value } => {
                let k = check(i, &key)?;
                let entry = meridian_replication::TxnEntry::new(Bytes::from(value)).encode();
                t.write(k, Some(entry)).map_err(err)?;
            }
            TxnOp::Del { key } => {
                let k = check(i, &key)?;
                t.write(k, None).map_err(err)?;
            }
        }
    }
    let ts = t.commit().await.map_err(err)?;
    Ok(axum::Json(json!({ "committed_ts": ts.0, "results": results })).into_response())
}

fn meridian_txn_entry(raw: Option<Bytes>, now: meridian_core::Timestamp) -> Option<Bytes> {
    meridian_replication::TxnEntry::live(raw, now).map(|e| e.data)
}
