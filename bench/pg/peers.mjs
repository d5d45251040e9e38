// The peers' side of the distributed benchmark: one process per role (setup, enqueue, node,
// produce) for graphile-worker 0.17.3 and pg-boss 10.4.2, speaking the JSON-lines protocol that
// bench.mjs drives (and that the ax programs speak too):
//   child -> {"ev":"ready"} ; parent -> "go" ; child works, printing {"ev":"p",...} progress ;
//   parent -> "stop" ; child -> {"ev":"stats",...} and exits.
// stdout carries only protocol lines; the libraries' logs go to stderr.
//
//   node bench/pg/peers.mjs <setup|enqueue|node|produce> --queue graphile|pgboss [options]
// Environment: AX_BENCH_PG_MODULES (folder holding node_modules), PGHOST, PGPORT, PGUSER, PGDATABASE.
import { createRequire } from "node:module";
import path from "node:path";
import readline from "node:readline";

const modules = process.env.AX_BENCH_PG_MODULES;
if (!modules) {
    console.error("peers.mjs: AX_BENCH_PG_MODULES is not set (the folder where npm installed the peers)");
    process.exit(2);
}
const require = createRequire(path.join(path.resolve(modules), "package.json"));

const [role, ...rest] = process.argv.slice(2);
const opt = {};
for (let i = 0; i < rest.length; i += 2) {
    if (!rest[i].startsWith("--") || rest[i + 1] === undefined) {
        console.error(`peers.mjs: bad argument ${rest[i]}`);
        process.exit(2);
    }
    opt[rest[i].slice(2)] = rest[i + 1];
}
const queue = opt.queue;
if (!["graphile", "pgboss"].includes(queue)) {
    console.error("peers.mjs: --queue graphile|pgboss is required");
    process.exit(2);
}
const connectionString =
    `postgres://${process.env.PGUSER || "bench"}@${process.env.PGHOST || "127.0.0.1"}:` +
    `${process.env.PGPORT || 5432}/${process.env.PGDATABASE || "bench"}`;

const pg = require("pg");

const send = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

// --- parent commands -------------------------------------------------------------------------
const waiters = { go: [], stop: [] };
const seen = { go: false, stop: false };
readline.createInterface({ input: process.stdin }).on("line", (line) => {
    const cmd = line.trim();
    if (cmd in waiters) {
        seen[cmd] = true;
        for (const w of waiters[cmd].splice(0)) w();
    }
});
process.stdin.on("end", () => {
    // The parent died: stop at once rather than linger.
    process.exit(3);
});
const waitFor = (cmd) => (seen[cmd] ? Promise.resolve() : new Promise((r) => waiters[cmd].push(r)));

// --- round trips and claim latency, measured on node-postgres itself -------------------------
// Every Client.query is one round trip (neither library pipelines). A claim is the statement
// with SKIP LOCKED; its latency is from send to result, as the library sees it.
const probe = { queries: 0, claims: 0, claimedRows: 0, claimUs: [] };
{
    const orig = pg.Client.prototype.query;
    pg.Client.prototype.query = function (config, values, callback) {
        probe.queries++;
        const text = typeof config === "string" ? config : config && config.text;
        if (!text || !/skip\s+locked/i.test(text)) return orig.call(this, config, values, callback);
        const t0 = process.hrtime.bigint();
        const done = (res) => {
            probe.claims++;
            probe.claimedRows += res && typeof res.rowCount === "number" ? res.rowCount : 0;
            probe.claimUs.push(Number(process.hrtime.bigint() - t0) / 1000);
        };
        const cb = typeof callback === "function" ? callback : typeof values === "function" ? values : null;
        if (cb) {
            const wrapped = (err, res) => {
                if (!err) done(res);
                cb(err, res);
            };
            return typeof callback === "function"
                ? orig.call(this, config, values, wrapped)
                : orig.call(this, config, wrapped);
        }
        const p = orig.call(this, config, values);
        if (p && typeof p.then === "function") p.then(done, () => {});
        return p;
    };
}
const pct = (arr, q) => {
    if (arr.length === 0) return null;
    const s = Float64Array.from(arr).sort();
    return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};
const probeStats = () => ({
    queries: probe.queries,
    claims: probe.claims,
    claimed_rows: probe.claimedRows,
    claim_p50_us: pct(probe.claimUs, 0.5),
    claim_p99_us: pct(probe.claimUs, 0.99),
});

