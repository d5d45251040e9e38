-- Enqueue ax tasks from psql (or any SQL client) inside the application's own transaction: the
-- order and the task that ships it commit together, or neither exists. Connects where libpq's
-- PG* variables point:  psql -X -q -f examples/producers/enqueue.sql
-- Prints "committed <task id>..." and "rolledback <task id>" (tests/pg/test_pg_sqlenqueue.cpp
-- checks that an ax node runs exactly the committed ones).
\set ON_ERROR_STOP on
CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, item text NOT NULL);

-- Committed: one task with an idempotency key (a retried transaction cannot ship twice), and two
-- more with one call. ax.enqueue returns the task's ID; ax.enqueue_many (ord, id, existed) rows.
BEGIN;
INSERT INTO orders (item) VALUES ('psql: a book') RETURNING id AS order_id \gset
SELECT ax.enqueue(kind => 'ship', payload => convert_to('psql: order ' || :order_id, 'UTF8'),
                  idempotency_key => 'psql-order-' || :order_id,
                  priority => ax.priority('high')) AS task_id \gset
SELECT string_agg(id::text, ' ' ORDER BY ord) AS more_ids
  FROM ax.enqueue_many(kind => ARRAY['ship', 'ship'],
                       payload => ARRAY[convert_to('psql: gift wrap', 'UTF8'),
                                        convert_to('psql: invoice', 'UTF8')]) \gset
COMMIT;
\echo committed :task_id :more_ids

-- Rolled back: the order and its task vanish together (nothing to clean up, no node runs it).
BEGIN;
INSERT INTO orders (item) VALUES ('psql: cancelled') RETURNING id AS order_id \gset
SELECT ax.enqueue(kind => 'ship', payload => convert_to('psql: order ' || :order_id, 'UTF8'))
    AS task_id \gset
ROLLBACK;
\echo rolledback :task_id
