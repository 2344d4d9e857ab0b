//! The data types: the one place a data command is routed to its type's module. A data
//! command (one whose [`Group`] names a type) runs over any [`View`] with the same
//! semantics, wherever it arrived (a RESP connection, EXEC's queue, a cluster transaction)
//! and whatever backend holds its keys.
//!
//! Adding a type adds one [`Group`] variant, its commands in the table, and one arm in
//! [`exec_on_view`] and [`Group::is_data`]; the front ends route by [`is_data_command`].

use crate::args::Args;
use crate::command::{Cmd, Group};
use crate::error::{CmdResult, raw};
use crate::reply::Reply;
use crate::view::View;
use crate::{bitmaps, geo, hashes, hyperloglog, keys, lists, sets, streams, strings, zsets};

impl Group {
    /// Whether the group is a data type's commands (run by [`exec_on_view`]).
    pub fn is_data(self) -> bool {
        matches!(
            self,
            Group::Strings
                | Group::Hashes
                | Group::Lists
                | Group::Sets
                | Group::SortedSets
                | Group::Keys
                | Group::Bitmaps
                | Group::HyperLogLog
                | Group::Geo
                | Group::Streams
        )
    }
}

/// Whether [`exec_on_view`] runs `cmd`: a command of a data type.
#[inline]
pub fn is_data_command(cmd: Cmd) -> bool {
    cmd.group().is_data()
}

/// Executes a data command whose arity was checked against `view`, writing its reply; an
/// error is returned for the caller to write (as its own reply, or as an element of EXEC's
/// array).
pub fn exec_on_view(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    match cmd.group() {
        Group::Strings => strings::exec_on_view(cmd, args, view, reply),
        Group::Hashes => hashes::exec_on_view(cmd, args, view, reply),
        Group::Lists => lists::exec_on_view(cmd, args, view, reply),
        Group::Keys => keys::exec_on_view(cmd, args, view, reply),
        Group::Bitmaps => bitmaps::exec_on_view(cmd, args, view, reply),
        Group::HyperLogLog => hyperloglog::exec_on_view(cmd, args, view, reply),
        Group::Geo => geo::exec_on_view(cmd, args, view, reply),
        Group::Sets => sets::exec_on_view(cmd, args, view, reply),
        Group::SortedSets => zsets::exec_on_view(cmd, args, view, reply),
        Group::Streams => streams::exec_on_view(cmd, args, view, reply),
        _ => Err(raw(format!(
            "ERR {} is not a data command",
            cmd.spec().name.to_ascii_uppercase()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_data_command_has_its_type_module() {
        for &c in Cmd::ALL {
            assert_eq!(
                is_data_command(c),
                strings::handles(c)
                    || hashes::handles(c)
                    || lists::handles(c)
                    || sets::handles(c)
                    || zsets::handles(c)
                    || keys::handles(c)
                    || bitmaps::handles(c)
                    || hyperloglog::handles(c)
                    || geo::handles(c)
                    || streams::handles(c),
                "{c:?}"
            );
        }
    }
}
