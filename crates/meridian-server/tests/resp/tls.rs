//! TLS on the client listeners (issue 42): RESP over TLS with a generated CA, client
//! certificates (`tls-auth-clients`), hostile input on the TLS port (plaintext, a stalled
//! handshake), certificate reload by `CONFIG SET`, HTTPS on the HTTP API, and `port 0`.
//! Each test runs a whole node (`meridian_server::run`) on loopback port 0.

use super::*;
use meridian_net::tls::client_config;
use meridian_net::tls_certs::{CertAuthority, write_pair};
use meridian_server::NodeConfig;
use std::path::{Path, PathBuf};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;

/// A CA, a node certificate and a client certificate it issued, and a second, unrelated CA
/// with its own node and client certificates, as files.
pub(super) struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    pub(super) fn new() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        for prefix in ["", "other-"] {
            let ca = CertAuthority::new(&format!("{prefix}test CA")).unwrap();
            write_pair(dir.path(), &format!("{prefix}ca"), ca.pem()).unwrap();
            let node = ca.issue("node", &["localhost", "127.0.0.1"]).unwrap();
            write_pair(dir.path(), &format!("{prefix}node"), &node).unwrap();
            let client = ca.issue("client", &["client"]).unwrap();
            write_pair(dir.path(), &format!("{prefix}client"), &client).unwrap();
        }
        Certs { dir }
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A connector trusting `ca` (`ca` or `other-ca`), presenting `client`'s certificate
    /// when given (`client` or `other-client`).
    pub(super) fn connector(&self, ca: &str, client: Option<&str>) -> TlsConnector {
        let ca = self.path(&format!("{ca}.crt"));
        let id = client.map(|c| {
            (
                self.path(&format!("{c}.crt")),
                self.path(&format!("{c}.key")),
            )
        });
        let id = id.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        TlsConnector::from(Arc::new(client_config(&ca, id).unwrap()))
    }
}

/// A node configuration with the test certificate (`node`, CA `ca`) and `auth_clients`.
fn tls_config(certs: &Certs, auth_clients: &str) -> NodeConfig {
    let mut config = NodeConfig::default();
    config.resp.listen = "127.0.0.1:0".parse().unwrap();
    config.http.listen = "127.0.0.1:0".parse().unwrap();
    config.resp.tls_cert_file = Some(certs.path("node.crt"));
    config.resp.tls_key_file = Some(certs.path("node.key"));
    config.resp.tls_ca_cert_file = Some(certs.path("ca.crt"));
    config.resp.tls_auth_clients = auth_clients.into();
    config
}

/// A node with a plaintext and a TLS RESP listener, both on port 0.
async fn start(config: NodeConfig) -> (RunningNode, SocketAddr) {
    let mut listeners = meridian_server::Listeners::bind(&config).await.unwrap();
    let tls = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tls_addr = tls.local_addr().unwrap();
    listeners.resp_tls = Some(tls);
    let node = RunningNode::serve(meridian_server::NodeState::open(config).unwrap(), listeners);
    (node, tls_addr)
}

/// A TLS client connection to `addr`, or the handshake's error.
pub(super) async fn tls_connect(
    connector: &TlsConnector,
    addr: SocketAddr,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    tokio::time::timeout(PATIENCE, connector.connect(name, tcp))
        .await
        .expect("handshake ends")
}

/// Sends `request` and reads until `expected`'s length has arrived (or the connection ends):
/// what was read.
async fn exchange<S: AsyncReadExt + AsyncWriteExt + Unpin>(
    s: &mut S,
    request: &[u8],
    expected_len: usize,
) -> std::io::Result<Vec<u8>> {
    s.write_all(request).await?;
    s.flush().await?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while got.len() < expected_len {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut chunk))
            .await
            .expect("a reply or a close")?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&chunk[..n]);
    }
    Ok(got)
}

/// Whether a PING over a fresh TLS connection is answered (the handshake and the server's
/// verification of the client both passed).
async fn pings(connector: &TlsConnector, addr: SocketAddr) -> bool {
    let Ok(mut s) = tls_connect(connector, addr).await else {
        return false;
    };
    // TLS 1.3: the client's handshake ends before the server has checked its certificate; a
    // refusal arrives as an alert on the first read.
    matches!(exchange(&mut s, b"PING\r\n", 7).await, Ok(r) if r == b"+PONG\r\n")
}

