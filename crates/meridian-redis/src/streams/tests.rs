//! The stream commands over both paths of `crate::collection` (a view of bytes and a view
//! that keeps objects), against Redis 7.0's replies.

use super::*;
use crate::args::OwnedArgs;
use crate::test_view::TestView;

fn run(v: &mut TestView, line: &str) -> String {
    let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    let owned = OwnedArgs::from_slices(parts.iter().copied());
    let cmd = Cmd::lookup(parts[0]).expect("a known command");
    let mut reply = Reply::new(64);
    if let Err(e) = exec_on_view(cmd, owned.get(), v, &mut reply) {
        reply.command_error(e);
    }
    String::from_utf8_lossy(&reply.out).into_owned()
}

fn views() -> [TestView; 2] {
    [TestView::new(), TestView::holding()]
}

#[test]
fn xadd_generates_ids_from_the_clock_and_never_goes_back() {
    for mut v in views() {
        // The view's clock is at 10 000 ms.
        assert_eq!(run(&mut v, "XADD s * f v"), "$7\r\n10000-0\r\n");
        assert_eq!(run(&mut v, "XADD s * f v"), "$7\r\n10000-1\r\n");
        assert_eq!(run(&mut v, "XADD s 20000-* f v"), "$7\r\n20000-0\r\n");
        assert_eq!(run(&mut v, "XADD s 20000-* f v"), "$7\r\n20000-1\r\n");
        assert_eq!(run(&mut v, "XADD s * f v"), "$7\r\n20000-2\r\n");
        assert!(run(&mut v, "XADD s 5-0 f v").contains("equal or smaller"));
        assert!(run(&mut v, "XADD t 0-0 f v").contains("greater than 0-0"));
        assert!(v.load(b"t").unwrap().is_none());
        assert_eq!(run(&mut v, "XLEN s"), ":5\r\n");
        assert!(run(&mut v, "XADD s * f").contains("wrong number of arguments for 'xadd'"));
        assert_eq!(run(&mut v, "XADD n NOMKSTREAM * f v"), "$-1\r\n");
        assert!(
            run(
                &mut v,
                "XADD s 18446744073709551615-18446744073709551615 f v"
            )
            .starts_with('$')
        );
        assert!(run(&mut v, "XADD s * f v").contains("exhausted the last possible ID"));
    }
}

#[test]
fn xrange_counts_and_exclusive_ends() {
    for mut v in views() {
        for i in 1..=5 {
            run(&mut v, &format!("XADD s {i}-0 f {i}"));
        }
        assert_eq!(
            run(&mut v, "XRANGE s (1-0 (3-0"),
            "*1\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$1\r\n2\r\n"
        );
        assert_eq!(run(&mut v, "XRANGE s - + COUNT 0"), "*-1\r\n");
        assert!(run(&mut v, "XREVRANGE s + - COUNT 2").starts_with("*2\r\n*2\r\n$3\r\n5-0"));
        assert_eq!(run(&mut v, "XRANGE missing - +"), "*0\r\n");
        assert!(run(&mut v, "XRANGE s (- +").contains("Invalid stream ID"));
        assert_eq!(run(&mut v, "XDEL s 2-0 9-0"), ":1\r\n");
        assert!(run(&mut v, "XDEL s 2-0 bad").contains("Invalid stream ID"));
        assert_eq!(run(&mut v, "XLEN s"), ":4\r\n");
        assert_eq!(run(&mut v, "XTRIM s MAXLEN 2"), ":2\r\n");
        assert!(run(&mut v, "XTRIM s MAXLEN 1 LIMIT 3").contains("without the special ~"));
        assert!(run(&mut v, "XTRIM s LIMIT 3").contains("LIMIT cannot be used without specifying"));
    }
}

#[test]
fn a_stream_emptied_by_trimming_still_exists() {
    for mut v in views() {
        run(&mut v, "XADD s MAXLEN 0 1-0 f v");
        assert_eq!(run(&mut v, "XLEN s"), ":0\r\n");
        assert!(v.load(b"s").unwrap().is_some());
        assert!(run(&mut v, "XADD s 1-0 f v").contains("equal or smaller"));
        assert_eq!(run(&mut v, "XSETID s 5-0"), "+OK\r\n");
        assert!(run(&mut v, "XSETID missing 5-0").contains("no such key"));
    }
}

