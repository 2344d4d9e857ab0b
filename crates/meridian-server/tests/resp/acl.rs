//! ACL users over RESP (issue 42, item 2): users from the configuration and from an ACL
//! file, Redis's `-NOPERM` replies word for word, what `ACL SETUSER`/`DELUSER`/`LOAD` do to
//! connections already authenticated, checks inside MULTI/EXEC and scripts, and hostile
//! rules and arguments to the ACL command. Redis's own `unit/acl` tests run against a node
//! in `scripts/redis-suite.sh`; these pin what a client sees end to end.

use super::*;
use meridian_server::resp::AclConfig;

const NOPERM_KEYS: &[u8] =
    b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";

async fn with_users(users: &[&str]) -> Server {
    Server::start(RespConfig {
        acl: AclConfig {
            users: users.iter().map(|u| u.to_string()).collect(),
            ..AclConfig::default()
        },
        ..RespConfig::default()
    })
    .await
}

/// The rule: a user limited to `~app:*` gets `-NOPERM` elsewhere, as Redis words it;
/// a command outside its categories is refused by name; the log says why.
#[tokio::test]
async fn a_user_limited_to_a_key_pattern_is_refused_elsewhere() {
    let s = with_users(&["user app on >apppass ~app:* +@read +@write -flushall"]).await;
    let mut c = s.connect().await;
    c.roundtrip(b"AUTH app apppass\r\n", b"+OK\r\n").await;
    c.roundtrip(b"SET app:1 v\r\nGET app:1\r\n", b"+OK\r\n$1\r\nv\r\n")
        .await;
    c.roundtrip(b"SET other v\r\n", NOPERM_KEYS).await;
    c.roundtrip(b"MSET app:2 v other v\r\n", NOPERM_KEYS).await;
    c.roundtrip(
        b"FLUSHALL\r\n",
        b"-NOPERM this user has no permissions to run the 'flushall' command\r\n",
    )
    .await;
    c.roundtrip(
        b"CONFIG SET maxmemory 1\r\n",
        b"-NOPERM this user has no permissions to run the 'config|set' command\r\n",
    )
    .await;
    // The default connection (no password: `default` is nopass) reads the log.
    let mut admin = s.connect().await;
    let log = admin.cmd(&[b"ACL", b"LOG", b"1"]).await;
    let text = format!("{log:?}");
    assert!(
        text.contains("config|set") && text.contains("\"app\""),
        "{text}"
    );
    // Nothing the refused commands would have written was written.
    admin.roundtrip(b"EXISTS other\r\n", b":0\r\n").await;
    s.stop().await;
}

/// `requirepass` is the default user's password; named users log in with `AUTH user pass`
/// and `HELLO 3 AUTH`; a disabled user or a wrong password gets Redis's `WRONGPASS`.
#[tokio::test]
async fn named_users_authenticate_beside_requirepass() {
    let s = Server::start(RespConfig {
        requirepass: Some("rootpass".into()),
        acl: AclConfig {
            users: vec![
                "user reader on >r ~* +@read".into(),
                "user off >x +@all".into(),
            ],
            ..AclConfig::default()
        },
        ..RespConfig::default()
    })
    .await;
    let mut c = s.connect().await;
    c.roundtrip(b"GET k\r\n", b"-NOAUTH Authentication required.\r\n")
        .await;
    c.roundtrip(
        b"AUTH off x\r\n",
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    )
    .await;
    c.roundtrip(b"AUTH reader r\r\nGET k\r\n", b"+OK\r\n$-1\r\n")
        .await;
    c.roundtrip(
        b"SET k v\r\n",
        b"-NOPERM this user has no permissions to run the 'set' command\r\n",
    )
    .await;
    c.roundtrip(
        b"ACL WHOAMI\r\n",
        b"-NOPERM this user has no permissions to run the 'acl|whoami' command\r\n",
    )
    .await;
    c.roundtrip(
        b"AUTH rootpass\r\nACL WHOAMI\r\n",
        b"+OK\r\n$7\r\ndefault\r\n",
    )
    .await;
    let mut h = s.connect().await;
    h.send(b"HELLO 3 AUTH reader r\r\n").await;
    assert!(matches!(h.frame().await, Frame::Map(_)));
    let list = h.cmd(&[b"CLIENT", b"LIST"]).await;
    assert!(format!("{list:?}").contains("NOPERM"), "{list:?}");
    s.stop().await;
}

