//! What the client front ends share about authentication (issue 36).
//!
//! - [`password_matches`]: the one password compare, RESP `AUTH`/`HELLO AUTH` and the HTTP
//!   bearer alike, in constant time for a given length (`subtle`): how long it takes does not
//!   tell how many leading bytes of a guess were right.
//! - [`FailurePolicy`]: what repeated failures on one connection cost. The first
//!   [`FREE_FAILURES`] are answered at once; each further one is answered after
//!   [`FAILURE_DELAY`]; at [`MAX_FAILURES`] the connection is closed after its reply. The error
//!   text stays Redis's (or the API's 401); only the timing and the close are added.
//! - [`admin_allowed_without_password`]: admin routes stay open without a password only on a
//!   listener bound to loopback (127.0.0.0/8, `::1`), which local tools and tests rely on.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use subtle::ConstantTimeEq;

/// Failures on one connection answered without delay.
pub const FREE_FAILURES: u32 = 3;
/// The delay before answering each failure past [`FREE_FAILURES`].
pub const FAILURE_DELAY: Duration = Duration::from_millis(250);
/// Failures after which the connection is closed (once the failing reply is written).
pub const MAX_FAILURES: u32 = 10;

/// Whether `given` is the password `expected`. Constant time over the bytes compared; only
/// whether the lengths differ can show.
pub fn password_matches(expected: &[u8], given: &[u8]) -> bool {
    expected.ct_eq(given).into()
}

/// What a connection's `failures`-th authentication failure (counted from 1) costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Answer at once.
    Answer,
    /// Answer after [`FAILURE_DELAY`].
    Delay,
    /// Answer after [`FAILURE_DELAY`], then close the connection.
    Close,
}

impl FailurePolicy {
    /// The cost of the `failures`-th failure on one connection.
    pub fn after(failures: u32) -> Self {
        if failures >= MAX_FAILURES {
            FailurePolicy::Close
        } else if failures > FREE_FAILURES {
            FailurePolicy::Delay
        } else {
            FailurePolicy::Answer
        }
    }

    /// How long to wait before answering.
    pub fn delay(self) -> Option<Duration> {
        match self {
            FailurePolicy::Answer => None,
            FailurePolicy::Delay | FailurePolicy::Close => Some(FAILURE_DELAY),
        }
    }
}

/// Whether a listener bound to `local` counts as loopback only: 127.0.0.0/8, `::1`, or an
/// IPv4-mapped loopback address. `0.0.0.0` and `::` listen on every interface: not loopback.
pub fn is_loopback_listener(local: IpAddr) -> bool {
    match local {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Whether the admin routes may run without a password for a request that arrived on a
/// listener bound to `local` (unknown: refused). With a password they always need it.
pub fn admin_allowed_without_password(local: Option<SocketAddr>) -> bool {
    local.is_some_and(|a| is_loopback_listener(a.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_compare_by_every_byte() {
        assert!(password_matches(b"s3cret", b"s3cret"));
        assert!(!password_matches(b"s3cret", b"s3creT"));
        assert!(!password_matches(b"s3cret", b"s3cre"));
        assert!(!password_matches(b"s3cret", b"s3crett"));
        assert!(!password_matches(b"s3cret", b""));
    }

    #[test]
    fn failures_are_free_then_delayed_then_close() {
        let costs: Vec<_> = (1..=MAX_FAILURES).map(FailurePolicy::after).collect();
        assert!(
            costs[..FREE_FAILURES as usize]
                .iter()
                .all(|c| *c == FailurePolicy::Answer)
        );
        assert_eq!(costs[FREE_FAILURES as usize], FailurePolicy::Delay);
        assert_eq!(costs.last(), Some(&FailurePolicy::Close));
        assert_eq!(FailurePolicy::after(u32::MAX), FailurePolicy::Close);
    }

    #[test]
    fn only_loopback_listeners_open_admin_routes_without_a_password() {
        let open = |s: &str| admin_allowed_without_password(Some(s.parse().unwrap()));
        assert!(open("127.0.0.1:7379"));
        assert!(open("127.5.6.7:0"));
        assert!(open("[::1]:80"));
        assert!(open("[::ffff:127.0.0.1]:80"));
        assert!(!open("0.0.0.0:7379"));
        assert!(!open("[::]:7379"));
        assert!(!open("10.0.0.5:7379"));
        assert!(!open("[::ffff:10.0.0.5]:80"));
        assert!(!admin_allowed_without_password(None));
    }
}
