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

use bytes::{Buf, BytesMut};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Length of one complete RESP value at the start of `b`, if it is all there.
fn value_len(b: &[u8]) -> Option<usize> {
    let line = b.windows(2).position(|w| w == b"\r\n")?;
    let head = std::str::from_utf8(&b[1..line]).ok()?;
    let after = line + 2;
    match b.first()? {
        b'+' | b'-' | b':' => Some(after),
        b'$' => {
            let n: i64 = head.parse().ok()?;
            if n < 0 {
                return Some(after);
            }
            let end = after + n as usize + 2;
            (b.len() >= end).then_some(end)
        }
        b'*' => {
            let n: i64 = head.parse().ok()?;
            let mut at = after;
            for _ in 0..n.max(0) {
                at += value_len(&b[at..])?;
            }
            Some(at)
        }
        _ => None,
    }
}

fn cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

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

    /// Reads `n` replies; returns them concatenated.
    async fn replies(&mut self, n: usize) -> Res<Vec<u8>> {
        let mut out = Vec::new();
        for _ in 0..n {
            loop {
                if let Some(len) = value_len(&self.buf) {
                    out.extend_from_slice(&self.buf[..len]);
                    self.buf.advance(len);
                    break;
                }
                if self.s.read_buf(&mut self.buf).await? == 0 {
                    return Err("connection closed".into());
                }
            }
        }
        Ok(out)
    }
}

/// Slot → master address, from `CLUSTER SLOTS`.
async fn slot_map(addr: SocketAddr) -> Res<Vec<SocketAddr>> {
    let mut c = Conn::open(addr).await?;
    c.s.write_all(&cmd(&[b"CLUSTER", b"SLOTS"])).await?;
    let raw = c.replies(1).await?;
    // Tokens: the reply flattened into lines; each range is `*N :start :end *M $ip :port ...`.
    let text = String::from_utf8_lossy(&raw).into_owned();
    let lines: Vec<&str> = text.split("\r\n").collect();
    let mut map = vec![addr; 16384];
    let mut i = 1;
    while i + 6 < lines.len() {
        if lines[i].starts_with('*')
            && lines[i + 1].starts_with(':')
            && lines[i + 2].starts_with(':')
        {
            let start: usize = lines[i + 1][1..].parse()?;
            let end: usize = lines[i + 2][1..].parse()?;
            let ip = lines[i + 5];
            let port: u16 = lines[i + 6][1..].parse()?;
            let a: SocketAddr = format!("{ip}:{port}").parse()?;
            for slot in map.iter_mut().take(end.min(16383) + 1).skip(start) {
                *slot = a;
            }
            i += 7;
        } else {
            i += 1;
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
                let mut req = cmd(&[b"MULTI"]);
                req.extend(cmd(&[b"INCRBY", a.as_bytes(), b"1"]));
                req.extend(cmd(&[b"INCRBY", b.as_bytes(), b"1"]));
                req.extend(cmd(&[b"EXEC"]));
                let t0 = Instant::now();
                conn.s.write_all(&req).await?;
                let out = conn.replies(4).await?;
                lat.push(t0.elapsed().as_micros() as u32);
                let exec = &out[out.len().saturating_sub(5)..];
                if exec == b"*-1\r\n" {
                    nil += 1;
                } else if out.contains(&b'-') && out.windows(3).any(|w| w == b"\r\n-") {
                    errors += 1;
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
