//! Eventual-consistency quorums (spec §§4–6): request parameters, the pre-checks run before
//! any fan-out, and the GET / PUT reply tallies that decide when a coordinator has heard
//! enough and what it answers.
//!
//! Guarantees:
//! - [`Params::resolve`] takes each parameter from the request, else the bucket, else the
//!   spec's default; symbolic values resolve against N (`one`=1, `quorum`=⌊N/2⌋+1, `all`=N);
//!   the effective DW is `max(dw, pw)`;
//! - [`precheck_get`] / [`precheck_put`] run the spec's pre-checks **in the spec's order** and
//!   return the first failure;
//! - [`GetTally`] and [`PutTally`] are pure state machines fed one reply at a time. Their
//!   `is_enough` is the spec's "enough" disjunction and their `outcome` the spec's reply rules,
//!   first matching rule wins, evaluated literally on the counters. They never answer ok with
//!   fewer than R oks / PR primary oks (GET) or W, DW, PW, NC, DC acks (PUT), and once every
//!   apl member has replied they are always enough (exhaustively tested for N ≤ 4).
//!
//! Choices where the spec is silent:
//! - `n_val_violation` is returned when N is 0, when R (GET) or W (PUT) resolves to 0, or when
//!   any value the operation uses exceeds N (GET: R, PR; PUT: W, DW, PW, node_confirms,
//!   dc_confirms);
//! - `dc_confirms` gets a fifth pre-check after `node_confirms`: more than the distinct DCs
//!   in the apl gives `dc_confirms_val_unsatisfied`;
//! - GET reply rule 1 with no object among the ok replies (every ok was a notfound counted
//!   as ok) is [`GetReply::NotFound`]; otherwise [`GetReply::Merge`], and the coordinator
//!   replies notfound if the merged object is tombstone-only;
//! - PW is counted on dw-acks from primaries ([`PutTally::dw_ack`]); `nodes` and `dcs` on
//!   w-acks ([`PutTally::w_ack`]);
//! - when a PUT is enough only because every reply is in (`dw + fail ≥ |apl|`, possible with
//!   a short apl) and none of rules 1–6 matches, the reply names the first unmet quorum in
//!   the order PW (if PW ≥ DW), DW, W, subject to the overload override like rules 2–6;
//! - a timeout is [`QuorumError::Timeout`] with `need` = R (GET) or W (PUT), `ok` = oks or
//!   w-acks, `nf` = notfounds not counted as ok (0 for PUT).

use crate::error::QuorumError;
use crate::preflist::Preflist;
use crate::selection::ReplicaSelection;
use meridian_core::{DcId, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A replica count, possibly symbolic. In human-readable formats (TOML, JSON) it is written as
/// configuration files write it: `"one"`, `"quorum"`, `"all"` or a number; binary formats
/// (postcard, on the wire) get a tagged form, since they cannot read an untagged one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quorum {
    /// 1.
    One,
    /// ⌊N/2⌋ + 1.
    Quorum,
    /// N.
    All,
    /// An explicit number.
    Count(u32),
}

impl Quorum {
    /// The number this value stands for with `n` replicas.
    pub fn resolve(self, n: u32) -> u32 {
        match self {
            Quorum::One => 1,
            Quorum::Quorum => n / 2 + 1,
            Quorum::All => n,
            Quorum::Count(k) => k,
        }
    }
}

/// [`Quorum`]'s form in binary formats.
#[derive(Serialize, Deserialize)]
enum Tagged {
    One,
    Quorum,
    All,
    Count(u32),
}

impl Serialize for Quorum {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (s.is_human_readable(), *self) {
            (true, Quorum::One) => s.serialize_str("one"),
            (true, Quorum::Quorum) => s.serialize_str("quorum"),
            (true, Quorum::All) => s.serialize_str("all"),
            (true, Quorum::Count(k)) => s.serialize_u32(k),
            (false, Quorum::One) => Tagged::One.serialize(s),
            (false, Quorum::Quorum) => Tagged::Quorum.serialize(s),
            (false, Quorum::All) => Tagged::All.serialize(s),
            (false, Quorum::Count(k)) => Tagged::Count(k).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Quorum {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Number(u32),
            Name(String),
        }
        if !d.is_human_readable() {
            return Ok(match Tagged::deserialize(d)? {
                Tagged::One => Quorum::One,
                Tagged::Quorum => Quorum::Quorum,
                Tagged::All => Quorum::All,
                Tagged::Count(k) => Quorum::Count(k),
            });
        }
        Ok(match Written::deserialize(d)? {
            Written::Number(k) => Quorum::Count(k),
            Written::Name(name) => match name.as_str() {
                "one" => Quorum::One,
                "quorum" => Quorum::Quorum,
                "all" => Quorum::All,
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "invalid quorum value {other:?}: expected one, quorum, all or a number"
                    )));
                }
            },
        })
    }
}

/// What becomes of a key's tombstone once a GET found it, the same, on every primary and
/// nothing to repair (Riak's `delete_mode`). In human-readable formats: `"keep"`,
/// `"immediate"`, or a delay in milliseconds; binary formats get a tagged form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeleteMode {
    /// Tombstones stay.
    Keep,
    /// Reaped at once.
    Immediate,
    /// Reaped this many milliseconds later (default 3000: time for hints still on their way
    /// to arrive before the key is forgotten).
    DelayMs(u64),
}

/// [`DeleteMode`]'s form in binary formats.
#[derive(Serialize, Deserialize)]
enum TaggedDeleteMode {
    Keep,
    Immediate,
    DelayMs(u64),
}

