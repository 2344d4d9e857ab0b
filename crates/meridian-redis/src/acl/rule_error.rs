//! Why an ACL rule was refused, in Redis's words (what follows `Error in ACL SETUSER
//! modifier '…':`). Below both the selector and the user, which apply rules.

/// Why a rule was refused; `Display` is Redis's text after `Error in ACL SETUSER modifier`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("Unknown command or category name in ACL")]
    /// A command or category no table knows.
    UnknownCommand,
    #[error("Syntax error")]
    /// A rule of no known form.
    Syntax,
    #[error(
        "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does \
         not have any effect. Try 'resetkeys' to start with an empty list of patterns"
    )]
    /// A key pattern after `~*`.
    KeyAfterAll,
    #[error(
        "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and \
         does not have any effect. Try 'resetchannels' to start with an empty list of channels"
    )]
    /// A channel pattern after `&*`.
    ChannelAfterAll,
    #[error("The password you are trying to remove from the user does not exist")]
    /// `<pass` or `!hash` naming no password of the user.
    NoSuchPassword,
    #[error(
        "The password hash must be exactly 64 characters and contain only lowercase \
         hexadecimal characters"
    )]
    /// A `#hash` or `!hash` that is not 64 lowercase hex digits.
    BadHash,
    #[error("Allowing first-arg of a subcommand is not supported")]
    /// `+container|sub|arg`.
    FirstArgOfSubcommand,
}
