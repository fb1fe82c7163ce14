'use strict';
// peerbench.js runs one of sortie bench's workloads on BullMQ, for
// `peerbench --peer bullmq` (bench/peers/bullmq.go), which starts it with
// one argument, a JSON object:
//
//   {"redis": URL, "queue": NAME, "workload": W, "jobs": N, "workers": C,
//    "producers": P, "batch": B, "rate": R, "payload": BYTES, "stall_ms": MS}
//
// and reads from its stdout one JSON object: the timed phase's length, the
// per-call or per-job latencies, how many times the processor ran each job,
// the Worker's completed and failed events, Queue.getJobCounts() after the
// run, and the problems found on the way. peerbench makes the figures and
// the exactly-once check from it. Anything else goes to stderr.
//
// Workloads (the meanings of sortie bench's):
//   enqueue-single  P producers, each awaiting one queue.add at a time
//   enqueue-batch   P producers (1), each awaiting one addBulk of B jobs at a time
//   drain           N jobs preloaded with addBulk of 1,000 (untimed), then a
//                   Worker of concurrency C; timed until it completed all
//   latency         a Worker of concurrency C waits; jobs are added open-loop
//                   at R per second; enqueue → processor start per job
//   memory          N jobs added with addBulk of B (nothing runs them)
// After an enqueue workload a Worker runs the jobs, untimed.
//
// Settings, from BullMQ's "Going to production" guide: the Worker's
// connection has maxRetriesPerRequest: null, the Queue's
// enableOfflineQueue: false. Jobs are added with removeOnComplete: true.

const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

const spec = JSON.parse(process.argv[2]);
const jobName = 'peerbench';
const origin = process.hrtime.bigint();

// now returns the nanoseconds since the script started (monotonic).
function now() {
  return Number(process.hrtime.bigint() - origin);
}

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, ms));
}

const problems = [];
const pad = spec.payload > 0 ? 'x'.repeat(spec.payload) : undefined;

function args(seq, at) {
  const a = { s: seq };
  if (at !== undefined) a.t = at;
  if (pad !== undefined) a.p = pad;
  return a;
}

function bulk(lo, hi) {
  const jobs = new Array(hi - lo);
  for (let i = lo; i < hi; i++) jobs[i - lo] = { name: jobName, data: args(i) };
  return jobs;
}

// The processor's tally.
const n = spec.jobs;
const runs = new Int32Array(spec.workload === 'memory' ? 0 : n);
const startNs = spec.workload === 'latency' ? new Array(n).fill(0) : null;
let ran = 0;
let stray = 0;

async function processor(job) {
  const seq = job.data.s;
  if (!Number.isInteger(seq) || seq < 0 || seq >= n) {
    stray++;
    return;
  }
  if (startNs !== null) startNs[seq] = now() - job.data.t;
  runs[seq]++;
  ran++;
}

// The Worker's events. finished is called on each; it resolves the
// promise waitDone waits on once every job completed or failed.
let completed = 0;
let failed = 0;
let allDone = null;

function finished() {
  if (allDone !== null && completed + failed >= n) {
    allDone();
    allDone = null;
  }
}

function newWorker(connection, autorun) {
  const worker = new Worker(spec.queue, processor, {
    connection,
    concurrency: spec.workers,
    autorun,
  });
  worker.on('completed', () => {
    completed++;
    finished();
  });
  worker.on('failed', (job, err) => {
    failed++;
    console.error(`job ${job && job.id} failed: ${err && err.message}`);
    finished();
  });
  worker.on('error', err => console.error(`worker: ${err && err.message}`));
  return worker;
}

// waitDone waits until the Worker completed or failed every job. With no
// progress for stall_ms (no job run, completed or failed) it notes a
// problem and returns.
async function waitDone() {
  if (completed + failed >= n) return;
  let last = -1;
  let lastAt = Date.now();
  let timer = null;
  await new Promise(resolve => {
    allDone = resolve;
    timer = setInterval(() => {
      const seen = completed + failed + ran;
      if (seen !== last) {
        last = seen;
        lastAt = Date.now();
      } else if (Date.now() - lastAt > spec.stall_ms) {
        problems.push(`no progress for ${spec.stall_ms} ms: ${ran} of ${n} jobs ran, the Worker completed ${completed} and failed ${failed}`);
        allDone = null;
        resolve();
      }
    }, 20);
  });
  clearInterval(timer);
}

// checkIDs notes enqueues that returned no job ID or a repeated one.
function checkIDs(ids) {
  const seen = new Set();
  let missing = 0;
  let repeated = 0;
  for (const id of ids) {
    if (id === undefined || id === null || id === '') {
      missing++;
      continue;
    }
    if (seen.has(id)) repeated++;
    seen.add(id);
  }
  if (missing > 0) problems.push(`${missing} enqueues returned no job ID`);
  if (repeated > 0) problems.push(`${repeated} enqueues returned an ID another enqueue returned too`);
}

