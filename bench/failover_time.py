"""Time from SIGKILL of a master to a Redis Cluster client's first acknowledged write to that
master's keys. Used by bench/failover-compare.sh, the same way against Redis Cluster and
against `meridian up --processes`.

    python failover_time.py SEED_HOST SEED_PORT VICTIM_PORT VICTIM_PID

The client is redis-py's RedisCluster seeded at SEED (a node that stays up), with its default
retries (it re-reads the slot map after a connection error). It writes for one second, kills
the victim, then writes to the victim's keys until one is acknowledged (at most 60 s) and
prints the seconds elapsed, or `timeout`.
"""

import os
import signal
import sys
import time

import redis
from redis.cluster import ClusterNode, RedisCluster


def main():
    seed_host, seed_port, victim_port, victim_pid = sys.argv[1:5]
    rc = RedisCluster(
        startup_nodes=[ClusterNode(seed_host, int(seed_port))],
        socket_timeout=1, socket_connect_timeout=1,
    )
    keys = [f"fo:{i}" for i in range(2000)]
    mine = [k for k in keys if rc.get_node_from_key(k).port == int(victim_port)]
    assert mine, "the victim leads no key"
    end = time.time() + 1
    i = 0
    while time.time() < end:
        rc.set(keys[i % len(keys)], i)
        i += 1
    os.kill(int(victim_pid), signal.SIGKILL)
    killed = time.time()
    i = 0
    while time.time() < killed + 60:
        try:
            rc.set(mine[i % len(mine)], i)
            print(f"{time.time() - killed:.3f}")
            return 0
        except (redis.RedisError, OSError):
            time.sleep(0.02)
        i += 1
    print("timeout")
    return 1


if __name__ == "__main__":
    sys.exit(main())
