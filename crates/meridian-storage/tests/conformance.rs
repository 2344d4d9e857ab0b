//! The storage crate's one integration-test binary.
//!
//! - `suite`: the conformance checks every [`meridian_storage::Engine`] must pass, each a
//!   function over `&dyn Engine`, instantiated for the in-memory engine and for the fjall
//!   engine under each durability policy;
//! - `model`: random operation sequences applied to each engine and to a `BTreeMap` reference
//!   (with reopens of the durable engine), compared after every step;
//! - `crash`: writer processes killed with SIGKILL, then recovery checked against what they
//!   acknowledged;
//! - `disk_full`: a full disk (through the engine's seam, the free-space reserve and a real
//!   tmpfs): writes refused with `DiskFull`, reads served, recovery without a restart.
//!
//! The modules live in `tests/conformance/`, which Cargo does not build as tests of their own.

#[path = "conformance/common.rs"]
mod common;
#[path = "conformance/crash.rs"]
mod crash;
#[path = "conformance/disk_full.rs"]
mod disk_full;
#[path = "conformance/model.rs"]
mod model;
#[path = "conformance/suite.rs"]
mod suite;