// checkWaiting notes a queue that does not hold exactly n jobs, all waiting.
async function checkWaiting(queue) {
  const counts = await queue.getJobCounts();
  let other = 0;
  for (const [state, count] of Object.entries(counts)) {
    if (state !== 'waiting') other += count;
  }
  if (counts.waiting !== n || other !== 0) {
    problems.push(`after enqueueing ${n} jobs BullMQ counts ${counts.waiting} waiting and ${other} in other states`);
  }
}

// calls makes calls 0 to count-1 of call from spec.producers concurrent
// loops, each awaiting its call before taking the next, and returns how
// long each took.
async function calls(count, call) {
  const lat = new Array(count).fill(0);
  let next = 0;
  const loops = [];
  for (let p = 0; p < spec.producers; p++) {
    loops.push((async () => {
      for (;;) {
        const i = next++;
        if (i >= count) return;
        const t = now();
        await call(i);
        lat[i] = now() - t;
      }
    })());
  }
  await Promise.all(loops);
  return lat;
}

async function main() {
  const queueConn = new IORedis(spec.redis, { enableOfflineQueue: false });
  const workerConn = new IORedis(spec.redis, { maxRetriesPerRequest: null });
  const queue = new Queue(spec.queue, {
    connection: queueConn,
    defaultJobOptions: { removeOnComplete: true },
  });
  queue.on('error', err => console.error(`queue: ${err && err.message}`));
  await queue.waitUntilReady();

  const out = { seconds: 0, call_ns: null, start_ns: null };
  let worker = null;
  const ids = spec.workload === 'memory' ? null : new Array(n);

  switch (spec.workload) {
    case 'enqueue-single': {
      const t = now();
      out.call_ns = await calls(n, async seq => {
        const job = await queue.add(jobName, args(seq));
        ids[seq] = job.id;
      });
      out.seconds = (now() - t) / 1e9;
      break;
    }
    case 'enqueue-batch': {
      const t = now();
      out.call_ns = await calls(Math.ceil(n / spec.batch), async i => {
        const lo = i * spec.batch;
        const hi = Math.min(lo + spec.batch, n);
        const jobs = await queue.addBulk(bulk(lo, hi));
        jobs.forEach((job, j) => {
          ids[lo + j] = job.id;
        });
      });
      out.seconds = (now() - t) / 1e9;
      break;
    }
    case 'drain': {
      for (let lo = 0; lo < n; lo += 1000) {
        const jobs = await queue.addBulk(bulk(lo, Math.min(lo + 1000, n)));
        jobs.forEach((job, j) => {
          ids[lo + j] = job.id;
        });
      }
      await checkWaiting(queue);
      worker = newWorker(workerConn, false);
      await worker.waitUntilReady();
      const t = now();
      worker.run().catch(err => console.error(`worker.run: ${err && err.message}`));
      await waitDone();
      out.seconds = (now() - t) / 1e9;
      break;
    }
    case 'latency': {
      worker = newWorker(workerConn, true);
      await worker.waitUntilReady();
      const adds = [];
      const t = now();
      const tick = Math.max(1000 / spec.rate, 1);
      for (let sent = 0; sent < n;) {
        const due = Math.min(n, Math.floor(((now() - t) / 1e9) * spec.rate) + 1);
        for (; sent < due; sent++) {
          const seq = sent;
          adds.push(queue.add(jobName, args(seq, now())).then(job => {
            ids[seq] = job.id;
          }));
        }
        if (sent < n) await sleep(tick);
      }
      await Promise.all(adds);
      out.seconds = (now() - t) / 1e9;
      await waitDone();
      out.start_ns = startNs;
      break;
    }
    case 'memory': {
      const t = now();
      for (let lo = 0; lo < n; lo += spec.batch) {
        await queue.addBulk(bulk(lo, Math.min(lo + spec.batch, n)));
      }
      out.seconds = (now() - t) / 1e9;
      break;
    }
    default:
      throw new Error(`unknown workload ${spec.workload}`);
  }

  if (ids !== null) checkIDs(ids);
  if (spec.workload === 'enqueue-single' || spec.workload === 'enqueue-batch') {
    await checkWaiting(queue);
    // Run the jobs, untimed, so that the check covers their whole life.
    worker = newWorker(workerConn, true);
    await waitDone();
  }
  if (worker !== null) await worker.close();

  out.counts = await queue.getJobCounts();
  out.runs = Array.from(runs);
  out.stray = stray;
  out.completed = completed;
  out.failed = failed;
  out.problems = problems;
  await queue.close();
  await Promise.all([queueConn.quit(), workerConn.quit()]);
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
}

main().catch(err => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
