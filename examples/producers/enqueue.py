#!/usr/bin/env python3
"""Enqueue ax tasks from Python (psycopg2, Debian python3-psycopg2) inside the application's own
transaction: the order and the task that ships it commit together, or neither exists.

    python3 examples/producers/enqueue.py ["libpq connection string"]   # default: PG* variables

Prints "committed <task id>..." and "rolledback <task id>" (tests/pg/test_pg_sqlenqueue.cpp
checks that an ax node runs exactly the committed ones)."""
import sys

import psycopg2

conn = psycopg2.connect(sys.argv[1] if len(sys.argv) > 1 else "")
with conn, conn.cursor() as cur:
    cur.execute("CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, item text NOT NULL)")

# Committed: `with conn` is one transaction, committed when the block ends without an exception.
with conn, conn.cursor() as cur:
    cur.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id", ("python: a lamp",))
    order_id = cur.fetchone()[0]
    cur.execute(
        "SELECT ax.enqueue(kind => 'ship', payload => %s, idempotency_key => %s, tags => %s)",
        (f"python: order {order_id}".encode(), f"python-order-{order_id}", []),
    )
    task_id = cur.fetchone()[0]
    # Many at once: arrays, one element per task; (ord, id, existed) rows in input order.
    cur.execute(
        "SELECT id FROM ax.enqueue_many(kind => %s, payload => %s::bytea[]) ORDER BY ord",
        (["ship", "ship"], [b"python: gift wrap", b"python: invoice"]),
    )
    more = [row[0] for row in cur.fetchall()]
print("committed", task_id, *more, flush=True)


class Cancelled(Exception):
    pass


# Rolled back: an exception inside `with conn` rolls the order and its task back together.
rolled_back = None
try:
    with conn, conn.cursor() as cur:
        cur.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id", ("python: cancelled",))
        order_id = cur.fetchone()[0]
        cur.execute("SELECT ax.enqueue(kind => 'ship', payload => %s)",
                    (f"python: order {order_id}".encode(),))
        rolled_back = cur.fetchone()[0]
        raise Cancelled()
except Cancelled:
    pass
print("rolledback", rolled_back, flush=True)
conn.close()
