//! Tests of the timeline-consistency checkers: one hand-built history per invariant
//! violation, and histories that must pass.

use super::super::Status;
use super::*;
use crate::history::ClientId;
use meridian_core::DcId;

const fn v(g: u64, m: u32, s: u64) -> TlVersion {
    TlVersion::new(g, m, s)
}

fn content(c: Option<&str>) -> Option<Value> {
    c.map(|c| Value::from(c.to_string()))
}

/// Hand-made issue and apply logs of key `k`.
#[derive(Default)]
struct Trace {
    issued: Vec<Issued>,
    applied: Vec<Applied>,
}

impl Trace {
    /// Master `by` = (node, dc) issues `ver` for a write from DC `origin`, staying master.
    fn issue(
        &mut self,
        ver: TlVersion,
        by: (u32, u32),
        origin: u32,
        c: Option<&str>,
        at: u64,
    ) -> &mut Issued {
        self.issued.push(Issued {
            key: Key::from("k"),
            ver,
            kind: IssueKind::Write,
            content: content(c),
            by_node: NodeId(by.0),
            by_dc: DcId(by.1),
            origin_dc: DcId(origin),
            new_master_node: NodeId(by.0),
            new_master_dc: DcId(by.1),
            at,
        });
        self.issued.last_mut().unwrap()
    }

    fn apply(&mut self, node: u32, ver: TlVersion, c: Option<&str>, at: u64) {
        self.applied.push(Applied {
            key: Key::from("k"),
            node: NodeId(node),
            ver,
            content: content(c),
            at,
        });
    }
}

/// Names `to` = (node, dc) as the new master.
fn hand_to(i: &mut Issued, to: (u32, u32)) -> &mut Issued {
    i.new_master_node = NodeId(to.0);
    i.new_master_dc = DcId(to.1);
    i
}

/// Master n1 in dc0; replicas n1, n2 (dc0) and n3 (dc1). n2 skips 1.0.2, n3 lags and
/// receives 1.0.2 twice.
fn base() -> Trace {
    let mut t = Trace::default();
    t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
    t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 20);
    t.issue(v(1, 0, 3), (1, 0), 1, Some("c"), 30);
    t.apply(1, v(1, 0, 1), Some("a"), 10);
    t.apply(1, v(1, 0, 2), Some("b"), 20);
    t.apply(1, v(1, 0, 3), Some("c"), 30);
    t.apply(2, v(1, 0, 1), Some("a"), 15);
    t.apply(2, v(1, 0, 3), Some("c"), 40);
    t.apply(3, v(1, 0, 2), Some("b"), 50);
    t.apply(3, v(1, 0, 2), Some("b"), 55);
    t
}

fn fails(verdict: &Verdict, needle: &str) {
    assert_eq!(verdict.status(), Status::Fail, "{verdict}");
    assert!(
        verdict
            .violations
            .iter()
            .any(|x| x.explanation.contains(needle)),
        "no violation mentions {needle:?}: {verdict}"
    );
}

fn trace_verdicts(t: &Trace, threshold: usize) -> Vec<Verdict> {
    vec![
        check_order(&t.issued, &t.applied),
        check_forks(&t.issued, &t.applied),
        check_single_writer(&t.issued),
        check_migration(&t.issued, threshold),
    ]
}

#[test]
fn versions_order_by_epoch_then_generation_and_print_dotted() {
    assert!(v(1, 0, 9) < v(1, 1, 0));
    assert!(v(1, 7, 9) < v(2, 7, 1));
    // A higher master epoch outranks a later generation of a lower one.
    assert!(v(2, 0, 1) < v(1, 1, 1));
    assert_eq!(v(1_700, 2, 15).to_string(), "1700.2.15");
}

#[test]
fn lagging_replicas_that_skip_versions_and_equal_reapplies_pass() {
    let t = base();
    for verdict in trace_verdicts(&t, 3) {
        assert!(verdict.passed(), "{verdict}");
    }
    let order = check_order(&t.issued, &t.applied);
    assert!(
        order
            .checked
            .starts_with("7 applies in 3 (key, replica) logs")
    );
}

#[test]
fn a_replica_applying_out_of_order_fails() {
    let mut t = base();
    t.apply(2, v(1, 0, 2), Some("b"), 60);
    let verdict = check_order(&t.issued, &t.applied);
    fails(
        &verdict,
        "replica n2 went back: it applied 1.0.2 at 60µs after 1.0.3",
    );
    assert_eq!(verdict.violations.len(), 1);
    // A re-applied duplicate of an older version is going back too.
    let mut t = base();
    t.apply(3, v(1, 0, 3), Some("c"), 60);
    t.apply(3, v(1, 0, 2), Some("b"), 70);
    fails(&check_order(&t.issued, &t.applied), "replica n3 went back");
}

#[test]
fn phantom_early_and_unequal_reapplies_fail() {
    let mut t = base();
    t.apply(3, v(1, 0, 9), Some("z"), 60);
    fails(
        &check_order(&t.issued, &t.applied),
        "phantom version: replica n3 applied 1.0.9",
    );

    let mut t = base();
    t.apply(3, v(1, 0, 3), Some("c"), 25);
    fails(
        &check_order(&t.issued, &t.applied),
        "before n1 issued it at 30µs",
    );

    let mut t = base();
    t.apply(3, v(1, 0, 2), Some("B"), 56);
    let order = check_order(&t.issued, &t.applied);
    fails(&order, "re-applied 1.0.2 at 56µs with \"B\"");
    fails(&check_forks(&t.issued, &t.applied), "fork at 1.0.2");
}

