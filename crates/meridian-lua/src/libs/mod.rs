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

/// What the libraries' tests share.
#[cfg(test)]
pub(crate) mod test_support {
    use mlua::Lua;

    /// A bare interpreter with one library installed by `open`.
    pub(crate) fn lua_with(open: fn(&Lua) -> mlua::Result<()>) -> Lua {
        let lua = Lua::new();
        open(&lua).unwrap();
        lua
    }

    /// The hex of `<lib>.pack(<args>)`.
    pub(crate) fn packed_hex(lua: &Lua, lib: &str, args: &str) -> String {
        let code = format!("return {lib}.pack({args})");
        hex::encode(lua.load(code).eval::<mlua::LuaString>().unwrap().as_bytes())
    }
}
