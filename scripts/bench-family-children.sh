#!/bin/bash
# Alternates ax_thumbnails children on one generated family workload (issue 33) and prints each
# side's median and min - max: total seconds, the ratio to the first side in the same round,
# pushbacks, peak workers, thread-seconds, context switches and CPU seconds (GNU time).
#
#   scripts/bench-family-children.sh ROUNDS gen-<seed> SIDE...
#   SIDE = label,binary,strategy[,VAR=value ...]   (the first SIDE is the base of the ratios)
#
# e.g. scripts/bench-family-children.sh 20 gen-10 fixed4,build/default/bench/ax_thumbnails,fixed4 \
#        ax,build/default/bench/ax_thumbnails,ax ax-wait,/tmp/old/ax_thumbnails,ax,AX_BENCH_PRODUCER=wait
# The children get a fixed calibration (FRESH_NS_PER_PX, SMALL_CALL_S; defaults 6.12 ns/px and
# 3.3 us, the quiet run's) so that every side runs the same tasks. Needs /usr/bin/time.
set -euo pipefail
rounds=$1
workload=$2
shift 2
fresh=${FRESH_NS_PER_PX:-6.12}
small=${SMALL_CALL_S:-3.3e-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
labels=()
for side in "$@"; do labels+=("${side%%,*}"); done
for r in $(seq 1 "$rounds"); do
    for side in "$@"; do
        IFS=, read -ra f <<<"$side"
        env "${f[@]:3}" /usr/bin/time -o "$tmp/time" \
            -f "ctx_invol=%c ctx_vol=%w user=%U sys=%S" "${f[1]}" --child "${f[2]}" \
            --workload "$workload" --family-target-s 0.5 --fresh-ns-per-px "$fresh" \
            --small-call-s "$small" >"$tmp/out"
        echo "$r ${f[0]} $(head -1 "$tmp/out") $(cat "$tmp/time")" >>"$tmp/runs"
    done
done
python3 - "$tmp/runs" "${labels[@]}" <<'PY'
import statistics as st
import sys

runs, labels = sys.argv[1], sys.argv[2:]
rows, rounds = {}, {}
for line in open(runs):
    p = line.split()
    kv = dict(x.split("=", 1) for x in p[2:] if "=" in x)
    rows.setdefault(p[1], []).append(kv)
    rounds.setdefault(p[0], {})[p[1]] = kv
base = labels[0]


def cell(values, fmt):
    return f"{fmt.format(st.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


for lab in labels:
    rs = rows[lab]
    col = lambda k, fmt="{:.3f}": cell([float(r[k]) for r in rs], fmt)
    ratio = [float(d[lab]["total_s"]) / float(d[base]["total_s"]) for d in rounds.values()]
    cpu = [float(r["user"]) + float(r["sys"]) for r in rs]
    print(f"{lab:12s} n={len(rs)} total {col('total_s')} /{base} {cell(ratio, '{:.3f}')} "
          f"push {col('pushbacks', '{:.0f}')} peak {col('peak_workers', '{:.0f}')} "
          f"thr-s {col('thread_s')} invol {col('ctx_invol', '{:.0f}')} "
          f"vol {col('ctx_vol', '{:.0f}')} cpu_s {st.median(cpu):.3f}")
PY
