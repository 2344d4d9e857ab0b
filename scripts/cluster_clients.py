"""Real cluster-aware Redis clients against a running `meridian up` cluster (loopback).

Run by scripts/cluster-clients.sh: python cluster_clients.py HTTP_URL. Uses redis-py's
RedisCluster (from PyPI): SET/GET, MGET with hash tags (mget_nonatomic and same-tag mget),
pipelines, and checks that a client seeded in a DC sends every single-key command to that DC
(by redis-py's own routing, get_node_from_key, and by each node's command counters); then
transactions on transactional buckets, its Lock, Lua scripts and a stream consumer group from
both DCs, expiry on every bucket type and INCR from both DCs,
and a RedisCluster client working on keys the placement planner moves between partitions.
Prints `N passed, M failed`; exits non-zero on any failure.
"""

import json
import sys
import traceback
import urllib.request

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

PASSED = 0
FAILED = 0


def check(name, fn):
    global PASSED, FAILED
    try:
        fn()
        PASSED += 1
        print(f"ok   {name}")
    except Exception:  # noqa: BLE001 - every failure is reported, then counted
        FAILED += 1
        print(f"FAIL {name}")
        traceback.print_exc()


def members(http):
    with urllib.request.urlopen(f"{http}/cluster", timeout=10) as r:
        doc = json.load(r)
    out = {}
    for m in doc["members"]:
        host, port = m["resp"].rsplit(":", 1)
        out[(host, int(port))] = m["dc"]
    return out


def commands_processed(clients):
    """`total_commands_processed` of every node, over one kept connection per node (a new
    connection's handshake would be counted too)."""
    return {a: int(c.info("stats")["total_commands_processed"]) for a, c in clients.items()}


