//! Latency statistics of one benchmark run (spec `experiments.md` §3 "Per op type" and
//! "Local vs remote", §7): a [`Recorder`] keeps, per operation type × [`Locality`], an HDR
//! histogram of latencies in **microseconds** (3 significant digits, 1 µs … 1 hour; larger
//! values saturate at 1 hour), error counts by error code, and the throughput time series
//! (successful operations completed per 1 s bucket since the run start).
//!
//! Guarantees:
//! - **No clock reads.** Every time is supplied by the caller as a [`Duration`] relative to
//!   the run start: the sample's *intended* start (so open-loop runs have no coordinated
//!   omission) and its latency.
//! - **Warm-up cut.** A sample (success or error) whose intended start is before the
//!   recorder's warm-up end is excluded from every histogram, error count and the throughput
//!   series; it is only counted in [`Report::warmup_excluded`].
//! - **Merging is exact.** [`Recorder::merge`] of per-thread recorders yields exactly the
//!   histograms, counts and series one recorder would have produced from all the samples.
//! - **Deterministic output.** All maps are `BTreeMap`s: summaries, JSON and CSV come out in
//!   a fixed order (op name, then total / local / remote).
//! - Percentiles are nearest-rank (the value of rank `ceil(p·n/100)`), reported as HDR's
//!   "highest equivalent value": exact for values below 2048 µs, within 0.1 % above.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::BenchError;

/// Largest latency a histogram tracks, in microseconds (1 hour); larger samples saturate.
pub const MAX_LATENCY_US: u64 = 3_600_000_000;
/// Significant decimal digits kept by every histogram.
pub const SIGNIFICANT_DIGITS: u8 = 3;
/// Width of one throughput bucket.
pub const THROUGHPUT_BUCKET: Duration = Duration::from_secs(1);

/// Whether an operation's critical path crossed a DC boundary (set by the coordinator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Locality {
    /// Served within the client's own DC.
    Local,
    /// Crossed a DC boundary (`remote = true`).
    Remote,
}

impl Locality {
    /// The tag's name as written in reports: `local` or `remote`.
    pub fn as_str(self) -> &'static str {
        match self {
            Locality::Local => "local",
            Locality::Remote => "remote",
        }
    }
}

/// Which samples a [`Summary`] covers: all of them, or one [`Locality`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Local and remote samples together.
    Total,
    /// Local samples only.
    Local,
    /// Remote samples only.
    Remote,
}

impl Scope {
    /// The scope's name as written in reports: `total`, `local` or `remote`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Total => "total",
            Scope::Local => "local",
            Scope::Remote => "remote",
        }
    }

    fn includes(self, locality: Locality) -> bool {
        match self {
            Scope::Total => true,
            Scope::Local => locality == Locality::Local,
            Scope::Remote => locality == Locality::Remote,
        }
    }
}

/// Latency statistics of one operation type in one [`Scope`]; all latencies in microseconds.
///
/// With no successful sample, `count` is 0 and every latency field is 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Operation type (`read`, `update`, ...).
    pub op: String,
    /// Total, local-only or remote-only.
    pub scope: Scope,
    /// Successful samples after the warm-up.
    pub count: u64,
    /// Failed samples after the warm-up (all error codes).
    pub errors: u64,
    /// Mean latency.
    pub mean_us: f64,
    /// Standard deviation of the latencies (0 in results written before it was recorded).
    #[serde(default)]
    pub stdev_us: f64,
    /// Smallest latency.
    pub min_us: u64,
    /// Largest latency.
    pub max_us: u64,
    /// 10th percentile.
    pub p10_us: u64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p99_9_us: u64,
    /// p1, p2, …, p99 (99 entries, the layout of the study's `percentiles.csv`).
    pub percentiles_us: Vec<u64>,
}