/// Changing a user applies to its connections from their next command; deleting it closes
/// them (after the deleting command's own reply); revoking a channel a connection is
/// subscribed to closes that connection.
#[tokio::test]
async fn user_changes_reach_connections_already_authenticated() {
    let s = with_users(&["user worker on >w ~* &jobs +@all"]).await;
    let mut admin = s.connect().await;
    let mut w = s.connect().await;
    w.roundtrip(b"AUTH worker w\r\nSET a 1\r\n", b"+OK\r\n+OK\r\n")
        .await;
    admin
        .roundtrip(b"ACL SETUSER worker -set\r\n", b"+OK\r\n")
        .await;
    w.roundtrip(
        b"SET a 2\r\n",
        b"-NOPERM this user has no permissions to run the 'set' command\r\n",
    )
    .await;
    let mut sub = s.connect().await;
    sub.roundtrip(b"AUTH worker w\r\n", b"+OK\r\n").await;
    sub.send(b"SUBSCRIBE jobs\r\n").await;
    let _confirmation = sub.frame().await;
    admin
        .roundtrip(b"ACL SETUSER worker resetchannels\r\n", b"+OK\r\n")
        .await;
    sub.expect_eof().await;
    admin
        .roundtrip(b"ACL DELUSER worker nosuch\r\n", b":1\r\n")
        .await;
    w.expect_eof().await;
    // A user deleting itself gets its reply, then the close.
    admin
        .roundtrip(b"ACL SETUSER me on nopass +@all ~*\r\n", b"+OK\r\n")
        .await;
    let mut me = s.connect().await;
    me.roundtrip(b"AUTH me x\r\nACL DELUSER me\r\n", b"+OK\r\n:1\r\n")
        .await;
    me.expect_eof().await;
    admin
        .roundtrip(
            b"ACL DELUSER default\r\n",
            b"-ERR The 'default' user cannot be removed\r\n",
        )
        .await;
    s.stop().await;
}

/// Commands are checked when queued (the transaction aborts) and again at EXEC, with
/// Redis's text when the user changed between; a script's commands are checked as its
/// caller's.
#[tokio::test]
async fn transactions_and_scripts_are_checked_as_their_user() {
    let s = with_users(&["user t on >t ~* +@all -incr"]).await;
    let mut admin = s.connect().await;
    let mut c = s.connect().await;
    c.roundtrip(b"AUTH t t\r\nMULTI\r\n", b"+OK\r\n+OK\r\n")
        .await;
    c.roundtrip(
        b"INCR n\r\n",
        b"-NOPERM this user has no permissions to run the 'incr' command\r\n",
    )
    .await;
    c.roundtrip(
        b"EXEC\r\n",
        b"-EXECABORT Transaction discarded because of previous errors.\r\n",
    )
    .await;
    c.roundtrip(b"MULTI\r\nSET n 1\r\n", b"+OK\r\n+QUEUED\r\n")
        .await;
    admin.roundtrip(b"ACL SETUSER t -set\r\n", b"+OK\r\n").await;
    c.roundtrip(
        b"EXEC\r\n",
        b"*1\r\n-NOPERM ACLs rules changed between the moment the transaction was accumulated \
          and the EXEC call. This command is no longer allowed for the following reason: no \
          permission to execute the command or subcommand\r\n",
    )
    .await;
    let reply = c
        .cmd(&[b"EVAL", b"return redis.call('incr', 'n')", b"0"])
        .await;
    let Frame::Error(e) = reply else {
        panic!("{reply:?}")
    };
    let e = String::from_utf8_lossy(&e);
    assert!(
        e.contains("The user executing the script can't run this command or subcommand"),
        "{e}"
    );
    // `redis.acl_check_cmd` answers for the script's user (false is nil in RESP2).
    let check = |cmd: &str| format!("EVAL \"return redis.acl_check_cmd({cmd})\" 0\r\n");
    c.roundtrip(check("'incr','n'").as_bytes(), b"$-1\r\n")
        .await;
    c.roundtrip(check("'get','n'").as_bytes(), b":1\r\n").await;
    let reply = c
        .cmd(&[b"EVAL", b"return redis.acl_check_cmd('nosuch')", b"0"])
        .await;
    assert!(format!("{reply:?}").contains("Invalid command passed to redis.acl_check_cmd()"));
    admin.roundtrip(b"EXISTS n\r\n", b":0\r\n").await;
    s.stop().await;
}