#[test]
fn a_master_issuing_a_lower_version_fails() {
    let mut t = base();
    t.issue(v(1, 0, 2), (1, 0), 0, Some("d"), 40); // seq not bumped: issued twice
    t.issue(v(1, 0, 1), (1, 0), 0, Some("e"), 50).ver = v(1, 0, 0);
    let order = check_order(&t.issued, &t.applied);
    fails(
        &order,
        "issued out of order: n1 issued 1.0.0 at 50µs after n1 had issued 1.0.3",
    );
    assert_eq!(
        order.violations.len(),
        1,
        "the duplicate is timeline-forks' job"
    );
    let forks = check_forks(&t.issued, &t.applied);
    fails(&forks, "1.0.2 was issued twice by n1 (at 20µs and 40µs)");
    fails(
        &forks,
        "fork at 1.0.2: master n1 (issued at 20µs), n1 (applied at 20µs)",
    );
}

#[test]
fn a_fork_between_replicas_fails() {
    let mut t = base();
    t.apply(2, v(1, 0, 4), Some("x"), 60);
    t.apply(3, v(1, 0, 4), Some("y"), 61);
    let verdict = check_forks(&t.issued, &t.applied);
    fails(
        &verdict,
        "fork at 1.0.4: n2 (applied at 60µs) had \"x\"; n3 (applied at 61µs) had \"y\"",
    );
    // A replica disagreeing with what the master issued is a fork too.
    let mut t = base();
    t.apply(2, v(1, 0, 2), None, 60);
    fails(&check_forks(&t.issued, &t.applied), "had a tombstone");
}

#[test]
fn a_version_issued_by_two_nodes_fails() {
    let mut t = base();
    t.issue(v(1, 0, 3), (2, 0), 0, Some("c"), 35);
    let forks = check_forks(&t.issued, &t.applied);
    fails(
        &forks,
        "1.0.3 was issued by n1 (dc0) at 30µs and by n2 (dc0) at 35µs",
    );
    assert_eq!(
        forks.violations.len(),
        1,
        "same content: no fork, only the double issue"
    );
}

#[test]
fn two_writers_without_migration_fail() {
    let mut t = base();
    t.issue(v(1, 0, 4), (2, 0), 0, Some("d"), 40);
    let verdict = check_single_writer(&t.issued);
    fails(
        &verdict,
        "two writers: n2 issued 1.0.4 at 40µs, but the master named by 1.0.3 (issued by n1 \
         at 30µs) is n1",
    );
}

/// T = 3, master n1 in dc0: three writes from dc1 move it to n3 in dc1, which continues.
fn migrating() -> Trace {
    let mut t = Trace::default();
    t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
    t.issue(v(1, 0, 2), (1, 0), 1, Some("b"), 20);
    t.issue(v(1, 0, 3), (1, 0), 1, Some("c"), 30);
    hand_to(t.issue(v(1, 0, 4), (1, 0), 1, Some("d"), 40), (3, 1));
    t.issue(v(1, 0, 5), (3, 1), 1, Some("e"), 50);
    t
}

#[test]
fn migration_exactly_at_t_hands_over_the_pen() {
    let t = migrating();
    for verdict in trace_verdicts(&t, 3) {
        assert!(verdict.passed(), "{verdict}");
    }
    let migration = check_migration(&t.issued, 3);
    assert_eq!(
        migration.checked,
        "4 writes on 1 keys with T = 3 (1 migrations)"
    );
    let writer = check_single_writer(&t.issued);
    assert!(writer.checked.contains("1 hand-overs"), "{writer}");
    // With T = 4 the same move comes one write early.
    fails(
        &check_migration(&t.issued, 4),
        "migration without 4 consecutive foreign writes: 1.0.4 at 40µs moved the master \
         from n1 (dc0) to n3 (dc1), but the last writes were dc1 (1.0.4), dc1 (1.0.3), dc1 \
         (1.0.2), dc0 (1.0.1)",
    );
}

#[test]
fn the_old_master_writing_after_handing_over_fails() {
    let mut t = migrating();
    t.issue(v(1, 0, 6), (1, 0), 0, Some("f"), 60);
    fails(
        &check_single_writer(&t.issued),
        "two writers: n1 issued 1.0.6 at 60µs, but it had handed mastership to n3 (dc1) with \
         1.0.4 at 40µs and the master named by 1.0.5 is n3: the old master kept writing",
    );
}

#[test]
fn a_migration_without_t_foreign_writes_fails() {
    let mut t = Trace::default();
    t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
    t.issue(v(1, 0, 2), (1, 0), 1, Some("b"), 20);
    hand_to(t.issue(v(1, 0, 3), (1, 0), 1, Some("c"), 30), (3, 1));
    let verdict = check_migration(&t.issued, 3);
    fails(&verdict, "migration without 3 consecutive foreign writes");
    fails(
        &verdict,
        "the last writes were dc1 (1.0.3), dc1 (1.0.2), dc0 (1.0.1)",
    );
    assert!(
        check_single_writer(&t.issued).passed(),
        "the hand-over itself is recorded"
    );
    fails(
        &check_migration(&t.issued, 0),
        "migration while disabled (T = 0)",
    );
}

