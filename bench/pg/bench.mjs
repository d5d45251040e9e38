// The distributed benchmark's driver: ax against graphile-worker and pg-boss on one throw-away
// PostgreSQL, in one run, alternating sides. Started by scripts/bench-pg.sh, which provides the
// server (PGHOST/PGPORT, superuser postgres) and the npm folder (AX_BENCH_PG_MODULES).
// It measures and reports; it never asserts a target. Run with --help for the options.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import { writeSvg } from "./chart.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(path.resolve(process.env.AX_BENCH_PG_MODULES || "."), "package.json"));
const pg = require("pg");

// --- options -----------------------------------------------------------------------------------
const HELP = `usage: bench.mjs [options]
  --quick                 development sizes: 20k tasks, steady 8 s, churn 100k, recovery 20k
  --tasks N               tasks per burn-down (and bulk enqueue) (100000)
  --nodes LIST            node processes for the burn-down (1,2,4)
  --steady-s S            steady-state window (30)
  --backlog N             steady-state backlog the producer holds (4000)
  --steady-nodes N        node processes in steady state (1)
  --churn N               tasks through the system before the hot table is measured (1000000)
  --churn-nodes N         node processes for the churn (2)
  --churn-max-s S         give up the churn after S seconds and report what went through (900)
  --recovery-tasks N      backlog for the kill -9 test (50000)
  --recovery-cap-s S      stop waiting for recovery after S seconds (40)
  --rounds R              repeat every measurement R times, alternating the order (1)
  --workloads LIST        burndown,steady,churn,recovery (all)
  --queues LIST           ax,ax-b50,ax-b200,ax-b500,graphile,pgboss (those available; default all);
                          ax-c1 (one connection per node, diagnostic) only when named
  --ax-bin PATH           the ax bench node program (ax rows are skipped without it)
  --ax-lease-s S          lease the ax nodes use (5)
  --ax-base PATH          a second ax bench node program (say, a build of an earlier commit): adds the
                          side ax-base, run alternately with ax, for before/after pairs in one run
  --out DIR               where pg.md, pg.svg and pg.json go (docs/bench; bench-results/pg with --quick)
`;
const argv = process.argv.slice(2);
const opt = {};
for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--help" || a === "-h") {
        process.stdout.write(HELP);
        process.exit(0);
    }
    if (a === "--quick") {
        opt.quick = true;
        continue;
    }
    if (!a.startsWith("--") || argv[i + 1] === undefined) {
        console.error(`bench.mjs: bad argument ${a}\n${HELP}`);
        process.exit(2);
    }
    opt[a.slice(2)] = argv[++i];
}
const Q = !!opt.quick;
const num = (k, full, quick) => {
    const v = opt[k] !== undefined ? Number(opt[k]) : Q ? quick : full;
    if (!Number.isFinite(v) || v < 0) {
        console.error(`bench.mjs: --${k} needs a number`);
        process.exit(2);
    }
    return v;
};
const cfg = {
    tasks: num("tasks", 100000, 20000),
    nodes: (opt.nodes || "1,2,4").split(",").map(Number),
    steadyS: num("steady-s", 30, 8),
    backlog: num("backlog", 4000, 4000),
    steadyNodes: num("steady-nodes", 1, 1),
    churn: num("churn", 1000000, 100000),
    churnNodes: num("churn-nodes", 2, 2),
    churnMaxS: num("churn-max-s", 900, 300),
    recoveryTasks: num("recovery-tasks", 50000, 20000),
    recoveryCapS: num("recovery-cap-s", 40, 20),
    rounds: num("rounds", 1, 1),
    workloads: (opt.workloads || "burndown,steady,churn,recovery").split(","),
    axLeaseS: num("ax-lease-s", 5, 5),
    out: opt.out || (Q ? "bench-results/pg" : "docs/bench"),
};
const PEERS = path.join(here, "peers.mjs");

