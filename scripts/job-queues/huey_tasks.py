"""The tasks huey's consumer runs (scripts/job-queues.sh): the producer and the consumer
import this module, as a huey application does. The node's port comes from MERIDIAN_PORT."""
import os

from huey import PriorityRedisHuey

huey = PriorityRedisHuey(
    "meridian-jobs", host="127.0.0.1", port=int(os.environ["MERIDIAN_PORT"])
)


@huey.task()
def add(a, b):
    return a + b


@huey.task(retries=2)
def flaky(key):
    """Fails its first run, then succeeds: huey re-enqueues it (a retry)."""
    if huey.storage.conn.incr(f"flaky:{key}") == 1:
        raise RuntimeError("first run fails")
    return key
