//! The INFO text: Redis's sections and field names with Meridian's real figures.
//!
//! Sections are `# Name` headers followed by `field:value` lines, CRLF-terminated, with a
//! blank line between sections, exactly as Redis formats them, so tools that parse INFO
//! (redis-cli, client libraries, exporters) read it unchanged. `keyspace` lists `db0` only
//! when it holds keys.

use crate::memory::human;
use crate::metrics::Frontend;
use crate::resp::context::{REDIS_VERSION, RespContext};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

const SECTIONS: [&str; 11] = [
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "commandstats",
    "errorstats",
    "cluster",
    "keyspace",
];

/// Sections only named, `all` or `everything` show (not `default`, not a bare INFO), as in
/// Redis.
const NOT_DEFAULT: [&str; 1] = ["commandstats"];

/// Renders the sections named in `args` (none, `default`, `all` or `everything`: all of
/// them; unknown names are ignored, as in Redis).
pub(crate) fn render<'a>(ctx: &RespContext, args: impl Iterator<Item = &'a [u8]>) -> String {
    let mut wanted = [false; SECTIONS.len()];
    let mut any = false;
    for a in args {
        any = true;
        let all = [&b"all"[..], b"everything"]
            .iter()
            .any(|w| a.eq_ignore_ascii_case(w));
        let default = a.eq_ignore_ascii_case(b"default");
        for (i, s) in SECTIONS.iter().enumerate() {
            if all || (default && !NOT_DEFAULT.contains(s)) || a.eq_ignore_ascii_case(s.as_bytes())
            {
                wanted[i] = true;
            }
        }
    }
    if !any {
        for (i, s) in SECTIONS.iter().enumerate() {
            wanted[i] = !NOT_DEFAULT.contains(s);
        }
    }
    let mut out = String::with_capacity(2048);
    let mut first = true;
    for (i, name) in SECTIONS.iter().enumerate() {
        if !wanted[i] {
            continue;
        }
        if !first {
            out.push_str("\r\n");
        }
        first = false;
        section(ctx, name, &mut out);
    }
    out
}