// --- the sides ---------------------------------------------------------------------------------
// Each variant names the program that plays every role (setup, enqueue, node, produce, info).
const variants = [];
const axBin = opt["ax-bin"];
if (axBin && fs.existsSync(axBin)) {
    const ax = (id, batch, config, extra = []) => ({
        id,
        family: "ax",
        label: "ax",
        config,
        main: id === "ax",
        legend: ["ax", config],
        cmd: (role, args) => [axBin, [role, "--batch", batch, "--lease-s", String(cfg.axLeaseS), ...extra, ...args]],
    });
    variants.push(ax("ax", "pid", "PID batch size"));
    if (opt["ax-base"]) {
        if (!fs.existsSync(opt["ax-base"])) {
            console.error(`bench.mjs: --ax-base ${opt["ax-base"]} not found`);
            process.exit(2);
        }
        const base = ax("ax-base", "pid", "PID batch size, base build");
        base.label = "ax (base build)";
        base.main = true;
        base.cmd = (role, args) => [opt["ax-base"], [role, "--batch", "pid", "--lease-s", String(cfg.axLeaseS), ...args]];
        variants.push(base);
    }
    // Diagnostic, not in the default run: one connection per node (a strictly serial round trip).
    variants.push(ax("ax-c1", "pid", "PID batch size, 1 connection", ["--connections", "1"]));
    variants.push(ax("ax-b50", "50", "fixed batch 50"));
    variants.push(ax("ax-b200", "200", "fixed batch 200"));
    variants.push(ax("ax-b500", "500", "fixed batch 500"));
} else if (axBin) {
    console.error(`bench.mjs: ${axBin} not found: ax rows skipped`);
}
variants.push({
    id: "graphile",
    family: "graphile",
    label: "graphile-worker 0.17.3",
    config: "concurrency 10, localQueue 500, completeJobBatchDelay 0",
    legend: ["graphile-worker 0.17.3", "localQueue 500, batch delay 0"],
    main: true,
    cmd: (role, args) => [process.execPath, [PEERS, role, "--queue", "graphile", ...args]],
});
variants.push({
    id: "pgboss",
    family: "pgboss",
    label: "pg-boss 10.4.2",
    config: "fetch mode, 10 loops, batch 100",
    legend: ["pg-boss 10.4.2", "fetch mode, batch 100"],
    main: true,
    cmd: (role, args) => [process.execPath, [PEERS, role, "--queue", "pgboss", ...args]],
});
const chosen = opt.queues ? opt.queues.split(",") : variants.map((v) => v.id).filter((id) => id !== "ax-c1");
const active = variants.filter((v) => chosen.includes(v.id));
for (const id of chosen)
    if (!variants.some((v) => v.id === id)) console.error(`bench.mjs: unknown or unavailable queue ${id}: skipped`);
if (active.length === 0) {
    console.error("bench.mjs: nothing to run");
    process.exit(2);
}

// Facts the tables need that only the side knows (its hot table, how to count what is
// unfinished and which tasks are claimed). Peers: SQL on their documented schemas.
const INFO = {
    graphile: {
        hot_tables: ["graphile_worker._private_jobs"],
        unfinished_sql: "select count(*)::bigint as n from graphile_worker._private_jobs",
        claimed_ids_sql: "select id::text from graphile_worker._private_jobs where locked_at is not null",
        unfinished_of_sql: "select count(*)::bigint as n from graphile_worker._private_jobs where id = any($1::bigint[])",
        recovery_note: "locks expire after 4 h (fixed in the library)",
    },
    pgboss: {
        hot_tables: ["pgboss.job"],
        unfinished_sql: "select count(*)::bigint as n from pgboss.job where name = 'noop' and state < 'completed'",
        claimed_ids_sql: "select id::text from pgboss.job where name = 'noop' and state = 'active'",
        unfinished_of_sql:
            "select count(*)::bigint as n from pgboss.job where id = any($1::uuid[]) and state < 'completed'",
        recovery_note: "active jobs expire after expireInSeconds (default 15 min), found by maintenance",
    },
};

