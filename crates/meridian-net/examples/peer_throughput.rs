//! Bulk-lane throughput of a peer link over loopback: plain TCP against TLS (`tls-cluster`),
//! with payloads from memory and from a file (`sendfile(2)` on plain TCP; read and encrypted
//! under TLS). Rounds alternate between the two, and the medians are printed, so both see the
//! same machine noise.
//!
//! ```sh
//! cargo run --release -p meridian-net --example peer_throughput -- [MiB per round] [rounds]
//! ```

use bytes::Bytes;
use meridian_core::NodeId;
use meridian_net::tcp::{self, AddressBook, TcpConfig};
use meridian_net::tls::{TlsServer, TlsSettings};
use meridian_net::tls_certs::{CertAuthority, write_pair};
use meridian_net::{ClusterSecret, FileSlice, Payload, Transport};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

type Msg = u64;
const CHUNK: usize = 1 << 20;
const STREAMS: usize = 4;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args
        .next()
        .map_or(1024, |a| a.parse().expect("MiB per round"));
    let rounds: usize = args.next().map_or(5, |a| a.parse().expect("rounds"));
    let dir = std::env::temp_dir().join(format!("meridian-peer-throughput-{}", std::process::id()));
    let tls = peer_tls(&dir);
    let file = chunk_file(&dir);
    let mut results: Vec<(&str, bool, Vec<f64>)> = ["memory", "file"]
        .iter()
        .flat_map(|&from| [(from, false, Vec::new()), (from, true, Vec::new())])
        .collect();
    for _ in 0..rounds {
        for (from, encrypted, mbps) in &mut results {
            let source = (*from == "file").then(|| file.clone());
            mbps.push(round(mib, encrypted.then(|| tls.clone()), source).await);
        }
    }
    println!("| payloads from | plain TCP MB/s | TLS MB/s | TLS / plain |");
    println!("|---|---|---|---|");
    for pair in results.chunks(2) {
        let (plain, tls) = (median(&pair[0].2), median(&pair[1].2));
        println!(
            "| {} | {plain:.0} | {tls:.0} | {:.2} |",
            pair[0].0,
            tls / plain
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `mib` 1 MiB payloads from node 1 to node 2 on `STREAMS` streams; answers MB/s.
async fn round(mib: usize, tls: Option<Arc<TlsServer>>, file: Option<FileSlice>) -> f64 {
    let stop = CancellationToken::new();
    let book = AddressBook::default();
    let config = TcpConfig {
        secret: ClusterSecret::new(b"peer throughput benchmark").unwrap(),
        max_frame: 8 << 20,
        tls,
        ..TcpConfig::default()
    };
    let a = start(1, &book, config.clone(), &stop).await;
    let (_b, mut inbox) = start_with_inbox(2, &book, config, &stop).await;
    tokio::spawn(async move {
        while let Some(m) = inbox.recv().await {
            if let Some(reply) = m.reply {
                let _ = reply.respond(m.payload.map_or(0, |p| p.len()));
            }
        }
    });
    // Connect every lane before the clock starts.
    send(&a, 0, Payload::bytes(Bytes::from(vec![7u8; CHUNK]))).await;
    let memory = Bytes::from(vec![7u8; CHUNK]);
    let start = Instant::now();
    let tasks: Vec<_> = (0..STREAMS)
        .map(|s| {
            let (a, memory, file) = (a.clone(), memory.clone(), file.clone());
            tokio::spawn(async move {
                for _ in (s..mib).step_by(STREAMS) {
                    let p = match &file {
                        Some(f) => Payload::file(f.clone()),
                        None => Payload::bytes(memory.clone()),
                    };
                    send(&a, s as u32, p).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    stop.cancel();
    (mib * CHUNK) as f64 / secs / 1e6
}

async fn send(a: &Transport<Msg>, stream: u32, p: Payload) {
    let (got, _) = a
        .request_with(
            NodeId(2),
            0,
            Some(p.on_stream(stream)),
            Duration::from_secs(60),
        )
        .await
        .expect("the payload is acknowledged");
    assert_eq!(got, CHUNK as u64);
}

async fn start(
    id: u32,
    book: &AddressBook,
    config: TcpConfig,
    stop: &CancellationToken,
) -> Transport<Msg> {
    start_with_inbox(id, book, config, stop).await.0
}

async fn start_with_inbox(
    id: u32,
    book: &AddressBook,
    config: TcpConfig,
    stop: &CancellationToken,
) -> (Transport<Msg>, meridian_net::Inbox<Msg>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    book.set(NodeId(id), listener.local_addr().unwrap());
    tcp::start(NodeId(id), listener, book.clone(), config, stop.clone())
}

/// A cluster CA and one node certificate (both nodes present it), as `tls-cluster` uses.
fn peer_tls(dir: &std::path::Path) -> Arc<TlsServer> {
    let ca = CertAuthority::new("benchmark CA").unwrap();
    let (ca_file, _) = write_pair(dir, "ca", ca.pem()).unwrap();
    let node = ca.issue("node", &["localhost"]).unwrap();
    let (cert_file, key_file) = write_pair(dir, "node", &node).unwrap();
    Arc::new(
        TlsServer::with_peers(TlsSettings {
            cert_file,
            key_file,
            ca_cert_file: Some(ca_file),
            ..TlsSettings::default()
        })
        .unwrap(),
    )
}

/// A 1 MiB chunk file (in the page cache once written, as a hot chunk is).
fn chunk_file(dir: &std::path::Path) -> FileSlice {
    let path = dir.join("chunk");
    std::fs::write(&path, vec![7u8; CHUNK]).unwrap();
    let file = Arc::new(std::fs::File::open(&path).unwrap());
    FileSlice::new(file, 0, CHUNK as u64)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
