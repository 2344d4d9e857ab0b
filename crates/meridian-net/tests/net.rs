//! Integration tests: the TCP transport on 127.0.0.1 (real time; no test asserts how long
//! anything took, only what happened), and the WAN emulator over TCP.

use bytes::{Bytes, BytesMut};
use meridian_core::{DcId, NodeId};
use meridian_net::envelope::{Challenge, Hello, Welcome};
use meridian_net::tcp::{self, AddressBook, TcpConfig};
use meridian_net::tls::{TlsServer, TlsSettings};
use meridian_net::tls_certs::{CertAuthority, write_pair};
use meridian_net::wan::{DcLink, LinkConfig, Placement, Scope, WanConfig, WanEmulator};
use meridian_net::{
    ClusterSecret, Envelope, FileSlice, FrameCodec, Inbox, Kind, NetError, Payload, Transport,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Encoder;
use tokio_util::sync::CancellationToken;

type Msg = (u64, Vec<u8>);

const LONG: Duration = Duration::from_secs(30);

fn n(i: u32) -> NodeId {
    NodeId(i)
}

struct Node {
    t: Transport<Msg>,
    inbox: Option<Inbox<Msg>>,
    stop: CancellationToken,
    addr: SocketAddr,
}

async fn node(id: u32, book: &AddressBook, config: TcpConfig) -> Node {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    book.set(n(id), addr);
    let stop = CancellationToken::new();
    let (t, inbox) = tcp::start(n(id), listener, book.clone(), config, stop.clone());
    Node {
        t,
        inbox: Some(inbox),
        stop,
        addr,
    }
}

/// The secret the nodes of [`test_config`] share.
const TEST_SECRET: &[u8] = b"the test cluster's secret";

fn test_secret() -> ClusterSecret {
    ClusterSecret::new(TEST_SECRET).unwrap()
}

fn test_config() -> TcpConfig {
    TcpConfig {
        secret: test_secret(),
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(100),
        seed: 1,
        ..TcpConfig::default()
    }
}

/// Answers each request with `body + 1000` after `delay_ms(body)` ms, concurrently.
fn serve(mut inbox: Inbox<Msg>, delay_ms: fn(u64) -> u64) {
    tokio::spawn(async move {
        while let Some(m) = inbox.recv().await {
            if let Some(reply) = m.reply {
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(delay_ms(m.body.0))).await;
                    let _ = reply.respond((m.body.0 + 1000, m.body.1));
                });
            }
        }
    });
}

#[tokio::test]
async fn tcp_multiplexes_concurrent_requests_answered_out_of_order() {
    let book = AddressBook::default();
    let mut a = node(1, &book, test_config()).await;
    let mut b = node(2, &book, test_config()).await;
    serve(b.inbox.take().unwrap(), |i| 50 - i);
    serve(a.inbox.take().unwrap(), |_| 0);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..50u64 {
        let t = a.t.clone();
        set.spawn(async move { (i, t.request(n(2), (i, vec![i as u8; 100]), LONG).await) });
    }
    let mut order = Vec::new();
    while let Some(r) = set.join_next().await {
        let (i, r) = r.unwrap();
        let (v, body) = r.unwrap();
        assert_eq!((v, body), (i + 1000, vec![i as u8; 100]));
        order.push(i);
    }
    assert_ne!(
        order,
        (0..50).collect::<Vec<_>>(),
        "answers came back out of order"
    );
    // And the other way round, plus a one-way message.
    assert_eq!(b.t.request(n(1), (7, vec![]), LONG).await.unwrap().0, 1007);
    assert_eq!(a.t.pending_requests(), 0);
    a.stop.cancel();
    b.stop.cancel();
}

#[tokio::test]
async fn tcp_one_way_messages_arrive_in_order() {
    let book = AddressBook::default();
    let a = node(1, &book, test_config()).await;
    let mut b = node(2, &book, test_config()).await;
    for i in 0..500u64 {
        a.t.send(n(2), (i, vec![1; 10])).unwrap();
    }
    let inbox = b.inbox.as_mut().unwrap();
    for i in 0..500u64 {
        let m = inbox.recv().await.unwrap();
        assert_eq!((m.from, m.body.0, m.reply.is_none()), (n(1), i, true));
    }
}

