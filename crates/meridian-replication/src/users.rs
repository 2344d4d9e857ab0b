//! ACL users replicated with the cluster metadata (issue 42: users enforced on every node of
//! a cluster). Real Redis Cluster keeps ACLs per node; Meridian carries them in
//! [`ClusterMeta::acl`](crate::ClusterMeta::acl), so `ACL SETUSER` on one node holds on all.
//!
//! This crate does not know Redis's rules (it must not depend on `meridian-redis`): a user is
//! opaque text, its name and its rules as `ACL LIST` prints them (passwords as `#<sha256>`,
//! never clear text). The front end turns rules into users when it adopts a document, and
//! refuses a table it cannot read whole.
//!
//! - [`UserTable`]: user name → rules, with a `Debug` that shows names only, so no password
//!   hash reaches a log through `{:?}` of a document or a change.
//! - [`UsersChange`]: what `ACL SETUSER`, `ACL DELUSER` and `ACL LOAD` propose; the claimant
//!   applies it with [`UserTable::apply`].
//!
//! Guarantees: a table the claimant publishes has at most [`MAX_USERS`] users, names of at
//! most [`MAX_NAME_LEN`] bytes without whitespace or NUL, rules of at most
//! [`MAX_RULES_LEN`] bytes on one line, [`MAX_TABLE_BYTES`] in all, and always the `default`
//! user. A change from a hostile or buggy peer that breaks any of these is refused whole.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most users a replicated table holds: the table rides in every metadata version.
pub const MAX_USERS: usize = 1024;
/// The longest user name, in bytes.
pub const MAX_NAME_LEN: usize = 512;
/// The longest rules of one user, in bytes (a user with many key patterns, selectors and
/// single-command rules stays well below).
pub const MAX_RULES_LEN: usize = 64 * 1024;
/// The most bytes of names and rules a table holds in all: the document is pushed whole to
/// every member on each change and cloned by readers.
pub const MAX_TABLE_BYTES: usize = 1 << 20;
/// The user every table keeps (Redis: "The 'default' user cannot be removed").
pub const DEFAULT_USER: &str = "default";

/// ACL users by name: each user's rules as `ACL LIST` prints them after `user <name> `.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UserTable(BTreeMap<String, String>);

impl std::fmt::Debug for UserTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserTable")
            .field("users", &self.0.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl From<BTreeMap<String, String>> for UserTable {
    fn from(users: BTreeMap<String, String>) -> Self {
        UserTable(users)
    }
}

/// A change to the replicated users.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum UsersChange {
    /// Create or replace one user (`ACL SETUSER`: the proposer sends the whole resulting
    /// user, since only it can read rules).
    Set {
        /// The user's name.
        name: String,
        /// Its rules, as `ACL LIST` prints them.
        rules: String,
    },
    /// Remove users (`ACL DELUSER`, one change for all its names); names absent are skipped,
    /// as Redis counts only users it deleted.
    Delete {
        /// The users' names (never `default`).
        names: Vec<String>,
    },
    /// Replace every user (`ACL LOAD`); the table must keep the `default` user.
    Replace(UserTable),
}

impl std::fmt::Debug for UsersChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UsersChange::Set { name, .. } => f.debug_struct("Set").field("name", name).finish(),
            UsersChange::Delete { names } => {
                f.debug_struct("Delete").field("names", names).finish()
            }
            UsersChange::Replace(t) => f.debug_tuple("Replace").field(t).finish(),
        }
    }
}

impl UserTable {
    /// The users, by name.
    pub fn users(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// The table after `change`, checked whole.
    ///
    /// # Errors
    /// Why the change is refused: deleting `default`, a table without it, or a name, rules
    /// or table past its bound.
    pub fn apply(&self, change: &UsersChange) -> Result<UserTable, String> {
        let mut next = self.clone();
        match change {
            UsersChange::Set { name, rules } => {
                next.0.insert(name.clone(), rules.clone());
            }
            UsersChange::Delete { names } => {
                if names.iter().any(|n| n == DEFAULT_USER) {
                    return Err("The 'default' user cannot be removed".into());
                }
                if names.len() > MAX_USERS {
                    return Err(format!("a deletion names at most {MAX_USERS} users"));
                }
                for n in names {
                    next.0.remove(n);
                }
            }
            UsersChange::Replace(table) => next = table.clone(),
        }
        next.validate()?;
        Ok(next)
    }

    /// Checks the bounds of the module docs.
    ///
    /// # Errors
    /// The first bound broken.
    pub fn validate(&self) -> Result<(), String> {
        if self.0.len() > MAX_USERS {
            return Err(format!("at most {MAX_USERS} users, not {}", self.0.len()));
        }
        if !self.0.contains_key(DEFAULT_USER) {
            return Err("the users must keep the 'default' user".into());
        }
        let mut total = 0usize;
        for (name, rules) in &self.0 {
            check_name(name)?;
            check_rules(name, rules)?;
            total += name.len() + rules.len();
        }
        if total > MAX_TABLE_BYTES {
            return Err(format!(
                "the users' names and rules take {total} bytes, more than {MAX_TABLE_BYTES}"
            ));
        }
        Ok(())
    }
}

/// A name Redis accepts (no whitespace or NUL), within [`MAX_NAME_LEN`].
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!(
            "a user name has 1 to {MAX_NAME_LEN} bytes, not {}",
            name.len()
        ));
    }
    if name.bytes().any(|b| b.is_ascii_whitespace() || b == 0) {
        return Err("Usernames can't contain spaces or null characters".into());
    }
    Ok(())
}

