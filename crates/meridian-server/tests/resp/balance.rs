//! Read load balancing at the front ends (spec `load-balancing.md`): the per-request
//! `REPLICA_SELECTION` option over RESP and `replica_selection` over HTTP (eventual reads and
//! timeline `read_any`), the `replica_selection` and `extra_copies` bucket properties, the
//! `[balance]` settings reaching every node, `GET /balance` and `PUT /balance/service-model`
//! (hostile bodies included) and the balance series of `/metrics`. One embedded 2-DC ×
//! 2-node cluster per test (port 0, ideal links), with a timeline bucket `tl` and an eventual
//! bucket `hot` that selects with C3 and gets extra copies.

use super::cluster_mode::connect;
use super::*;
use meridian_net::wan::LinkConfig;
use meridian_replication::{BucketProps, ServiceModel, Strategy};
use meridian_server::cluster::{Embedded, EmbeddedConfig};
use meridian_server::config::BalanceSection;

/// The text of the exact error of an unknown `replica_selection`.
const BAD_STRATEGY: &str = "invalid value 'fastest' for replica_selection: expected local_first, \
                            random, round_robin, least_outstanding, least_queue, power_of_d, \
                            first_two, dynamic_snitch, c3, naive or avr";

/// 2 DCs × 2 nodes with buckets `tl` (timeline) and `hot` (eventual, C3, extra copies), a
/// short hot-key period and a 1 ms fixed service model on every node.
async fn balance_cluster() -> Embedded {
    let mut hot = BucketProps::default();
    hot.props.replica_selection = Some(Strategy::C3);
    hot.extra_copies = Some(true);
    let mut cfg = EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        wan_latency: Duration::ZERO,
        intra_dc: LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        buckets: [
            ("tl".to_owned(), BucketProps::timeline()),
            ("hot".to_owned(), hot),
            super::eventual_default(),
        ]
        .into(),
        ..EmbeddedConfig::default()
    };
    cfg.node.balance = BalanceSection {
        service_model: Some(ServiceModel::Fixed { us: 1_000 }),
        read_workers: Some(2),
        hot_period_ms: Some(200),
        ..BalanceSection::default()
    };
    crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap()
}

