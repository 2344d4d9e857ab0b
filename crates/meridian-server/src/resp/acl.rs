//! The node's ACL users and the `ACL` command (Redis 6/7 access control), over
//! `meridian_redis::acl`'s rules.
//!
//! - [`Users`]: every user by name (the `default` user always among them: `requirepass`
//!   sets its password, as in Redis), the ACL log, and the ACL file. Built at start from
//!   `resp.users` lines or `resp.aclfile`.
//! - [`SessionUser`]: the user a connection runs as. A change to that user (`ACL SETUSER`)
//!   applies from the connection's next command; deleting it, or `ACL LOAD` dropping it,
//!   closes the connection after its reply, and a change that revokes a channel the
//!   connection is subscribed to closes it at once, as Redis does.
//!
//! The `ACL` command and the per-request check are in `resp::acl_command`; in cluster mode
//! the users are replicated with the cluster metadata (`resp::acl_cluster`).
//!
//! Guarantees: a refused rule changes no user; the ACL file is replaced atomically (a
//! temporary file renamed over it) and a file with any error loads nothing; passwords are
//! kept only as SHA-256 hashes; the log keeps at most `acllog-max-len` entries.

use bytes::Bytes;
use meridian_redis::acl::User;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// One user as connections hold it: replaced whole on every change, so a connection reads
/// a consistent user.
#[derive(Debug)]
pub(crate) struct Slot {
    user: RwLock<Arc<User>>,
    version: AtomicU64,
    pub(super) deleted: AtomicBool,
}

impl Slot {
    pub(super) fn new(user: User) -> Arc<Slot> {
        Arc::new(Slot {
            user: RwLock::new(Arc::new(user)),
            version: AtomicU64::new(0),
            deleted: AtomicBool::new(false),
        })
    }

    pub(super) fn get(&self) -> Arc<User> {
        self.user.read().clone()
    }

    pub(super) fn replace(&self, user: User) {
        *self.user.write() = Arc::new(user);
        self.version.fetch_add(1, Ordering::Release);
    }
}

/// The user a connection runs as, cached until it changes.
#[derive(Clone, Debug)]
pub(crate) struct SessionUser {
    slot: Arc<Slot>,
    user: Arc<User>,
    version: u64,
}

impl SessionUser {
    fn of(slot: Arc<Slot>) -> SessionUser {
        let version = slot.version.load(Ordering::Acquire);
        let user = slot.get();
        SessionUser {
            slot,
            user,
            version,
        }
    }

    /// The user as it is now, or `None` once it was deleted (the connection closes).
    pub(crate) fn current(&mut self) -> Option<&Arc<User>> {
        if self.slot.deleted.load(Ordering::Acquire) {
            return None;
        }
        let version = self.slot.version.load(Ordering::Acquire);
        if version != self.version {
            self.user = self.slot.get();
            self.version = version;
        }
        Some(&self.user)
    }

    /// Whether the user may run `cmd` with `args` (`redis.acl_check_cmd`; nothing logged).
    pub(crate) fn allows(
        &mut self,
        cmd: meridian_redis::Cmd,
        args: meridian_redis::Args<'_>,
    ) -> bool {
        let request = meridian_redis::acl::Request::new(cmd, args);
        self.current().is_some_and(|u| u.check(&request).is_ok())
    }

    /// The user's name.
    pub(crate) fn name(&self) -> &[u8] {
        self.user.name()
    }
}

/// Where a refusal happened (`ACL LOG`'s `context`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogContext {
    Toplevel,
    Multi,
    Lua,
}

impl LogContext {
    pub(super) fn name(self) -> &'static str {
        match self {
            LogContext::Toplevel => "toplevel",
            LogContext::Multi => "multi",
            LogContext::Lua => "lua",
        }
    }
}

/// One `ACL LOG` entry.
#[derive(Debug)]
pub(super) struct LogEntry {
    pub(super) count: u64,
    pub(super) reason: &'static str,
    pub(super) context: LogContext,
    pub(super) object: Vec<u8>,
    pub(super) username: Vec<u8>,
    pub(super) at: Instant,
    pub(super) client_info: String,
}

/// Similar refusals within this long are counted in one entry, as Redis groups them.
const LOG_GROUPING_MS: u128 = 60_000;

/// The most bytes of a refused key or channel an `ACL LOG` entry keeps.
pub(crate) const MAX_LOGGED_OBJECT: usize = 64 * 1024;

/// Redis's default `acllog-max-len`.
pub(crate) const DEFAULT_LOG_MAX_LEN: usize = 128;

