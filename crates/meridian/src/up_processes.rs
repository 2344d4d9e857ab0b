//! `meridian up --processes`: one `meridian node --config FILE` process per node, talking over
//! TCP on loopback addresses.
//!
//! Node `i` (0-based, DC by DC) listens on `127.0.0.(i+2)` (every 127.0.0.0/8 address is local
//! on Linux, no setup needed): RESP on `BASE+i`, HTTP on `BASE+1000+i`, peers on
//! `BASE+2000+i`; with `--base-port 0` each port is one the OS reports free. The configs and
//! each node's log (`NAME.log`) go to `--config-dir` or a temporary directory removed on exit.
//!
//! Lifecycle: each child runs in its own process group (a terminal's Ctrl-C reaches only this
//! parent) and with `--stop-on-stdin-eof` on a pipe from this process, so if the parent dies,
//! even by SIGKILL, the pipe closes and every node shuts down by itself. On SIGINT/SIGTERM the
//! parent sends SIGTERM to every child and waits for it (SIGKILL after 30 s).

use crate::http_client;
use crate::up_cmd::UpArgs;
use anyhow::{Context, bail};
use meridian_net::wan::{LinkConfig, WanConfig};
use meridian_server::cluster::member_name;
use meridian_server::config::{ClusterMember, ClusterSection, NodeConfig};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long `--processes` waits for every node to see every other up.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a child may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// One child node.
struct Proc {
    member: ClusterMember,
    s3: SocketAddr,
    child: Child,
    /// Held open: the child stops when it closes.
    stdin: Option<ChildStdin>,
    log: PathBuf,
    exited: bool,
}

/// The addresses of every node: (RESP, HTTP, peer, S3, RESP over TLS).
fn addresses(total: u32, base: u16) -> anyhow::Result<Vec<[SocketAddr; 5]>> {
    if total > 253 {
        bail!("--processes supports at most 253 nodes (addresses 127.0.0.2 to 127.0.0.254)");
    }
    if base != 0 && u32::from(base) + 4000 + total > 65_535 {
        bail!(
            "--base-port {base} leaves no room for {total} nodes (peer ports are base+2000+i, \
             S3 base+3000+i, RESP over TLS base+4000+i)"
        );
    }
    let mut held = Vec::new();
    let mut out = Vec::new();
    for i in 0..total {
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, (i + 2) as u8));
        let mut addr = |off: u32| -> anyhow::Result<SocketAddr> {
            if base != 0 {
                return Ok(SocketAddr::new(ip, (u32::from(base) + off + i) as u16));
            }
            // Hold every probe until all are chosen, so no two nodes get the same port.
            let l = std::net::TcpListener::bind((ip, 0))
                .with_context(|| format!("binding {ip}:0 to find a free port"))?;
            let a = l.local_addr()?;
            held.push(l);
            Ok(a)
        };
        out.push([addr(0)?, addr(1000)?, addr(2000)?, addr(3000)?, addr(4000)?]);
    }
    Ok(out)
}