impl Summary {
    /// The accuracy achieved for the mean, in percent: the half-width of its two-sided
    /// `confidence` interval relative to the mean, `100·z·s / (x̄·√n)` (spec §3, Jain's
    /// sample-size formula solved for r). `None` without samples, a zero mean or a recorded
    /// standard deviation.
    pub fn mean_accuracy_pct(&self, confidence: f64) -> Option<f64> {
        if self.count == 0 || self.mean_us <= 0.0 || self.stdev_us <= 0.0 {
            return None;
        }
        let z = crate::doe::normal_quantile(1.0 - (1.0 - confidence) / 2.0).ok()?;
        Some(100.0 * z * self.stdev_us / (self.mean_us * (self.count as f64).sqrt()))
    }
}

/// Everything a run's statistics report contains (spec §7: percentiles per op, total and
/// local / remote, throughput series, errors by code).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Warm-up end, in microseconds since the run start.
    pub warmup_end_us: u64,
    /// Samples (successes and errors) dropped because they started during the warm-up.
    pub warmup_excluded: u64,
    /// One summary per op × (total, local, remote), ordered by op then scope.
    pub summaries: Vec<Summary>,
    /// Errors after the warm-up, by error code (all ops and localities).
    pub errors_by_code: BTreeMap<String, u64>,
    /// Successful operations completed in each 1 s bucket since the run start (bucket `i`
    /// covers completion times `[i s, (i+1) s)`; buckets during the warm-up are 0).
    pub throughput_per_s: Vec<u64>,
}

impl Report {
    /// The summary of `op` in `scope`, if the run had that op.
    pub fn summary(&self, op: &str, scope: Scope) -> Option<&Summary> {
        self.summaries
            .iter()
            .find(|s| s.op == op && s.scope == scope)
    }

    /// The op names, in order.
    pub fn ops(&self) -> Vec<&str> {
        let mut ops: Vec<&str> = self.summaries.iter().map(|s| s.op.as_str()).collect();
        ops.dedup();
        ops
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self)
            .expect("a Report serializes: string keys, finite or null floats")
    }

    /// The summaries as CSV: a header, then one row per op × scope (`total`, `local`,
    /// `remote`). Columns: `op,locality,count,errors,mean_us,min_us,max_us,p10_us,p50_us,
    /// p90_us,p99_us,p99_9_us,p1_us,…,p99_us`.
    pub fn to_csv(&self) -> String {
        summaries_to_csv(&self.summaries)
    }
}

/// The CSV header [`Report::to_csv`] writes (without the trailing newline).
pub fn csv_header() -> String {
    let mut header = String::from(
        "op,locality,count,errors,mean_us,min_us,max_us,p10_us,p50_us,p90_us,p99_us,p99_9_us",
    );
    for p in 1..=99 {
        let _ = write!(header, ",p{p}_us");
    }
    header
}

/// Summaries as CSV (see [`Report::to_csv`]). Op names containing `,` or `"` are quoted.
pub fn summaries_to_csv(summaries: &[Summary]) -> String {
    let mut out = csv_header();
    out.push('\n');
    for s in summaries {
        let _ = write!(
            out,
            "{},{},{},{},{:.3},{},{},{},{},{},{},{}",
            csv_field(&s.op),
            s.scope.as_str(),
            s.count,
            s.errors,
            s.mean_us,
            s.min_us,
            s.max_us,
            s.p10_us,
            s.p50_us,
            s.p90_us,
            s.p99_us,
            s.p99_9_us
        );
        for v in &s.percentiles_us {
            let _ = write!(out, ",{v}");
        }
        out.push('\n');
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Collects one run's (or one thread's) samples; see the module header for the guarantees.
///
/// Recording a sample of an op and error code already seen allocates nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorder {
    warmup_end: Duration,
    warmup_excluded: u64,
    ops: BTreeMap<String, OpStats>,
    throughput: Vec<u64>,
}

/// One op's samples, indexed by [`Locality`] (`Local` = 0, `Remote` = 1).
#[derive(Debug, Clone, PartialEq)]
struct OpStats {
    histograms: [Option<Histogram<u64>>; 2],
    /// Error code → count.
    errors: [BTreeMap<String, u64>; 2],
}

impl OpStats {
    fn new() -> Self {
        OpStats {
            histograms: [None, None],
            errors: [BTreeMap::new(), BTreeMap::new()],
        }
    }
}

fn slot(locality: Locality) -> usize {
    match locality {
        Locality::Local => 0,
        Locality::Remote => 1,
    }
}

