//! The open-files limit. As Redis does at start-up, a node raises its soft `RLIMIT_NOFILE`
//! toward what its connection caps may hold open at once, so the caps, not the kernel's
//! default of 1024, decide when clients are refused.
//!
//! Guarantees: the soft limit is never lowered and never raised above the hard limit; when
//! the hard limit is short of what the caps need, the caller is told, and logs it.

use crate::config::NodeConfig;

/// Descriptors a node needs besides client connections: peer links, engine and chunk
/// files, logs.
pub const RESERVED_FDS: u64 = 256;

/// What the connection caps of `config` may hold open at once, plus [`RESERVED_FDS`].
pub fn wanted(config: &NodeConfig) -> u64 {
    [
        config.resp.max_clients,
        config.http.max_connections,
        config.s3.max_connections,
    ]
    .iter()
    .map(|&n| n as u64)
    .sum::<u64>()
        + RESERVED_FDS
}

/// Raises the soft open-files limit to `want`, or to the hard limit if that is lower;
/// returns the soft limit in force afterwards (`u64::MAX`: unlimited).
pub fn raise_open_files_limit(want: u64) -> std::io::Result<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    let soft = now.current.unwrap_or(u64::MAX);
    let target = want.min(now.maximum.unwrap_or(u64::MAX));
    if target <= soft {
        return Ok(soft);
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: now.maximum,
        },
    )?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_caps_want_their_sum_and_a_reserve() {
        let c = NodeConfig::default();
        assert_eq!(wanted(&c), 10_000 + 1024 + 1024 + RESERVED_FDS);
    }

    #[test]
    fn the_soft_limit_rises_to_what_is_wanted_within_the_hard_limit_and_never_falls() {
        use rustix::process::{Resource, getrlimit};
        let before = getrlimit(Resource::Nofile);
        let soft = before.current.unwrap_or(u64::MAX);
        // Asking for less changes nothing.
        assert_eq!(raise_open_files_limit(1).unwrap(), soft);
        assert_eq!(getrlimit(Resource::Nofile).current, before.current);
        // Asking for more than the hard limit gives the hard limit.
        let hard = before.maximum.unwrap_or(u64::MAX);
        let got = raise_open_files_limit(u64::MAX).unwrap();
        assert_eq!(got, hard.max(soft));
        assert_eq!(getrlimit(Resource::Nofile).maximum, before.maximum);
    }
}