#[tokio::test]
async fn tcp_request_times_out_when_unanswered() {
    let book = AddressBook::default();
    let a = node(1, &book, test_config()).await;
    let _b = node(2, &book, test_config()).await; // never reads its inbox
    let after = Duration::from_millis(200);
    let r = a.t.request(n(2), (1, vec![]), after).await;
    assert_eq!(r, Err(NetError::Timeout { peer: n(2), after }));
    assert_eq!(a.t.pending_requests(), 0);
}

#[tokio::test]
async fn tcp_down_peer_is_unreachable_at_once_not_at_the_timeout() {
    let book = AddressBook::default();
    let a = node(1, &book, test_config()).await;
    // An address nobody listens on.
    let gone = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    book.set(n(3), gone);
    let r = a.t.request(n(3), (1, vec![]), LONG).await;
    assert!(
        matches!(&r, Err(NetError::Unreachable { peer, reason }) if *peer == n(3) && reason.contains("connect")),
        "{r:?}"
    );
    // While backing off, sends fail at once too.
    assert!(matches!(
        a.t.send(n(3), (2, vec![])),
        Err(NetError::Unreachable { .. })
    ));
    // No address at all.
    let r = a.t.request(n(4), (1, vec![]), LONG).await;
    assert!(
        matches!(&r, Err(NetError::Unreachable { reason, .. }) if reason.contains("address book")),
        "{r:?}"
    );
}

#[tokio::test]
async fn tcp_waiting_requests_fail_when_the_peer_goes_down_and_reconnect_after_restart() {
    let book = AddressBook::default();
    let a = node(1, &book, test_config()).await;
    let b = node(2, &book, test_config()).await; // never answers
    let t = a.t.clone();
    let waiting = tokio::spawn(async move { t.request(n(2), (1, vec![]), LONG).await });
    // Let the request reach b, then crash b.
    while b.t.pending_requests() == 0 && b.inbox.as_ref().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    b.stop.cancel();
    let r = waiting.await.unwrap();
    assert!(
        matches!(&r, Err(NetError::Unreachable { reason, .. }) if reason.contains("connection lost")),
        "{r:?}"
    );
    drop(b);
    // b restarts on a new port; the address book is updated at runtime.
    let mut b2 = node(2, &book, test_config()).await;
    serve(b2.inbox.take().unwrap(), |_| 0);
    let mut attempts = 0;
    let answer = loop {
        attempts += 1;
        match a.t.request(n(2), (5, vec![]), LONG).await {
            Ok(v) => break v,
            Err(NetError::Unreachable { .. }) if attempts < 200 => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("after {attempts} attempts: {e}"),
        }
    };
    assert_eq!(answer.0, 1005);
    assert_ne!(b2.addr, a.addr);
}

#[tokio::test]
async fn tcp_stalled_receiver_makes_send_overloaded() {
    let book = AddressBook::default();
    let a = node(
        1,
        &book,
        TcpConfig {
            send_queue: 16,
            ..test_config()
        },
    )
    .await;
    let _b = node(
        2,
        &book,
        TcpConfig {
            inbox: 4,
            ..test_config()
        },
    )
    .await; // never reads
    let mut accepted = 0usize;
    let err = loop {
        match a.t.send(n(2), (accepted as u64, vec![0; 64 * 1024])) {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted < 20_000, "sends never pushed back");
        tokio::task::yield_now().await;
        if accepted.is_multiple_of(16) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    assert_eq!(
        err,
        NetError::Overloaded {
            peer: n(2),
            queue: "TCP send queue",
            capacity: 16
        }
    );
    // What was accepted is bounded by queues and socket buffers, not by the offered load.
    assert!(
        accepted * 64 * 1024 < 512 * 1024 * 1024,
        "{accepted} messages accepted"
    );
}

async fn raw_connection(addr: SocketAddr, frames: &[Bytes]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    write_frames(&mut s, frames).await;
    s
}

async fn write_frames(s: &mut TcpStream, frames: &[Bytes]) {
    let mut codec = FrameCodec::default();
    let mut buf = BytesMut::new();
    for f in frames {
        codec.encode(f.clone(), &mut buf).unwrap();
    }
    s.write_all(&buf).await.unwrap();
}

/// Reads one frame (the handshake's) from a raw connection.
async fn read_frame(s: &mut TcpStream) -> Bytes {
    use tokio_util::codec::Decoder;
    let mut codec = FrameCodec::default();
    let mut buf = BytesMut::new();
    loop {
        if let Some(f) = codec.decode(&mut buf).unwrap() {
            return f.freeze();
        }
        assert!(
            s.read_buf(&mut buf).await.unwrap() > 0,
            "closed mid-handshake"
        );
    }
}

/// A raw connection that completed the handshake as `node` under `secret`.
async fn raw_peer(addr: SocketAddr, node: NodeId, secret: &ClusterSecret) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let challenge = Challenge::decode(&read_frame(&mut s).await).unwrap();
    write_frames(&mut s, &[Hello::new(node, &challenge, secret).encode()]).await;
    let _welcome = Welcome::decode(&read_frame(&mut s).await).unwrap();
    s
}

