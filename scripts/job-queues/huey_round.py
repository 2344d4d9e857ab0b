"""A round of jobs through huey (PyPI), with its real consumer running in another process:
plain tasks, tasks scheduled for later (moved to the queue by the consumer's scheduler with
huey's Lua script), a task that fails once and is retried, priorities; then redis-py's Lock,
whose release and extend are Lua scripts. Exits non-zero on the first difference."""
import datetime
import sys
import time

import redis

from huey_tasks import add, flaky, huey


def main():
    port = int(sys.argv[1])
    plain = [add(i, i) for i in range(100)]
    later = [add.schedule((i, 1), delay=1) for i in range(10)]
    retried = [flaky(f"k{i}") for i in range(5)]
    first = add.s(1000, 1)
    first.priority = 10
    first = huey.enqueue(first)
    got = [r.get(blocking=True, timeout=30) for r in plain]
    assert got == [2 * i for i in range(100)], got
    got = [r.get(blocking=True, timeout=30) for r in later]
    assert got == [i + 1 for i in range(10)], got
    got = [r.get(blocking=True, timeout=30) for r in retried]
    assert got == [f"k{i}" for i in range(5)], got
    assert first.get(blocking=True, timeout=30) == 1001
    assert huey.pending_count() == 0 and huey.scheduled_count() == 0

    r = redis.Redis(port=port)
    lock = r.lock("job-lock", timeout=5)
    assert lock.acquire(blocking=False)
    assert not r.lock("job-lock").acquire(blocking=False), "a held lock is held"
    assert lock.extend(5)
    lock.release()
    assert r.lock("job-lock").acquire(blocking=False), "a released lock is free"
    stale = r.lock("job-lock")
    stale.local.token = b"not-the-owner"
    try:
        stale.release()
        raise AssertionError("releasing another owner's lock must fail")
    except redis.exceptions.LockNotOwnedError:
        pass
    print("huey: 116 jobs (100 plain, 10 scheduled, 5 retried, 1 with a priority) and redis-py Lock: ok")


if __name__ == "__main__":
    start = datetime.datetime.now()
    main()
    print(f"huey round took {(datetime.datetime.now() - start).total_seconds():.1f} s")
