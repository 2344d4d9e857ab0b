//! `meridian ctl`: a thin client of a node's HTTP admin API (`/status`, `/cluster`,
//! `/cluster/members`, `/buckets`, `/wan`, `/timeline/force-master`, `/balance`,
//! `/balance/service-model`). One HTTP/1.1 request per connection (`crate::http_client`); replies
//! are shown as tables or summaries (`--json` for the raw reply); an error reply's code and
//! message are shown and the exit status is non-zero.

use crate::http_client;
use crate::up_cmd::parse_fraction;
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::time::Duration;

/// Flags of `meridian ctl`.
#[derive(Args, Debug)]
#[command(after_help = "\
EXAMPLES:
    meridian ctl cluster                          members, DCs, up/down, partitions
    meridian ctl --node 127.0.0.1:8003 status
    meridian ctl bucket set default r=one w=2 allow_mult=false
    meridian ctl join 7 --name dc1-n3 --dc dc1 --peer 127.0.0.9:7000
    meridian ctl leave 7
    meridian ctl wan set --latency 100ms --jitter 60% --loss 1%
    meridian ctl wan cut 0 1                      partition DC 0 from DC 1 (both ways)
    meridian ctl wan heal --all
    meridian ctl timeline force-master --bucket users --key alice --dc dc1 --yes
    meridian ctl bucket set default replica_selection=c3 extra_copies=true
    meridian ctl balance --dc                      hot keys, their copies, per-peer choices
    meridian ctl service-model fixed:300 --id 2    make node 2 slow (embedded cluster)

`meridian up` prints each node's HTTP address; node i listens on BASE+1000+i (8000 + i by
default).")]
pub struct CtlArgs {
    /// The node's HTTP address.
    #[arg(
        long,
        global = true,
        env = "MERIDIAN_NODE",
        default_value = "127.0.0.1:8000",
        value_name = "HOST:PORT"
    )]
    node: String,
    /// The password: the node's `requirepass` (sent as `Authorization: Bearer`), or --user's.
    #[arg(
        long,
        global = true,
        env = "MERIDIAN_REQUIREPASS",
        hide_env_values = true,
        value_name = "P"
    )]
    password: Option<String>,
    /// Act as this ACL user (`Authorization: Basic`, with --password) instead of `default`.
    #[arg(long, global = true, env = "MERIDIAN_USER", value_name = "NAME")]
    user: Option<String>,
    /// Speak HTTPS to nodes serving it (`http.tls`), trusting the CA in FILE (PEM), as
    /// redis-cli's --cacert.
    #[arg(long, global = true, env = "MERIDIAN_CACERT", value_name = "FILE")]
    cacert: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Subcommand, Debug)]
enum CtlCommand {
    /// The node's status (GET /status), as JSON.
    Status,
    /// The cluster's members as this node sees them (GET /cluster).
    Cluster {
        /// Print the raw JSON reply.
        #[arg(long)]
        json: bool,
    },
    /// The buckets this node knows, with their properties (GET /buckets).
    Buckets {
        /// Print the raw JSON reply.
        #[arg(long)]
        json: bool,
    },
    /// Change a bucket's properties in the whole cluster (PUT /buckets/NAME).
    #[command(subcommand)]
    Bucket(BucketCommand),
    /// Admit a node to the cluster (POST /cluster/members). Start it first with `join = true`
    /// in its `[cluster]` section; partitions then move to it and data follows.
    Join {
        /// The new node's id (unique, at least 1).
        id: u32,
        /// Its name.
        #[arg(long)]
        name: String,
        /// Its DC's name (a new name creates a DC, which re-places most partitions).
        #[arg(long)]
        dc: String,
        /// Its node-to-node address.
        #[arg(long, value_name = "HOST:PORT")]
        peer: String,
        /// Its RESP address (shown by `ctl cluster`).
        #[arg(long, value_name = "HOST:PORT")]
        resp: Option<String>,
        /// Its HTTP address (shown by `ctl cluster`).
        #[arg(long, value_name = "HOST:PORT")]
        http: Option<String>,
        /// Its RESP-over-TLS address (named to cluster clients connected over TLS).
        #[arg(long, value_name = "HOST:PORT")]
        resp_tls: Option<String>,
    },
    /// Remove a node from the cluster (DELETE /cluster/members/ID): its partitions move to
    /// the others and it hands its data off before the change completes.
    Leave {
        /// The node's id.
        id: u32,
    },
    /// Show or change the WAN emulator (GET and PUT /wan; embedded clusters).
    #[command(subcommand)]
    Wan(WanCommand),
    /// Timeline buckets: administrative actions.
    #[command(subcommand)]
    Timeline(TimelineCommand),
    /// Read load balancing as this node sees it (GET /balance): its DC's hot keys and the
    /// nodes holding their extra copies, the reads its strategies sent to each peer (and
    /// their share), outstanding reads and queues, its service model and counters.
    Balance {
        /// Also ask every other node of this node's DC (their HTTP addresses from GET
        /// /cluster) and show one line per node: service model, read queue, copies held.
        #[arg(long)]
        dc: bool,
        /// Print the raw JSON reply (with --dc: one per node, in an array).
        #[arg(long)]
        json: bool,
    },
    /// Set a node's service model at run time (PUT /balance/service-model): `real`,
    /// `fixed:MS` or `exp:MS` (mean), e.g. to make one node of an embedded cluster slow.
    ServiceModel {
        /// The model: real, fixed:MS or exp:MS (MS in milliseconds, at most 60000).
        model: String,
        /// The node to change, by id (default: the node --node points at). Any node of a
        /// `meridian up` cluster; with `up --processes` or a TCP cluster only the node
        /// itself (point --node at the other node's HTTP address instead).
        #[arg(long, value_name = "ID")]
        id: Option<u32>,
    },
}

