//! The options of the string and expiry commands, parsed with Redis's rules and messages:
//! SET's NX/XX/GET/KEEPTTL/EX/PX/EXAT/PXAT, EXPIRE's NX/XX/GT/LT, GETEX's expiry, and what
//! TTL reports. Relative times are resolved against the command's time, as Redis does, so
//! an overflowing time is an error, never a wrap.

use crate::error::{RedisError, Result};
use crate::value::parse_i64;
use bytes::Bytes;
use meridian_core::Timestamp;
use std::time::Duration;

/// Whether SET writes unconditionally, only if the key is absent (NX) or present (XX).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetCondition {
    /// Always write.
    #[default]
    Always,
    /// NX: write only if the key does not exist.
    IfAbsent,
    /// XX: write only if the key exists.
    IfPresent,
}

/// When a key should expire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// This long after the operation runs.
    After(Duration),
    /// At this absolute time (µs since the epoch); a time not after now expires at once.
    At(Timestamp),
}

impl Deadline {
    /// The absolute expiry (µs since the epoch) for a command running at `now`.
    pub fn resolve(self, now: Timestamp) -> u64 {
        match self {
            Deadline::After(d) => now.saturating_add(d).0,
            Deadline::At(t) => t.0,
        }
    }
}

/// Options of SET (and of SETNX, SETEX, GETSET, which are SETs with fixed options).
///
/// The TTL fields combine like Redis's flags: `expire_at` wins over `ttl`, and either wins
/// over `keep_ttl`; with none of them, SET removes any TTL the key had.
/// [`SetOptions::parse`] never produces a conflicting combination.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetOptions {
    /// NX / XX.
    pub condition: SetCondition,
    /// EX/PX: expire this long after the write.
    pub ttl: Option<Duration>,
    /// EXAT/PXAT: expire at this absolute time (µs since the epoch); a time not after now
    /// makes the key vanish at once.
    pub expire_at: Option<Timestamp>,
    /// KEEPTTL: keep the key's current TTL.
    pub keep_ttl: bool,
    /// GET: also return the previous value.
    pub get: bool,
}

impl SetOptions {
    /// Plain SET with a TTL.
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            ttl: Some(ttl),
            ..Self::default()
        }
    }

    /// The expiry these options set, if any (EXAT/PXAT win over EX/PX).
    pub fn deadline(&self) -> Option<Deadline> {
        match (self.expire_at, self.ttl) {
            (Some(at), _) => Some(Deadline::At(at)),
            (None, Some(d)) => Some(Deadline::After(d)),
            (None, None) => None,
        }
    }

    /// Parses SET's options (everything after `SET key value`) with Redis's rules and
    /// messages; `cmd` names the command in expire-time errors. Relative times (EX, PX) are
    /// resolved against `now` here, as Redis does, so an overflowing time is reported.
    pub fn parse<'a>(
        args: impl IntoIterator<Item = &'a [u8]>,
        cmd: &'static str,
        now: Timestamp,
    ) -> Result<SetOptions> {
        let mut opts = SetOptions::default();
        let mut ttl: Option<(TtlUnit, &[u8])> = None;
        let mut args = args.into_iter();
        while let Some(opt) = args.next() {
            if opt.eq_ignore_ascii_case(b"NX") && opts.condition != SetCondition::IfPresent {
                opts.condition = SetCondition::IfAbsent;
            } else if opt.eq_ignore_ascii_case(b"XX") && opts.condition != SetCondition::IfAbsent {
                opts.condition = SetCondition::IfPresent;
            } else if opt.eq_ignore_ascii_case(b"GET") {
                opts.get = true;
            } else if opt.eq_ignore_ascii_case(b"KEEPTTL") && ttl.is_none() {
                opts.keep_ttl = true;
            } else if let Some(unit) = TtlUnit::from_option(opt)
                && !opts.keep_ttl
                && ttl.is_none_or(|(u, _)| u == unit)
            {
                ttl = Some((unit, args.next().ok_or(RedisError::Syntax)?));
            } else {
                return Err(RedisError::Syntax);
            }
        }
        if let Some((unit, value)) = ttl {
            opts.expire_at = Some(unit.deadline(value, cmd, now)?);
        }
        Ok(opts)
    }
}