/// `CONFIG GET name` over `s`: the value.
async fn config_get<S: AsyncReadExt + AsyncWriteExt + Unpin>(s: &mut S, name: &str) -> String {
    let req = format!("CONFIG GET {name}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    s.flush().await.unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    // *2\r\n$<n>\r\nname\r\n$<m>\r\nvalue\r\n: six CRLFs.
    while got.windows(2).filter(|w| w == b"\r\n").count() < 5 {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed during CONFIG GET");
        got.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8(got).unwrap();
    text.split("\r\n").nth(4).unwrap().to_owned()
}

#[tokio::test]
async fn resp_over_tls_round_trips_beside_the_plaintext_listener() {
    let certs = Certs::new();
    let (node, tls) = start(tls_config(&certs, "no")).await;
    let mut s = tls_connect(&certs.connector("ca", None), tls)
        .await
        .unwrap();
    let set = exchange(&mut s, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n", 5).await;
    assert_eq!(set.unwrap(), b"+OK\r\n");
    // A reply larger than one TLS record, pipelined.
    let big = "x".repeat(100_000);
    let req =
        format!("*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$100000\r\n{big}\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n");
    let want = format!("+OK\r\n$100000\r\n{big}\r\n");
    let got = exchange(&mut s, req.as_bytes(), want.len()).await.unwrap();
    assert!(
        got == want.as_bytes(),
        "a large pipelined reply over TLS differs"
    );
    // The plaintext listener serves the same keyspace.
    let mut plain = TcpStream::connect(node.resp).await.unwrap();
    let get = exchange(&mut plain, b"GET k\r\n", 11).await.unwrap();
    assert_eq!(get, b"$5\r\nhello\r\n");
    assert_eq!(config_get(&mut s, "tls-port").await, tls.port().to_string());
    assert_eq!(config_get(&mut s, "tls-auth-clients").await, "no");
    node.stop().await;
}

#[tokio::test]
async fn tls_auth_clients_yes_refuses_clients_without_a_certificate_of_the_ca() {
    let certs = Certs::new();
    let (node, tls) = start(tls_config(&certs, "yes")).await;
    assert!(pings(&certs.connector("ca", Some("client")), tls).await);
    assert!(
        !pings(&certs.connector("ca", None), tls).await,
        "no certificate"
    );
    assert!(
        !pings(&certs.connector("ca", Some("other-client")), tls).await,
        "a certificate of another CA"
    );
    // `optional`: no certificate is fine, a bad one still is not.
    node.stop().await;
    let (node, tls) = start(tls_config(&certs, "optional")).await;
    assert!(pings(&certs.connector("ca", None), tls).await);
    assert!(!pings(&certs.connector("ca", Some("other-client")), tls).await);
    node.stop().await;
}

#[tokio::test]
async fn the_client_refuses_a_server_certificate_of_another_ca() {
    let certs = Certs::new();
    let (node, tls) = start(tls_config(&certs, "no")).await;
    assert!(!pings(&certs.connector("other-ca", None), tls).await);
    node.stop().await;
}

#[tokio::test]
async fn plaintext_on_the_tls_port_is_refused_and_the_node_serves_on() {
    let certs = Certs::new();
    let (node, tls) = start(tls_config(&certs, "no")).await;
    let mut raw = TcpStream::connect(tls).await.unwrap();
    let got = exchange(&mut raw, b"*1\r\n$4\r\nPING\r\n", 1).await;
    // Closed, with at most a TLS alert: never a RESP reply.
    if let Ok(bytes) = got {
        assert!(!bytes.starts_with(b"+PONG"), "{bytes:?}");
    }
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, raw.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the connection is closed");
    assert!(pings(&certs.connector("ca", None), tls).await);
    // Both connections are gone from the gauge (the second once its task sees the close).
    let conns = node.state.metrics.connections(Frontend::Resp);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while conns.open.load(Ordering::Relaxed) != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a connection is still counted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    node.stop().await;
}

#[tokio::test]
async fn a_stalled_handshake_holds_its_client_slot_only_until_the_bound() {
    let certs = Certs::new();
    let mut config = tls_config(&certs, "no");
    config.resp.max_clients = 1;
    config.resp.tls_handshake_timeout_ms = 300;
    let (node, tls) = start(config).await;
    let mut stalled = TcpStream::connect(tls).await.unwrap();
    // While it holds the one slot, another client is turned away.
    let conns = node.state.metrics.connections(Frontend::Resp);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while conns.open.load(Ordering::Relaxed) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never counted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!pings(&certs.connector("ca", None), tls).await);
    let mut buf = Vec::new();
    let n = tokio::time::timeout(PATIENCE, stalled.read_to_end(&mut buf))
        .await
        .expect("the stalled connection is closed");
    assert!(matches!(n, Ok(0) | Err(_)) || buf.is_empty());
    while conns.open.load(Ordering::Relaxed) != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot is never freed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(pings(&certs.connector("ca", None), tls).await);
    node.stop().await;
}

#[tokio::test]
async fn config_set_reloads_the_certificate_for_new_connections() {
    let certs = Certs::new();
    let (node, tls) = start(tls_config(&certs, "no")).await;
    let old_ca = certs.connector("ca", None);
    let new_ca = certs.connector("other-ca", None);
    let mut admin = tls_connect(&old_ca, tls).await.unwrap();
    assert!(!pings(&new_ca, tls).await);
    // A missing file fails the whole CONFIG SET and changes nothing.
    let bad = exchange(
        &mut admin,
        b"CONFIG SET tls-cert-file /nonexistent.crt tls-key-file /nonexistent.key\r\n",
        1,
    )
    .await
    .unwrap();
    assert!(bad.starts_with(b"-ERR CONFIG SET failed"), "{bad:?}");
    assert!(pings(&old_ca, tls).await);
    let (crt, key) = (certs.path("other-node.crt"), certs.path("other-node.key"));
    let req = format!(
        "CONFIG SET tls-cert-file {} tls-key-file {}\r\n",
        crt.display(),
        key.display()
    );
    let ok = exchange(&mut admin, req.as_bytes(), 5).await.unwrap();
    assert_eq!(ok, b"+OK\r\n");
    assert!(
        pings(&new_ca, tls).await,
        "new connections get the new certificate"
    );
    assert!(!pings(&old_ca, tls).await);
    // The connection made before the reload goes on.
    assert_eq!(
        exchange(&mut admin, b"PING\r\n", 7).await.unwrap(),
        b"+PONG\r\n"
    );
    assert_eq!(
        config_get(&mut admin, "tls-cert-file").await,
        crt.display().to_string()
    );
    node.stop().await;
}

#[tokio::test]
async fn the_http_api_serves_https_with_the_node_certificate() {
    let certs = Certs::new();
    let mut config = tls_config(&certs, "yes");
    config.http.tls = true;
    let (node, _) = start(config).await;
    // HTTPS asks for no client certificate, whatever tls-auth-clients says.
    let mut s = tls_connect(&certs.connector("ca", None), node.http)
        .await
        .unwrap();
    let req = b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    s.write_all(req).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut got))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // Plain HTTP on the HTTPS port gets no HTTP answer.
    let mut plain = TcpStream::connect(node.http).await.unwrap();
    let got = exchange(&mut plain, req, 1).await.unwrap_or_default();
    assert!(!got.starts_with(b"HTTP/1.1"), "{got:?}");
    node.stop().await;
}

