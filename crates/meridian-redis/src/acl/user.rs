//! An ACL user: enabled or not, its passwords (SHA-256 hashes, as Redis keeps them, or
//! `nopass`), its root selector and any `(…)` selectors.
//!
//! Guarantees: [`User::with_rules`] applies a whole rule list to a copy and returns it only
//! when every rule is valid, so a failed `ACL SETUSER` changes nothing; no cleartext
//! password is kept; [`User::describe`] is the rule list `ACL LIST` prints, and reading it
//! back gives the same user.

use super::rule_error::RuleError;
use super::selector::{Selector, has_spaces};
use sha2::{Digest, Sha256};

/// The hex SHA-256 of a password, as `ACL GETUSER` shows it and `#<hash>` gives it.
pub fn hash_password(password: &[u8]) -> String {
    hex::encode(Sha256::digest(password))
}

fn valid_hash(h: &[u8]) -> bool {
    h.len() == 64
        && h.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// A user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    name: Vec<u8>,
    enabled: bool,
    nopass: bool,
    /// Hex SHA-256 hashes, in the order added.
    passwords: Vec<String>,
    /// The root selector, then each `(…)` selector.
    selectors: Vec<Selector>,
    /// Whether a reset gives the root selector every channel (`acl-pubsub-default`).
    all_channels_default: bool,
}

impl User {
    /// A new user: off, no password, allowed nothing (channels per `all_channels_default`,
    /// Redis's `acl-pubsub-default`).
    pub fn new(name: &[u8], all_channels_default: bool) -> User {
        User {
            name: name.to_vec(),
            enabled: false,
            nopass: false,
            passwords: Vec::new(),
            selectors: vec![Selector::new(all_channels_default)],
            all_channels_default,
        }
    }

    /// Redis's `default` user: on, `nopass`, every command, key and channel.
    pub fn default_user() -> User {
        User::new(b"default", false)
            .with_rules(["on", "nopass", "~*", "&*", "+@all"].map(str::as_bytes))
            .expect("valid rules")
    }

    /// Whether `name` may name a user (no spaces or NULs).
    pub fn valid_name(name: &[u8]) -> bool {
        !has_spaces(name)
    }

    /// The user's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Whether it can be authenticated as.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether any password is accepted.
    pub fn nopass(&self) -> bool {
        self.nopass
    }

    /// The password hashes.
    pub fn passwords(&self) -> &[String] {
        &self.passwords
    }

    /// The root selector, then the others.
    pub fn selectors(&self) -> &[Selector] {
        &self.selectors
    }

    /// Whether one selector allows everything (the check is skipped).
    pub fn unrestricted(&self) -> bool {
        self.selectors.iter().any(Selector::unrestricted)
    }

    /// Whether `password` authenticates this user (on, and `nopass` or a matching hash,
    /// compared in constant time).
    pub fn accepts(&self, password: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let given = hash_password(password);
        self.passwords.iter().fold(false, |ok, h| {
            ok | constant_time_eq(h.as_bytes(), given.as_bytes())
        })
    }

    /// A copy with `rules` applied in order (`(…)` groups split over several arguments are
    /// joined first), or Redis's error naming the first refused rule and why.
    pub fn with_rules<'a>(
        &self,
        rules: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<User, String> {
        let mut user = self.clone();
        for rule in merge_selector_args(rules)? {
            user.apply(&rule).map_err(|e| {
                format!(
                    "Error in ACL SETUSER modifier '{}': {e}",
                    String::from_utf8_lossy(&rule)
                )
            })?;
        }
        Ok(user)
    }

    fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |s: &str| op.eq_ignore_ascii_case(s.as_bytes());
        if op.is_empty() {
        } else if is("on") {
            self.enabled = true;
        } else if is("off") {
            self.enabled = false;
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if is("sanitize-payload") || is("skip-sanitize-payload") {
            // RESTORE payloads are always validated here: both are accepted and change
            // nothing.
        } else if let Some(pass) = op.strip_prefix(b">") {
            self.add_password(hash_password(pass));
        } else if let Some(hash) = op.strip_prefix(b"#") {
            if !valid_hash(hash) {
                return Err(RuleError::BadHash);
            }
            self.add_password(String::from_utf8_lossy(hash).into_owned());
        } else if let Some(pass) = op.strip_prefix(b"<") {
            self.remove_password(&hash_password(pass))?;
        } else if let Some(hash) = op.strip_prefix(b"!") {
            if !valid_hash(hash) {
                return Err(RuleError::BadHash);
            }
            self.remove_password(&String::from_utf8_lossy(hash))?;
        } else if op.first() == Some(&b'(') && op.last() == Some(&b')') {
            let mut s = Selector::new(self.all_channels_default);
            for rule in op[1..op.len() - 1].split(u8::is_ascii_whitespace) {
                if !rule.is_empty() {
                    s.apply(rule)?;
                }
            }
            self.selectors.push(s);
        } else if is("clearselectors") {
            self.selectors.truncate(1);
        } else if is("reset") {
            self.nopass = false;
            self.passwords.clear();
            self.enabled = false;
            self.selectors = vec![Selector::new(self.all_channels_default)];
        } else {
            self.selectors[0].apply(op)?;
        }
        Ok(())
    }

