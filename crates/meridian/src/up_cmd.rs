//! `meridian up`: an embedded cluster in one process (several DCs of nodes over an emulated
//! WAN, each node serving RESP and HTTP); prints the member table once every node's failure
//! detector has heard every peer, then runs until SIGINT or SIGTERM.

use crate::node_cmd::{LogFormat, init_logging, stop_on_signal};
use crate::signals::ShutdownSignals;
use anyhow::Context;
use clap::Args;
use meridian_replication::{BucketProps, DEFAULT_BUCKET_NAME};
use meridian_server::cluster::{EmbeddedConfig, start_embedded};
use meridian_server::config::{
    BalanceSection, Misrouted, NodeConfig, PlannerSection, S3Section, ServiceModel, TxnSection,
};
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Flags of `meridian up`.
#[derive(Args, Debug, Clone)]
#[command(after_help = "\
EXAMPLES:
    meridian up --dcs 2 --nodes-per-dc 3 --wan-latency 100ms --jitter 60%
    meridian up --base-port 0                     every port chosen by the OS
    meridian up --processes --dcs 2 --nodes-per-dc 2   one `meridian node` process per node
    meridian up --dcs 1 --nodes-per-dc 4 --service-model fixed:30 --read-workers 1
    meridian up --txn-planner --txn-plan-interval 5s   move transactional keys used together
    meridian up --default-bucket eventual          bare keys get siblings and CRDTs
    meridian up --misrouted serve                  any node serves any key (no -MOVED)
    meridian up --tls --tls-dir ./up-tls           RESP over TLS too (BASE+4000+i)
    redis-cli -c -p 7000 SET k v && redis-cli -c -p 7003 GET k
    curl -X PUT localhost:8000/wan -d '{\"cut_both\":[[{\"dc\":0},{\"dc\":1}]]}'

Node i (0-based, DC by DC) serves RESP on BASE+i, HTTP on BASE+1000+i, S3 on BASE+3000+i
and, with --tls, RESP over TLS on BASE+4000+i.
With --processes, node i listens on 127.0.0.(i+2) and each process emulates the WAN on its
outgoing links. S3 requests are signed with --s3-key, or with the key printed at start.")]
pub struct UpArgs {
    /// Number of data centers.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub(crate) dcs: u32,
    /// Nodes in each data center.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub(crate) nodes_per_dc: u32,
    /// One-way latency between DCs (e.g. 100ms, 1.5s; a bare number is milliseconds).
    #[arg(long, default_value = "100ms", value_name = "DURATION", value_parser = parse_latency)]
    pub(crate) wan_latency: Duration,
    /// Maximum extra inter-DC delay, as a fraction of the latency (60% or 0.6).
    #[arg(long, default_value = "0%", value_name = "FRACTION", value_parser = parse_fraction)]
    pub(crate) jitter: f64,
    /// Inter-DC loss probability (stream mode: a lost message arrives late).
    #[arg(long, default_value = "0%", value_name = "FRACTION", value_parser = parse_fraction)]
    pub(crate) loss: f64,
    /// First port: node i serves RESP on BASE+i, HTTP on BASE+1000+i and S3 on BASE+3000+i;
    /// 0 = OS-assigned.
    #[arg(long, default_value_t = 7000, value_name = "PORT")]
    pub(crate) base_port: u16,
    /// Seed of the WAN emulator and the nodes' randomness.
    #[arg(long, default_value_t = 1, value_name = "SEED")]
    pub(crate) seed: u64,
    /// Partitions of the ring.
    #[arg(long, default_value_t = 64, value_name = "Q")]
    pub(crate) q: u32,
    /// Replicas per key (the layout's target N and the default bucket's n_val).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub(crate) n: u32,
    /// How long a read occupies a node's read worker: real (the engine's own time), fixed:MS
    /// or exp:MS (mean), MS in milliseconds up to 60000; every node [default: real]. One node
    /// at run time: PUT /balance/service-model, `meridian ctl service-model`.
    #[arg(long, value_name = "MODEL")]
    pub(crate) service_model: Option<ServiceModel>,
    /// Workers serving each node's replica-side read queue, 1 to 1024 [default: 4].
    #[arg(long, value_name = "N")]
    pub(crate) read_workers: Option<usize>,
    /// Turn on the cross-node placement planner on every node (`[txn.planner] enabled`): keys
    /// of transactional buckets that transactions use together move to one partition leader.
    #[arg(long)]
    pub(crate) txn_planner: bool,
    /// With --txn-planner: how often the claimant plans (e.g. 2s, 1min; at least 1s)
    /// [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = parse_latency, requires = "txn_planner")]
    pub(crate) txn_plan_interval: Option<Duration>,
    /// With --txn-planner: how long a moved key stays before it may move again [default: 10min].
    #[arg(long, value_name = "DURATION", value_parser = parse_latency, requires = "txn_planner")]
    pub(crate) txn_min_residence: Option<Duration>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Run one `meridian node` process per node, talking over TCP on 127.0.0.x loopback
    /// addresses (node i on 127.0.0.(i+2); peers on BASE+2000+i), instead of one process.
    #[arg(long)]
    pub(crate) processes: bool,
    /// With --processes: where to write each node's config and log [default: a temporary
    /// directory, removed on exit].
    #[arg(long, value_name = "DIR", requires = "processes")]
    pub(crate) config_dir: Option<std::path::PathBuf>,
    /// Password every node's RESP and HTTP front ends require (AUTH; HTTP:
    /// `Authorization: Bearer <PASS>`).
    #[arg(
        long,
        value_name = "PASS",
        env = "MERIDIAN_REQUIREPASS",
        hide_env_values = true
    )]
    pub(crate) requirepass: Option<String>,
    /// An S3 access key every node accepts, ACCESS_KEY_ID:SECRET (repeatable) [default: one
    /// made for this run, printed at start].
    #[arg(long = "s3-key", value_name = "ID:SECRET")]
    pub(crate) s3_keys: Vec<String>,
    /// Serve S3 requests without a signature: anyone who can connect reads and writes.
    #[arg(long)]
    pub(crate) s3_open: bool,
    /// The type of the `default` bucket (bare keys): `timeline`, Redis Cluster's guarantees
    /// (atomic read-modify-writes, MULTI/EXEC, masters that fail over); or `eventual`,
    /// Dynamo-style quorums with siblings and CRDT counters and hashes.
    #[arg(long, value_enum, default_value_t = DefaultBucket::Timeline, value_name = "TYPE")]
    pub(crate) default_bucket: DefaultBucket,
    /// A key command sent to a node that is not its slot's master: moved, Redis Cluster's
    /// `-MOVED` (cluster clients follow it: `redis-cli -c`, ...); or serve, coordinated where
    /// it arrives, for clients that send every key to one node.
    #[arg(long, default_value = "moved", value_name = "MODE")]
    pub(crate) misrouted: Misrouted,
    /// Serve RESP over TLS too, on BASE+4000+i: a CA, node certificates and a client
    /// certificate are made for the run (into --config-dir with --processes, else a
    /// temporary directory; both printed), and clients must present the client certificate.
    #[arg(long)]
    pub(crate) tls: bool,
    /// With --tls: where to write the run's CA, certificates and keys (kept on exit)
    /// [default: --config-dir with --processes, else a temporary directory removed on exit].
    #[arg(long, value_name = "DIR", requires = "tls")]
    pub(crate) tls_dir: Option<std::path::PathBuf>,
}

