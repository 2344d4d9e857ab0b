//! The commands ACL rules name: Redis 7.0.15's table (commands and `container|sub`
//! subcommands, with their categories) and Meridian's own commands, each given a dense
//! [`CmdId`] that indexes a selector's bitmap.
//!
//! Guarantees: ids are stable for a process; a parent's subcommands are a contiguous id
//! range; [`Universe::of`] maps a request to the id Redis checks (the subcommand's when the
//! command has subcommands and the second argument names one, else the command's).

use super::redis_commands::REDIS_COMMANDS;
use crate::args::Args;
use crate::command::Cmd;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Redis's ACL categories, in its order (`ACL CAT`); a command's categories are a bitmask
/// over this list.
pub const CATEGORIES: &[&str] = crate::command_info::ACL_CATEGORIES;

/// A command's index in the universe.
pub type CmdId = u16;

/// One command or subcommand.
#[derive(Debug)]
pub struct Entry {
    /// Lowercase full name (`get`, `client|kill`).
    pub name: String,
    /// Redis's arity.
    pub arity: i32,
    /// Category bits (over [`CATEGORIES`]).
    pub categories: u32,
    /// The container, for a subcommand.
    pub parent: Option<CmdId>,
    /// The subcommands, for a container (a contiguous range).
    pub subs: std::ops::Range<CmdId>,
}

/// Every command an ACL rule may name.
#[derive(Debug)]
pub struct Universe {
    entries: Vec<Entry>,
    by_name: HashMap<String, CmdId>,
    /// `Cmd as usize` → id.
    of_cmd: Vec<CmdId>,
}

/// The bitmap words a selector needs for every id.
pub const WORDS: usize = 8;

impl Universe {
    /// The process's universe.
    pub fn get() -> &'static Universe {
        static U: OnceLock<Universe> = OnceLock::new();
        U.get_or_init(Universe::build)
    }

    fn build() -> Universe {
        let mut u = Universe {
            entries: Vec::new(),
            by_name: HashMap::new(),
            of_cmd: Vec::new(),
        };
        for &(name, arity, categories) in REDIS_COMMANDS {
            u.push(name.to_string(), arity, categories);
        }
        for &cmd in Cmd::ALL {
            let spec = cmd.spec();
            let id = match u.by_name.get(spec.name) {
                Some(&id) => id,
                None => {
                    let bits = category_bits(cmd.acl_categories());
                    u.push(spec.name.to_string(), spec.arity, bits)
                }
            };
            u.of_cmd.push(id);
        }
        assert!(
            u.entries.len() < WORDS * 64,
            "ACL universe outgrew its bitmap"
        );
        u
    }

    fn push(&mut self, name: String, arity: i32, categories: u32) -> CmdId {
        let id = self.entries.len() as CmdId;
        let parent = name
            .split_once('|')
            .and_then(|(p, _)| self.by_name.get(p).copied());
        if let Some(p) = parent {
            let subs = &mut self.entries[p as usize].subs;
            if subs.start == subs.end {
                *subs = id..id;
            }
            subs.end = id + 1;
        }
        self.by_name.insert(name.clone(), id);
        self.entries.push(Entry {
            name,
            arity,
            categories,
            parent,
            subs: 0..0,
        });
        id
    }

    /// Every entry, by id.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry of `id`.
    pub fn entry(&self, id: CmdId) -> &Entry {
        &self.entries[id as usize]
    }

    /// The id of a (lowercase or not) full name: `get`, `CONFIG|get`.
    pub fn lookup(&self, name: &str) -> Option<CmdId> {
        self.by_name.get(&name.to_ascii_lowercase()).copied()
    }

    /// The id a request of `cmd` is checked against: its subcommand's when `cmd` has
    /// subcommands and the second argument names one, else its own.
    pub fn of(&self, cmd: Cmd, args: &Args<'_>) -> CmdId {
        let id = self.of_cmd[cmd as usize];
        let entry = self.entry(id);
        if entry.subs.start == entry.subs.end || args.len() < 2 {
            return id;
        }
        let Ok(sub) = std::str::from_utf8(args.get(1)) else {
            return id;
        };
        let full = format!("{}|{}", entry.name, sub.to_ascii_lowercase());
        self.by_name.get(&full).copied().unwrap_or(id)
    }

    /// The id of a command in the table.
    pub fn of_cmd(&self, cmd: Cmd) -> CmdId {
        self.of_cmd[cmd as usize]
    }

    /// The bit of category `name` (without `@`), if it is one.
    pub fn category(name: &str) -> Option<u32> {
        CATEGORIES
            .iter()
            .position(|c| c.eq_ignore_ascii_case(name))
            .map(|i| 1 << i)
    }
}

fn category_bits<'a>(names: impl Iterator<Item = &'a str>) -> u32 {
    names.filter_map(Universe::category).fold(0, |a, b| a | b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_an_id_and_containers_own_their_subcommands() {
        let u = Universe::get();
        for &cmd in Cmd::ALL {
            assert_eq!(u.entry(u.of_cmd(cmd)).name, cmd.spec().name);
        }
        let client = u.lookup("client").unwrap();
        let kill = u.lookup("CLIENT|KILL").unwrap();
        assert!(u.entry(client).subs.contains(&kill));
        assert_eq!(u.entry(kill).parent, Some(client));
        assert!(
            u.lookup("debug").is_some(),
            "Redis commands Meridian lacks are nameable"
        );
    }

    #[test]
    fn a_request_is_checked_as_its_subcommand() {
        let u = Universe::get();
        let of = |cmd, parts: &[&str]| {
            let owned = crate::OwnedArgs::from_slices(parts.iter().map(|p| p.as_bytes()));
            u.of(cmd, &owned.get())
        };
        assert_eq!(
            of(Cmd::Client, &["client", "Kill", "x"]),
            u.lookup("client|kill").unwrap()
        );
        assert_eq!(
            of(Cmd::Client, &["client", "nosuch"]),
            u.lookup("client").unwrap()
        );
        assert_eq!(of(Cmd::Get, &["get", "client"]), u.lookup("get").unwrap());
    }

    #[test]
    fn categories_follow_redis() {
        let u = Universe::get();
        let cats = |n: &str| u.entry(u.lookup(n).unwrap()).categories;
        let bit = |c: &str| Universe::category(c).unwrap();
        assert_ne!(cats("get") & bit("read"), 0);
        assert_ne!(cats("get") & bit("string"), 0);
        assert_eq!(cats("get") & bit("keyspace"), 0);
        assert_ne!(cats("config|set") & bit("admin"), 0);
        assert_ne!(cats("function|list") & bit("scripting"), 0);
    }
}
