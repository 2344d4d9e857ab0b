//! `meridian`: the command line. Thin by design: every subcommand is a call into a library.

mod ctl_cmd;
mod node_cmd;
mod sim_cmd;
mod up_cmd;
mod up_processes;

use clap::{Parser, Subcommand};

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Node(args) => node_cmd::run(*args),
        Command::Up(args) => up_cmd::run(*args),
        Command::Ctl(args) => ctl_cmd::run(*args),
        Command::Sim(args) => sim_cmd::run_cmd(*args),
    }
}