/// `ACL SAVE` writes every user to the ACL file and `ACL LOAD` reads it back; a file with
/// an error loads nothing and says where.
#[tokio::test]
async fn the_acl_file_saves_and_loads_users() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.acl");
    std::fs::write(
        &path,
        "user alice on >a ~* +@all\n\nuser bob on >b ~set* -@all +@set\n",
    )
    .unwrap();
    let s = Server::start(RespConfig {
        acl: AclConfig {
            aclfile: Some(path.clone()),
            ..AclConfig::default()
        },
        ..RespConfig::default()
    })
    .await;
    let mut c = s.connect().await;
    c.roundtrip(b"AUTH bob b\r\nSADD set1 x\r\n", b"+OK\r\n:1\r\n")
        .await;
    c.roundtrip(b"AUTH alice a\r\n", b"+OK\r\n").await;
    c.roundtrip(
        b"ACL SETUSER carol on >c +get ~c:*\r\nACL SAVE\r\n",
        b"+OK\r\n+OK\r\n",
    )
    .await;
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(saved.contains("user carol on #"), "{saved}");
    assert!(!saved.contains(">c"), "no cleartext password: {saved}");
    std::fs::write(&path, "user alice on >a ~* +@all\nuser broken on +nosuch\n").unwrap();
    let err = c.cmd(&[b"ACL", b"LOAD"]).await;
    let Frame::Error(e) = err else {
        panic!("{err:?}")
    };
    let e = String::from_utf8_lossy(&e);
    assert!(
        e.contains(":2: Error in ACL SETUSER modifier '+nosuch'"),
        "{e}"
    );
    assert!(
        e.contains("no change to the previously active ACL rules"),
        "{e}"
    );
    c.roundtrip(b"AUTH carol c\r\n", b"+OK\r\n").await;
    std::fs::write(&path, "user alice on >a ~* +@all\n").unwrap();
    let mut d = s.connect().await;
    d.roundtrip(
        b"ACL LOAD\r\nACL USERS\r\n",
        b"+OK\r\n*2\r\n$5\r\nalice\r\n$7\r\ndefault\r\n",
    )
    .await;
    // Carol is gone from the file: her connection is closed.
    c.expect_eof().await;
    s.stop().await;
}

/// Attack: rules and arguments a hostile client sends the ACL command — binary and huge
/// names, patterns with spaces, unbalanced selectors, absurd counts — each get an error and
/// change nothing; the node keeps serving.
#[tokio::test]
async fn hostile_acl_commands_get_errors_and_change_nothing() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    let before = c.cmd(&[b"ACL", b"LIST"]).await;
    let long = vec![b'x'; 1 << 20];
    for args in [
        &[b"ACL" as &[u8], b"SETUSER", b"a\0b"][..],
        &[b"ACL", b"SETUSER", b"a b"],
        &[b"ACL", b"SETUSER", b"u", b"~a\0b"],
        &[b"ACL", b"SETUSER", b"u", b"(+get", b"~k"],
        &[b"ACL", b"SETUSER", b"u", b"%RWX~k"],
        &[b"ACL", b"SETUSER", b"u", b"#zz"],
        &[b"ACL", b"SETUSER", b"u", b"+get|"],
        &[b"ACL", b"SETUSER", b"u", &long],
        &[b"ACL", b"GENPASS", b"-1"],
        &[b"ACL", b"GENPASS", b"99999999999999999999"],
        &[b"ACL", b"LOG", b"notanumber"],
        &[b"ACL", b"DRYRUN", b"nosuch", b"get", b"k"],
        &[b"ACL", b"DRYRUN", b"default", b"nosuchcommand"],
        &[b"ACL", b"CAT", &long],
        &[b"ACL", b"NOSUCH"],
        &[b"ACL", b"SAVE"],
    ] {
        let reply = c.cmd(args).await;
        assert!(matches!(reply, Frame::Error(_)), "{args:?}: {reply:?}");
    }
    assert_eq!(c.cmd(&[b"ACL", b"LIST"]).await, before);
    c.roundtrip(b"ACL LOG 9223372036854775807\r\n", b"*0\r\n")
        .await;
    let pass = c.cmd(&[b"ACL", b"GENPASS", b"4096"]).await;
    assert!(
        matches!(&pass, Frame::Bulk(b) if b.len() == 1024),
        "{pass:?}"
    );
    c.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    s.stop().await;
}

