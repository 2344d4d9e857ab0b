//! DUMP and RESTORE over a [`View`] (being written).

use crate::args::Args;
use crate::command::Cmd;
use crate::error::{CmdResult, raw};
use crate::reply::Reply;
use crate::view::View;

/// Executes DUMP or RESTORE over `view`.
pub fn exec_on_view(
    cmd: Cmd,
    _args: Args<'_>,
    _view: &mut dyn View,
    _reply: &mut Reply,
) -> CmdResult {
    Err(raw(format!("ERR {} is not built yet", cmd.spec().name)))
}