// --- processes ---------------------------------------------------------------------------------
const CLK_TCK = 100; // Linux USER_HZ: /proc reports CPU in 1/100 s on every supported architecture
const alive = new Set();
process.on("exit", () => {
    for (const c of alive) c.proc.kill("SIGKILL");
});
for (const sig of ["SIGINT", "SIGTERM"])
    process.on(sig, () => {
        for (const c of alive) c.proc.kill("SIGKILL");
        process.exit(130);
    });

class Child {
    constructor(name, [cmd, args], user = "bench") {
        this.name = name;
        this.latest = {};
        this.samples = [];
        this.waiters = [];
        this.exitInfo = null;
        this.proc = spawn(cmd, args, {
            stdio: ["pipe", "pipe", "inherit"],
            env: { ...process.env, PGUSER: user, PGDATABASE: "bench" },
        });
        this.pid = this.proc.pid;
        alive.add(this);
        this.proc.stdin.on("error", () => {});
        readline.createInterface({ input: this.proc.stdout }).on("line", (line) => {
            let ev;
            try {
                ev = JSON.parse(line);
            } catch {
                console.error(`${name}: ${line}`);
                return;
            }
            this.latest[ev.ev] = ev;
            if (ev.ev === "s") this.samples.push(ev);
            this.poke();
        });
        this.exited = new Promise((resolve) =>
            this.proc.on("exit", (code, signal) => {
                alive.delete(this);
                this.exitInfo = { code, signal };
                this.poke();
                resolve(this.exitInfo);
            }),
        );
    }
    poke() {
        for (const w of this.waiters.splice(0)) w();
    }
    wait(ev, timeoutMs = 600000) {
        return new Promise((resolve, reject) => {
            const deadline = Date.now() + timeoutMs;
            const check = () => {
                if (this.latest[ev]) return resolve(this.latest[ev]);
                if (this.exitInfo)
                    return reject(
                        new Error(`${this.name} exited (${this.exitInfo.code ?? this.exitInfo.signal}) before "${ev}"`),
                    );
                if (Date.now() > deadline) return reject(new Error(`${this.name}: no "${ev}" within ${timeoutMs} ms`));
                this.waiters.push(check);
                setTimeout(() => this.poke(), Math.min(1000, deadline - Date.now() + 1));
            };
            check();
        });
    }
    send(cmd) {
        if (!this.exitInfo) this.proc.stdin.write(cmd + "\n");
    }
    cpu() {
        return procCpu(this.pid, false);
    }
    async stop(timeoutMs = 15000) {
        this.send("stop");
        const t = setTimeout(() => this.proc.kill("SIGKILL"), timeoutMs);
        await this.exited;
        clearTimeout(t);
        return this.latest.stats || {};
    }
}

function procStat(pid) {
    try {
        const s = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
        const f = s.slice(s.lastIndexOf(")") + 2).split(" "); // f[0] is field 3 (state)
        return { ppid: Number(f[1]), ut: Number(f[11]), st: Number(f[12]), cut: Number(f[13]), cst: Number(f[14]) };
    } catch {
        return null;
    }
}
function procCpu(pid, withChildren) {
    const s = procStat(pid);
    if (!s) return 0;
    return (s.ut + s.st + (withChildren ? s.cut + s.cst : 0)) / CLK_TCK;
}
let postmaster = 0;
// PostgreSQL's CPU: the postmaster with the CPU of its exited children (backends that closed),
// plus every live child (backends, checkpointer, walwriter, autovacuum).
function pgCpu() {
    return pgCpuParts().total;
}
// The same, split by process title ("postgres: walwriter", "postgres: bench bench 127.0.0.1(…)"
// = a backend, "autovacuum worker", ...). Exited children only show up in "exited".
function pgCpuParts() {
    const parts = { exited: procCpu(postmaster, true) - procCpu(postmaster, false), postmaster: procCpu(postmaster, false) };
    for (const d of fs.readdirSync("/proc")) {
        if (d.charCodeAt(0) < 48 || d.charCodeAt(0) > 57) continue;
        const s = procStat(d);
        if (!s || s.ppid !== postmaster) continue;
        let title = "";
        try {
            title = fs.readFileSync(`/proc/${d}/cmdline`, "utf8").replace(/\0/g, " ").trim();
        } catch {}
        const m = /^postgres: (?:\S+ )?(\S+) (\S+) (?:\d+\.\d+\.\d+\.\d+|\[local\])/.exec(title);
        const kind = m ? `backends (${m[1]})` : title.replace(/^postgres: /, "").replace(/ .*$/, "") || "other";
        parts[kind] = (parts[kind] || 0) + (s.ut + s.st) / CLK_TCK;
    }
    parts.total = Object.values(parts).reduce((a, b) => a + b, 0);
    return parts;
}