#[derive(Subcommand, Debug)]
enum TimelineCommand {
    /// Force a key's mastership to a DC (POST /timeline/force-master), e.g. when its master's
    /// DC is cut off. THIS MAY LOSE ACKNOWLEDGED WRITES: whatever the old master had not
    /// propagated to the new master is discarded when the old master returns. Asks for
    /// confirmation unless --yes.
    ForceMaster {
        /// The key's bucket.
        #[arg(long)]
        bucket: String,
        /// The key (without the `bucket:` prefix).
        #[arg(long)]
        key: String,
        /// The DC to move the mastership to: its name (`dc1`, `east`) or id (`1`).
        #[arg(long)]
        dc: String,
        /// Do not ask for confirmation (scripts; the warning is still printed).
        #[arg(long)]
        yes: bool,
    },
}

/// What `ctl timeline force-master` prints before it runs.
const FORCE_MASTER_WARNING: &str = "warning: forcing a re-master MAY LOSE ACKNOWLEDGED WRITES: \
     every write the current master acknowledged but had not propagated to the new master is \
     discarded when the old master becomes reachable again.";

/// Asks for confirmation of a forced re-master: `--yes` confirms; otherwise an interactive
/// user must type `yes`, and without a terminal the command refuses (a script must say
/// `--yes`, so it never loses writes by accident).
fn confirm_force(
    yes: bool,
    interactive: bool,
    mut input: impl std::io::BufRead,
    mut err: impl Write,
) -> anyhow::Result<()> {
    writeln!(err, "{FORCE_MASTER_WARNING}")?;
    if yes {
        return Ok(());
    }
    if !interactive {
        bail!("refusing to force a re-master without confirmation: run it again with --yes");
    }
    write!(err, "Type 'yes' to force the re-master: ")?;
    err.flush()?;
    let mut line = String::new();
    input.read_line(&mut line)?;
    if line.trim() != "yes" {
        bail!("aborted: nothing was changed");
    }
    Ok(())
}

#[derive(Subcommand, Debug)]
enum BucketCommand {
    /// Set properties: `meridian ctl bucket set NAME key=value...` (quorums: one, quorum, all
    /// or a number; booleans: true, false; `key=null` unsets). Properties not named keep their
    /// current values unless --replace.
    Set {
        /// The bucket.
        name: String,
        /// `key=value` pairs, e.g. `n_val=3 r=one w=2 allow_mult=false`.
        #[arg(required = true, value_name = "KEY=VALUE")]
        props: Vec<String>,
        /// Replace every property (unnamed ones revert to their defaults) instead of merging.
        #[arg(long)]
        replace: bool,
    },
}

#[derive(Subcommand, Debug)]
enum WanCommand {
    /// The emulator's links, partitions and counters (GET /wan).
    Show {
        /// Print the raw JSON reply.
        #[arg(long)]
        json: bool,
    },
    /// Change a link (PUT /wan): only the settings given change.
    Set(WanSetArgs),
    /// Partition A from B (both ways unless --one-way: then A's messages to B are dropped).
    /// A side is a DC (`0`, `dc0`), a node (`node:4`, ids start at 1) or `any`.
    Cut {
        /// Sending side.
        a: String,
        /// Receiving side.
        b: String,
        /// Cut only the direction A → B.
        #[arg(long)]
        one_way: bool,
    },
    /// Heal a partition between A and B (both ways unless --one-way), or every one (--all).
    Heal {
        /// One side (as for `cut`).
        #[arg(required_unless_present = "all", requires = "b")]
        a: Option<String>,
        /// The other side.
        b: Option<String>,
        /// Heal every partition.
        #[arg(long, conflicts_with_all = ["a", "b", "one_way"])]
        all: bool,
        /// Heal only the direction A → B.
        #[arg(long)]
        one_way: bool,
    },
}

/// Flags of `meridian ctl wan set`.
#[derive(Args, Debug)]
struct WanSetArgs {
    /// Change the link between DCs (the default).
    #[arg(long, conflicts_with = "intra_dc")]
    inter_dc: bool,
    /// Change the link between nodes of the same DC.
    #[arg(long)]
    intra_dc: bool,
    /// One-way latency (e.g. 100ms, 1.5s; a bare number is milliseconds): sets rtt to twice it.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "rtt")]
    latency: Option<Duration>,
    /// Round-trip time of the link (twice the one-way latency).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    rtt: Option<Duration>,
    /// Maximum extra delay as a fraction of the latency (60% or 0.6).
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction)]
    jitter: Option<f64>,
    /// Loss probability (stream mode: a lost message arrives late; datagram: dropped).
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction)]
    loss: Option<f64>,
    /// Duplication probability.
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction)]
    duplicate: Option<f64>,
    /// Reordering probability (datagram mode only).
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction)]
    reorder: Option<f64>,
    /// Link capacity in bytes per second, or `unlimited`.
    #[arg(long, value_name = "BYTES_PER_SEC|unlimited", value_parser = parse_bandwidth)]
    bandwidth: Option<Bandwidth>,
    /// Delivery semantics of every link: stream (TCP-like) or datagram (UDP-like).
    #[arg(long, value_parser = ["stream", "datagram"])]
    mode: Option<String>,
}