/// Whether the peer closes the connection (whatever it sent first, such as its challenge).
async fn closed_by_peer(mut s: TcpStream) -> bool {
    let mut rest = Vec::new();
    tokio::time::timeout(LONG, s.read_to_end(&mut rest))
        .await
        .is_ok()
}

#[tokio::test]
async fn tcp_bad_frames_close_only_their_connection() {
    let book = AddressBook::default();
    let a = node(1, &book, test_config()).await;
    let mut b = node(
        2,
        &book,
        TcpConfig {
            max_frame: 1024,
            ..test_config()
        },
    )
    .await;
    serve(b.inbox.take().unwrap(), |_| 0);
    assert_eq!(a.t.request(n(2), (1, vec![]), LONG).await.unwrap().0, 1001);
    let open = test_secret();
    // Garbage after a valid handshake.
    let mut s = raw_peer(b.addr, n(7), &open).await;
    write_frames(&mut s, &[Bytes::from_static(&[0xff; 20])]).await;
    assert!(closed_by_peer(s).await);
    // Not a Meridian handshake.
    let s = raw_connection(b.addr, &[Bytes::from_static(b"GET / HTTP/1.1")]).await;
    assert!(closed_by_peer(s).await);
    // A frame header announcing more than max_frame.
    let mut s = raw_peer(b.addr, n(7), &open).await;
    s.write_all(&(1_000_000u32).to_be_bytes()).await.unwrap();
    assert!(closed_by_peer(s).await);
    // A frame whose envelope claims another sender.
    let forged = meridian_net::envelope::encode(
        &Envelope::new(Kind::OneWay, n(1), (0u64, Vec::<u8>::new())),
        1024,
    )
    .unwrap();
    let mut s = raw_peer(b.addr, n(7), &open).await;
    write_frames(&mut s, &[forged]).await;
    assert!(closed_by_peer(s).await);
    // A frame announcing a payload beyond max_frame.
    let mut frame = meridian_net::envelope::encode(
        &Envelope::new(Kind::OneWay, n(7), (0u64, Vec::<u8>::new())),
        1024,
    )
    .unwrap()
    .to_vec();
    frame[..4].copy_from_slice(&100_000u32.to_be_bytes());
    let mut s = raw_peer(b.addr, n(7), &open).await;
    write_frames(&mut s, &[Bytes::from(frame.clone())]).await;
    assert!(closed_by_peer(s).await);
    // A payload cut short by the peer closing: nothing is delivered, nothing else breaks.
    frame[..4].copy_from_slice(&500u32.to_be_bytes());
    let mut s = raw_peer(b.addr, n(7), &open).await;
    write_frames(&mut s, &[Bytes::from(frame)]).await;
    s.write_all(&[1u8; 100]).await.unwrap();
    drop(s);
    // The real peer's connection is unaffected.
    assert_eq!(a.t.request(n(2), (2, vec![]), LONG).await.unwrap().0, 1002);
}

