//! `meridian node`: configuration from a TOML file, overridden by flags; runs until SIGINT or
//! SIGTERM, then drains connections and flushes the engine.

use crate::signals::ShutdownSignals;
use anyhow::Context;
use clap::{Args, ValueEnum};
use meridian_server::cluster;
use meridian_server::config::{BalanceSection, EngineKind, NodeConfig, ServiceModel};
use meridian_server::node::{self, Listeners, NodeState};
use meridian_storage::Durability;
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

/// Flags of `meridian node`. Each one overrides the same setting of `--config`.
#[derive(Args, Debug)]
#[command(after_help = "\
EXAMPLES:
    meridian node                                   in memory, RESP on 127.0.0.1:6379
    meridian node --engine fjall --data-dir ./data --fsync always
    meridian node --config node.toml --resp 0.0.0.0:6380
    meridian node --s3 127.0.0.1:9000 --s3-key mykey:mysecret123   an S3 endpoint too
    meridian node --config cluster-node.toml --service-model fixed:30 --read-workers 1
    meridian node --port 0 --tls-port 6380 --tls-cert-file node.crt --tls-key-file node.key \
        --tls-ca-cert-file ca.crt                   RESP over TLS only

Settings come from --config (TOML: sections [resp], [http], [storage], and [cluster] with
[[cluster.members]], [buckets.NAME], [balance] and [txn.planner] for a node of a multi-process
cluster), then
flags.
Log verbosity follows RUST_LOG (default: info).")]
pub struct NodeArgs {
    /// TOML configuration file; flags override its settings.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address of the Redis-protocol (RESP) listener [default: 127.0.0.1:6379].
    #[arg(long, value_name = "ADDR")]
    resp: Option<SocketAddr>,
    /// Address of the HTTP listener [default: 127.0.0.1:8379].
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Address of the S3-compatible endpoint [default: none]; needs --s3-key or --s3-open.
    #[arg(long, value_name = "ADDR")]
    s3: Option<SocketAddr>,
    /// An S3 access key the endpoint accepts, ACCESS_KEY_ID:SECRET (repeatable; adds to
    /// `s3.keys`).
    #[arg(long = "s3-key", value_name = "ID:SECRET")]
    s3_keys: Vec<String>,
    /// Requests signed with access key ID act as ACL user USER (repeatable; adds to
    /// `s3.users`).
    #[arg(long = "s3-user", value_name = "ID=USER", value_parser = parse_key_user)]
    s3_users: Vec<(String, String)>,
    /// Serve S3 requests without a signature: anyone who can connect reads and writes.
    #[arg(long)]
    s3_open: bool,
    /// Storage engine: mem (in memory) or fjall (durable LSM) [default: mem].
    #[arg(long, value_name = "ENGINE")]
    engine: Option<EngineKind>,
    /// Directory of the durable engine's files [default: ./meridian-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// When the durable engine fsyncs: always, everysec or never [default: everysec].
    #[arg(long, value_name = "POLICY")]
    fsync: Option<Durability>,
    /// Password clients must send with AUTH (HTTP: `Authorization: Bearer <pass>`).
    #[arg(
        long,
        value_name = "PASS",
        env = "MERIDIAN_REQUIREPASS",
        hide_env_values = true
    )]
    requirepass: Option<String>,
    /// An ACL file of `user <name> <rules…>` lines (overrides `resp.aclfile`): loaded at
    /// start and by `ACL LOAD`, written by `ACL SAVE`.
    #[arg(long, value_name = "FILE")]
    aclfile: Option<std::path::PathBuf>,
    /// Redis's protected mode: `no` serves clients beyond loopback even without a password
    /// (overrides `resp.protected_mode`).
    #[arg(long, value_name = "yes|no", value_parser = parse_yes_no)]
    protected_mode: Option<bool>,
    /// Cluster nodes: the secret every peer link proves at its handshake (16 to 4096 bytes,
    /// the same on every member; overrides `cluster.secret`).
    #[arg(
        long,
        value_name = "SECRET",
        env = "MERIDIAN_CLUSTER_SECRET",
        hide_env_values = true
    )]
    cluster_secret: Option<String>,
    /// Most RESP clients connected at once [default: 10000].
    #[arg(long, value_name = "N")]
    max_clients: Option<usize>,
    /// Cluster nodes: how long a read occupies a read worker: real (the engine's own time),
    /// fixed:MS or exp:MS (mean), MS in milliseconds up to 60000 [default: real].
    #[arg(long, value_name = "MODEL")]
    service_model: Option<ServiceModel>,
    /// Cluster nodes: workers serving the replica-side read queue, 1 to 1024 [default: 4].
    #[arg(long, value_name = "N")]
    read_workers: Option<usize>,
    /// Standalone nodes: run key commands on worker shards, repartitioned by co-access:
    /// off, single, round_robin, base:Δp, free:Δp or non_stop [default: off]
    /// (see `[repart]` for the window, partitioner and policies).
    #[arg(long, value_name = "MODE")]
    repart: Option<meridian_server::repart::Mode>,
    /// Worker shards of `--repart`, 1 to 256 [default: 8].
    #[arg(long, value_name = "N")]
    repart_shards: Option<u32>,
    /// What runs `--repart`'s shards: threads (one per shard) or tasks (on the node's
    /// runtime) [default: threads].
    #[arg(long, value_name = "KIND")]
    repart_workers: Option<meridian_server::repart::Workers>,
    /// Where `--repart` places keys no partition placed: hash (by the key, recording
    /// nothing) or round_robin (the study's: in turn, remembered) [default: hash].
    #[arg(long, value_name = "PLACEMENT")]
    repart_new_keys: Option<meridian_server::repart::NewKeys>,
    /// Worker threads serving requests [default: one per core].
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Redis's `port`: the plaintext RESP listener's port (on --resp's address); 0 turns it
    /// off, to serve RESP over TLS only.
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// Redis's `tls-port`: serve RESP over TLS on this port (--resp's address) [default: 0,
    /// none]; needs --tls-cert-file and --tls-key-file.
    #[arg(long, value_name = "PORT")]
    tls_port: Option<u16>,
    /// The certificate (PEM) the TLS listeners present.
    #[arg(long, value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE")]
    tls_key_file: Option<PathBuf>,
    /// The CA (PEM) client certificates must chain to.
    #[arg(long, value_name = "FILE")]
    tls_ca_cert_file: Option<PathBuf>,
    /// Whether TLS clients must present a certificate signed by the CA: yes, no or optional
    /// [default: yes, as Redis].
    #[arg(long, value_name = "yes|no|optional")]
    tls_auth_clients: Option<String>,
    /// TLS versions served, e.g. "TLSv1.2 TLSv1.3" [default: both].
    #[arg(long, value_name = "LIST")]
    tls_protocols: Option<String>,
    /// TLS 1.3 cipher suites, colon-separated (TLS_AES_128_GCM_SHA256:...) [default: all].
    #[arg(long, value_name = "LIST")]
    tls_ciphersuites: Option<String>,
    /// Encrypt the links between cluster nodes too (Redis's tls-cluster): both ends present
    /// --tls-cert-file's certificate and must chain to --tls-ca-cert-file.
    #[arg(long, value_name = "yes|no", value_parser = parse_yes_no)]
    tls_cluster: Option<bool>,
    /// Serve the HTTP API over HTTPS, with --tls-cert-file's certificate.
    #[arg(long)]
    http_tls: bool,
    /// Serve the S3 endpoint over HTTPS, with --tls-cert-file's certificate.
    #[arg(long)]
    s3_tls: bool,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Shut down gracefully when standard input reaches end of file (used by
    /// `meridian up --processes`, so nodes do not outlive their parent).
    #[arg(long, hide = true)]
    stop_on_stdin_eof: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl NodeArgs {
    /// The `--port`, `--tls-*`, `--http-tls` and `--s3-tls` flags, over the file's settings.
    fn tls_flags(&self, c: &mut NodeConfig) {
        let r = &mut c.resp;
        if self.port.is_some() {
            r.port = self.port;
        }
        if let Some(v) = self.tls_port {
            r.tls_port = v;
        }
        if let Some(v) = &self.tls_cert_file {
            r.tls_cert_file = Some(v.clone());
        }
        if let Some(v) = &self.tls_key_file {
            r.tls_key_file = Some(v.clone());
        }
        if let Some(v) = &self.tls_ca_cert_file {
            r.tls_ca_cert_file = Some(v.clone());
        }
        if let Some(v) = &self.tls_auth_clients {
            r.tls_auth_clients = v.clone();
        }
        if let Some(v) = &self.tls_protocols {
            r.tls_protocols = v.clone();
        }
        if let Some(v) = &self.tls_ciphersuites {
            r.tls_ciphersuites = v.clone();
        }
        if let Some(v) = self.tls_cluster {
            r.tls_cluster = v;
        }
        c.http.tls |= self.http_tls;
        c.s3.tls |= self.s3_tls;
    }

    fn into_config(self) -> anyhow::Result<NodeConfig> {
        let mut c = match &self.config {
            Some(path) => NodeConfig::from_file(path)?,
            None => NodeConfig::default(),
        };
        self.tls_flags(&mut c);
        if let Some(v) = self.resp {
            c.resp.listen = v;
        }
        if let Some(v) = self.http {
            c.http.listen = v;
        }
        if let Some(v) = self.s3 {
            c.s3.listen = Some(v);
        }
        c.s3.keys.extend(self.s3_keys);
        c.s3.users.extend(self.s3_users);
        c.s3.open |= self.s3_open;
        if let Some(v) = self.engine {
            c.storage.engine = v;
        }
        if let Some(v) = self.data_dir {
            c.storage.data_dir = v;
        }
        if let Some(v) = self.fsync {
            c.storage.fsync = v;
        }
        if let Some(v) = self.aclfile {
            c.resp.aclfile = Some(v);
        }
        if let Some(v) = self.protected_mode {
            c.resp.protected_mode = v;
        }
        if let Some(v) = self.requirepass {
            c.resp.requirepass = Some(v);
        }
        if let Some(v) = self.max_clients {
            c.resp.max_clients = v;
        }
        if let Some(v) = self.cluster_secret {
            let Some(cluster) = c.cluster.as_mut() else {
                anyhow::bail!(
                    "--cluster-secret (or MERIDIAN_CLUSTER_SECRET) needs a [cluster] section: a \
                     single node has no peer links"
                );
            };
            cluster.secret = Some(v);
        }
        if let Some(v) = self.service_model {
            c.balance.service_model = Some(v);
        }
        if let Some(v) = self.repart {
            c.repart.mode = v;
        }
        if let Some(v) = self.repart_shards {
            c.repart.shards = v;
        }
        if let Some(v) = self.repart_workers {
            c.repart.workers = v;
        }
        if let Some(v) = self.repart_new_keys {
            c.repart.new_keys = v;
        }
        if let Some(v) = self.read_workers {
            c.balance.read_workers = Some(v);
        }
        c.validate()?;
        anyhow::ensure!(
            c.cluster.is_some() || c.balance == BalanceSection::default(),
            "--service-model, --read-workers and [balance] need a [cluster] section: a single \
             node reads only its own engine (try `meridian up --service-model ...`)"
        );
        anyhow::ensure!(
            c.cluster.is_some() || !c.txn.planner.enabled,
            "txn.planner.enabled needs a [cluster] section: the planner moves keys between the \
             partition leaders of a cluster (try `meridian up --txn-planner`)"
        );
        Ok(c)
    }
}

pub(crate) fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Runs a node until SIGINT or SIGTERM.
pub fn run(args: NodeArgs, signals: ShutdownSignals) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let threads = args.threads;
    let stdin_eof = args.stop_on_stdin_eof;
    let config = args.into_config()?;
    let want = meridian_server::fd_limit::wanted(&config);
    match meridian_server::fd_limit::raise_open_files_limit(want) {
        Ok(limit) if limit < want => tracing::warn!(
            limit,
            want,
            "the open-files limit is below what the connection caps may need              (resp.max_clients + http.max_connections + s3.max_connections + 256):              raise the hard limit (ulimit -Hn) or lower the caps"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not raise the open-files limit"),
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        anyhow::ensure!(n > 0, "--threads must be at least 1");
        runtime.worker_threads(n);
    }
    let runtime = runtime
        .enable_all()
        .thread_name("meridian-worker")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listeners = Listeners::bind(&config).await?;
        let shutdown = CancellationToken::new();
        tokio::spawn(stop_on_signal(shutdown.clone(), signals));
        if stdin_eof {
            stop_on_stdin_eof(shutdown.clone());
        }
        if config.cluster.is_some() {
            cluster::run_tcp(config, listeners, shutdown).await?;
        } else {
            let state = NodeState::open(config)?;
            node::run(state, listeners, shutdown).await?;
        }
        Ok(())
    })
}

