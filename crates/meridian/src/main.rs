//! `meridian`: the command line. Thin by design: every subcommand is a call into a library.

mod node_cmd;

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Node(args) => node_cmd::run(*args),
    }
}