fn section(ctx: &RespContext, name: &str, out: &mut String) {
    let ks = ctx.keyspace.stats();
    let conns = ctx.metrics.connections(Frontend::Resp);
    let mut line = |k: &str, v: &dyn std::fmt::Display| {
        let _ = write!(out, "{k}:{v}\r\n");
    };
    match name {
        "server" => {
            let uptime = ctx.started.elapsed().as_secs();
            line("# Server\r\nredis_version", &REDIS_VERSION);
            line("redis_git_sha1", &"00000000");
            line("redis_git_dirty", &0);
            let mode = if ctx.cluster.is_some() {
                "cluster"
            } else {
                "standalone"
            };
            line("redis_mode", &mode);
            // What the server is, beside the Redis version it is compatible with (the
            // field clients check): `server_name` as Valkey reports it.
            line("server_name", &"meridian");
            line("meridian_version", &env!("CARGO_PKG_VERSION"));
            line("meridian_engine", &ctx.keyspace.engine().name());
            line(
                "os",
                &format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
            );
            line("arch_bits", &(usize::BITS));
            line("multiplexing_api", &"epoll");
            line("process_id", &std::process::id());
            line("run_id", &ctx.run_id);
            line("tcp_port", &ctx.port());
            line("server_time_usec", &ctx.keyspace.now().0);
            line("uptime_in_seconds", &uptime);
            line("uptime_in_days", &(uptime / 86_400));
            line("hz", &10);
        }
        "clients" => {
            line(
                "# Clients\r\nconnected_clients",
                &conns.open.load(Ordering::Relaxed).max(0),
            );
            line("cluster_connections", &0);
            line("maxclients", &ctx.config.limits.max_clients);
            line("blocked_clients", &ctx.keyspace.blocking.blocked_clients());
            let tracking = ctx.keyspace.caching.stats();
            line("tracking_clients", &tracking.clients);
        }
        "memory" => {
            // The keyspace's estimate (keys, values, per-key overhead), what `maxmemory`
            // bounds, as Redis's `used_memory` is.
            // In cluster mode, the replication engine's (`meridian_replication::memory`).
            let used = match &ctx.cluster {
                Some(c) => c.node.used_memory(),
                None => ctx.keyspace.used_memory(),
            };
            let (max, policy) = super::exec::memory_limit(ctx);
            line("# Memory\r\nused_memory", &used);
            line("used_memory_human", &human(used));
            line("maxmemory", &max);
            line("maxmemory_human", &human(max));
            line("maxmemory_policy", &policy);
            // All of `used_memory` counts for eviction, and nothing is freed lazily.
            line("mem_not_counted_for_evict", &0);
            line("lazyfree_pending_objects", &0);
            if let Some((vm, scripts, bytes)) = ctx.scripts.stats() {
                line("used_memory_lua", &vm);
                line("used_memory_vm_eval", &vm);
                line("used_memory_scripts_eval", &bytes);
                line("number_of_cached_scripts", &scripts);
            }
        }
        "persistence" => {
            line("# Persistence\r\nloading", &0);
            line("async_loading", &0);
            line("rdb_bgsave_in_progress", &0);
            // The durable engine's journal is Meridian's append-only file.
            line("aof_enabled", &u8::from(ctx.config.durability.is_some()));
            line("aof_rewrite_in_progress", &0);
            // What clients and exporters parse to see that writes cannot be persisted (Redis
            // then answers writes with -MISCONF, as Meridian does), and Meridian's reason.
            let health = match &ctx.cluster {
                Some(c) => c.node.store().engine().health(),
                None => ctx.keyspace.engine().health(),
            };
            let status = if health.is_ok() { "ok" } else { "err" };
            line("rdb_last_bgsave_status", &"ok");
            line("aof_last_bgrewrite_status", &"ok");
            line("aof_last_write_status", &status);
            match &health {
                meridian_storage::EngineHealth::Ok => {
                    line("meridian_storage_status", &"ok");
                }
                meridian_storage::EngineHealth::Degraded(d) => {
                    line("meridian_storage_status", &"degraded");
                    line("meridian_storage_disk_full", &u8::from(d.disk_full));
                    line("meridian_storage_degraded_since", &(d.since_us / 1_000_000));
                    // One INFO line: no CR or LF in the value.
                    let reason = d.reason.replace(['\r', '\n'], " ");
                    line("meridian_storage_error", &reason);
                }
            }
        }
        "stats" => {
            line(
                "# Stats\r\ntotal_connections_received",
                &conns.accepted.load(Ordering::Relaxed),
            );
            line(
                "total_commands_processed",
                // Like Redis, requests refused before running (unknown command, wrong
                // arity, NOAUTH) are not commands processed.
                &ctx.metrics
                    .total_calls(Frontend::Resp)
                    .saturating_sub(ctx.rejected_ops.calls()),
            );
            line("instantaneous_ops_per_sec", &ctx.ops_per_sec());
            line(
                "total_net_input_bytes",
                &ctx.net_input.load(Ordering::Relaxed),
            );
            line(
                "total_net_output_bytes",
                &ctx.net_output.load(Ordering::Relaxed),
            );
            line(
                "rejected_connections",
                &conns.rejected.load(Ordering::Relaxed),
            );
            line("expired_keys", &ks.expired_keys);
            let evicted = match &ctx.cluster {
                Some(c) => c.node.evicted_keys(),
                None => ks.evicted_keys,
            };
            line("evicted_keys", &evicted);
            line("keyspace_hits", &ks.hits);
            line("keyspace_misses", &ks.misses);
            // This node's subscriptions, as Redis counts them.
            line(
                "pubsub_channels",
                &ctx.pubsub.count(crate::pubsub::Kind::Channel),
            );
            line(
                "pubsub_patterns",
                &ctx.pubsub.count(crate::pubsub::Kind::Pattern),
            );
            line(
                "pubsubshard_channels",
                &ctx.pubsub.count(crate::pubsub::Kind::Shard),
            );
            let tracking = ctx.keyspace.caching.stats();
            line("tracking_total_keys", &tracking.keys);
            line("tracking_total_items", &tracking.items);
            line("tracking_total_prefixes", &tracking.prefixes);
            line("total_error_replies", &ctx.errors.total());
        }
        "errorstats" => {
            out.push_str("# Errorstats\r\n");
            ctx.errors.render(out);
        }
        "commandstats" => {
            out.push_str("# Commandstats\r\n");
            ctx.command_stats.render(&ctx.ops, out);
        }
        "replication" => {
            line("# Replication\r\nrole", &"master");
            line("connected_slaves", &0);
            line("master_replid", &ctx.run_id);
            line("master_repl_offset", &0);
        }
        "cpu" => {
            let cpu = CpuTimes::read();
            line("# CPU\r\nused_cpu_sys", &seconds(cpu.system));
            line("used_cpu_user", &seconds(cpu.user));
            line("used_cpu_sys_children", &seconds(cpu.children_system));
            line("used_cpu_user_children", &seconds(cpu.children_user));
            line("used_cpu_sys_main_thread", &seconds(cpu.main_system));
            line("used_cpu_user_main_thread", &seconds(cpu.main_user));
        }
        "cluster" => line(
            "# Cluster\r\ncluster_enabled",
            &u8::from(ctx.cluster.is_some()),
        ),
        _ => {
            out.push_str("# Keyspace\r\n");
            if ks.keys > 0 {
                let _ = write!(
                    out,
                    "db0:keys={},expires={},avg_ttl=0\r\n",
                    ks.keys, ks.expires
                );
            }
        }
    }
}

