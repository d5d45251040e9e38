// Turns bench.mjs's results into the markdown report (tables, ratios, targets as MET / MISSED).
// It reports; it never asserts.

const f = (x, d = 0) => (x === null || x === undefined || !Number.isFinite(Number(x)) ? "–" : Number(x).toFixed(d));
const int = (x) => (x === null || x === undefined ? "–" : Math.round(x).toLocaleString("en-US").replace(/,/g, " "));
const mib = (b) => (b < 1048576 ? `${f(b / 1024, 0)} KiB` : `${f(b / 1048576, 1)} MiB`);

// Rounds: one row per (side, workload, nodes), the median run's figures, every run's rate listed.
export function group(results, workload) {
    const by = new Map();
    for (const r of results.filter((r) => r.workload === workload)) {
        const k = `${r.variant}|${r.nodes}`;
        if (!by.has(k)) by.set(k, []);
        by.get(k).push(r);
    }
    return [...by.values()].map((runs) => {
        const sorted = [...runs].sort((a, b) => a.rate - b.rate);
        const med = sorted[Math.floor((sorted.length - 1) / 2)];
        return { ...med, runs: runs.map((r) => r.rate) };
    });
}

// The churn's hot-table samples split at half the tasks: the largest size in each half. A table
// that levels off has the same largest size in both; one that grows with finished tasks doubles.
function growth(r) {
    const xs = r.samples || [];
    if (xs.length < 4) return null;
    const mid = r.tasks / 2;
    const a = xs.filter((x) => x.done <= mid), b = xs.filter((x) => x.done > mid);
    if (!a.length || !b.length) return null;
    return { mid: a[a.length - 1].done, first: Math.max(...a.map((x) => x.bytes)), second: Math.max(...b.map((x) => x.bytes)) };
}

