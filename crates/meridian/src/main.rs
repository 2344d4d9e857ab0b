//! `meridian`: the command line. Thin by design: every subcommand is a call into a library.

mod bench_blob_cmd;
mod bench_cmd;
mod bench_repart_cmd;
mod ctl_cmd;
mod demo_cmd;
mod experiment_cmd;
mod http_client;
mod node_cmd;
mod signals;
mod sim_cmd;
mod up_cmd;
mod up_processes;
mod up_tls;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc malloc: the cluster path allocates many small buffers on one
/// thread and frees them on another, which fragments glibc's arenas (profiled: a third of the
/// CPU in `_int_malloc`/`unlink_chunk`, and throughput and memory that degrade over a run).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Meridian: a geo-distributed key-value store that speaks Redis and HTTP.
#[derive(Parser, Debug)]
#[command(name = "meridian", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one node: a storage engine served over RESP (Redis protocol) and HTTP.
    Node(Box<node_cmd::NodeArgs>),
    /// Run an embedded cluster in this process: several DCs of nodes over an emulated WAN,
    /// each node serving RESP and HTTP on its own port (`--processes`: one process per node).
    Up(Box<up_cmd::UpArgs>),
    /// Inspect and change a running node over its HTTP admin API: status, cluster members,
    /// bucket properties, the WAN emulator (latency, loss, partitions).
    Ctl(Box<ctl_cmd::CtlArgs>),
    /// Run the deterministic simulator: the real cluster in virtual time under a seeded
    /// fault schedule, judged by the consistency checkers (one seed, or a sweep).
    Sim(Box<sim_cmd::SimArgs>),
    /// Start the embedded 2-DC cluster, run a short mixed workload in each consistency mode
    /// and print how local and remote latencies compare (plots in `results/demo`).
    Demo(Box<demo_cmd::DemoArgs>),
    /// Benchmark one YCSB workload against the embedded cluster, the simulated cluster in
    /// virtual time or any RESP server: HDR percentiles per op and local/remote, JSON, CSV
    /// and plots.
    Bench(Box<bench_cmd::BenchArgs>),
    /// Run a design file's factorial experiment (resumable) and write its report:
    /// percentiles, allocation of variation, confidence intervals and box plots.
    Experiment(Box<experiment_cmd::ExperimentArgs>),
    /// Certificates for development and tests: `meridian tls gen` makes a CA, a node
    /// certificate and a client certificate.
    Tls {
        #[command(subcommand)]
        command: TlsCommand,
    },
}

/// `meridian tls` subcommands.
#[derive(Subcommand, Debug)]
enum TlsCommand {
    /// Write a new CA, a node certificate and a client certificate (PEM) into a directory.
    Gen(up_tls::TlsGenArgs),
}

fn main() -> anyhow::Result<()> {
    // First, while this is the only thread (see `signals`).
    let signals = signals::ShutdownSignals::install()?;
    let cli = Cli::parse();
    // The servers shut down gracefully on a signal; the other commands exit at once.
    match cli.command {
        Command::Node(args) => node_cmd::run(*args, signals),
        Command::Up(args) => up_cmd::run(*args, signals),
        Command::Ctl(args) => {
            signals.exit_on_first();
            ctl_cmd::run(*args)
        }
        Command::Sim(args) => {
            signals.exit_on_first();
            sim_cmd::run_cmd(*args)
        }
        Command::Demo(args) => {
            signals.exit_on_first();
            demo_cmd::run(*args)
        }
        Command::Bench(args) => {
            signals.exit_on_first();
            bench_cmd::run(*args)
        }
        Command::Experiment(args) => {
            signals.exit_on_first();
            experiment_cmd::run(*args)
        }
        Command::Tls {
            command: TlsCommand::Gen(args),
        } => {
            signals.exit_on_first();
            up_tls::gen_cmd(args)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("meridian").chain(args.iter().copied()))
    }

    #[test]
    fn balance_flags_parse_into_the_balance_settings() {
        use meridian_server::config::ServiceModel;
        let Command::Up(up) = parse(&["up", "--service-model", "fixed:30", "--read-workers", "1"])
            .unwrap()
            .command
        else {
            panic!("up")
        };
        let b = up.balance();
        assert_eq!(b.service_model, Some(ServiceModel::Fixed { us: 30_000 }));
        assert_eq!(b.read_workers, Some(1));
        let Command::Up(up) = parse(&["up"]).unwrap().command else {
            panic!("up")
        };
        assert_eq!(up.balance(), Default::default());
        let Command::Node(node) = parse(&["node", "--service-model", "EXP:0.5"])
            .unwrap()
            .command
        else {
            panic!("node")
        };
        assert!(
            format!("{node:?}").contains("Exp { mean_us: 500 }"),
            "{node:?}"
        );
        // Refused by the parser, naming the flag and the accepted forms.
        for args in [
            &["up", "--service-model", "fixed:0"][..],
            &["node", "--service-model", "fast"],
            &["up", "--read-workers=-1"],
            &["up", "--read-workers", "many"],
        ] {
            let e = parse(args).unwrap_err().to_string();
            let flag = args[1].split('=').next().unwrap();
            assert!(e.contains(flag), "{args:?}: {e}");
        }
        let e = parse(&["up", "--service-model", "fixed:0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("fixed:MS"), "{e}");
        // The ctl commands.
        assert!(parse(&["ctl", "balance", "--dc", "--json"]).is_ok());
        assert!(parse(&["ctl", "service-model", "fixed:300", "--id", "2"]).is_ok());
        assert!(parse(&["ctl", "service-model"]).is_err());
    }
}
