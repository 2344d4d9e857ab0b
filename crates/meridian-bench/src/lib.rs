//! Meridian's measuring instrument (issue 6, spec `experiments.md`): the parts the
//! `meridian bench` and `meridian experiment` commands are built from.
//!
//! | module | concept |
//! |---|---|
//! | [`generator`] | key popularity: uniform, scrambled zipfian, latest, hotspot, pareto |
//! | [`workload`] | YCSB core workload properties (files A–F read unchanged) and the operation mix |
//! | [`locality`] | home DCs of keys and a client's locality-biased key choice |
//! | [`runner`] | the load generator: closed, paced and open-loop arrivals against a [`runner::Target`] |
//! | [`stats`] | HDR latency statistics per operation and local/remote, percentiles, JSON/CSV |
//! | [`executor`] | design runs as cells on Meridian clusters (parameter names and defaults) |
//! | [`experiment`] | design files, resumable factorial runs and their reports |
//! | [`output`] | what runs leave on disk: reports, settings and the choice of plots |
//! | [`plot`] | PNG and SVG plots: latency CDFs, box plots, throughput over time |
//! | [`resp`] | a pipelined RESP client target: any Redis-protocol server |
//! | [`ycsbt`] | YCSB+T: multi-partition read-only/update transactions, closed economy, a driver-side service-time model |
//! | [`clocksi`] | the Clock-SI study (`experiments/clock-si/`): LAN/WAN latency, throughput, closed economy |
//! | [`replica_choice`] | the replica-choice study (`experiments/replica-choice/`): replica selection and hot-key copies on the simulated cluster, C3 against the dynamic snitch |
//! | [`blob`] | `meridian bench blob`: large-object transfers, admission, memory, disk and WAN models; the GridFS study's E1–E7 (`experiments/large-objects/`) |
//! | [`cell`] | one cell on a Meridian cluster: load, timeline warm-up, measurement |
//! | [`cluster`] | the study's consistency modes on the embedded (real-time) or simulated (virtual-time) cluster |
//! | [`doe`] | 2^k·r factorial designs: allocation of variation, confidence intervals, CV |
//! | [`kvpaxos`] | the kvpaxos YCSB D/E request generator and its `type,key,arg,` request files (spec `repartitioning.md` §5) |
//! | [`affinity`] | the cross-node planner study (`experiments/repartitioning/`, spec §6): hidden affinity groups on the simulated cluster, distributed transactions, 2PC, throughput and p99 before and after planning, keys moved per round |
//! | [`repart`] | the in-node repartitioning study (`experiments/repartitioning/`): kvpaxos request files replayed through the worker-shard executor, 1 s throughput bins, makespan, report |
//! | [`error`] | [`BenchError`], the crate's one error type |
//!
//! Everything here is deterministic given its seed: no global randomness, and no OS clock (the
//! runner's time is tokio's, so it runs in real time or under a paused, virtual clock).

pub mod affinity;
pub mod blob;
pub mod cell;
pub mod clocksi;
pub mod cluster;
pub mod doe;
pub mod error;
pub mod executor;
pub mod experiment;
pub mod generator;
pub mod kvpaxos;
pub mod locality;
pub mod output;
pub mod plot;
pub mod repart;
pub mod replica_choice;
pub mod resp;
pub mod runner;
pub mod stats;
pub mod workload;
pub mod ycsbt;

pub use error::BenchError;
