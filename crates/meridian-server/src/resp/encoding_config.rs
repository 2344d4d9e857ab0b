//! Redis's encoding settings (`hash-max-listpack-entries`, `list-max-listpack-size`,
//! `set-max-intset-entries`, `zset-max-listpack-value`, ... and their `ziplist` aliases), and
//! `save`: what CONFIG SET accepts and CONFIG GET reports for them.
//!
//! Redis switches a collection between a compact and a large encoding at these thresholds;
//! Meridian keeps every collection in one encoding (its type's module in the Redis layer), so
//! the settings change nothing here. They are still validated as Redis validates them (an
//! integer in Redis's range, else Redis's error), remembered per node and reported back, so
//! tools and test suites that tune them (Redis's own suite does, file by file) run unchanged.
//!
//! `OBJECT ENCODING` ([`EncodingSettings::encoding_name`]) answers the name Redis 7.0 would
//! give the value under these settings, so tools that read it see what they expect.
//!
//! `save` is accepted only as `""` (no RDB snapshots: Meridian persists through its engine,
//! see `appendonly`); any other schedule is refused with the reason.

use meridian_redis::error::{CmdError, raw};
use meridian_redis::{Entry, Kind, RedisError};
use parking_lot::Mutex;

/// One setting: its name, its `ziplist` alias (Redis 7 keeps the old names), its default and
/// the range Redis accepts.
struct Setting {
    name: &'static str,
    alias: Option<&'static str>,
    default: i64,
    min: i64,
    max: i64,
}

const INT_MAX: i64 = i32::MAX as i64;
const INT_MIN: i64 = i32::MIN as i64;

const SETTINGS: &[Setting] = &[
    Setting {
        name: "hash-max-listpack-entries",
        alias: Some("hash-max-ziplist-entries"),
        default: 128,
        min: 0,
        max: i64::MAX,
    },
    Setting {
        name: "hash-max-listpack-value",
        alias: Some("hash-max-ziplist-value"),
        default: 64,
        min: 0,
        max: i64::MAX,
    },
    Setting {
        name: "list-max-listpack-size",
        alias: Some("list-max-ziplist-size"),
        default: -2,
        min: INT_MIN,
        max: INT_MAX,
    },
    Setting {
        name: "list-compress-depth",
        alias: None,
        default: 0,
        min: 0,
        max: INT_MAX,
    },
    Setting {
        name: "set-max-intset-entries",
        alias: None,
        default: 512,
        min: 0,
        max: i64::MAX,
    },
    Setting {
        name: "zset-max-listpack-entries",
        alias: Some("zset-max-ziplist-entries"),
        default: 128,
        min: 0,
        max: i64::MAX,
    },
    Setting {
        name: "zset-max-listpack-value",
        alias: Some("zset-max-ziplist-value"),
        default: 64,
        min: 0,
        max: i64::MAX,
    },
    Setting {
        name: "hll-sparse-max-bytes",
        alias: None,
        default: 3000,
        min: 0,
        max: i64::MAX,
    },
    Setting {
        name: "stream-node-max-bytes",
        alias: None,
        default: 4096,
        min: 0,
        max: i64::MAX,
    },
    Setting {
        name: "stream-node-max-entries",
        alias: None,
        default: 100,
        min: 0,
        max: i64::MAX,
    },
];

/// The node's values of the encoding settings.
#[derive(Debug)]
pub(crate) struct EncodingSettings {
    values: Mutex<Vec<i64>>,
}

impl Default for EncodingSettings {
    fn default() -> Self {
        Self {
            values: Mutex::new(SETTINGS.iter().map(|s| s.default).collect()),
        }
    }
}

/// The index of the setting `name` (either spelling, any case).
fn find(name: &[u8]) -> Option<usize> {
    SETTINGS.iter().position(|s| {
        name.eq_ignore_ascii_case(s.name.as_bytes())
            || s.alias
                .is_some_and(|a| name.eq_ignore_ascii_case(a.as_bytes()))
    })
}

/// Whether CONFIG SET of `name` is this module's.
pub(crate) fn handles(name: &[u8]) -> bool {
    find(name).is_some() || name.eq_ignore_ascii_case(b"save")
}

impl EncodingSettings {
    /// Every name (aliases included) and its value, for CONFIG GET; `save` is `""`.
    pub(crate) fn params(&self) -> Vec<(&'static str, String)> {
        let values = self.values.lock();
        let mut out = vec![("save", String::new())];
        for (s, v) in SETTINGS.iter().zip(values.iter()) {
            out.push((s.name, v.to_string()));
            if let Some(a) = s.alias {
                out.push((a, v.to_string()));
            }
        }
        out
    }

    /// Checks `value` for the setting `name` as Redis's CONFIG SET does, without applying
    /// it: the value to apply, or Redis's error line. `failed` builds Redis's "CONFIG SET
    /// failed" line from a reason.
    pub(crate) fn check(
        &self,
        name: &[u8],
        value: &[u8],
        failed: &dyn Fn(&str) -> CmdError,
    ) -> Result<Option<(usize, i64)>, CmdError> {
        if name.eq_ignore_ascii_case(b"save") {
            return if value.iter().all(u8::is_ascii_whitespace) {
                Ok(None)
            } else {
                Err(raw(
                    "ERR CONFIG SET is not supported by Meridian for 'save': there are no RDB \
                     snapshots (the engine persists every write, see appendonly); only \
                     save \"\" is accepted",
                ))
            };
        }
        let i = find(name).ok_or_else(|| failed("unknown parameter"))?;
        let s = &SETTINGS[i];
        let v = meridian_redis::value::parse_i64(value)
            .ok_or_else(|| failed("argument couldn't be parsed into an integer"))?;
        if v < s.min || v > s.max {
            return Err(failed(&format!(
                "argument must be between {} and {} inclusive",
                s.min, s.max
            )));
        }
        Ok(Some((i, v)))
    }