#[test]
fn a_missed_or_misdirected_migration_fails() {
    let mut t = migrating();
    hand_to(&mut t.issued[3], (1, 0));
    t.issued[4].by_node = NodeId(1);
    t.issued[4].by_dc = DcId(0);
    t.issued[4].new_master_node = NodeId(1);
    t.issued[4].new_master_dc = DcId(0);
    let verdict = check_migration(&t.issued, 3);
    fails(
        &verdict,
        "missed migration: the last 3 writes (dc1 (1.0.4), dc1 (1.0.3), dc1 (1.0.2), newest \
         first) all came from dc1, not master n1 (dc0)'s DC, yet 1.0.4 at 40µs kept the \
         master",
    );
    assert_eq!(
        verdict.violations.len(),
        2,
        "1.0.5 is due as well: {verdict}"
    );

    let mut t = migrating();
    hand_to(&mut t.issued[3], (5, 2));
    fails(&check_migration(&t.issued, 3), "migration to the wrong DC");
}

#[test]
fn the_window_spans_masters_and_generations_but_restarts_at_an_insert() {
    // After moving to dc1, three dc0 writes move the master back: the window spans masters.
    let mut t = migrating();
    t.issue(v(1, 0, 6), (3, 1), 0, Some("f"), 60);
    t.issue(v(1, 0, 7), (3, 1), 0, None, 70); // a delete counts as a write
    // A re-insert over the tombstone is a write of the same master: the third dc0 write.
    hand_to(t.issue(v(2, 0, 1), (3, 1), 0, Some("g"), 80), (2, 0));
    for verdict in trace_verdicts(&t, 3) {
        assert!(verdict.passed(), "{verdict}");
    }
    // Had the tombstone been collected, the arbiter's insert restarts the window.
    let mut t2 = migrating();
    t2.issue(v(1, 0, 6), (3, 1), 0, Some("f"), 60);
    t2.issue(v(1, 0, 7), (3, 1), 0, None, 70);
    t2.issue(v(2, 0, 1), (1, 0), 0, Some("g"), 80).kind = IssueKind::Insert;
    t2.issue(v(2, 0, 2), (1, 0), 1, Some("h"), 90);
    for verdict in trace_verdicts(&t2, 3) {
        assert!(verdict.passed(), "{verdict}");
    }
    hand_to(&mut t2.issued[8], (3, 1));
    fails(&check_migration(&t2.issued, 3), "migration without 3");
}

#[test]
fn an_insert_names_the_arbiter_or_an_origin_dc_replica() {
    let mut t = Trace::default();
    hand_to(t.issue(v(1, 0, 1), (1, 0), 1, Some("a"), 10), (3, 1)).kind = IssueKind::Insert;
    t.issue(v(1, 0, 2), (3, 1), 1, Some("b"), 20);
    for verdict in trace_verdicts(&t, 3) {
        assert!(verdict.passed(), "{verdict}");
    }
    hand_to(&mut t.issued[0], (5, 2));
    fails(
        &check_migration(&t.issued, 3),
        "inserted 1.0.1 at 10µs naming n5 (dc2)",
    );
}

/// n1 (dc0) masters k and hands it to n3 (dc1) with 1.0.4; `n3_got_it`: n3 stored it.
/// n1 then crashes losing its unsynced writes (its next life logs as n10001), and writes
/// again in a new generation over 1.0.3, the record its disk kept.
fn lost_hand_over(n3_got_it: bool) -> Trace {
    let mut t = base();
    hand_to(t.issue(v(1, 0, 4), (1, 0), 1, Some("d"), 40), (3, 1));
    t.apply(1, v(1, 0, 4), Some("d"), 40);
    if n3_got_it {
        t.apply(3, v(1, 0, 4), Some("d"), 45);
    }
    t.issue(v(2, 0, 1), (1, 0), 0, Some("e"), 60);
    t.apply(10_001, v(2, 0, 1), Some("e"), 60);
    t
}

#[test]
fn a_hand_over_a_crash_erased_everywhere_does_not_bind_the_old_master() {
    // Regression (timeline-fsync seed 20, 20 s): the issue log alone shows n1 writing
    // after it handed the record over.
    let t = lost_hand_over(false);
    fails(
        &check_single_writer(&t.issued),
        "two writers: n1 re-inserted with 2.0.1",
    );
    // The apply log shows nobody else ever held 1.0.4, and n1 lost the life that did.
    let writer = check_single_writer_with(&t.issued, &t.applied);
    assert!(writer.passed(), "{writer}");
    assert!(writer.checked.contains("1 erased by crashes"), "{writer}");
    for verdict in [
        check_order(&t.issued, &t.applied),
        check_forks(&t.issued, &t.applied),
    ] {
        assert!(verdict.passed(), "{verdict}");
    }
    // Nor does an erased write count in the migration window: n1's dc1 write 1.0.4 (from
    // the lost life) and its next dc1 write 2.0.1 follow 1.0.3 from dc1, yet only two of
    // the surviving last three came from dc1, so 2.0.1 rightly kept the master.
    let mut t = lost_hand_over(false);
    t.issued[3].new_master_node = NodeId(1);
    t.issued[3].new_master_dc = DcId(0);
    t.issued[4].origin_dc = DcId(1);
    fails(&check_migration(&t.issued, 3), "missed migration");
    let migration = check_migration_with_applied(&t.issued, &t.applied, 3, &BTreeMap::new());
    assert!(migration.passed(), "{migration}");
    // A hand-over the new master stored binds the old master, crash or not.
    let t = lost_hand_over(true);
    fails(
        &check_single_writer_with(&t.issued, &t.applied),
        "two writers: n1 re-inserted with 2.0.1",
    );
    // So does one the old master's life still holds (it never lost a life).
    let mut t = lost_hand_over(false);
    t.applied.last_mut().unwrap().node = NodeId(1);
    fails(
        &check_single_writer_with(&t.issued, &t.applied),
        "two writers: n1 re-inserted with 2.0.1",
    );
}