/// On a cluster node the same rules hold: keys, commands, and the commands a script calls
/// (run over the cluster's script path) are checked as the connection's user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_checks_users_too() {
    let mut cfg = meridian_server::cluster::EmbeddedConfig {
        dcs: 1,
        nodes_per_dc: 1,
        n: 1,
        wan_latency: Duration::ZERO,
        ..meridian_server::cluster::EmbeddedConfig::default()
    };
    cfg.node.resp.users = vec!["user app on >p ~app:* -@all +get +set +eval +auth".into()];
    let c = crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap();
    let mut a = crate::cluster_mode::connect(&c, 0).await;
    a.roundtrip(b"AUTH app p\r\nSET app:1 v\r\n", b"+OK\r\n+OK\r\n")
        .await;
    a.roundtrip(b"SET other v\r\n", NOPERM_KEYS).await;
    a.roundtrip(
        b"DEL app:1\r\n",
        b"-NOPERM this user has no permissions to run the 'del' command\r\n",
    )
    .await;
    let reply = a
        .cmd(&[
            b"EVAL",
            b"return redis.call('del', KEYS[1])",
            b"1",
            b"app:1",
        ])
        .await;
    let text = format!("{reply:?}");
    assert!(
        text.contains("The user executing the script can't run this command or subcommand"),
        "{text}"
    );
    a.roundtrip(b"GET app:1\r\n", b"$1\r\nv\r\n").await;
    c.shutdown().await;
}

/// `CLIENT KILL` by user, id and address closes exactly the connections it names (after
/// they answer what they read), skipping the caller unless `SKIPME no`; Redis's errors for
/// what it cannot name.
#[tokio::test]
async fn client_kill_closes_the_connections_it_names() {
    let s = with_users(&["user w on >w ~* +@all"]).await;
    let mut admin = s.connect().await;
    let mut w1 = s.connect().await;
    let mut w2 = s.connect().await;
    let mut other = s.connect().await;
    w1.roundtrip(b"AUTH w w\r\n", b"+OK\r\n").await;
    w2.roundtrip(b"AUTH w w\r\n", b"+OK\r\n").await;
    admin.roundtrip(b"CLIENT KILL USER w\r\n", b":2\r\n").await;
    w1.expect_eof().await;
    w2.expect_eof().await;
    let Frame::Integer(id) = other.cmd(&[b"CLIENT", b"ID"]).await else {
        panic!("an id")
    };
    let kill = format!("CLIENT KILL ID {id}\r\n");
    admin.roundtrip(kill.as_bytes(), b":1\r\n").await;
    other.expect_eof().await;
    admin
        .roundtrip(b"CLIENT KILL 10.0.0.1:1\r\n", b"-ERR No such client\r\n")
        .await;
    admin
        .roundtrip(
            b"CLIENT KILL USER nosuch\r\n",
            b"-ERR No such user 'nosuch'\r\n",
        )
        .await;
    admin
        .roundtrip(
            b"CLIENT KILL ID 0\r\n",
            b"-ERR client-id should be greater than 0\r\n",
        )
        .await;
    admin
        .roundtrip(b"CLIENT KILL TYPE normal\r\n", b":0\r\n")
        .await;
    admin
        .roundtrip(b"CLIENT KILL TYPE normal SKIPME no\r\n", b":1\r\n")
        .await;
    admin.expect_eof().await;
    s.stop().await;
}

/// An ACL file without a `user default` line leaves the `default` user as configured: its
/// `requirepass` still protects the node after `ACL LOAD` (Redis would make it `nopass`).
#[tokio::test]
async fn acl_load_keeps_the_configured_default_user() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.acl");
    std::fs::write(&path, "user ops on >o ~* &* +@all\n").unwrap();
    let s = Server::start(RespConfig {
        requirepass: Some("rootpass".into()),
        acl: AclConfig {
            aclfile: Some(path.clone()),
            ..AclConfig::default()
        },
        ..RespConfig::default()
    })
    .await;
    let mut c = s.connect().await;
    c.roundtrip(b"AUTH ops o\r\nACL LOAD\r\n", b"+OK\r\n+OK\r\n")
        .await;
    let mut fresh = s.connect().await;
    fresh
        .roundtrip(b"GET k\r\n", b"-NOAUTH Authentication required.\r\n")
        .await;
    fresh
        .roundtrip(b"AUTH rootpass\r\nPING\r\n", b"+OK\r\n+PONG\r\n")
        .await;
    s.stop().await;
}

