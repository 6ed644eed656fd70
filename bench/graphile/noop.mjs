// Peer benchmark: graphile-worker's no-op jobs per second on PostgreSQL.
//
//   node noop.mjs --url postgres://... --jobs N --concurrency C
//
// Runs graphile-worker's migrations (schema graphile_worker), enqueues N no-op
// jobs in bulk (WorkerUtils.addJobs, i.e. graphile_worker.add_jobs), starts a
// worker pool with the given concurrency and times from worker start until all
// N jobs are done and deleted from graphile_worker._private_jobs. Prints one
// JSON line to stdout:
//   {"jobs":N,"concurrency":C,"seconds":S,"jobs_per_s":R}
// Everything else goes to stderr. Exits non-zero with a message on any error.

import { parseArgs } from "node:util";
import { EventEmitter } from "node:events";
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const USAGE = "usage: node noop.mjs --url postgres://... --jobs N --concurrency C";
const ENQUEUE_CHUNK = 10_000; // jobs per add_jobs call

function fail(message) {
  process.stderr.write(`noop.mjs: error: ${message}\n`);
  process.exit(1);
}

function positiveInt(name, value) {
  if (value === undefined) fail(`--${name} is required\n${USAGE}`);
  if (!/^[1-9][0-9]*$/.test(value)) fail(`--${name} must be a positive integer, got ${JSON.stringify(value)}`);
  return Number(value);
}

let args;
try {
  ({ values: args } = parseArgs({
    options: {
      url: { type: "string" },
      jobs: { type: "string" },
      concurrency: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
    allowPositionals: false,
  }));
} catch (e) {
  fail(`${e.message}\n${USAGE}`);
}
if (args.help) {
  process.stderr.write(`${USAGE}\n`);
  process.exit(0);
}
if (!args.url) fail(`--url is required\n${USAGE}`);
const connectionString = args.url;
const jobs = positiveInt("jobs", args.jobs);
const concurrency = positiveInt("concurrency", args.concurrency);

// graphile's logs: warnings and errors to stderr, the rest (one info line per
// job) dropped so logging does not weigh on the measurement.
const logger = new Logger((scope) => (level, message) => {
  if (level === "error" || level === "warning" || level === "warn") {
    process.stderr.write(`graphile-worker ${level}: ${message}\n`);
  }
});

const log = (message) => process.stderr.write(`noop.mjs: ${message}\n`);

async function main() {
  const utils = await makeWorkerUtils({ connectionString, logger });
  let runner = null;
  try {
    log("running graphile-worker migrations");
    await utils.migrate();

    const countJobs = async () => {
      const { rows } = await utils.withPgClient((client) =>
        client.query("select count(*)::int as n from graphile_worker._private_jobs"),
      );
      return rows[0].n;
    };

    const existing = await countJobs();
    if (existing !== 0) {
      throw new Error(
        `graphile_worker._private_jobs already holds ${existing} job(s); use a fresh database ` +
          `or clear them (delete from graphile_worker._private_jobs) first`,
      );
    }

    log(`enqueuing ${jobs} noop jobs`);
    const enqueueStart = process.hrtime.bigint();
    for (let done = 0; done < jobs; done += ENQUEUE_CHUNK) {
      const n = Math.min(ENQUEUE_CHUNK, jobs - done);
      const specs = Array.from({ length: n }, () => ({ identifier: "noop", payload: {} }));
      await utils.addJobs(specs);
    }
    const enqueueSeconds = Number(process.hrtime.bigint() - enqueueStart) / 1e9;
    const queued = await countJobs();
    if (queued !== jobs) throw new Error(`expected ${jobs} queued jobs after enqueuing, found ${queued}`);
    log(`enqueued ${jobs} jobs in ${enqueueSeconds.toFixed(3)} s`);

    // Completions counted in-process; a failed job is an error for this bench.
    const events = new EventEmitter();
    let completed = 0;
    let jobError = null;
    let allDone;
    const allDonePromise = new Promise((resolve, reject) => {
      allDone = { resolve, reject };
    });
    events.on("job:success", () => {
      completed += 1;
      if (completed === jobs) allDone.resolve();
    });
    events.on("job:error", ({ job, error }) => {
      jobError ??= new Error(`job ${job.id} failed: ${error?.message ?? error}`);
      allDone.reject(jobError);
    });
    events.on("worker:fatalError", ({ error }) => {
      allDone.reject(new Error(`worker fatal error: ${error?.message ?? error}`));
    });
    events.on("pool:listen:error", ({ error }) => {
      allDone.reject(new Error(`worker LISTEN error: ${error?.message ?? error}`));
    });

    log(`starting worker, concurrency ${concurrency}`);
    const start = process.hrtime.bigint();
    runner = await run({
      connectionString,
      concurrency,
      // A pool slightly larger than the concurrency, so completions are not
      // starved of connections by job fetches.
      maxPoolSize: concurrency + 2,
      pollInterval: 10,
      noHandleSignals: true,
      logger,
      events,
      taskList: {
        noop: async () => {},
      },
    });
    const runnerDone = runner.promise.then(
      () => {
        throw new Error("worker stopped before all jobs were done");
      },
      (e) => {
        throw new Error(`worker failed: ${e?.message ?? e}`);
      },
    );
    await Promise.race([allDonePromise, runnerDone]);

    // Completions are written to the database asynchronously after the event;
    // the clock stops only when the jobs table is empty.
    let remaining = await countJobs();
    while (remaining !== 0) {
      await new Promise((r) => setTimeout(r, 2));
      remaining = await countJobs();
    }
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;

    runnerDone.catch(() => {}); // stopping resolves runner.promise; not an error now
    await runner.stop();
    runner = null;

    const result = {
      jobs,
      concurrency,
      seconds: Number(seconds.toFixed(6)),
      jobs_per_s: Number((jobs / seconds).toFixed(1)),
    };
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    if (runner) {
      await runner.stop().catch(() => {});
    }
    await utils.release();
  }
}

main().then(
  () => process.exit(0),
  (e) => fail(e?.stack ?? String(e)),
);
