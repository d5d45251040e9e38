#!/usr/bin/env python3
"""Writes the seed corpus in fuzz/corpus/{config,ops}/: small inputs that each cover one valid
config or one kind of operation, so a short CI run starts from every code path instead of
having to discover the input formats. The formats are the ones fuzz_config.cpp and fuzz_ops.cpp
parse; rerun this after changing either (python3 fuzz/make_seeds.py)."""
import math
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent / "corpus"

# ---- fuzz_config.cpp: one tagged value per Config field, then the tasks -------------------------
DEFAULT = b"\x00"                       # tag % 4 == 0: the field's default


def u32(v):                              # tag 2: four raw bytes
    return b"\x02" + struct.pack("<I", v)


def dur(v, unit):                        # tag 1: a signed byte times ns / us / ms / s
    return bytes([1 + 4 * ["ns", "us", "ms", "s"].index(unit), v & 0xFF])


def dur_ns(v):                          # tag 2: eight raw bytes
    return b"\x02" + struct.pack("<q", v)


def dbl(x):                              # tag 2: eight raw bytes
    return b"\x02" + struct.pack("<d", x)


FIELDS = ["min_workers", "max_workers", "queue_capacity", "soft_limit_ratio", "weight_high",
          "weight_normal", "weight_low", "max_wait", "dispatch_interval", "watchdog_interval",
          "metrics_window", "controller_interval", "drain_time", "max_step_up", "max_step_down",
          "scale_out_when_saturated", "cpu_ceiling", "retry_base_delay", "retry_jitter",
          "retry_max", "shutdown_grace", "dead_letter_capacity", "history_capacity"]


def config(tasks=(), **fields):
    """tasks: (priority 0..2, fails) pairs run when the config is valid."""
    unknown = set(fields) - set(FIELDS)
    assert not unknown, unknown
    out = b"".join(fields.get(f, DEFAULT) for f in FIELDS)
    out += bytes([max(len(tasks), 1) - 1])
    for prio, fails in tasks:
        out += bytes([prio, 0 if fails else 1])
    return out


FAST = dict(dispatch_interval=dur(1, "ms"), watchdog_interval=dur(1, "ms"),
            controller_interval=dur(2, "ms"), retry_base_delay=dur(1, "ms"),
            retry_jitter=dur(0, "ms"), shutdown_grace=dur(2, "s"))

CONFIG_SEEDS = {
    "defaults": config([(0, False), (1, False), (2, False)]),
    "small-fast": config([(0, False), (1, True), (2, False), (1, False), (0, True), (2, False)],
                         min_workers=u32(1), max_workers=u32(2), queue_capacity=u32(4),
                         soft_limit_ratio=dbl(0.5), metrics_window=dur(1, "s"),
                         retry_max=u32(0), **FAST),
    "tiny-queue-edges": config([(0, False)] * 8, min_workers=u32(1), max_workers=u32(1),
                               queue_capacity=u32(1), soft_limit_ratio=dbl(1.0),
                               weight_high=u32(1000), weight_normal=u32(1), weight_low=u32(1000),
                               dead_letter_capacity=u32(0), history_capacity=u32(0), **FAST),
    "starvation-budget": config([(2, False), (2, False), (0, False), (0, False)],
                                max_wait=dur(1, "ns"), max_step_up=u32(1), max_step_down=u32(1),
                                scale_out_when_saturated=b"\x01", cpu_ceiling=dbl(1.0),
                                drain_time=dur(1, "ns"), **FAST),
    "invalid-max-workers-zero": config(max_workers=u32(0)),
    "invalid-min-over-max": config(min_workers=u32(9), max_workers=u32(8)),
    "invalid-soft-limit-nan": config(soft_limit_ratio=dbl(math.nan)),
    "invalid-watchdog-below-dispatch": config(dispatch_interval=dur(10, "ms"),
                                              watchdog_interval=dur(1, "ms")),
    "invalid-metrics-window": config(metrics_window=dur_ns(3601 * 10**9)),
    "invalid-retry-max": config(retry_max=u32(101)),
    "invalid-negative-jitter": config(retry_jitter=dur(-1, "ms")),
    "invalid-queue-capacity-huge": config(queue_capacity=u32((1 << 24) + 1)),
}

