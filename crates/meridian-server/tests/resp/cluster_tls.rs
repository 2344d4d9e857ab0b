//! Cluster topology over TLS (Redis 7 with `tls-cluster yes`): an embedded 2-DC × 2-node
//! cluster whose nodes serve RESP in plaintext and over TLS tells a client connected over TLS
//! the TLS ports in `CLUSTER SLOTS`, `CLUSTER NODES` and `-MOVED`, and a plaintext client the
//! plaintext ports; `CLUSTER SHARDS` gives both (`port`, `tls-port`) to either. A TLS client
//! that follows the redirect is served there. Members' TLS addresses come from the config's
//! `[[cluster.members]]` `resp_tls`, which must not be port 0.

use super::cluster_slots::{array, int, pairs, parse_slots, text};
use super::tls::{Certs, tls_connect};
use super::*;
use meridian_cluster::slot_of;
use meridian_net::wan::LinkConfig;
use meridian_server::cluster::{Embedded, EmbeddedConfig};
use std::collections::BTreeMap;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::client::TlsStream;

/// A RESP connection over any stream (plain TCP or TLS).
struct Client<S> {
    stream: S,
    buf: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    async fn cmd(&mut self, args: &[&[u8]]) -> Frame {
        let req = Frame::Array(args.iter().map(|a| Frame::bulk(a.to_vec())).collect());
        self.stream.write_all(&req.to_bytes(false)).await.unwrap();
        self.stream.flush().await.unwrap();
        tokio::time::timeout(PATIENCE, async {
            loop {
                if let Some(f) = Frame::parse(&mut self.buf).unwrap() {
                    return f;
                }
                let n = self.stream.read_buf(&mut self.buf).await.unwrap();
                assert!(n > 0, "EOF");
            }
        })
        .await
        .expect("a reply")
    }
}

/// 2 DCs × 2 nodes, each serving RESP in plaintext and over TLS (certificates of `certs`'
/// CA; clients must present one), `-MOVED` for misrouted keys.
async fn tls_cluster(certs: &Certs) -> Embedded {
    let mut cfg = EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        wan_latency: Duration::ZERO,
        intra_dc: LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        ..EmbeddedConfig::default()
    };
    cfg.node.resp.tls_cert_file = Some(certs.path("node.crt"));
    cfg.node.resp.tls_key_file = Some(certs.path("node.key"));
    cfg.node.resp.tls_ca_cert_file = Some(certs.path("ca.crt"));
    meridian_server::cluster::start_embedded(cfg, Duration::from_secs(60))
        .await
        .unwrap()
}

async fn tls_client(certs: &Certs, addr: SocketAddr) -> Client<TlsStream<TcpStream>> {
    let connector = certs.connector("ca", Some("client"));
    Client {
        stream: tls_connect(&connector, addr).await.unwrap(),
        buf: BytesMut::new(),
    }
}

async fn plain_client(addr: SocketAddr) -> Client<TcpStream> {
    Client {
        stream: TcpStream::connect(addr).await.unwrap(),
        buf: BytesMut::new(),
    }
}

/// Every address `CLUSTER SLOTS` and `CLUSTER NODES` name on `c`.
async fn named<S: AsyncRead + AsyncWrite + Unpin>(c: &mut Client<S>) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = parse_slots(c.cmd(&[b"CLUSTER", b"SLOTS"]).await)
        .into_iter()
        .flat_map(|(_, _, nodes)| nodes.into_iter().map(|(a, _)| a))
        .collect();
    let nodes = text(&c.cmd(&[b"CLUSTER", b"NODES"]).await);
    for line in nodes.lines() {
        let addr = line.split(' ').nth(1).unwrap().split('@').next().unwrap();
        out.push(addr.parse().unwrap());
    }
    assert!(!out.is_empty());
    out
}

