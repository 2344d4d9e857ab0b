//! A closed-loop load generator of Redis transactions for `bench/txn-compare.sh`: each of C
//! clients runs `MULTI; INCRBY {tag}a 1; INCRBY {tag}b 1; EXEC` back to back (the four
//! commands written at once, as a client pipeline sends them), with the tag random among
//! 10 000, for S seconds; it prints `txn_per_s p50_us p99_us nil_execs errors`.
//!
//!   multi_exec_load ADDR CLIENTS SECONDS [PREFIX] [--cluster]
//!
//! `PREFIX` goes before each key (a Meridian bucket, `bank:`). With `--cluster` the target is
//! a Redis Cluster: the slot map comes from `CLUSTER SLOTS` at ADDR and each transaction goes
//! to its slot's master (both keys share the slot through the hash tag).

use bytes::BytesMut;
use meridian_server::resp::Frame;
use meridian_server::resp::frame;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Conn {
    s: TcpStream,
    buf: BytesMut,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Res<Conn> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Conn {
            s,
            buf: BytesMut::with_capacity(4096),
        })
    }

    /// Reads `n` replies.
    async fn replies(&mut self, n: usize) -> Res<Vec<Frame>> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            match Frame::parse(&mut self.buf)? {
                Some(reply) => out.push(reply),
                None if self.s.read_buf(&mut self.buf).await? == 0 => {
                    return Err("connection closed".into());
                }
                None => {}
            }
        }
        Ok(out)
    }
}

/// Slot → master address, from `CLUSTER SLOTS`.
async fn slot_map(addr: SocketAddr) -> Res<Vec<SocketAddr>> {
    let mut c = Conn::open(addr).await?;
    let mut req = BytesMut::new();
    frame::encode_command(&mut req, &[b"CLUSTER", b"SLOTS"]);
    c.s.write_all(&req).await?;
    let mut map = vec![addr; 16384];
    // Each range is `[start, end, [ip, port, id, ...] (the master), replicas...]`.
    let Some(Frame::Array(ranges)) = c.replies(1).await?.pop() else {
        return Err("CLUSTER SLOTS did not answer an array".into());
    };
    for range in ranges {
        let Frame::Array(range) = range else { continue };
        let (Some(Frame::Integer(start)), Some(Frame::Integer(end)), Some(Frame::Array(master))) =
            (range.first(), range.get(1), range.get(2))
        else {
            continue;
        };
        let (Some(Frame::Bulk(ip)), Some(Frame::Integer(port))) = (master.first(), master.get(1))
        else {
            continue;
        };
        let a: SocketAddr = format!("{}:{port}", String::from_utf8_lossy(ip)).parse()?;
        let (start, end) = (usize::try_from(*start)?, usize::try_from(*end)?);
        for slot in map.iter_mut().take(end.min(16383) + 1).skip(start) {
            *slot = a;
        }
    }
    Ok(map)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: multi_exec_load ADDR CLIENTS SECONDS [PREFIX] [--cluster]");
        std::process::exit(2);
    }
    let addr: SocketAddr = args[1].parse()?;
    let clients: usize = args[2].parse()?;
    let secs: u64 = args[3].parse()?;
    let prefix = args
        .get(4)
        .filter(|a| *a != "--cluster")
        .cloned()
        .unwrap_or_default();
    let cluster = args.iter().any(|a| a == "--cluster");
    let map = if cluster {
        Some(slot_map(addr).await?)
    } else {
        None
    };
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let map = map.clone();
        let prefix = prefix.clone();
        tasks.push(tokio::spawn(async move {
            let mut conns: BTreeMap<SocketAddr, Conn> = BTreeMap::new();
            let mut lat = Vec::new();
            let (mut nil, mut errors) = (0u64, 0u64);
            let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (c as u64 + 1);
            while Instant::now() < deadline {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let tag = rng % 10_000;
                let a = format!("{prefix}{{t{tag}}}a");
                let b = format!("{prefix}{{t{tag}}}b");
                let to = match &map {
                    Some(m) => m[meridian_cluster::slot_of(a.as_bytes()) as usize],
                    None => addr,
                };
                let conn = match conns.entry(to) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => {
                        e.insert(Conn::open(to).await?)
                    }
                };
                let mut req = BytesMut::new();
                frame::encode_command(&mut req, &[b"MULTI"]);
                frame::encode_command(&mut req, &[b"INCRBY", a.as_bytes(), b"1"]);
                frame::encode_command(&mut req, &[b"INCRBY", b.as_bytes(), b"1"]);
                frame::encode_command(&mut req, &[b"EXEC"]);
                let t0 = Instant::now();
                conn.s.write_all(&req).await?;
                let out = conn.replies(4).await?;
                lat.push(t0.elapsed().as_micros() as u32);
                let failed = |f: &Frame| matches!(f, Frame::Error(_) | Frame::BlobError(_));
                match out.last() {
                    // EXEC aborted by WATCH (a null array).
                    Some(Frame::Null) => nil += 1,
                    Some(Frame::Array(results)) if !out.iter().any(failed) => {
                        if results.iter().any(failed) {
                            errors += 1;
                        }
                    }
                    _ => errors += 1,
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((lat, nil, errors))
        }));
    }
    let (mut lat, mut nil, mut errors) = (Vec::new(), 0, 0);
    for t in tasks {
        let (l, n, e) = t.await??;
        lat.extend(l);
        nil += n;
        errors += e;
    }
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{:.0} {} {} {nil} {errors}",
        lat.len() as f64 / secs as f64,
        pct(0.5),
        pct(0.99)
    );
    Ok(())
}