#[tokio::test]
async fn tcp_oversized_message_is_refused_to_the_sender() {
    let book = AddressBook::default();
    let a = node(
        1,
        &book,
        TcpConfig {
            max_frame: 1024,
            ..test_config()
        },
    )
    .await;
    let _b = node(2, &book, test_config()).await;
    let r = a.t.send(n(2), (1, vec![0; 2000]));
    assert!(
        matches!(r, Err(NetError::FrameTooLarge { max: 1024, .. })),
        "{r:?}"
    );
}

#[tokio::test]
async fn tcp_shutdown_fails_waiting_requests_with_closed() {
    let book = AddressBook::default();
    let a = node(1, &book, test_config()).await;
    let _b = node(2, &book, test_config()).await;
    let t = a.t.clone();
    let waiting = tokio::spawn(async move { t.request(n(2), (1, vec![]), LONG).await });
    while a.t.pending_requests() == 0 {
        tokio::task::yield_now().await;
    }
    a.stop.cancel();
    assert_eq!(waiting.await.unwrap(), Err(NetError::Closed));
    assert_eq!(a.t.send(n(2), (1, vec![])), Err(NetError::Closed));
}

#[tokio::test]
async fn wan_emulator_wraps_tcp() {
    let book = AddressBook::default();
    let a = node(1, &book, test_config()).await;
    let mut b = node(2, &book, test_config()).await;
    serve(b.inbox.take().unwrap(), |_| 0);
    let wan = WanEmulator::new(WanConfig {
        seed: 3,
        dc_links: vec![DcLink {
            from: DcId(0),
            to: DcId(1),
            both: true,
            link: LinkConfig::wan(Duration::from_millis(20), 0.5),
        }],
        nodes: vec![
            Placement {
                node: n(1),
                dc: DcId(0),
            },
            Placement {
                node: n(2),
                dc: DcId(1),
            },
        ],
        ..WanConfig::default()
    })
    .unwrap();
    a.t.layer(|w| wan.wrap(w));
    b.t.layer(|w| wan.wrap(w));
    for i in 0..20 {
        assert_eq!(
            a.t.request(n(2), (i, vec![]), LONG).await.unwrap().0,
            1000 + i
        );
    }
    wan.control().cut(Scope::Node(n(1)), Scope::Node(n(2)));
    let after = Duration::from_millis(200);
    assert_eq!(
        a.t.request(n(2), (99, vec![]), after).await,
        Err(NetError::Timeout { peer: n(2), after })
    );
    wan.control().heal_all();
    assert_eq!(
        a.t.request(n(2), (100, vec![]), LONG).await.unwrap().0,
        1100
    );
    assert_eq!(wan.control().stats().cut, 1);
}

fn with_secret(secret: &[u8]) -> TcpConfig {
    TcpConfig {
        secret: ClusterSecret::new(secret).unwrap(),
        handshake_timeout: Duration::from_millis(500),
        ..test_config()
    }
}

fn refused(r: Result<Msg, NetError>) -> String {
    match r {
        Err(NetError::Unreachable { reason, .. }) => reason,
        other => panic!("expected the connection to be refused, got {other:?}"),
    }
}

