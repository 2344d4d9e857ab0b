//! ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD (Redis's
//! `zunionInterDiffGenericCommand`): `numkeys`, then every source key's type (sorted sets and
//! sets; a set's members score 1), then WEIGHTS / AGGREGATE / WITHSCORES / LIMIT.

use super::{Member, Score, ZSet, read, reply_entries, store_result};
use crate::args::Args;
use crate::command::Cmd;
use crate::error::{CmdError, RedisError, SYNTAX, int_arg, raw};
use crate::reply::Reply;
use crate::sets::members as set_members;
use crate::value::parse_f64;
use crate::view::{Kind, View};
use std::collections::BTreeMap;

/// Which operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Union,
    Inter,
    Diff,
}

/// How scores of one member combine (AGGREGATE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregate {
    /// The sum (a NaN sum, `inf + -inf`, is 0).
    Sum,
    /// The lowest.
    Min,
    /// The highest.
    Max,
}

impl Aggregate {
    fn apply(self, target: &mut f64, v: f64) {
        match self {
            Aggregate::Sum => {
                *target += v;
                if target.is_nan() {
                    *target = 0.0;
                }
            }
            Aggregate::Min => {
                if v < *target {
                    *target = v;
                }
            }
            Aggregate::Max => {
                if v > *target {
                    *target = v;
                }
            }
        }
    }
}

/// One input: member → score (a missing key is empty), and its weight.
struct Source {
    members: BTreeMap<Member, f64>,
    weight: f64,
}

/// `weight * score`, NaN (`0 * inf`) being 0.
fn weighted(weight: f64, score: f64) -> f64 {
    let v = weight * score;
    if v.is_nan() { 0.0 } else { v }
}

fn compute(op: Op, mut src: Vec<Source>, agg: Aggregate) -> ZSet {
    if op != Op::Diff {
        // Smallest first, as Redis orders them (stable here).
        src.sort_by_key(|s| s.members.len());
    }
    let mut out = ZSet::default();
    let mut put = |m: &Member, v: f64| {
        if let Some(s) = Score::new(if v.is_nan() { 0.0 } else { v }) {
            out.insert(m, s);
        }
    };
    match op {
        Op::Inter => {
            if let Some((first, rest)) = src.split_first() {
                'members: for (m, s) in &first.members {
                    let mut score = weighted(first.weight, *s);
                    for o in rest {
                        let Some(v) = o.members.get(m) else {
                            continue 'members;
                        };
                        agg.apply(&mut score, *v * o.weight);
                    }
                    put(m, score);
                }
            }
        }
        Op::Union => {
            let mut acc: BTreeMap<&Member, f64> = BTreeMap::new();
            for s in &src {
                for (m, v) in &s.members {
                    let v = weighted(s.weight, *v);
                    match acc.get_mut(m) {
                        Some(t) => agg.apply(t, v),
                        None => {
                            acc.insert(m, v);
                        }
                    }
                }
            }
            for (m, v) in acc {
                put(m, v);
            }
        }
        Op::Diff => {
            if let Some((first, rest)) = src.split_first() {
                for (m, s) in &first.members {
                    if !rest.iter().any(|o| o.members.contains_key(m)) {
                        put(m, *s);
                    }
                }
            }
        }
    }
    out
}

/// Runs one of the commands (its arity checked by the caller).
pub(super) fn exec(
    cmd: Cmd,
    view: &mut dyn View,
    args: Args<'_>,
    reply: &mut Reply,
) -> std::result::Result<(), CmdError> {
    let (op, store, card) = match cmd {
        Cmd::Zunionstore => (Op::Union, true, false),
        Cmd::Zinterstore => (Op::Inter, true, false),
        Cmd::Zdiffstore => (Op::Diff, true, false),
        Cmd::Zunion => (Op::Union, false, false),
        Cmd::Zinter => (Op::Inter, false, false),
        Cmd::Zdiff => (Op::Diff, false, false),
        _ => (Op::Inter, false, true),
    };
    let numkeys_at = if store { 2 } else { 1 };
    let numkeys = int_arg(super::arg(args, cmd, numkeys_at)?)?;
    if numkeys < 1 {
        return Err(raw(format!(
            "ERR at least 1 input key is needed for '{}' command",
            cmd.spec().name
        )));
    }
    let first = numkeys_at + 1;
    let n = match usize::try_from(numkeys) {
        Ok(n) if n <= args.len() - first => n,
        _ => return Err(raw(SYNTAX)),
    };
    // Every source's type before any option, as Redis does.
    let mut src = Vec::with_capacity(n);
    for key in args.iter_from(first).take(n) {
        let members = match read(view, key, |z| {
            z.members()
                .map(|(m, s)| (m.clone(), s))
                .collect::<BTreeMap<_, _>>()
        }) {
            Ok(found) => found.unwrap_or_default(),
            // Another type (its read already counted): a set is an input too, its members
            // copied out of the bytes `load` gives (a result kept in memory must not hold
            // the whole encoding alive).
            Err(RedisError::WrongType) => match view.load(key)? {
                Some(e) if e.kind == Kind::Set => set_members(&e)?
                    .into_iter()
                    .map(|m| (Member::from(&m[..]), 1.0))
                    .collect(),
                _ => return Err(RedisError::WrongType.into()),
            },
            Err(e) => return Err(e.into()),
        };
        src.push(Source {
            members,
            weight: 1.0,
        });
    }
    let mut agg = Aggregate::Sum;
    let mut with_scores = false;
    let mut limit: u64 = 0;
    let mut j = first + n;
    while j < args.len() {
        let remaining = args.len() - j;
        let o = args.get(j);
        if op != Op::Diff && !card && remaining > n && o.eq_ignore_ascii_case(b"WEIGHTS") {
            for (k, s) in src.iter_mut().enumerate() {
                s.weight = parse_f64(args.get(j + 1 + k))
                    .ok_or_else(|| raw("ERR weight value is not a float"))?;
            }
            j += 1 + n;
        } else if op != Op::Diff && !card && remaining >= 2 && o.eq_ignore_ascii_case(b"AGGREGATE")
        {
            let a = args.get(j + 1);
            agg = if a.eq_ignore_ascii_case(b"SUM") {
                Aggregate::Sum
            } else if a.eq_ignore_ascii_case(b"MIN") {
                Aggregate::Min
            } else if a.eq_ignore_ascii_case(b"MAX") {
                Aggregate::Max
            } else {
                return Err(raw(SYNTAX));
            };
            j += 2;
        } else if !store && !card && o.eq_ignore_ascii_case(b"WITHSCORES") {
            with_scores = true;
            j += 1;
        } else if card && remaining >= 2 && o.eq_ignore_ascii_case(b"LIMIT") {
            limit = match crate::value::parse_i64(args.get(j + 1)) {
                Some(l) if l >= 0 => l as u64,
                _ => return Err(raw("ERR LIMIT can't be negative")),
            };
            j += 2;
        } else {
            return Err(raw(SYNTAX));
        }
    }
    let result = compute(op, src, agg);
    if store {
        let n = result.len();
        store_result(view, args.get(1), result)?;
        reply.int(n as i64);
    } else if card {
        let n = result.len() as u64;
        let n = if limit > 0 { n.min(limit) } else { n };
        reply.int(n as i64);
    } else {
        let items: Vec<(f64, Member)> = result.iter().map(|(s, m)| (s, m.clone())).collect();
        reply_entries(reply, &items, with_scores);
    }
    Ok(())
}