#[tokio::test]
async fn the_s3_endpoint_serves_https_with_the_node_certificate() {
    let certs = Certs::new();
    let mut config = tls_config(&certs, "yes");
    config.s3.listen = Some("127.0.0.1:0".parse().unwrap());
    config.s3.keys = vec!["tlskey:tlssecret12345".into()];
    config.s3.tls = true;
    let (node, _) = start(config).await;
    let s3 = node.s3_listener.unwrap();
    let mut s = tls_connect(&certs.connector("ca", None), s3).await.unwrap();
    // Unsigned: S3's own refusal, which proves the request crossed TLS to the endpoint.
    let req = b"GET /bucket/key HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    s.write_all(req).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut got))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(text.contains("<Error>"), "{text}");
    node.stop().await;
}

#[tokio::test]
async fn port_zero_serves_resp_over_tls_only() {
    let certs = Certs::new();
    let mut config = tls_config(&certs, "no");
    config.resp.port = Some(0);
    // A free port for the configuration's own TLS listener (port 0 would mean "none").
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    config.resp.tls_port = probe.local_addr().unwrap().port();
    drop(probe);
    let listeners = meridian_server::Listeners::bind(&config).await.unwrap();
    assert!(listeners.resp.is_none(), "no plaintext listener");
    let tls = listeners.tls_addr().unwrap();
    let node = RunningNode::serve(meridian_server::NodeState::open(config).unwrap(), listeners);
    let mut s = tls_connect(&certs.connector("ca", None), tls)
        .await
        .unwrap();
    assert_eq!(config_get(&mut s, "port").await, "0");
    assert_eq!(config_get(&mut s, "tls-port").await, tls.port().to_string());
    node.stop().await;
}

#[test]
fn tls_settings_are_checked_with_errors_that_name_the_setting() {
    let certs = Certs::new();
    let mut config = tls_config(&certs, "yes");
    config.resp.tls_port = 6390;
    config.validate().unwrap();
    config.resp.tls_auth_clients = "sometimes".into();
    assert!(
        config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("tls-auth-clients")
    );
    let mut config = tls_config(&certs, "yes");
    config.resp.tls_ca_cert_file = None;
    let e = meridian_server::NodeState::open(config)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("tls-ca-cert-file"), "{e}");
    let mut config = tls_config(&certs, "no");
    config.resp.tls_cert_file = Some(Path::new("/nonexistent.crt").into());
    let e = meridian_server::NodeState::open(config)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("/nonexistent.crt"), "{e}");
    let mut config = NodeConfig::default();
    config.resp.port = Some(0);
    assert!(
        config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("tls-port")
    );
    // Redis's hyphenated names are accepted in the file.
    let text = format!(
        "[resp]\ntls-port = 6390\nport = 0\ntls-cert-file = \"{}\"\ntls-key-file = \"{}\"\n\
         tls-auth-clients = \"no\"\ntls-protocols = \"TLSv1.3\"\n",
        certs.path("node.crt").display(),
        certs.path("node.key").display()
    );
    let parsed = NodeConfig::from_toml(&text).unwrap();
    assert_eq!(parsed.resp.tls_port, 6390);
    assert_eq!(parsed.resp.plain_listen(), None);
    assert_eq!(parsed.resp.tls_protocols, "TLSv1.3");
}
