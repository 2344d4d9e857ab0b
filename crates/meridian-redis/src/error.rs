//! The Redis layer's errors: [`RedisError`], what a data type's semantics refuse (its messages are
//! Redis's, without the `ERR ` prefix), and [`CmdError`], a failed command as the reply line
//! a client reads. [`CmdError::into_line`] is the one place a [`RedisError`] becomes a line.

use crate::args::Args;
use meridian_storage::StorageError;
use std::borrow::Cow;
use std::fmt::Write as _;
use thiserror::Error;

/// Why a Redis command failed in its data type's semantics. Messages are Redis's, minus the `ERR ` prefix.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RedisError {
    /// A stored value or an argument is not a 64-bit integer in Redis's strict format.
    #[error("value is not an integer or out of range")]
    NotAnInteger,
    /// A stored value or an argument is not a float.
    #[error("value is not a valid float")]
    NotAFloat,
    /// INCR/DECR/INCRBY/DECRBY would leave the 64-bit range.
    #[error("increment or decrement would overflow")]
    Overflow,
    /// DECRBY by the smallest 64-bit integer (its negation overflows).
    #[error("decrement would overflow")]
    DecrementOverflow,
    /// INCRBYFLOAT would produce NaN or an infinity.
    #[error("increment would produce NaN or Infinity")]
    NanOrInfinity,
    /// Options that do not parse or do not combine.
    #[error("syntax error")]
    Syntax,
    /// A non-positive or overflowing expire time, for the named command.
    #[error("invalid expire time in '{0}' command")]
    InvalidExpireTime(&'static str),
    /// The value would exceed the backend's longest value ([`crate::View::max_value_len`]).
    #[error("string exceeds maximum allowed size (proto-max-bulk-len)")]
    ValueTooLarge,
    /// SETRANGE with a negative offset.
    #[error("offset is out of range")]
    OffsetOutOfRange,
    /// A command for one type on a key holding another (a string command on a hash, a hash
    /// command on a string). The RESP line is `-WRONGTYPE ...`, not `-ERR ...`.
    #[error("Operation against a key holding the wrong kind of value")]
    WrongType,
    /// HINCRBY on a field whose value is not a 64-bit integer.
    #[error("hash value is not an integer")]
    HashNotAnInteger,
    /// HINCRBYFLOAT on a field whose value is not a float.
    #[error("hash value is not a float")]
    HashNotAFloat,
    /// HINCRBYFLOAT by an infinite increment.
    #[error("value is NaN or Infinity")]
    NanOrInfinityArgument,
    /// A hash, list, set or sorted-set write whose encoded value would exceed the backend's
    /// longest value ([`crate::View::max_value_len`]); the type is named.
    #[error("{0} exceeds maximum allowed size (proto-max-bulk-len)")]
    CollectionTooLarge(&'static str),
    /// EXPIRE with an option other than NX, XX, GT, LT.
    #[error("Unsupported option {0}")]
    UnsupportedOption(String),
    /// EXPIRE with NX and one of XX, GT, LT.
    #[error("NX and XX, GT or LT options at the same time are not compatible")]
    ExpireNxConflict,
    /// EXPIRE with both GT and LT.
    #[error("GT and LT options at the same time are not compatible")]
    ExpireGtLtConflict,
    /// The storage engine failed (or refused the key, e.g. longer than `MAX_KEY_LEN`).
    #[error("{0}")]
    Storage(#[from] StorageError),
    /// A stored value is not in the keyspace's envelope format (written by something else).
    #[error("stored value is not a Meridian string value ({0})")]
    Corrupt(&'static str),
    /// A string command that would read or change the bytes of a key holding a large
    /// object (an object's manifest, see [`crate::large_object`]); nothing was changed.
    #[error(
        "the key holds a large object ({size} bytes), which {cmd} does not apply to: read it \
         with BLOB.READ key offset len, GET (up to blob.resp_get_max) or the S3 endpoint; SET \
         or DEL replace it"
    )]
    LargeObject {
        /// The command refused.
        cmd: &'static str,
        /// The object's size.
        size: u64,
    },
}

impl RedisError {
    /// Whether the request was at fault (HTTP 4xx) rather than the server (5xx).
    pub fn is_client_error(&self) -> bool {
        match self {
            RedisError::Storage(StorageError::KeyTooLarge { .. }) => true,
            RedisError::Storage(_) | RedisError::Corrupt(_) => false,
            _ => true,
        }
    }

    /// The error line (without the leading `-`): `-MISCONF` as Redis answers when it cannot
    /// persist, for a full disk; `-WRONGTYPE` for a key of another type; `-ERR` otherwise.
    pub fn line(&self) -> String {
        match self {
            RedisError::Storage(s @ StorageError::DiskFull { .. }) => {
                format!("MISCONF Errors writing to the disk: {s}")
            }
            RedisError::WrongType => format!("WRONGTYPE {self}"),
            e => format!("ERR {e}"),
        }
    }
}

/// Result of a data type's operation.
pub type Result<T> = std::result::Result<T, RedisError>;

/// A failed command: a semantic [`RedisError`], or a complete reply line.
#[derive(Debug)]
pub enum CmdError {
    /// An error of the data type's semantics.
    Keyspace(RedisError),
    /// A complete error line (code included), without the leading `-`.
    Raw(Cow<'static, str>),
}

impl CmdError {
    /// The error line to write (without the leading `-`).
    pub fn into_line(self) -> Cow<'static, str> {
        match self {
            CmdError::Raw(line) => line,
            CmdError::Keyspace(e) => Cow::Owned(e.line()),
        }
    }
}

/// Damage a shared stored form (`meridian_core`'s list, set and sorted-set data) found.
impl From<meridian_core::envelope::BadEnvelope> for RedisError {
    fn from(e: meridian_core::envelope::BadEnvelope) -> Self {
        RedisError::Corrupt(e.0)
    }
}

impl From<RedisError> for CmdError {
    fn from(e: RedisError) -> Self {
        CmdError::Keyspace(e)
    }
}

/// What a command's execution returns: its reply is written, or the error to answer.
pub type CmdResult = std::result::Result<(), CmdError>;

/// A complete error line (code included, no leading `-`).
pub fn raw(msg: impl Into<Cow<'static, str>>) -> CmdError {
    CmdError::Raw(msg.into())
}

/// Redis's syntax error line.
pub const SYNTAX: &str = "ERR syntax error";

/// Redis's `wrong number of arguments for '<name>' command` (the name as the table spells
/// it: lowercase, `container|sub` for a subcommand).
pub fn arity_error(name: &str) -> CmdError {
    raw(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// An integer argument in Redis's strict format (`-ERR value is not an integer or out of
/// range` otherwise).
pub fn int_arg(a: &[u8]) -> std::result::Result<i64, CmdError> {
    crate::value::parse_i64(a).ok_or(CmdError::Keyspace(RedisError::NotAnInteger))
}

fn lossy(b: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// Redis's `unknown command '%.128s', with args beginning with: '%.*s' ...`.
pub fn unknown_command(args: Args<'_>) -> String {
    let name = args.get(0);
    let mut msg = String::from("ERR unknown command '");
    msg.push_str(&lossy(until_nul(&name[..name.len().min(128)])));
    msg.push_str("', with args beginning with: ");
    let mut rest = String::new();
    for a in args.iter_from(1) {
        if rest.len() >= 128 {
            break;
        }
        let room = 128 - rest.len();
        let a = until_nul(a);
        let _ = write!(rest, "'{}' ", lossy(&a[..a.len().min(room)]));
    }
    msg.push_str(&rest);
    msg
}

/// C's `%s` stops at a NUL byte.
pub(crate) fn until_nul(b: &[u8]) -> &[u8] {
    &b[..memchr::memchr(0, b).unwrap_or(b.len())]
}

/// Redis's arity error of a subcommand (`'config|get'`), unless `ok`.
pub fn subcommand_arity(container: &str, sub: &[u8], ok: bool) -> CmdResult {
    if ok {
        return Ok(());
    }
    Err(raw(format!(
        "ERR wrong number of arguments for '{container}|{}' command",
        lossy(sub).to_ascii_lowercase()
    )))
}

/// Redis's `unknown subcommand '<sub>'. Try <CONTAINER> HELP.`
pub fn unknown_subcommand(container: &str, sub: &[u8]) -> CmdError {
    let sub = until_nul(sub);
    raw(format!(
        "ERR unknown subcommand '{}'. Try {} HELP.",
        lossy(&sub[..sub.len().min(128)]),
        container.to_ascii_uppercase()
    ))
}
