//! What a request touches, for the ACL check: the command (or subcommand) id, each key with
//! the access it needs (read, write, or neither, from the command's key specification), and
//! each Pub/Sub channel (a PSUBSCRIBE pattern marked as one).
//!
//! Guarantees: [`User::check`] allows a request only when one of the user's selectors
//! allows its command, every key and every channel; a refusal names the argument Redis's
//! would (no selector runs the command → the command; else the last key or channel some
//! selector refused, channels before keys).

use super::universe::{CmdId, Universe};
use super::user::User;
use crate::args::Args;
use crate::command::Cmd;

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Denied {
    /// No selector runs the command.
    Command,
    /// The key at this argument position is out of reach.
    Key(usize),
    /// The channel at this argument position is out of reach.
    Channel(usize),
}

impl Denied {
    /// Redis's error for a refused request (`-NOPERM …`).
    pub fn error(self, request: &Request<'_>) -> String {
        match self {
            Denied::Command => format!(
                "NOPERM this user has no permissions to run the '{}' command",
                request.name()
            ),
            Denied::Key(_) => "NOPERM this user has no permissions to access one of the keys \
                               used as arguments"
                .into(),
            Denied::Channel(_) => "NOPERM this user has no permissions to access one of the \
                                   channels used as arguments"
                .into(),
        }
    }

    /// The reason inside a script (`The user executing the script …`).
    pub fn script_reason(self) -> &'static str {
        match self {
            Denied::Command => "can't run this command or subcommand",
            Denied::Key(_) => {
                "can't access at least one of the keys mentioned in the command arguments"
            }
            Denied::Channel(_) => "can't publish to the channel mentioned in the command",
        }
    }

    /// `ACL LOG`'s reason.
    pub fn reason(self) -> &'static str {
        match self {
            Denied::Command => "command",
            Denied::Key(_) => "key",
            Denied::Channel(_) => "channel",
        }
    }

    /// `ACL LOG`'s object: the command's full name, or the key or channel.
    pub fn object(self, request: &Request<'_>) -> Vec<u8> {
        match self {
            Denied::Command => request.name().as_bytes().to_vec(),
            Denied::Key(at) | Denied::Channel(at) => request.args.get(at).to_vec(),
        }
    }
}

/// A request as the ACL check sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The command.
    pub cmd: Cmd,
    /// Its arguments (the name at 0).
    pub args: Args<'a>,
    /// The id it is checked against (a subcommand's, when it names one).
    pub id: CmdId,
}

impl<'a> Request<'a> {
    /// The request `args` of `cmd`.
    pub fn new(cmd: Cmd, args: Args<'a>) -> Self {
        let id = Universe::get().of(cmd, &args);
        Request { cmd, args, id }
    }

    /// The full name Redis reports (`get`, `client|kill`).
    pub fn name(&self) -> &'static str {
        &Universe::get().entry(self.id).name
    }

    /// The argument an allowed first argument is compared with: the one after the
    /// command's name, or after the subcommand's.
    fn first_arg(&self) -> Option<&'a [u8]> {
        let at = if Universe::get().entry(self.id).parent.is_some() {
            2
        } else {
            1
        };
        (at < self.args.len()).then(|| self.args.get(at))
    }

    /// Each key's position and the access it needs: `(position, read, write)`, computed as
    /// it is iterated (no allocation on the request path).
    pub fn keys(&self) -> impl Iterator<Item = (usize, bool, bool)> + '_ {
        use Cmd::*;
        // Shard channels sit where keys do (for their slot) but are channels.
        let channels_only = matches!(self.cmd, Ssubscribe | Sunsubscribe | Spublish);
        let (read, write) = spec_access(self.cmd.request_key_flags(self.args));
        let cmd = self.cmd;
        self.cmd
            .spec()
            .key_positions(&self.args)
            .filter(move |_| !channels_only)
            .enumerate()
            .map(move |(i, pos)| {
                let (r, w) = match cmd {
                    Sinterstore | Sunionstore | Sdiffstore | Zunionstore | Zinterstore
                    | Zdiffstore | Zrangestore | Geosearchstore | Bitop => (i > 0, i == 0),
                    Copy => (i == 0, i > 0),
                    Pfmerge => (true, i == 0),
                    Sort | Georadius | Georadiusbymember => (i == 0, i > 0),
                    _ => (read, write),
                };
                (pos, r, w)
            })
    }

    /// Each channel's position and whether it is a pattern.
    pub fn channels(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        let (from, pattern) = match self.cmd {
            Cmd::Publish | Cmd::Spublish => (1, false),
            Cmd::Subscribe | Cmd::Ssubscribe => (1, false),
            Cmd::Psubscribe => (1, true),
            _ => (self.args.len(), false),
        };
        let to = match self.cmd {
            Cmd::Publish | Cmd::Spublish => self.args.len().min(2),
            _ => self.args.len(),
        };
        (from..to.max(from)).map(move |i| (i, pattern))
    }
}

/// The access a key specification's flags ask of a key: read for `access`, write for
/// `insert`, `update` or `delete`.
fn spec_access(flags: &[&str]) -> (bool, bool) {
    let read = flags.contains(&"access");
    let write = flags
        .iter()
        .any(|f| matches!(*f, "insert" | "update" | "delete"));
    (read, write)
}