#[tokio::test]
async fn tcp_only_peers_proving_the_cluster_secret_are_served() {
    let book = AddressBook::default();
    let a = node(1, &book, with_secret(b"the cluster secret")).await;
    let mut b = node(2, &book, with_secret(b"the cluster secret")).await;
    let c = node(3, &book, with_secret(b"another cluster's secret")).await;
    let d = node(4, &book, test_config()).await;
    serve(b.inbox.take().unwrap(), |_| 0);
    assert_eq!(a.t.request(n(2), (1, vec![]), LONG).await.unwrap().0, 1001);
    // A node with another secret, or none, is refused (both ways).
    let why = refused(c.t.request(n(2), (2, vec![]), LONG).await);
    assert!(why.contains("refused our handshake"), "{why}");
    refused(d.t.request(n(2), (3, vec![]), LONG).await);
    let why = refused(a.t.request(n(3), (4, vec![]), LONG).await);
    assert!(why.contains("n3 refused our handshake"), "{why}");

    // Raw attackers: a forged proof, a handshake replayed on another connection, silence.
    let challenge = {
        let mut s = TcpStream::connect(b.addr).await.unwrap();
        let challenge = Challenge::decode(&read_frame(&mut s).await).unwrap();
        let mut hello = Hello::new(n(1), &challenge, &test_secret());
        hello.proof = [7; 32];
        write_frames(&mut s, &[hello.encode()]).await;
        assert!(closed_by_peer(s).await, "forged proof");
        challenge
    };
    let secret = ClusterSecret::new(b"the cluster secret").unwrap();
    let recorded = Hello::new(n(1), &challenge, &secret);
    let mut s = TcpStream::connect(b.addr).await.unwrap();
    let _fresh = read_frame(&mut s).await;
    write_frames(&mut s, &[recorded.encode()]).await;
    assert!(closed_by_peer(s).await, "replayed handshake");
    let s = TcpStream::connect(b.addr).await.unwrap();
    assert!(
        closed_by_peer(s).await,
        "no handshake within handshake_timeout"
    );
    // The real peer's connection is unaffected.
    assert_eq!(a.t.request(n(2), (5, vec![]), LONG).await.unwrap().0, 1005);
}

#[tokio::test]
async fn tcp_connector_sends_nothing_to_an_acceptor_without_the_secret() {
    let book = AddressBook::default();
    let a = node(1, &book, with_secret(b"the cluster secret")).await;
    // An impostor listening at n9's address: it challenges, reads the hello, answers a bogus
    // welcome, then reports whatever else arrived before the connector hung up.
    let impostor = TcpListener::bind("127.0.0.1:0").await.unwrap();
    book.set(n(9), impostor.local_addr().unwrap());
    let seen = tokio::spawn(async move {
        let (mut s, _) = impostor.accept().await.unwrap();
        write_frames(&mut s, &[Challenge::new().encode()]).await;
        let _hello = Hello::decode(&read_frame(&mut s).await).unwrap();
        write_frames(&mut s, &[Welcome { proof: [0; 32] }.encode()]).await;
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(LONG, s.read_to_end(&mut rest)).await;
        rest
    });
    let why = refused(
        a.t.request(n(9), (1, b"a secret value".to_vec()), LONG)
            .await,
    );
    assert!(why.contains("did not prove the cluster secret"), "{why}");
    assert!(
        seen.await.unwrap().is_empty(),
        "no request frame reached the impostor"
    );
}

/// Echoes each request's payload back: from memory when the request's id is even, from a
/// file (sent with sendfile) when it is odd.
fn serve_payloads(mut inbox: Inbox<Msg>, dir: std::path::PathBuf) {
    tokio::spawn(async move {
        while let Some(m) = inbox.recv().await {
            let Some(reply) = m.reply else { continue };
            let Some(p) = m
                .payload
                .or_else(|| (m.body.0 < 2).then(|| Payload::bytes(Bytes::new())))
            else {
                let _ = reply.respond((m.body.0 + 1000, Vec::new()));
                continue;
            };
            let bytes = p.into_bytes().await.unwrap();
            let payload = if m.body.0 % 2 == 0 {
                Payload::bytes(bytes)
            } else {
                let path = dir.join(format!("chunk-{}", m.body.0));
                // A header before the range, as a chunk file has its digest first.
                let mut contents = b"HEADER".to_vec();
                contents.extend_from_slice(&bytes);
                std::fs::write(&path, &contents).unwrap();
                let file = std::sync::Arc::new(std::fs::File::open(&path).unwrap());
                Payload::file(FileSlice::new(file, 6, bytes.len() as u64))
            };
            let _ = reply.respond_with((m.body.0, Vec::new()), Some(payload.on_stream(1)));
        }
    });
}

#[tokio::test]
async fn tcp_payloads_round_trip_from_memory_and_by_sendfile_with_identical_bytes() {
    payloads_round_trip(test_config(), "plain").await;
}

