"""Failover as a Redis Cluster client sees it: redis-py's RedisCluster keeps writing to
`meridian up --processes` while one node process is killed with SIGKILL and later restarted.

Run by scripts/cluster-clients.sh: python cluster_failover.py MERIDIAN_BIN. Starts its own
cluster (2 DCs x 2 node processes, loopback, default settings but a 2 ms WAN), seeds the
client at one DC-0 node and kills the other, then checks:

- writes to the dead node's keys succeed again once the failure detector marks it down (the
  time from the kill to the first such write is printed, not asserted: this machine is noisy);
- every live node's CLUSTER SLOTS names no dead node, and DC 0's nodes name only DC 0 nodes
  while DC 0 still has a live replica of the range;
- the restarted node takes its ranges back in the seed's map;
- every write acknowledged at any point is readable afterwards with its last value;
- then go-redis's ClusterClient, ioredis's Cluster, Jedis's JedisCluster and Lettuce's
  RedisClusterClient (when Go, Node.js with scripts/js-cluster's modules, and java with
  scripts/java-cluster's jars are present) each go through the same kill of the restarted
  node (scripts/go-bank/failover.go, scripts/js-cluster/failover.mjs,
  scripts/java-cluster/Failover.java) and must write to its keys again; the seconds each
  took are printed. The Java jars: $JAVA_CLUSTER_DEPS (scripts/cluster-clients.sh exports
  it), else ${CARGO_TARGET_DIR:-target}/java-cluster-deps.

Prints `N passed, M failed` last; exits non-zero on any failure.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import redis
from redis.cluster import ClusterNode, RedisCluster

PASSED = 0
FAILED = 0


def check(name, ok, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print(f"ok   {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}: {detail}")


def start_cluster(binary, workdir):
    """`meridian up --processes`; returns (process, [(name, dc, host, port, pid)])."""
    base = 20000 + random.randrange(9000)
    log = open(os.path.join(workdir, "up.log"), "w+")
    up = subprocess.Popen(
        [binary, "up", "--processes", "--dcs", "2", "--nodes-per-dc", "2",
         "--base-port", str(base), "--wan-latency", "2ms", "--config-dir", workdir],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        log.seek(0)
        text = log.read()
        if "ready:" in text:
            break
        if up.poll() is not None:
            raise RuntimeError(f"meridian up exited: {text}")
        time.sleep(0.1)
    else:
        raise RuntimeError("the cluster did not start")
    nodes = []
    for line in text.splitlines():
        f = line.split()
        # name, DC, RESP, HTTP, S3, pid
        if len(f) == 6 and f[5].isdigit() and ":" in f[2]:
            host, port = f[2].rsplit(":", 1)
            nodes.append((f[0], int(f[1]), host, int(port), int(f[5])))
    assert len(nodes) == 4, text
    return up, nodes


def slot_masters(host, port):
    """{(first, last): (host, port) of its master} from one node's CLUSTER SLOTS."""
    r = redis.Redis(host=host, port=port, socket_timeout=5, decode_responses=True)
    try:
        slots = r.execute_command("CLUSTER SLOTS")
    finally:
        r.close()
    return {(s[0], s[1]): (s[2][0], int(s[2][1])) for s in slots}


def masters_of(slots):
    return set(slots.values())