def put_bucket(http, name, props):
    req = urllib.request.Request(
        f"{http}/buckets/{name}", data=json.dumps(props).encode(), method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200, r.status


ACCOUNTS = 20
START = 100


def transfer(r, src, dst, amount):
    """redis-py's optimistic retry loop: WATCH, read, MULTI, write, EXEC (nil -> retry)."""
    with r.pipeline(transaction=True) as p:
        while True:
            try:
                p.watch(src, dst)
                a, b = int(p.get(src)), int(p.get(dst))
                if a < amount:
                    p.unwatch()
                    return False
                p.multi()
                p.set(src, a - amount)
                p.set(dst, b + amount)
                p.execute()
                return True
            except redis.WatchError:
                continue


def audit(r, keys):
    """Every balance inside one MULTI/EXEC: one snapshot."""
    p = r.pipeline(transaction=True)
    for k in keys:
        p.get(k)
    return [int(v) for v in p.execute()]


def bank(http, by_dc):
    """Clients in two DCs (plain redis-py clients, one per node: Meridian nodes serve every
    key) move money between accounts on different partitions with pipeline(transaction=True)
    + watch, while auditors in both DCs read every account inside MULTI/EXEC: every audit
    sees the same total, no balance goes negative, and the final total is exact."""
    import random
    import threading

    put_bucket(http, "bank", {"type": "transactional"})
    keys = [f"bank:acct{i}" for i in range(ACCOUNTS)]
    slots = {key_slot(k.encode()) for k in keys}
    assert len(slots) > 10, "accounts span many slots"
    nodes = [addr for dc in sorted(by_dc) for addr in by_dc[dc]]
    first = redis.Redis(host=nodes[0][0], port=nodes[0][1], decode_responses=True, socket_timeout=30)
    p = first.pipeline(transaction=True)
    for k in keys:
        p.set(k, START)
    p.execute()
    errors, audits, moved = [], [], [0]
    lock = threading.Lock()

    def mover(addr, seed):
        try:
            r = redis.Redis(host=addr[0], port=addr[1], decode_responses=True, socket_timeout=30)
            rng = random.Random(seed)
            for _ in range(40):
                a, b = rng.sample(keys, 2)
                if transfer(r, a, b, rng.randint(1, 40)):
                    with lock:
                        moved[0] += 1
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(repr(e))

    def auditor(addr):
        try:
            r = redis.Redis(host=addr[0], port=addr[1], decode_responses=True, socket_timeout=30)
            for _ in range(25):
                balances = audit(r, keys)
                audits.append(sum(balances))
                assert min(balances) >= 0, balances
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=mover, args=(a, i)) for i, a in enumerate(nodes)]
    threads += [threading.Thread(target=auditor, args=(a,)) for a in (nodes[0], nodes[-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert audits and all(t == START * ACCOUNTS for t in audits), sorted(set(audits))
    assert sum(audit(first, keys)) == START * ACCOUNTS
    assert moved[0] > 20, moved
    # The accounts live only at their partitions' leaders, and a cluster client lists them:
    # SCAN and KEYS over every master of each DC's view find each account once.
    for dc in sorted(by_dc):
        rc = RedisCluster(startup_nodes=[ClusterNode(*by_dc[dc][0])], decode_responses=True)
        scanned = list(rc.scan_iter(match="bank:acct*", count=7))
        assert sorted(scanned) == sorted(keys), (dc, len(scanned), len(keys))
        listed = rc.keys("bank:acct*", target_nodes=RedisCluster.PRIMARIES)
        assert sorted(listed) == sorted(keys), (dc, len(listed))
        rc.close()


def expiry_on_every_bucket_type(http, by_dc):
    """SET EX / PX, TTL, PERSIST, GETEX and expiry through RedisCluster clients of both DCs,
    on an eventual, a timeline and a transactional bucket: the TTL travels with the value to
    the other DC, and an expired key is gone everywhere."""
    import time

    put_bucket(http, "ex", {"type": "eventual"})
    put_bucket(http, "tlx", {"type": "timeline"})
    put_bucket(http, "txx", {"type": "transactional"})
    dcs = sorted(by_dc)
    near, far = (
        RedisCluster(startup_nodes=[ClusterNode(*by_dc[dc][0])], decode_responses=True,
                     socket_timeout=10)
        for dc in (dcs[0], dcs[-1])
    )
    def eventually(what, ok, timeout=5):
        # Replicas in the other DC see a write after the WAN's delay, not at once.
        deadline = time.time() + timeout
        while True:
            v = what()
            if ok(v) or time.time() > deadline:
                return v
            time.sleep(0.05)

    for bucket in ("ex", "tlx", "txx"):
        k = f"{bucket}:session"
        assert near.set(k, "v", ex=100) is True
        ttl = eventually(lambda: far.ttl(k), lambda t: 0 < t <= 100)
        assert 0 < ttl <= 100, (bucket, ttl)
        assert far.persist(k) is True
        assert eventually(lambda: near.ttl(k), lambda t: t == -1) == -1, bucket
        assert near.getex(k, px=400) == "v"
        pttl = eventually(lambda: near.pttl(k), lambda t: 0 < t <= 400)
        assert 0 < pttl <= 400, (bucket, pttl)
        time.sleep(0.6)
        assert near.get(k) is None and far.get(k) is None, bucket
        assert near.ttl(k) == -2 and near.exists(k) == 0, bucket
        if bucket == "ex":
            try:
                near.set(k, "w", nx=True)
                raise AssertionError("SET NX on an eventual bucket must be refused")
            except redis.ResponseError as e:
                assert "not supported on eventual buckets" in str(e), e
        else:
            assert near.set(k, "w", nx=True) is True
            assert near.set(k, "x", nx=True) is None
    near.close()
    far.close()


def incr_from_two_dcs(http, by_dc):
    """INCR under concurrent clients in both DCs, on an eventual bucket (a PN-counter merged
    across replicas) and a timeline bucket (test-and-set at the record's master): once the
    cluster settles, no increment is lost and every node reads the same total."""
    import threading
    import time

    put_bucket(http, "cnt", {"type": "eventual"})
    put_bucket(http, "tlc", {"type": "timeline"})
    nodes = [addr for dc in sorted(by_dc) for addr in by_dc[dc]]
    per_client, errors = 40, []

    def client(addr, key):
        try:
            r = redis.Redis(host=addr[0], port=addr[1], socket_timeout=30)
            for _ in range(per_client):
                r.incr(key)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(repr(e))

    for key in ("cnt:hits", "tlc:hits"):
        threads = [threading.Thread(target=client, args=(a, key)) for a in nodes for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        want = str(per_client * len(threads))
        deadline = time.time() + 10
        while True:
            seen = [redis.Redis(host=a[0], port=a[1], decode_responses=True).get(key) for a in nodes]
            if all(v == want for v in seen) or time.time() > deadline:
                break
            time.sleep(0.1)
        assert all(v == want for v in seen), (key, want, seen)
    r = redis.Redis(host=nodes[0][0], port=nodes[0][1])
    try:
        r.append("cnt:hits", "x")
        raise AssertionError("APPEND on an eventual bucket must be refused")
    except redis.ResponseError as e:
        assert "not supported on eventual buckets" in str(e), e


def scan_while_inserting(by_dc):
    """SCAN with COUNT over 20k keys through a RedisCluster client while another client
    inserts: every key that existed throughout is seen, exactly once per node; COUNT bounds
    each reply; KEYS and DBSIZE agree with the iteration."""
    import threading
    import time

    dcs = sorted(by_dc)
    seed = by_dc[dcs[0]][0]
    rc = RedisCluster(startup_nodes=[ClusterNode(*seed)], decode_responses=True, socket_timeout=30)
    base = [f"scan-{i}" for i in range(20_000)]
    p = rc.pipeline()
    for i, k in enumerate(base):
        p.set(k, i)
        if i % 1000 == 999:
            p.execute()
            p = rc.pipeline()
    p.execute()

    def listed():
        return sorted(rc.keys(target_nodes=RedisCluster.PRIMARIES))

    # A key is listed by its slot's master in the client's DC once replication reaches it.
    deadline = time.time() + 30
    while sum(1 for k in listed() if k.startswith("scan-")) < len(base) and time.time() < deadline:
        time.sleep(0.2)
    stop, inserted, errors = threading.Event(), [], []

    def inserter():
        try:
            w = RedisCluster(startup_nodes=[ClusterNode(*by_dc[dcs[-1]][0])], socket_timeout=30)
            i = 0
            while not stop.is_set() and i < 20_000:
                w.set(f"scan-new-{i}", i)
                inserted.append(i)
                i += 1
            w.close()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(repr(e))

    t = threading.Thread(target=inserter)
    t.start()
    seen, per_node_dups = [], 0
    for node in rc.get_primaries():
        direct = redis.Redis(host=node.host, port=node.port, decode_responses=True,
                             socket_timeout=30)
        cursor, mine = 0, []
        while True:
            cursor, keys = direct.scan(cursor=cursor, match="scan-*", count=100)
            assert len(keys) <= 100, len(keys)
            mine.extend(keys)
            if cursor == 0:
                break
        per_node_dups += len(mine) - len(set(mine))
        seen.extend(mine)
    stop.set()
    t.join()
    assert not errors, errors
    assert inserted, "the inserter ran"
    missing = set(base) - set(seen)
    assert not missing, (len(missing), sorted(missing)[:5])
    assert per_node_dups == 0, per_node_dups
    # The slots of one DC's masters are disjoint: no key from two nodes.
    assert len(seen) == len(set(seen)), len(seen) - len(set(seen))
    # redis-py's own iterator over every primary, with TYPE.
    assert set(base) <= set(rc.scan_iter(match="scan-*", count=500, _type="string"))
    assert not [k for k in rc.scan_iter(match="scan-*", _type="hash")]
    total = rc.dbsize(target_nodes=RedisCluster.PRIMARIES)  # redis-py sums the primaries'
    assert total >= len(base), (total, len(base))
    rc.close()


def hashes_on_every_bucket_type(http, by_dc):
    """HSET / HGETALL / HINCRBY / HDEL through RedisCluster clients of both DCs on an
    eventual (a map CRDT), a timeline and a transactional bucket; concurrent HSETs of
    different fields and HINCRBYs of one field from both DCs all survive; WRONGTYPE both
    ways."""
    import threading
    import time

    put_bucket(http, "hh", {"type": "eventual"})
    put_bucket(http, "tlh", {"type": "timeline"})
    put_bucket(http, "txh", {"type": "transactional"})
    dcs = sorted(by_dc)
    near, far = (
        RedisCluster(startup_nodes=[ClusterNode(*by_dc[dc][0])], decode_responses=True,
                     socket_timeout=10)
        for dc in (dcs[0], dcs[-1])
    )

    def settle(read, want, timeout=10):
        deadline = time.time() + timeout
        while True:
            got = read()
            if got == want or time.time() > deadline:
                return got
            time.sleep(0.05)

    nodes = [addr for dc in dcs for addr in by_dc[dc]]
    for bucket in ("hh", "tlh", "txh"):
        k = f"{bucket}:user:1"
        assert near.hset(k, mapping={"name": "ada", "lang": "en"}) == 2
        assert near.hset(k, "lang", "fr") == 0
        assert settle(lambda: far.hgetall(k), {"name": "ada", "lang": "fr"}) == \
            {"name": "ada", "lang": "fr"}, bucket
        assert far.hmget(k, "name", "none") == ["ada", None]
        assert near.hincrby(k, "visits", 5) == 5
        assert near.hdel(k, "lang", "none") == 1
        assert settle(lambda: far.hgetall(k), {"name": "ada", "visits": "5"}) == \
            {"name": "ada", "visits": "5"}, bucket
        assert far.hlen(k) == 2 and far.hexists(k, "name") and not far.hexists(k, "lang")
        assert sorted(far.hkeys(k)) == ["name", "visits"]
        assert far.type(k) == "hash"
        s = f"{bucket}:plain"
        near.set(s, "x")
        for call in (lambda: near.hset(s, "f", "v"), lambda: near.get(k)):
            try:
                call()
                raise AssertionError(f"{bucket}: WRONGTYPE expected")
            except redis.ResponseError as e:
                assert str(e).startswith("WRONGTYPE"), e

        # Concurrent writers on every node of both DCs: distinct fields and one counter.
        errors, per_client = [], 20
        key = f"{bucket}:{{shared}}"

        def writer(addr, n):
            try:
                r = redis.Redis(host=addr[0], port=addr[1], socket_timeout=30)
                for i in range(per_client):
                    r.hset(key, f"n{n}-{i}", i)
                    r.hincrby(key, "total", 1)
            except Exception as e:  # noqa: BLE001 - reported by the main thread
                errors.append(repr(e))

        threads = [threading.Thread(target=writer, args=(a, n)) for n, a in enumerate(nodes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, (bucket, errors)
        want = {f"n{n}-{i}": str(i) for n in range(len(nodes)) for i in range(per_client)}
        want["total"] = str(per_client * len(nodes))
        for addr in nodes:
            r = redis.Redis(host=addr[0], port=addr[1], decode_responses=True)
            got = settle(lambda: r.hgetall(key), want)
            assert got == want, (bucket, addr, len(got), got.get("total"))
    near.close()
    far.close()


def select_maps_databases_to_buckets(by_dc):
    """SELECT n gives a connection database n, the bucket db<n>, on any node of either DC (as
    Valkey 9 serves numbered databases in cluster mode): a redis-py client of db 3 reads its
    own write from the other DC, SCAN there lists it by its own name, database 0 does not see
    it, and SELECT 16 is refused, never silently moved to database 0."""
    import os
    dcs = sorted(by_dc)
    near, far = by_dc[dcs[0]][0], by_dc[dcs[1]][0]
    key = f"select-{os.getpid()}"
    r3 = redis.Redis(host=near[0], port=near[1], db=3, decode_responses=True)
    far3 = redis.Redis(host=far[0], port=far[1], db=3, decode_responses=True)
    r0 = redis.Redis(host=near[0], port=near[1], decode_responses=True)
    assert r3.set(key, "three")
    assert far3.get(key) == "three", far3.get(key)
    assert r0.get(key) is None, "database 0 sees database 3's key"
    listed = set()
    for addr in by_dc[dcs[1]]:
        node3 = redis.Redis(host=addr[0], port=addr[1], db=3, decode_responses=True)
        listed |= set(node3.scan_iter(match=key))
    assert listed == {key}, listed
    try:
        r3.execute_command("SELECT", 16)
        raise AssertionError("SELECT 16 must be refused")
    except redis.ResponseError as e:
        assert "DB index is out of range" in str(e), e
    assert far3.delete(key) == 1


def flushall_resets_the_cluster(http, by_dc):
    """FLUSHALL through a RedisCluster client (sent to every primary, as redis-py does)
    empties eventual, timeline and transactional buckets on every node of both DCs at once,
    as a test harness resetting its state expects; writes after it are kept; FLUSHDB ASYNC on
    one node does the same."""
    import time

    put_bucket(http, "evf", {"type": "eventual"})
    put_bucket(http, "tlf", {"type": "timeline"})
    put_bucket(http, "txf", {"type": "transactional"})
    dcs = sorted(by_dc)
    near = RedisCluster(startup_nodes=[ClusterNode(*by_dc[dcs[0]][0])], decode_responses=True)
    far = RedisCluster(startup_nodes=[ClusterNode(*by_dc[dcs[-1]][0])], decode_responses=True)
    keys = [f"{b}flush-{i}" for b in ("", "evf:", "tlf:", "txf:") for i in range(30)]
    for k in keys:
        near.set(k, "old")
    near.hset("flush-h", mapping={"a": 1})
    near.incrby("flush-n", 5)
    flushed = near.flushall()  # one reply per primary
    assert isinstance(flushed, dict) and flushed and all(v is True for v in flushed.values()), flushed
    assert near.dbsize(target_nodes=RedisCluster.PRIMARIES) == 0
    assert far.dbsize(target_nodes=RedisCluster.PRIMARIES) == 0
    assert far.mget_nonatomic(keys) == [None] * len(keys)
    assert far.hgetall("flush-h") == {} and far.get("flush-n") is None
    assert far.incr("flush-n") == 1, "a counter starts over"
    sel = keys[::10]  # three keys of each bucket
    for k in sel:
        far.set(k, "new")
    deadline = time.time() + 20
    while near.mget_nonatomic(sel) != ["new"] * len(sel) and time.time() < deadline:
        time.sleep(0.1)
    assert near.mget_nonatomic(sel) == ["new"] * len(sel), near.mget_nonatomic(sel)
    one = redis.Redis(host=by_dc[dcs[0]][0][0], port=by_dc[dcs[0]][0][1])
    assert one.flushdb(asynchronous=True) is True
    assert far.mget_nonatomic(sel) == [None] * len(sel)
    try:
        one.execute_command("FLUSHALL", "NOW")
        raise AssertionError("FLUSHALL NOW must be a syntax error")
    except redis.ResponseError as e:
        assert str(e) == "syntax error", e
    near.close()
    far.close()


def cluster_transaction(by_dc):
    """redis-py's RedisCluster transaction (keys of one slot, as Redis Cluster requires)."""
    host, port = by_dc[sorted(by_dc)[0]][0]
    rc = RedisCluster(startup_nodes=[ClusterNode(host, port)], decode_responses=True)
    try:
        with rc.pipeline(transaction=True) as p:
            p.set("bank:{t}a", 1)
            p.incrby("bank:{t}b", 5)
            p.get("bank:{t}a")
            # redis-py's cluster transactions return raw replies ('OK'), as against Redis.
            assert p.execute() == ["OK", 5, "1"]
    finally:
        rc.close()


def pubsub_across_dcs(by_dc):
    """redis-py's RedisCluster pub/sub: a subscriber seeded in one DC receives, in order and
    once each, what a cluster client seeded in the other DC publishes."""
    dcs = sorted(by_dc)
    sub_rc = RedisCluster(startup_nodes=[ClusterNode(*by_dc[dcs[0]][0])], decode_responses=True)
    pub_rc = RedisCluster(startup_nodes=[ClusterNode(*by_dc[dcs[-1]][0])], decode_responses=True)
    try:
        p = sub_rc.pubsub()
        p.subscribe("orders")
        p.psubscribe("events.*")
        want = {"subscribe", "psubscribe"}
        while want:
            m = p.get_message(timeout=10)
            assert m is not None, f"no confirmation for {want}"
            want.discard(m["type"])
        for n in range(20):
            pub_rc.publish("orders", f"o{n}")
        pub_rc.publish("events.login", "u7")
        got = []
        while len(got) < 21:
            m = p.get_message(timeout=10)
            assert m is not None, f"only {got} arrived"
            got.append((m["type"], m["channel"], m["data"]))
        assert got[:20] == [("message", "orders", f"o{n}") for n in range(20)], got
        assert got[20] == ("pmessage", "events.login", "u7"), got
        assert p.get_message(timeout=0.5) is None, "a message arrived twice"
        p.close()
    finally:
        sub_rc.close()
        pub_rc.close()


def scripts_and_streams_across_dcs(by_dc):
    """redis-py's RedisCluster on the default (timeline) bucket from both DCs: its Lock (a
    SET NX token, released and extended by Lua scripts), a registered Script (EVALSHA, with
    EVAL on NOSCRIPT: scripts are cached per node, as in Redis Cluster) incrementing from
    both DCs with none lost, and a stream consumer group: one DC produces, consumers in
    both DCs read with XREADGROUP and XACK, every entry delivered once."""
    dcs = sorted(by_dc)
    a = RedisCluster(startup_nodes=[ClusterNode(*by_dc[dcs[0]][0])], decode_responses=True)
    b = RedisCluster(startup_nodes=[ClusterNode(*by_dc[dcs[-1]][0])], decode_responses=True)
    try:
        lock = a.lock("{jobs}lock", timeout=30, blocking=False)
        assert lock.acquire(), "the free lock was not acquired"
        other = b.lock("{jobs}lock", timeout=30, blocking=False)
        assert not other.acquire(), "a held lock was acquired from the other DC"
        assert lock.extend(10)
        lock.release()
        assert other.acquire(), "the released lock was not acquired"
        other.release()
        bump = "local v = redis.call('incr', KEYS[1]) redis.call('rpush', KEYS[2], v) return v"
        sa, sb = a.register_script(bump), b.register_script(bump)
        for _ in range(25):
            sa(keys=["{jobs}n", "{jobs}log"])
            sb(keys=["{jobs}n", "{jobs}log"])
        assert a.get("{jobs}n") == "50" and b.llen("{jobs}log") == 50
        a.xgroup_create("{jobs}s", "workers", id="0", mkstream=True)
        for i in range(40):
            a.xadd("{jobs}s", {"job": str(i)})
        seen = []
        for client, name in [(a, "w1"), (b, "w2")] * 10:
            got = client.xreadgroup("workers", name, {"{jobs}s": ">"}, count=3)
            for _, entries in got:
                for entry_id, fields in entries:
                    seen.append(int(fields["job"]))
                    assert client.xack("{jobs}s", "workers", entry_id) == 1
        assert sorted(seen) == list(range(40)), seen
        assert b.xpending("{jobs}s", "workers")["pending"] == 0
    finally:
        a.close()
        b.close()


def metric_total(http_addrs, name):
    """The sum of a label-less series over every node's /metrics."""
    total = 0.0
    for addr in http_addrs:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    total += float(line.split()[1])
    return total


def keys_move_under_a_cluster_client(http, by_dc):
    """The planner (`meridian up --txn-planner --txn-plan-interval 1s`) moves keys of a
    transactional bucket between partition leaders while a redis-py RedisCluster client keeps
    incrementing and reading them: plain clients in both DCs run MULTI/EXEC over groups of
    four keys that hashing scatters over leaders (what makes the planner move them). Checks
    that keys moved during the run (`meridian_txn_keys_moved_total` over every node), that no
    client saw an error (redis-py's cluster client retries -TRYAGAIN itself; the nodes retry a
    key move before ever answering one), and that every acknowledged increment is there
    exactly once."""
    import random
    import threading
    import time

    with urllib.request.urlopen(f"{http}/cluster", timeout=10) as r:
        http_addrs = [m["http"] for m in json.load(r)["members"]]
    put_bucket(http, "mv", {"type": "transactional"})
    groups = [[f"mv:g{g}-{j}" for j in range(4)] for g in range(8)]
    assert len({key_slot(k.encode()) for grp in groups for k in grp}) > 16, "keys are scattered"
    moved_before = metric_total(http_addrs, "meridian_txn_keys_moved_total")
    stop = threading.Event()
    errors, lock = [], threading.Lock()
    group_commits = [0] * len(groups)
    key_incrs = {}

    def driver(addr, seed):
        try:
            r = redis.Redis(host=addr[0], port=addr[1], decode_responses=True, socket_timeout=30)
            rng = random.Random(seed)
            while not stop.is_set():
                g = rng.randrange(len(groups))
                p = r.pipeline(transaction=True)
                for k in groups[g]:
                    p.incr(k)
                assert len(p.execute()) == 4
                with lock:
                    group_commits[g] += 1
                time.sleep(0.002)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(f"driver {addr}: {e!r}")

    def cluster_client(seed_addr):
        rc = RedisCluster(startup_nodes=[ClusterNode(*seed_addr)], decode_responses=True,
                          socket_timeout=30)
        try:
            rng = random.Random(7)
            keys = [k for grp in groups for k in grp]
            while not stop.is_set():
                k = rng.choice(keys)
                rc.incr(k)
                with lock:
                    key_incrs[k] = key_incrs.get(k, 0) + 1
                int(rc.get(rng.choice(keys)) or 0)
        except Exception as e:  # noqa: BLE001
            errors.append(f"cluster client: {e!r}")
        finally:
            rc.close()

    dcs = sorted(by_dc)
    threads = [threading.Thread(target=driver, args=(by_dc[dc][0], i)) for i, dc in enumerate(dcs)]
    threads.append(threading.Thread(target=cluster_client, args=(by_dc[dcs[-1]][-1],)))
    for t in threads:
        t.start()
    moved, deadline, until = 0.0, time.monotonic() + 40, None
    try:
        while time.monotonic() < deadline and not errors:
            time.sleep(0.5)
            moved = metric_total(http_addrs, "meridian_txn_keys_moved_total") - moved_before
            if moved > 0 and until is None:
                until = time.monotonic() + 3  # keep the clients going over moved keys
            if until is not None and time.monotonic() >= until:
                break
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert moved > 0, "the planner moved no key within 40 s"
    assert sum(group_commits) > 0 and key_incrs, (group_commits, len(key_incrs))
    check_rc = RedisCluster(startup_nodes=[ClusterNode(*by_dc[dcs[0]][0])], decode_responses=True)
    try:
        for g, grp in enumerate(groups):
            for k in grp:
                want = group_commits[g] + key_incrs.get(k, 0)
                got = int(check_rc.get(k) or 0)
                assert got == want, f"{k}: {got} != {want}"
    finally:
        check_rc.close()
    print(f"     keys moved {int(moved)}, transactions {sum(group_commits)}, "
          f"cluster-client increments {sum(key_incrs.values())}, "
          f"key_moving aborts {int(metric_total(http_addrs, 'meridian_txn_key_moving_aborts_total'))}")


def main():
    http = sys.argv[1]
    dc_of = members(http)
    by_dc = {}
    for addr, dc in sorted(dc_of.items()):
        by_dc.setdefault(dc, []).append(addr)
    assert len(by_dc) >= 2, f"need two DCs, got {by_dc}"
    counters = {a: redis.Redis(host=a[0], port=a[1], single_connection_client=True) for a in dc_of}
    for c in counters.values():
        c.ping()

    for dc in sorted(by_dc, reverse=True):
        seed_host, seed_port = by_dc[dc][-1]
        rc = RedisCluster(
            startup_nodes=[ClusterNode(seed_host, seed_port)],
            decode_responses=True,
            socket_timeout=10,
        )
        tag = f"dc{dc}"

        def set_get():
            for i in range(50):
                assert rc.set(f"{tag}:k{i}", f"v{i}") is True
            for i in range(50):
                assert rc.get(f"{tag}:k{i}") == f"v{i}"
            assert rc.get(f"{tag}:missing") is None

        def routing_stays_in_dc():
            for i in range(1000):
                key = f"{tag}:{{user{i}}}.following" if i % 3 == 0 else f"{tag}-key-{i}"
                node = rc.get_node_from_key(key)
                assert dc_of[(node.host, node.port)] == dc, f"{key} -> {node.name}"
            slots = rc.cluster_slots(target_nodes=RedisCluster.RANDOM)
            covered = sorted(r for r in slots)
            assert covered[0][0] == 0 and covered[-1][1] == 16383, covered[:1]
            assert sum(e - s + 1 for s, e in covered) == 16384

        def refreshes_from_every_node_stay_in_dc():
            # What go-redis ReloadState, ioredis refreshSlotsCache and Lettuce's discovery do:
            # ask whichever known node for the map. Every node of this DC answers with this
            # DC's nodes only, so no number of refreshes leads out of it.
            for addr in by_dc[dc]:
                for _ in range(3):
                    slots = counters[addr].execute_command("CLUSTER SLOTS")
                    for first, last, *nodes in slots:
                        for n in nodes:
                            host = n[0].decode() if isinstance(n[0], bytes) else n[0]
                            assert dc_of[(host, int(n[1]))] == dc, (addr, first, last, n)
                    assert sum(r[1] - r[0] + 1 for r in slots) == 16384
                rc.nodes_manager.initialize()
                for n in rc.get_nodes():
                    assert dc_of[(n.host, n.port)] == dc, n.name

        def keyslot_matches_the_client():
            for key in ["somekey", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap",
                        f"{tag}:{{x}}y", "img:cat.png"]:
                assert rc.cluster_keyslot(key) == key_slot(key.encode()), key
            assert rc.cluster_keyslot("somekey") == 11058
            assert rc.cluster_keyslot("foo") == 12182

        def mget_with_hash_tags():
            keys = [f"{tag}:m{i}" for i in range(20)]
            rc.mset_nonatomic({k: k.upper() for k in keys})
            assert rc.mget_nonatomic(keys + [f"{tag}:none"]) == [k.upper() for k in keys] + [None]
            same = [f"{{{tag}-user}}.{i}" for i in range(10)]
            assert len({key_slot(k.encode()) for k in same}) == 1
            for k in same:
                rc.set(k, k[::-1])
            assert rc.mget(same) == [k[::-1] for k in same]

        def pipelines():
            p = rc.pipeline()
            for i in range(100):
                p.set(f"{tag}:p{i}", i)
            for i in range(100):
                p.get(f"{tag}:p{i}")
            res = p.execute()
            assert res[:100] == [True] * 100 and res[100:] == [str(i) for i in range(100)], res[:5]

        def commands_go_to_the_seeds_dc():
            # Connections are opened lazily: warm them, then count.
            for n in rc.get_nodes():
                if dc_of[(n.host, n.port)] == dc:
                    rc.ping(target_nodes=n)
            before = commands_processed(counters)
            for i in range(300):
                rc.set(f"{tag}:c{i}", i)
                assert rc.get(f"{tag}:c{i}") == str(i)
            rc.mget_nonatomic([f"{tag}:c{i}" for i in range(300)])
            p = rc.pipeline()
            for i in range(50):
                p.get(f"{tag}:c{i}")
            p.execute()
            after = commands_processed(counters)
            local = 0
            for addr, d in dc_of.items():
                delta = after[addr] - before[addr] - 1  # the first INFO
                if d == dc:
                    local += delta
                else:
                    assert delta == 0, f"{addr} in DC {d} got {delta} commands"
            assert local >= 650, local

        def cluster_views():
            # Each DC is a Redis Cluster of its own nodes: only they are listed.
            nodes = rc.cluster_nodes()
            assert len(nodes) == len(by_dc[dc]), nodes
            for a in nodes:
                host, port = a.split("@")[0].rsplit(":", 1)
                assert dc_of[(host, int(port))] == dc, (a, nodes[a])
            info = rc.cluster_info(target_nodes=rc.get_node(seed_host, seed_port))
            assert info["cluster_state"] == "ok" and int(info["cluster_slots_ok"]) == 16384, info
            shards = rc.execute_command("CLUSTER SHARDS", target_nodes=rc.get_node(seed_host, seed_port))
            assert sum(len(s["slots"]) // 2 >= 1 for s in shards) == len(shards)
            assert rc.readonly() is True and rc.readwrite() is True

        for name, fn in [
            ("set-get", set_get),
            ("routing-stays-in-dc", routing_stays_in_dc),
            ("refreshes-from-every-node-stay-in-dc", refreshes_from_every_node_stay_in_dc),
            ("keyslot-matches-redis-py", keyslot_matches_the_client),
            ("mget-hash-tags", mget_with_hash_tags),
            ("pipelines", pipelines),
            ("commands-go-to-the-seeds-dc", commands_go_to_the_seeds_dc),
            ("cluster-views", cluster_views),
        ]:
            check(f"dc{dc} {name}", fn)
        rc.close()

    check("bank over transactional buckets (WATCH/MULTI/EXEC from both DCs; SCAN and KEYS list the accounts)",
          lambda: bank(http, by_dc))
    check("cluster client transaction on one slot", lambda: cluster_transaction(by_dc))
    check("Lua lock, scripts and a stream consumer group from both DCs",
          lambda: scripts_and_streams_across_dcs(by_dc))
    check("pub/sub: a subscriber in one DC receives what the other DC publishes, in order, once",
          lambda: pubsub_across_dcs(by_dc))
    check("expiry on eventual, timeline and transactional buckets from both DCs",
          lambda: expiry_on_every_bucket_type(http, by_dc))
    check("INCR from both DCs loses nothing (eventual counter, timeline master)",
          lambda: incr_from_two_dcs(http, by_dc))
    check("SCAN with COUNT over 20k keys while inserting; KEYS, DBSIZE",
          lambda: scan_while_inserting(by_dc))
    check("hashes on eventual, timeline and transactional buckets from both DCs",
          lambda: hashes_on_every_bucket_type(http, by_dc))
    check("SELECT n is database n, a bucket of its own", lambda: select_maps_databases_to_buckets(by_dc))
    check("keys moved by the planner under a cluster client",
          lambda: keys_move_under_a_cluster_client(http, by_dc))
    check("FLUSHALL empties every bucket type on every node; writes after it stay",
          lambda: flushall_resets_the_cluster(http, by_dc))

    print(f"cluster-clients (redis-py {redis.__version__}): {PASSED} passed, {FAILED} failed")
    return 0 if FAILED == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
