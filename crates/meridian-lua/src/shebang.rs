//! A script's `#!lua flags=…` line (Redis 7): which engine, which flags.
//!
//! A body without one runs in compatibility mode (Redis 6's rules: it may write, and is
//! judged command by command). The line is cut from the body but its newline kept, so line
//! numbers in errors stay the user's.

/// A script's declared flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// No `#!` line: Redis 6's semantics.
    pub compat: bool,
    /// `no-writes`: the script only reads (may run as EVAL_RO, on replicas).
    pub no_writes: bool,
    /// `allow-oom`: may run over `maxmemory`.
    pub allow_oom: bool,
    /// `allow-stale`: may run on a stale replica.
    pub allow_stale: bool,
    /// `no-cluster`: refused in cluster mode.
    pub no_cluster: bool,
    /// `allow-cross-slot-keys`: may touch keys of several slots.
    pub allow_cross_slot: bool,
}

/// Parses the shebang of `body`: its flags and how many bytes the line takes (not its
/// newline). The error is Redis's message, without the `ERR ` code.
pub fn parse(body: &[u8]) -> Result<(Flags, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((
            Flags {
                compat: true,
                ..Flags::default()
            },
            0,
        ));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err("Invalid script shebang".into());
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let mut parts = line.split_ascii_whitespace();
    let Some(engine) = parts.next() else {
        return Err("Invalid engine in script shebang".into());
    };
    if engine != "#!lua" {
        return Err(format!("Unexpected engine in script shebang: {engine}"));
    }
    let mut flags = Flags::default();
    for part in parts {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(format!("Unknown lua shebang option: {part}"));
        };
        for name in list.split(',').filter(|f| !f.is_empty()) {
            set_flag(&mut flags, name)?;
        }
    }
    Ok((flags, end))
}

/// Sets the flag Redis names `name`; the error is Redis's message.
pub(crate) fn set_flag(flags: &mut Flags, name: &str) -> Result<(), String> {
    match name {
        "no-writes" => flags.no_writes = true,
        "allow-oom" => flags.allow_oom = true,
        "allow-stale" => flags.allow_stale = true,
        "no-cluster" => flags.no_cluster = true,
        "allow-cross-slot-keys" => flags.allow_cross_slot = true,
        _ => return Err(format!("Unexpected flag in script shebang: {name}")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs_parse_as_redis() {
        assert!(parse(b"return 1").unwrap().0.compat);
        let (f, len) = parse(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert!(f.no_writes && f.allow_oom && !f.compat && !f.no_cluster);
        assert_eq!(len, 31);
        assert_eq!(parse(b"#!lua\nreturn 1").unwrap().0, Flags::default());
        assert_eq!(parse(b"#!lua").unwrap_err(), "Invalid script shebang");
        assert_eq!(
            parse(b"#!python\n").unwrap_err(),
            "Unexpected engine in script shebang: #!python"
        );
        assert_eq!(
            parse(b"#!lua flags=bad\n").unwrap_err(),
            "Unexpected flag in script shebang: bad"
        );
        assert_eq!(
            parse(b"#!lua name=x\n").unwrap_err(),
            "Unknown lua shebang option: name=x"
        );
        assert_eq!(parse(b"#!lua flags=\n").unwrap().0, Flags::default());
    }
}
