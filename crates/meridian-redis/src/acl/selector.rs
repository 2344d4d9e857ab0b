//! One set of ACL permissions: which commands (a bitmap over the [`Universe`], plus
//! allowed first arguments of otherwise denied commands, `+select|0`), which keys (glob
//! patterns, each for reading, writing or both), which Pub/Sub channels.
//!
//! Guarantees: [`Selector::apply`] changes the selector as Redis 7.0's `ACLSetSelector`
//! does, or leaves it unchanged and says why; [`Selector::describe_commands`] gives rules
//! that rebuild exactly the same command bitmap (checked, as Redis checks it), starting
//! with `+@all` when the selector may run commands added later, else `-@all`.

use super::rule_error::RuleError;
use super::universe::{CmdId, Universe, WORDS};
use crate::value::glob_match;
use std::collections::BTreeMap;

/// A key pattern and the access it grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    /// The glob pattern.
    pub pattern: Vec<u8>,
    /// Whether it grants reading (`~` or `%R~`).
    pub read: bool,
    /// Whether it grants writing (`~` or `%W~`).
    pub write: bool,
}

impl KeyPattern {
    /// The rule that adds it (`~p`, `%R~p`, `%W~p`).
    fn rule(&self) -> Vec<u8> {
        let prefix: &[u8] = match (self.read, self.write) {
            (true, false) => b"%R~",
            (false, true) => b"%W~",
            _ => b"~",
        };
        [prefix, &self.pattern].concat()
    }
}

/// A selector: the permissions a user's root rules, or one `(…)` group, grant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    allowed: [u64; WORDS],
    /// Set by `+@all` (and only it): commands added later are allowed too.
    future: bool,
    /// Every command allowed (no bit cleared since `+@all`): the check skips the bitmap.
    all_commands: bool,
    /// Allowed first arguments of otherwise denied commands (`+select|0`).
    first_args: BTreeMap<CmdId, Vec<Vec<u8>>>,
    all_keys: bool,
    patterns: Vec<KeyPattern>,
    all_channels: bool,
    channels: Vec<Vec<u8>>,
}

/// Whether `s` holds a space or a NUL (refused in names and patterns, as Redis does).
pub(crate) fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|&b| b.is_ascii_whitespace() || b == 0)
}

impl Selector {
    /// A selector allowed nothing; `all_channels` as `acl-pubsub-default` says.
    pub fn new(all_channels: bool) -> Self {
        Selector {
            all_channels,
            ..Selector::default()
        }
    }

    /// Whether it allows every command, key and channel (the check can be skipped).
    pub fn unrestricted(&self) -> bool {
        self.all_commands && self.all_keys && self.all_channels
    }

    /// Whether it allows every channel.
    pub fn all_channels(&self) -> bool {
        self.all_channels
    }

    /// The channel patterns it allows (when not every channel).
    pub fn channels(&self) -> &[Vec<u8>] {
        &self.channels
    }

