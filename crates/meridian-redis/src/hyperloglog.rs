//! Redis HyperLogLog-command semantics over a [`View`] (being written).

use crate::args::Args;
use crate::command::{Cmd, Group};
use crate::error::{CmdResult, raw};
use crate::reply::Reply;
use crate::view::View;

/// Whether this module runs `cmd`.
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::HyperLogLog
}

/// Executes a HyperLogLog command whose arity was checked, over `view`.
pub fn exec_on_view(
    cmd: Cmd,
    _args: Args<'_>,
    _view: &mut dyn View,
    _reply: &mut Reply,
) -> CmdResult {
    Err(raw(format!("ERR {} is not built yet", cmd.spec().name)))
}