#[test]
fn a_second_generation_over_a_live_record_fails() {
    let mut t = base();
    t.issue(v(2, 0, 1), (2, 0), 0, Some("x"), 40).kind = IssueKind::Insert;
    fails(
        &check_single_writer(&t.issued),
        "n2 started generation 2 with 2.0.1 at 40µs while the record was live",
    );
    // After a delete the arbiter may start one, from any node.
    let mut t = base();
    t.issue(v(1, 0, 4), (1, 0), 0, None, 40);
    t.issue(v(2, 0, 1), (2, 0), 0, Some("x"), 50).kind = IssueKind::Insert;
    assert!(check_single_writer(&t.issued).passed());
    // But a re-insert written by another node than the tombstone's master is a second writer.
    t.issued[4].kind = IssueKind::Write;
    fails(
        &check_single_writer(&t.issued),
        "two writers: n2 re-inserted with 2.0.1",
    );
}

/// n1 (dc0) masters k; n3 (dc1) is forced master while n1, cut off, still writes 1.0.3.
fn forced() -> Trace {
    let mut t = Trace::default();
    t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
    t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 20);
    t.issue(v(1, 1, 1), (3, 1), 1, Some("b"), 30).kind = IssueKind::ForceMaster;
    t.issue(v(1, 0, 3), (1, 0), 0, Some("lost"), 35);
    t.issue(v(1, 1, 2), (3, 1), 1, Some("c"), 40);
    for (node, at) in [(1, 0), (2, 5)] {
        t.apply(node, v(1, 0, 1), Some("a"), 10 + at);
        t.apply(node, v(1, 0, 2), Some("b"), 20 + at);
        t.apply(node, v(1, 0, 3), Some("lost"), 35 + at);
        t.apply(node, v(1, 1, 1), Some("b"), 60 + at);
        t.apply(node, v(1, 1, 2), Some("c"), 70 + at);
    }
    t.apply(3, v(1, 0, 2), Some("b"), 25);
    t.apply(3, v(1, 1, 1), Some("b"), 30);
    t.apply(3, v(1, 1, 2), Some("c"), 40);
    t
}

#[test]
fn a_deposed_masters_writes_are_fenced_not_reordered() {
    let t = forced();
    for verdict in trace_verdicts(&t, 3) {
        assert!(verdict.passed(), "{verdict}");
    }
    let writer = check_single_writer(&t.issued);
    assert!(
        writer
            .checked
            .contains("1 forced re-masters, 1 versions by deposed masters"),
        "{writer}"
    );
    // The deposed master must still increase within its reign, and only it may write there.
    let mut t2 = forced();
    t2.issued[3].ver = v(1, 0, 0);
    fails(
        &check_order(&t2.issued, &t2.applied),
        "issued out of order: n1 issued 1.0.0 at 35µs after n1 had issued 1.0.2 at 20µs",
    );
    let mut t3 = forced();
    t3.issued[3].by_node = NodeId(2);
    fails(
        &check_single_writer(&t3.issued),
        "two writers: n2 issued 1.0.3",
    );
}

#[test]
fn only_a_forced_re_master_raises_mepoch() {
    let mut t = forced();
    t.issued[2].kind = IssueKind::Write;
    fails(
        &check_single_writer(&t.issued),
        "n3 issued 1.1.1 at 30µs as a write, raising mepoch over 1.0.2",
    );
    let mut t = forced();
    hand_to(&mut t.issued[2], (1, 0));
    fails(&check_single_writer(&t.issued), "named n1 master");
    // A new reign below the current one by a node that never mastered that epoch is no
    // deposed master.
    let mut t = forced();
    t.issued[3].ver = v(2, 0, 1);
    t.issued[3].by_node = NodeId(2);
    fails(
        &check_single_writer(&t.issued),
        "in a new reign 2.0 below the current reign 1.1",
    );
    // The deposed master itself may open a new generation in its fenced epoch (its first
    // write after a restart or a hand-over does): fenced, not a violation.
    let mut t = forced();
    t.issued[3].ver = v(2, 0, 1);
    let verdict = check_single_writer(&t.issued);
    assert!(verdict.passed(), "{verdict}");
}