/// Issue 42: users are replicated with the cluster metadata. On a 3-node cluster a user set
/// on one node logs in and is refused, in Redis's words, on the others; deleting it on
/// another node removes it everywhere and closes its connections there; `ACL LOAD` on a
/// third replaces every node's users. `default` cannot be deleted, and a user that cannot be
/// replicated is refused with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_are_enforced_on_every_node_of_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.acl");
    std::fs::write(&path, "user ops on >o ~* &* +@all\n").unwrap();
    let mut cfg = meridian_server::cluster::EmbeddedConfig {
        dcs: 1,
        nodes_per_dc: 3,
        n: 3,
        wan_latency: Duration::ZERO,
        heartbeat: Duration::from_millis(100),
        ..meridian_server::cluster::EmbeddedConfig::default()
    };
    cfg.node.resp.aclfile = Some(path.clone());
    let c = crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap();
    let node = |i| crate::cluster_mode::connect(&c, i);
    let mut admin0 = node(0).await;
    admin0
        .roundtrip(b"ACL SETUSER alice on >pw ~app:* +get +set\r\n", b"+OK\r\n")
        .await;
    let mut alice1 = node(1).await;
    let mut alice2 = node(2).await;
    for a in [&mut alice1, &mut alice2] {
        a.roundtrip(b"AUTH alice pw\r\nSET app:1 v\r\n", b"+OK\r\n+OK\r\n")
            .await;
        a.roundtrip(b"SET other v\r\n", NOPERM_KEYS).await;
        a.roundtrip(
            b"DEL app:1\r\n",
            b"-NOPERM this user has no permissions to run the 'del' command\r\n",
        )
        .await;
    }
    // The first change started from node 0's users: its configured `ops` is kept.
    let mut admin2 = node(2).await;
    admin2
        .roundtrip(
            b"ACL USERS\r\n",
            b"*3\r\n$5\r\nalice\r\n$7\r\ndefault\r\n$3\r\nops\r\n",
        )
        .await;

    let mut admin1 = node(1).await;
    admin1
        .roundtrip(b"ACL DELUSER alice nosuch\r\n", b":1\r\n")
        .await;
    alice2.expect_eof().await;
    alice1.expect_eof().await;
    let mut again = node(0).await;
    again
        .roundtrip(
            b"AUTH alice pw\r\n",
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
        )
        .await;
    admin1
        .roundtrip(
            b"ACL DELUSER default\r\n",
            b"-ERR The 'default' user cannot be removed\r\n",
        )
        .await;
    admin1.roundtrip(b"ACL DELUSER nosuch\r\n", b":0\r\n").await;
    let refused = admin1.cmd(&[b"ACL", b"SETUSER", b"caf\xe9", b"on"]).await;
    assert!(
        format!("{refused:?}").contains("cannot be replicated to the cluster"),
        "{refused:?}"
    );
    admin1
        .roundtrip(
            b"ACL SETUSER u +nosuch\r\n",
            b"-ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name \
              in ACL\r\n",
        )
        .await;

    // Attack: a user past the cluster's bounds is valid here but refused by the claimant;
    // the reply says why and no node changed.
    let huge = format!("~{}", "k".repeat(70 * 1024));
    let refused = admin1
        .cmd(&[b"ACL", b"SETUSER", b"big", b"on", huge.as_bytes()])
        .await;
    let text = format!("{refused:?}");
    assert!(
        text.contains("ACL SETUSER was not applied") && text.contains("more than 65536"),
        "{text}"
    );
    admin0
        .roundtrip(b"ACL USERS\r\n", b"*2\r\n$7\r\ndefault\r\n$3\r\nops\r\n")
        .await;

    // ACL LOAD on node 2 replaces the users of every node: `ops` is gone, its connection on
    // node 0 closed.
    let mut ops0 = node(0).await;
    ops0.roundtrip(b"AUTH ops o\r\n", b"+OK\r\n").await;
    std::fs::write(&path, "user bob on >b ~b:* +@all\n").unwrap();
    admin2.roundtrip(b"ACL LOAD\r\n", b"+OK\r\n").await;
    ops0.expect_eof().await;
    admin0
        .roundtrip(b"ACL USERS\r\n", b"*2\r\n$3\r\nbob\r\n$7\r\ndefault\r\n")
        .await;
    let mut bob1 = node(1).await;
    bob1.roundtrip(b"AUTH bob b\r\nSET b:1 x\r\n", b"+OK\r\n+OK\r\n")
        .await;
    bob1.roundtrip(b"SET c:1 x\r\n", NOPERM_KEYS).await;
    c.shutdown().await;
}