# ---- fuzz_ops.cpp: a header byte, then operations -------------------------------------------
SUBMIT, POST, CANCEL, QUERY, LIMIT, BREAKER, REPLAY, DISCARD, SHUTDOWN, SLEEP, METRICS = (
    0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
KINDS = ["value", "throw_std", "throw_int", "permanent", "heartbeat", "timeout", "stoppable",
         "flaky"]
HIST_LARGE, FOUR_WORKERS, SOFT_075, DL_64, SCALE_OUT, FAST_CONTROLLER = 1, 2, 4, 32, 64, 128


def header(*flags, retry_max=0):
    return bytes([sum(flags) | (retry_max << 3)])


def submit(kind, prio=1, group=0, retries=0, long_timeout=False, big=False, value=7,
           invalid=None, long_name=False, op=SUBMIT):
    """retries: index into {-1 (Config::retry_max), 0, 1, 2}; invalid: 0..5 breaks one option."""
    o = prio | group << 2 | retries << 4 | (64 if long_timeout else 0) | (128 if big else 0)
    extra = (8 if long_name else 0) | ((7 | invalid << 4) if invalid is not None else 0)
    return bytes([op, KINDS.index(kind), o, extra, value])


def post(kind, **kw):
    return submit(kind, op=POST, **kw)


def op(code, *args):
    return bytes([code, *args])


def breaker(group, on, ratio=0, attempts=0, cooldown=1, probes=1):
    """ratio: {0.5, 1, 0.01, 0*, 1.5*, NaN*}; attempts: {1, 2, 4, 0*}; cooldown: {0, 1ms, 2ms, -1ns*}
    (* invalid)."""
    return op(BREAKER, group | (2 if on else 0),
              ratio | attempts << 3 | cooldown << 5 | (probes - 1) << 7)


OPS_SEEDS = {
    "every-body-kind": header(HIST_LARGE, FOUR_WORKERS, DL_64, retry_max=1)
    + b"".join(submit(k, prio=i % 3, value=i + 1) for i, k in enumerate(KINDS))
    + op(METRICS),
    "posts-and-big-bodies": header(HIST_LARGE, DL_64)
    + post("value", big=True) + post("throw_std", retries=1) + submit("heartbeat", big=True)
    + post("flaky", retries=2, big=True) + op(SLEEP, 200) + op(QUERY, 0) + op(QUERY, 3),
    "cancel-queued-and-running": header(HIST_LARGE)
    + submit("stoppable") + submit("value", prio=2) + submit("stoppable", big=True)
    + op(CANCEL, 1) + op(SLEEP, 20) + op(CANCEL, 0) + op(CANCEL, 2) + op(CANCEL, 255)
    + op(QUERY, 0) + op(QUERY, 255),
    "dead-letters-replay-discard": header(HIST_LARGE, DL_64)
    + submit("throw_std", retries=1) + post("permanent", big=True) + submit("throw_int")
    + submit("flaky", retries=1) + op(SLEEP, 250) + op(SLEEP, 250)
    + op(REPLAY, 1) + op(REPLAY, 1) + op(DISCARD, 1) + op(SLEEP, 250) + op(REPLAY, 0)
    + op(DISCARD, 0) + op(METRICS),
    "small-dead-letter-list": header(FOUR_WORKERS)
    + b"".join(submit("permanent", value=i) for i in range(5)) + op(SLEEP, 250)
    + op(REPLAY, 1) + op(DISCARD, 2) + op(REPLAY, 0) + op(METRICS),
    "group-limits": header(HIST_LARGE, FOUR_WORKERS, FAST_CONTROLLER)
    + op(LIMIT, 0 | 1 << 1) + b"".join(submit("stoppable", group=1) for _ in range(4))
    + submit("value", group=2) + op(LIMIT, 0 | 3 << 1) + op(LIMIT, 1 | 1 << 1)
    + op(LIMIT, 0 | 0 << 1) + op(LIMIT, 7 << 3) + op(METRICS),
    "group-breaker": header(HIST_LARGE, DL_64)
    + breaker(0, True, ratio=0, attempts=0, cooldown=1)
    + b"".join(submit("throw_std", group=1) for _ in range(3))
    + submit("value", group=1) + op(SLEEP, 250) + breaker(0, True, ratio=3)
    + breaker(1, True, ratio=1, attempts=1, cooldown=2, probes=2) + submit("flaky", group=2)
    + op(SLEEP, 250) + breaker(0, False) + op(METRICS),
    "shutdown-drain-then-submit": header(HIST_LARGE)
    + submit("value") + post("flaky", retries=1) + submit("throw_std") + op(SHUTDOWN, 0)
    + submit("value") + post("value") + op(REPLAY, 2) + op(CANCEL, 0) + op(QUERY, 1),
    "shutdown-cancel-with-queue": header(HIST_LARGE, retry_max=2)
    + b"".join(submit("stoppable", prio=i % 3) for i in range(6)) + submit("timeout")
    + op(SHUTDOWN, 1) + submit("value", invalid=2) + op(METRICS),
    "backpressure": header(SOFT_075)
    + b"".join(submit("stoppable", prio=2 - (i % 3)) for i in range(12)) + op(METRICS)
    + op(SLEEP, 250) + submit("value", prio=0),
    "invalid-options": header(HIST_LARGE)
    + b"".join(submit("value", invalid=i) for i in range(6)) + submit("value", long_name=True)
    + breaker(1, True, ratio=5) + breaker(1, True, attempts=3) + breaker(1, True, cooldown=3)
    + op(METRICS),
    "timeouts-and-retries": header(HIST_LARGE, FOUR_WORKERS, retry_max=2)
    + submit("timeout") + submit("timeout", retries=1) + post("timeout", retries=0)
    + submit("heartbeat", long_timeout=True) + op(SLEEP, 250) + op(QUERY, 0) + op(CANCEL, 1)
    + op(METRICS),
}


def write(kind, seeds):
    d = ROOT / kind
    d.mkdir(parents=True, exist_ok=True)
    for old in d.iterdir():
        old.unlink()
    for name, data in seeds.items():
        (d / name).write_bytes(data)


write("config", CONFIG_SEEDS)
write("ops", OPS_SEEDS)