    /// Applies one rule.
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |s: &str| op.eq_ignore_ascii_case(s.as_bytes());
        if is("allkeys") || op == b"~*" {
            self.all_keys = true;
            self.patterns.clear();
        } else if is("resetkeys") {
            self.all_keys = false;
            self.patterns.clear();
        } else if is("allchannels") || op == b"&*" {
            self.all_channels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.all_channels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.allowed = [u64::MAX; WORDS];
            self.future = true;
            self.all_commands = true;
            self.first_args.clear();
        } else if is("nocommands") || is("-@all") {
            self.allowed = [0; WORDS];
            self.future = false;
            self.all_commands = false;
            self.first_args.clear();
        } else if op.first() == Some(&b'~') || op.first() == Some(&b'%') {
            self.add_key_pattern(op)?;
        } else if let Some(pattern) = op.strip_prefix(b"&") {
            if self.all_channels {
                return Err(RuleError::ChannelAfterAll);
            }
            if has_spaces(pattern) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|c| c == pattern) {
                self.channels.push(pattern.to_vec());
            }
        } else if let Some(cat) = op.strip_prefix(b"+@") {
            self.set_category(cat, true)?;
        } else if let Some(cat) = op.strip_prefix(b"-@") {
            self.set_category(cat, false)?;
        } else if let Some(name) = op.strip_prefix(b"+") {
            self.allow_command(name)?;
        } else if let Some(name) = op.strip_prefix(b"-") {
            let id = lookup(name)?;
            self.change(id, false);
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.all_keys {
            return Err(RuleError::KeyAfterAll);
        }
        let (read, write, pattern) = if let Some(p) = op.strip_prefix(b"~") {
            (true, true, p)
        } else {
            let (mut read, mut write) = (false, false);
            let mut at = 1;
            loop {
                match op.get(at).map(u8::to_ascii_uppercase) {
                    Some(b'R') if !read => read = true,
                    Some(b'W') if !write => write = true,
                    Some(b'~') => break,
                    _ => return Err(RuleError::Syntax),
                }
                at += 1;
            }
            (read, write, &op[at + 1..])
        };
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        match self.patterns.iter_mut().find(|p| p.pattern == pattern) {
            Some(p) => {
                p.read |= read;
                p.write |= write;
            }
            None => self.patterns.push(KeyPattern {
                pattern: pattern.to_vec(),
                read,
                write,
            }),
        }
        self.all_keys = false;
        Ok(())
    }

    /// `+name`, `+container|sub`, or `+command|first-arg`.
    fn allow_command(&mut self, name: &[u8]) -> Result<(), RuleError> {
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let id = lookup(name)?;
            self.change(id, true);
            return Ok(());
        };
        let u = Universe::get();
        let id = lookup(&name[..bar])?;
        if u.entry(id).parent.is_some() {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        let first = &name[bar + 1..];
        if first.is_empty() {
            return Err(RuleError::Syntax);
        }
        if u.entry(id).subs.start != u.entry(id).subs.end {
            let sub = lookup(name)?;
            self.change(sub, true);
        } else if !self.bit(id) {
            // A first argument of a command already allowed whole adds nothing.
            let allowed = self.first_args.entry(id).or_default();
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(first)) {
                allowed.push(first.to_vec());
            }
        }
        Ok(())
    }

    fn set_category(&mut self, name: &[u8], allow: bool) -> Result<(), RuleError> {
        let bit = std::str::from_utf8(name)
            .ok()
            .and_then(Universe::category)
            .ok_or(RuleError::UnknownCommand)?;
        let u = Universe::get();
        for (id, e) in u.entries().iter().enumerate() {
            if e.categories & bit != 0 {
                self.change(id as CmdId, allow);
            }
        }
        Ok(())
    }

    /// Allows or denies a command, with its subcommands (Redis's `ACLChangeSelectorPerm`).
    fn change(&mut self, id: CmdId, allow: bool) {
        self.set_bit(id, allow);
        self.first_args.remove(&id);
        for sub in Universe::get().entry(id).subs.clone() {
            self.set_bit(sub, allow);
        }
    }

    fn set_bit(&mut self, id: CmdId, allow: bool) {
        let (word, bit) = (id as usize / 64, 1u64 << (id % 64));
        if allow {
            self.allowed[word] |= bit;
        } else {
            self.allowed[word] &= !bit;
            self.all_commands = false;
        }
    }

    /// Whether the bitmap allows `id`.
    pub fn bit(&self, id: CmdId) -> bool {
        self.allowed[id as usize / 64] & (1u64 << (id % 64)) != 0
    }

    /// Whether the selector allows command `id`, whose first argument (after a subcommand's
    /// name) is `first_arg`.
    pub fn allows_command(&self, id: CmdId, first_arg: Option<&[u8]>) -> bool {
        if self.all_commands || self.bit(id) {
            return true;
        }
        let (Some(allowed), Some(first)) = (self.first_args.get(&id), first_arg) else {
            return false;
        };
        allowed.iter().any(|a| a.eq_ignore_ascii_case(first))
    }

    /// Whether the selector allows `key` for the access asked.
    pub fn allows_key(&self, key: &[u8], read: bool, write: bool) -> bool {
        self.all_keys
            || self.patterns.iter().any(|p| {
                (p.read || !read) && (p.write || !write) && glob_match(&p.pattern, key, false)
            })
    }

    /// Whether the selector allows every key for the access asked (`~*`, `%R~*`, …).
    pub fn allows_every_key(&self, read: bool, write: bool) -> bool {
        self.all_keys
            || self
                .patterns
                .iter()
                .any(|p| (p.read || !read) && (p.write || !write) && p.pattern == b"*")
    }

    /// Whether the selector allows `channel` (`pattern`: a PSUBSCRIBE pattern, which only an
    /// identical ACL pattern allows).
    pub fn allows_channel(&self, channel: &[u8], pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|c| {
                if pattern {
                    c == channel
                } else {
                    glob_match(c, channel, false)
                }
            })
    }

    /// The key patterns as `ACL GETUSER` lists them (`~*` for every key).
    pub fn describe_keys(&self) -> Vec<u8> {
        if self.all_keys {
            return b"~*".to_vec();
        }
        let rules: Vec<Vec<u8>> = self.patterns.iter().map(KeyPattern::rule).collect();
        rules.join(&b' ')
    }

    /// The channel patterns as `ACL GETUSER` lists them (`&*` for every channel).
    pub fn describe_channels(&self) -> Vec<u8> {
        if self.all_channels {
            return b"&*".to_vec();
        }
        let rules: Vec<Vec<u8>> = self
            .channels
            .iter()
            .map(|c| [b"&", &c[..]].concat())
            .collect();
        rules.join(&b' ')
    }

    /// The whole selector as rules (`ACL LIST`'s form): keys, channels, commands.
    pub fn describe(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.all_keys {
            out.extend_from_slice(b"~* ");
        } else {
            for p in &self.patterns {
                out.extend_from_slice(&p.rule());
                out.push(b' ');
            }
        }
        if self.all_channels {
            out.extend_from_slice(b"&* ");
        } else {
            out.extend_from_slice(b"resetchannels ");
            for c in &self.channels {
                out.push(b'&');
                out.extend_from_slice(c);
                out.push(b' ');
            }
        }
        out.extend_from_slice(self.describe_commands().as_bytes());
        out
    }

    /// Rules that rebuild this selector's command permissions: `+@all` or `-@all`, then
    /// the categories that fit best (more commands in common than different, fewest
    /// differences first), then single commands and allowed first arguments.
    pub fn describe_commands(&self) -> String {
        let u = Universe::get();
        let additive = !self.future;
        let mut rules = vec![if additive { "-@all" } else { "+@all" }.to_string()];
        let mut fake = Selector::new(false);
        fake.apply(rules[0].as_bytes()).expect("a valid rule");
        // `temp` holds what is left to explain once each chosen category is applied.
        let mut temp = self.clone();
        let mut applied = vec![false; super::universe::CATEGORIES.len()];
        loop {
            let mut best: Option<(usize, usize, usize)> = None;
            for (j, _) in applied.iter().enumerate().filter(|(_, done)| !**done) {
                let (on, off) = temp.count_category(1 << j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                let better = match best {
                    None => true,
                    Some((_, d, s)) => diff < d || (diff == d && same > s),
                };
                if same > diff && better {
                    best = Some((j, diff, same));
                }
            }
            let Some((j, _, _)) = best else { break };
            let name = super::universe::CATEGORIES[j];
            let (op, inverse) = if additive { ('+', '-') } else { ('-', '+') };
            let rule = format!("{op}@{name}");
            fake.apply(rule.as_bytes()).expect("a valid rule");
            temp.apply(format!("{inverse}@{name}").as_bytes())
                .expect("a valid rule");
            rules.push(rule);
            applied[j] = true;
        }
        for (id, e) in u.entries().iter().enumerate() {
            let id = id as CmdId;
            let bit = self.bit(id);
            if bit != fake.bit(id) {
                rules.push(format!("{}{}", if bit { '+' } else { '-' }, e.name));
                fake.change(id, bit);
            }
            if !bit && let Some(firsts) = self.first_args.get(&id) {
                for f in firsts {
                    rules.push(format!("+{}|{}", e.name, String::from_utf8_lossy(f)));
                }
            }
        }
        debug_assert_eq!(fake.allowed, self.allowed, "ACL description drifted");
        rules.join(" ")
    }

    /// How many commands of category `bit` the bitmap allows and denies.
    fn count_category(&self, bit: u32) -> (usize, usize) {
        let u = Universe::get();
        let (mut on, mut off) = (0, 0);
        for (id, e) in u.entries().iter().enumerate() {
            if e.categories & bit != 0 {
                if self.bit(id as CmdId) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }
}

/// The id of a command or `container|sub` name in a rule.
fn lookup(name: &[u8]) -> Result<CmdId, RuleError> {
    std::str::from_utf8(name)
        .ok()
        .and_then(|n| Universe::get().lookup(n))
        .ok_or(RuleError::UnknownCommand)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(rules: &str) -> Selector {
        let mut s = Selector::new(false);
        for r in rules.split_whitespace() {
            s.apply(r.as_bytes()).unwrap();
        }
        s
    }

    fn id(name: &str) -> CmdId {
        Universe::get().lookup(name).unwrap()
    }

    #[test]
    fn one_category_describes_as_itself() {
        for cat in super::super::universe::CATEGORIES {
            let s = selector(&format!("+@all -@{cat}"));
            assert_eq!(s.describe_commands(), format!("+@all -@{cat}"));
            let s = selector(&format!("-@all +@{cat}"));
            assert_eq!(s.describe_commands(), format!("-@all +@{cat}"));
        }
    }

    #[test]
    fn subcommands_follow_and_override_their_container() {
        let s = selector("+@all -client|kill");
        assert_eq!(s.describe_commands(), "+@all -client|kill");
        assert!(!s.allows_command(id("client|kill"), None));
        assert!(s.allows_command(id("client|id"), None));
        let s = selector("+memory|doctor");
        assert_eq!(s.describe_commands(), "-@all +memory|doctor");
        let s = selector("+memory|doctor +memory");
        assert_eq!(s.describe_commands(), "-@all +memory");
        let s = selector("+@all +client|id");
        assert_eq!(s.describe_commands(), "+@all");
    }

    #[test]
    fn first_args_allow_one_form_of_a_denied_command() {
        let s = selector("-@all +select|0");
        assert!(s.allows_command(id("select"), Some(b"0")));
        assert!(!s.allows_command(id("select"), Some(b"1")));
        assert!(s.describe_commands().contains("+select|0"));
        let mut s = Selector::new(false);
        assert_eq!(
            s.apply(b"+config|get|x"),
            Err(RuleError::FirstArgOfSubcommand)
        );
        assert_eq!(s.apply(b"+config|nosuch"), Err(RuleError::UnknownCommand));
        assert_eq!(s.apply(b"+get|a|b"), Err(RuleError::UnknownCommand));
        assert_eq!(s.apply(b"+debug|"), Err(RuleError::Syntax));
    }

    #[test]
    fn key_patterns_grant_what_they_say() {
        let s = selector("%R~r:* %W~w:* ~both:*");
        assert!(s.allows_key(b"r:1", true, false));
        assert!(!s.allows_key(b"r:1", false, true));
        assert!(s.allows_key(b"w:1", false, true));
        assert!(!s.allows_key(b"w:1", true, true));
        assert!(s.allows_key(b"both:1", true, true));
        assert!(!s.allows_key(b"other", false, false));
        assert_eq!(s.describe_keys(), b"%R~r:* %W~w:* ~both:*");
        let mut all = selector("~*");
        assert_eq!(all.apply(b"~x"), Err(RuleError::KeyAfterAll));
        assert_eq!(all.apply(b"%X~x"), Err(RuleError::KeyAfterAll));
        let mut s = Selector::new(false);
        assert_eq!(s.apply(b"%X~x"), Err(RuleError::Syntax));
        assert_eq!(s.apply(b"%RR~x"), Err(RuleError::Syntax));
    }

    #[test]
    fn channel_patterns_match_channels_and_only_equal_patterns() {
        let s = selector("&news.*");
        assert!(s.allows_channel(b"news.today", false));
        assert!(!s.allows_channel(b"news.today", true));
        assert!(s.allows_channel(b"news.*", true));
        assert!(!s.allows_channel(b"sports", false));
    }

    #[test]
    fn unknown_rules_are_refused() {
        let mut s = Selector::new(false);
        assert_eq!(s.apply(b"+nosuch"), Err(RuleError::UnknownCommand));
        assert_eq!(s.apply(b"-@nosuch"), Err(RuleError::UnknownCommand));
        assert_eq!(s.apply(b"bogus"), Err(RuleError::Syntax));
        assert_eq!(s, Selector::new(false));
    }

    /// Any rule list's description rebuilds the same command permissions (Redis aborts if
    /// its description ever drifts; here a property).
    mod described {
        use super::*;
        use proptest::prelude::*;

        fn rule() -> impl Strategy<Value = String> {
            let cats = super::super::super::universe::CATEGORIES;
            prop_oneof![
                (any::<bool>(), 0..cats.len()).prop_map(move |(on, c)| format!(
                    "{}@{}",
                    if on { '+' } else { '-' },
                    cats[c]
                )),
                (
                    any::<bool>(),
                    prop::sample::select(vec![
                        "get",
                        "set",
                        "client",
                        "client|kill",
                        "client|id",
                        "config|get",
                        "debug",
                        "memory",
                        "memory|doctor",
                        "acl",
                        "eval",
                        "xinfo|stream",
                        "select",
                    ])
                )
                    .prop_map(|(on, c)| format!("{}{c}", if on { '+' } else { '-' })),
                prop::sample::select(vec!["+select|0", "+debug|object", "+@all", "-@all"])
                    .prop_map(str::to_string),
            ]
        }

        proptest! {
            #[test]
            fn description_rebuilds_the_bitmap(rules in prop::collection::vec(rule(), 0..12)) {
                let mut s = Selector::new(false);
                for r in &rules {
                    s.apply(r.as_bytes()).unwrap();
                }
                let mut back = Selector::new(false);
                for r in s.describe_commands().split(' ') {
                    back.apply(r.as_bytes()).unwrap();
                }
                prop_assert_eq!(back.allowed, s.allowed);
                prop_assert_eq!(back.future, s.future);
                prop_assert_eq!(&back.first_args, &s.first_args);
            }
        }
    }
}
