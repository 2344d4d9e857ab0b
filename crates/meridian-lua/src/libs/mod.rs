//! The libraries Redis's Lua environment offers besides Lua's own (base, table, string,
//! math): `cjson`, `cmsgpack`, `bit` and `struct`, each a global table, written in Rust with
//! the behaviour of the C libraries Redis 7.0 bundles. Their functions share one calling
//! convention, [`raise`]: arguments and results in tables, errors raised as plain strings.

mod bit;
mod cjson;
mod cmsgpack;
mod raise;
mod structlib;

/// Installs every library as a global table of `lua`.
pub(crate) fn open_all(lua: &mlua::Lua) -> mlua::Result<()> {
    bit::open(lua)?;
    cjson::open(lua)?;
    cmsgpack::open(lua)?;
    structlib::open(lua)?;
    Ok(())
}
