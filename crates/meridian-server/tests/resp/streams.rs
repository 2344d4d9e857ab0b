//! Streams end to end over RESP: blocked XREAD and XREADGROUP served as Redis serves them
//! (first blocked first served, `$` fixed when blocking, one reply for the ready key), the
//! errors that end a blocked group reader (its group destroyed, its key deleted), hostile
//! arguments, and cluster mode (the default timeline bucket serves streams from both DCs;
//! an eventual bucket refuses their writes with the reason; BLOCK is refused with what to
//! use instead).

use super::cluster_mode::{connect, timeline_cluster};
use super::collections::wait_blocked;
use super::*;
use meridian_replication::BucketProps;

fn error(f: &Frame) -> String {
    match f {
        Frame::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// `[[key, [[id, [field, value]]...]]]`, one entry per `(id, field, value)`.
fn read_reply(key: &str, entries: &[(&str, &str, &str)]) -> Frame {
    let items = entries
        .iter()
        .map(|(id, f, v)| Frame::Array(vec![bulk(id), Frame::Array(vec![bulk(f), bulk(v)])]))
        .collect();
    Frame::Array(vec![Frame::Array(vec![bulk(key), Frame::Array(items)])])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_readers_are_served_by_the_write_that_readies_their_key() {
    let s = Server::default().await;
    let (mut reader, mut group_a, mut group_b, mut w) = (
        s.connect().await,
        s.connect().await,
        s.connect().await,
        s.connect().await,
    );
    w.roundtrip(b"XADD s 1-0 f old\r\n", b"$3\r\n1-0\r\n").await;
    w.roundtrip(b"XGROUP CREATE s g $\r\n", b"+OK\r\n").await;
    // `$` is the last ID when the reader blocks: the old entry is never served.
    reader.send(b"XREAD BLOCK 0 STREAMS other s $ $\r\n").await;
    wait_blocked(&mut w, 1).await;
    group_a
        .send(b"XREADGROUP GROUP g a BLOCK 0 STREAMS s >\r\n")
        .await;
    wait_blocked(&mut w, 2).await;
    group_b
        .send(b"XREADGROUP GROUP g b BLOCK 0 STREAMS s >\r\n")
        .await;
    wait_blocked(&mut w, 3).await;
    // One entry: every plain reader sees it, the first blocked group reader owns it.
    w.roundtrip(b"XADD s 2-0 f new\r\n", b"$3\r\n2-0\r\n").await;
    assert_eq!(
        reader.frame().await,
        read_reply("s", &[("2-0", "f", "new")])
    );
    assert_eq!(
        group_a.frame().await,
        read_reply("s", &[("2-0", "f", "new")])
    );
    wait_blocked(&mut w, 1).await;
    w.roundtrip(b"XADD s 3-0 f next\r\n", b"$3\r\n3-0\r\n")
        .await;
    assert_eq!(
        group_b.frame().await,
        read_reply("s", &[("3-0", "f", "next")])
    );
    // Each owns what it was given.
    let Frame::Array(summary) = w.cmd(&[b"XPENDING", b"s", b"g"]).await else {
        panic!("XPENDING answers an array");
    };
    assert_eq!(summary[0], Frame::Integer(2));
    // A timeout answers the null array; a reader with history is served at once.
    reader
        .roundtrip(b"XREAD BLOCK 50 STREAMS s $\r\n", b"*-1\r\n")
        .await;
    let hist = group_a
        .cmd(&[
            b"XREADGROUP",
            b"GROUP",
            b"g",
            b"a",
            b"BLOCK",
            b"0",
            b"STREAMS",
            b"s",
            b"0",
        ])
        .await;
    assert_eq!(hist, read_reply("s", &[("2-0", "f", "new")]));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_group_reader_fails_when_its_group_or_key_goes() {
    let s = Server::default().await;
    let (mut r1, mut r2, mut w) = (s.connect().await, s.connect().await, s.connect().await);
    w.roundtrip(b"XGROUP CREATE s g $ MKSTREAM\r\n", b"+OK\r\n")
        .await;
    r1.send(b"XREADGROUP GROUP g a BLOCK 0 STREAMS s >\r\n")
        .await;
    wait_blocked(&mut w, 1).await;
    w.roundtrip(b"XGROUP DESTROY s g\r\n", b":1\r\n").await;
    assert!(error(&r1.frame().await).starts_with("NOGROUP"));
    w.roundtrip(b"XGROUP CREATE s g $\r\n", b"+OK\r\n").await;
    r2.send(b"XREADGROUP GROUP g a BLOCK 0 STREAMS s >\r\n")
        .await;
    wait_blocked(&mut w, 1).await;
    w.roundtrip(b"DEL s\r\n", b":1\r\n").await;
    assert_eq!(
        error(&r2.frame().await),
        "UNBLOCKED the stream key no longer exists"
    );
    // A plain reader outlives its key and is served by the next stream there.
    r1.send(b"XREAD BLOCK 0 STREAMS s 0\r\n").await;
    wait_blocked(&mut w, 1).await;
    w.roundtrip(b"SET s str\r\nDEL s\r\n", b"+OK\r\n:1\r\n")
        .await;
    w.roundtrip(b"XADD s 5-0 f v\r\n", b"$3\r\n5-0\r\n").await;
    assert_eq!(r1.frame().await, read_reply("s", &[("5-0", "f", "v")]));
    let info = w.cmd(&[b"INFO", b"errorstats"]).await;
    assert!(
        format!("{info:?}").contains("errorstat_NOGROUP:count=1"),
        "{info:?}"
    );
    s.stop().await;
}

#[tokio::test]
async fn hostile_stream_arguments_are_refused_and_the_node_stays_up() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    let long_id = format!("{}-1", "9".repeat(200));
    for bad in [
        vec![&b"XADD"[..], b"s", long_id.as_bytes(), b"f", b"v"],
        vec![b"XADD", b"s", b"18446744073709551616-0", b"f", b"v"],
        vec![b"XADD", b"s", b"MAXLEN", b"-1", b"*", b"f", b"v"],
        vec![
            b"XADD",
            b"s",
            b"MAXLEN",
            b"~",
            b"9223372036854775808",
            b"*",
            b"f",
            b"v",
        ],
        vec![
            b"XRANGE",
            b"s",
            b"(18446744073709551615-18446744073709551615",
            b"+",
        ],
        vec![b"XREAD", b"COUNT", b"-5", b"STREAMS", b"s"],
        vec![b"XREAD", b"BLOCK", b"-1", b"STREAMS", b"s", b"0"],
        vec![
            b"XREAD",
            b"BLOCK",
            b"9223372036854775807",
            b"STREAMS",
            b"s",
            b"$",
        ],
        vec![
            b"XAUTOCLAIM",
            b"s",
            b"g",
            b"c",
            b"0",
            b"0",
            b"COUNT",
            b"9223372036854775807",
        ],
        vec![b"XPENDING", b"s", b"g", b"IDLE", b"x", b"-", b"+", b"10"],
        vec![b"XSETID", b"s", b"1-0", b"ENTRIESADDED", b"-1"],
        vec![b"XINFO", b"STREAM"],
        vec![
            b"XGROUP",
            b"CREATE",
            b"s",
            b"g",
            b"$",
            b"ENTRIESREAD",
            b"-2",
            b"MKSTREAM",
        ],
    ] {
        let f = c.cmd(&bad).await;
        assert!(matches!(f, Frame::Error(_)), "{bad:?} answered {f:?}");
    }
    // Huge counts are bounds, not allocations.
    c.roundtrip(b"XADD s 1-0 f v\r\n", b"$3\r\n1-0\r\n").await;
    c.roundtrip(
        b"XRANGE s - + COUNT 9223372036854775807\r\n",
        b"*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
    )
    .await;
    c.roundtrip(
        b"XTRIM s MAXLEN ~ 0 LIMIT 9223372036854775807\r\n",
        b":1\r\n",
    )
    .await;
    c.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_streams_live_on_ordered_buckets_and_refuse_what_they_cannot_do() {
    // `meridian up`'s default bucket is a timeline bucket; `ev` is eventual.
    let c = timeline_cluster(vec![("ev".to_owned(), BucketProps::default())]).await;
    let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 3).await);
    assert_eq!(
        a.cmd(&[b"XADD", b"{q}s", b"1-0", b"job", b"1"]).await,
        bulk("1-0")
    );
    assert_eq!(
        b.cmd(&[b"XADD", b"{q}s", b"2-0", b"job", b"2"]).await,
        bulk("2-0")
    );
    // Either DC reads what both wrote, through one master.
    assert_eq!(b.cmd(&[b"XLEN", b"{q}s"]).await, Frame::Integer(2));
    assert_eq!(
        a.cmd(&[b"XGROUP", b"CREATE", b"{q}s", b"workers", b"0"])
            .await,
        Frame::Simple("OK".into())
    );
    let got = b
        .cmd(&[
            b"XREADGROUP",
            b"GROUP",
            b"workers",
            b"w1",
            b"COUNT",
            b"1",
            b"STREAMS",
            b"{q}s",
            b">",
        ])
        .await;
    assert_eq!(got, read_reply("{q}s", &[("1-0", "job", "1")]));
    let got = a
        .cmd(&[
            b"XREADGROUP",
            b"GROUP",
            b"workers",
            b"w2",
            b"STREAMS",
            b"{q}s",
            b">",
        ])
        .await;
    assert_eq!(got, read_reply("{q}s", &[("2-0", "job", "2")]));
    assert_eq!(
        a.cmd(&[b"XACK", b"{q}s", b"workers", b"1-0", b"2-0"]).await,
        Frame::Integer(2)
    );
    // Blocking reads are refused with what to use instead.
    let e = error(
        &a.cmd(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"{q}s", b"$"])
            .await,
    );
    assert!(e.contains("XREAD without BLOCK"), "{e}");
    // An eventual bucket cannot order a stream's writes: refused with the reason.
    let e = error(&a.cmd(&[b"XADD", b"ev:{q}s", b"*", b"f", b"v"]).await);
    assert!(e.contains("eventual"), "{e}");
    c.shutdown().await;
}