/// The node's users, log and ACL file.
#[derive(Debug)]
pub(crate) struct Users {
    pub(super) users: RwLock<BTreeMap<Vec<u8>, Arc<Slot>>>,
    pub(super) log: Mutex<VecDeque<LogEntry>>,
    pub(crate) log_max_len: AtomicUsize,
    pub(super) aclfile: Option<PathBuf>,
    /// `acl-pubsub-default allchannels`: new users may use every channel.
    pub(super) all_channels_default: bool,
    /// The `default` user as configured (`requirepass` its password): what an ACL file
    /// without a `user default` line leaves it as, so `ACL LOAD` never opens a node that
    /// `requirepass` protects.
    pub(super) configured_default: User,
    /// Cluster mode: the replicated users last applied (`resp::acl_cluster`).
    pub(super) adopted: Mutex<Adopted>,
}

/// Cluster mode: the users of the last cluster-metadata document a node applied
/// (`resp::acl_cluster`), and that document's `(version, author)`, so an older document
/// arriving late changes nothing.
#[derive(Debug, Default)]
pub(super) struct Adopted {
    pub(super) at: (u64, u32),
    pub(super) users: Option<meridian_replication::UserTable>,
}

/// How users are configured at start (`Debug` shows how many user lines, never their
/// `>password` rules).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AclConfig {
    /// `user <name> <rules…>` lines (Redis's `user` directives).
    pub users: Vec<String>,
    /// The ACL file (`aclfile`), loaded at start and by `ACL LOAD`, written by `ACL SAVE`.
    pub aclfile: Option<PathBuf>,
    /// `acl-pubsub-default`: whether new users may use every channel.
    pub all_channels_default: bool,
}

impl std::fmt::Debug for AclConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AclConfig")
            .field("users", &self.users.len())
            .field("aclfile", &self.aclfile)
            .field("all_channels_default", &self.all_channels_default)
            .finish()
    }
}

impl Users {
    /// The users `config` describes, the `default` user's password `requirepass`; an
    /// invalid line or file is refused with what is wrong.
    pub(crate) fn new(config: &AclConfig, requirepass: Option<&str>) -> Result<Users, String> {
        if config.aclfile.is_some() && !config.users.is_empty() {
            return Err("configuring users both in resp.users and in an ACL file \
                        (resp.aclfile) is not supported: use one of them"
                .into());
        }
        let mut default = User::default_user();
        if let Some(pass) = requirepass {
            default = default
                .with_rules([b"resetpass" as &[u8], format!(">{pass}").as_bytes()])
                .map_err(|e| format!("requirepass: {e}"))?;
        }
        let users = Users {
            users: RwLock::new(BTreeMap::new()),
            log: Mutex::new(VecDeque::new()),
            log_max_len: AtomicUsize::new(DEFAULT_LOG_MAX_LEN),
            aclfile: config.aclfile.clone(),
            all_channels_default: config.all_channels_default,
            configured_default: default.clone(),
            adopted: Mutex::default(),
        };
        let mut map = BTreeMap::new();
        map.insert(b"default".to_vec(), Slot::new(default));
        let parsed = match &config.aclfile {
            Some(path) => users.read_file(path)?,
            None => users.parse_lines(config.users.iter().map(String::as_str), "resp.users")?,
        };
        for (name, user) in parsed {
            map.insert(name, Slot::new(user));
        }
        *users.users.write() = map;
        Ok(users)
    }

    /// Users nobody can log in as (the `default` user off): what a node whose ACL
    /// configuration cannot be read serves with.
    pub(crate) fn locked() -> Users {
        let off = User::new(b"default", false);
        Users {
            configured_default: off.clone(),
            users: RwLock::new(BTreeMap::from([(b"default".to_vec(), Slot::new(off))])),
            log: Mutex::new(VecDeque::new()),
            log_max_len: AtomicUsize::new(DEFAULT_LOG_MAX_LEN),
            aclfile: None,
            all_channels_default: false,
            adopted: Mutex::default(),
        }
    }

