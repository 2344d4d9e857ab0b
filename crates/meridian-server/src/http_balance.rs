//! Cluster mode's read load-balancing routes: `GET /balance` (this node's service model,
//! read queue, counters, per-peer view and the DC's extra-copy map) and
//! `PUT /balance/service-model`, which changes a node's service model at run time (a 400
//! `BAD_SERVICE_MODEL` naming the field for a malformed body, a 413 `BODY_TOO_LARGE` over
//! [`BALANCE_BODY_MAX`]). On a single node they answer 404 `NOT_CLUSTER`.

use crate::cluster_backend::ClusterBackend;
use crate::http_cluster::{backend, hex};
use crate::http_common::{ApiError, HttpState};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use meridian_core::NodeId;
use serde_json::json;
use std::sync::Arc;

/// Largest body `PUT /balance/service-model` accepts.
pub(crate) const BALANCE_BODY_MAX: usize = crate::http_common::ADMIN_BODY_MAX;

fn member_name(c: &ClusterBackend, id: NodeId) -> String {
    c.node
        .meta()
        .member(id)
        .map_or_else(|| id.to_string(), |m| m.name.clone())
}

/// A key as JSON: its UTF-8 text (lossy) and its bytes in hex.
fn key_json(k: &[u8]) -> serde_json::Value {
    json!({ "key": String::from_utf8_lossy(k), "key_hex": hex(k) })
}

/// `GET /balance`: this node's read load balancing: its service model and read queue, its
/// counters, its view of each peer as a coordinator (reads sent, their share, outstanding
/// reads, reported queue, scores), the DC's extra-copy map as it knows it and the copies it
/// holds.
pub(crate) async fn balance(State(s): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    let c = backend(&s)?;
    Ok(axum::Json(balance_json(&c)).into_response())
}

fn balance_json(c: &ClusterBackend) -> serde_json::Value {
    let node = &c.node;
    let meridian_replication::BalanceStats {
        extra_copies,
        extra_reads,
        extra_misses,
        duplicate_services,
        cancelled,
        c3_overloads,
        queue,
        copy_create_ms,
        sketch_error_bound,
        peers,
    } = node.balance_stats();
    let mut sorted = copy_create_ms;
    sorted.sort_unstable();
    let total_chosen: u64 = peers.iter().map(|p| p.chosen).sum();
    let peers: Vec<_> = peers
        .iter()
        .map(|p| {
            let share = if total_chosen == 0 {
                0.0
            } else {
                p.chosen as f64 / total_chosen as f64
            };
            json!({
                "node": p.node.0,
                "name": member_name(c, p.node),
                "chosen": p.chosen,
                "share": share,
                "outstanding": p.outstanding,
                "queue": p.queue,
                "service_ms": p.service_us / 1000.0,
                "snitch_score": p.snitch_score,
                "c3_score": p.c3_score,
                "c3_rate": p.c3_rate,
            })
        })
        .collect();
    let map = node.extra_map();
    let keys: Vec<_> = map
        .copies
        .iter()
        .map(|(k, holders)| {
            let mut v = key_json(k);
            v["holders"] = holders.iter().map(|h| h.0).collect::<Vec<_>>().into();
            v["holder_names"] = holders
                .iter()
                .map(|&h| member_name(c, h))
                .collect::<Vec<_>>()
                .into();
            v
        })
        .collect();
    let held: Vec<_> = node.extra_keys().iter().map(|k| key_json(k)).collect();
    let pct = |q: f64| crate::metrics::percentile(&sorted, q);
    json!({
        "node": node.id().0,
        "name": member_name(c, node.id()),
        "dc": c.dc_name(node.dc()),
        "service_model": node.service_model().to_string(),
        "read_workers": node.read_workers(),
        "stats": {
            "queue": queue,
            "extra_copies": extra_copies,
            "extra_reads": extra_reads,
            "extra_misses": extra_misses,
            "duplicate_services": duplicate_services,
            "cancelled": cancelled,
            "c3_overloads": c3_overloads,
            "sketch_error_bound": sketch_error_bound,
            "copy_create_ms": {
                "samples": sorted.len(),
                "p50": pct(0.5),
                "p99": pct(0.99),
                "max": sorted.last(),
            },
        },
        "peers": peers,
        "extra_map": {
            "root": map.root.0,
            "root_name": member_name(c, map.root),
            "epoch": map.epoch,
            "keys": keys,
        },
        "extra_keys_held": held,
    })
}

