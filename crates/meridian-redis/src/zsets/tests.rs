//! The sorted-set commands over a plain in-memory view: replies and errors compared with
//! Redis 7.0.15's (`t_zset.c`, `tests/unit/type/zset.tcl`), a model test against a
//! `BTreeMap`, and the decoders on damaged bytes.

use super::*;
use crate::OwnedArgs;
use meridian_core::Timestamp;
use std::collections::BTreeMap;

/// A view over a map, as a backend's one-command view would be.
#[derive(Default)]
struct MemView {
    now: u64,
    map: BTreeMap<Vec<u8>, Entry>,
    max: usize,
}

impl View for MemView {
    fn now(&self) -> Timestamp {
        Timestamp(self.now)
    }
    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        let now = Timestamp(self.now);
        Ok(self.map.get(key).filter(|e| !e.is_expired(now)).cloned())
    }
    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<()> {
        match value {
            Some(e) => {
                self.map.insert(key.to_vec(), e.to_entry());
            }
            None => {
                self.map.remove(key);
            }
        }
        Ok(())
    }
    fn max_value_len(&self) -> usize {
        self.max
    }
}

fn view() -> MemView {
    MemView {
        now: 10_000_000,
        map: BTreeMap::new(),
        max: 1 << 20,
    }
}

/// Runs one command given as its parts; returns the reply's bytes.
fn run_parts(v: &mut MemView, parts: &[&[u8]], resp3: bool) -> String {
    let owned = OwnedArgs::from_slices(parts.iter().copied());
    let args = owned.get();
    let cmd = Cmd::lookup(parts[0]).expect("a known command");
    let mut reply = Reply::new(64);
    reply.resp3 = resp3;
    if let Err(e) = exec_on_view(cmd, args, v, &mut reply) {
        reply.command_error(e);
    }
    String::from_utf8_lossy(&reply.out).into_owned()
}

fn r2(v: &mut MemView, line: &str) -> String {
    let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    run_parts(v, &parts, false)
}

fn r3(v: &mut MemView, line: &str) -> String {
    let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    run_parts(v, &parts, true)
}

/// A RESP2 array of bulk strings.
fn bulks(items: &[&str]) -> String {
    let mut s = format!("*{}\r\n", items.len());
    for i in items {
        s.push_str(&format!("${}\r\n{}\r\n", i.len(), i));
    }
    s
}

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

#[test]
fn zadd_and_zrange_basics() {
    let mut v = view();
    assert_eq!(r2(&mut v, "ZADD z 10 x 20 y 30 z"), ":3\r\n");
    assert_eq!(r2(&mut v, "ZRANGE z 0 -1"), bulks(&["x", "y", "z"]));
    assert_eq!(r2(&mut v, "ZADD z 1 y"), ":0\r\n");
    assert_eq!(r2(&mut v, "ZRANGE z 0 -1"), bulks(&["y", "x", "z"]));
}
