// ioredis and node-redis (v4) cluster clients, unchanged, against a running `meridian up`:
// per DC, seeded with one node of it, each client must route every key to that DC through
// repeated map refreshes, and serve strings, counters, hashes, pipelines (ioredis: keys of
// different slots on one master, which ioredis groups by a range's whole node list), SCAN
// over every master, and the default bucket's SET NX, APPEND, MULTI/EXEC (and, with ioredis,
// a WATCH retry loop). Run by scripts/cluster-clients.sh: node check.mjs HTTP_URL
// Prints one `ok`/`FAIL` line per check and `N passed, M failed` last; exits 1 on a failure.

import Redis from "ioredis";
import { createCluster } from "redis";

// Keys of this run only, so a rerun against the same cluster starts from nothing.
const run = Math.random().toString(36).slice(2, 8);
let passed = 0;
let failed = 0;

async function check(name, fn) {
  try {
    await fn();
    passed += 1;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

function assert(ok, what) {
  if (!ok) throw new Error(what);
}

async function members(http) {
  const doc = await (await fetch(`${http}/cluster`)).json();
  const dcOf = new Map();
  for (const m of doc.members) dcOf.set(m.resp, m.dc);
  return dcOf;
}

async function ioredisInDc(dcOf, dc, seed) {
  const [host, port] = seed.split(":");
  const c = new Redis.Cluster([{ host, port: Number(port) }], {
    redisOptions: { connectTimeout: 5000 },
  });
  const inDc = (nodeKey) => dcOf.get(nodeKey) === dc;
  try {
    await new Promise((resolve, reject) => {
      c.once("ready", resolve);
      c.once("error", reject);
    });
    for (let refresh = 0; refresh < 8; refresh++) {
      await new Promise((resolve, reject) =>
        c.refreshSlotsCache((err) => (err ? reject(err) : resolve())),
      );
      assert(c.slots.length === 16384, `slots ${c.slots.length}`);
      for (let s = 0; s < 16384; s++) {
        const list = c.slots[s];
        assert(list && list.length >= 1, `slot ${s} unassigned`);
        for (const n of list) assert(inDc(n), `refresh ${refresh}: slot ${s} names ${n}`);
      }
    }
    const tag = `io-${run}-dc${dc}`;
    for (let i = 0; i < 50; i++) assert((await c.set(`${tag}:k${i}`, `v${i}`)) === "OK", "SET");
    for (let i = 0; i < 50; i++) assert((await c.get(`${tag}:k${i}`)) === `v${i}`, "GET");
    assert((await c.incrby(`${tag}:n`, 5)) === 5, "INCRBY");
    assert((await c.incr(`${tag}:n`)) === 6, "INCR");
    await c.hset(`${tag}:h`, { a: "1", b: "2" });
    const h = await c.hgetall(`${tag}:h`);
    assert(h.a === "1" && h.b === "2", `HGETALL ${JSON.stringify(h)}`);
    // A pipeline of keys in different slots of one master: ioredis accepts it only if every
    // slot's node list is the same (one replica list per master).
    const master = c.slots[0][0];
    const sameMaster = [];
    for (let i = 0; sameMaster.length < 20 && i < 5000; i++) {
      const key = `${tag}:p${i}`;
      const slot = (await c.cluster("KEYSLOT", key));
      if (c.slots[slot][0] === master) sameMaster.push(key);
    }
    assert(sameMaster.length === 20, `keys on ${master}: ${sameMaster.length}`);
    const slots = new Set();
    for (const k of sameMaster) slots.add(await c.cluster("KEYSLOT", k));
    assert(slots.size > 1, "the keys span slots");
    const p = c.pipeline();
    sameMaster.forEach((k, i) => p.set(k, String(i)));
    sameMaster.forEach((k) => p.get(k));
    const res = await p.exec();
    for (let i = 0; i < 20; i++) {
      assert(res[i][0] === null && res[i][1] === "OK", `pipelined SET ${res[i]}`);
      assert(res[20 + i][1] === String(i), `pipelined GET ${res[20 + i]}`);
    }
    // SCAN on every master of the map finds every key written.
    const found = new Set();
    for (const node of c.nodes("master")) {
      assert(inDc(`${node.options.host}:${node.options.port}`), "a master outside the DC");
      let cursor = "0";
      do {
        const [next, keys] = await node.scan(cursor, "MATCH", `${tag}:k*`, "COUNT", 100);
        keys.forEach((k) => found.add(k));
        cursor = next;
      } while (cursor !== "0");
    }
    assert(found.size === 50, `SCAN found ${found.size} of 50`);
    // The default bucket's Redis Cluster guarantees: SET NX, APPEND, MULTI/EXEC and a WATCH
    // retry loop over keys of one slot.
    const t = `{${tag}}`;
    assert((await c.set(`${t}lock`, "me", "NX")) === "OK", "SET NX");
    assert((await c.set(`${t}lock`, "you", "NX")) === null, "SET NX on a held lock");
    assert((await c.append(`${t}s`, "ab")) === 2, "APPEND");
    assert((await c.append(`${t}s`, "c")) === 3, "APPEND again");
    const tx = await c.multi().incrby(`${t}a`, 2).incrby(`${t}b`, 3).get(`${t}s`).exec();
    assert(JSON.stringify(tx) === JSON.stringify([[null, 2], [null, 3], [null, "abc"]]),
      `EXEC ${JSON.stringify(tx)}`);
    for (let i = 0; i < 5; i++) {
      for (let attempt = 0; ; attempt++) {
        assert(attempt < 50, "the WATCH loop never committed");
        await c.watch(`${t}a`);
        const v = Number(await c.get(`${t}a`));
        if ((await c.multi().set(`${t}a`, String(v + 1)).exec()) !== null) break;
      }
    }
    assert((await c.get(`${t}a`)) === "7", "WATCH loop");
  } finally {
    c.disconnect();
  }
}

async function nodeRedisInDc(dcOf, dc, seed) {
  const c = createCluster({ rootNodes: [{ url: `redis://${seed}` }] });
  c.on("error", () => {});
  await c.connect();
  try {
    const addr = (n) => `${n.host}:${n.port}`;
    for (const m of c.masters) assert(dcOf.get(addr(m)) === dc, `master ${addr(m)}`);
    for (let s = 0; s < 16384; s += 97) {
      assert(dcOf.get(addr(c.getSlotMaster(s))) === dc, `slot ${s}`);
    }
    const tag = `nr-${run}-dc${dc}`;
    for (let i = 0; i < 50; i++) assert((await c.set(`${tag}:k${i}`, `v${i}`)) === "OK", "SET");
    for (let i = 0; i < 50; i++) assert((await c.get(`${tag}:k${i}`)) === `v${i}`, "GET");
    assert((await c.incrBy(`${tag}:n`, 7)) === 7, "INCRBY");
    await c.hSet(`${tag}:h`, { f: "x" });
    assert((await c.hGet(`${tag}:h`, "f")) === "x", "HGET");
    const got = await c.mGet([`{${tag}}a`, `{${tag}}b`]);
    assert(got.length === 2 && got[0] === null, `MGET ${got}`);
    // The default bucket: SET NX, APPEND and MULTI/EXEC over keys of one slot.
    const t = `{${tag}}`;
    assert((await c.set(`${t}lock`, "me", { NX: true })) === "OK", "SET NX");
    assert((await c.set(`${t}lock`, "you", { NX: true })) === null, "SET NX on a held lock");
    assert((await c.append(`${t}s`, "ab")) === 2, "APPEND");
    const tx = await c.multi().incrBy(`${t}a`, 2).incrBy(`${t}b`, 3).get(`${t}s`).exec();
    assert(JSON.stringify(tx) === JSON.stringify([2, 3, "ab"]), `EXEC ${JSON.stringify(tx)}`);
  } finally {
    await c.disconnect();
  }
}

async function main() {
  const http = process.argv[2];
  const dcOf = await members(http);
  const seeds = new Map();
  for (const [addr, dc] of dcOf) if (!seeds.has(dc) || addr > seeds.get(dc)) seeds.set(dc, addr);
  for (const [dc, seed] of [...seeds].sort()) {
    await check(`ioredis Cluster seeded in DC ${dc}: 8 refreshes stay in the DC; strings, counters, hashes, one-master pipelines, SCAN, SET NX, APPEND, MULTI/EXEC, WATCH`,
      () => ioredisInDc(dcOf, dc, seed));
    await check(`node-redis cluster seeded in DC ${dc}: masters in the DC; strings, counters, hashes, MGET, SET NX, APPEND, MULTI/EXEC`,
      () => nodeRedisInDc(dcOf, dc, seed));
  }
  console.log(`js-cluster (ioredis, node-redis): ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main().catch((e) => {
  console.log(`FAIL js-cluster: ${e && e.stack ? e.stack : e}`);
  console.log(`js-cluster (ioredis, node-redis): ${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
