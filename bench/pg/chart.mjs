// The SVG chart: burn-down throughput by node processes, and the backlog over time in steady state.
import fs from "node:fs";
import { group } from "./report.mjs";

const COLORS = { ax: "#1f77b4", "ax-b50": "#9467bd", "ax-b200": "#8c564b", "ax-b500": "#e377c2", graphile: "#ff7f0e", pgboss: "#2ca02c" };
const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;");

function niceStep(x) {
    if (!(x > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(x));
    for (const m of [1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= x) return m * p;
    return 10 * p;
}
// The smallest axis [max, ticks] at or above x with 4 or 5 round steps (so tick labels stay round).
function niceAxis(x) {
    if (!(x > 0)) return [1, 4];
    let best = null;
    for (const n of [4, 5]) {
        const p = 10 ** Math.floor(Math.log10(x / n));
        for (const m of [1, 2, 2.5, 4, 5, 10]) {
            const top = n * m * p;
            if (top >= x && (!best || top < best[0])) best = [top, n];
        }
    }
    return best;
}
const kfmt = (v) => (v >= 1000 ? `${+(v / 1000).toFixed(1)}k` : `${+v.toFixed(0)}`);

export function writeSvg(file, meta, results) {
    const W = 1080,
        H = 700,
        left = 80,
        right = 790;
    const label = (id) => {
        const v = meta.variants.find((x) => x.id === id);
        return v ? (v.family === "ax" ? `ax (${v.config})` : v.label) : id;
    };
    const order = meta.variants.map((v) => v.id);
    let svg =
        `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">\n` +
        `<rect width="100%" height="100%" fill="white"/>\n` +
        `<text x="${left}" y="24" font-size="15" font-weight="bold">${esc(
            `bench-pg — no-op tasks on one PostgreSQL 15 (initdb defaults), 2 shared vCPUs${meta.cfg.quick ? " (quick run)" : ""}`,
        )}</text>\n`;

    const panel = (y0, y1, xTicks, xOf, [yMax, yTicks], yLabel, xLabel, title) => {
        svg += `<text x="${left}" y="${y0 - 8}" font-weight="bold">${esc(title)}</text>\n`;
        for (let i = 0; i <= yTicks; i++) {
            const v = (yMax * i) / yTicks;
            const y = y1 - ((y1 - y0) * i) / yTicks;
            svg += `<line x1="${left}" y1="${y.toFixed(1)}" x2="${right}" y2="${y.toFixed(1)}" stroke="#ddd"/>\n`;
            svg += `<text x="${left - 6}" y="${(y + 4).toFixed(1)}" text-anchor="end">${kfmt(v)}</text>\n`;
        }
        for (const [v, text] of xTicks) {
            const x = xOf(v);
            svg += `<line x1="${x.toFixed(1)}" y1="${y0}" x2="${x.toFixed(1)}" y2="${y1}" stroke="#eee"/>\n`;
            svg += `<text x="${x.toFixed(1)}" y="${y1 + 16}" text-anchor="middle">${esc(text)}</text>\n`;
        }
        svg += `<line x1="${left}" y1="${y0}" x2="${left}" y2="${y1}" stroke="black"/>\n`;
        svg += `<line x1="${left}" y1="${y1}" x2="${right}" y2="${y1}" stroke="black"/>\n`;
        svg += `<text x="${(left + right) / 2}" y="${y1 + 34}" text-anchor="middle">${esc(xLabel)}</text>\n`;
        const ym = (y0 + y1) / 2;
        svg += `<text x="24" y="${ym}" text-anchor="middle" transform="rotate(-90 24 ${ym})">${esc(yLabel)}</text>\n`;
    };
    const dash = (id) => (id.startsWith("ax-b") ? ` stroke-dasharray="6 3"` : "");

    // Panel 1: burn-down tasks/s by node processes.
    const bd = group(results, "burndown");
    const nodes = [...new Set(bd.map((r) => r.nodes))].sort((a, b) => a - b);
    const p1 = [60, 300];
    const axis1 = niceAxis(Math.max(1, ...bd.map((r) => r.rate)) * 1.05);
    const yMax1 = axis1[0];
    const xOf1 = (n) => left + 40 + ((right - left - 80) * nodes.indexOf(n)) / Math.max(1, nodes.length - 1);
    const yOf1 = (v) => p1[1] - ((p1[1] - p1[0]) * v) / yMax1;
    panel(p1[0], p1[1], nodes.map((n) => [n, String(n)]), xOf1, axis1, "tasks/s (claim + run + ack)", "node processes", `Burn-down of ${meta.cfg.tasks} queued tasks: throughput by node processes`);
    const ids1 = order.filter((id) => bd.some((r) => r.variant === id));
    for (const id of ids1) {
        const rs = bd.filter((r) => r.variant === id).sort((a, b) => a.nodes - b.nodes);
        const pts = rs.map((r) => `${xOf1(r.nodes).toFixed(1)},${yOf1(r.rate).toFixed(1)}`).join(" ");
        svg += `<polyline fill="none" stroke="${COLORS[id] || "#555"}" stroke-width="2"${dash(id)} points="${pts}"><title>${esc(label(id))}</title></polyline>\n`;
        for (const r of rs)
            svg += `<circle cx="${xOf1(r.nodes).toFixed(1)}" cy="${yOf1(r.rate).toFixed(1)}" r="3.5" fill="${COLORS[id] || "#555"}"><title>${esc(`${label(id)}, ${r.nodes} nodes: ${Math.round(r.rate)} tasks/s`)}</title></circle>\n`;
    }

    // Panel 2: steady-state backlog over time.
    const st = group(results, "steady");
    const p2 = [400, 620];
    const tMax = Math.max(1, ...st.flatMap((r) => r.samples.map((s) => s.t)));
    const axis2 = niceAxis(Math.max(meta.cfg.backlog, ...st.flatMap((r) => r.samples.map((s) => s.backlog))) * 1.05);
    const yMax2 = axis2[0];
    const xOf2 = (t) => left + ((right - left) * t) / tMax;
    const yOf2 = (v) => p2[1] - ((p2[1] - p2[0]) * v) / yMax2;
    const step = niceStep(tMax / 6);
    const ticks = [];
    for (let t = 0; t <= tMax + 1e-9; t += step) ticks.push([t, String(+t.toFixed(1))]);
    panel(p2[0], p2[1], ticks, xOf2, axis2, "unfinished tasks", "time (s)", `Steady state: backlog held near ${meta.cfg.backlog} by the producer (${meta.cfg.steadyNodes} node process${meta.cfg.steadyNodes > 1 ? "es" : ""})`);
    const ids2 = order.filter((id) => st.some((r) => r.variant === id));
    for (const id of ids2) {
        const r = st.find((x) => x.variant === id);
        const pts = r.samples.map((s) => `${xOf2(s.t).toFixed(1)},${yOf2(s.backlog).toFixed(1)}`).join(" ");
        svg += `<polyline fill="none" stroke="${COLORS[id] || "#555"}" stroke-width="1.4"${dash(id)} points="${pts}"><title>${esc(`${label(id)}: ${Math.round(r.rate)} tasks/s`)}</title></polyline>\n`;
    }

    // Legend.
    const ids = order.filter((id) => ids1.includes(id) || ids2.includes(id));
    let ly = 70;
    svg += `<text x="${right + 14}" y="${ly - 10}" font-weight="bold">side</text>\n`;
    for (const id of ids) {
        svg += `<line x1="${right + 14}" y1="${ly - 4}" x2="${right + 38}" y2="${ly - 4}" stroke="${COLORS[id] || "#555"}" stroke-width="3"${dash(id)}/>\n`;
        const v = meta.variants.find((x) => x.id === id);
        const lines = v.legend || [v.label, v.config];
        lines.forEach((s, i) => (svg += `<text x="${right + 44}" y="${ly + i * 14}"${i ? ' font-size="10" fill="#555"' : ""}>${esc(s)}</text>\n`));
        ly += 16 + lines.length * 14;
    }
    svg += `<text x="${left}" y="${H - 30}" fill="#555">${esc("Same server, same run, sides alternating; figures from a shared 2-vCPU VM (noisy): compare ratios.")}</text>\n`;
    svg += "</svg>\n";
    fs.writeFileSync(file, svg);
}