/// Sends payloads of several sizes from memory and has them echoed from memory and from a
/// file, on bulk lanes and on the control connection, with `base`'s other settings.
async fn payloads_round_trip(base: TcpConfig, tag: &str) {
    let dir = std::env::temp_dir().join(format!(
        "meridian-net-sendfile-{tag}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for lanes in [4u8, 0] {
        let book = AddressBook::default();
        let config = TcpConfig {
            bulk_lanes: lanes,
            max_frame: 8 << 20,
            ..base.clone()
        };
        let a = node(1, &book, config.clone()).await;
        let mut b = node(2, &book, config).await;
        serve_payloads(b.inbox.take().unwrap(), dir.clone());
        // Sizes around the socket buffer and the batching threshold, and an empty payload.
        let sizes = [0usize, 1, 65_537, 256 * 1024 + 3, 5 << 20];
        let mut calls = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            for via_file in [false, true] {
                let id = (i as u64) * 2 + u64::from(via_file);
                let bytes: Bytes = (0..size).map(|j| (j * 31 + i) as u8).collect();
                let t = a.t.clone();
                calls.push(tokio::spawn(async move {
                    let payload = Payload::bytes(bytes.clone()).on_stream(id as u32);
                    let (body, back) = t
                        .request_with(n(2), (id, vec![]), Some(payload), LONG)
                        .await
                        .unwrap();
                    assert_eq!(body.0, id);
                    let back = match back {
                        Some(p) => p.into_bytes().await.unwrap(),
                        None => Bytes::new(),
                    };
                    assert_eq!(back.len(), bytes.len(), "request {id}");
                    assert!(back == bytes, "request {id}: the bytes differ");
                }));
            }
            // Control traffic keeps flowing beside the bulk transfers.
            assert_eq!(a.t.request(n(2), (99, vec![]), LONG).await.unwrap().0, 1099);
        }
        for c in calls {
            c.await.unwrap();
        }
        a.stop.cancel();
        b.stop.cancel();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cluster CA written under `dir`, issuing node certificates for peer links.
struct PeerCa {
    dir: std::path::PathBuf,
    ca: CertAuthority,
    ca_file: std::path::PathBuf,
}

impl PeerCa {
    fn new(dir: std::path::PathBuf, name: &str) -> Self {
        let ca = CertAuthority::new(name).unwrap();
        let (ca_file, _) = write_pair(&dir, name, ca.pem()).unwrap();
        Self { dir, ca, ca_file }
    }

    /// Peer-link TLS for node `name`. The certificate names `localhost` only, while peers
    /// dial 127.0.0.1: the chain is what is checked, not the name.
    fn peer_tls(&self, name: &str) -> Arc<TlsServer> {
        let pem = self.ca.issue(name, &["localhost"]).unwrap();
        let (cert_file, key_file) = write_pair(&self.dir, name, &pem).unwrap();
        let settings = TlsSettings {
            cert_file,
            key_file,
            ca_cert_file: Some(self.ca_file.clone()),
            ..TlsSettings::default()
        };
        Arc::new(TlsServer::with_peers(settings).unwrap())
    }

    fn config(&self, name: &str) -> TcpConfig {
        TcpConfig {
            tls: Some(self.peer_tls(name)),
            ..test_config()
        }
    }
}

/// Waits until the acceptor has counted `n` failed handshakes (it counts after the other end
/// has already given up), and checks it counts no more.
async fn failures_reach(stats: &meridian_net::tcp::TcpStats, n: u64) {
    tokio::time::timeout(LONG, async {
        while stats.handshakes_failed() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the failed handshake is counted");
    assert_eq!(stats.handshakes_failed(), n);
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("meridian-net-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn tcp_tls_peer_links_carry_requests_and_payloads_from_memory_and_files() {
    let dir = temp_dir("tls-payloads");
    let ca = PeerCa::new(dir.clone(), "cluster-ca");
    payloads_round_trip(ca.config("node"), "tls").await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn tcp_tls_refuses_plaintext_and_wrong_ca_peers() {
    let dir = temp_dir("tls-refusals");
    let ca = PeerCa::new(dir.join("good"), "cluster-ca");
    let other = PeerCa::new(dir.join("other"), "other-ca");
    let book = AddressBook::default();
    let config = ca.config("n2");
    let stats = config.stats.clone();
    let mut b = node(2, &book, config).await;
    serve(b.inbox.take().unwrap(), |_| 0);

    // A member of the cluster (same CA, same secret) is served.
    let good = node(1, &book, ca.config("n1")).await;
    assert_eq!(
        good.t.request(n(2), (1, vec![]), LONG).await.unwrap().0,
        1001
    );
    assert_eq!(stats.handshakes_failed(), 0);

    // Knowing the secret is not enough: a plaintext peer fails the TLS handshake.
    let quick = || TcpConfig {
        handshake_timeout: Duration::from_secs(1),
        ..test_config()
    };
    let plain = node(3, &book, quick()).await;
    refused(plain.t.request(n(2), (1, vec![]), LONG).await);
    failures_reach(&stats, 1).await;

    // Nor is a certificate from another CA, in either direction.
    let stranger = node(4, &book, other.config("n4")).await;
    refused(stranger.t.request(n(2), (1, vec![]), LONG).await);
    failures_reach(&stats, 2).await;
    let mut plain_server = node(5, &book, quick()).await;
    serve(plain_server.inbox.take().unwrap(), |_| 0);
    let why = refused(good.t.request(n(5), (1, vec![]), LONG).await);
    assert!(why.contains("TLS"), "{why}");

    // A raw client that skips TLS and speaks the secret handshake is closed unanswered.
    let mut s = TcpStream::connect(b.addr).await.unwrap();
    s.write_all(b"\0\0\0\x10not a TLS record").await.unwrap();
    assert!(closed_by_peer(s).await);
    failures_reach(&stats, 3).await;
    // The member is still served.
    assert_eq!(
        good.t.request(n(2), (2, vec![]), LONG).await.unwrap().0,
        1002
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A CA read back from its files (as `meridian tls gen --ca DIR` does) issues certificates
/// that peers holding certificates of the original accept, and the other way round.
#[tokio::test]
async fn tcp_tls_a_ca_loaded_from_its_files_issues_certificates_its_peers_accept() {
    let dir = temp_dir("tls-loaded-ca");
    let original = PeerCa::new(dir.join("a"), "cluster-ca");
    let pem = meridian_net::tls_certs::CertPem {
        cert: std::fs::read_to_string(&original.ca_file).unwrap(),
        key: std::fs::read_to_string(dir.join("a/cluster-ca.key")).unwrap(),
    };
    let loaded = PeerCa {
        dir: dir.join("b"),
        ca: CertAuthority::load("cluster-ca", pem).unwrap(),
        ca_file: original.ca_file.clone(),
    };
    let book = AddressBook::default();
    let config = loaded.config("n2");
    let stats = config.stats.clone();
    let mut b = node(2, &book, config).await;
    serve(b.inbox.take().unwrap(), |_| 0);
    let mut a = node(1, &book, original.config("n1")).await;
    serve(a.inbox.take().unwrap(), |_| 0);
    assert_eq!(a.t.request(n(2), (1, vec![]), LONG).await.unwrap().0, 1001);
    assert_eq!(b.t.request(n(1), (2, vec![]), LONG).await.unwrap().0, 1002);
    assert_eq!(stats.handshakes_failed(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tls_peer_links_need_the_cluster_ca() {
    let dir = temp_dir("tls-no-ca");
    let ca = PeerCa::new(dir.clone(), "cluster-ca");
    let pem = ca.ca.issue("n1", &["localhost"]).unwrap();
    let (cert_file, key_file) = write_pair(&dir, "n1", &pem).unwrap();
    let settings = TlsSettings {
        cert_file,
        key_file,
        auth_clients: meridian_net::tls::ClientAuth::No,
        ..TlsSettings::default()
    };
    assert!(
        TlsServer::new(settings.clone()).is_ok(),
        "a listener without client certificates needs no CA"
    );
    let e = TlsServer::with_peers(settings).unwrap_err().to_string();
    assert!(e.contains("tls-ca-cert-file"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A config whose handshakes wait far longer than any test does: a connection the node
/// closes was closed for what it sent, not at the deadline.
fn patient(max_handshakes: usize) -> TcpConfig {
    TcpConfig {
        handshake_timeout: Duration::from_secs(600),
        max_handshakes,
        ..test_config()
    }
}

#[tokio::test]
async fn tcp_handshake_length_header_beyond_the_handshake_limit_closes_at_once() {
    let book = AddressBook::default();
    let config = patient(64);
    let stats = config.stats.clone();
    let mut b = node(2, &book, config).await;
    serve(b.inbox.take().unwrap(), |_| 0);
    // Before proving anything, a header announcing a 64 MiB frame (within max_frame).
    let mut s = TcpStream::connect(b.addr).await.unwrap();
    let _challenge = Challenge::decode(&read_frame(&mut s).await).unwrap();
    s.write_all(&(64u32 << 20).to_be_bytes()).await.unwrap();
    assert!(
        closed_by_peer(s).await,
        "closed for the header, long before the deadline"
    );
    // The limit sits well above a real handshake, and the first frame is refused as fast.
    let mut s = TcpStream::connect(b.addr).await.unwrap();
    let _challenge = read_frame(&mut s).await;
    let just_over = u32::try_from(tcp::HANDSHAKE_MAX_FRAME + 1).unwrap();
    s.write_all(&just_over.to_be_bytes()).await.unwrap();
    assert!(closed_by_peer(s).await);
    assert_eq!(stats.handshakes_failed(), 2);
    // An authenticated peer still gets max_frame after its handshake.
    let a = node(1, &book, test_config()).await;
    let big = vec![7u8; 1 << 20];
    let (id, echoed) = a.t.request(n(2), (1, big.clone()), LONG).await.unwrap();
    assert_eq!((id, echoed.len()), (1001, big.len()));
}

#[tokio::test]
async fn tcp_concurrent_idle_handshakes_are_bounded_and_a_real_peer_still_connects() {
    let book = AddressBook::default();
    let config = patient(4);
    let stats = config.stats.clone();
    let mut b = node(2, &book, config).await;
    serve(b.inbox.take().unwrap(), |_| 0);
    // Four idle connections take every handshake slot (each got its challenge)...
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(b.addr).await.unwrap();
        let _challenge = Challenge::decode(&read_frame(&mut s).await).unwrap();
        idle.push(s);
    }
    // ...so a fifth is closed at once, without a challenge, and counted.
    let mut s = TcpStream::connect(b.addr).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(LONG, s.read_to_end(&mut got))
        .await
        .expect("the connection over the bound is closed at once")
        .unwrap();
    assert!(
        got.is_empty(),
        "no challenge for a connection over the bound"
    );
    assert_eq!(stats.handshakes_busy(), 1);
    // One idle attacker leaves: its slot frees, and a peer proving the secret connects
    // while the other three still wait.
    drop(idle.pop());
    tokio::time::timeout(LONG, async {
        while stats.handshakes_failed() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    let a = node(1, &book, test_config()).await;
    assert_eq!(a.t.request(n(2), (1, vec![]), LONG).await.unwrap().0, 1001);
    assert_eq!(stats.handshakes_busy(), 1);
    drop(idle);
}

#[tokio::test]
async fn tcp_wrong_secret_is_refused_and_counted() {
    let book = AddressBook::default();
    let config = patient(64);
    let stats = config.stats.clone();
    let b = node(2, &book, config).await;
    let wrong = ClusterSecret::new(b"not the test cluster's secret").unwrap();
    let mut s = TcpStream::connect(b.addr).await.unwrap();
    let challenge = Challenge::decode(&read_frame(&mut s).await).unwrap();
    write_frames(&mut s, &[Hello::new(n(1), &challenge, &wrong).encode()]).await;
    assert!(closed_by_peer(s).await, "closed without a welcome");
    assert_eq!(stats.handshakes_failed(), 1);
    // Transports configured without a secret have random ones: there is no well-known key,
    // so two of them do not reach each other (nor anyone else).
    let c = node(3, &book, TcpConfig::default()).await;
    let mut d = node(4, &book, TcpConfig::default()).await;
    serve(d.inbox.take().unwrap(), |_| 0);
    refused(c.t.request(n(4), (1, vec![]), LONG).await);
    refused(c.t.request(n(2), (1, vec![]), LONG).await);
    assert_eq!(stats.handshakes_failed(), 2);
}