#[derive(Clone, Copy, Debug)]
enum Bandwidth {
    Unlimited,
    BytesPerSec(u64),
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    meridian_net::wan::parse_duration(s)
}

fn parse_bandwidth(s: &str) -> Result<Bandwidth, String> {
    if s.eq_ignore_ascii_case("unlimited") {
        return Ok(Bandwidth::Unlimited);
    }
    s.parse()
        .map(Bandwidth::BytesPerSec)
        .map_err(|_| format!("'{s}' is not a number of bytes per second or `unlimited`"))
}

/// Runs one `meridian ctl` command. A failure is printed as one plain line (its code and
/// message, no backtrace) and the process exits with status 1.
pub fn run(args: CtlArgs) -> anyhow::Result<()> {
    if let Err(e) = execute(args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
    Ok(())
}

fn execute(args: CtlArgs) -> anyhow::Result<()> {
    let https = args.node.starts_with("https://");
    if https && args.cacert.is_none() {
        anyhow::bail!(
            "{} is HTTPS: give --cacert FILE, the CA its certificate chains to",
            args.node
        );
    }
    let mut access = http_client::Access {
        user: args.user,
        password: args.password,
        tls: None,
    };
    if let Some(ca) = &args.cacert {
        access = access.with_ca(ca)?;
    }
    let client = Client {
        node: args
            .node
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_owned(),
        access,
    };
    let mut out = std::io::stdout().lock();
    match args.command {
        CtlCommand::Status => {
            writeln!(out, "{}", pretty(&client.get("/status")?))?;
        }
        CtlCommand::Cluster { json } => {
            let c = client.get("/cluster")?;
            if json {
                writeln!(out, "{}", pretty(&c))?;
            } else {
                write!(out, "{}", cluster_table(&c))?;
            }
        }
        CtlCommand::Buckets { json } => {
            let b = client.get("/buckets")?;
            if json {
                writeln!(out, "{}", pretty(&b))?;
            } else {
                write!(out, "{}", buckets_table(&b))?;
            }
        }
        CtlCommand::Bucket(BucketCommand::Set {
            name,
            props,
            replace,
        }) => {
            let patch = bucket_patch(&props)?;
            let mut body = Map::new();
            if !replace {
                let current = client.get("/buckets")?;
                if let Some(Value::Object(p)) = current["buckets"].get(&name) {
                    body = p.clone();
                }
            }
            for (k, v) in patch {
                if v.is_null() {
                    body.remove(&k);
                } else {
                    body.insert(k, v);
                }
            }
            let reply = client.request(
                "PUT",
                &format!("/buckets/{}", percent_encode(&name)),
                Some(&Value::Object(body)),
            )?;
            writeln!(
                out,
                "bucket {name}: {} (whole cluster)",
                props_line(&reply["props"])
            )?;
        }
        CtlCommand::Join {
            id,
            name,
            dc,
            peer,
            resp,
            http,
            resp_tls,
        } => {
            let body = json!({ "id": id, "name": name, "dc": dc, "peer": peer, "resp": resp,
                "http": http, "resp_tls": resp_tls });
            let reply = client.request("POST", "/cluster/members", Some(&body))?;
            write!(
                out,
                "{}",
                change_summary(&format!("node {id} joins"), &reply)
            )?;
        }
        CtlCommand::Leave { id } => {
            let reply = client.request("DELETE", &format!("/cluster/members/{id}"), None)?;
            write!(
                out,
                "{}",
                change_summary(&format!("node {id} leaves"), &reply)
            )?;
        }
        CtlCommand::Wan(WanCommand::Show { json }) => {
            let w = client.get("/wan")?;
            if json {
                writeln!(out, "{}", pretty(&w))?;
            } else {
                write!(out, "{}", wan_summary(&w))?;
            }
        }
        CtlCommand::Wan(cmd) => {
            let body = wan_update(cmd)?;
            let w = client.request("PUT", "/wan", Some(&body))?;
            write!(out, "{}", wan_summary(&w))?;
        }
        CtlCommand::Balance { dc, json } => {
            let here = client.get("/balance")?;
            let others = if dc {
                client.dc_balances(&here)?
            } else {
                Vec::new()
            };
            if json {
                if dc {
                    let mut all = vec![here];
                    all.extend(others.into_iter().map(|(_, v)| v));
                    writeln!(out, "{}", pretty(&Value::Array(all)))?;
                } else {
                    writeln!(out, "{}", pretty(&here))?;
                }
            } else {
                write!(out, "{}", balance_report(&here))?;
                if dc {
                    write!(out, "{}", dc_table(&here, &others))?;
                }
            }
        }
        CtlCommand::ServiceModel { model, id } => {
            let mut body = json!({ "model": model });
            if let Some(id) = id {
                body["node"] = id.into();
            }
            let r = client.request("PUT", "/balance/service-model", Some(&body))?;
            writeln!(
                out,
                "node {} ({}): service model {} (was {})",
                plain(&r["node"]),
                plain(&r["name"]),
                plain(&r["service_model"]),
                plain(&r["previous"]),
            )?;
        }
        CtlCommand::Timeline(TimelineCommand::ForceMaster {
            bucket,
            key,
            dc,
            yes,
        }) => {
            use std::io::IsTerminal;
            let stdin = std::io::stdin();
            let interactive = stdin.is_terminal();
            confirm_force(yes, interactive, stdin.lock(), std::io::stderr())?;
            let body = json!({ "bucket": bucket, "key": key, "dc": dc });
            let r = client.request("POST", "/timeline/force-master", Some(&body))?;
            writeln!(
                out,
                "{}: the master is now node {} in {}, version {}\n{}",
                plain(&r["key"]),
                plain(&r["master"]["node"]),
                plain(&r["master"]["dc"]),
                plain(&r["version"]),
                plain(&r["warning"]),
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

/// What `ctl join` and `ctl leave` print: the change and where the cluster is now.
fn change_summary(what: &str, reply: &Value) -> String {
    let members: Vec<String> = reply["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m.to_string())
        .collect();
    format!(
        "{what}: metadata version {}, layout epoch {}, members [{}]; handoff {} \
         (`meridian ctl cluster` shows when it is done)\n",
        reply["metadata_version"],
        reply["layout_epoch"],
        members.join(", "),
        reply["handoff"].as_str().unwrap_or("?"),
    )
}

/// The body of `PUT /wan` for a `wan set`, `cut` or `heal`.
fn wan_update(cmd: WanCommand) -> anyhow::Result<Value> {
    Ok(match cmd {
        WanCommand::Show { .. } => unreachable!("handled by the caller"),
        WanCommand::Set(s) => {
            let mut link = Map::new();
            if let Some(rtt) = s.rtt.or(s.latency.map(|l| l * 2)) {
                link.insert("rtt".into(), meridian_net::wan::format_duration(rtt).into());
            }
            for (name, v) in [
                ("jitter", s.jitter),
                ("loss", s.loss),
                ("duplicate", s.duplicate),
                ("reorder", s.reorder),
            ] {
                if let Some(v) = v {
                    link.insert(name.into(), json!(v));
                }
            }
            match s.bandwidth {
                Some(Bandwidth::Unlimited) => {
                    link.insert("bandwidth_bytes_per_sec".into(), Value::Null);
                }
                Some(Bandwidth::BytesPerSec(b)) => {
                    link.insert("bandwidth_bytes_per_sec".into(), b.into());
                }
                None => {}
            }
            let mut body = Map::new();
            if !link.is_empty() {
                let which = if s.intra_dc { "intra_dc" } else { "inter_dc" };
                body.insert(which.into(), Value::Object(link));
            }
            if let Some(m) = s.mode {
                body.insert("mode".into(), m.into());
            }
            if body.is_empty() {
                bail!(
                    "nothing to change: give --latency, --rtt, --jitter, --loss, --duplicate, \
                     --reorder, --bandwidth or --mode"
                );
            }
            Value::Object(body)
        }
        WanCommand::Cut { a, b, one_way } => {
            let (a, b) = (parse_scope(&a)?, parse_scope(&b)?);
            if one_way {
                json!({ "cut": [{ "from": a, "to": b }] })
            } else {
                json!({ "cut_both": [[a, b]] })
            }
        }
        WanCommand::Heal { a, b, all, one_way } => match (a, b) {
            _ if all => json!({ "heal_all": true }),
            (Some(a), Some(b)) => {
                let (a, b) = (parse_scope(&a)?, parse_scope(&b)?);
                if one_way {
                    json!({ "heal": [{ "from": a, "to": b }] })
                } else {
                    json!({ "heal_both": [[a, b]] })
                }
            }
            _ => bail!("give two sides (e.g. `wan heal 0 1`) or --all"),
        },
    })
}

/// A partition side as `/wan` expects it: `"any"`, `{"dc":N}` or `{"node":N}`.
fn parse_scope(s: &str) -> anyhow::Result<Value> {
    let t = s.trim().to_ascii_lowercase();
    if t == "any" {
        return Ok("any".into());
    }
    let (kind, num) = if let Some(n) = t.strip_prefix("node:").or(t.strip_prefix("node")) {
        ("node", n)
    } else if let Some(n) = t.strip_prefix("dc:").or(t.strip_prefix("dc")) {
        ("dc", n)
    } else {
        ("dc", t.as_str())
    };
    let n: u64 = num.parse().map_err(|_| {
        anyhow::anyhow!(
            "'{s}' is not a DC or a node: write a DC id (0, dc0), a node id (node:4) or any"
        )
    })?;
    Ok(json!({ kind: n }))
}

/// `key=value` pairs to JSON: integers, `true`/`false` and `null` parsed, anything else (e.g.
/// `one`, `quorum`, `all`, `eventual`) a string.
fn parse_pairs(pairs: &[String]) -> anyhow::Result<Vec<(String, Value)>> {
    pairs
        .iter()
        .map(|p| {
            let Some((k, v)) = p.split_once('=') else {
                bail!("'{p}' is not key=value (e.g. r=one, n_val=3, allow_mult=false)");
            };
            let (k, v) = (k.trim(), v.trim());
            anyhow::ensure!(!k.is_empty(), "'{p}' has no key");
            let value = if let Ok(n) = v.parse::<u64>() {
                n.into()
            } else {
                match v.to_ascii_lowercase().as_str() {
                    "true" => true.into(),
                    "false" => false.into(),
                    "null" => Value::Null,
                    "one" | "quorum" | "all" => v.to_ascii_lowercase().into(),
                    _ => v.into(),
                }
            };
            Ok((k.to_owned(), value))
        })
        .collect()
}

/// The pairs of `bucket set`, as `PUT /buckets` takes them: [`parse_pairs`], with strategy
/// names (`replica_selection=C3`) in the snake_case the bucket properties spell.
fn bucket_patch(pairs: &[String]) -> anyhow::Result<Vec<(String, Value)>> {
    let mut patch = parse_pairs(pairs)?;
    for (k, v) in &mut patch {
        if k == "replica_selection"
            && let Value::String(name) = v
        {
            *name = name.to_ascii_lowercase();
        }
    }
    Ok(patch)
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// A JSON scalar without quotes.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        v => v.to_string(),
    }
}

fn cluster_table(c: &Value) -> String {
    let mut t = format!(
        "{:<12} {:>4} {:>3}  {:<22} {:<22} {:<13} {:>7} {:>9}\n",
        "NAME", "ID", "DC", "RESP", "HTTP", "STATUS", "PRIMARY", "SECONDARY"
    );
    for m in c["members"].as_array().into_iter().flatten() {
        let mut name = plain(&m["name"]);
        if m["self"] == true {
            name.push('*');
        }
        let mut status = plain(&m["status"]);
        if m["member"] == "leaving" {
            status.push_str(" leaving");
        }
        t.push_str(&format!(
            "{:<12} {:>4} {:>3}  {:<22} {:<22} {:<13} {:>7} {:>9}\n",
            name,
            plain(&m["id"]),
            plain(&m["dc"]),
            plain(&m["resp"]),
            plain(&m["http"]),
            status,
            plain(&m["partitions"]["primary"]),
            plain(&m["partitions"]["secondary"]),
        ));
    }
    let l = &c["layout"];
    t.push_str(&format!(
        "layout epoch {}, Q {}, target N {}, metadata version {}, claimant {}; * = the node \
         answering (status as its failure detector sees it)\n",
        plain(&l["epoch"]),
        plain(&l["q"]),
        plain(&l["target_n"]),
        plain(&c["metadata_version"]),
        plain(&c["claimant"]),
    ));
    let h = &c["handoff"];
    if h["running"] == true {
        t.push_str(&format!(
            "handoff from epoch {} running{}\n",
            plain(&h["from_epoch"]),
            match h["claimant_waits_for"].as_array() {
                Some(w) => format!(
                    "; the claimant waits for nodes {}",
                    w.iter().map(plain).collect::<Vec<_>>().join(", ")
                ),
                None => String::new(),
            }
        ));
    }
    if c["joined"] == false {
        t.push_str("this node has not joined yet: admit it with `meridian ctl join`\n");
    }
    t
}

/// A float as a table shows it: `-` when absent or not finite, else up to 3 decimals.
fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.is_finite() => {
            let t = format!("{f:.3}");
            t.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
        _ => "-".into(),
    }
}

/// What `ctl balance` prints of one node's `GET /balance`: the hot keys and their copies, the
/// per-peer view, the counters.
fn balance_report(b: &Value) -> String {
    let st = &b["stats"];
    let map = &b["extra_map"];
    let mut t = format!(
        "node {} (id {}, {}): service model {}, {} read workers, read queue {}\n",
        plain(&b["name"]),
        plain(&b["node"]),
        plain(&b["dc"]),
        plain(&b["service_model"]),
        plain(&b["read_workers"]),
        plain(&st["queue"]),
    );
    let keys = map["keys"].as_array().cloned().unwrap_or_default();
    t.push_str(&format!(
        "hot keys of the DC (root {} = node {}, map epoch {}): {}\n",
        plain(&map["root_name"]),
        plain(&map["root"]),
        plain(&map["epoch"]),
        keys.len()
    ));
    if !keys.is_empty() {
        t.push_str(&format!(
            "  {:<24} {:<20} {:>6}  {}\n",
            "KEY", "HEX", "COPIES", "EXTRA COPIES ON"
        ));
        for k in &keys {
            let mut hex = plain(&k["key_hex"]);
            if hex.len() > 20 {
                hex.truncate(17);
                hex.push_str("...");
            }
            let mut key: String = plain(&k["key"]).chars().take(24).collect();
            key = key.replace(|c: char| c.is_control(), "?");
            let holders: Vec<String> = k["holders"]
                .as_array()
                .into_iter()
                .flatten()
                .zip(k["holder_names"].as_array().into_iter().flatten())
                .map(|(id, name)| format!("{} ({})", plain(name), plain(id)))
                .collect();
            t.push_str(&format!(
                "  {:<24} {:<20} {:>6}  {}\n",
                key,
                hex,
                holders.len(),
                holders.join(", ")
            ));
        }
    }
    let peers = b["peers"].as_array().cloned().unwrap_or_default();
    if peers.is_empty() {
        t.push_str(
            "replica choices: none yet (reads that need one replica: eventual R=1 with \
                    read_fanout=quorum, timeline read_any)\n",
        );
    } else {
        t.push_str(&format!(
            "replica choices of this coordinator:\n  {:<12} {:>4} {:>9} {:>7} {:>11} {:>7} {:>10} {:>9} {:>9}\n",
            "PEER", "ID", "CHOSEN", "SHARE", "OUTSTANDING", "QUEUE", "SERVICE_MS", "C3_SCORE", "SNITCH"
        ));
        for p in &peers {
            let share = p["share"]
                .as_f64()
                .map_or_else(|| "-".into(), |f| format!("{:.1}%", f * 100.0));
            t.push_str(&format!(
                "  {:<12} {:>4} {:>9} {:>7} {:>11} {:>7} {:>10} {:>9} {:>9}\n",
                plain(&p["name"]),
                plain(&p["node"]),
                plain(&p["chosen"]),
                share,
                plain(&p["outstanding"]),
                plain(&p["queue"]),
                num(&p["service_ms"]),
                num(&p["c3_score"]),
                num(&p["snitch_score"]),
            ));
        }
    }
    let cc = &st["copy_create_ms"];
    t.push_str(&format!(
        "extra copies held here {} (reads {}, misses {}); duplicate services {}, cancelled {}, \
         c3 overloads {}; copy_create_ms p50 {} p99 {} ({} recent); sketch error bound {}\n",
        plain(&st["extra_copies"]),
        plain(&st["extra_reads"]),
        plain(&st["extra_misses"]),
        plain(&st["duplicate_services"]),
        plain(&st["cancelled"]),
        plain(&st["c3_overloads"]),
        plain(&cc["p50"]),
        plain(&cc["p99"]),
        plain(&cc["samples"]),
        plain(&st["sketch_error_bound"]),
    ));
    t
}

/// What `ctl balance --dc` adds: one line per node of the DC (this one first).
fn dc_table(here: &Value, others: &[(String, Value)]) -> String {
    let mut t = format!(
        "nodes of {}:\n  {:<12} {:>4} {:<14} {:>7} {:>12} {:>11}\n",
        plain(&here["dc"]),
        "NODE",
        "ID",
        "SERVICE_MODEL",
        "QUEUE",
        "EXTRA_COPIES",
        "EXTRA_READS"
    );
    let row = |b: &Value| {
        format!(
            "  {:<12} {:>4} {:<14} {:>7} {:>12} {:>11}\n",
            plain(&b["name"]),
            plain(&b["node"]),
            plain(&b["service_model"]),
            plain(&b["stats"]["queue"]),
            plain(&b["stats"]["extra_copies"]),
            plain(&b["stats"]["extra_reads"]),
        )
    };
    t.push_str(&row(here));
    for (name, b) in others {
        if b.get("error").is_some() {
            t.push_str(&format!(
                "  {:<12} unreachable: {}\n",
                name,
                plain(&b["error"])
            ));
        } else {
            t.push_str(&row(b));
        }
    }
    t
}

/// A bucket's properties as `key=value` pairs (unset ones, `null`, left out).
fn props_line(p: &Value) -> String {
    let set: Vec<String> = p
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| format!("{k}={}", plain(v)))
        .collect();
    if set.is_empty() {
        "(defaults)".into()
    } else {
        set.join(" ")
    }
}

fn buckets_table(b: &Value) -> String {
    let mut t = format!("{:<16} PROPERTIES\n", "BUCKET");
    for (name, props) in b["buckets"].as_object().into_iter().flatten() {
        t.push_str(&format!("{name:<16} {}\n", props_line(props)));
    }
    t.push_str(&format!("(scope: {})\n", plain(&b["scope"])));
    t
}

fn scope_name(s: &Value) -> String {
    if let Some(d) = s.get("dc") {
        format!("dc{}", plain(d))
    } else if let Some(n) = s.get("node") {
        format!("node:{}", plain(n))
    } else {
        plain(s)
    }
}

fn link_line(l: &Value) -> String {
    let rtt = plain(&l["rtt"]);
    let one_way = meridian_net::wan::parse_duration(&rtt)
        .map(|d| format!("{:?}", d / 2))
        .unwrap_or_else(|_| "?".into());
    let pct = |v: &Value| {
        v.as_f64()
            .map(|f| format!("{}%", (f * 1e6).round() / 1e4))
            .unwrap_or_else(|| plain(v))
    };
    let bandwidth = match &l["bandwidth_bytes_per_sec"] {
        Value::Null => "unlimited".to_owned(),
        v => format!("{} B/s", plain(v)),
    };
    format!(
        "one-way latency {one_way} (rtt {rtt}), jitter {}, loss {}, duplicate {}, reorder {}, \
         bandwidth {bandwidth}",
        pct(&l["jitter"]),
        pct(&l["loss"]),
        pct(&l["duplicate"]),
        pct(&l["reorder"]),
    )
}

fn wan_summary(w: &Value) -> String {
    let c = &w["config"];
    let mut t = format!("mode:     {}\n", plain(&c["mode"]));
    t.push_str(&format!("inter-DC: {}\n", link_line(&c["inter_dc"])));
    t.push_str(&format!("intra-DC: {}\n", link_line(&c["intra_dc"])));
    for (field, label) in [("dc_links", "DC pair"), ("node_links", "node pair")] {
        for l in c[field].as_array().into_iter().flatten() {
            let arrow = if l["both"] == true { "<->" } else { "->" };
            t.push_str(&format!(
                "{label} {} {arrow} {}: {}\n",
                plain(&l["from"]),
                plain(&l["to"]),
                link_line(&l["link"])
            ));
        }
    }
    let cuts: Vec<String> = c["cuts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| format!("{} -> {}", scope_name(&k["from"]), scope_name(&k["to"])))
        .collect();
    t.push_str(&format!(
        "cuts:     {}\n",
        if cuts.is_empty() {
            "none".to_owned()
        } else {
            cuts.join(", ")
        }
    ));
    if let Some(s) = w["stats"].as_object() {
        let counters: Vec<String> = s.iter().map(|(k, v)| format!("{k} {}", plain(v))).collect();
        t.push_str(&format!("messages: {}\n", counters.join(", ")));
    }
    t
}

/// Every byte but RFC 3986's unreserved characters (`A-Za-z0-9-._~`).
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a path segment (upper-case hex).
fn percent_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, PATH_SEGMENT).to_string()
}

/// One node's API, through [`http_client`]: one request per connection.
struct Client {
    node: String,
    access: http_client::Access,
}

impl Client {
    fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.request("GET", path, None)
    }

    /// `GET /balance` of every other member of the DC of the node that answered `here`
    /// (addresses from its `GET /cluster`), by name; a node that cannot be asked gets
    /// `{"error": "..."}`.
    fn dc_balances(&self, here: &Value) -> anyhow::Result<Vec<(String, Value)>> {
        let cluster = self.get("/cluster")?;
        let me = &here["node"];
        let dc = cluster["members"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| &m["id"] == me)
            .map(|m| m["dc"].clone())
            .unwrap_or(Value::Null);
        let mut out = Vec::new();
        for m in cluster["members"].as_array().into_iter().flatten() {
            if &m["id"] == me || m["dc"] != dc {
                continue;
            }
            let name = plain(&m["name"]);
            let reply = match m["http"].as_str() {
                Some(addr) => {
                    let other = Client {
                        node: addr.to_owned(),
                        access: self.access.clone(),
                    };
                    other
                        .get("/balance")
                        .unwrap_or_else(|e| json!({ "error": format!("{e:#}") }))
                }
                None => json!({ "error": "no HTTP address in GET /cluster" }),
            };
            out.push((name, reply));
        }
        Ok(out)
    }

    /// Sends a request; returns the JSON reply, or an error naming the reply's code and
    /// message.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let http = http_client::Client::new(self.node.clone(), self.access.clone());
        let reply = match http.send_blocking(method, path, body.map(Value::to_string)) {
            Ok(reply) => reply,
            Err(e @ http_client::Error::Unreachable { .. }) => return Err(e.into()),
            Err(e) => {
                return Err(
                    anyhow::Error::new(e).context(format!("{method} {path} on {}", self.node))
                );
            }
        };
        let (status, reply) = (reply.status, reply.body);
        let json: Option<Value> = serde_json::from_slice(&reply).ok();
        if (200..300).contains(&status) {
            return json.with_context(|| {
                format!(
                    "{method} {path} on {}: the reply is not JSON: {}",
                    self.node,
                    String::from_utf8_lossy(&reply)
                )
            });
        }
        let error = json.as_ref().map(|j| &j["error"]);
        match error.and_then(|e| Some((e["code"].as_str()?, e["message"].as_str()?))) {
            Some((code, message)) => {
                let hint = if status == 401 {
                    " (give --password or set MERIDIAN_REQUIREPASS)"
                } else {
                    ""
                };
                bail!("{code}: {message}{hint} (HTTP {status} from {method} {path})")
            }
            None => bail!(
                "HTTP {status} from {method} {path} on {}: {}",
                self.node,
                String::from_utf8_lossy(&reply).trim()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_numbers_quorums_and_booleans() {
        let p =
            parse_pairs(&["n_val=3".into(), "r=ONE".into(), "allow_mult=false".into()]).unwrap();
        assert_eq!(
            p,
            [
                ("n_val".to_owned(), json!(3)),
                ("r".to_owned(), json!("one")),
                ("allow_mult".to_owned(), json!(false)),
            ]
        );
        assert!(parse_pairs(&["r".into()]).is_err());
    }

    #[test]
    fn bucket_patches_take_strategies_in_any_case_and_booleans() {
        let p = bucket_patch(&[
            "replica_selection=C3".into(),
            "extra_copies=true".into(),
            "r=1".into(),
        ])
        .unwrap();
        assert_eq!(
            p,
            [
                ("replica_selection".to_owned(), json!("c3")),
                ("extra_copies".to_owned(), json!(true)),
                ("r".to_owned(), json!(1)),
            ]
        );
        // Unset with null; an unknown name is the node's to refuse (it lists the valid ones).
        let p = bucket_patch(&[
            "replica_selection=null".into(),
            "replica_selection=Fastest".into(),
        ])
        .unwrap();
        assert_eq!(p[0].1, Value::Null);
        assert_eq!(p[1].1, json!("fastest"));
    }

    /// A `GET /balance` reply as a node gives it.
    fn balance_reply() -> Value {
        json!({
            "node": 1, "name": "dc0-n0", "dc": "dc0", "service_model": "fixed:30",
            "read_workers": 1,
            "stats": {
                "queue": 3, "extra_copies": 0, "extra_reads": 0, "extra_misses": 0,
                "duplicate_services": 2, "cancelled": 1, "c3_overloads": 0,
                "sketch_error_bound": 4,
                "copy_create_ms": {"samples": 2, "p50": 120, "p99": 300, "max": 300},
            },
            "peers": [
                {"node": 2, "name": "dc0-n1", "chosen": 30, "share": 0.75, "outstanding": 1,
                 "queue": 2, "service_ms": 30.25, "snitch_score": 1.0, "c3_score": 12.5,
                 "c3_rate": 3.0},
                {"node": 3, "name": "dc0-n2", "chosen": 10, "share": 0.25, "outstanding": 0,
                 "queue": 0, "service_ms": null, "snitch_score": 0.0, "c3_score": null,
                 "c3_rate": 1.0},
            ],
            "extra_map": {"root": 1, "root_name": "dc0-n0", "epoch": 7, "keys": [
                {"key": "hot", "key_hex": "686f74", "holders": [3, 4],
                 "holder_names": ["dc0-n2", "dc0-n3"]},
                {"key": "bin\u{1}ary", "key_hex": "62696e0161727979797979797979797979",
                 "holders": [2], "holder_names": ["dc0-n1"]},
            ]},
            "extra_keys_held": [],
        })
    }

    #[test]
    fn the_balance_report_shows_hot_keys_their_copies_and_the_peers() {
        let t = balance_report(&balance_reply());
        let line = |start: &str| {
            t.lines()
                .find(|l| l.trim_start().starts_with(start))
                .unwrap_or_else(|| panic!("no line starting with {start}:\n{t}"))
                .to_owned()
        };
        assert!(
            line("node dc0-n0").contains("service model fixed:30, 1 read workers, read queue 3")
        );
        assert!(line("hot keys").contains("root dc0-n0 = node 1, map epoch 7): 2"));
        let hot = line("hot  ");
        assert!(
            hot.contains("686f74") && hot.contains("dc0-n2 (3), dc0-n3 (4)"),
            "{hot}"
        );
        // Control bytes are not printed; long hex is cut.
        let bin = line("bin?ary");
        assert!(
            bin.contains("62696e01617279797...") && bin.contains("dc0-n1 (2)"),
            "{bin}"
        );
        let peer = line("dc0-n1");
        let f: Vec<&str> = peer.split_whitespace().collect();
        assert_eq!(
            f,
            ["dc0-n1", "2", "30", "75.0%", "1", "2", "30.25", "12.5", "1"]
        );
        let peer = line("dc0-n2");
        assert!(peer.split_whitespace().any(|x| x == "-"), "{peer}");
        assert!(
            t.contains("copy_create_ms p50 120 p99 300 (2 recent)"),
            "{t}"
        );
        assert!(t.contains("duplicate services 2, cancelled 1"), "{t}");

        let mut idle = balance_reply();
        idle["peers"] = json!([]);
        idle["extra_map"]["keys"] = json!([]);
        let t = balance_report(&idle);
        assert!(
            t.contains("): 0\n") && t.contains("replica choices: none yet"),
            "{t}"
        );
    }

    #[test]
    fn the_dc_table_has_a_line_per_node() {
        let here = balance_reply();
        let mut other = balance_reply();
        other["name"] = "dc0-n1".into();
        other["node"] = 2.into();
        other["service_model"] = "real".into();
        let t = dc_table(
            &here,
            &[
                ("dc0-n1".into(), other),
                ("dc0-n2".into(), json!({"error": "cannot reach node"})),
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "nodes of dc0:");
        assert!(
            lines[2]
                .split_whitespace()
                .eq(["dc0-n0", "1", "fixed:30", "3", "0", "0"])
        );
        assert!(
            lines[3]
                .split_whitespace()
                .eq(["dc0-n1", "2", "real", "3", "0", "0"])
        );
        assert!(lines[4].contains("dc0-n2") && lines[4].contains("unreachable: cannot reach node"));
    }

    #[test]
    fn scopes_are_dcs_nodes_or_any() {
        assert_eq!(parse_scope("1").unwrap(), json!({"dc": 1}));
        assert_eq!(parse_scope("dc0").unwrap(), json!({"dc": 0}));
        assert_eq!(parse_scope("node:4").unwrap(), json!({"node": 4}));
        assert_eq!(parse_scope("any").unwrap(), json!("any"));
        assert!(parse_scope("east").is_err());
    }

    #[test]
    fn wan_set_builds_a_link_patch() {
        let set = |latency: &str| WanSetArgs {
            inter_dc: false,
            intra_dc: false,
            latency: Some(parse_duration(latency).unwrap()),
            rtt: None,
            jitter: Some(0.6),
            loss: None,
            duplicate: None,
            reorder: None,
            bandwidth: Some(Bandwidth::Unlimited),
            mode: None,
        };
        let body = wan_update(WanCommand::Set(set("100ms"))).unwrap();
        assert_eq!(
            body,
            json!({"inter_dc": {"rtt": "200ms", "jitter": 0.6, "bandwidth_bytes_per_sec": null}})
        );
        let cut = WanCommand::Cut {
            a: "0".into(),
            b: "1".into(),
            one_way: true,
        };
        assert_eq!(
            wan_update(cut).unwrap(),
            json!({"cut": [{"from": {"dc": 0}, "to": {"dc": 1}}]})
        );
    }

    #[test]
    fn force_master_needs_a_confirmation() {
        let run = |yes, interactive, input: &str| {
            let mut err = Vec::new();
            let r = confirm_force(yes, interactive, input.as_bytes(), &mut err);
            (
                r.map_err(|e| e.to_string()),
                String::from_utf8(err).unwrap(),
            )
        };
        // The warning comes first, whatever follows.
        for (yes, interactive, input) in
            [(true, false, ""), (false, false, ""), (false, true, "no\n")]
        {
            let (_, err) = run(yes, interactive, input);
            assert!(err.contains("MAY LOSE ACKNOWLEDGED WRITES"), "{err}");
        }
        assert!(run(true, false, "").0.is_ok());
        let (r, _) = run(false, false, "yes\n");
        assert!(
            r.unwrap_err().contains("--yes"),
            "no terminal: never reads stdin"
        );
        assert!(run(false, true, "yes\n").0.is_ok());
        assert!(run(false, true, "y\n").0.unwrap_err().contains("aborted"));
        assert!(run(false, true, "").0.unwrap_err().contains("aborted"));
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
        assert_eq!(percent_encode("x-y.z_~é"), "x-y.z_~%C3%A9");
    }
}