// --- the control connection (superuser, not counted in statements per task) ------------------
let ctl;
let ctlQueries = 0; // transactions this driver ran in the bench database, subtracted from xact counts
async function q(sql, params) {
    ctlQueries++;
    return (await ctl.query(sql, params)).rows;
}
async function counters() {
    const [s] = await q(
        "select coalesce(sum(calls), 0)::bigint as calls from pg_stat_statements where userid = 'bench'::regrole",
    );
    const [x] = await q(
        "select (xact_commit + xact_rollback)::bigint as x from pg_stat_database where datname = 'bench'",
    );
    return { calls: Number(s.calls), xacts: Number(x.x) - ctlQueries };
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Where the server's time went since the last reset: the bench role's statements by total time.
// The statements of the node role (bench) and, in steady state, of the producer
// (bench_producer), by execution time.
async function topStatements(roles = ["bench"]) {
    return (
        await q(
            `select calls::bigint as calls, total_exec_time as ms, rows::bigint as rows, mean_exec_time as mean_ms, max_exec_time as max_ms,
                    left(regexp_replace(query, '\\s+', ' ', 'g'), 120) as query, userid::regrole::text as role
               from pg_stat_statements where userid = any($1::regrole[]::oid[])
              order by total_exec_time desc limit 10`,
            [roles],
        )
    ).map((r) => ({ calls: Number(r.calls), ms: Number(r.ms), rows: Number(r.rows), mean_ms: Number(r.mean_ms), max_ms: Number(r.max_ms), query: r.query, role: r.role }));
}

async function infoOf(v) {
    if (INFO[v.family]) return INFO[v.family];
    const c = new Child(`${v.id} info`, v.cmd("info", []));
    const info = await c.wait("info", 60000);
    await c.exited;
    return info;
}
async function setup(v) {
    const c = new Child(`${v.id} setup`, v.cmd("setup", []));
    await c.wait("done", 120000);
    await c.exited;
}
async function unfinished(info) {
    return Number((await q(info.unfinished_sql))[0].n);
}
async function prepareDrain(info) {
    for (const t of info.hot_tables) await q(`analyze ${t}`);
    await q("checkpoint");
}

async function enqueue(v, n) {
    const c = new Child(`${v.id} enqueue`, v.cmd("enqueue", ["--n", String(n)]));
    await c.wait("ready", 60000);
    const c0 = await counters();
    const pg0 = pgCpu();
    const cl0 = c.cpu();
    const t0 = process.hrtime.bigint();
    c.send("go");
    const done = await c.wait("done", 600000);
    const wall = Number(process.hrtime.bigint() - t0) / 1e9;
    const pg1 = pgCpu();
    const cl1 = c.cpu();
    const stats = await c.stop();
    await sleep(50);
    const c1 = await counters();
    return {
        variant: v.id,
        workload: "enqueue",
        nodes: 1,
        tasks: n,
        seconds: wall,
        rate: n / wall,
        batch: done.batch ?? n,
        pg_us: ((pg1 - pg0) / n) * 1e6,
        client_us: ((cl1 - cl0) / n) * 1e6,
        round_trips: stats.round_trips ?? stats.queries ?? null,
        statements: c1.calls - c0.calls,
        xacts: c1.xacts - c0.xacts,
    };
}

// Starts `nodes` node processes, waits until all are ready, and says go. Returns a handle whose
// finish() reads CPU and stops them.
// A producer running alongside is a role of its own (not in statements/task); its transactions
// (one per query it reports) are subtracted from commits/task.
async function startNodes(v, nodes, producer = null) {
    const extra = [];
    const producerQueries = () => (producer && producer.latest.s ? producer.latest.s.q || 0 : 0);
    const cs = [];
    for (let i = 0; i < nodes; i++) cs.push(new Child(`${v.id} node${i}`, v.cmd("node", ["--id", String(i), ...extra])));
    for (const c of cs) await c.wait("ready", 60000);
    const c0 = await counters();
    const pq0 = producerQueries();
    const parts0 = pgCpuParts();
    const pg0 = parts0.total;
    const cl0 = cs.map((c) => c.cpu());
    const t0 = process.hrtime.bigint();
    for (const c of cs) c.send("go");
    return {
        cs,
        t0,
        done: () => cs.reduce((s, c) => s + (c.latest.p ? c.latest.p.done : 0), 0),
        elapsed: () => Number(process.hrtime.bigint() - t0) / 1e9,
        async finish(tasks) {
            const wall = this.elapsed();
            const parts1 = pgCpuParts();
            const pg1 = parts1.total;
            const cl1 = cs.reduce((s, c, i) => s + (c.exitInfo ? 0 : c.cpu() - cl0[i]), 0);
            const pq1 = producerQueries();
            const stats = await Promise.all(cs.map((c) => c.stop()));
            await sleep(50);
            const c1 = await counters();
            c1.xacts -= pq1 - pq0;
            const sum = (k) => stats.reduce((s, x) => s + (Number(x[k]) || 0), 0);
            const maxOf = (k) => {
                const xs = stats.map((x) => x[k]).filter((x) => typeof x === "number");
                return xs.length ? Math.max(...xs) : null;
            };
            const claims = sum("claims");
            const n = tasks ?? sum("done");
            const pg_parts_us = {};
            for (const k of Object.keys(parts1))
                if (k !== "total") pg_parts_us[k] = (((parts1[k] || 0) - (parts0[k] || 0)) / n) * 1e6;
            return {
                wall,
                pg_parts_us,
                tasks: n,
                rate: n / wall,
                batch: claims ? sum("claimed_rows") / claims : null,
                batch_cfg: stats[0] ? stats[0].batch : null,
                first_ms: maxOf("first_ms"),
                claim_p50_ms: maxOf("claim_p50_us") === null ? null : maxOf("claim_p50_us") / 1000,
                claim_p99_ms: maxOf("claim_p99_us") === null ? null : maxOf("claim_p99_us") / 1000,
                pg_us: ((pg1 - pg0) / n) * 1e6,
                client_us: (cl1 / n) * 1e6,
                // Only where the client counts them (the ax node does when its library reports them).
                round_trips: stats.some((x) => typeof x.round_trips === "number" || typeof x.queries === "number")
                    ? (sum("round_trips") || sum("queries")) / n
                    : null,
                statements: (c1.calls - c0.calls) / n,
                xacts: (c1.xacts - c0.xacts) / n,
                node_stats: stats,
            };
        },
    };
}

async function burndown(v, nodes) {
    const info = await infoOf(v);
    await setup(v);
    const enq = await enqueue(v, cfg.tasks);
    await prepareDrain(info);
    await q("select pg_stat_statements_reset()");
    const h = await startNodes(v, nodes);
    const deadline = Date.now() + 1800e3;
    while (h.done() < cfg.tasks) {
        if (Date.now() > deadline) throw new Error(`${v.id}: burn-down did not finish in 30 min`);
        if (h.cs.some((c) => c.exitInfo)) throw new Error(`${v.id}: a node exited during the burn-down`);
        await sleep(5);
    }
    // The handlers ran; the clock stops when the database agrees that every task is finished.
    while ((await unfinished(info)) > 0) await sleep(5);
    const r = await h.finish(cfg.tasks);
    r.top_statements = await topStatements();
    return [enq, { variant: v.id, workload: "burndown", nodes, ...r }];
}

async function steady(v, nodes) {
    const info = await infoOf(v);
    await setup(v);
    const p = new Child(`${v.id} producer`, v.cmd("produce", ["--backlog", String(cfg.backlog)]), "bench_producer");
    await p.wait("ready", 60000);
    p.send("go");
    while (p.samples.length < 2) await p.wait("s").then(() => sleep(20));
    await q("select pg_stat_statements_reset()");
    const h = await startNodes(v, nodes, p);
    const s0 = Math.max(0, p.samples.length - 1);
    const tStart = Date.now();
    while (Date.now() - tStart < cfg.steadyS * 1000) {
        if (h.cs.some((c) => c.exitInfo) || p.exitInfo) throw new Error(`${v.id}: a process exited in steady state`);
        await sleep(100);
    }
    const done = h.done();
    const r = await h.finish(done);
    r.top_statements = await topStatements(["bench", "bench_producer"]);
    const ps = await p.stop();
    const samples = p.samples.slice(s0).map((s) => ({ t: s.t_ms / 1000, backlog: s.backlog }));
    const t00 = samples.length ? samples[0].t : 0;
    for (const s of samples) s.t -= t00;
    const bl = samples.map((s) => s.backlog);
    return {
        variant: v.id,
        workload: "steady",
        nodes,
        ...r,
        backlog_avg: bl.length ? bl.reduce((a, b) => a + b, 0) / bl.length : null,
        backlog_min: bl.length ? Math.min(...bl) : null,
        backlog_max: bl.length ? Math.max(...bl) : null,
        producer_calls: ps.calls,
        samples,
    };
}

async function hotTableStats(info) {
    let bytes = 0,
        live = 0,
        dead = 0;
    for (const t of info.hot_tables) {
        // A plain table has no partition tree: then it is its own only part.
        let parts = await q("select relid::regclass::text as r from pg_partition_tree($1::regclass) where isleaf", [t]);
        if (parts.length === 0) parts = [{ r: t }];
        for (const { r } of parts) {
            bytes += Number((await q("select pg_total_relation_size($1::regclass)::bigint as b", [r]))[0].b);
            const [st] = await q("select tuple_count::bigint as l, dead_tuple_count::bigint as d from pgstattuple($1)", [r]);
            live += Number(st.l);
            dead += Number(st.d);
        }
    }
    return { bytes, live, dead };
}
async function otherBytes(info) {
    let bytes = 0;
    // Partitioned tables (ax's history and dead letters) count every partition.
    for (const t of info.other_tables || [])
        bytes += Number(
            (
                await q(
                    `select coalesce((select sum(pg_total_relation_size(relid)) from pg_partition_tree($1::regclass)),
                                     pg_total_relation_size($1::regclass))::bigint as b`,
                    [t],
                )
            )[0].b,
        );
    return bytes;
}
async function hotTableBytes(info) {
    let bytes = 0;
    for (const t of info.hot_tables)
        bytes += Number(
            (
                await q(
                    `select coalesce((select sum(pg_total_relation_size(relid)) from pg_partition_tree($1::regclass)),
                                     pg_total_relation_size($1::regclass))::bigint as b`,
                    [t],
                )
            )[0].b,
        );
    return bytes;
}

async function churn(v) {
    const info = await infoOf(v);
    await setup(v);
    const before = await hotTableStats(info);
    const p = new Child(`${v.id} producer`, v.cmd("produce", ["--backlog", String(cfg.backlog), "--total", String(cfg.churn)]), "bench_producer");
    await p.wait("ready", 60000);
    p.send("go");
    const h = await startNodes(v, cfg.churnNodes, p);
    let at10 = null;
    // The size at every tenth of the churn: a table that levels off stays flat over the second
    // half; one that grows with the finished tasks keeps climbing (doubling from 50 % to 100 %).
    const samples = [];
    const deadline = Date.now() + cfg.churnMaxS * 1000;
    let timedOut = false;
    while (!p.latest.drained) {
        if (h.cs.some((c) => c.exitInfo) || p.exitInfo) throw new Error(`${v.id}: a process exited in the churn`);
        const due = (samples.length + 1) * (cfg.churn / 10);
        if (samples.length < 9 && h.done() >= due) {
            samples.push({ done: h.done(), bytes: await hotTableBytes(info) });
            if (at10 === null) at10 = samples[0];
        }
        if (Date.now() > deadline) {
            timedOut = true;
            break;
        }
        await sleep(200);
    }
    const r = await h.finish();
    await p.stop();
    const left = await unfinished(info);
    const after = await hotTableStats(info);
    after.other_bytes = await otherBytes(info);
    samples.push({ done: r.tasks, bytes: after.bytes });
    return {
        other_tables: info.other_tables || [],
        variant: v.id,
        workload: "churn",
        nodes: cfg.churnNodes,
        tasks: r.tasks,
        rate: r.rate,
        timed_out: timedOut,
        unfinished: left,
        before,
        at10,
        samples,
        after,
    };
}

async function recovery(v) {
    const info = await infoOf(v);
    await setup(v);
    await enqueue(v, cfg.recoveryTasks);
    await prepareDrain(info);
    const h = await startNodes(v, 2);
    while (h.done() < cfg.recoveryTasks / 5) {
        if (h.cs.some((c) => c.exitInfo)) throw new Error(`${v.id}: a node exited before the kill`);
        await sleep(5);
    }
    const victim = h.cs[0];
    const doneByVictim = victim.latest.p ? victim.latest.p.done : 0;
    const tKill = process.hrtime.bigint();
    victim.proc.kill("SIGKILL");
    await victim.exited;
    // Everything claimed now and not finished belongs to the dead node or is in the survivor's
    // hands; the survivor's share finishes at once, the dead node's waits for recovery.
    const ids = (await q(info.claimed_ids_sql)).map((r) => r.id);
    const cap = Math.max(cfg.recoveryCapS, cfg.axLeaseS + 10);
    let left = ids.length;
    let seconds = null;
    while (true) {
        left = ids.length ? Number((await q(info.unfinished_of_sql, [ids]))[0].n) : 0;
        const el = Number(process.hrtime.bigint() - tKill) / 1e9;
        if (left === 0) {
            seconds = el;
            break;
        }
        if (el > cap) break;
        if (h.cs[1].exitInfo) throw new Error(`${v.id}: the surviving node exited`);
        await sleep(20);
    }
    await h.cs[1].stop();
    return {
        variant: v.id,
        workload: "recovery",
        nodes: 2,
        tasks: cfg.recoveryTasks,
        done_by_victim: doneByVictim,
        claimed_at_kill: ids.length,
        stuck: left,
        seconds,
        cap,
        lease_s: v.family === "ax" ? cfg.axLeaseS : null,
        note: info.recovery_note || null,
    };
}

// --- the run -----------------------------------------------------------------------------------
async function main() {
    ctl = new pg.Client({ host: process.env.PGHOST, port: process.env.PGPORT, user: "postgres", database: "postgres" });
    await ctl.connect();
    const [{ pid }] = await q("select pg_backend_pid() as pid");
    postmaster = procStat(pid).ppid;
    const [{ v: version }] = await q("select version() as v");
    const settings = await q(
        "select name, setting from pg_settings where name in ('fsync','synchronous_commit','shared_buffers','max_wal_size','autovacuum','wal_level') order by name",
    );
    await q("drop database if exists bench");
    await q("do $$ begin if not exists (select from pg_roles where rolname = 'bench') then create role bench login superuser; end if; end $$");
    await q("do $$ begin if not exists (select from pg_roles where rolname = 'bench_producer') then create role bench_producer login superuser; end if; end $$");
    await q("create database bench owner bench");
    await ctl.end();
    ctl = new pg.Client({ host: process.env.PGHOST, port: process.env.PGPORT, user: "postgres", database: "bench" });
    await ctl.connect();
    ctlQueries = 0;
    await q("create extension if not exists pg_stat_statements");
    await q("create extension if not exists pgstattuple");

    console.log(`# ${version}`);
    console.log(`# settings: ${settings.map((s) => `${s.name}=${s.setting}`).join(" ")}`);
    console.log(`# sides: ${active.map((v) => v.id).join(", ")}; ${JSON.stringify(cfg)}`);

    const results = [];
    const t0 = Date.now();
    let step = 0;
    const rotate = (list) => {
        const k = step++ % list.length;
        return [...list.slice(k), ...list.slice(0, k)];
    };
    const log = (r) => {
        results.push(r);
        const f = (x, d = 0) => (x === null || x === undefined || Number.isNaN(x) ? "-" : Number(x).toFixed(d));
        const el = ((Date.now() - t0) / 1000).toFixed(0);
        if (r.workload === "churn")
            console.log(`[${el}s] ${r.variant} churn: ${r.tasks} tasks, ${f(r.rate)} /s, hot table ${f(r.after.bytes / 1048576, 1)} MiB, ${r.after.dead} dead`);
        else if (r.workload === "recovery")
            console.log(`[${el}s] ${r.variant} recovery: ${r.seconds === null ? `> ${r.cap} s (${r.stuck} stuck)` : `${f(r.seconds, 2)} s`} (${r.claimed_at_kill} claimed at the kill)`);
        else
            console.log(`[${el}s] ${r.variant} ${r.workload} x${r.nodes}: ${f(r.rate)} tasks/s, PG ${f(r.pg_us, 1)} us/task, client ${f(r.client_us, 1)} us/task`);
    };
    const run = async (what, fn) => {
        try {
            return await fn();
        } catch (e) {
            console.error(`bench.mjs: ${what}: ${e.message}`);
            return null;
        }
    };
    for (let round = 0; round < cfg.rounds; round++) {
        if (cfg.workloads.includes("burndown"))
            for (const n of cfg.nodes)
                for (const v of rotate(active)) {
                    const rs = await run(`${v.id} burn-down x${n}`, () => burndown(v, n));
                    if (rs) rs.forEach(log);
                }
        if (cfg.workloads.includes("steady"))
            for (const v of rotate(active)) {
                const r = await run(`${v.id} steady`, () => steady(v, cfg.steadyNodes));
                if (r) log(r);
            }
        const mains = active.filter((v) => v.main);
        if (cfg.workloads.includes("recovery"))
            for (const v of rotate(mains)) {
                const r = await run(`${v.id} recovery`, () => recovery(v));
                if (r) log(r);
            }
        if (cfg.workloads.includes("churn") && round === 0)
            for (const v of rotate(mains)) {
                const r = await run(`${v.id} churn`, () => churn(v));
                if (r) log(r);
            }
    }
    await ctl.end();

    fs.mkdirSync(cfg.out, { recursive: true });
    const meta = { ax_source: process.env.AX_BENCH_PG_AX_SOURCE || null, command: process.env.BENCH_PG_CMD || "node bench/pg/bench.mjs " + argv.join(" "), version, settings, cfg, date: new Date().toISOString(), variants: active.map(({ cmd, ...v }) => v) };
    fs.writeFileSync(path.join(cfg.out, "pg.json"), JSON.stringify({ meta, results }, null, 1) + "\n");
    const { report } = await import("./report.mjs");
    const md = report(meta, results);
    fs.writeFileSync(path.join(cfg.out, "pg.md"), md);
    writeSvg(path.join(cfg.out, "pg.svg"), meta, results);
    console.log("\n" + md);
    console.log(`wrote pg.md, pg.svg, pg.json in ${cfg.out} (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
}

main().catch((e) => {
    console.error(`bench.mjs: ${e.stack || e}`);
    process.exit(1);
});