/// Rules on one line (an ACL file's form), without NUL, within [`MAX_RULES_LEN`].
fn check_rules(name: &str, rules: &str) -> Result<(), String> {
    if rules.len() > MAX_RULES_LEN {
        return Err(format!(
            "the rules of user '{name}' take {} bytes, more than {MAX_RULES_LEN}",
            rules.len()
        ));
    }
    if rules.bytes().any(|b| matches!(b, b'\n' | b'\r' | 0)) {
        return Err(format!(
            "the rules of user '{name}' contain a line break or NUL"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(users: &[(&str, &str)]) -> UserTable {
        UserTable(
            users
                .iter()
                .map(|(n, r)| (n.to_string(), r.to_string()))
                .collect(),
        )
    }

    fn set(name: &str, rules: &str) -> UsersChange {
        UsersChange::Set {
            name: name.into(),
            rules: rules.into(),
        }
    }

    #[test]
    fn set_delete_and_replace_change_the_table() {
        let t = table(&[("default", "on nopass ~* &* +@all")]);
        let t = t.apply(&set("alice", "on #ab ~app:* +get")).unwrap();
        assert_eq!(t.users().len(), 2);
        let t = t
            .apply(&UsersChange::Delete {
                names: vec!["alice".into(), "nosuch".into()],
            })
            .unwrap();
        assert_eq!(t.users().keys().collect::<Vec<_>>(), ["default"]);
        let loaded = table(&[("default", "off"), ("bob", "on")]);
        assert_eq!(
            t.apply(&UsersChange::Replace(loaded.clone())).unwrap(),
            loaded
        );
    }

    #[test]
    fn the_default_user_stays() {
        let t = table(&[("default", "on"), ("a", "on")]);
        let err = t
            .apply(&UsersChange::Delete {
                names: vec!["a".into(), "default".into()],
            })
            .unwrap_err();
        assert_eq!(err, "The 'default' user cannot be removed");
        let err = t
            .apply(&UsersChange::Replace(table(&[("a", "on")])))
            .unwrap_err();
        assert!(err.contains("'default'"), "{err}");
    }

    /// Attack: a peer proposing names, rules or tables past their bounds is refused, and
    /// the table is unchanged.
    #[test]
    fn hostile_sizes_and_names_are_refused() {
        let t = table(&[("default", "on")]);
        for bad in [
            set("", "on"),
            set("a b", "on"),
            set("a\0", "on"),
            set(&"n".repeat(MAX_NAME_LEN + 1), "on"),
            set("a", &"x".repeat(MAX_RULES_LEN + 1)),
            set("a", "on\nuser evil on nopass +@all"),
        ] {
            assert!(t.apply(&bad).is_err(), "{bad:?}");
        }
        let many: BTreeMap<String, String> = (0..=MAX_USERS)
            .map(|i| (format!("u{i}"), "on".to_string()))
            .chain([("default".to_string(), "on".to_string())])
            .collect();
        let err = t.apply(&UsersChange::Replace(many.into())).unwrap_err();
        assert!(err.contains("at most"), "{err}");
        let big: BTreeMap<String, String> = (0..20)
            .map(|i| (format!("u{i}"), "x".repeat(MAX_RULES_LEN)))
            .chain([("default".to_string(), "on".to_string())])
            .collect();
        let err = t.apply(&UsersChange::Replace(big.into())).unwrap_err();
        assert!(err.contains("bytes"), "{err}");
        let names = vec!["x".to_string(); MAX_USERS + 1];
        assert!(t.apply(&UsersChange::Delete { names }).is_err());
    }

    #[test]
    fn debug_shows_names_never_rules() {
        let t = table(&[("default", "on #5e884898da28047151d0e56f8dc6292773603d0d")]);
        let change = UsersChange::Replace(t.clone());
        let shown = format!("{t:?} {change:?} {:?}", set("a", "#secret"));
        assert!(
            !shown.contains("5e8848") && !shown.contains("secret"),
            "{shown}"
        );
        assert!(shown.contains("default"), "{shown}");
    }
}
