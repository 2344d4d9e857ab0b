//! Numbered databases in cluster mode: `SELECT n` (n in `1..16`) puts the connection in the
//! bucket `db<n>`, as Valkey 9 serves numbered databases in cluster mode where Redis Cluster
//! refuses them.
//!
//! **What a database is.** Database 0 is the cluster's keyspace as every other connection
//! sees it: bare keys in the `default` bucket, `bucket:key` in named buckets. Database `n > 0`
//! is the bucket `db<n>`: every key a connection names after `SELECT n` is a key of that
//! bucket (`foo` is stored as `db3:foo`, `x:foo` as `db3:x:foo`), so databases never share a
//! key. The first `SELECT n` anywhere registers `db<n>` with the `default` bucket's properties
//! (a timeline bucket unless the cluster was configured otherwise); it is then a bucket like
//! any other (`GET /buckets`, `PUT /buckets/db<n>` to change it).
//!
//! **Guarantees.** A key command's keys are rewritten before it runs or is queued (so `MULTI`,
//! `WATCH` and `EXEC` see the database's keys), after the `-MOVED` check, which judges the key
//! the client sent — the slot its cluster client computed. `SCAN`, `KEYS` and `DBSIZE` list
//! the selected database's keys only, as the client named them (database 0 leaves out the
//! `db<n>` buckets); `FLUSHDB` truncates the selected database only (database 0: every bucket
//! but the `db<n>` ones), `FLUSHALL` every database.
//!
//! **Bounds.** A key of database `n` hashes, inside the cluster, by its stored name, so its
//! records may live on other nodes than the slot the client routed it by: the node that
//! receives it coordinates it (one more hop than database 0's keys). `CLUSTER
//! COUNTKEYSINSLOT`/`GETKEYSINSLOT` count database 0's keys. `MOVE` and `SWAPDB` are refused:
//! a key cannot change buckets, and buckets with their own replicas cannot be swapped
//! atomically.

use crate::cluster_backend::ClusterBackend;
use bytes::Bytes;
use meridian_cluster::bucket_and_key;
use meridian_redis::{Args, Cmd, OwnedArgs};
use meridian_replication::DEFAULT_BUCKET_NAME;
use std::borrow::Cow;

/// Redis's `databases` default: `SELECT` takes `0..DATABASES`.
pub(crate) const DATABASES: u8 = 16;

/// Redis's answer to a database index outside `0..DATABASES`.
pub(crate) const OUT_OF_RANGE: &str = "ERR DB index is out of range";

/// `MOVE` in cluster mode.
pub(crate) const MOVE_REFUSED: &str = "ERR MOVE is not allowed in cluster mode: each database \
    is a bucket (db<n>) and a key cannot change buckets; copy it with GET/SET (or DUMP/RESTORE) \
    in the other database, then DEL it";

/// `SWAPDB` in cluster mode.
pub(crate) const SWAPDB_REFUSED: &str = "ERR SWAPDB is not allowed in cluster mode: each \
    database is a bucket (db<n>) with its own replicas, and two buckets cannot be swapped \
    atomically across the cluster";

/// A connection's selected database.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Db(pub u8);

impl Db {
    /// The database `SELECT`'s argument names, or Redis's error.
    pub(crate) fn parse(arg: &[u8]) -> Result<Db, &'static str> {
        let n: i64 = std::str::from_utf8(arg)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("ERR value is not an integer or out of range")?;
        u8::try_from(n)
            .ok()
            .filter(|&n| n < DATABASES)
            .map(Db)
            .ok_or(OUT_OF_RANGE)
    }

    /// The bucket of database `n > 0` (`db<n>`); `None` for database 0.
    pub(crate) fn bucket(self) -> Option<String> {
        (self.0 != 0).then(|| format!("db{}", self.0))
    }

    /// Which stored keys are this database's, and their names as its clients wrote them.
    pub(crate) fn keys(self) -> KeysOf {
        KeysOf {
            prefix: self.bucket().map(|b| [b.as_bytes(), b":"].concat()),
        }
    }

    /// `args` with every key of `cmd` stored under this database's bucket; `None` when nothing
    /// changes (database 0, or a keyless command).
    pub(crate) fn rewrite(self, cmd: Cmd, args: Args<'_>) -> Option<OwnedArgs> {
        let bucket = self.bucket()?;
        let mut is_key = vec![false; args.len()];
        for i in cmd.spec().key_positions(&args) {
            is_key[i] = true;
        }
        if !is_key.contains(&true) {
            return None;
        }
        let parts: Vec<Cow<'_, [u8]>> = (0..args.len())
            .map(|i| match is_key[i] {
                true => Cow::Owned([bucket.as_bytes(), b":", args.get(i)].concat()),
                false => Cow::Borrowed(args.get(i)),
            })
            .collect();
        Some(OwnedArgs::from_slices(parts.iter().map(|p| p.as_ref())))
    }
}

/// The stored keys of one database (see [`Db::keys`]).
pub(crate) struct KeysOf {
    /// `db<n>:` for database `n > 0`.
    prefix: Option<Vec<u8>>,
}