/// The `default` bucket `meridian up` gives its cluster (`--default-bucket`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DefaultBucket {
    /// `BucketProps::redis_default`: a timeline bucket whose masters start in the inserting
    /// DC and fail over by themselves.
    Timeline,
    /// An eventual bucket with the spec's quorums.
    Eventual,
}

impl UpArgs {
    /// The `[s3]` settings every node gets (its `listen` is set per node): the keys given,
    /// or, with none and no `--s3-open`, one made for this run and returned to be printed.
    pub(crate) fn s3(&mut self) -> (S3Section, Option<String>) {
        let mut made = None;
        if self.s3_keys.is_empty() && !self.s3_open {
            let secret = meridian_net::ClusterSecret::random_text();
            let key = format!(
                "MRDN{}:{}",
                &secret[..16].to_ascii_uppercase(),
                &secret[16..56]
            );
            self.s3_keys.push(key.clone());
            made = Some(key);
        }
        let section = S3Section {
            keys: self.s3_keys.clone(),
            open: self.s3_open,
            ..S3Section::default()
        };
        (section, made)
    }

    /// The `[txn]` settings every node gets from the flags (`--txn-planner`, ...).
    pub(crate) fn txn(&self) -> TxnSection {
        let mut planner = PlannerSection {
            enabled: self.txn_planner,
            ..PlannerSection::default()
        };
        if let Some(d) = self.txn_plan_interval {
            planner.plan_interval_ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        }
        if let Some(d) = self.txn_min_residence {
            planner.min_residence_ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        }
        TxnSection { planner }
    }

    /// The `[buckets]` every node gets from `--default-bucket` (none: the cluster's own
    /// default bucket, `BucketProps::redis_default`).
    pub(crate) fn buckets(&self) -> BTreeMap<String, BucketProps> {
        match self.default_bucket {
            DefaultBucket::Timeline => BTreeMap::new(),
            DefaultBucket::Eventual => {
                [(DEFAULT_BUCKET_NAME.to_owned(), BucketProps::default())].into()
            }
        }
    }