fn bad_model(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "BAD_SERVICE_MODEL", message)
}

/// What `PUT /balance/service-model` tells a client whose body it refuses.
const MODEL_BODY: &str = "expected {\"model\": \"real\" | \"fixed:MS\" | \"exp:MS\"} with an \
                          optional \"node\": <id> (a node of this process)";

/// The body of `PUT /balance/service-model`, checked field by field so every refusal names
/// the field: `model` (a string the service model parses) and an optional `node` (a positive
/// integer id); nothing else.
fn parse_model_update(
    body: &[u8],
) -> Result<(meridian_replication::ServiceModel, Option<NodeId>), ApiError> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| bad_model(format!("the body is not JSON ({e}); {MODEL_BODY}")))?;
    let serde_json::Value::Object(fields) = v else {
        return Err(bad_model(format!(
            "the body must be a JSON object; {MODEL_BODY}"
        )));
    };
    if let Some(k) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "model" | "node"))
    {
        return Err(bad_model(format!("unknown field `{k}`; {MODEL_BODY}")));
    }
    let model = match fields.get("model") {
        Some(serde_json::Value::String(m)) => m
            .parse::<meridian_replication::ServiceModel>()
            .map_err(|e| bad_model(format!("model: {e}")))?,
        Some(other) => {
            return Err(bad_model(format!(
                "model: expected a string such as \"fixed:30\", not {other}"
            )));
        }
        None => return Err(bad_model(format!("model is missing; {MODEL_BODY}"))),
    };
    let node = match fields.get("node") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => {
            let id = v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    bad_model(format!(
                        "node: expected a node id (an integer from 1 to {}), not {v}",
                        u32::MAX
                    ))
                })?;
            Some(NodeId(id))
        }
    };
    Ok((model, node))
}

/// `PUT /balance/service-model` with `{"model": "fixed:30"}`: sets this node's service
/// model (or, with `"node": <id>`, another node's of the same process: every node of an
/// embedded cluster). 400 `BAD_SERVICE_MODEL` naming the field for a malformed body, an
/// unknown model or an out-of-range time; 400 `NODE_NOT_LOCAL` (with its HTTP address) for a
/// member running in another process; 413 `BODY_TOO_LARGE` above 64 KiB.
pub(crate) async fn put_service_model(
    State(s): State<Arc<HttpState>>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let c = backend(&s)?;
    let body = body.map_err(|e| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "BODY_TOO_LARGE",
            format!("the body could not be read ({e}); it may be at most {BALANCE_BODY_MAX} bytes"),
        )
    })?;
    let (model, target) = parse_model_update(&body)?;
    let id = target.unwrap_or(c.node.id());
    let node = match c.local.get(id) {
        Some(n) => n,
        None => {
            let meta = c.node.meta();
            return Err(match meta.member(id) {
                Some(m) => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "NODE_NOT_LOCAL",
                    format!(
                        "node {} ({}) runs in another process: send this request to its HTTP \
                         address{}",
                        id.0,
                        m.name,
                        m.http.map_or_else(String::new, |a| format!(" {a}"))
                    ),
                ),
                None => bad_model(format!(
                    "node: {} is not a member of the cluster (members: {})",
                    id.0,
                    meta.members
                        .iter()
                        .map(|m| m.id.0.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            });
        }
    };
    let previous = node.service_model();
    node.set_service_model(model);
    tracing::info!(node = %id, %previous, %model, "service model changed");
    Ok(axum::Json(json!({
        "node": id.0,
        "name": member_name(&c, id),
        "service_model": model.to_string(),
        "previous": previous.to_string(),
    }))
    .into_response())
}