impl KeysOf {
    /// The client's name of stored key `stored` if it belongs to the database: database
    /// `n`'s keys without their `db<n>:` prefix; database 0's every key not in a `db<n>`
    /// bucket.
    pub(crate) fn client_key<'a>(&self, stored: &'a [u8]) -> Option<&'a [u8]> {
        match &self.prefix {
            Some(p) => stored.strip_prefix(p.as_slice()),
            None => (!is_database_bucket(bucket_and_key(stored).0)).then_some(stored),
        }
    }

    /// [`KeysOf::client_key`] of a listed key, without copying it.
    pub(crate) fn client_bytes(&self, stored: Bytes) -> Option<Bytes> {
        let len = self.client_key(&stored)?.len();
        Some(stored.slice(stored.len() - len..))
    }
}

/// Whether bucket `name` is a numbered database's (`db1` … `db15`).
pub(crate) fn is_database_bucket(name: &[u8]) -> bool {
    let Some(n) = name.strip_prefix(b"db") else {
        return false;
    };
    !n.is_empty()
        && !n.starts_with(b"0")
        && std::str::from_utf8(n)
            .ok()
            .and_then(|s| s.parse::<u8>().ok())
            .is_some_and(|n| (1..DATABASES).contains(&n))
}

/// `SELECT n` in cluster mode: registers `db<n>` (with the `default` bucket's properties) if
/// no bucket of that name exists yet, and returns the database.
pub(crate) async fn select(c: &ClusterBackend, db: Db) -> Result<Db, String> {
    let Some(name) = db.bucket() else {
        return Ok(db);
    };
    let buckets = c.node.buckets();
    if buckets.get(&name).is_none() {
        let props = *buckets
            .get(DEFAULT_BUCKET_NAME)
            .expect("every registry has a default bucket");
        if let Err(e) = c.node.set_bucket(&name, props).await {
            return Err(format!("ERR SELECT {}: creating bucket {name}: {e}", db.0));
        }
    }
    Ok(db)
}

/// The buckets `FLUSHDB` truncates in database `db`: its bucket, or for database 0 every
/// registered bucket but the numbered databases' (keys of unregistered buckets follow the
/// `default` bucket's truncation).
pub(crate) fn flushdb_buckets(c: &ClusterBackend, db: Db) -> Vec<String> {
    match db.bucket() {
        Some(name) => vec![name],
        None => c
            .node
            .buckets()
            .names()
            .filter(|n| !is_database_bucket(n.as_bytes()))
            .map(str::to_owned)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_takes_redis_database_indexes() {
        assert_eq!(Db::parse(b"0"), Ok(Db(0)));
        assert_eq!(Db::parse(b"15"), Ok(Db(15)));
        assert_eq!(Db::parse(b"16"), Err(OUT_OF_RANGE));
        assert_eq!(Db::parse(b"-1"), Err(OUT_OF_RANGE));
        assert_eq!(
            Db::parse(b"99999999999999999999"),
            Err("ERR value is not an integer or out of range")
        );
        assert_eq!(
            Db::parse(b"x"),
            Err("ERR value is not an integer or out of range")
        );
    }

    #[test]
    fn database_buckets_are_db1_to_db15_only() {
        for n in 1..16 {
            assert!(is_database_bucket(format!("db{n}").as_bytes()));
        }
        for name in ["db0", "db16", "db01", "db", "dbx", "default", "db1x"] {
            assert!(!is_database_bucket(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn a_stored_key_belongs_to_one_database_and_reads_back_as_written() {
        let key = |db: u8, stored: &'static [u8]| Db(db).keys().client_key(stored);
        assert_eq!(key(3, b"db3:foo"), Some(&b"foo"[..]));
        assert_eq!(key(3, b"db3:x:foo"), Some(&b"x:foo"[..]));
        assert_eq!(key(3, b"db13:foo"), None);
        assert_eq!(key(13, b"db13:foo"), Some(&b"foo"[..]));
        assert_eq!(key(1, b"db13:foo"), None);
        assert_eq!(key(3, b"foo"), None);
        assert_eq!(key(3, b"db3"), None);
        assert_eq!(key(0, b"foo"), Some(&b"foo"[..]));
        assert_eq!(key(0, b"carts:c1"), Some(&b"carts:c1"[..]));
        assert_eq!(key(0, b"db3:foo"), None);
        assert_eq!(key(0, b"db16:foo"), Some(&b"db16:foo"[..]));
    }

    fn rewritten(db: u8, parts: &[&str]) -> Option<Vec<String>> {
        let args = OwnedArgs::from_slices(parts.iter().map(|p| p.as_bytes()));
        let cmd = Cmd::lookup(parts[0].as_bytes()).unwrap();
        let out = Db(db).rewrite(cmd, args.get())?;
        let a = out.get();
        Some(
            (0..a.len())
                .map(|i| String::from_utf8_lossy(a.get(i)).into_owned())
                .collect(),
        )
    }

    #[test]
    fn only_the_keys_of_a_command_are_rewritten() {
        assert_eq!(rewritten(0, &["GET", "k"]), None);
        assert_eq!(rewritten(2, &["PING"]), None);
        assert_eq!(
            rewritten(2, &["SET", "k", "v", "EX", "10"]).unwrap(),
            ["SET", "db2:k", "v", "EX", "10"]
        );
        assert_eq!(
            rewritten(2, &["MSET", "a", "1", "b", "2"]).unwrap(),
            ["MSET", "db2:a", "1", "db2:b", "2"]
        );
        assert_eq!(
            rewritten(11, &["DEL", "a", "b"]).unwrap(),
            ["DEL", "db11:a", "db11:b"]
        );
    }
}