/// A key whose slot `CLUSTER SLOTS` (asked over `c`) gives to a master other than `me`:
/// the key and that master's address as told to `c`.
async fn foreign_key<S: AsyncRead + AsyncWrite + Unpin>(
    c: &mut Client<S>,
    me: SocketAddr,
) -> (String, u16, SocketAddr) {
    let ranges = parse_slots(c.cmd(&[b"CLUSTER", b"SLOTS"]).await);
    (0..10_000)
        .map(|i| format!("key{i}"))
        .find_map(|k| {
            let slot = slot_of(k.as_bytes());
            let (_, _, nodes) = ranges.iter().find(|r| r.0 <= slot && slot <= r.1)?;
            (nodes[0].0 != me).then(|| (k, slot, nodes[0].0))
        })
        .expect("a key mastered by another node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_is_told_tls_ports_and_a_plaintext_client_plaintext_ones() {
    let certs = Certs::new();
    let c = tls_cluster(&certs).await;
    let tls_addrs: Vec<SocketAddr> = c.members.iter().map(|m| m.resp_tls.unwrap()).collect();
    let plain_addrs: Vec<SocketAddr> = c.members.iter().map(|m| m.resp.unwrap()).collect();
    assert!(tls_addrs.iter().all(|a| !plain_addrs.contains(a)));

    let mut t = tls_client(&certs, tls_addrs[0]).await;
    let mut p = plain_client(plain_addrs[0]).await;
    for a in named(&mut t).await {
        assert!(
            tls_addrs.contains(&a),
            "{a} is no TLS address: {tls_addrs:?}"
        );
    }
    for a in named(&mut p).await {
        assert!(plain_addrs.contains(&a), "{a} is no plaintext address");
    }

    // SHARDS gives both ports, whichever the connection.
    for reply in [
        t.cmd(&[b"CLUSTER", b"SHARDS"]).await,
        p.cmd(&[b"CLUSTER", b"SHARDS"]).await,
    ] {
        for shard in array(reply) {
            let (_, nodes) = pairs(shard)
                .into_iter()
                .find(|(k, _)| k == "nodes")
                .unwrap();
            for node in array(nodes) {
                let f: BTreeMap<String, Frame> = pairs(node).into_iter().collect();
                let port = int(&f["port"]) as u16;
                let i = plain_addrs.iter().position(|a| a.port() == port).unwrap();
                assert_eq!(int(&f["tls-port"]) as u16, tls_addrs[i].port());
            }
        }
    }

    // -MOVED names the master's port of the asking connection's kind.
    let (key, slot, master) = foreign_key(&mut t, tls_addrs[0]).await;
    let moved = text(&t.cmd(&[b"GET", key.as_bytes()]).await);
    assert_eq!(moved, format!("MOVED {slot} {master}"));
    let i = tls_addrs.iter().position(|a| *a == master).unwrap();
    let moved = text(&p.cmd(&[b"GET", key.as_bytes()]).await);
    assert_eq!(moved, format!("MOVED {slot} {}", plain_addrs[i]));
    // A TLS client that follows it is served there.
    let mut there = tls_client(&certs, master).await;
    assert_eq!(
        text(&there.cmd(&[b"SET", key.as_bytes(), b"v"]).await),
        "OK"
    );
    assert_eq!(text(&there.cmd(&[b"GET", key.as_bytes()]).await), "v");
    c.shutdown().await;
}

#[test]
fn members_tls_addresses_are_read_from_the_config_and_port_0_is_refused() {
    let text = |tls2: &str| {
        format!(
            "[cluster]\nid = 1\nn = 1\nsecret = \"0123456789abcdef0123\"\n\
             [[cluster.members]]\nid = 1\nname = \"a\"\ndc = \"x\"\npeer = \"127.0.0.1:7946\"\n\
             resp_tls = \"127.0.0.1:6380\"\n\
             [[cluster.members]]\nid = 2\nname = \"b\"\ndc = \"x\"\npeer = \"127.0.0.2:7946\"\n\
             resp-tls = \"{tls2}\"\n"
        )
    };
    let c = meridian_server::NodeConfig::from_toml(&text("127.0.0.2:6380")).unwrap();
    let members = c.cluster.unwrap().members;
    let tls: Vec<_> = members
        .iter()
        .map(|m| m.resp_tls.unwrap().to_string())
        .collect();
    assert_eq!(tls, ["127.0.0.1:6380", "127.0.0.2:6380"]);
    let e = meridian_server::NodeConfig::from_toml(&text("127.0.0.2:0"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("member 2 has resp_tls port 0"), "{e}");
}
