#!/usr/bin/env python3
"""Completes the load of a `redis-benchmark --cluster` keyspace: every key of every tag exists.

    python3 bench/fill_tags.py HOST PORT [KEYS] [VALUE_BYTES]

`redis-benchmark --cluster` tags each key with its node's hash tag (key:{tag}:000000012345),
so after its load phase each master's tag appears among that master's keys. This finds each
tag (SCAN on every master `CLUSTER NODES` names) and writes key:{tag}:0 .. KEYS-1 over
parallel pipelined connections, retrying what a node sheds (-TRYAGAIN), until every SET was
acknowledged. On Meridian's default bucket a key's first write goes to its partition's insert
arbiter, a WAN round trip away for about half the tags: a closed-loop load phase leaves those
tags mostly empty, so the measured rounds would insert rather than overwrite.
"""
import re
import socket
import sys
import threading

CONNS = 24
BATCH = 64  # a node runs up to 64 pipelined commands of a connection at once


def command(*parts):
    out = b"*%d\r\n" % len(parts)
    for p in parts:
        out += b"$%d\r\n%s\r\n" % (len(p), p)
    return out


class Conn:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(1 << 16)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        if kind == b"-":
            return RuntimeError(rest.decode())
        return rest

    def call(self, *parts):
        self.sock.sendall(command(*parts))
        return self.reply()


def masters(host, port):
    nodes = Conn(host, port).call(b"CLUSTER", b"NODES").decode()
    out = []
    for line in nodes.splitlines():
        f = line.split()
        if len(f) > 2 and "master" in f[2]:
            h, p = f[1].split("@")[0].rsplit(":", 1)
            out.append((h, int(p)))
    return out


def tag_of(host, port):
    c = Conn(host, port)
    cursor = b"0"
    for _ in range(10_000):
        cursor, keys = c.call(b"SCAN", cursor, b"MATCH", b"key:{*", b"COUNT", b"1000")
        for k in keys:
            m = re.match(rb"key:(\{[^}]*\}):", k)
            if m:
                return m.group(1)
        if cursor == b"0":
            return None
    return None


def fill(host, port, tag, keys, value):
    todo = list(range(keys))
    lock = threading.Lock()
    failed = []

    def worker():
        c = Conn(host, port)
        while True:
            with lock:
                batch, todo[:] = todo[:BATCH], todo[BATCH:]
            if not batch:
                return
            c.sock.sendall(b"".join(command(b"SET", b"key:%s:%012d" % (tag, i), value) for i in batch))
            for i in batch:
                r = c.reply()
                if isinstance(r, RuntimeError):
                    with lock:
                        failed.append(i)

    for attempt in range(20):
        threads = [threading.Thread(target=worker) for _ in range(CONNS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not failed:
            return
        todo[:], failed[:] = failed, []
    raise SystemExit(f"{tag!r}: {len(todo)} keys still refused after 20 passes")


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    keys = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    value = b"x" * (int(sys.argv[4]) if len(sys.argv) > 4 else 500)
    for h, p in masters(host, port):
        tag = tag_of(h, p)
        if tag is None:
            raise SystemExit(f"no redis-benchmark key on {h}:{p}: run its load first")
        fill(h, p, tag, keys, value)
        print(f"{h}:{p} {tag.decode()}: {keys} keys", file=sys.stderr)


if __name__ == "__main__":
    main()