const LOCALITIES: [Locality; 2] = [Locality::Local, Locality::Remote];

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, SIGNIFICANT_DIGITS)
        .expect("constant bounds 1 µs ..= 1 h with 3 significant digits are valid")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Recorder {
    /// An empty recorder; samples whose intended start is before `warmup_end` (relative to
    /// the run start) are excluded. `Duration::ZERO` keeps everything.
    pub fn new(warmup_end: Duration) -> Self {
        Recorder {
            warmup_end,
            warmup_excluded: 0,
            ops: BTreeMap::new(),
            throughput: Vec::new(),
        }
    }

    /// The warm-up end this recorder was created with (or [`Recorder::set_warmup_end`] set).
    pub fn warmup_end(&self) -> Duration {
        self.warmup_end
    }

    /// Counts one sample its caller excluded as warm-up, for a caller that makes the cut
    /// itself (recording into recorders created with `Duration::ZERO`).
    pub fn exclude_warmup_sample(&mut self) {
        self.warmup_excluded += 1;
    }

    /// Sets the warm-up end that the report, the mean throughput and the interval log use,
    /// for a caller that made the cut itself and knows where the warm-up ended only after the
    /// run. Samples already recorded stay; later ones are cut at `end`.
    pub fn set_warmup_end(&mut self, end: Duration) {
        self.warmup_end = end;
    }

    fn op_stats(&mut self, op: &str) -> &mut OpStats {
        if !self.ops.contains_key(op) {
            self.ops.insert(op.to_string(), OpStats::new());
        }
        self.ops.get_mut(op).expect("inserted above")
    }

    /// Records a successful operation of type `op` that was meant to start at
    /// `intended_start` (since the run start) and took `latency` measured from that intended
    /// start. Latencies are kept in whole microseconds (truncated), saturating at 1 hour.
    pub fn record(
        &mut self,
        op: &str,
        locality: Locality,
        intended_start: Duration,
        latency: Duration,
    ) {
        if intended_start < self.warmup_end {
            self.warmup_excluded += 1;
            return;
        }
        self.op_stats(op).histograms[slot(locality)]
            .get_or_insert_with(new_histogram)
            .saturating_record(micros(latency));
        let completed = intended_start.saturating_add(latency);
        let bucket = usize::try_from(completed.as_secs() / THROUGHPUT_BUCKET.as_secs())
            .unwrap_or(usize::MAX);
        if bucket >= self.throughput.len() {
            self.throughput.resize(bucket + 1, 0);
        }
        self.throughput[bucket] += 1;
    }

    /// Records a failed operation of type `op` with error `code` (e.g. `TIMEOUT`). Errors
    /// are not in the latency histograms nor the throughput series.
    pub fn record_error(
        &mut self,
        op: &str,
        locality: Locality,
        intended_start: Duration,
        code: &str,
    ) {
        if intended_start < self.warmup_end {
            self.warmup_excluded += 1;
            return;
        }
        let codes = &mut self.op_stats(op).errors[slot(locality)];
        match codes.get_mut(code) {
            Some(n) => *n += 1,
            None => {
                codes.insert(code.to_string(), 1);
            }
        }
    }

    /// Adds `other`'s samples to this recorder (per-thread recorders merged at the end).
    ///
    /// # Errors
    /// [`BenchError::InvalidDesign`] if the two recorders have different warm-up ends.
    pub fn merge(&mut self, other: &Recorder) -> Result<(), BenchError> {
        if self.warmup_end != other.warmup_end {
            return Err(BenchError::InvalidDesign {
                reason: format!(
                    "cannot merge recorders with different warm-up ends ({:?} and {:?}); create every thread's recorder with the run's one warm-up end",
                    self.warmup_end, other.warmup_end
                ),
            });
        }
        for (op, theirs) in &other.ops {
            let mine = self.op_stats(op);
            for (i, locality) in LOCALITIES.into_iter().enumerate() {
                if let Some(hist) = &theirs.histograms[i] {
                    mine.histograms[i]
                        .get_or_insert_with(new_histogram)
                        .add(hist)
                        .map_err(|e| BenchError::InvalidDesign {
                            reason: format!(
                                "cannot merge histograms of {op} {}: {e:?}",
                                locality.as_str()
                            ),
                        })?;
                }
                for (code, n) in &theirs.errors[i] {
                    *mine.errors[i].entry(code.clone()).or_insert(0) += n;
                }
            }
        }
        if other.throughput.len() > self.throughput.len() {
            self.throughput.resize(other.throughput.len(), 0);
        }
        for (mine, theirs) in self.throughput.iter_mut().zip(&other.throughput) {
            *mine += theirs;
        }
        self.warmup_excluded += other.warmup_excluded;
        Ok(())
    }

    /// Operation types seen after the warm-up (successes or errors), in order.
    pub fn ops(&self) -> Vec<String> {
        self.ops.keys().cloned().collect()
    }

    /// The HDR histogram (µs) of `op` in `scope`, local and remote added for `Total`.
    pub fn histogram(&self, op: &str, scope: Scope) -> Histogram<u64> {
        let mut merged = new_histogram();
        if let Some(stats) = self.ops.get(op) {
            for (i, hist) in stats.histograms.iter().enumerate() {
                if let Some(hist) = hist
                    && scope.includes(LOCALITIES[i])
                {
                    merged
                        .add(hist)
                        .expect("histograms with identical bounds always add");
                }
            }
        }
        merged
    }

    /// The measured phase's histograms as an HdrHistogram interval log (format V2, each
    /// histogram deflate-compressed): one interval per op × scope (`total`, `local`,
    /// `remote`) with a sample, tagged `op.scope`, starting at the warm-up end and lasting
    /// `measured`; values in microseconds. HdrHistogram's own tools (`HistogramLogProcessor`,
    /// HistogramLogAnalyzer) read it.
    pub fn interval_log(&self, measured: Duration) -> Result<Vec<u8>, BenchError> {
        use hdrhistogram::serialization::V2DeflateSerializer;
        use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
        let err = |e: String| BenchError::Io {
            path: "histograms.hlog".into(),
            reason: format!("cannot encode the histogram log: {e}"),
        };
        let mut out = Vec::new();
        let mut serializer = V2DeflateSerializer::new();
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment("Meridian benchmark latencies, microseconds; tags are op.scope")
            .begin_log_with(&mut out, &mut serializer)
            .map_err(|e| err(e.to_string()))?;
        for op in self.ops() {
            for scope in [Scope::Total, Scope::Local, Scope::Remote] {
                let h = self.histogram(&op, scope);
                if h.is_empty() {
                    continue;
                }
                let name = format!("{op}.{}", scope.as_str());
                let tag = Tag::new(&name).ok_or_else(|| {
                    err(format!(
                        "`{name}` cannot be a log tag (no spaces or commas)"
                    ))
                })?;
                log.write_histogram(&h, self.warmup_end, measured, Some(tag))
                    .map_err(|e| err(format!("{e:?}")))?;
            }
        }
        Ok(out)
    }

    /// Errors of `op` in `scope`, all codes.
    pub fn error_count(&self, op: &str, scope: Scope) -> u64 {
        self.ops.get(op).map_or(0, |stats| {
            (0..2)
                .filter(|&i| scope.includes(LOCALITIES[i]))
                .flat_map(|i| stats.errors[i].values())
                .sum()
        })
    }

    /// Errors after the warm-up by code, over all ops and localities.
    pub fn errors_by_code(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for codes in self.ops.values().flat_map(|s| s.errors.iter()) {
            for (code, n) in codes {
                *out.entry(code.clone()).or_insert(0) += n;
            }
        }
        out
    }

    /// Successful operations completed per 1 s bucket since the run start.
    pub fn throughput_per_s(&self) -> &[u64] {
        &self.throughput
    }

    /// Mean throughput (successful ops/s) over the measurement phase `[warm-up end,
    /// measurement_end)`; 0 if that phase is empty.
    pub fn mean_throughput(&self, measurement_end: Duration) -> f64 {
        let phase = measurement_end
            .saturating_sub(self.warmup_end)
            .as_secs_f64();
        if phase <= 0.0 {
            return 0.0;
        }
        let ops: u64 = self
            .ops
            .values()
            .flat_map(|s| s.histograms.iter().flatten())
            .map(Histogram::len)
            .sum();
        ops as f64 / phase
    }

    /// The summary of `op` in `scope`.
    pub fn summary(&self, op: &str, scope: Scope) -> Summary {
        summarize(
            op,
            scope,
            &self.histogram(op, scope),
            self.error_count(op, scope),
        )
    }

    /// Summaries of every op × (total, local, remote), ordered by op then scope.
    pub fn summaries(&self) -> Vec<Summary> {
        self.ops()
            .iter()
            .flat_map(|op| {
                [Scope::Total, Scope::Local, Scope::Remote]
                    .into_iter()
                    .map(move |scope| self.summary(op, scope))
            })
            .collect()
    }

    /// The run's [`Report`].
    pub fn report(&self) -> Report {
        Report {
            warmup_end_us: micros(self.warmup_end),
            warmup_excluded: self.warmup_excluded,
            summaries: self.summaries(),
            errors_by_code: self.errors_by_code(),
            throughput_per_s: self.throughput.clone(),
        }
    }
}