/// Writes one config per node into `dir`; returns the members and each config's path.
fn write_configs(
    args: &UpArgs,
    dir: &Path,
    tls: Option<&crate::up_tls::RunTls>,
) -> anyhow::Result<Vec<(ClusterMember, SocketAddr, PathBuf)>> {
    anyhow::ensure!(
        args.dcs >= 1 && args.nodes_per_dc >= 1,
        "--dcs and --nodes-per-dc must be at least 1"
    );
    let total = args.dcs * args.nodes_per_dc;
    let addrs = addresses(total, args.base_port)?;
    // Zero-padded, so the sorted names (which give the DC ids) follow the DC numbers.
    let width = (args.dcs - 1).to_string().len();
    let members: Vec<ClusterMember> = (0..total)
        .map(|i| {
            let (dc, index) = (i / args.nodes_per_dc, i % args.nodes_per_dc);
            let [resp, http, peer, _, resp_tls] = addrs[i as usize];
            ClusterMember {
                id: i + 1,
                name: member_name(dc, index),
                dc: format!("dc{dc:0width$}"),
                peer,
                resp: Some(resp),
                http: Some(http),
                // Every node learns every other's TLS port, to name it to TLS clients.
                resp_tls: tls.is_some().then_some(resp_tls),
            }
        })
        .collect();
    let wan = WanConfig {
        seed: args.seed,
        intra_dc: LinkConfig::lan(),
        inter_dc: LinkConfig::wan(args.wan_latency * 2, args.jitter).with_loss(args.loss),
        ..WanConfig::default()
    };
    // Peer links between the processes prove a secret made for this run (or the one the
    // environment gives every node).
    let secret = std::env::var("MERIDIAN_CLUSTER_SECRET")
        .unwrap_or_else(|_| meridian_net::ClusterSecret::random_text());
    let mut out = Vec::new();
    let (s3, _) = args.clone().s3();
    for (m, a) in members.iter().zip(&addrs) {
        let mut c = NodeConfig {
            balance: args.balance(),
            txn: args.txn(),
            buckets: args.buckets(),
            s3: s3.clone(),
            ..NodeConfig::default()
        };
        c.s3.listen = Some(a[3]);
        c.resp.requirepass = args.requirepass.clone();
        c.resp.misrouted = args.misrouted;
        c.resp.listen = m.resp.expect("set above");
        c.http.listen = m.http.expect("set above");
        if let Some(t) = tls {
            t.configure_node(&m.name, a[4].ip(), &mut c.resp)?;
            c.resp.tls_port = a[4].port();
            // Every link crosses the network: peer links, HTTP and S3 are encrypted too.
            c.resp.tls_cluster = true;
            c.http.tls = true;
            c.s3.tls = true;
        }
        c.cluster = Some(ClusterSection {
            id: m.id,
            name: Some(m.name.clone()),
            dc: Some(m.dc.clone()),
            peer_listen: None,
            q: args.q,
            n: args.n,
            seed: args.seed,
            heartbeat_ms: 500,
            handoff_ms: None,
            anti_entropy_ms: None,
            members: members.clone(),
            join: false,
            wan: Some(wan.clone()),
            secret: Some(secret.clone()),
        });
        c.validate()
            .context("checking the node configs made from the flags (--n, --q, ...)")?;
        let path = dir.join(format!("{}.toml", m.name));
        write_private(&path, c.to_toml()?.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        out.push((m.clone(), a[3], path));
    }
    Ok(out)
}

/// Each node's TLS port, read back from the config written for it (none without --tls).
fn tls_ports(configs: &[(ClusterMember, SocketAddr, PathBuf)]) -> Vec<Option<u16>> {
    configs
        .iter()
        .map(|(_, _, path)| {
            let c = NodeConfig::from_file(path).ok()?;
            (c.resp.tls_port != 0).then_some(c.resp.tls_port)
        })
        .collect()
}

/// Writes a file only its owner can read (it holds the cluster secret and the password).
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents)
}

/// `GET /cluster` on `addr`: whether the node sees every member up.
async fn all_up(addr: SocketAddr, access: &http_client::Access) -> bool {
    let client = http_client::Client::new(addr.to_string(), access.clone());
    let fetch = async {
        let reply = client.send("GET", "/cluster", None).await.ok()?;
        let j: serde_json::Value = serde_json::from_slice(&reply.body).ok()?;
        let members = j["members"].as_array()?.clone();
        Some(members.iter().all(|m| m["status"] == "up"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), fetch).await,
        Ok(Some(true))
    )
}

