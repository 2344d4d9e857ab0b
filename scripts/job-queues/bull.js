// A round of jobs through BullMQ (npm): every queue operation is a Lua script touching lists,
// sorted sets and hashes, and job events travel on a stream (XADD from the scripts, read by
// QueueEvents with XREAD BLOCK). A worker with concurrency 4, 100 jobs, delayed jobs, a job
// that fails once and is retried, a parent job waiting on its children (a flow), and the
// queue's counts at the end; every completion is also seen as a `completed` event on the
// stream. Exits non-zero on the first difference.
'use strict';
// Each job's waitUntilFinished listens on the one QueueEvents: more than Node's default 10.
require('events').defaultMaxListeners = 256;
const { Queue, Worker, QueueEvents, FlowProducer } = require('bullmq');

const connection = { host: '127.0.0.1', port: Number(process.argv[2]) };
const name = 'meridian-bull';

async function main() {
  const queue = new Queue(name, { connection });
  await queue.obliterate({ force: true }).catch(() => {});
  const events = new QueueEvents(name, { connection });
  await events.waitUntilReady();
  const completedIds = new Set();
  events.on('completed', ({ jobId }) => completedIds.add(jobId));

  const attempts = new Map();
  const worker = new Worker(
    name,
    async (job) => {
      if (job.name === 'parent') {
        const children = await job.getChildrenValues();
        return Object.values(children).reduce((a, b) => a + b, 0);
      }
      if (job.data.flaky) {
        const n = (attempts.get(job.id) || 0) + 1;
        attempts.set(job.id, n);
        if (n === 1) throw new Error('first run fails');
      }
      return job.data.a + job.data.b;
    },
    { connection, concurrency: 4 },
  );
  await worker.waitUntilReady();

  const jobs = [];
  for (let i = 0; i < 100; i++) jobs.push(await queue.add('sum', { a: i, b: i }));
  for (let i = 0; i < 5; i++) jobs.push(await queue.add('late', { a: i, b: 1 }, { delay: 300 }));
  for (let i = 0; i < 5; i++) {
    jobs.push(await queue.add('flaky', { a: i, b: 2, flaky: true }, { attempts: 2 }));
  }
  const flow = await new FlowProducer({ connection }).add({
    name: 'parent',
    queueName: name,
    children: [1, 2, 3].map((n) => ({ name: 'child', queueName: name, data: { a: n, b: 0 } })),
  });

  const results = await Promise.all(jobs.map((j) => j.waitUntilFinished(events, 60000)));
  const want = [
    ...Array.from({ length: 100 }, (_, i) => 2 * i),
    ...Array.from({ length: 5 }, (_, i) => i + 1),
    ...Array.from({ length: 5 }, (_, i) => i + 2),
  ];
  const wrong = results.filter((v, i) => v !== want[i]).length;
  const parent = await flow.job.waitUntilFinished(events, 60000);
  // The events stream saw every completion (110 jobs, 3 children, the parent).
  for (let t = 0; t < 100 && completedIds.size < 114; t++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  const counts = await queue.getJobCounts('completed', 'failed', 'waiting', 'delayed', 'active');
  await worker.close();
  await events.close();
  await queue.close();
  if (wrong !== 0 || parent !== 6 || counts.completed !== 114 || counts.failed !== 0
      || counts.waiting + counts.delayed + counts.active !== 0 || completedIds.size !== 114) {
    throw new Error(`wrong ${wrong}, parent ${parent}, counts ${JSON.stringify(counts)}, `
      + `events ${completedIds.size}`);
  }
  console.log('bullmq: 114 jobs done, results and counts as expected');
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error('bullmq round failed:', e);
    process.exit(1);
  },
);