export function report(meta, results) {
    const label = new Map(meta.variants.map((v) => [v.id, v]));
    const name = (id) => (label.get(id) ? label.get(id).label : id);
    const conf = (id) => (label.get(id) ? label.get(id).config : "");
    const peers = meta.variants.filter((v) => v.family !== "ax").map((v) => v.id);
    const cfg = meta.cfg;
    const out = [];
    out.push(`# Distributed throughput: ax vs graphile-worker and pg-boss on one PostgreSQL`);
    out.push("");
    out.push(
        `Run ${meta.date.slice(0, 16).replace("T", " ")} UTC, \`${meta.command}\`; ` +
            `${meta.version.split(",")[0]}, initdb defaults (${meta.settings.map((s) => `${s.name}=${s.setting}`).join(", ")}). ` +
            `No-op tasks, priorities mixed 3:2:1. Every side ran against the same server in this run, in alternating order.` +
            (meta.ax_source ? ` ax built from ${meta.ax_source}.` : ""),
    );
    out.push("");

    const bd = group(results, "burndown");
    const enq = group(results, "enqueue").map((r) => {
        // every burn-down enqueued; one enqueue row per side, the median of them all
        const all = results.filter((x) => x.workload === "enqueue" && x.variant === r.variant).sort((a, b) => a.rate - b.rate);
        return { ...all[Math.floor((all.length - 1) / 2)], runs: all.map((x) => x.rate) };
    });
    const st = group(results, "steady");
    const bestPeer = (nodes) => {
        const rs = bd.filter((r) => peers.includes(r.variant) && r.nodes === nodes);
        return rs.length ? rs.reduce((a, b) => (a.rate > b.rate ? a : b)) : null;
    };
    const runs = (r) => (r.runs && r.runs.length > 1 ? ` (${r.runs.map((x) => int(x)).join(", ")})` : "");
    const row = (r, extra = []) => {
        const bp = bestPeer(r.nodes);
        const vs = r.workload === "burndown" && bp ? `${f(r.rate / bp.rate, 2)}×` : "";
        return [
            name(r.variant),
            conf(r.variant),
            r.workload === "burndown" ? "burn-down" : r.workload,
            r.nodes,
            int(r.tasks),
            `**${int(r.rate)}**${runs(r)}`,
            vs,
            r.batch !== null && r.batch !== undefined ? f(r.batch, r.batch < 10 ? 1 : 0) : "–",
            r.claim_p50_ms !== undefined && r.claim_p50_ms !== null ? `${f(r.claim_p50_ms, 2)} / ${f(r.claim_p99_ms, 2)}` : "–",
            f(r.pg_us, 1),
            f(r.client_us, 1),
            f(r.round_trips, r.workload === "enqueue" ? 0 : 3),
            f(r.statements, r.workload === "enqueue" ? 0 : 3),
            f(r.xacts, r.workload === "enqueue" ? 0 : 3),
            ...extra,
        ];
    };
    const table = (head, rows) => {
        out.push(`| ${head.join(" | ")} |`);
        out.push(`| ${head.map((h, i) => (i < 3 ? "---" : "---:")).join(" | ")} |`);
        for (const r of rows) out.push(`| ${r.join(" | ")} |`);
        out.push("");
    };
    const order = (a, b) =>
        meta.variants.findIndex((v) => v.id === a.variant) - meta.variants.findIndex((v) => v.id === b.variant) ||
        a.nodes - b.nodes;
    const head = [
        "side",
        "config",
        "workload",
        "nodes",
        "tasks",
        "tasks/s",
        "vs best peer",
        "claim batch",
        "claim p50 / p99 ms",
        "PG CPU µs/task",
        "client CPU µs/task",
        "round trips/task",
        "statements/task",
        "commits/task",
    ];
    out.push(`## Bulk enqueue and burn-down (claim + run + ack of ${int(cfg.tasks)} queued tasks)`);
    out.push("");
    table(head, [...enq.sort(order).map((r) => row(r)), ...bd.sort(order).map((r) => row(r))]);
    out.push(
        "Enqueue rows: one bulk call of all the tasks (for enqueue the last three columns are totals, not per task). " +
            "\"claim batch\": rows per claim statement, as returned. \"claim p50 / p99\": the claim statement's round trip seen by the " +
            "client (the slowest node's). \"round trips/task\": client↔server round trips counted by the client; " +
            "\"statements/task\": `pg_stat_statements` calls of the bench role; \"commits/task\": `pg_stat_database` transactions " +
            "(the driver's own subtracted). CPU from /proc: PostgreSQL = postmaster and all its children; client = the node processes.",
    );
    out.push("");

    if (st.length) {
        out.push(`## Steady state (a producer holds the unfinished backlog near ${int(cfg.backlog)} for ${cfg.steadyS} s)`);
        out.push("");
        table(
            [...head.filter((h) => h !== "vs best peer"), "backlog avg (min–max)", "steady / burn-down"],
            st.sort(order).map((r) => {
                const b = bd.find((x) => x.variant === r.variant && x.nodes === r.nodes);
                const cells = row(r);
                cells.splice(6, 1);
                return [...cells, `${int(r.backlog_avg)} (${int(r.backlog_min)}–${int(r.backlog_max)})`, b ? `${f(r.rate / b.rate, 2)}` : "–"];
            }),
        );
        out.push(
            "The producer counts the unfinished tasks every 50 ms and bulk-enqueues the difference; its CPU is not in the client column.",
        );
        out.push("");
    }

    const ch = results.filter((r) => r.workload === "churn");
    if (ch.length) {
        out.push(`## The hot table after ${int(cfg.churn)} tasks through the system`);
        out.push("");
        out.push("| side | tasks finished | tasks/s | hot table at start | after 10 % | at the end | largest, 1st half / 2nd half | live rows at the end | dead rows at the end | other tables at the end |");
        out.push("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
        for (const r of ch.sort(order)) {
            const g = growth(r);
            out.push(
                `| ${name(r.variant)} | ${int(r.tasks)}${r.timed_out ? ` (stopped at ${cfg.churnMaxS} s)` : ""} | ${int(r.rate)} | ${mib(r.before.bytes)} | ${r.at10 ? mib(r.at10.bytes) : "–"} | ${mib(r.after.bytes)} | ${g ? `${mib(g.first)} / ${mib(g.second)}` : "–"} | ${int(r.after.live)} | ${int(r.after.dead)} | ${r.other_tables && r.other_tables.length ? `${mib(r.after.other_bytes)} (${r.other_tables.join(", ")})` : "–"} |`,
            );
        }
        out.push("");
        out.push("Hot table size at each tenth of the churn (tasks finished: size):");
        out.push("");
        for (const r of ch.sort(order))
            if (r.samples && r.samples.length)
                out.push(`- ${name(r.variant)}: ${r.samples.map((x) => `${int(x.done)}: ${mib(x.bytes)}`).join(", ")}`);
        out.push("");
        out.push(
            `A producer holds the backlog near ${int(cfg.backlog)} while ${cfg.churnNodes} node processes consume, until ${int(cfg.churn)} tasks ` +
                "went through; size = `pg_total_relation_size` (heap, indexes, TOAST) over the table's partitions; rows from `pgstattuple` once drained. Autovacuum on, with its defaults.",
        );
        out.push("");
    }

    const rc = results.filter((r) => r.workload === "recovery");
    if (rc.length) {
        out.push("## Recovery after `kill -9` of one of two nodes");
        out.push("");
        out.push("| side | claimed, unfinished at the kill | all of them finished after | lease | note |");
        out.push("| --- | ---: | ---: | ---: | --- |");
        for (const r of rc.sort(order))
            out.push(
                `| ${name(r.variant)} | ${int(r.claimed_at_kill)} | ${r.claimed_at_kill === 0 ? "not measured (nothing claimed at the kill)" : r.seconds === null ? `not within ${r.cap} s (${int(r.stuck)} still claimed)` : `**${f(r.seconds, 2)} s**`} | ${r.lease_s ? `${r.lease_s} s` : "–"} | ${r.note || ""} |`,
            );
        out.push("");
        out.push(
            `${int(cfg.recoveryTasks)} tasks queued, two nodes; when a fifth are done one node gets SIGKILL. Then every task claimed and unfinished is listed (the dead node's and the survivor's in-flight ones) ` +
                "and the clock runs until all of them have finished on the survivor.",
        );
        out.push("");
    }

    // Where the server's time goes: one table of statements and one of CPU by process, for the
    // 1-node burn-down and for steady state (there with the producer's statements too).
    const profile = (prof, title, roles) => {
        if (!prof.length) return;
        out.push(`## Where the server's time goes (${title}; \`pg_stat_statements\`, ${roles})`);
        out.push("");
        out.push("| side | statement | calls | rows | exec ms | exec µs/task | mean / max ms per call |");
        out.push("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
        for (const r of prof.sort(order))
            for (const t of r.top_statements.slice(0, r.workload === "steady" ? 7 : 5))
                out.push(
                    `| ${name(r.variant)}${r.variant.startsWith("ax-") ? ` (${conf(r.variant)})` : ""}${t.role === "bench_producer" ? " producer" : ""} | \`${t.query.replace(/\|/g, "\\|").slice(0, 90)}\` | ${int(t.calls)} | ${int(t.rows)} | ${f(t.ms, 0)} | ${f((t.ms * 1000) / r.tasks, 1)} | ${f(t.mean_ms, 2)} / ${f(t.max_ms, 1)} |`,
                );
        out.push("");
        out.push("PostgreSQL CPU per task by process (µs; a backend that exited lands in \"exited\"):");
        out.push("");
        out.push("| side | " + ["backends", "walwriter", "autovacuum", "checkpointer", "other"].join(" | ") + " |");
        out.push("| --- | ---: | ---: | ---: | ---: | ---: |");
        for (const r of prof.sort(order)) {
            const p = r.pg_parts_us || {};
            let be = 0, ww = 0, av = 0, cp = 0, ot = 0;
            for (const [k, v] of Object.entries(p)) {
                if (k.startsWith("backends")) be += v;
                else if (k === "walwriter") ww += v;
                else if (k.startsWith("autovacuum")) av += v;
                else if (k === "checkpointer") cp += v;
                else ot += v;
            }
            out.push(`| ${name(r.variant)}${r.variant.startsWith("ax-") ? ` (${conf(r.variant)})` : ""} | ${f(be, 1)} | ${f(ww, 1)} | ${f(av, 1)} | ${f(cp, 1)} | ${f(ot, 1)} |`);
        }
        out.push("");
        out.push("Execution time is wall time inside the server (it includes waiting for locks and, for COMMIT, for the WAL flush), not CPU.");
        out.push("");
    };
    const hasStmts = (r) => r.top_statements && r.top_statements.length;
    profile(bd.filter((r) => r.nodes === Math.min(...cfg.nodes) && hasStmts(r)), `burn-down, ${Math.min(...cfg.nodes)} node`, "bench role");
    profile(st.filter(hasStmts), "steady state", "the nodes' bench role and the producer's bench_producer role; µs per task consumed");

    out.push("## Targets");
    out.push("");
    const ax = (w, n) => (w === "burndown" ? bd : st).find((r) => r.variant === "ax" && r.nodes === n);
    const mark = (ok) => (ok ? "**MET**" : "**MISSED**");
    const t = [];
    const ax1 = ax("burndown", 1);
    const bp1 = bestPeer(1);
    if (ax1 && bp1)
        t.push(
            `claim+run+ack, 1 node: ax ${int(ax1.rate)}/s vs ${name(bp1.variant)} ${int(bp1.rate)}/s = ${f(ax1.rate / bp1.rate, 2)}× (target ≥ 2×, and ≥ 33 000/s): ` +
                `${mark(ax1.rate >= 2 * bp1.rate)} / ${mark(ax1.rate >= 33000)}`,
        );
    for (const n of cfg.nodes.filter((n) => n > 1)) {
        const a = ax("burndown", n);
        if (a && ax1) t.push(`${n} nodes: ax ${int(a.rate)}/s (${f(a.rate / ax1.rate, 2)}× its 1-node rate)${bestPeer(n) ? `, ${f(a.rate / bestPeer(n).rate, 2)}× the best peer` : ""}`);
    }
    const axs = ax("steady", cfg.steadyNodes);
    const axb = ax("burndown", cfg.steadyNodes);
    if (axs && axb) {
        const ratio = axs.rate / axb.rate;
        t.push(`steady state within 20 % of burn-down: ax ${int(axs.rate)}/s vs ${int(axb.rate)}/s = ${f(ratio, 2)}: ${mark(ratio >= 0.8)}`);
    }
    const axe = enq.find((r) => r.variant === "ax");
    if (axe) t.push(`bulk enqueue ≥ 100 000/s: ax ${int(axe.rate)}/s: ${mark(axe.rate >= 100000)}`);
    const axr = rc.find((r) => r.variant === "ax");
    if (axr)
        t.push(
            `recovery ≤ lease + 1 s (${axr.lease_s} + 1 s): ${axr.seconds === null ? `not within ${axr.cap} s` : `${f(axr.seconds, 2)} s`}: ${mark(axr.seconds !== null && axr.seconds <= axr.lease_s + 1)}`,
        );
    const axc = ch.find((r) => r.variant === "ax");
    const axg = axc && growth(axc);
    if (axg)
        t.push(
            `hot table does not grow with finished tasks: largest ${mib(axg.first)} over the first half of the churn (to ${int(axg.mid)} tasks), ` +
                `${mib(axg.second)} over the second half (to ${int(axc.tasks)}; growth in proportion would double it): ` +
                `${mark(axg.second <= 1.25 * axg.first)} (level: the second half's largest within 25 % of the first's)`,
        );
    else if (axc && axc.at10)
        t.push(
            `hot table does not grow with finished tasks: ${mib(axc.at10.bytes)} after ${int(axc.at10.done)} tasks, ${mib(axc.after.bytes)} after ${int(axc.tasks)}: ${mark(axc.after.bytes <= 2 * axc.at10.bytes)}`,
        );
    if (t.length === 0) t.push("ax was not run (no ax bench node program): the peers' rows only.");
    for (const x of t) out.push(`- ${x}`);
    out.push("");
    out.push(
        "Caveat: PostgreSQL, the nodes, the producer and this driver share one 2-vCPU VM with other jobs (builds of other work ran at the same time), " +
            "so absolute figures move by ±20 % between runs; compare the ratios within this run.",
    );
    out.push("");
    return out.join("\n");
}