    /// Where a stream's nodes close (`stream-node-max-entries`, `stream-node-max-bytes`).
    pub(crate) fn stream_node_limits(&self) -> meridian_redis::streams::NodeLimits {
        meridian_redis::streams::NodeLimits {
            entries: self.value("stream-node-max-entries").max(0) as u64,
            bytes: self.value("stream-node-max-bytes").max(0) as u64,
        }
    }

    /// The current value of the setting `name`.
    fn value(&self, name: &str) -> i64 {
        let i = find(name.as_bytes()).unwrap_or(0);
        self.values.lock().get(i).copied().unwrap_or(0)
    }

    /// The encoding Redis 7.0 would report for `entry` under these settings (OBJECT
    /// ENCODING); Meridian's own encoding is one per type.
    pub(crate) fn encoding_name(&self, entry: &Entry) -> Result<&'static str, RedisError> {
        let fits = |n: usize, longest: usize, entries: &str, value: &str| {
            n as i64 <= self.value(entries) && longest as i64 <= self.value(value)
        };
        Ok(match entry.kind {
            Kind::String => {
                let d = &entry.data;
                if d.len() <= 20 && meridian_redis::value::parse_i64(d).is_some() {
                    "int"
                } else if d.len() <= 44 {
                    "embstr"
                } else {
                    "raw"
                }
            }
            Kind::Hash => {
                let fields = meridian_redis::hashes::fields_of(entry.clone())?;
                let longest = fields
                    .iter()
                    .map(|(f, v)| f.len().max(v.len()))
                    .max()
                    .unwrap_or(0);
                if fits(
                    fields.len(),
                    longest,
                    "hash-max-listpack-entries",
                    "hash-max-listpack-value",
                ) {
                    "listpack"
                } else {
                    "hashtable"
                }
            }
            // Redis 7.0 keeps every list as a quicklist.
            Kind::List => "quicklist",
            Kind::Set => {
                let members = meridian_redis::sets::members(entry)?;
                let ints = members
                    .iter()
                    .all(|m| meridian_redis::value::parse_i64(m).is_some());
                if ints && members.len() as i64 <= self.value("set-max-intset-entries") {
                    "intset"
                } else {
                    "hashtable"
                }
            }
            Kind::ZSet => {
                let z = meridian_redis::zsets::decode(entry)?;
                let longest = z.members().map(|(m, _)| m.len()).max().unwrap_or(0);
                if fits(
                    z.len(),
                    longest,
                    "zset-max-listpack-entries",
                    "zset-max-listpack-value",
                ) {
                    "listpack"
                } else {
                    "skiplist"
                }
            }
            Kind::Stream => "stream",
        })
    }

    /// Applies what [`EncodingSettings::check`] returned.
    pub(crate) fn apply(&self, checked: Option<(usize, i64)>) {
        if let Some((i, v)) = checked
            && let Some(slot) = self.values.lock().get_mut(i)
        {
            *slot = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(why: &str) -> CmdError {
        raw(format!("ERR failed - {why}"))
    }

    #[test]
    fn settings_are_checked_remembered_and_reported_under_both_names() {
        let e = EncodingSettings::default();
        let get = |name: &str| {
            e.params()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v)
        };
        assert_eq!(get("hash-max-ziplist-value").as_deref(), Some("64"));
        let c = e.check(b"HASH-MAX-ZIPLIST-VALUE", b"16", &failed).unwrap();
        e.apply(c);
        assert_eq!(get("hash-max-listpack-value").as_deref(), Some("16"));
        assert_eq!(get("hash-max-ziplist-value").as_deref(), Some("16"));
        let c = e.check(b"list-max-ziplist-size", b"-5", &failed).unwrap();
        e.apply(c);
        assert_eq!(get("list-max-listpack-size").as_deref(), Some("-5"));
        for (name, value, why) in [
            (
                &b"set-max-intset-entries"[..],
                &b"x"[..],
                "parsed into an integer",
            ),
            (b"set-max-intset-entries", b"-1", "between 0 and"),
            (b"list-compress-depth", b"4294967296", "between 0 and"),
            (b"save", b"900 1", "no RDB snapshots"),
        ] {
            let line = e.check(name, value, &failed).unwrap_err().into_line();
            assert!(line.contains(why), "{line}");
        }
        assert!(e.check(b"save", b"", &failed).unwrap().is_none());
        assert!(handles(b"zset-max-ziplist-entries") && handles(b"SAVE"));
        assert!(!handles(b"maxmemory"));
    }

    #[test]
    fn encoding_names_follow_the_settings() {
        let e = EncodingSettings::default();
        let string = |s: &'static str| Entry::new(bytes::Bytes::from_static(s.as_bytes()));
        assert_eq!(e.encoding_name(&string("12345")).unwrap(), "int");
        assert_eq!(e.encoding_name(&string("hello")).unwrap(), "embstr");
        assert_eq!(
            e.encoding_name(&string("x".repeat(45).leak())).unwrap(),
            "raw"
        );
        let set = |m: &[&str]| Entry {
            data: meridian_redis::sets::encode(m).into(),
            expiry: None,
            kind: Kind::Set,
        };
        assert_eq!(e.encoding_name(&set(&["1", "2"])).unwrap(), "intset");
        assert_eq!(e.encoding_name(&set(&["1", "a"])).unwrap(), "hashtable");
        e.apply(e.check(b"set-max-intset-entries", b"1", &failed).unwrap());
        assert_eq!(e.encoding_name(&set(&["1", "2"])).unwrap(), "hashtable");
    }
}