/// The unit and base of a TTL option: EX, PX (relative), EXAT, PXAT (absolute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlUnit {
    /// Seconds from now.
    Ex,
    /// Milliseconds from now.
    Px,
    /// Unix time in seconds.
    ExAt,
    /// Unix time in milliseconds.
    PxAt,
}

impl TtlUnit {
    /// Recognizes `EX`, `PX`, `EXAT`, `PXAT` (any case).
    pub fn from_option(opt: &[u8]) -> Option<TtlUnit> {
        if opt.eq_ignore_ascii_case(b"EX") {
            Some(TtlUnit::Ex)
        } else if opt.eq_ignore_ascii_case(b"PX") {
            Some(TtlUnit::Px)
        } else if opt.eq_ignore_ascii_case(b"EXAT") {
            Some(TtlUnit::ExAt)
        } else if opt.eq_ignore_ascii_case(b"PXAT") {
            Some(TtlUnit::PxAt)
        } else {
            None
        }
    }

    /// The absolute deadline `value` means for SET-like commands, validated like Redis's
    /// `getExpireMillisecondsOrReply`: positive, and not overflowing 64-bit milliseconds.
    pub fn deadline(self, value: &[u8], cmd: &'static str, now: Timestamp) -> Result<Timestamp> {
        let v = parse_i64(value).ok_or(RedisError::NotAnInteger)?;
        let seconds = matches!(self, TtlUnit::Ex | TtlUnit::ExAt);
        if v <= 0 || (seconds && v > i64::MAX / 1000) {
            return Err(RedisError::InvalidExpireTime(cmd));
        }
        let mut ms = if seconds { v * 1000 } else { v };
        if matches!(self, TtlUnit::Ex | TtlUnit::Px) {
            ms = ms
                .checked_add((now.0 / 1000) as i64)
                .ok_or(RedisError::InvalidExpireTime(cmd))?;
            // Relative deadlines keep the clock's sub-millisecond part.
            return Ok(Timestamp((ms as u64).saturating_mul(1000) + now.0 % 1000));
        }
        Ok(Timestamp((ms as u64).saturating_mul(1000)))
    }
}

/// What [`crate::strings::set`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetOutcome {
    /// Whether the value was written (false when NX/XX did not hold).
    pub written: bool,
    /// The previous value, when [`SetOptions::get`] asked for it.
    pub previous: Option<Bytes>,
}

/// EXPIRE's conditions (Redis 7): any combination but NX with another, or GT with LT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpireCondition {
    /// Only if the key has no TTL.
    pub nx: bool,
    /// Only if the key has a TTL.
    pub xx: bool,
    /// Only if the new deadline is later than the current one (no TTL counts as infinite).
    pub gt: bool,
    /// Only if the new deadline is earlier than the current one (no TTL counts as infinite).
    pub lt: bool,
}

impl ExpireCondition {
    /// Parses EXPIRE's options with Redis's messages.
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a [u8]>) -> Result<ExpireCondition> {
        let mut c = ExpireCondition::default();
        for opt in args {
            if opt.eq_ignore_ascii_case(b"NX") {
                c.nx = true;
            } else if opt.eq_ignore_ascii_case(b"XX") {
                c.xx = true;
            } else if opt.eq_ignore_ascii_case(b"GT") {
                c.gt = true;
            } else if opt.eq_ignore_ascii_case(b"LT") {
                c.lt = true;
            } else {
                return Err(RedisError::UnsupportedOption(
                    String::from_utf8_lossy(opt).into_owned(),
                ));
            }
        }
        if c.nx && (c.xx || c.gt || c.lt) {
            return Err(RedisError::ExpireNxConflict);
        }
        if c.gt && c.lt {
            return Err(RedisError::ExpireGtLtConflict);
        }
        Ok(c)
    }
}

/// GETEX's TTL change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GetExExpiry {
    /// Leave the TTL alone (a plain GET).
    #[default]
    Unchanged,
    /// PERSIST: remove the TTL.
    Persist,
    /// EX/PX/EXAT/PXAT: set this deadline (a past one deletes the key after reading it).
    At(Deadline),
}

/// A key's time to live, as TTL/PTTL/EXPIRETIME report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyTtl {
    /// The key does not exist (`-2`).
    Missing,
    /// The key exists without a TTL (`-1`).
    Persistent,
    /// The key expires at `at`; `remaining` is how long until then.
    Expires {
        /// Absolute expiry, µs since the epoch.
        at: Timestamp,
        /// Time left (zero if due).
        remaining: Duration,
    },
}