    fn add_password(&mut self, hash: String) {
        if !self.passwords.contains(&hash) {
            self.passwords.push(hash);
        }
        self.nopass = false;
    }

    fn remove_password(&mut self, hash: &str) -> Result<(), RuleError> {
        let at = self
            .passwords
            .iter()
            .position(|h| h == hash)
            .ok_or(RuleError::NoSuchPassword)?;
        self.passwords.remove(at);
        Ok(())
    }

    /// The user's flags as `ACL GETUSER` lists them.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        flags
    }

    /// The rules that rebuild this user (`ACL LIST` without `user <name>`).
    pub fn describe(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for f in self.flags() {
            out.extend_from_slice(f.as_bytes());
            out.push(b' ');
        }
        for h in &self.passwords {
            out.push(b'#');
            out.extend_from_slice(h.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&self.selectors[0].describe());
        for s in &self.selectors[1..] {
            out.extend_from_slice(b" (");
            out.extend_from_slice(&s.describe());
            out.push(b')');
        }
        out
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Joins a `(…)` selector given over several arguments (`(+get`, `~k)`) into one rule, as
/// Redis's `ACLMergeSelectorArguments`; an unclosed one is refused with Redis's error.
fn merge_selector_args<'a>(
    rules: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut open: Option<Vec<u8>> = None;
    let mut opened_at: &[u8] = b"";
    for rule in rules {
        match &mut open {
            Some(sel) => {
                sel.push(b' ');
                sel.extend_from_slice(rule);
                if rule.last() == Some(&b')') {
                    out.push(open.take().expect("open"));
                }
            }
            None if rule.first() == Some(&b'(') && rule.last() != Some(&b')') => {
                open = Some(rule.to_vec());
                opened_at = rule;
            }
            None => out.push(rule.to_vec()),
        }
    }
    match open {
        Some(_) => Err(format!(
            "Unmatched parenthesis in acl selector starting at '{}'.",
            String::from_utf8_lossy(opened_at)
        )),
        None => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(rules: &str) -> User {
        User::new(b"u", false)
            .with_rules(rules.split(' ').map(str::as_bytes))
            .unwrap()
    }

    #[test]
    fn passwords_are_kept_hashed_and_checked() {
        let u = user("on >passwd1 >passwd2");
        assert!(u.accepts(b"passwd1") && u.accepts(b"passwd2"));
        assert!(!u.accepts(b"passwd3"));
        assert!(!u.describe().windows(7).any(|w| w == b"passwd1"));
        let u = u.with_rules([b"<passwd1" as &[u8]]).unwrap();
        assert!(!u.accepts(b"passwd1"));
        assert!(
            u.with_rules([b"<nosuch" as &[u8]])
                .unwrap_err()
                .ends_with("does not exist")
        );
        let hash = hash_password(b"passwd4");
        let u = u.with_rules([format!("#{hash}").as_bytes()]).unwrap();
        assert!(u.accepts(b"passwd4"));
        assert!(
            u.with_rules([format!("#{}", &hash[1..]).as_bytes()])
                .unwrap_err()
                .contains("exactly 64 characters")
        );
        assert!(!user("off nopass").accepts(b"x"));
        assert!(user("on nopass").accepts(b"anything"));
    }

    #[test]
    fn a_failed_rule_list_changes_nothing() {
        let u = user("on >p ~k:* +get");
        let err = u
            .with_rules(["+set", "+nosuch"].map(str::as_bytes))
            .unwrap_err();
        assert_eq!(
            err,
            "Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"
        );
    }

    #[test]
    fn description_rebuilds_the_user() {
        let u = user("on nopass resetchannels &foo +@all");
        assert_eq!(
            String::from_utf8(u.describe()).unwrap(),
            "on nopass resetchannels &foo +@all"
        );
        let u = user(
            "on #0000000000000000000000000000000000000000000000000000000000000000 ~a %R~b +get (~c +set)",
        );
        let text = String::from_utf8(u.describe()).unwrap();
        let back = User::new(b"u", false)
            .with_rules(text.split(' ').map(str::as_bytes))
            .unwrap();
        assert_eq!(back, u);
        assert_eq!(User::default_user().describe(), b"on nopass ~* &* +@all");
    }

    #[test]
    fn selectors_may_span_arguments() {
        let u = user("on nopass (+get ~k1) (+set ~k2)");
        assert_eq!(u.selectors().len(), 3);
        let err = User::new(b"u", false)
            .with_rules(["(+get", "~k"].map(str::as_bytes))
            .unwrap_err();
        assert_eq!(
            err,
            "Unmatched parenthesis in acl selector starting at '(+get'."
        );
    }
}