    /// Parses `user <name> <rules…>` lines into users; any error refuses them all.
    fn parse_lines<'a>(
        &self,
        lines: impl Iterator<Item = &'a str>,
        source: &str,
    ) -> Result<BTreeMap<Vec<u8>, User>, String> {
        let mut users = BTreeMap::new();
        let mut errors = String::new();
        for (n, line) in lines.enumerate() {
            let line = line.trim_matches([' ', '\t', '\r', '\n']);
            if line.is_empty() {
                continue;
            }
            let mut words = line.split(' ').filter(|w| !w.is_empty());
            let (Some("user"), Some(name)) = (words.next(), words.next()) else {
                errors += &format!(
                    "{source}:{}: should start with user keyword followed by the username. ",
                    n + 1
                );
                continue;
            };
            if users.contains_key(name.as_bytes()) {
                errors += &format!("WARNING: Duplicate user '{name}' found on line {}. ", n + 1);
                continue;
            }
            let fresh = User::new(name.as_bytes(), self.all_channels_default);
            match fresh.with_rules(words.map(str::as_bytes)) {
                Ok(user) => {
                    users.insert(name.as_bytes().to_vec(), user);
                }
                Err(e) => errors += &format!("{source}:{}: {e}. ", n + 1),
            }
        }
        if errors.is_empty() {
            Ok(users)
        } else {
            Err(errors.trim_end().to_string())
        }
    }

    pub(super) fn read_file(&self, path: &PathBuf) -> Result<BTreeMap<Vec<u8>, User>, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("Error loading ACLs, opening file '{}': {e}", path.display()))?;
        self.parse_lines(text.lines(), &path.display().to_string())
    }

    /// The slot of user `name`.
    pub(super) fn slot(&self, name: &[u8]) -> Option<Arc<Slot>> {
        self.users.read().get(name).cloned()
    }

    /// Whether user `name` exists.
    pub(crate) fn exists(&self, name: &[u8]) -> bool {
        self.slot(name).is_some()
    }

    /// What a new connection runs as: the `default` user.
    pub(crate) fn default_session(&self) -> SessionUser {
        SessionUser::of(
            self.slot(b"default")
                .expect("the default user always exists"),
        )
    }

    /// Whether a new connection is authenticated without AUTH (`default` is on and
    /// `nopass`).
    pub(crate) fn default_needs_no_auth(&self) -> bool {
        let user = self.slot(b"default").expect("default").get();
        user.enabled() && user.nopass()
    }

    /// Whether the `default` user takes any password (`AUTH <password>` is then an error).
    pub(crate) fn default_is_nopass(&self) -> bool {
        self.slot(b"default").expect("default").get().nopass()
    }

    /// The session of user `name`, authenticated some other way (an S3 access key mapped to
    /// it); `None` when there is no such user.
    pub(crate) fn session_of(&self, name: &[u8]) -> Option<SessionUser> {
        self.slot(name).map(SessionUser::of)
    }

    /// The session of `name` if `password` authenticates it.
    pub(crate) fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<SessionUser> {
        let slot = self.slot(name)?;
        slot.get().accepts(password).then(|| SessionUser::of(slot))
    }

    /// Sets `acllog-max-len`, dropping the oldest entries past it.
    pub(crate) fn set_log_max_len(&self, n: usize) {
        self.log_max_len.store(n, Ordering::Relaxed);
        self.log.lock().truncate(n);
    }

    /// Records a refusal in the ACL log, grouping it with a similar recent one.
    pub(crate) fn log(
        &self,
        reason: &'static str,
        context: LogContext,
        object: Vec<u8>,
        username: &[u8],
        client_info: String,
    ) {
        let now = Instant::now();
        // A refused key may be up to `proto-max-bulk-len`: the log keeps its first bytes only,
        // so a client cannot pin `acllog-max-len` huge keys in memory.
        let mut object = object;
        object.truncate(MAX_LOGGED_OBJECT);
        let mut log = self.log.lock();
        let similar = log.iter().take(10).position(|e| {
            e.reason == reason
                && e.context == context
                && e.object == object
                && e.username == username
                && now.duration_since(e.at).as_millis() <= LOG_GROUPING_MS
        });
        if let Some(at) = similar {
            let mut e = log.remove(at).expect("found");
            e.count += 1;
            e.at = now;
            e.client_info = client_info;
            log.push_front(e);
            return;
        }
        log.push_front(LogEntry {
            count: 1,
            reason,
            context,
            object,
            username: username.to_vec(),
            at: now,
            client_info,
        });
        log.truncate(self.log_max_len.load(Ordering::Relaxed));
    }
}