class Writer:
    """SETs in a loop through one RedisCluster client, retrying what fails; remembers the
    last acknowledged value of every key and when writes to the victim's keys failed and
    recovered."""

    def __init__(self, rc, keys, victim_keys):
        self.rc, self.keys, self.victim_keys = rc, keys, set(victim_keys)
        self.acked, self.seq, self.errors = {}, 0, 0
        self.last_victim_ok = None

    def run_for(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            self.step()

    def step(self):
        key = self.keys[self.seq % len(self.keys)]
        value = str(self.seq)
        try:
            ok = self.rc.set(key, value)
        except (redis.RedisError, OSError):
            self.errors += 1
            time.sleep(0.05)
            return
        assert ok is True, ok
        self.acked[key] = value
        self.seq += 1
        if key in self.victim_keys:
            self.last_victim_ok = time.time()


def restart(binary, workdir, victim):
    """Starts the killed node again from its config; returns its process."""
    log = open(os.path.join(workdir, f"{victim[0]}.restart.log"), "a")
    return subprocess.Popen(
        [binary, "node", "--config", os.path.join(workdir, f"{victim[0]}.toml")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )


def wait_until_back(seed, dead, keep_busy):
    """Whether the seed's map names `dead` as a master again within a minute."""
    deadline = time.time() + 60
    while time.time() < deadline:
        keep_busy()
        try:
            if dead in masters_of(slot_masters(seed[2], seed[3])):
                return True
        except (redis.RedisError, OSError):
            pass
    return False


def probes():
    """The other languages' failover probes that can run here: (name, argv prefix, cwd)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    if shutil.which("go"):
        out.append(("go-redis ClusterClient", ["go", "run", ".", "failover"],
                    os.path.join(here, "go-bank")))
    js = os.path.join(here, "js-cluster")
    if shutil.which("node") and os.path.isdir(os.path.join(js, "node_modules", "ioredis")):
        out.append(("ioredis Cluster", ["node", "failover.mjs"], js))
    java = os.path.join(here, "java-cluster")
    deps = os.environ.get("JAVA_CLUSTER_DEPS") or os.path.join(
        os.path.dirname(here), os.environ.get("CARGO_TARGET_DIR", "target"), "java-cluster-deps")
    jars = os.listdir(deps) if os.path.isdir(deps) else []
    if shutil.which("java") and any(j.startswith("jedis-") for j in jars) \
            and any(j.startswith("lettuce-core-") for j in jars):
        classpath = os.path.join(os.path.abspath(deps), "*")
        for client, name in [("jedis", "Jedis JedisCluster"), ("lettuce", "Lettuce RedisClusterClient")]:
            out.append((name, ["java", "-cp", classpath, "Failover.java", client], java))
    return out


def main():
    binary = sys.argv[1]
    workdir = tempfile.mkdtemp(prefix="meridian-failover-")
    up, nodes = start_cluster(binary, workdir)
    restarted = None
    try:
        dc0 = [n for n in nodes if n[1] == 0]
        seed, victim = dc0[0], dc0[1]
        rc = RedisCluster(
            startup_nodes=[ClusterNode(seed[2], seed[3])],
            decode_responses=True, socket_timeout=2, socket_connect_timeout=2,
        )
        keys = [f"fo:{i}" for i in range(400)]
        victim_keys = [k for k in keys
                       if rc.get_node_from_key(k).port == victim[3]]
        check("the victim leads some of the keys", len(victim_keys) > 20, len(victim_keys))
        before = masters_of(slot_masters(seed[2], seed[3]))
        w = Writer(rc, keys, victim_keys)
        w.run_for(2)

        os.kill(victim[4], signal.SIGKILL)
        killed = time.time()
        w.last_victim_ok = None
        while w.last_victim_ok is None and time.time() < killed + 60:
            w.step()
        recovered = w.last_victim_ok
        check("writes to the dead node's keys succeed again", recovered is not None,
              f"{w.errors} errors in 60 s")
        if recovered is not None:
            print(f"     kill -9 to the first acknowledged write to its keys: "
                  f"{recovered - killed:.2f} s ({w.errors} failed attempts)")
        w.run_for(3)
        dead = (victim[2], victim[3])
        for n in nodes:
            if n is victim:
                continue
            m = masters_of(slot_masters(n[2], n[3]))
            check(f"{n[0]} names no dead master", dead not in m, m)
            if n[1] == 0:
                dcs = {next(x[1] for x in nodes if (x[2], x[3]) == a) for a in m}
                check(f"{n[0]} (DC 0) names DC 0 masters first", 0 in dcs, m)

        restarted = restart(binary, workdir, victim)
        back = wait_until_back(seed, dead, lambda: w.run_for(0.5))
        check("the restarted node takes its ranges back", back)
        check("the same masters as before the kill",
              masters_of(slot_masters(seed[2], seed[3])) == before)
        rc.nodes_manager.initialize()
        w.run_for(2)

        wrong = {}
        for k, v in w.acked.items():
            for _ in range(20):
                try:
                    got = rc.get(k)
                    break
                except (redis.RedisError, OSError):
                    time.sleep(0.1)
            if got != v:
                wrong[k] = (v, got)
        check(f"every acknowledged write reads back ({len(w.acked)} keys, {w.seq} writes)",
              not wrong, list(wrong.items())[:5])
        rc.close()

        # The other languages' clients, each through one more kill of the restarted node.
        for name, argv, cwd in probes():
            if not wait_until_back(seed, dead, lambda: time.sleep(0.2)):
                check(f"{name}: the victim is back before the kill", False)
                break
            pid = restarted.pid
            r = subprocess.run(
                argv + [f"{seed[2]}:{seed[3]}", f"{victim[2]}:{victim[3]}", str(pid)],
                cwd=cwd, capture_output=True, text=True, timeout=600,
            )
            last = (r.stdout.strip().splitlines() or ["(nothing)"])[-1]
            try:
                seconds = float(last)
            except ValueError:
                seconds = None
            check(f"{name} writes to the dead node's keys again", seconds is not None,
                  f"{r.stdout[-500:]} {r.stderr[-500:]}")
            # A probe that failed before its kill leaves the node running: stop it here.
            if restarted.poll() is None and seconds is None:
                restarted.kill()
            restarted.wait(30)
            if seconds is not None:
                print(f"     {name}: kill -9 to the first acknowledged write: {seconds:.2f} s")
            restarted = restart(binary, workdir, victim)
    except Exception:  # noqa: BLE001 - reported and counted
        traceback.print_exc()
        check("the failover run completed", False)
    finally:
        for p in [restarted, up]:
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
    print(f"cluster-failover (redis-py {redis.__version__}): {PASSED} passed, {FAILED} failed")
    return 0 if FAILED == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