/// Cancels `shutdown` when standard input closes (the parent that holds its other end died
/// or closed it).
fn stop_on_stdin_eof(shutdown: CancellationToken) {
    std::thread::spawn(move || {
        let mut sink = [0u8; 256];
        let mut stdin = std::io::stdin().lock();
        while matches!(std::io::Read::read(&mut stdin, &mut sink), Ok(n) if n > 0) {}
        tracing::info!("standard input closed: shutting down");
        shutdown.cancel();
    });
}

/// Cancels `shutdown` on the first SIGINT or SIGTERM; a second one exits at once.
pub(crate) async fn stop_on_signal(shutdown: CancellationToken, mut signals: ShutdownSignals) {
    if signals.recv().await.is_none() {
        tracing::error!("cannot wait for signals; stop the node with SIGKILL");
        return;
    }
    tracing::info!(
        "shutting down: draining connections and flushing the engine (signal again to exit now)"
    );
    shutdown.cancel();
    if signals.recv().await.is_some() {
        tracing::warn!("second signal: exiting without waiting");
        std::process::exit(130);
    }
}

/// Redis's `yes`/`no` option values.
fn parse_key_user(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(id, user)| (id.to_owned(), user.to_owned()))
        .ok_or_else(|| format!("'{s}' is not ACCESS_KEY_ID=USER"))
}

fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!("'{s}' is not yes or no")),
    }
}