impl Serialize for DeleteMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (s.is_human_readable(), *self) {
            (true, DeleteMode::Keep) => s.serialize_str("keep"),
            (true, DeleteMode::Immediate) => s.serialize_str("immediate"),
            (true, DeleteMode::DelayMs(ms)) => s.serialize_u64(ms),
            (false, DeleteMode::Keep) => TaggedDeleteMode::Keep.serialize(s),
            (false, DeleteMode::Immediate) => TaggedDeleteMode::Immediate.serialize(s),
            (false, DeleteMode::DelayMs(ms)) => TaggedDeleteMode::DelayMs(ms).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for DeleteMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Number(u64),
            Name(String),
        }
        if !d.is_human_readable() {
            return Ok(match TaggedDeleteMode::deserialize(d)? {
                TaggedDeleteMode::Keep => DeleteMode::Keep,
                TaggedDeleteMode::Immediate => DeleteMode::Immediate,
                TaggedDeleteMode::DelayMs(ms) => DeleteMode::DelayMs(ms),
            });
        }
        Ok(match Written::deserialize(d)? {
            Written::Number(ms) if ms <= MAX_DELETE_DELAY_MS => DeleteMode::DelayMs(ms),
            Written::Number(ms) => {
                return Err(serde::de::Error::custom(format!(
                    "invalid delete_mode {ms}: a delay is at most {MAX_DELETE_DELAY_MS} ms"
                )));
            }
            Written::Name(name) => match name.as_str() {
                "keep" => DeleteMode::Keep,
                "immediate" => DeleteMode::Immediate,
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "invalid delete_mode {other:?}: expected keep, immediate or a delay in ms"
                    )));
                }
            },
        })
    }
}

/// The longest `delete_mode` delay: one day.
pub const MAX_DELETE_DELAY_MS: u64 = 86_400_000;

/// Where GETs are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadFanout {
    /// To the whole apl (Riak).
    All,
    /// To the first R of the apl, local first; the next on failure or after `hedge_ms`.
    Quorum,
}

/// Parameters as set on a bucket or a request: `None` means "not set here". Serializable both
/// as configuration (TOML bucket tables, JSON) and on the wire (a forwarded write carries its
/// overrides), so every field is always written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Props {
    /// Replicas.
    pub n_val: Option<u32>,
    /// Replies needed for GET.
    pub r: Option<Quorum>,
    /// Acks needed for PUT.
    pub w: Option<Quorum>,
    /// Durable acks needed for PUT.
    pub dw: Option<Quorum>,
    /// GET replies that must come from primaries.
    pub pr: Option<Quorum>,
    /// PUT durable acks that must come from primaries.
    pub pw: Option<Quorum>,
    /// Distinct physical nodes among the w-acks.
    pub node_confirms: Option<Quorum>,
    /// Distinct DCs among the w-acks (Meridian extension).
    pub dc_confirms: Option<Quorum>,
    /// Whether a notfound counts as an ok reply.
    pub notfound_ok: Option<bool>,
    /// Whether to fail early after a majority of not-ok replies.
    pub basic_quorum: Option<bool>,
    /// Siblings (`true`) or last-writer-wins (`false`).
    pub allow_mult: Option<bool>,
    /// Where GETs are sent.
    pub read_fanout: Option<ReadFanout>,
    /// With `read_fanout = quorum`: after this many milliseconds without enough replies, the
    /// next apl entry is asked too.
    pub hedge_ms: Option<u64>,
    /// Whole-request timeout, milliseconds (default 60 000): how long a coordinator waits for
    /// enough replies before answering `timeout` (RESP `-TIMEOUT`, HTTP 504, whose message
    /// names this property). A write whose replicas a partition cut off waits this long;
    /// set it per bucket (`timeout_ms` in `PUT /buckets/{name}`, `meridian ctl bucket set`,
    /// `[buckets.NAME]`) or per request (`TIMEOUT ms`, `?timeout_ms=`).
    pub timeout_ms: Option<u64>,
    /// Which replicas a read asks first.
    pub replica_selection: Option<ReplicaSelection>,
    /// What becomes of tombstones every primary holds.
    pub delete_mode: Option<DeleteMode>,
}

/// The longest duration a request option may ask for (`TIMEOUT`/`timeout_ms`,
/// `HEDGE_MS`/`hedge_ms`): one hour. Larger values are refused naming the option, so no
/// request-supplied duration is added to an `Instant` unbounded.
pub const MAX_DURATION_MS: u64 = 3_600_000;

/// The longest duration a bucket property may set (`timeout_ms`, `hedge_ms`, a timeline
/// bucket's `master_timeout_ms`): 30 days, so virtual-time studies can say "never" (10 days)
/// while no configured duration overflows an `Instant`.
pub const MAX_PROPERTY_MS: u64 = 30 * 24 * 3_600_000;

/// Fully resolved parameters (symbolic values kept until N is applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// Replicas (default 3).
    pub n_val: u32,
    /// Default `quorum`.
    pub r: Quorum,
    /// Default `quorum`.
    pub w: Quorum,
    /// Default `quorum`.
    pub dw: Quorum,
    /// Default 0.
    pub pr: Quorum,
    /// Default 0.
    pub pw: Quorum,
    /// Default 0.
    pub node_confirms: Quorum,
    /// Default 0.
    pub dc_confirms: Quorum,
    /// Default `true`.
    pub notfound_ok: bool,
    /// Default `false`.
    pub basic_quorum: bool,
    /// Default `true`.
    pub allow_mult: bool,
    /// Default `all`.
    pub read_fanout: ReadFanout,
    /// Default 50.
    pub hedge_ms: u64,
    /// Default 60000 ([`Props::timeout_ms`]).
    pub timeout_ms: u64,
    /// Default `local_first`.
    pub replica_selection: ReplicaSelection,
    /// Default a 3000 ms delay.
    pub delete_mode: DeleteMode,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            n_val: 3,
            r: Quorum::Quorum,
            w: Quorum::Quorum,
            dw: Quorum::Quorum,
            pr: Quorum::Count(0),
            pw: Quorum::Count(0),
            node_confirms: Quorum::Count(0),
            dc_confirms: Quorum::Count(0),
            notfound_ok: true,
            basic_quorum: false,
            allow_mult: true,
            read_fanout: ReadFanout::All,
            hedge_ms: 50,
            timeout_ms: 60_000,
            replica_selection: ReplicaSelection::LocalFirst,
            delete_mode: DeleteMode::DelayMs(3000),
        }
    }
}

impl Params {
    /// Each parameter from `request`, else `bucket`, else the default.
    pub fn resolve(request: &Props, bucket: &Props) -> Params {
        let d = Params::default();
        macro_rules! pick {
            ($f:ident) => {
                request.$f.or(bucket.$f).unwrap_or(d.$f)
            };
        }
        Params {
            n_val: pick!(n_val),
            r: pick!(r),
            w: pick!(w),
            dw: pick!(dw),
            pr: pick!(pr),
            pw: pick!(pw),
            node_confirms: pick!(node_confirms),
            dc_confirms: pick!(dc_confirms),
            notfound_ok: pick!(notfound_ok),
            basic_quorum: pick!(basic_quorum),
            allow_mult: pick!(allow_mult),
            read_fanout: pick!(read_fanout),
            hedge_ms: pick!(hedge_ms),
            timeout_ms: pick!(timeout_ms),
            replica_selection: pick!(replica_selection),
            delete_mode: pick!(delete_mode),
        }
    }