fn error(f: Frame) -> String {
    match f {
        Frame::Error(e) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// One HTTP/1.1 request with `Connection: close`: the status and the body.
async fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: meridian\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut req = head.into_bytes();
    req.extend_from_slice(body);
    // A server may answer (and close) before it has read an oversized body: write and read
    // at once, so the reply is read as it arrives, and ignore the writer's broken pipe.
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&req).await;
        wr
    });
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    tokio::time::timeout(PATIENCE, async {
        while let Ok(n) = rd.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            raw.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("a reply");
    drop(writer.await);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_owned(),
    )
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The value of the sample named exactly `series` in `text`, if any.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// Waits (bounded; not a timing assertion) until every replica of a timeline key holds a
/// record, so a `read_any` anywhere finds it.
async fn wait_tl_replicated(c: &Embedded, key: &[u8]) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let holding = (0..c.members.len())
                .filter(|&i| c.node(i).tl_local(key).unwrap().is_some())
                .count();
            if holding == 3 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the record reached every replica");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_and_http_take_a_replica_selection_per_request() {
    let c = balance_cluster().await;
    let mut a = connect(&c, 0).await;
    let h = c.members[0].http.unwrap();
    assert_eq!(
        a.cmd(&[b"SET", b"k", b"v"]).await,
        Frame::Simple("OK".into())
    );
    // Eventual: a read that needs one replica, with each strategy in any case.
    for s in [
        "c3",
        "ROUND_ROBIN",
        "least_outstanding",
        "naive",
        "avr",
        "local_first",
    ] {
        let got = a
            .cmd(&[
                b"MERIDIAN.GET",
                b"k",
                b"R",
                b"1",
                b"READ_FANOUT",
                b"quorum",
                b"replica_selection",
                s.as_bytes(),
            ])
            .await;
        let Frame::Array(parts) = got else {
            panic!("{s}: {got:?}")
        };
        assert_eq!(parts[1], Frame::Array(vec![bulk("v")]), "{s}");
    }
    // Refusals name the option and the valid names, exactly; the connection stays usable.
    assert_eq!(
        error(
            a.cmd(&[b"MERIDIAN.GET", b"k", b"REPLICA_SELECTION", b"fastest"])
                .await
        ),
        format!("ERR {BAD_STRATEGY}")
    );
    assert_eq!(
        error(a.cmd(&[b"MERIDIAN.GET", b"k", b"FOO", b"1"]).await),
        "ERR unknown option 'FOO'; valid: R, PR, NOTFOUND_OK, BASIC_QUORUM, READ_FANOUT, \
         HEDGE_MS, REPLICA_SELECTION, TIMEOUT"
    );
    assert_eq!(
        error(
            a.cmd(&[b"MERIDIAN.PUT", b"k", b"v", b"REPLICA_SELECTION", b"c3"])
                .await
        ),
        "ERR unknown option 'REPLICA_SELECTION'; valid: W, DW, PW, NODE_CONFIRMS, \
         DC_CONFIRMS, TIMEOUT"
    );
    assert_eq!(
        error(a.cmd(&[b"MERIDIAN.GET", b"k", b"REPLICA_SELECTION"]).await),
        "ERR syntax error: options come in NAME value pairs"
    );
    // `ANY` is a timeline read mode: on an eventual bucket the facade refuses it.
    let e = error(
        a.cmd(&[b"MERIDIAN.GET", b"k", b"ANY", b"REPLICA_SELECTION", b"c3"])
            .await,
    );
    assert!(
        e.starts_with("ERR wrong_bucket_type bucket=default is eventual"),
        "{e}"
    );
    assert_eq!(a.cmd(&[b"PING"]).await, Frame::Simple("PONG".into()));

    // HTTP: the same option in the query string.
    let (status, body) = http(
        h,
        "GET",
        "/kv/k?r=1&read_fanout=quorum&replica_selection=Dynamic_Snitch",
        b"",
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "v"));
    let (status, body) = http(h, "GET", "/kv/k?replica_selection=fastest", b"").await;
    assert_eq!(status, 400, "{body}");
    let e = json(&body);
    assert_eq!(e["error"]["code"], "BAD_QUERY");
    assert_eq!(e["error"]["message"], BAD_STRATEGY);

    // Timeline: the strategy of a read_any, alone or after ANY.
    assert_eq!(
        a.cmd(&[b"SET", b"tl:k", b"t1"]).await,
        Frame::Simple("OK".into())
    );
    wait_tl_replicated(&c, b"tl:k").await;
    for req in [
        &[&b"MERIDIAN.GET"[..], b"tl:k", b"REPLICA_SELECTION", b"c3"][..],
        &[
            b"MERIDIAN.GET",
            b"tl:k",
            b"any",
            b"replica_selection",
            b"power_of_d",
        ],
        &[
            b"MERIDIAN.GET",
            b"tl:k",
            b"ANY",
            b"REPLICA_SELECTION",
            b"naive",
        ],
    ] {
        let Frame::Array(parts) = a.cmd(req).await else {
            panic!("{req:?}")
        };
        assert_eq!(parts[0], bulk("t1"), "{req:?}");
        assert!(matches!(parts[1], Frame::Bulk(_)), "{req:?}: a version");
    }
    assert_eq!(
        error(
            a.cmd(&[
                b"MERIDIAN.GET",
                b"tl:k",
                b"LATEST",
                b"REPLICA_SELECTION",
                b"c3"
            ])
            .await
        ),
        "ERR syntax error: MERIDIAN.GET takes ANY [REPLICA_SELECTION <strategy>], LATEST or \
         CRITICAL <version> (timeline buckets) or quorum options in NAME value pairs \
         (eventual buckets)"
    );
    assert_eq!(
        error(
            a.cmd(&[
                b"MERIDIAN.GET",
                b"tl:k",
                b"ANY",
                b"REPLICA_SELECTION",
                b"fastest"
            ])
            .await
        ),
        format!("ERR {BAD_STRATEGY}")
    );
    let e = error(
        a.cmd(&[
            b"MERIDIAN.GET",
            b"tl:k",
            b"R",
            b"1",
            b"REPLICA_SELECTION",
            b"c3",
        ])
        .await,
    );
    assert!(
        e.starts_with("ERR wrong_bucket_type bucket=tl is timeline"),
        "{e}"
    );
    for q in [
        "replica_selection=c3",
        "read=any&replica_selection=round_robin",
    ] {
        let (status, body) = http(h, "GET", &format!("/kv/tl:k?{q}"), b"").await;
        assert_eq!((status, body.as_str()), (200, "t1"), "{q}");
    }
    let (status, body) = http(h, "GET", "/kv/tl:k?read=latest&replica_selection=c3", b"").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(json(&body)["error"]["code"], "BAD_QUERY");
    let (status, body) = http(h, "GET", "/kv/k?read=any&replica_selection=c3", b"").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(json(&body)["error"]["code"], "WRONG_BUCKET_TYPE");

    // The reads were counted per chosen replica.
    let text = c.states[0].render_metrics();
    let chosen: u64 = text
        .lines()
        .filter_map(|l| l.strip_prefix("meridian_replica_chosen_total{peer=\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(chosen >= 5, "{text}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balance_bucket_properties_and_node_settings_round_trip() {
    let c = balance_cluster().await;
    let h = c.members[1].http.unwrap();
    // The [balance] settings reached every node.
    for i in 0..c.members.len() {
        assert_eq!(c.node(i).service_model(), ServiceModel::Fixed { us: 1_000 });
    }
    // Configured at start.
    let (status, body) = http(h, "GET", "/buckets", b"").await;
    assert_eq!(status, 200);
    let b = json(&body);
    assert_eq!(b["buckets"]["hot"]["replica_selection"], "c3");
    assert_eq!(b["buckets"]["hot"]["extra_copies"], true);
    // Set at run time, listed back.
    let (status, body) = http(
        h,
        "PUT",
        "/buckets/snitched",
        br#"{"replica_selection":"dynamic_snitch","extra_copies":false}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["props"]["replica_selection"], "dynamic_snitch");
    let (_, body) = http(h, "GET", "/buckets", b"").await;
    let b = json(&body);
    assert_eq!(
        b["buckets"]["snitched"]["replica_selection"],
        "dynamic_snitch"
    );
    assert_eq!(b["buckets"]["snitched"]["extra_copies"], false);
    // Refused, naming the problem.
    for (props, want) in [
        (&br#"{"replica_selection":"fastest"}"#[..], "fastest"),
        // serde cannot name a flattened field whose type is wrong; it quotes the value.
        (br#"{"replica_selection":3}"#, "integer `3`"),
        (br#"{"extra_copies":"yes"}"#, "yes"),
        (br#"{"extra_copy":true}"#, "extra_copy"),
    ] {
        let (status, body) = http(h, "PUT", "/buckets/bad", props).await;
        assert_eq!(status, 400, "{body}");
        let e = json(&body);
        assert_eq!(e["error"]["code"], "BAD_BUCKET_PROPS", "{body}");
        let m = e["error"]["message"].as_str().unwrap();
        assert!(m.contains(want), "{want}: {m}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_balance_admin_api_reports_and_sets_service_models_and_refuses_hostile_bodies() {
    let c = balance_cluster().await;
    let h = c.members[0].http.unwrap();
    let (status, body) = http(h, "GET", "/balance", b"").await;
    assert_eq!(status, 200, "{body}");
    let b = json(&body);
    assert_eq!(b["node"], 1);
    assert_eq!(b["name"], "dc0-n0");
    assert_eq!(b["dc"], "dc0");
    assert_eq!(b["service_model"], "fixed:1");
    assert_eq!(b["read_workers"], 2);
    for field in [
        "queue",
        "extra_copies",
        "extra_reads",
        "extra_misses",
        "duplicate_services",
        "cancelled",
        "c3_overloads",
        "sketch_error_bound",
    ] {
        assert!(b["stats"][field].is_u64(), "{field}: {body}");
    }
    assert!(
        b["peers"].is_array() && b["extra_map"]["keys"].is_array(),
        "{body}"
    );

    // This node, then another node of the process by id.
    let (status, body) = http(
        h,
        "PUT",
        "/balance/service-model",
        br#"{"model":"fixed:30"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let r = json(&body);
    assert_eq!(
        (&r["node"], &r["service_model"]),
        (&1.into(), &"fixed:30".into())
    );
    assert_eq!(r["previous"], "fixed:1");
    assert_eq!(
        c.node(0).service_model(),
        ServiceModel::Fixed { us: 30_000 }
    );
    let (status, body) = http(
        h,
        "PUT",
        "/balance/service-model",
        br#"{"model":"exp:0.5","node":4}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        c.node(3).service_model(),
        ServiceModel::Exp { mean_us: 500 }
    );
    assert_eq!(c.node(1).service_model(), ServiceModel::Fixed { us: 1_000 });
    let (_, body) = http(c.members[3].http.unwrap(), "GET", "/balance", b"").await;
    assert_eq!(json(&body)["service_model"], "exp:0.5");

    // Hostile bodies: 400 naming the field (or the body), nothing changed.
    for (body, want) in [
        (
            &br#"{"model":"fixed:0"}"#[..],
            "model: invalid service_model `fixed:0`",
        ),
        (
            br#"{"model":"fixed:60000.001"}"#,
            "model: invalid service_model",
        ),
        (
            br#"{"model":"fixed:99999999999999999999999"}"#,
            "model: invalid",
        ),
        (
            br#"{"model":"exp:-5"}"#,
            "model: invalid service_model `exp:-5`",
        ),
        (
            br#"{"model":"exp:NaN"}"#,
            "model: invalid service_model `exp:NaN`",
        ),
        (br#"{"model":"fixed:1e3"}"#, "model: invalid"),
        (
            br#"{"model":"warp"}"#,
            "model: invalid service_model `warp`",
        ),
        (br#"{"model":30}"#, "model: expected a string"),
        (br#"{"model":null}"#, "model: expected a string"),
        (br#"{"model":["real"]}"#, "model: expected a string"),
        (br#"{"node":2}"#, "model is missing"),
        (br#"{"model":"real","node":-1}"#, "node: expected a node id"),
        (br#"{"model":"real","node":0}"#, "node: expected a node id"),
        (
            br#"{"model":"real","node":1.5}"#,
            "node: expected a node id",
        ),
        (
            br#"{"model":"real","node":4294967296}"#,
            "node: expected a node id",
        ),
        (br#"{"model":"real","node":1e400}"#, "not JSON"),
        (
            br#"{"model":"real","node":"2"}"#,
            "node: expected a node id",
        ),
        (br#"{"model":"real","node":99}"#, "node: 99 is not a member"),
        (br#"{"model":"real","speed":2}"#, "unknown field `speed`"),
        (b"NaN", "not JSON"),
        (b"", "not JSON"),
        (b"[1,2]", "must be a JSON object"),
        (b"\"real\"", "must be a JSON object"),
        (b"{\"model\":\"real\"", "not JSON"),
        (b"\xff\xfe", "not JSON"),
    ] {
        let (status, reply) = http(h, "PUT", "/balance/service-model", body).await;
        assert_eq!(status, 400, "{}: {reply}", String::from_utf8_lossy(body));
        let e = json(&reply);
        assert_eq!(e["error"]["code"], "BAD_SERVICE_MODEL", "{reply}");
        let m = e["error"]["message"].as_str().unwrap();
        assert!(m.contains(want), "{}: {m}", String::from_utf8_lossy(body));
    }
    // An oversized body is refused before it is parsed.
    let huge = format!(r#"{{"model":"real","pad":"{}"}}"#, "x".repeat(1 << 20));
    let (status, reply) = http(h, "PUT", "/balance/service-model", huge.as_bytes()).await;
    assert_eq!(status, 413, "{reply}");
    assert_eq!(json(&reply)["error"]["code"], "BODY_TOO_LARGE");
    // Nothing changed, and the node still serves.
    assert_eq!(
        c.node(0).service_model(),
        ServiceModel::Fixed { us: 30_000 }
    );
    let (status, _) = http(h, "GET", "/health", b"").await;
    assert_eq!(status, 200);
    let (status, _) = http(h, "GET", "/balance", b"").await;
    assert_eq!(status, 200);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_the_extra_map_show_a_hot_key_and_its_copy() {
    let c = balance_cluster().await;
    let mut a = connect(&c, 0).await;
    assert_eq!(
        a.cmd(&[b"SET", b"hot:k", b"v"]).await,
        Frame::Simple("OK".into())
    );
    // Read the one key (C3, R = 1) until DC 0's root (node 1, the lowest id) lists a copy
    // of it; bounded, not a timing assertion.
    let listed = tokio::time::timeout(PATIENCE, async {
        loop {
            for _ in 0..20 {
                let got = a
                    .cmd(&[
                        b"MERIDIAN.GET",
                        b"hot:k",
                        b"R",
                        b"1",
                        b"READ_FANOUT",
                        b"quorum",
                    ])
                    .await;
                assert!(matches!(got, Frame::Array(_)), "{got:?}");
            }
            let map = c.node(0).extra_map();
            if let Some((_, holders)) = map.copies.iter().find(|(k, _)| k == b"hot:k") {
                return holders.clone();
            }
        }
    })
    .await
    .expect("the hot key got an extra copy");
    assert!(!listed.is_empty());

    let h = c.members[0].http.unwrap();
    let (_, body) = http(h, "GET", "/balance", b"").await;
    let b = json(&body);
    let keys = b["extra_map"]["keys"].as_array().unwrap();
    let k = keys.iter().find(|k| k["key"] == "hot:k").expect("listed");
    assert_eq!(k["key_hex"], "686f743a6b");
    assert!(!k["holders"].as_array().unwrap().is_empty());
    assert_eq!(b["extra_map"]["root"], 1);
    assert!(b["stats"]["copy_create_ms"]["samples"].as_u64().unwrap() >= 1);

    let (status, text) = http(h, "GET", "/metrics", b"").await;
    assert_eq!(status, 200);
    for (metric, kind) in [
        ("meridian_read_queue", "gauge"),
        ("meridian_replica_chosen_total", "counter"),
        ("meridian_replica_outstanding", "gauge"),
        ("meridian_replica_reported_queue", "gauge"),
        ("meridian_extra_copies", "gauge"),
        ("meridian_extra_reads_total", "counter"),
        ("meridian_extra_misses_total", "counter"),
        ("meridian_duplicate_services_total", "counter"),
        ("meridian_deferred_cancelled_total", "counter"),
        ("meridian_c3_overloads_total", "counter"),
        ("meridian_copy_create_ms", "gauge"),
        ("meridian_copy_create_samples", "gauge"),
        ("meridian_sketch_error_bound", "gauge"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {metric} {kind}\n")),
            "{metric}:\n{text}"
        );
    }
    assert!(sample(&text, "meridian_read_queue").is_some(), "{text}");
    assert!(sample(&text, "meridian_copy_create_samples").unwrap() >= 1);
    assert!(
        sample(&text, "meridian_copy_create_ms{quantile=\"0.99\"}").is_some(),
        "{text}"
    );
    // The holder's own series count its copy.
    let holder = listed[0].0 as usize - 1;
    let held = c.states[holder].render_metrics();
    assert!(sample(&held, "meridian_extra_copies").is_some(), "{held}");
    c.shutdown().await;
}