impl User {
    /// Whether the user may run `request`, and if not, why (the most telling refusal over
    /// its selectors).
    pub fn check(&self, request: &Request<'_>) -> Result<(), Denied> {
        if self.unrestricted() || request.cmd.no_auth() {
            return Ok(());
        }
        let mut worst = Denied::Command;
        for s in self.selectors() {
            let refused = (|| {
                if !s.allows_command(request.id, request.first_arg()) {
                    return Some(Denied::Command);
                }
                if let Some((pos, ..)) = request
                    .keys()
                    .find(|&(pos, r, w)| !s.allows_key(request.args.get(pos), r, w))
                {
                    return Some(Denied::Key(pos));
                }
                request
                    .channels()
                    .find(|&(pos, pattern)| !s.allows_channel(request.args.get(pos), pattern))
                    .map(|(pos, _)| Denied::Channel(pos))
            })();
            match refused {
                None => return Ok(()),
                Some(d) => worst = worst.max(d),
            }
        }
        Err(worst)
    }

    /// Whether the user may subscribe to (or, `pattern`, psubscribe) `channel`: what a
    /// connection still subscribed must keep when the user's channels change.
    pub fn allows_channel(&self, channel: &[u8], pattern: bool) -> bool {
        self.selectors()
            .iter()
            .any(|s| s.allows_channel(channel, pattern))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OwnedArgs;

    fn check(user: &User, parts: &[&str]) -> Result<(), Denied> {
        let owned = OwnedArgs::from_slices(parts.iter().map(|p| p.as_bytes()));
        let args = owned.get();
        let cmd = Cmd::lookup(args.get(0)).unwrap();
        user.check(&Request::new(cmd, args))
    }

    fn user(rules: &str) -> User {
        User::new(b"u", false)
            .with_rules(rules.split(' ').map(str::as_bytes))
            .unwrap()
    }

    #[test]
    fn commands_keys_and_channels_are_checked() {
        let u = user("on nopass +set +get ~foo:* &news");
        assert_eq!(check(&u, &["SET", "foo:1", "v"]), Ok(()));
        assert_eq!(check(&u, &["SET", "bar", "v"]), Err(Denied::Key(1)));
        assert_eq!(check(&u, &["INCR", "foo:1"]), Err(Denied::Command));
        let u = user("on nopass +@all ~* &news");
        assert_eq!(check(&u, &["PUBLISH", "news", "m"]), Ok(()));
        assert_eq!(
            check(&u, &["PUBLISH", "sports", "m"]),
            Err(Denied::Channel(1))
        );
        assert_eq!(
            check(&u, &["SUBSCRIBE", "news", "x"]),
            Err(Denied::Channel(2))
        );
        assert_eq!(check(&u, &["PSUBSCRIBE", "n*"]), Err(Denied::Channel(1)));
        assert_eq!(check(&u, &["SPUBLISH", "x", "m"]), Err(Denied::Channel(1)));
    }

    #[test]
    fn read_and_write_patterns_follow_the_key_specification() {
        let u = user("on nopass +@all %R~src:* %W~dst:*");
        assert_eq!(check(&u, &["GET", "src:1"]), Ok(()));
        assert_eq!(check(&u, &["SET", "src:1", "v"]), Err(Denied::Key(1)));
        assert_eq!(check(&u, &["SET", "dst:1", "v"]), Ok(()));
        assert_eq!(check(&u, &["COPY", "src:1", "dst:1"]), Ok(()));
        assert_eq!(check(&u, &["COPY", "dst:1", "src:1"]), Err(Denied::Key(1)));
        assert_eq!(
            check(&u, &["SINTERSTORE", "dst:1", "src:1", "src:2"]),
            Ok(())
        );
        assert_eq!(check(&u, &["EXISTS", "dst:1"]), Ok(()));
    }

    #[test]
    fn any_selector_may_allow_and_the_most_telling_refusal_wins() {
        let u = user("on nopass +get ~a (+set ~b)");
        assert_eq!(check(&u, &["GET", "a"]), Ok(()));
        assert_eq!(check(&u, &["SET", "b", "v"]), Ok(()));
        assert_eq!(check(&u, &["SET", "a", "v"]), Err(Denied::Key(1)));
        assert_eq!(check(&u, &["DEL", "a"]), Err(Denied::Command));
    }

    #[test]
    fn connection_commands_before_auth_are_never_refused() {
        let u = user("on nopass -@all");
        assert_eq!(check(&u, &["AUTH", "x", "y"]), Ok(()));
        assert_eq!(check(&u, &["HELLO", "3"]), Ok(()));
        assert_eq!(check(&u, &["PING"]), Err(Denied::Command));
    }

    #[test]
    fn subcommands_and_first_args_are_checked() {
        let u = user("on nopass ~* -@all +client|id +select|0");
        assert_eq!(check(&u, &["CLIENT", "ID"]), Ok(()));
        assert_eq!(check(&u, &["CLIENT", "KILL", "x"]), Err(Denied::Command));
        assert_eq!(check(&u, &["SELECT", "0"]), Ok(()));
        assert_eq!(check(&u, &["SELECT", "1"]), Err(Denied::Command));
        let owned = OwnedArgs::from_slices([b"client" as &[u8], b"kill", b"x"].into_iter());
        let req = Request::new(Cmd::Client, owned.get());
        assert_eq!(
            Denied::Command.error(&req),
            "NOPERM this user has no permissions to run the 'client|kill' command"
        );
    }
}