#[test]
fn a_forced_re_master_continues_the_window_of_the_record_it_copied() {
    // n1 (dc0) masters k. Cut off, it takes two more writes from dc0 (1.0.3, 1.0.4) that
    // n3 (dc1) never receives; n3 is forced master from its copy 1.0.2 (recent [0, 1]),
    // and the next write from dc0 makes [0, 0, 1]: no migration is due. Continuing the
    // deposed master's window [0, 0, 0] would wrongly call it a missed migration.
    let mut t = Trace::default();
    t.issue(v(1, 0, 1), (1, 0), 1, Some("a"), 10).kind = IssueKind::Insert;
    t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 20);
    t.issue(v(1, 0, 3), (1, 0), 0, Some("c"), 30);
    t.issue(v(1, 0, 4), (1, 0), 0, Some("d"), 35);
    t.issue(v(1, 1, 1), (3, 1), 1, Some("b"), 40).kind = IssueKind::ForceMaster;
    t.issue(v(1, 1, 2), (3, 1), 0, Some("e"), 50);
    let verdict = check_migration(&t.issued, 3);
    assert!(verdict.passed(), "{verdict}");
    // One more write from dc0 completes three in a row: now the master must move.
    t.issue(v(1, 1, 3), (3, 1), 0, Some("f"), 60);
    fails(&check_migration(&t.issued, 3), "missed migration");
}

#[test]
fn migration_targets_excuse_a_migration_to_no_one_and_pin_the_replica() {
    let mut t = Trace::default();
    t.issue(v(1, 0, 1), (1, 0), 1, Some("a"), 10).kind = IssueKind::Insert;
    t.issue(v(1, 0, 2), (1, 0), 1, Some("b"), 20);
    t.issue(v(1, 0, 3), (1, 0), 1, Some("c"), 30);
    fails(&check_migration(&t.issued, 3), "missed migration");
    // n1 believed no replica of dc1 up: the migration had nowhere to go.
    let mut targets = MigrationTargets::new();
    targets.insert((Key::from("k"), v(1, 0, 3)), MigrationTarget::FirstUp(None));
    let verdict = check_migration_with(&t.issued, 3, &targets);
    assert!(verdict.passed(), "{verdict}");
    assert!(
        verdict.checked.contains("1 due with no replica"),
        "{verdict}"
    );
    // A migration must go to the first up replica of the origin DC.
    hand_to(&mut t.issued[2], (4, 1));
    let first_up = |n| MigrationTarget::FirstUp(Some(NodeId(n)));
    targets.insert((Key::from("k"), v(1, 0, 3)), first_up(3));
    fails(
        &check_migration_with(&t.issued, 3, &targets),
        "migration to the wrong replica: 1.0.3 at 30µs moved the master from n1 (dc0) to \
         n4 (dc1), but the first replica of the key in dc1 that n1 believed up was n3",
    );
    targets.insert((Key::from("k"), v(1, 0, 3)), first_up(4));
    assert!(check_migration_with(&t.issued, 3, &targets).passed());
    // A master a layout change took off the key's preference list hands over at once.
    let mut t = Trace::default();
    t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
    hand_to(t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 20), (2, 0));
    fails(&check_migration(&t.issued, 3), "migration without 3");
    let targets =
        MigrationTargets::from([((Key::from("k"), v(1, 0, 2)), MigrationTarget::NotAPrimary)]);
    let verdict = check_migration_with(&t.issued, 3, &targets);
    assert!(verdict.passed(), "{verdict}");
    assert!(verdict.checked.contains("1 by masters no longer primaries"));
}

/// A primary's final record: version, content, master.
type Held<'a> = Option<(TlVersion, Option<&'a str>, u32)>;