/// Summarizes one histogram (µs) with its error count.
pub fn summarize(op: &str, scope: Scope, hist: &Histogram<u64>, errors: u64) -> Summary {
    let count = hist.len();
    // Nearest rank `ceil(p·n/100)`. HDR computes `(p/100)·n` in floating point, where e.g.
    // 99.9/100·1000 = 999.0000000000001 would round up to rank 1000; shrinking the quantile by
    // one part in 10^12 removes that error without moving any true non-integer rank.
    let at = |p: f64| {
        if count == 0 {
            0
        } else {
            hist.value_at_quantile(p / 100.0 * (1.0 - 1e-12))
        }
    };
    Summary {
        op: op.to_string(),
        scope,
        count,
        errors,
        mean_us: if count == 0 { 0.0 } else { hist.mean() },
        stdev_us: if count == 0 { 0.0 } else { hist.stdev() },
        min_us: if count == 0 { 0 } else { hist.min() },
        max_us: if count == 0 { 0 } else { hist.max() },
        p10_us: at(10.0),
        p50_us: at(50.0),
        p90_us: at(90.0),
        p99_us: at(99.0),
        p99_9_us: at(99.9),
        percentiles_us: (1..=99).map(|p| at(f64::from(p))).collect(),
    }
}

/// One row of the study's `percentiles.csv` tail: p1…p99 then p99.9, in **seconds**
/// (the columns after `op` in `consist,loc,…,op,p1..p99,p99_9`).
pub fn percentiles_seconds(summary: &Summary) -> Vec<f64> {
    summary
        .percentiles_us
        .iter()
        .chain(std::iter::once(&summary.p99_9_us))
        .map(|&us| us as f64 / 1e6)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn known_inputs_give_exact_percentiles() {
        let mut r = Recorder::new(Duration::ZERO);
        for v in 1..=1000 {
            r.record("read", Locality::Local, Duration::ZERO, us(v));
        }
        let s = r.summary("read", Scope::Total);
        assert_eq!(s.count, 1000);
        assert_eq!(s.errors, 0);
        assert_eq!(s.min_us, 1);
        assert_eq!(s.max_us, 1000);
        assert!((s.mean_us - 500.5).abs() < 1e-9, "{}", s.mean_us);
        assert_eq!(
            (s.p10_us, s.p50_us, s.p90_us, s.p99_us, s.p99_9_us),
            (100, 500, 900, 990, 999)
        );
        assert_eq!(s.percentiles_us.len(), 99);
        for (i, v) in s.percentiles_us.iter().enumerate() {
            assert_eq!(*v, 10 * (i as u64 + 1));
        }
    }

    #[test]
    fn large_values_within_hdr_precision() {
        let mut r = Recorder::new(Duration::ZERO);
        // 100 ms .. 1 s in 1 ms steps: 901 values.
        for ms in 100..=1000u64 {
            r.record(
                "update",
                Locality::Remote,
                Duration::ZERO,
                Duration::from_millis(ms),
            );
        }
        let s = r.summary("update", Scope::Remote);
        let close = |got: u64, want: u64| (got as f64 - want as f64).abs() <= want as f64 * 1e-3;
        assert!(close(s.p50_us, 550_000), "{}", s.p50_us);
        assert!(close(s.max_us, 1_000_000), "{}", s.max_us);
        assert!(close(s.min_us, 100_000), "{}", s.min_us);
        // An hour-plus sample saturates instead of failing.
        r.record(
            "update",
            Locality::Remote,
            Duration::ZERO,
            Duration::from_secs(10_000),
        );
        assert!(close(
            r.summary("update", Scope::Remote).max_us,
            MAX_LATENCY_US
        ));
    }

    #[test]
    fn total_local_remote_split() {
        let mut r = Recorder::new(Duration::ZERO);
        for _ in 0..10 {
            r.record("read", Locality::Local, Duration::ZERO, us(100));
        }
        for _ in 0..30 {
            r.record("read", Locality::Remote, Duration::ZERO, us(200_000));
        }
        r.record_error("read", Locality::Remote, Duration::ZERO, "TIMEOUT");
        let sums = r.summaries();
        assert_eq!(sums.len(), 3);
        assert_eq!(
            sums.iter().map(|s| s.scope).collect::<Vec<_>>(),
            [Scope::Total, Scope::Local, Scope::Remote]
        );
        assert_eq!((sums[0].count, sums[1].count, sums[2].count), (40, 10, 30));
        assert_eq!((sums[0].errors, sums[1].errors, sums[2].errors), (1, 0, 1));
        assert_eq!(sums[1].max_us, 100);
        assert_eq!(sums[0].p10_us, 100);
        assert_eq!(sums[0].min_us, 100);
        assert!(sums[0].p50_us >= 199_900);
    }

    #[test]
    fn warmup_samples_are_excluded() {
        let warm = Duration::from_secs(10);
        let mut r = Recorder::new(warm);
        // Started during the warm-up (even if completing after it): excluded.
        r.record(
            "read",
            Locality::Local,
            Duration::from_secs(9),
            Duration::from_secs(5),
        );
        r.record_error(
            "read",
            Locality::Local,
            Duration::from_millis(9_999),
            "TIMEOUT",
        );
        // Started at or after the warm-up end: kept.
        r.record("read", Locality::Local, warm, us(7));
        r.record("read", Locality::Local, Duration::from_secs(11), us(9));
        r.record_error(
            "read",
            Locality::Remote,
            Duration::from_secs(12),
            "UNAVAILABLE",
        );
        let rep = r.report();
        assert_eq!(rep.warmup_excluded, 2);
        assert_eq!(rep.warmup_end_us, 10_000_000);
        let total = &rep.summaries[0];
        assert_eq!(
            (total.count, total.errors, total.min_us, total.max_us),
            (2, 1, 7, 9)
        );
        assert_eq!(rep.errors_by_code.len(), 1);
        assert_eq!(rep.errors_by_code["UNAVAILABLE"], 1);
        let mut expected = vec![0; 12];
        expected[10] = 1;
        expected[11] = 1;
        assert_eq!(rep.throughput_per_s, expected);
        assert!((r.mean_throughput(Duration::from_secs(12)) - 1.0).abs() < 1e-12);
    }

    fn sample_stream() -> Vec<(&'static str, Locality, Duration, Duration)> {
        // A deterministic pseudo-random stream (LCG), no global randomness.
        let mut x: u64 = 42;
        let mut out = Vec::new();
        for i in 0..5000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let op = ["read", "update", "scan"][(x >> 60) as usize % 3];
            let loc = if (x >> 40) & 1 == 0 {
                Locality::Local
            } else {
                Locality::Remote
            };
            let lat = Duration::from_micros((x >> 20) % 2_000_000);
            out.push((op, loc, Duration::from_millis(i * 3), lat));
        }
        out
    }

    #[test]
    fn merging_equals_recording_together() {
        let warm = Duration::from_secs(1);
        let mut together = Recorder::new(warm);
        let mut a = Recorder::new(warm);
        let mut b = Recorder::new(warm);
        for (i, (op, loc, start, lat)) in sample_stream().into_iter().enumerate() {
            let part = if i % 3 == 0 { &mut a } else { &mut b };
            if i % 17 == 0 {
                together.record_error(op, loc, start, "E1");
                part.record_error(op, loc, start, "E1");
            } else {
                together.record(op, loc, start, lat);
                part.record(op, loc, start, lat);
            }
        }
        a.merge(&b).unwrap();
        assert_eq!(a.report(), together.report());
        assert_eq!(a.to_owned().report().to_json(), together.report().to_json());
        // Merging into an empty recorder is the identity.
        let mut empty = Recorder::new(warm);
        empty.merge(&together).unwrap();
        assert_eq!(empty.report(), together.report());
    }

    proptest::proptest! {
        // Each report builds several 180 kB histograms: a few dozen cases keep this fast.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// Any split of any sample stream over any number of recorders merges back to the
        /// recorder that saw everything.
        #[test]
        fn merge_of_any_split_equals_together(
            samples in proptest::collection::vec(
                (0u8..3, proptest::bool::ANY, 0u64..20_000, 0u64..5_000_000, 0u8..8, 0usize..4),
                0..200,
            ),
            warm_ms in 0u64..5_000,
        ) {
            let warm = Duration::from_millis(warm_ms);
            let mut together = Recorder::new(warm);
            let mut parts: Vec<Recorder> = (0..4).map(|_| Recorder::new(warm)).collect();
            for (op, remote, start_ms, lat_us, err, part) in samples {
                let op = ["read", "update", "scan"][usize::from(op)];
                let loc = if remote { Locality::Remote } else { Locality::Local };
                let start = Duration::from_millis(start_ms);
                for r in [&mut together, &mut parts[part]] {
                    if err == 0 {
                        r.record_error(op, loc, start, "TIMEOUT");
                    } else {
                        r.record(op, loc, start, us(lat_us));
                    }
                }
            }
            let mut merged = Recorder::new(warm);
            for p in &parts {
                merged.merge(p).unwrap();
            }
            proptest::prop_assert_eq!(merged.report(), together.report());
        }
    }

    #[test]
    fn zero_latency_is_recorded() {
        let mut r = Recorder::new(Duration::ZERO);
        r.record("read", Locality::Local, Duration::ZERO, Duration::ZERO);
        let s = r.summary("read", Scope::Local);
        assert_eq!((s.count, s.min_us, s.max_us, s.p50_us), (1, 0, 0, 0));
    }

    #[test]
    fn merging_different_warmups_is_refused() {
        let mut a = Recorder::new(Duration::from_secs(1));
        let b = Recorder::new(Duration::from_secs(2));
        assert!(matches!(a.merge(&b), Err(BenchError::InvalidDesign { .. })));
    }

    #[test]
    fn csv_header_and_rows() {
        let mut r = Recorder::new(Duration::ZERO);
        r.record("read", Locality::Local, Duration::ZERO, us(5));
        r.record("update", Locality::Remote, Duration::ZERO, us(8));
        let csv = r.report().to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + 6);
        let header: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(header.len(), 12 + 99);
        assert_eq!(&header[..4], ["op", "locality", "count", "errors"]);
        assert_eq!(header[11], "p99_9_us");
        assert_eq!(header[12], "p1_us");
        assert_eq!(header[110], "p99_us");
        for line in &lines[1..] {
            assert_eq!(line.split(',').count(), header.len(), "{line}");
        }
        assert!(
            lines[1].starts_with("read,total,1,0,5.000,5,5,5,5,5,5,5,5,"),
            "{}",
            lines[1]
        );
        assert!(
            lines[3].starts_with("read,remote,0,0,0.000,0,0,"),
            "{}",
            lines[3]
        );
        assert!(
            lines[6].starts_with("update,remote,1,0,8.000,8,8,"),
            "{}",
            lines[6]
        );
    }

    #[test]
    fn json_round_trips() {
        let mut r = Recorder::new(Duration::ZERO);
        r.record("read", Locality::Local, Duration::ZERO, us(5));
        r.record_error("read", Locality::Remote, Duration::ZERO, "TIMEOUT");
        let rep = r.report();
        let json = rep.to_json();
        assert!(json.contains("\"scope\": \"remote\""));
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, rep);
    }

    #[test]
    fn percentiles_seconds_layout() {
        let mut r = Recorder::new(Duration::ZERO);
        for v in 1..=1000 {
            r.record("read", Locality::Local, Duration::ZERO, us(v));
        }
        let row = percentiles_seconds(&r.summary("read", Scope::Total));
        assert_eq!(row.len(), 100);
        assert!((row[0] - 10e-6).abs() < 1e-12);
        assert!((row[98] - 990e-6).abs() < 1e-12);
        assert!((row[99] - 999e-6).abs() < 1e-12);
    }

    #[test]
    fn the_accuracy_of_a_mean_follows_jains_formula() {
        let mut h = Histogram::<u64>::new_with_bounds(1, MAX_LATENCY_US, 3).unwrap();
        // 10 000 samples: half 1000 µs, half 3000 µs: mean 2000, s = 1000.
        h.record_n(1000, 5000).unwrap();
        h.record_n(3000, 5000).unwrap();
        let s = summarize("read", Scope::Total, &h, 0);
        assert!(
            (s.mean_us - 2000.0).abs() < 2.0 && (s.stdev_us - 1000.0).abs() < 2.0,
            "{s:?}"
        );
        // 100 · 2.576 · 1000 / (2000 · 100) = 1.288 %.
        let a = s.mean_accuracy_pct(0.99).unwrap();
        assert!((a - 1.288).abs() < 0.01, "{a}");
        // Four times the samples halve it; no samples, no accuracy.
        h.record_n(1000, 15_000).unwrap();
        h.record_n(3000, 15_000).unwrap();
        let a4 = summarize("read", Scope::Total, &h, 0)
            .mean_accuracy_pct(0.99)
            .unwrap();
        assert!((a4 - a / 2.0).abs() < 0.01, "{a4}");
        let empty = Histogram::<u64>::new_with_bounds(1, MAX_LATENCY_US, 3).unwrap();
        assert_eq!(
            summarize("read", Scope::Total, &empty, 0).mean_accuracy_pct(0.99),
            None
        );
    }

    #[test]
    fn the_interval_log_round_trips_every_histogram_with_its_tag() {
        use hdrhistogram::serialization::Deserializer;
        use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
        let mut r = Recorder::new(Duration::from_secs(1));
        for i in 0..500u64 {
            let at = Duration::from_millis(1000 + i * 10);
            let locality = if i % 5 == 0 {
                Locality::Remote
            } else {
                Locality::Local
            };
            r.record("read", locality, at, Duration::from_micros(100 + i));
            r.record(
                "update",
                Locality::Local,
                at,
                Duration::from_micros(900 + i),
            );
        }
        let log = r.interval_log(Duration::from_secs(5)).unwrap();
        let mut seen = BTreeMap::new();
        for entry in IntervalLogIterator::new(&log) {
            if let LogEntry::Interval(h) = entry.unwrap() {
                assert_eq!(h.start_timestamp(), Duration::from_secs(1));
                assert_eq!(h.duration(), Duration::from_secs(5));
                let bytes = base64_decode(h.encoded_histogram());
                let decoded: Histogram<u64> = Deserializer::new()
                    .deserialize(&mut bytes.as_slice())
                    .unwrap();
                seen.insert(h.tag().unwrap().as_str().to_owned(), decoded);
            }
        }
        let names: Vec<&str> = seen.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "read.local",
                "read.remote",
                "read.total",
                "update.local",
                "update.total"
            ]
        );
        assert_eq!(seen["read.total"], r.histogram("read", Scope::Total));
        assert_eq!(seen["read.remote"].len(), 100);
        assert_eq!(
            seen["update.total"].max(),
            r.histogram("update", Scope::Total).max()
        );
    }

    /// Standard base64 with padding (the log's encoding); base64 is a dev-dependency only,
    /// to keep it out of the API.
    fn base64_decode(text: &str) -> Vec<u8> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap()
    }
}
