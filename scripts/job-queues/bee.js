// A round of jobs through bee-queue (npm), whose every queue operation is a Lua script
// (EVALSHA, with SCRIPT LOAD on NOSCRIPT) and whose job events travel by pub/sub: a worker
// with concurrency 4 in this process, a separate producer queue listening for events,
// 100 jobs, delayed jobs, a job that fails once and is retried, and the health counts.
// Exits non-zero on the first difference.
'use strict';
const Queue = require('bee-queue');

const redis = { host: '127.0.0.1', port: Number(process.argv[2]) };
const settings = { redis, activateDelayedJobs: true, removeOnSuccess: false };
const worker = new Queue('meridian-jobs', settings);
const producer = new Queue('meridian-jobs', { ...settings, isWorker: false, getEvents: true });

// Jobs whose outcome event has not arrived yet (printed if the round stalls).
const waiting = new Set();

function outcome(job) {
  waiting.add(job.id);
  return new Promise((resolve, reject) => {
    job.on('succeeded', (v) => {
      waiting.delete(job.id);
      resolve(v);
    });
    job.on('failed', reject);
  });
}

async function main() {
  const attempts = new Map();
  worker.process(4, async (job) => {
    if (job.data.flaky) {
      const n = (attempts.get(job.id) || 0) + 1;
      attempts.set(job.id, n);
      if (n === 1) throw new Error('first run fails');
    }
    return job.data.a + job.data.b;
  });
  await worker.ready();
  const results = [];
  for (let i = 0; i < 100; i++) {
    const job = producer.createJob({ a: i, b: i });
    results.push(outcome(job));
    await job.save();
  }
  for (let i = 0; i < 5; i++) {
    const job = producer.createJob({ a: i, b: 1 }).delayUntil(Date.now() + 500);
    results.push(outcome(job));
    await job.save();
  }
  for (let i = 0; i < 5; i++) {
    const job = producer.createJob({ a: i, b: 2, flaky: true }).retries(1);
    results.push(outcome(job));
    await job.save();
  }
  const got = await Promise.all(results);
  const want = [
    ...Array.from({ length: 100 }, (_, i) => 2 * i),
    ...Array.from({ length: 5 }, (_, i) => i + 1),
    ...Array.from({ length: 5 }, (_, i) => i + 2),
  ];
  const wrong = got.filter((v, i) => v !== want[i]).length;
  const health = await producer.checkHealth();
  await worker.close();
  await producer.close();
  if (wrong !== 0 || health.succeeded !== 110 || health.failed !== 0 || health.waiting !== 0) {
    throw new Error(`results wrong: ${wrong}, health ${JSON.stringify(health)}`);
  }
  console.log(`bee-queue: 110 jobs (100 plain, 5 delayed, 5 retried): ok ${JSON.stringify(health)}`);
}

// A stalled round says what it still waits for, with the queue's counts, before the
// script's own timeout would kill it silently.
setTimeout(async () => {
  const health = await producer.checkHealth().catch((e) => `unavailable: ${e}`);
  console.error(`bee-queue: stalled; no outcome for jobs ${[...waiting].join(',')}; `
    + `health ${JSON.stringify(health)}`);
  process.exit(1);
}, 90000).unref();

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`bee-queue: ${e.stack || e}`);
    process.exit(1);
  },
);