fn finals(list: &[(u32, Held<'_>)]) -> TlFinals {
    let per = list
        .iter()
        .map(|(n, r)| {
            let r = r.map(|(ver, c, m)| TlFinal {
                ver,
                content: content(c),
                master: NodeId(m),
            });
            (NodeId(*n), r)
        })
        .collect();
    BTreeMap::from([(Key::from("k"), per)])
}

#[test]
fn convergence_needs_equal_records_holding_the_highest_version() {
    let t = base();
    let top = Some((v(1, 0, 3), Some("c"), 1));
    let ok = finals(&[(1, top), (2, top), (3, top)]);
    let verdict = check_converged(&t.issued, &ok, true);
    assert!(verdict.passed(), "{verdict}");
    let lagging = finals(&[(1, top), (2, top), (3, Some((v(1, 0, 2), Some("b"), 1)))]);
    fails(
        &check_converged(&t.issued, &lagging, true),
        "replicas diverge after quiescence: n1 holds 1.0.3 \"c\" (master n1)",
    );
    let missing = finals(&[(1, top), (2, top), (3, None)]);
    fails(
        &check_converged(&t.issued, &missing, false),
        "n3 holds no record",
    );
    // Equal, but below what a master issued: a lost version (unless not asserted).
    let old = Some((v(1, 0, 2), Some("b"), 1));
    let lost = finals(&[(1, old), (2, old), (3, old)]);
    fails(
        &check_converged(&t.issued, &lost, true),
        "lost version: every primary holds 1.0.2 \"b\" (master n1), but n1 issued 1.0.3",
    );
    assert!(check_converged(&t.issued, &lost, false).passed());
    // A deposed master's fenced versions rank below the forced epoch.
    let f = forced();
    let top = Some((v(1, 1, 2), Some("c"), 3));
    let ok = finals(&[(1, top), (2, top), (3, top)]);
    let verdict = check_converged(&f.issued, &ok, true);
    assert!(verdict.passed(), "{verdict}");
}

/// Hand-made client operations on key `k`.
#[derive(Default)]
struct Ops {
    h: TlHistory,
}

impl Ops {
    fn op(&mut self, client: u32, op: TlOp, t: (u64, u64), result: TlResult) -> OpId {
        let id = self
            .h
            .invoke(ClientId(client), DcId(client % 2), "k", op, t.0);
        self.h.complete(id, result, t.1);
        id
    }

    fn write(&mut self, client: u32, value: &str, t: (u64, u64), ver: TlVersion) -> OpId {
        let op = TlOp::Write {
            value: Value::from(value.to_string()),
        };
        self.op(client, op, t, TlResult::Written { ver })
    }

    fn tas(
        &mut self,
        client: u32,
        expected: Option<TlVersion>,
        value: &str,
        t: (u64, u64),
        result: TlResult,
    ) -> OpId {
        let value = Value::from(value.to_string());
        self.op(client, TlOp::TestAndSet { expected, value }, t, result)
    }

    fn read(
        &mut self,
        client: u32,
        op: TlOp,
        t: (u64, u64),
        ver: Option<TlVersion>,
        value: Option<&str>,
    ) -> OpId {
        let value = content(value);
        self.op(client, op, t, TlResult::Read { ver, value })
    }
}

const CRIT: fn(TlVersion) -> TlOp = |min| TlOp::ReadCritical { min };

/// 1.0.1 "a" issued at 10, 1.0.2 "b" at 30, a tombstone 1.0.3 at 50; the two writes and the
/// delete acknowledged; reads that the spec allows.
fn reads() -> (Trace, Ops) {
    let mut t = Trace::default();
    t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
    t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 30);
    t.issue(v(1, 0, 3), (1, 0), 0, None, 50);
    let mut o = Ops::default();
    o.write(1, "a", (5, 12), v(1, 0, 1));
    o.write(1, "b", (25, 32), v(1, 0, 2));
    o.op(
        1,
        TlOp::Delete,
        (45, 52),
        TlResult::Written { ver: v(1, 0, 3) },
    );
    o.read(2, TlOp::ReadLatest, (28, 31), Some(v(1, 0, 1)), Some("a")); // concurrent
    o.read(2, TlOp::ReadAny, (40, 41), Some(v(1, 0, 1)), Some("a")); // stale is fine
    o.read(3, CRIT(v(1, 0, 1)), (33, 34), Some(v(1, 0, 2)), Some("b"));
    o.read(3, TlOp::ReadLatest, (60, 61), Some(v(1, 0, 3)), None);
    o.read(3, TlOp::ReadLatest, (62, 63), None, None); // a tombstone as not found
    o.read(2, TlOp::ReadAny, (0, 1), None, None);
    (t, o)
}

#[test]
fn allowed_reads_pass() {
    let (t, o) = reads();
    let verdict = check_reads(&t.issued, &o.h).unwrap();
    assert!(verdict.passed(), "{verdict}");
    assert_eq!(
        verdict.checked,
        "6 reads (1 read_critical, 3 read_latest) and 3 acknowledged writes on 1 keys"
    );
    assert!(check_linearizability(&t.issued, &o.h).unwrap().passed());
}

#[test]
fn a_stale_read_critical_fails() {
    let (t, mut o) = reads();
    let r = o.read(4, CRIT(v(1, 0, 2)), (40, 45), Some(v(1, 0, 1)), Some("a"));
    let verdict = check_reads(&t.issued, &o.h).unwrap();
    fails(
        &verdict,
        "stale read_critical: op9 (c4 in dc0: read_critical(≥ 1.0.2)",
    );
    assert_eq!(verdict.violations[0].ops, vec![r]);
    let (t, mut o) = reads();
    o.read(4, CRIT(v(1, 0, 2)), (40, 45), None, None);
    fails(
        &check_reads(&t.issued, &o.h).unwrap(),
        "returned not found), below",
    );
}

#[test]
fn a_read_latest_missing_an_acknowledged_write_fails() {
    let (t, mut o) = reads();
    let r = o.read(4, TlOp::ReadLatest, (35, 38), Some(v(1, 0, 1)), Some("a"));
    let verdict = check_reads(&t.issued, &o.h).unwrap();
    fails(
        &verdict,
        "stale read_latest: op9 (c4 in dc0: read_latest, invoked at 35µs, completed at 38µs, \
         returned 1.0.1 \"a\"), but op1 (c1 in dc1: write \"b\", invoked at 25µs, completed \
         at 32µs, acknowledged as 1.0.2) had been acknowledged",
    );
    assert_eq!(verdict.violations[0].ops, vec![r, OpId(1)]);
    fails(
        &check_linearizability(&t.issued, &o.h).unwrap(),
        "not linearizable",
    );
    // Not found is no answer after a live write.
    let (t, mut o) = reads();
    o.read(4, TlOp::ReadLatest, (35, 38), None, None);
    fails(&check_reads(&t.issued, &o.h).unwrap(), "stale read_latest");
}

#[test]
fn reads_of_unissued_or_altered_versions_fail() {
    let (t, mut o) = reads();
    o.read(4, TlOp::ReadAny, (40, 41), Some(v(1, 0, 9)), Some("z"));
    o.read(4, TlOp::ReadAny, (42, 43), Some(v(1, 0, 2)), Some("x"));
    o.read(4, TlOp::ReadAny, (20, 21), Some(v(1, 0, 2)), Some("b"));
    let verdict = check_reads(&t.issued, &o.h).unwrap();
    fails(&verdict, "phantom read: op9");
    fails(&verdict, "wrong content: op10");
    fails(&verdict, "read from the future: op11");
    assert_eq!(verdict.violations.len(), 3, "{verdict}");
}

#[test]
fn acknowledged_writes_must_have_been_issued_while_they_ran() {
    let (t, mut o) = reads();
    o.write(4, "q", (70, 80), v(1, 0, 4));
    o.write(4, "b", (70, 80), v(1, 0, 2));
    let verdict = check_reads(&t.issued, &o.h).unwrap();
    fails(&verdict, "phantom acknowledgement: op9");
    fails(&verdict, "issued 1.0.2 at 30µs, outside the operation");
}

/// 1.0.1 "a" (10), then TAS calls on 1.0.1: op1 wins with 1.0.2 "b" (30), op2 loses seeing
/// 1.0.2, op3 ran before 1.0.1 existed.
fn tas() -> (Trace, Ops) {
    let mut t = Trace::default();
    t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
    t.issue(v(1, 0, 2), (1, 0), 1, Some("b"), 30);
    let mut o = Ops::default();
    o.write(1, "a", (5, 12), v(1, 0, 1));
    let won = TlResult::Written { ver: v(1, 0, 2) };
    o.tas(2, Some(v(1, 0, 1)), "b", (20, 40), won);
    let lost = TlResult::Mismatch {
        current: Some(v(1, 0, 2)),
    };
    o.tas(3, Some(v(1, 0, 1)), "x", (22, 42), lost);
    o.tas(
        4,
        Some(v(1, 0, 1)),
        "y",
        (6, 9),
        TlResult::Mismatch { current: None },
    );
    (t, o)
}

#[test]
fn one_winner_and_losers_seeing_it_pass() {
    let (t, o) = tas();
    let verdict = check_tas(&t.issued, &o.h).unwrap();
    assert!(verdict.passed(), "{verdict}");
    assert_eq!(
        verdict.checked,
        "3 test_and_set calls on 1 keys (1 succeeded, 2 mismatched)"
    );
    assert!(check_reads(&t.issued, &o.h).unwrap().passed());
    assert!(check_linearizability(&t.issued, &o.h).unwrap().passed());
}

#[test]
fn two_successful_tas_on_one_expected_version_fail() {
    let (mut t, mut o) = tas();
    t.issue(v(1, 0, 3), (1, 0), 0, Some("z"), 35);
    let second = o.tas(
        5,
        Some(v(1, 0, 1)),
        "z",
        (21, 41),
        TlResult::Written { ver: v(1, 0, 3) },
    );
    let verdict = check_tas(&t.issued, &o.h).unwrap();
    fails(&verdict, "2 test_and_set calls expecting 1.0.1 succeeded");
    fails(
        &verdict,
        "but 1.0.3 was issued over 1.0.2: it did not apply on the expected 1.0.1",
    );
    assert_eq!(verdict.violations[0].ops, vec![OpId(1), second]);
    fails(
        &check_linearizability(&t.issued, &o.h).unwrap(),
        "cas applied, so it needs \"1.0.1\"",
    );
}

#[test]
fn a_loser_reporting_less_than_the_winner_fails() {
    let (t, mut o) = tas();
    // Started after 1.0.1 was issued, yet saw nothing newer than... nothing.
    o.tas(
        5,
        Some(v(1, 0, 1)),
        "w",
        (15, 45),
        TlResult::Mismatch { current: None },
    );
    let verdict = check_tas(&t.issued, &o.h).unwrap();
    fails(&verdict, "op4 (c5 in dc1: test_and_set(1.0.1) \"w\"");
    fails(&verdict, "lost to op1");
    fails(&verdict, "stale mismatch");
    // A mismatch naming the expected version contradicts itself.
    let (t, mut o) = tas();
    let own = TlResult::Mismatch {
        current: Some(v(1, 0, 1)),
    };
    o.tas(5, Some(v(1, 0, 1)), "w", (15, 45), own);
    fails(
        &check_tas(&t.issued, &o.h).unwrap(),
        "must name another version",
    );
    // So does insert-if-absent rejected on an absent record.
    let (t, mut o) = tas();
    o.tas(5, None, "w", (50, 55), TlResult::Mismatch { current: None });
    fails(
        &check_tas(&t.issued, &o.h).unwrap(),
        "fails only on a live record",
    );
}

#[test]
fn a_write_tas_read_latest_history_is_linearizable() {
    let mut t = Trace::default();
    t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 5).kind = IssueKind::Insert;
    t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 30);
    t.issue(v(1, 0, 3), (1, 0), 0, Some("c"), 55);
    t.issue(v(1, 0, 4), (1, 0), 0, None, 75);
    t.issue(v(2, 0, 1), (1, 0), 0, Some("e"), 97);
    t.issue(v(2, 0, 2), (1, 0), 0, Some("x"), 125);
    let mut o = Ops::default();
    o.write(1, "a", (0, 10), v(1, 0, 1));
    o.write(1, "b", (20, 40), v(1, 0, 2));
    o.read(2, TlOp::ReadLatest, (25, 28), Some(v(1, 0, 1)), Some("a"));
    o.read(3, TlOp::ReadLatest, (32, 35), Some(v(1, 0, 2)), Some("b"));
    o.tas(
        1,
        Some(v(1, 0, 2)),
        "c",
        (50, 60),
        TlResult::Written { ver: v(1, 0, 3) },
    );
    let lost = TlResult::Mismatch {
        current: Some(v(1, 0, 3)),
    };
    o.tas(2, Some(v(1, 0, 2)), "d", (52, 62), lost);
    o.op(
        1,
        TlOp::Delete,
        (70, 80),
        TlResult::Written { ver: v(1, 0, 4) },
    );
    o.read(2, TlOp::ReadLatest, (85, 90), Some(v(1, 0, 4)), None);
    o.tas(
        3,
        None,
        "e",
        (95, 100),
        TlResult::Written { ver: v(2, 0, 1) },
    );
    o.read(2, TlOp::ReadLatest, (105, 110), Some(v(2, 0, 1)), Some("e"));
    // Timed out, but the issue log shows it happened as 2.0.2.
    let unknown = TlOp::Write {
        value: Value::from("x"),
    };
    o.op(1, unknown, (120, 130), TlResult::Unknown("timeout".into()));
    o.read(3, TlOp::ReadLatest, (140, 150), Some(v(2, 0, 2)), Some("x"));
    // Failed for sure, and never issued.
    let failed = TlOp::Write {
        value: Value::from("y"),
    };
    o.op(
        2,
        failed,
        (150, 160),
        TlResult::Failed("master_unavailable".into()),
    );
    let verdict = check_linearizability(&t.issued, &o.h).unwrap();
    assert!(verdict.passed(), "{verdict}");
    assert_eq!(
        verdict.checked,
        "write, test_and_set, delete and read_latest: 12 operations on 1 keys"
    );
    for verdict in check_all(&t.issued, &t.applied, &o.h, 3).unwrap() {
        assert!(verdict.passed(), "{verdict}");
    }

    // Without the issue of 2.0.2, the unknown write never happened: reading it is wrong.
    t.issued.pop();
    let verdict = check_linearizability(&t.issued, &o.h).unwrap();
    fails(&verdict, "read \"2.0.2\"");
    assert_eq!(verdict.checker, "timeline-linearizability");
}

