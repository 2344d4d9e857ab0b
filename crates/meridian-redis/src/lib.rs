//! The Redis command layer: what every Redis command means, written once, independent of the
//! wire that carried it and of the storage that holds its keys.
//!
//! ```text
//! RESP / HTTP (wire, auth, limits)  →  command table → data-type module → View
//!                                                                          │
//!                  standalone Keyspace (one node) · cluster Dispatch facade (bucket type → protocol)
//! ```
//!
//! - [`command`]: the command table — name, arity, flags, key positions, ACL categories,
//!   as Redis's `COMMAND` reports them — and [`command_info`], the `COMMAND` family answered
//!   from it;
//! - [`args`]: a command's arguments as the wire parsed them;
//! - [`reply`]: the reply writer (RESP2 or RESP3 per connection);
//! - [`error`]: the one error enum of the layer and the reply line of a failed command;
//! - [`view`]: [`View`], what a data type needs of a backend for the keys one command runs
//!   over (the command's time, each key's live typed value, store or delete), made atomic by
//!   the backend;
//! - one module per data type, each the one copy of its commands' semantics: [`strings`]
//!   (and the expiry commands), [`hashes`], [`lists`], [`sets`], [`zsets`], [`keys`] (RENAME, COPY, DUMP, RESTORE), [`sort`], [`bitmaps`], [`hyperloglog`], [`geo`], [`streams`]; [`types`] routes a data command to its module;
//! - helpers every type shares: [`options`] (SET/EXPIRE/GETEX options), [`scan`] (SCAN's
//!   arguments and reply), [`value`] (integers, floats, globs), [`large_object`] (keys
//!   holding an S3 object's manifest).
//!
//! Adding a data type is one module here, registered in [`command`]'s table under its own
//! [`command::Group`] and in [`types`], plus its storage (and, on eventual buckets, its merge rule) below the
//! dispatch facade; no front-end file changes. See ARCHITECTURE.md's recipe.

#![warn(missing_docs)]

pub mod acl;
pub mod args;
pub mod bitmaps;
pub mod collection;
pub mod command;
pub mod command_info;
mod dense_table;
pub mod dump;
pub mod error;
pub mod geo;
pub mod hashes;
pub mod hyperloglog;
pub mod keys;
pub mod large_object;
pub mod lcs;
pub mod lists;
pub mod options;
pub mod reply;
pub mod scan;
pub mod sets;
pub mod sort;
pub mod streams;
pub mod strings;
#[cfg(test)]
mod test_view;
pub mod types;
pub mod value;
pub mod view;
pub mod zsets;

pub use args::{Args, OwnedArgs};
pub use command::{Cmd, CommandSpec, Group};
pub use error::{CmdError, CmdResult, RedisError, Result};
pub use reply::Reply;
pub use view::{Entry, EntryRef, Kind, View};