/// The process's CPU time, in clock ticks of 1/100 s (Linux's `USER_HZ`, what `/proc`
/// reports in): all zero where `/proc` is not there to read.
#[derive(Debug, Default, PartialEq, Eq)]
struct CpuTimes {
    user: u64,
    system: u64,
    children_user: u64,
    children_system: u64,
    main_user: u64,
    main_system: u64,
}

impl CpuTimes {
    fn read() -> Self {
        let of = |path: String| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|s| stat_times(&s))
                .unwrap_or_default()
        };
        let pid = std::process::id();
        let (user, system, children_user, children_system) = of(format!("/proc/{pid}/stat"));
        let (main_user, main_system, _, _) = of(format!("/proc/{pid}/task/{pid}/stat"));
        CpuTimes {
            user,
            system,
            children_user,
            children_system,
            main_user,
            main_system,
        }
    }
}

/// `utime`, `stime`, `cutime` and `cstime` of a `/proc/.../stat` line: its fields 14 to 17,
/// counted after the command name's closing parenthesis (the name may hold spaces).
fn stat_times(stat: &str) -> Option<(u64, u64, u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest
        .split_ascii_whitespace()
        .skip(11)
        .map(|v| v.parse::<u64>().ok());
    Some((f.next()??, f.next()??, f.next()??, f.next()??))
}

/// Ticks as Redis prints CPU seconds (`%ld.%06ld`).
fn seconds(ticks: u64) -> String {
    format!("{}.{:06}", ticks / 100, (ticks % 100) * 10_000)
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn stat_lines_parse_past_a_name_with_spaces_and_print_as_redis() {
        let line = "42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 1234 56 7 8 20 0 1 0";
        assert_eq!(stat_times(line), Some((1234, 56, 7, 8)));
        assert_eq!(stat_times("42 (x) S 1 2"), None, "too short");
        assert_eq!(stat_times("no parenthesis"), None);
        assert_eq!(seconds(1234), "12.340000");
        assert_eq!(seconds(5), "0.050000");
        if cfg!(target_os = "linux") {
            // Burn CPU until a tick shows (a fresh test process may not have used one yet).
            let (mut x, mut now) = (0u64, CpuTimes::read());
            for _ in 0..10_000 {
                if now.user + now.system > 0 {
                    break;
                }
                for i in 0..100_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                now = CpuTimes::read();
            }
            assert!(now.user + now.system > 0, "{now:?} after burning CPU ({x})");
            assert!(now.main_user + now.main_system <= now.user + now.system);
        }
    }
}