/// Runs the processes until SIGINT or SIGTERM.
pub async fn run(args: &UpArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (dir, temporary) = match &args.config_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            (d.clone(), false)
        }
        None => {
            let d = std::env::temp_dir().join(format!("meridian-up-{}", std::process::id()));
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
            (d, true)
        }
    };
    let result = run_in(args, &dir, shutdown).await;
    if temporary && result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run_in(args: &UpArgs, dir: &Path, shutdown: CancellationToken) -> anyhow::Result<()> {
    let tls = match args.tls {
        true => Some(crate::up_tls::RunTls::create(
            args.tls_dir.as_deref().unwrap_or(dir),
        )?),
        false => None,
    };
    let configs = write_configs(args, dir, tls.as_ref())?;
    let tls_ports = tls_ports(&configs);
    let exe = std::env::current_exe().context("finding the meridian executable")?;
    let mut procs = Vec::new();
    for (member, s3, config) in configs {
        let log = dir.join(format!("{}.log", member.name));
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let spawned = Command::new(&exe)
            .arg("node")
            .arg("--config")
            .arg(&config)
            .arg("--stop-on-stdin-eof")
            .args(["--threads", "2"])
            .stdin(Stdio::piped())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                stop_all(&mut procs).await;
                return Err(e).with_context(|| format!("starting {}", member.name));
            }
        };
        procs.push(Proc {
            member,
            s3,
            stdin: child.stdin.take(),
            child,
            log,
            exited: false,
        });
    }

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<10} {:>3}  {:<22} {:<22} {:<22} {:>7}{}",
        "NAME",
        "DC",
        "RESP",
        "HTTP",
        "S3",
        "PID",
        // Only with --tls: scripts read the plain table by field count.
        if tls.is_some() { "  RESP-TLS" } else { "" }
    )?;
    for (p, tls_port) in procs.iter().zip(&tls_ports) {
        let m = &p.member;
        let addr = |a: Option<SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
        writeln!(
            out,
            "{:<10} {:>3}  {:<22} {:<22} {:<22} {:>7}{}",
            m.name,
            (m.id - 1) / args.nodes_per_dc,
            addr(m.resp),
            addr(m.http),
            p.s3,
            p.child.id(),
            tls_port.map(|p| format!("  {p:>8}")).unwrap_or_default()
        )?;
    }
    if let (Some(t), Some(first)) = (&tls, procs.first()) {
        let host = first
            .member
            .resp
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
        writeln!(
            out,
            "TLS files in {}; connect with: redis-cli {} -h {host} -p {} \
             (HTTP and S3 are HTTPS: meridian ctl --cacert {})",
            t.dir.display(),
            t.redis_cli_flags(),
            tls_ports[0].unwrap_or_default(),
            t.ca_file.display()
        )?;
    }
    out.flush()?;
    drop(out);
    tracing::info!(dir = %dir.display(), "node configs and logs");

    // Ready once every node sees every member up (bounded), unless a node exits or we are told
    // to stop first.
    let mut access = http_client::Access {
        password: args.requirepass.clone(),
        ..http_client::Access::default()
    };
    if let Some(t) = &tls {
        access = access.with_ca(&t.ca_file)?;
    }
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(p) = reap(&mut procs).into_iter().next() {
            let log = std::fs::read_to_string(&procs[p].log).unwrap_or_default();
            let name = procs[p].member.name.clone();
            stop_all(&mut procs).await;
            bail!("node {name} exited while the cluster was starting; its log:\n{log}");
        }
        let mut ready = true;
        for p in &procs {
            if !all_up(p.member.http.expect("set"), &access).await {
                ready = false;
                break;
            }
        }
        if ready {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            stop_all(&mut procs).await;
            bail!(
                "the nodes did not all see each other up within {READY_TIMEOUT:?}; logs in {}",
                dir.display()
            );
        }
        tokio::select! {
            _ = shutdown.cancelled() => {
                stop_all(&mut procs).await;
                return Ok(());
            }
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    println!(
        "ready: {} node processes in {} DCs, one-way WAN latency {:?}, jitter {}%; Ctrl-C to stop",
        procs.len(),
        args.dcs,
        args.wan_latency,
        args.jitter * 100.0
    );

    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        for p in reap(&mut procs) {
            let p = &procs[p];
            tracing::warn!(node = %p.member.name, pid = p.child.id(), log = %p.log.display(), "node process exited");
        }
    }
    stop_all(&mut procs).await;
    tracing::info!("all node processes stopped");
    Ok(())
}

/// Reaps the children that exited since the last call; returns their indexes.
fn reap(procs: &mut [Proc]) -> Vec<usize> {
    let mut gone = Vec::new();
    for (i, p) in procs.iter_mut().enumerate() {
        if !p.exited && !matches!(p.child.try_wait(), Ok(None)) {
            p.exited = true;
            gone.push(i);
        }
    }
    gone
}

/// SIGTERM to every running child, then waits for each (SIGKILL after [`STOP_TIMEOUT`]).
async fn stop_all(procs: &mut [Proc]) {
    for p in procs.iter_mut().filter(|p| !p.exited) {
        let pid = p.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(sent, Ok(s) if s.success()) {
            // The pipe closing stops it too.
            p.stdin = None;
        }
    }
    let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
    for p in procs.iter_mut() {
        loop {
            match p.child.try_wait() {
                Ok(None) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(None) => {
                    tracing::warn!(node = %p.member.name, "did not stop in time; killing it");
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                    break;
                }
                Ok(Some(status)) => {
                    if !status.success() && !p.exited {
                        tracing::warn!(node = %p.member.name, %status, "node stopped with an error");
                    }
                    break;
                }
                Err(_) => break,
            }
        }
        p.exited = true;
        p.stdin = None;
    }
}
