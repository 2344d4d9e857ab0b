//! Redis's Lua scripting environment, independent of the node that runs it: a sandboxed
//! Lua 5.1 interpreter ([`Engine`]) with the `redis.*` API, the `cjson`, `cmsgpack`, `bit`
//! and `struct` libraries, Redis 7's conversions between replies and Lua values, and the
//! script cache. The node supplies the commands a script calls through a [`Host`].

pub mod convert;
mod engine;
mod error;
mod libs;
pub mod numfmt;
mod random;
pub mod shebang;

pub use engine::{
    Config, Control, Engine, FunctionInfo, HOOK_EVERY, Host, LONG_RUN, LibraryInfo, RestorePolicy,
    Script, sha1_hex,
};
pub use error::{Error, Result};