// Priorities 3:2:1 (high, normal, low), in a fixed repeating pattern so every slice of the
// backlog holds the same mix.
const PATTERN = [0, 0, 0, 1, 1, 2];
// graphile-worker runs the lowest number first; pg-boss the highest.
const prio = (i) => (queue === "graphile" ? PATTERN[i % 6] : 2 - PATTERN[i % 6]);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// --- graphile-worker ---------------------------------------------------------------------------
async function graphileLib() {
    const gw = require("graphile-worker");
    const { Logger } = require("@graphile/logger");
    const logger = new Logger(() => (level, message) => {
        if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`);
    });
    return { gw, logger };
}

// --- pg-boss -----------------------------------------------------------------------------------
async function bossStart(extra = {}) {
    const PgBoss = require("pg-boss");
    const boss = new PgBoss({ connectionString, max: 12, supervise: false, schedule: false, ...extra });
    boss.on("error", (e) => console.error(`pg-boss error: ${e.message}`));
    await boss.start();
    return boss;
}

// --- roles -------------------------------------------------------------------------------------
async function setup() {
    const c = new pg.Client({ connectionString });
    await c.connect();
    if (queue === "graphile") {
        await c.query("drop schema if exists graphile_worker cascade");
        await c.end();
        const { gw, logger } = await graphileLib();
        await gw.runMigrations({ connectionString, logger });
    } else {
        await c.query("drop schema if exists pgboss cascade");
        await c.end();
        const boss = await bossStart();
        await boss.createQueue("noop");
        await boss.stop({ graceful: false, wait: true });
    }
    send({ ev: "done" });
    process.exit(0);
}

async function enqueue() {
    const n = Number(opt.n || 100000);
    const first = Number(opt.first || 0);
    let add, close;
    if (queue === "graphile") {
        const { gw, logger } = await graphileLib();
        const utils = await gw.makeWorkerUtils({ connectionString, logger });
        add = (specs) => utils.addJobs(specs);
        close = () => utils.release();
        await utils.migrate();
    } else {
        const boss = await bossStart();
        add = (jobs) => boss.insert(jobs);
        close = () => boss.stop({ graceful: false, wait: true });
    }
    send({ ev: "ready" });
    await waitFor("go");
    // Building the specs is part of the caller's cost, so it is inside the timed window.
    const t0 = process.hrtime.bigint();
    const specs = new Array(n);
    for (let i = 0; i < n; i++)
        specs[i] =
            queue === "graphile"
                ? { identifier: "noop", payload: {}, priority: prio(first + i) }
                : { name: "noop", data: {}, priority: prio(first + i) };
    await add(specs);
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    send({ ev: "done", n, s, batch: n });
    await waitFor("stop");
    send({ ev: "stats", ...probeStats(), batch: n });
    await close();
    process.exit(0);
}

async function node() {
    let done = 0;
    let firstMs = null;
    let goAt = 0n;
    let stopping = false;
    let stopLib;
    const loops = Number(opt.concurrency || 10);
    const ran = () => {
        if (done++ === 0) firstMs = Number(process.hrtime.bigint() - goAt) / 1e6;
    };
    if (queue === "graphile") {
        const { gw, logger } = await graphileLib();
        // run() takes about a second to start on this machine, so it starts before "ready"; the
        // handlers hold until "go" (the first local-queue fetch, up to 500 jobs, may happen
        // before the clock starts).
        const go = waitFor("go");
        const runner = await gw.run({
            connectionString,
            concurrency: loops,
            maxPoolSize: loops + 2,
            noHandleSignals: true,
            logger,
            taskList: {
                noop: async () => {
                    if (!seen.go) await go;
                    ran();
                },
            },
            preset: { worker: { localQueue: { size: Number(opt["local-queue"] || 500) }, completeJobBatchDelay: 0 } },
        });
        stopLib = () => runner.stop();
        send({ ev: "ready" });
        await go;
        goAt = process.hrtime.bigint();
    } else {
        const boss = await bossStart({ max: loops + 2 });
        send({ ev: "ready" });
        await waitFor("go");
        goAt = process.hrtime.bigint();
        const batchSize = Number(opt.batch || 100);
        const handler = async () => ran();
        const loop = async () => {
            while (!stopping) {
                const jobs = await boss.fetch("noop", { batchSize });
                if (jobs.length === 0) {
                    await sleep(10); // empty queue: poll again shortly (the library offers no wake-up in fetch mode)
                    continue;
                }
                for (const j of jobs) await handler(j);
                await boss.complete(
                    "noop",
                    jobs.map((j) => j.id),
                );
            }
        };
        const all = Array.from({ length: loops }, loop);
        stopLib = async () => {
            stopping = true;
            await Promise.allSettled(all);
            await boss.stop({ graceful: false, wait: true });
        };
    }
    const tick = setInterval(() => send({ ev: "p", done }), 50);
    await waitFor("stop");
    clearInterval(tick);
    send({
        ev: "stats",
        done,
        first_ms: firstMs,
        ...probeStats(),
        batch: queue === "graphile" ? Number(opt["local-queue"] || 500) : Number(opt.batch || 100),
    });
    await Promise.race([stopLib(), sleep(3000)]);
    process.exit(0);
}

// Holds the unfinished backlog near --backlog: every --tick-ms it counts unfinished tasks and
// bulk-enqueues the difference, until "stop" or until --total tasks were enqueued.
async function produce() {
    const target = Number(opt.backlog || 4000);
    const tickMs = Number(opt["tick-ms"] || 50);
    const total = Number(opt.total || Infinity);
    const c = new pg.Client({ connectionString });
    await c.connect();
    const countSql =
        queue === "graphile"
            ? "select count(*)::int as n from graphile_worker._private_jobs"
            : "select count(*)::int as n from pgboss.job where name = 'noop' and state < 'completed'";
    let add, close;
    if (queue === "graphile") {
        const { gw, logger } = await graphileLib();
        const utils = await gw.makeWorkerUtils({ connectionString, logger });
        add = (specs) => utils.addJobs(specs);
        close = () => utils.release();
    } else {
        const boss = await bossStart();
        add = (jobs) => boss.insert(jobs);
        close = () => boss.stop({ graceful: false, wait: true });
    }
    send({ ev: "ready" });
    await waitFor("go");
    const t0 = Date.now();
    let enq = 0;
    let calls = 0;
    let sumBacklog = 0;
    let samples = 0;
    let stopped = false;
    let lastTick = t0;
    let lastBacklog = 0;
    let lastWant = 0;
    waitFor("stop").then(() => (stopped = true));
    while (!stopped) {
        const tickStart = Date.now();
        const backlog = (await c.query(countSql)).rows[0].n;
        sumBacklog += backlog;
        samples++;
        send({ ev: "s", t_ms: tickStart - t0, backlog, enq, q: probe.queries });
        // Target plus what the nodes will consume before the next count (ax_bench.cpp: the same
        // rule for every side).
        const dt = (tickStart - lastTick) / 1000;
        const consumed = lastBacklog + lastWant - backlog;
        const ahead = samples > 1 && dt > 0 ? Math.max(0, Math.min(target, Math.floor((consumed / dt) * (tickMs / 1000)))) : 0;
        lastTick = tickStart;
        lastBacklog = backlog;
        const want = Math.min(target + ahead - backlog, total - enq);
        lastWant = Math.max(0, want);
        if (want > 0) {
            const specs = new Array(want);
            for (let i = 0; i < want; i++)
                specs[i] =
                    queue === "graphile"
                        ? { identifier: "noop", payload: {}, priority: prio(enq + i) }
                        : { name: "noop", data: {}, priority: prio(enq + i) };
            await add(specs);
            enq += want;
            calls++;
        }
        if (enq >= total && backlog === 0) {
            send({ ev: "drained", t_ms: Date.now() - t0, enq });
            break;
        }
        const left = tickMs - (Date.now() - tickStart);
        if (left > 0) await sleep(left);
    }
    await waitFor("stop");
    send({ ev: "stats", enq, calls, avg_backlog: samples ? sumBacklog / samples : null, ...probeStats() });
    await c.end();
    await close();
    process.exit(0);
}

const roles = { setup, enqueue, node, produce };
if (!roles[role]) {
    console.error("usage: peers.mjs <setup|enqueue|node|produce> --queue graphile|pgboss [--n N] [--backlog N] ...");
    process.exit(2);
}
roles[role]().catch((e) => {
    console.error(`peers.mjs ${role} ${queue}: ${e.stack || e}`);
    process.exit(1);
});