    /// The `[balance]` settings every node gets from the flags.
    pub(crate) fn balance(&self) -> BalanceSection {
        BalanceSection {
            service_model: self.service_model,
            read_workers: self.read_workers,
            ..BalanceSection::default()
        }
    }
}

fn parse_latency(s: &str) -> Result<Duration, String> {
    meridian_net::wan::parse_duration(s)
}

pub(crate) fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("'{s}' is not a fraction: write 60% or 0.6"))?;
    if !(0.0..=100.0).contains(&v) || v.is_nan() {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(v)
}

/// Runs the cluster until SIGINT or SIGTERM.
pub fn run(mut args: UpArgs, signals: ShutdownSignals) -> anyhow::Result<()> {
    init_logging(args.log_format);
    anyhow::ensure!(args.loss <= 1.0, "--loss must be at most 100%");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("meridian-worker")
        .build()
        .context("starting the async runtime")?;
    let balance = args.balance();
    balance.validate()?;
    let mut node = NodeConfig {
        balance,
        txn: args.txn(),
        ..NodeConfig::default()
    };
    node.resp.requirepass = args.requirepass.clone();
    node.resp.misrouted = args.misrouted;
    let (s3, made_key) = args.s3();
    node.s3 = s3;
    // Any address: the embedded cluster gives each node its own port.
    node.s3.listen = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    // In one process the nodes share one certificate (for localhost and 127.0.0.1).
    let temporary_tls = args.tls_dir.is_none();
    let tls_dir = args.tls_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("meridian-up-tls-{}", std::process::id()))
    });
    let run_tls = if args.tls && !args.processes {
        let t = crate::up_tls::RunTls::create(&tls_dir)?;
        t.configure_node("node", [127, 0, 0, 1].into(), &mut node.resp)?;
        Some(t)
    } else {
        None
    };
    node.validate()?;
    let cfg = EmbeddedConfig {
        node,
        dcs: args.dcs,
        nodes_per_dc: args.nodes_per_dc,
        wan_latency: args.wan_latency,
        jitter: args.jitter,
        loss: args.loss,
        base_port: args.base_port,
        seed: args.seed,
        q: args.q,
        n: args.n,
        buckets: args.buckets(),
        ..EmbeddedConfig::default()
    };
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        tokio::spawn(stop_on_signal(shutdown.clone(), signals));
        if let Some(key) = &made_key {
            println!(
                "S3 access key for this run: {}  secret: {}",
                key.split(':').next().unwrap_or_default(),
                key.split(':').nth(1).unwrap_or_default()
            );
        }
        if args.processes {
            return crate::up_processes::run(&args, shutdown).await;
        }
        let result = serve_embedded(cfg, &args, run_tls.as_ref(), shutdown).await;
        if run_tls.is_some() && temporary_tls {
            let _ = std::fs::remove_dir_all(&tls_dir);
        }
        result
    })
}

/// Starts the embedded cluster, prints its members, and runs it until `shutdown`.
async fn serve_embedded(
    cfg: EmbeddedConfig,
    args: &UpArgs,
    tls: Option<&crate::up_tls::RunTls>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    {
        let cluster = tokio::select! {
            c = start_embedded(cfg, Duration::from_secs(60)) => c?,
            _ = shutdown.cancelled() => return Ok(()),
        };
        let mut out = std::io::stdout().lock();
        // The TLS column only with --tls: scripts read the plain table by field count.
        let tls_head = if tls.is_some() { " RESP-TLS" } else { "" };
        writeln!(
            out,
            "{:<10} {:>3}  {:<22} {:<22} {:<22}{tls_head}",
            "NAME", "DC", "RESP", "HTTP", "S3"
        )?;
        for (m, state) in cluster.members.iter().zip(&cluster.states) {
            let addr =
                |a: Option<std::net::SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
            let tls_port = match state.config.resp.tls_port {
                0 => String::new(),
                p => format!(" {p}"),
            };
            writeln!(
                out,
                "{:<10} {:>3}  {:<22} {:<22} {:<22}{tls_port}",
                m.name,
                m.dc.0,
                addr(m.resp),
                addr(m.http),
                addr(state.config.s3.listen),
            )?;
        }
        if let Some(t) = tls {
            writeln!(
                out,
                "TLS files in {}; connect with: redis-cli {} -p {}",
                t.dir.display(),
                t.redis_cli_flags(),
                cluster.states[0].config.resp.tls_port
            )?;
        }
        writeln!(
            out,
            "ready: {} nodes in {} DCs, one-way WAN latency {:?}, jitter {}%; Ctrl-C to stop",
            cluster.members.len(),
            args.dcs,
            args.wan_latency,
            args.jitter * 100.0
        )?;
        out.flush()?;
        drop(out);
        shutdown.cancelled().await;
        cluster.shutdown().await;
        tracing::info!("cluster stopped");
        Ok(())
    }
}
