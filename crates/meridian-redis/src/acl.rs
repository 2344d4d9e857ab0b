//! Redis 6/7 access control lists: users, their rules, and whether a user may run a request.
//!
//! - [`universe`]: every command and subcommand an ACL rule can name — Redis 7.0's whole
//!   table (so an ACL file written for Redis loads here unchanged, `-debug` and `+@all`
//!   alike) plus Meridian's own commands — each with an id and its categories.
//! - [`selector`]: one set of permissions (commands, key patterns with `%R~`/`%W~`, channel
//!   patterns), changed by rules exactly as `ACL SETUSER` applies them, and described back
//!   as Redis describes it (`+@all -@string +incr`).
//! - [`user`]: a user — on/off, SHA-256 password hashes or `nopass`, a root selector and
//!   any `(…)` selectors — built from rule lists atomically (all rules apply or none).
//! - [`access`]: what a request touches (its command or subcommand, its keys with the
//!   access each needs, its channels), and the check against a user, whose refusal names
//!   the first argument no selector allows, as Redis's does.
//!
//! Guarantees: a rule the user gives is validated before anything changes, with Redis's
//! error text; a request is allowed only when one selector allows its command, every key
//! and every channel; the check for a user allowed everything is a flag test.

pub mod access;
mod redis_commands;
pub mod rule_error;
pub mod selector;
pub mod universe;
pub mod user;

pub use access::{Denied, Request};
pub use rule_error::RuleError;
pub use selector::Selector;
pub use universe::{CATEGORIES, CmdId};
pub use user::{User, hash_password};
