// ioredis's Cluster through a master's death: seeded at SEED, it writes for a second, kills
// the process VICTIM_PID (the master at VICTIM_ADDR) with SIGKILL, then writes to the
// victim's keys until one is acknowledged, at most 60 s, and prints the seconds from the kill,
// or `timeout`. Run by scripts/cluster_failover.py:
// node failover.mjs SEED VICTIM_ADDR VICTIM_PID

import Redis from "ioredis";

const [seed, victim, pid] = process.argv.slice(2);
const [host, port] = seed.split(":");
const c = new Redis.Cluster([{ host, port: Number(port) }], {
  redisOptions: { connectTimeout: 1000, commandTimeout: 1000, maxRetriesPerRequest: 1 },
  clusterRetryStrategy: () => 100,
});
c.on("error", () => {});

async function main() {
  // A node's connection error while the client starts (the victim has just restarted) is
  // not a failure: ioredis retries it; wait for the map, at most 30 s.
  await new Promise((resolve, reject) => {
    c.once("ready", resolve);
    setTimeout(() => reject(new Error("not ready within 30 s")), 30000).unref();
  });
  const mine = [];
  for (const end = Date.now() + 30000; mine.length === 0 && Date.now() < end; ) {
    for (let i = 0; i < 2000 && mine.length < 50; i++) {
      const key = `jsfo:${i}`;
      const slot = await c.cluster("KEYSLOT", key);
      if (c.slots[slot] && c.slots[slot][0] === victim) mine.push(key);
    }
    if (mine.length === 0) {
      await new Promise((resolve) => c.refreshSlotsCache(() => resolve()));
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  if (mine.length === 0) throw new Error("the victim leads no key");
  // Writes before the kill; a node that has just restarted refuses them until its detector
  // hears a majority of the members (a second or so): wait that out, at most 30 s.
  let wrote = 0;
  for (const end = Date.now() + 30000; wrote < 3 * mine.length && Date.now() < end; ) {
    for (const k of mine) {
      try {
        await c.set(k, "before");
        wrote += 1;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }
  if (wrote < 3 * mine.length) throw new Error("the victim's keys refused writes before the kill");
  process.kill(Number(pid), "SIGKILL");
  const killed = Date.now();
  let last = null;
  for (let i = 0; Date.now() - killed < 60000; i++) {
    try {
      await c.set(mine[i % mine.length], "after");
      console.log(((Date.now() - killed) / 1000).toFixed(3));
      return 0;
    } catch (e) {
      last = e;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  console.log(`timeout (last error: ${last})`);
  return 1;
}

main()
  .then((rc) => {
    c.disconnect();
    process.exit(rc);
  })
  .catch((e) => {
    console.log(`failed: ${e}`);
    process.exit(1);
  });
