// Enqueue ax tasks from Node.js (the `pg` package from npm) inside the application's own
// transaction: the order and the task that ships it commit together, or neither exists.
//   node examples/producers/enqueue.js        (connects where libpq's PG* variables point)
// Prints "committed <task id>..." and "rolledback <task id>" (tests/pg/test_pg_sqlenqueue.cpp
// checks that an ax node runs exactly the committed ones). scripts/producers-deps.sh installs
// `pg` into a build folder; run with NODE_PATH=<that folder>/node_modules.
'use strict';
const { Client } = require('pg');

async function main() {
    const db = new Client();
    await db.connect();
    try {
        await db.query('CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, item text NOT NULL)');

        // Committed: BEGIN ... COMMIT on one client (a pool's client for the whole transaction).
        await db.query('BEGIN');
        const order = await db.query('INSERT INTO orders (item) VALUES ($1) RETURNING id', ['node: a kettle']);
        const orderId = order.rows[0].id;
        const task = await db.query(
            "SELECT ax.enqueue(kind => 'ship', payload => $1, idempotency_key => $2, " +
                "run_at => now() - interval '1 second') AS id",
            [Buffer.from(`node: order ${orderId}`), `node-order-${orderId}`]);
        const more = await db.query(
            'SELECT id FROM ax.enqueue_many(kind => $1, payload => $2) ORDER BY ord',
            [['ship', 'ship'], [Buffer.from('node: gift wrap'), Buffer.from('node: invoice')]]);
        await db.query('COMMIT');
        console.log('committed', task.rows[0].id, ...more.rows.map((r) => r.id));

        // Rolled back: the order and its task vanish together.
        await db.query('BEGIN');
        const cancelled = await db.query('INSERT INTO orders (item) VALUES ($1) RETURNING id', ['node: cancelled']);
        const gone = await db.query("SELECT ax.enqueue(kind => 'ship', payload => $1) AS id",
                                    [Buffer.from(`node: order ${cancelled.rows[0].id}`)]);
        await db.query('ROLLBACK');
        console.log('rolledback', gone.rows[0].id);
    } finally {
        await db.end();
    }
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