    /// The numeric GET parameters, or `n_val_violation` (pre-check 1).
    pub fn get(&self) -> Result<GetParams, QuorumError> {
        let n = self.n_val;
        let (r, pr) = (self.r.resolve(n), self.pr.resolve(n));
        if n == 0 || r == 0 || r > n || pr > n {
            return Err(QuorumError::NValViolation { n });
        }
        Ok(GetParams {
            n,
            r,
            pr,
            notfound_ok: self.notfound_ok,
            basic_quorum: self.basic_quorum,
        })
    }

    /// The numeric PUT parameters (DW effective), or `n_val_violation` (pre-check 1).
    pub fn put(&self) -> Result<PutParams, QuorumError> {
        let n = self.n_val;
        let r = |q: Quorum| q.resolve(n);
        let (w, dw, pw) = (r(self.w), r(self.dw), r(self.pw));
        let (nc, dcc) = (r(self.node_confirms), r(self.dc_confirms));
        if n == 0 || w == 0 || [w, dw, pw, nc, dcc].iter().any(|&v| v > n) {
            return Err(QuorumError::NValViolation { n });
        }
        Ok(PutParams {
            n,
            w,
            dw: dw.max(pw),
            pw,
            node_confirms: nc,
            dc_confirms: dcc,
        })
    }
}

/// Numeric GET parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetParams {
    /// N.
    pub n: u32,
    /// R.
    pub r: u32,
    /// PR.
    pub pr: u32,
    /// Whether a notfound counts as ok.
    pub notfound_ok: bool,
    /// Whether to fail early after a majority of not-ok replies.
    pub basic_quorum: bool,
}

/// Numeric PUT parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutParams {
    /// N.
    pub n: u32,
    /// W.
    pub w: u32,
    /// Effective DW = max(dw, pw).
    pub dw: u32,
    /// PW.
    pub pw: u32,
    /// NC.
    pub node_confirms: u32,
    /// DC confirms.
    pub dc_confirms: u32,
}

/// What the pre-checks need to know about a preference list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AplSummary {
    /// |apl|.
    pub len: u32,
    /// Primaries in the apl.
    pub primaries: u32,
    /// Distinct nodes in the apl.
    pub distinct_nodes: u32,
    /// Distinct DCs in the apl.
    pub distinct_dcs: u32,
}

impl From<&Preflist> for AplSummary {
    fn from(p: &Preflist) -> AplSummary {
        AplSummary {
            len: p.len() as u32,
            primaries: p.primaries() as u32,
            distinct_nodes: p.distinct_nodes() as u32,
            distinct_dcs: p.distinct_dcs() as u32,
        }
    }
}

/// GET pre-checks in order: `n_val_violation`, `pr_val_unsatisfied`, `insufficient_vnodes`.
pub fn precheck_get(params: &Params, apl: AplSummary) -> Result<GetParams, QuorumError> {
    let g = params.get()?;
    if g.pr > apl.primaries {
        return Err(QuorumError::PrValUnsatisfied {
            need: g.pr,
            got: apl.primaries,
        });
    }
    if apl.len < g.r {
        return Err(QuorumError::InsufficientVnodes {
            have: apl.len,
            need: g.r,
        });
    }
    Ok(g)
}

/// PUT pre-checks in order: `n_val_violation`, `pw_val_unsatisfied`, `insufficient_vnodes`,
/// `node_confirms_val_unsatisfied`, then `dc_confirms_val_unsatisfied`.
pub fn precheck_put(params: &Params, apl: AplSummary) -> Result<PutParams, QuorumError> {
    let p = params.put()?;
    if p.pw > apl.primaries {
        return Err(QuorumError::PwValUnsatisfied {
            need: p.pw,
            got: apl.primaries,
        });
    }
    let need = p.w.max(p.dw);
    if apl.len < need {
        return Err(QuorumError::InsufficientVnodes {
            have: apl.len,
            need,
        });
    }
    if p.node_confirms > apl.distinct_nodes {
        return Err(QuorumError::NodeConfirmsValUnsatisfied {
            need: p.node_confirms,
            got: apl.distinct_nodes,
        });
    }
    if p.dc_confirms > apl.distinct_dcs {
        return Err(QuorumError::DcConfirmsValUnsatisfied {
            need: p.dc_confirms,
            got: apl.distinct_dcs,
        });
    }
    Ok(p)
}

/// A failed reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FailKind {
    /// The replica answered with an error.
    Error,
    /// The replica did not answer in time.
    Timeout,
    /// The replica shed the request.
    Overload,
}

/// A successful GET answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetReply {
    /// Rule 1: merge the ok objects and reply the values and context (notfound if the merge
    /// is tombstone-only).
    Merge,
    /// Rule 1 with no object among the oks, or rule 2.
    NotFound,
}

/// The GET reply counters of spec §5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetTally {
    p: GetParams,
    apl_len: u32,
    ok: u32,
    pok: u32,
    del: u32,
    objects: u32,
    nf: u32,
    fail: u32,
    overload: bool,
}

impl GetTally {
    /// A tally for a GET sent to `apl_len` replicas.
    pub fn new(p: GetParams, apl_len: u32) -> GetTally {
        GetTally {
            p,
            apl_len,
            ok: 0,
            pok: 0,
            del: 0,
            objects: 0,
            nf: 0,
            fail: 0,
            overload: false,
        }
    }

    /// An object reply; `is_tombstone` if it is tombstone-only.
    pub fn ok(&mut self, from_primary: bool, is_tombstone: bool) {
        self.ok += 1;
        self.objects += 1;
        self.pok += u32::from(from_primary);
        self.del += u32::from(is_tombstone);
    }

    /// A notfound reply.
    pub fn notfound(&mut self, from_primary: bool) {
        if self.p.notfound_ok {
            self.ok += 1;
            self.pok += u32::from(from_primary);
        } else {
            self.nf += 1;
        }
    }