#[test]
fn unknown_writes_of_repeated_values_are_undecided() {
    let (t, mut o) = tas();
    let again = TlOp::Write {
        value: Value::from("b"),
    };
    o.op(5, again, (50, 60), TlResult::Unknown("timeout".into()));
    let verdict = check_linearizability(&t.issued, &o.h).unwrap();
    assert_eq!(verdict.status(), Status::Undecided, "{verdict}");
    assert!(
        verdict.undecided[0]
            .reason
            .contains("op4 has an unknown outcome and writes \"b\", like 1 other"),
        "{verdict}"
    );
}

#[test]
fn tl_history_pairs_operations_and_rejects_malformed_ones() {
    let mut h = TlHistory::new();
    let r = h.invoke(ClientId(1), DcId(0), "k", TlOp::ReadLatest, 10);
    h.invoke(ClientId(2), DcId(1), "j", TlOp::Delete, 11);
    h.complete(
        r,
        TlResult::Read {
            ver: Some(v(1, 0, 1)),
            value: content(Some("a")),
        },
        20,
    );
    let ops = h.operations().unwrap();
    assert_eq!(
        ops[0].to_string(),
        "op0 (c1 in dc0: read_latest, invoked at 10µs, completed at 20µs, returned 1.0.1 \"a\")"
    );
    assert_eq!(ops[1].result, TlResult::Unknown("never completed".into()));
    let by_key = h.operations_by_key().unwrap();
    assert_eq!(
        by_key.keys().map(|k| &k[..]).collect::<Vec<_>>(),
        [b"j", b"k"]
    );

    let mut h = TlHistory::new();
    let w = h.invoke(ClientId(1), DcId(0), "k", TlOp::ReadAny, 10);
    h.complete(w, TlResult::Written { ver: v(1, 0, 1) }, 12);
    let err = h.operations().unwrap_err();
    assert_eq!(
        err.to_string(),
        "op0: a read_any cannot return acknowledged as 1.0.1"
    );

    let mut h = TlHistory::new();
    let w = h.invoke(ClientId(1), DcId(0), "k", TlOp::Delete, 10);
    h.complete(w, TlResult::Mismatch { current: None }, 12);
    assert!(matches!(h.operations(), Err(Error::ResultMismatch { .. })));

    let mut h = TlHistory::new();
    let w = h.invoke(ClientId(1), DcId(0), "k", TlOp::Delete, 10);
    h.complete(w, TlResult::Failed("master_unavailable".into()), 9);
    assert!(matches!(
        h.operations(),
        Err(Error::CompletedBeforeInvoked { .. })
    ));
    assert!(check_reads(&[], &h).is_err());
}