#[test]
fn consumer_groups_deliver_ack_and_claim() {
    for mut v in views() {
        assert!(run(&mut v, "XGROUP CREATE s g $").contains("requires the key to exist"));
        assert_eq!(run(&mut v, "XGROUP CREATE s g $ MKSTREAM"), "+OK\r\n");
        assert!(run(&mut v, "XGROUP CREATE s g $").contains("BUSYGROUP"));
        for i in 1..=3 {
            run(&mut v, &format!("XADD s {i}-0 f {i}"));
        }
        let got = run(&mut v, "XREADGROUP GROUP g alice COUNT 2 STREAMS s >");
        assert!(got.starts_with("*1\r\n*2\r\n$1\r\ns\r\n*2\r\n"), "{got}");
        assert_eq!(run(&mut v, "XPENDING s g").lines().nth(1), Some(":2"));
        // History: the consumer's own pending entries after the ID.
        let hist = run(&mut v, "XREADGROUP GROUP g alice STREAMS s 0");
        assert!(hist.contains("1-0") && hist.contains("2-0") && !hist.contains("3-0"));
        assert_eq!(run(&mut v, "XACK s g 1-0 1-0"), ":1\r\n");
        assert!(run(&mut v, "XACK s g 1-0 bad").contains("Invalid stream ID"));
        assert_eq!(
            run(&mut v, "XCLAIM s g bob 0 2-0 JUSTID"),
            "*1\r\n$3\r\n2-0\r\n"
        );
        assert_eq!(run(&mut v, "XGROUP DELCONSUMER s g bob"), ":1\r\n");
        assert_eq!(run(&mut v, "XPENDING s g").lines().nth(1), Some(":0"));
        assert!(run(&mut v, "XREADGROUP GROUP nope c STREAMS s >").starts_with("-NOGROUP"));
        assert!(run(&mut v, "XREADGROUP GROUP g c STREAMS s $").contains("meaningless"));
        // Nothing new: the null array (a blocking caller would wait instead).
        run(&mut v, "XREADGROUP GROUP g alice STREAMS s >");
        assert_eq!(
            run(&mut v, "XREADGROUP GROUP g alice STREAMS s >"),
            "*-1\r\n"
        );
        let info = run(&mut v, "XINFO GROUPS s");
        assert!(info.contains("last-delivered-id\r\n$3\r\n3-0"), "{info}");
        assert!(run(&mut v, "XGROUP FOO s g").contains("unknown subcommand 'FOO'"));
        assert!(run(&mut v, "XGROUP DESTROY s").contains("'xgroup|destroy'"));
    }
}

#[test]
fn xautoclaim_is_a_cursor_and_reports_deleted_entries() {
    for mut v in views() {
        run(&mut v, "XGROUP CREATE s g $ MKSTREAM");
        for i in 1..=4 {
            run(&mut v, &format!("XADD s {i}-0 f {i}"));
        }
        run(&mut v, "XREADGROUP GROUP g a STREAMS s >");
        run(&mut v, "XDEL s 2-0");
        let r = run(&mut v, "XAUTOCLAIM s g b 0 - COUNT 2 JUSTID");
        assert_eq!(
            r,
            "*3\r\n$3\r\n3-0\r\n*1\r\n$3\r\n1-0\r\n*1\r\n$3\r\n2-0\r\n"
        );
        let r = run(&mut v, "XAUTOCLAIM s g b 0 3-0 COUNT 5 JUSTID");
        assert_eq!(
            r,
            "*3\r\n$3\r\n0-0\r\n*2\r\n$3\r\n3-0\r\n$3\r\n4-0\r\n*0\r\n"
        );
        assert!(run(&mut v, "XAUTOCLAIM s g b 0 - COUNT 0").contains("COUNT must be > 0"));
    }
}

#[test]
fn the_stored_form_round_trips_and_refuses_garbage() {
    let mut v = TestView::holding();
    run(&mut v, "XGROUP CREATE s g $ MKSTREAM");
    for i in 1..=250 {
        run(&mut v, &format!("XADD s {i}-0 f {i} g x"));
    }
    run(&mut v, "XDEL s 7-0 150-0");
    run(&mut v, "XREADGROUP GROUP g a COUNT 10 STREAMS s >");
    let s = collection::peek::<Stream, TestView, _>(&mut v, b"s", Clone::clone)
        .unwrap()
        .unwrap();
    let bytes = Bytes::from(encoding::encode(&s));
    let back = encoding::decode(&bytes).unwrap();
    assert_eq!(back.live_items(), s.live_items());
    assert_eq!(back.groups, s.groups);
    assert_eq!(
        (back.last_id, back.first_id, back.max_deleted),
        (s.last_id, s.first_id, s.max_deleted)
    );
    assert_eq!(back.node_count(), s.node_count());
    for cut in [0, 1, 5, bytes.len() / 2, bytes.len() - 1] {
        assert!(encoding::decode(&bytes.slice(..cut)).is_err(), "cut {cut}");
    }
    let mut flipped = bytes.to_vec();
    for i in (0..flipped.len()).step_by(7) {
        flipped[i] ^= 0x5a;
        let _ = encoding::decode(&Bytes::from(flipped.clone()));
    }
}