    /// An error, timeout or overload reply.
    pub fn fail(&mut self, kind: FailKind) {
        self.fail += 1;
        self.overload |= kind == FailKind::Overload;
    }

    /// `N − R + 1`, or `min(⌊N/2⌋+1, N − R + 1)` with `basic_quorum`.
    pub fn fail_threshold(&self) -> u32 {
        let t = (self.p.n + 1).saturating_sub(self.p.r);
        if self.p.basic_quorum {
            t.min(self.p.n / 2 + 1)
        } else {
            t
        }
    }

    /// Replies so far.
    pub fn replies(&self) -> u32 {
        self.ok + self.nf + self.fail
    }

    /// `(ok, pok, del, nf, fail)`.
    pub fn counts(&self) -> (u32, u32, u32, u32, u32) {
        (self.ok, self.pok, self.del, self.nf, self.fail)
    }

    fn quorum_met(&self) -> bool {
        self.ok >= self.p.r && self.pok >= self.p.pr
    }

    /// The spec's "enough".
    pub fn is_enough(&self) -> bool {
        self.quorum_met()
            || self.nf + self.fail >= self.fail_threshold()
            || self.replies() >= self.apl_len
    }

    /// The reply (first matching rule), or `None` while not enough.
    pub fn outcome(&self) -> Option<Result<GetReply, QuorumError>> {
        if !self.is_enough() {
            return None;
        }
        let GetParams { r, pr, .. } = self.p;
        Some(if self.quorum_met() {
            Ok(if self.objects == 0 {
                GetReply::NotFound
            } else {
                GetReply::Merge
            })
        } else if self.nf + self.del > 0 && self.ok - self.del == 0 && self.fail == 0 {
            Ok(GetReply::NotFound)
        } else if self.overload {
            Err(QuorumError::Overload)
        } else if (pr > 0 && self.pok < pr && self.ok >= r) || pr >= r {
            Err(QuorumError::PrValUnsatisfied {
                need: pr,
                got: self.pok,
            })
        } else {
            Err(QuorumError::RValUnsatisfied {
                need: r,
                got: self.ok,
            })
        })
    }

    /// The error when the request timer expires before an outcome.
    pub fn timed_out(&self) -> QuorumError {
        QuorumError::Timeout {
            need: self.p.r,
            ok: self.ok,
            nf: self.nf,
            fail: self.fail,
        }
    }
}

/// The PUT ack counters of spec §6.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutTally {
    p: PutParams,
    apl_len: u32,
    w: u32,
    dw: u32,
    pw: u32,
    fail: u32,
    /// Replicas that applied the write (counted in `w`) but could not make it durable.
    dw_fail: u32,
    overload: bool,
    nodes: BTreeSet<NodeId>,
    dcs: BTreeSet<DcId>,
}

impl PutTally {
    /// A tally for a PUT applied by `apl_len` replicas (the coordinator included).
    pub fn new(p: PutParams, apl_len: u32) -> PutTally {
        PutTally {
            p,
            apl_len,
            w: 0,
            dw: 0,
            pw: 0,
            fail: 0,
            dw_fail: 0,
            overload: false,
            nodes: BTreeSet::new(),
            dcs: BTreeSet::new(),
        }
    }

    /// A replica in `dc` applied the write.
    pub fn w_ack(&mut self, node: NodeId, dc: DcId) {
        self.w += 1;
        self.nodes.insert(node);
        self.dcs.insert(dc);
    }

    /// A replica made the write durable; PW counts those from primaries.
    pub fn dw_ack(&mut self, from_primary: bool) {
        self.dw += 1;
        self.pw += u32::from(from_primary);
    }

    /// A replica failed (error, timeout or overload).
    pub fn fail(&mut self, kind: FailKind) {
        self.fail += 1;
        self.overload |= kind == FailKind::Overload;
    }

    /// A replica that applied the write (its `w` already counted) failed to make it
    /// durable: a failure for DW and PW, not for W.
    pub fn dw_fail(&mut self) {
        self.dw_fail += 1;
    }

    /// `(w, dw, pw, distinct nodes, distinct dcs, fail)`.
    pub fn counts(&self) -> (u32, u32, u32, u32, u32, u32) {
        (
            self.w,
            self.dw,
            self.pw,
            self.nodes.len() as u32,
            self.dcs.len() as u32,
            self.fail,
        )
    }

    fn ft(&self, need: u32) -> u32 {
        (self.p.n + 1).saturating_sub(need)
    }

    fn all_met(&self) -> bool {
        let p = &self.p;
        self.w >= p.w
            && self.dw >= p.dw
            && self.pw >= p.pw
            && self.nodes.len() as u32 >= p.node_confirms
            && self.dcs.len() as u32 >= p.dc_confirms
    }

    /// The spec's "enough".
    pub fn is_enough(&self) -> bool {
        let durable_fail = self.fail + self.dw_fail;
        self.all_met()
            || durable_fail >= self.ft(self.p.pw)
            || durable_fail >= self.ft(self.p.dw)
            || self.fail >= self.ft(self.p.w)
            || self.dw + durable_fail >= self.apl_len
    }

    /// The reply (first matching rule), or `None` while not enough.
    pub fn outcome(&self) -> Option<Result<(), QuorumError>> {
        if !self.is_enough() {
            return None;
        }
        if self.all_met() {
            return Some(Ok(()));
        }
        if self.overload {
            return Some(Err(QuorumError::Overload));
        }
        let p = &self.p;
        let (nodes, dcs) = (self.nodes.len() as u32, self.dcs.len() as u32);
        let w_dw = self.w >= p.w && self.dw >= p.dw;
        let pw_err = QuorumError::PwValUnsatisfied {
            need: p.pw,
            got: self.pw,
        };
        let dw_err = QuorumError::DwValUnsatisfied {
            need: p.dw,
            got: self.dw,
        };
        let w_err = QuorumError::WValUnsatisfied {
            need: p.w,
            got: self.w,
        };
        Some(Err(if w_dw && self.pw < p.pw {
            pw_err
        } else if w_dw && nodes < p.node_confirms {
            QuorumError::NodeConfirmsValUnsatisfied {
                need: p.node_confirms,
                got: nodes,
            }
        } else if w_dw && dcs < p.dc_confirms {
            QuorumError::DcConfirmsValUnsatisfied {
                need: p.dc_confirms,
                got: dcs,
            }
        } else if self.fail + self.dw_fail >= self.ft(p.pw) && p.pw >= p.dw {
            pw_err
        } else if self.fail + self.dw_fail >= self.ft(p.dw) {
            dw_err
        } else if self.fail >= self.ft(p.w) {
            w_err
        } else if self.pw < p.pw && p.pw >= p.dw {
            pw_err
        } else if self.dw < p.dw {
            dw_err
        } else {
            w_err
        }))
    }