/// Redis's refusal of a client beyond loopback in protected mode.
pub(crate) const PROTECTED_MODE_DENIED: &str = "-DENIED Redis is running in protected mode \
    because protected mode is enabled and no password is set for the default user. In this \
    mode connections are only accepted from the loopback interface. If you want to connect \
    from external computers to Redis you may adopt one of the following solutions: 1) Just \
    disable protected mode sending the command 'CONFIG SET protected-mode no' from the \
    loopback interface by connecting to Redis from the same host the server is running, \
    however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG \
    REWRITE to make this change permanent. 2) Alternatively you can just disable the \
    protected mode by editing the Redis configuration file, and setting the protected mode \
    option to 'no', and then restarting the server. 3) If you started the server manually \
    just for testing, restart it with the '--protected-mode no' option. 4) Setup a an \
    authentication password for the default user. NOTE: You only need to do one of the above \
    things in order for the server to start accepting connections from the outside.\r\n";

/// Whether protected mode (`on`) refuses a client from `addr`: the `default` user takes any
/// password and the client is not on loopback (Redis's rule).
pub(crate) fn protected_mode_refuses(on: bool, users: &Users, addr: std::net::SocketAddr) -> bool {
    on && users.default_is_nopass() && !addr.ip().to_canonical().is_loopback()
}

/// A client's user name as CLIENT LIST shows it.
pub(crate) fn default_user_name() -> Bytes {
    Bytes::from_static(b"default")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn protected_mode_refuses_only_remote_clients_of_a_passwordless_node() {
        let remote: std::net::SocketAddr = "192.0.2.7:5000".parse().unwrap();
        let mapped: std::net::SocketAddr = "[::ffff:192.0.2.7]:5000".parse().unwrap();
        let local: std::net::SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let local6: std::net::SocketAddr = "[::1]:5000".parse().unwrap();
        let open = Users::new(&AclConfig::default(), None).unwrap();
        assert!(protected_mode_refuses(true, &open, remote));
        assert!(protected_mode_refuses(true, &open, mapped));
        assert!(!protected_mode_refuses(true, &open, local));
        assert!(!protected_mode_refuses(true, &open, local6));
        assert!(!protected_mode_refuses(false, &open, remote));
        let with_password = Users::new(&AclConfig::default(), Some("p")).unwrap();
        assert!(!protected_mode_refuses(true, &with_password, remote));
    }

    #[test]
    fn requirepass_is_the_default_users_password() {
        let users = Users::new(&AclConfig::default(), Some("p")).unwrap();
        assert!(!users.default_needs_no_auth());
        assert!(users.authenticate(b"default", b"p").is_some());
        assert!(users.authenticate(b"default", b"q").is_none());
        let users = Users::new(&AclConfig::default(), None).unwrap();
        assert!(users.default_needs_no_auth() && users.default_is_nopass());
    }

    #[test]
    fn a_bad_user_line_refuses_the_configuration() {
        let config = |lines: &[&str]| AclConfig {
            users: lines.iter().map(|l| l.to_string()).collect(),
            ..AclConfig::default()
        };
        let err = Users::new(&config(&["user a on +nosuch"]), None).unwrap_err();
        assert!(
            err.contains("resp.users:1: Error in ACL SETUSER modifier '+nosuch'"),
            "{err}"
        );
        let err = Users::new(&config(&["user a on", "user a off"]), None).unwrap_err();
        assert!(err.contains("Duplicate user 'a'"), "{err}");
        let err = Users::new(&config(&["notuser a"]), None).unwrap_err();
        assert!(err.contains("should start with user keyword"), "{err}");
        let users = Users::new(&config(&["user default on >x ~* +@all"]), None).unwrap();
        assert!(
            !users.default_is_nopass(),
            "a line may redefine the default user"
        );
    }

    #[test]
    fn the_log_groups_similar_refusals_and_keeps_its_bound() {
        let users = Users::new(&AclConfig::default(), None).unwrap();
        for _ in 0..3 {
            users.log(
                "command",
                LogContext::Toplevel,
                b"get".to_vec(),
                b"u",
                String::new(),
            );
        }
        assert_eq!(users.log.lock().len(), 1);
        assert_eq!(users.log.lock()[0].count, 3);
        users.set_log_max_len(2);
        for i in 0..5u8 {
            users.log("key", LogContext::Multi, vec![i], b"u", String::new());
        }
        assert_eq!(users.log.lock().len(), 2);
        // Attack: a huge refused key is kept to a bounded prefix.
        let huge = vec![b'k'; 8 * MAX_LOGGED_OBJECT];
        users.log("key", LogContext::Toplevel, huge, b"u", String::new());
        assert_eq!(users.log.lock()[0].object.len(), MAX_LOGGED_OBJECT);
    }
}
