//! Client-supplied causal and temporal metadata over RESP (issue 36), on an embedded 1-DC ×
//! 3-node cluster (every node a primary of every key, so the node a client talks to
//! coordinates its writes): a context forging the coordinator's own counter is refused
//! naming the context, a context forging another replica's counter cannot hide that
//! replica's later writes, and huge `TIMEOUT`/`HEDGE_MS` values are refused naming the
//! option. After each attack every node reads the newest value (the replicas converge).

use super::cluster_mode::connect;
use super::*;
use meridian_server::cluster::Embedded;

/// `meridian up --dcs 1 --nodes-per-dc 3`, on port 0 with ideal links.
async fn three_nodes() -> Embedded {
    crate::start_serving(one_dc_three_nodes(), Duration::from_secs(60))
        .await
        .unwrap()
}

fn error(f: Frame) -> String {
    match f {
        Frame::Error(e) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// The context and the values (sorted) of a `MERIDIAN.GET` reply.
fn context_and_values(f: Frame) -> (Vec<u8>, Vec<Frame>) {
    let Frame::Array(mut parts) = f else {
        panic!("expected an array, got {f:?}")
    };
    let Some(Frame::Array(mut values)) = parts.pop() else {
        panic!("values must be an array")
    };
    values.sort_by_key(|v| format!("{v:?}"));
    let Some(Frame::Bulk(ctx)) = parts.pop() else {
        panic!("a context")
    };
    (ctx.to_vec(), values)
}

/// The forgery: the context's last varint (the counter of its last entry) replaced
/// by u64::MAX.
fn with_last_counter_max(ctx: &[u8]) -> Vec<u8> {
    assert!(ctx.last().is_some_and(|b| b & 0x80 == 0) && ctx[ctx.len() - 2] & 0x80 == 0);
    let mut forged = ctx[..ctx.len() - 1].to_vec();
    forged.extend_from_slice(&[0xff; 9]);
    forged.push(0x01);
    forged
}

async fn put_all(c: &mut Raw, key: &[u8], value: &[u8]) {
    let reply = c.cmd(&[b"MERIDIAN.PUT", key, value, b"W", b"all"]).await;
    assert!(matches!(reply, Frame::Bulk(_)), "{reply:?}");
}

/// Every node reads exactly `want` for `key` with R = all.
async fn every_node_reads(c: &Embedded, key: &[u8], want: &[&str]) {
    let want: Vec<Frame> = want.iter().map(|v| bulk(v)).collect();
    for i in 0..3 {
        let mut n = connect(c, i).await;
        let (_, values) = context_and_values(n.cmd(&[b"MERIDIAN.GET", key, b"R", b"all"]).await);
        assert_eq!(values, want, "node {i}");
        assert_eq!(
            n.cmd(&[b"GET", key]).await,
            want[want.len() - 1],
            "node {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_forging_the_coordinators_counter_is_refused_and_nothing_is_lost() {
    let c = three_nodes().await;
    let mut a = connect(&c, 0).await;
    put_all(&mut a, b"k", b"v1").await;
    let (ctx, values) = context_and_values(a.cmd(&[b"MERIDIAN.GET", b"k", b"R", b"all"]).await);
    assert_eq!(values, vec![bulk("v1")]);
    let forged = with_last_counter_max(&ctx);
    let e = error(
        a.cmd(&[b"MERIDIAN.PUT", b"k", b"evil", b"CONTEXT", &forged])
            .await,
    );
    assert_eq!(
        e,
        "ERR invalid_context invalid CONTEXT: claims counter 18446744073709551615 for this \
         coordinator, which has issued at most 1"
    );
    // Nothing was written: the key still reads v1, and later writes land everywhere.
    every_node_reads(&c, b"k", &["v1"]).await;
    put_all(&mut a, b"k", b"v2").await;
    assert_eq!(
        a.cmd(&[b"SET", b"k", b"v3"]).await,
        Frame::Simple("OK".into())
    );
    every_node_reads(&c, b"k", &["v3"]).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_forging_another_replicas_counter_cannot_hide_its_later_writes() {
    let c = three_nodes().await;
    let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 1).await);
    // Node 0 coordinates v1; its context names node 0's replica only.
    put_all(&mut a, b"k", b"v1").await;
    let (ctx, _) = context_and_values(a.cmd(&[b"MERIDIAN.GET", b"k", b"R", b"all"]).await);
    // Sent to node 1, the forged entry is another replica's: capped, so the write is taken
    // as one that saw v1 (what node 1 can vouch for).
    let forged = with_last_counter_max(&ctx);
    let reply = b
        .cmd(&[
            b"MERIDIAN.PUT",
            b"k",
            b"w1",
            b"CONTEXT",
            &forged,
            b"W",
            b"all",
        ])
        .await;
    assert!(matches!(reply, Frame::Bulk(_)), "{reply:?}");
    every_node_reads(&c, b"k", &["w1"]).await;
    // Node 0's next write is not hidden by the claim that node 0's future was seen.
    let (ctx, _) = context_and_values(a.cmd(&[b"MERIDIAN.GET", b"k", b"R", b"all"]).await);
    let reply = a
        .cmd(&[b"MERIDIAN.PUT", b"k", b"v2", b"CONTEXT", &ctx, b"W", b"all"])
        .await;
    assert!(matches!(reply, Frame::Bulk(_)), "{reply:?}");
    every_node_reads(&c, b"k", &["v2"]).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_timeout_and_hedge_values_are_refused_naming_the_option() {
    let c = three_nodes().await;
    let mut a = connect(&c, 0).await;
    let huge = u64::MAX.to_string();
    let huge = huge.as_bytes();
    let e = error(a.cmd(&[b"MERIDIAN.GET", b"k", b"TIMEOUT", huge]).await);
    assert!(
        e.starts_with("ERR invalid timeout '18446744073709551615'"),
        "{e}"
    );
    let e = error(
        a.cmd(&[b"MERIDIAN.PUT", b"k", b"v", b"TIMEOUT", huge])
            .await,
    );
    assert!(e.starts_with("ERR invalid timeout"), "{e}");
    let e = error(a.cmd(&[b"MERIDIAN.GET", b"k", b"HEDGE_MS", huge]).await);
    assert!(e.starts_with("ERR invalid hedge_ms"), "{e}");
    // The node still serves.
    put_all(&mut a, b"k", b"v").await;
    every_node_reads(&c, b"k", &["v"]).await;
    c.shutdown().await;
}