    /// The error when the request timer expires before an outcome.
    pub fn timed_out(&self) -> QuorumError {
        QuorumError::Timeout {
            need: self.p.w,
            ok: self.w,
            nf: 0,
            fail: self.fail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_that_applied_but_could_not_sync_fails_dw_not_w() {
        let params = |w, dw| PutParams {
            n: 3,
            w,
            dw,
            pw: 0,
            node_confirms: 0,
            dc_confirms: 0,
        };
        // W = 3, DW = 2: the coordinator is durable, both replicas applied but failed to
        // sync. W is met; DW is not.
        let mut t = PutTally::new(params(3, 2), 3);
        t.w_ack(NodeId(1), DcId(0));
        t.dw_ack(true);
        t.w_ack(NodeId(2), DcId(0));
        t.dw_fail();
        // The third replica may still sync.
        assert_eq!(t.outcome(), None);
        t.w_ack(NodeId(3), DcId(0));
        t.dw_fail();
        assert_eq!(
            t.outcome(),
            Some(Err(QuorumError::DwValUnsatisfied { need: 2, got: 1 }))
        );
        // DW = 1 is met by the coordinator alone, whatever the replicas' syncs do.
        let mut t = PutTally::new(params(3, 1), 3);
        t.w_ack(NodeId(1), DcId(0));
        t.dw_ack(true);
        t.w_ack(NodeId(2), DcId(0));
        t.dw_fail();
        assert_eq!(t.outcome(), None);
        t.w_ack(NodeId(3), DcId(0));
        t.dw_fail();
        assert_eq!(t.outcome(), Some(Ok(())));
    }

    /// Props travel both as configuration (human-readable) and inside forwarded writes
    /// (postcard): both forms must round-trip, and the human one must read as configured.
    #[test]
    fn props_round_trip_on_the_wire_and_in_configuration() {
        let props = Props {
            n_val: Some(3),
            r: Some(Quorum::One),
            w: Some(Quorum::Count(2)),
            dw: Some(Quorum::All),
            pr: Some(Quorum::Quorum),
            timeout_ms: Some(500),
            ..Props::default()
        };
        let wire = postcard::to_allocvec(&props).unwrap();
        assert_eq!(postcard::from_bytes::<Props>(&wire).unwrap(), props);

        let json = serde_json::to_value(props).unwrap();
        assert_eq!(json["r"], "one");
        assert_eq!(json["w"], 2);
        assert_eq!(json["dw"], "all");
        assert_eq!(serde_json::from_value::<Props>(json).unwrap(), props);
        let written: Props = serde_json::from_str(r#"{"r": "quorum", "w": 1}"#).unwrap();
        assert_eq!(
            (written.r, written.w),
            (Some(Quorum::Quorum), Some(Quorum::Count(1)))
        );
        assert!(serde_json::from_str::<Props>(r#"{"r": "most"}"#).is_err());
    }

    #[test]
    fn delete_mode_reads_its_three_forms_round_trips_and_refuses_the_rest() {
        for (text, mode) in [
            (r#""keep""#, DeleteMode::Keep),
            (r#""immediate""#, DeleteMode::Immediate),
            ("3000", DeleteMode::DelayMs(3000)),
            ("86400000", DeleteMode::DelayMs(MAX_DELETE_DELAY_MS)),
        ] {
            let props: Props =
                serde_json::from_str(&format!(r#"{{"delete_mode": {text}}}"#)).unwrap();
            assert_eq!(props.delete_mode, Some(mode), "{text}");
            let wire = postcard::to_allocvec(&props).unwrap();
            assert_eq!(postcard::from_bytes::<Props>(&wire).unwrap(), props);
            assert_eq!(
                serde_json::from_value::<Props>(serde_json::to_value(props).unwrap()).unwrap(),
                props
            );
        }
        for bad in [r#""sometimes""#, "86400001", "-1", r#""""#, "1e30"] {
            let e = serde_json::from_str::<Props>(&format!(r#"{{"delete_mode": {bad}}}"#))
                .expect_err(bad)
                .to_string();
            assert!(
                e.contains("delete_mode") || e.contains("did not match"),
                "{bad}: {e}"
            );
        }
    }
    use QuorumError as E;

    fn q(k: u32) -> Quorum {
        Quorum::Count(k)
    }

    fn gp(n: u32, r: u32, pr: u32, notfound_ok: bool, basic_quorum: bool) -> GetParams {
        GetParams {
            n,
            r,
            pr,
            notfound_ok,
            basic_quorum,
        }
    }

    /// Feeds GET replies: `P`/`F` ok from primary/fallback, `T` tombstone from a primary,
    /// `n`/`m` notfound from primary/fallback, `e` error, `t` timeout, `o` overload.
    fn get(p: GetParams, apl: u32, seq: &str) -> GetTally {
        let mut t = GetTally::new(p, apl);
        for c in seq.chars() {
            match c {
                'P' => t.ok(true, false),
                'F' => t.ok(false, false),
                'T' => t.ok(true, true),
                'n' => t.notfound(true),
                'm' => t.notfound(false),
                'e' => t.fail(FailKind::Error),
                't' => t.fail(FailKind::Timeout),
                'o' => t.fail(FailKind::Overload),
                _ => unreachable!("{c}"),
            }
        }
        t
    }

    fn get_out(p: GetParams, apl: u32, seq: &str) -> Option<Result<GetReply, QuorumError>> {
        get(p, apl, seq).outcome()
    }

    use GetReply::{Merge, NotFound};

    #[test]
    fn get_enough_conditions() {
        let p = gp(3, 2, 0, true, false);
        // ok ≥ R && pok ≥ PR.
        assert_eq!(get_out(p, 3, "P"), None);
        assert_eq!(get_out(p, 3, "PF"), Some(Ok(Merge)));
        // pok < PR keeps waiting though ok ≥ R.
        let p2 = gp(3, 2, 2, true, false);
        assert_eq!(get_out(p2, 3, "FF"), None);
        assert_eq!(get_out(p2, 3, "FP"), None);
        assert_eq!(get_out(p2, 3, "FPP"), Some(Ok(Merge)));
        // nf + fail ≥ N − R + 1.
        let p3 = gp(3, 2, 0, false, false);
        assert_eq!(get(p3, 3, "n").fail_threshold(), 2);
        assert_eq!(get_out(p3, 3, "n"), None);
        assert!(get(p3, 3, "ne").is_enough());
        // Every reply in, with a short apl.
        assert_eq!(get_out(p, 3, "Pe"), None);
        assert_eq!(
            get_out(p, 2, "Pe"),
            Some(Err(E::RValUnsatisfied { need: 2, got: 1 }))
        );
    }

    #[test]
    fn basic_quorum_lowers_the_fail_threshold() {
        let on = gp(5, 1, 0, false, true);
        let off = gp(5, 1, 0, false, false);
        assert_eq!(get(on, 5, "").fail_threshold(), 3);
        assert_eq!(get(off, 5, "").fail_threshold(), 5);
        assert_eq!(get_out(on, 5, "nnn"), Some(Ok(NotFound)));
        assert_eq!(get_out(off, 5, "nnn"), None);
        assert_eq!(
            get_out(on, 5, "nne"),
            Some(Err(E::RValUnsatisfied { need: 1, got: 0 }))
        );
        // N − R + 1 is smaller than ⌊N/2⌋+1 for a large R.
        assert_eq!(get(gp(5, 4, 0, false, true), 5, "").fail_threshold(), 2);
    }

    #[test]
    fn notfound_ok_decides_what_a_first_notfound_means() {
        // Spec invariant 9: with notfound_ok and R=1, a stale replica's notfound wins.
        assert_eq!(
            get_out(gp(3, 1, 0, true, false), 3, "n"),
            Some(Ok(NotFound))
        );
        // Without it the notfound waits and the value wins.
        assert_eq!(get_out(gp(3, 1, 0, false, false), 3, "n"), None);
        assert_eq!(get_out(gp(3, 1, 0, false, false), 3, "nP"), Some(Ok(Merge)));
        // notfound counted as ok also counts as a primary ok.
        assert_eq!(get_out(gp(3, 2, 2, true, false), 3, "nP"), Some(Ok(Merge)));
        assert_eq!(get_out(gp(3, 2, 2, true, false), 3, "mP"), None);
    }

    #[test]
    fn get_reply_rule_2_notfound() {
        let p = gp(3, 2, 0, false, false);
        assert_eq!(get_out(p, 3, "nn"), Some(Ok(NotFound)));
        // A failure among them voids rule 2.
        assert_eq!(
            get_out(p, 3, "ne"),
            Some(Err(E::RValUnsatisfied { need: 2, got: 0 }))
        );
        // Tombstones count with notfounds.
        let p3 = gp(3, 3, 0, false, false);
        assert_eq!(get_out(p3, 3, "T"), None);
        assert_eq!(get_out(p3, 3, "Tn"), Some(Ok(NotFound)));
        // A live value voids it.
        assert_eq!(
            get_out(p3, 3, "Pn"),
            Some(Err(E::RValUnsatisfied { need: 3, got: 1 }))
        );
    }

    #[test]
    fn get_reply_rules_3_to_5() {
        // Rule 3: enough oks but too few from primaries.
        assert_eq!(
            get_out(gp(3, 1, 2, true, false), 3, "FFP"),
            Some(Err(E::PrValUnsatisfied { need: 2, got: 1 }))
        );
        // Rule 4: PR ≥ R.
        assert_eq!(
            get_out(gp(3, 2, 2, true, false), 3, "ee"),
            Some(Err(E::PrValUnsatisfied { need: 2, got: 0 }))
        );
        // Flip PR to 1 (< R): rule 5.
        assert_eq!(
            get_out(gp(3, 2, 1, true, false), 3, "ee"),
            Some(Err(E::RValUnsatisfied { need: 2, got: 0 }))
        );
        // Overload turns rules 3–5 into overload, whichever failure came first.
        assert_eq!(
            get_out(gp(3, 2, 0, true, false), 3, "eo"),
            Some(Err(E::Overload))
        );
        assert_eq!(
            get_out(gp(3, 2, 2, true, false), 3, "oe"),
            Some(Err(E::Overload))
        );
        // ... but not rule 1.
        assert_eq!(get_out(gp(3, 1, 0, true, false), 3, "oP"), Some(Ok(Merge)));
        // A timeout reply is a failure, not an overload.
        assert_eq!(
            get_out(gp(3, 2, 0, true, false), 3, "tt"),
            Some(Err(E::RValUnsatisfied { need: 2, got: 0 }))
        );
    }

    #[test]
    fn get_timeout_error() {
        let t = get(gp(3, 2, 0, false, false), 3, "Pn");
        assert_eq!(t.outcome(), None);
        let e = t.timed_out();
        assert_eq!(
            e,
            E::Timeout {
                need: 2,
                ok: 1,
                nf: 1,
                fail: 0
            }
        );
        assert_eq!(e.to_string(), "timeout need=2 ok=1 nf=1 fail=0");
    }

    fn pp(n: u32, w: u32, dw: u32, pw: u32, nc: u32, dcc: u32) -> PutParams {
        PutParams {
            n,
            w,
            dw: dw.max(pw),
            pw,
            node_confirms: nc,
            dc_confirms: dcc,
        }
    }

    #[derive(Clone, Copy)]
    enum Ack {
        /// w then dw from (node, dc, primary).
        Full(u32, u32, bool),
        /// w only.
        W(u32, u32),
        /// dw from (primary).
        Dw(bool),
        Fail(FailKind),
    }
    use Ack::*;

    fn put(p: PutParams, apl: u32, acks: &[Ack]) -> PutTally {
        let mut t = PutTally::new(p, apl);
        for a in acks {
            match *a {
                Full(n, d, pr) => {
                    t.w_ack(NodeId(n), DcId(d));
                    t.dw_ack(pr);
                }
                W(n, d) => t.w_ack(NodeId(n), DcId(d)),
                Dw(pr) => t.dw_ack(pr),
                Fail(k) => t.fail(k),
            }
        }
        t
    }

    fn put_out(p: PutParams, apl: u32, acks: &[Ack]) -> Option<Result<(), QuorumError>> {
        put(p, apl, acks).outcome()
    }

    const ERR: Ack = Fail(FailKind::Error);
    const OVL: Ack = Fail(FailKind::Overload);

    #[test]
    fn put_all_met() {
        let p = pp(3, 2, 2, 0, 0, 0);
        assert_eq!(put_out(p, 3, &[Full(1, 0, true)]), None);
        assert_eq!(put_out(p, 3, &[Full(1, 0, true), W(2, 0)]), None);
        assert_eq!(
            put_out(p, 3, &[Full(1, 0, true), W(2, 0), Dw(false)]),
            Some(Ok(()))
        );
    }

    #[test]
    fn put_rule_2_pw_counted_on_primary_dw_acks() {
        let p = pp(3, 2, 2, 2, 0, 0);
        let two = [Full(1, 0, true), Full(2, 0, false)];
        assert_eq!(put_out(p, 3, &two), None);
        assert_eq!(
            put_out(p, 3, &[two[0], two[1], Full(3, 1, false)]),
            Some(Err(E::PwValUnsatisfied { need: 2, got: 1 }))
        );
        // Flip the third ack to a primary: ok.
        assert_eq!(
            put_out(p, 3, &[two[0], two[1], Full(3, 1, true)]),
            Some(Ok(()))
        );
    }

    #[test]
    fn put_rule_3_node_and_dc_confirms() {
        let p = pp(3, 2, 2, 0, 2, 0);
        let same_node = [Full(1, 0, true), Full(1, 0, true)];
        assert_eq!(put_out(p, 3, &same_node), None);
        assert_eq!(
            put_out(p, 3, &[same_node[0], same_node[1], ERR]),
            Some(Err(E::NodeConfirmsValUnsatisfied { need: 2, got: 1 }))
        );
        assert_eq!(
            put_out(p, 3, &[Full(1, 0, true), Full(2, 0, false)]),
            Some(Ok(()))
        );
        let d = pp(3, 2, 2, 0, 0, 2);
        assert_eq!(
            put_out(d, 3, &[Full(1, 0, true), Full(2, 0, true), ERR]),
            Some(Err(E::DcConfirmsValUnsatisfied { need: 2, got: 1 }))
        );
        assert_eq!(
            put_out(d, 3, &[Full(1, 0, true), Full(2, 1, true)]),
            Some(Ok(()))
        );
    }

    #[test]
    fn put_rules_4_to_6() {
        // Rule 4: fail > N − PW and PW ≥ DW (effective DW = max(1, 2) = 2).
        assert_eq!(
            put_out(pp(3, 1, 1, 2, 0, 0), 3, &[ERR, ERR]),
            Some(Err(E::PwValUnsatisfied { need: 2, got: 0 }))
        );
        assert_eq!(put_out(pp(3, 1, 1, 2, 0, 0), 3, &[ERR]), None);
        // Flip: PW 1 < DW 2 makes it rule 5.
        assert_eq!(
            put_out(pp(3, 1, 2, 1, 0, 0), 3, &[ERR, ERR]),
            Some(Err(E::DwValUnsatisfied { need: 2, got: 0 }))
        );
        // Rule 6: fail > N − W (Meridian: no waiting for the timeout).
        assert_eq!(
            put_out(pp(3, 3, 1, 0, 0, 0), 3, &[Full(1, 0, true), ERR]),
            Some(Err(E::WValUnsatisfied { need: 3, got: 1 }))
        );
        // Overload overrides rules 2–6.
        assert_eq!(
            put_out(pp(3, 3, 1, 0, 0, 0), 3, &[Full(1, 0, true), OVL]),
            Some(Err(E::Overload))
        );
        assert_eq!(
            put_out(
                pp(3, 2, 2, 2, 0, 0),
                3,
                &[Full(1, 0, true), Full(2, 0, false), OVL]
            ),
            Some(Err(E::Overload))
        );
        // ... but not rule 1.
        assert_eq!(
            put_out(pp(3, 1, 1, 0, 0, 0), 3, &[OVL, Full(1, 0, true)]),
            Some(Ok(()))
        );
    }

    #[test]
    fn put_every_reply_in_with_a_short_apl() {
        // apl 2 < N 3: a w-only ack and a failure. Enough once A's dw arrives (dw + fail = 2).
        let p = pp(3, 2, 2, 0, 0, 0);
        assert_eq!(put_out(p, 2, &[W(1, 0), ERR]), None);
        assert_eq!(
            put_out(p, 2, &[W(1, 0), ERR, Dw(true)]),
            Some(Err(E::DwValUnsatisfied { need: 2, got: 1 }))
        );
        let t = put(p, 2, &[W(1, 0)]);
        assert_eq!(
            t.timed_out(),
            E::Timeout {
                need: 2,
                ok: 1,
                nf: 0,
                fail: 0
            }
        );
    }

    fn apl(len: u32, primaries: u32, nodes: u32, dcs: u32) -> AplSummary {
        AplSummary {
            len,
            primaries,
            distinct_nodes: nodes,
            distinct_dcs: dcs,
        }
    }

    #[test]
    fn parameter_resolution() {
        let d = Params::resolve(&Props::default(), &Props::default());
        assert_eq!(d, Params::default());
        assert_eq!(d.get().unwrap(), gp(3, 2, 0, true, false));
        assert_eq!(d.put().unwrap(), pp(3, 2, 2, 0, 0, 0));
        let bucket = Props {
            n_val: Some(5),
            r: Some(Quorum::One),
            w: Some(Quorum::All),
            notfound_ok: Some(false),
            ..Props::default()
        };
        let request = Props {
            r: Some(Quorum::Quorum),
            pw: Some(q(4)),
            dw: Some(q(1)),
            ..Props::default()
        };
        let p = Params::resolve(&request, &bucket);
        assert_eq!(p.get().unwrap(), gp(5, 3, 0, false, false));
        let put = p.put().unwrap();
        assert_eq!(
            (put.w, put.dw, put.pw),
            (5, 4, 4),
            "effective dw = max(dw, pw)"
        );
        assert_eq!(
            Params::resolve(&Props::default(), &bucket).get().unwrap().r,
            1
        );
        assert_eq!(Quorum::Quorum.resolve(4), 3);
        assert_eq!(Quorum::All.resolve(4), 4);
    }

    #[test]
    fn n_val_violation_comes_first() {
        let p = Params {
            r: q(4),
            pr: q(3),
            ..Params::default()
        };
        assert_eq!(
            precheck_get(&p, apl(0, 0, 0, 0)),
            Err(E::NValViolation { n: 3 })
        );
        let zero = Params {
            w: q(0),
            ..Params::default()
        };
        assert_eq!(zero.put(), Err(E::NValViolation { n: 3 }));
        let nc = Params {
            node_confirms: q(4),
            ..Params::default()
        };
        assert_eq!(nc.put(), Err(E::NValViolation { n: 3 }));
        assert!(nc.get().is_ok(), "GET does not use node_confirms");
        assert_eq!(E::NValViolation { n: 3 }.to_string(), "n_val_violation n=3");
    }

    #[test]
    fn get_prechecks_in_order() {
        let p = Params {
            pr: q(2),
            ..Params::default()
        };
        // PR fails before insufficient_vnodes.
        assert_eq!(
            precheck_get(&p, apl(1, 1, 1, 1)),
            Err(E::PrValUnsatisfied { need: 2, got: 1 })
        );
        assert_eq!(
            precheck_get(&p, apl(1, 2, 1, 1)),
            Err(E::InsufficientVnodes { have: 1, need: 2 })
        );
        assert!(precheck_get(&p, apl(2, 2, 2, 1)).is_ok());
    }

    #[test]
    fn put_prechecks_in_order() {
        // Spec invariant 8: PW=2 with two primaries down (two fallbacks in the apl).
        let pw2 = Params {
            pw: q(2),
            ..Params::default()
        };
        assert_eq!(
            precheck_put(&pw2, apl(3, 1, 3, 2)),
            Err(E::PwValUnsatisfied { need: 2, got: 1 })
        );
        assert!(precheck_put(&pw2, apl(3, 2, 3, 2)).is_ok());
        // |apl| < max(W, DW).
        let dw3 = Params {
            w: q(1),
            dw: q(3),
            ..Params::default()
        };
        assert_eq!(
            precheck_put(&dw3, apl(2, 2, 2, 1)),
            Err(E::InsufficientVnodes { have: 2, need: 3 })
        );
        // Spec invariant 8: NC=3 with 2 distinct up nodes fails at pre-check.
        let nc3 = Params {
            node_confirms: q(3),
            w: q(1),
            dw: q(1),
            ..Params::default()
        };
        assert_eq!(
            precheck_put(&nc3, apl(2, 2, 2, 1)),
            Err(E::NodeConfirmsValUnsatisfied { need: 3, got: 2 })
        );
        let dc2 = Params {
            dc_confirms: q(2),
            ..Params::default()
        };
        assert_eq!(
            precheck_put(&dc2, apl(3, 3, 3, 1)),
            Err(E::DcConfirmsValUnsatisfied { need: 2, got: 1 })
        );
        assert_eq!(
            E::InsufficientVnodes { have: 2, need: 3 }.to_string(),
            "insufficient_vnodes need=3 got=2"
        );
        assert_eq!(
            E::NodeConfirmsValUnsatisfied { need: 3, got: 2 }.code(),
            "node_confirms_val_unsatisfied"
        );
    }

    /// Every GET reply sequence for N ≤ 4 and every parameter combination: never ok with too
    /// few oks, enough is monotonic, and enough once all replies are in.
    #[test]
    fn get_exhaustive_safety() {
        const TOKENS: &[char] = &['P', 'F', 'T', 'n', 'm', 'e', 'o'];
        for n in 1..=4u32 {
            for r in 1..=n {
                for pr in 0..=n {
                    for (nfok, basic) in
                        [(false, false), (false, true), (true, false), (true, true)]
                    {
                        let p = gp(n, r, pr, nfok, basic);
                        for code in 0..TOKENS.len().pow(n) {
                            let mut c = code;
                            let mut t = GetTally::new(p, n);
                            let mut was_enough = false;
                            for _ in 0..n {
                                let tok = TOKENS[c % TOKENS.len()];
                                c /= TOKENS.len();
                                match tok {
                                    'P' => t.ok(true, false),
                                    'F' => t.ok(false, false),
                                    'T' => t.ok(true, true),
                                    'n' => t.notfound(true),
                                    'm' => t.notfound(false),
                                    'e' => t.fail(FailKind::Error),
                                    _ => t.fail(FailKind::Overload),
                                }
                                assert!(!was_enough || t.is_enough());
                                was_enough = t.is_enough();
                                assert_eq!(t.outcome().is_some(), was_enough);
                                let (ok, pok, ..) = t.counts();
                                if t.outcome() == Some(Ok(Merge)) {
                                    assert!(ok >= r && pok >= pr, "{p:?} {code}");
                                }
                            }
                            assert!(t.is_enough(), "{p:?} {code}");
                        }
                    }
                }
            }
        }
    }

    /// Every PUT sequence (one final reply per replica) for N ≤ 3: never ok below any quorum,
    /// and enough once all replies are in.
    #[test]
    fn put_exhaustive_safety() {
        let tokens = [
            Full(0, 0, true),
            Full(0, 1, false),
            Full(0, 0, false),
            Full(0, 1, true),
            ERR,
            OVL,
        ];
        for n in 1..=3u32 {
            for w in 1..=n {
                for dw in 0..=n {
                    for pw in 0..=n {
                        for nc in [0, n] {
                            for dcc in 0..=n.min(2) {
                                let p = pp(n, w, dw, pw, nc, dcc);
                                for code in 0..tokens.len().pow(n) {
                                    let mut c = code;
                                    let mut t = PutTally::new(p, n);
                                    for i in 0..n {
                                        match tokens[c % tokens.len()] {
                                            Full(_, d, pr) => {
                                                t.w_ack(NodeId(i), DcId(d));
                                                t.dw_ack(pr);
                                            }
                                            Fail(k) => t.fail(k),
                                            _ => unreachable!(),
                                        }
                                        c /= tokens.len();
                                        let (tw, tdw, tpw, nodes, dcs, _) = t.counts();
                                        if t.outcome() == Some(Ok(())) {
                                            assert!(tw >= p.w && tdw >= p.dw && tpw >= p.pw);
                                            assert!(nodes >= nc && dcs >= dcc);
                                        }
                                    }
                                    assert!(t.is_enough(), "{p:?} {code}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
