// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Enqueue inside the application's own transaction (issue 28): ax::pg::enqueue_on runs
// Client::enqueue_many's statements on a libpq connection the application holds, inside the
// transaction it has open, so the tasks commit or roll back with the application's own writes
// (the "transactional outbox" without an outbox). The libpqxx adapter is ax/pg/pqxx.hpp; other
// languages call the SQL API (ax.enqueue, docs/distributed.md).

#include "connection.hpp"
#include "sql/enqueue.hpp"
#include "types.hpp"

#include <cstddef>
#include <libpq-fe.h>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace ax::pg {

/// enqueue_on's knobs (ClientOptions' enqueue ones: the same defaults and trade-offs).
struct EnqueueOnOptions {
    /// Largest payload accepted (default 1 MiB, at most 64 MiB); larger is refused with
    /// std::invalid_argument before anything is sent. Raising it costs memory on every node that
    /// claims such tasks.
    std::size_t max_payload_bytes = std::size_t{1} << 20;
    /// Calls of at least this many tasks (default 128; 0: never) without keys, delays or run_at
    /// times go by binary COPY: about half the server's CPU per task, two more round trips.
    std::size_t copy_min_tasks = 128;
};

/// Enqueues `tasks` on `conn`, a connection the application owns, inside the transaction block
/// it has open (after its BEGIN, before its COMMIT): they become claimable when the application
/// commits, and vanish with a rollback, together with its own writes; the wake notification to
/// idle nodes is delivered by PostgreSQL at commit. Never begins, commits or rolls back, and
/// leaves the connection's settings alone. Returns the IDs in input order (Enqueued::existed for
/// an idempotency key already taken: a key taken by another transaction still open makes this
/// call wait for it, as ax.idem_keys' row is the one arbiter; under REPEATABLE READ or
/// SERIALIZABLE such a race ends in a serialization failure, SQLSTATE 40001: retry the
/// transaction).
///
/// Refuses with std::logic_error, sending nothing, a connection that is not idle inside a
/// transaction block (PQtransactionStatus is not PQTRANS_INTRANS): outside a block each
/// statement would commit on its own, which is Client::enqueue_many's job, not a transactional
/// enqueue's; a failed block (PQTRANS_INERROR) must be rolled back first; a busy one
/// (PQTRANS_ACTIVE) or one in pipeline mode cannot take a statement now. Throws
/// std::invalid_argument naming the first bad task (Client's rules, nothing sent), ConnectionError
/// for a broken connection, Error when the server refuses (the application's transaction is then
/// failed: roll it back). The schema version is not checked (no statement of the application's
/// is spent on it): run Client::migrate() or `ax-pg migrate` at deployment.
inline std::vector<Enqueued> enqueue_on(PGconn* conn, std::span<const NewTask> tasks,
                                        const EnqueueOnOptions& options = {}) {
    if (conn == nullptr || PQstatus(conn) != CONNECTION_OK)
        throw ConnectionError("ax::pg::enqueue_on: the connection is not open");
    if (options.max_payload_bytes > (std::size_t{64} << 20))
        throw std::invalid_argument("ax::pg::EnqueueOnOptions: max_payload_bytes = " +
                                    std::to_string(options.max_payload_bytes) +
                                    ": must be at most 64 MiB");
    switch (PQtransactionStatus(conn)) {
    case PQTRANS_INTRANS:
        break;
    case PQTRANS_IDLE:
        throw std::logic_error("ax::pg::enqueue_on: the connection is not in a transaction block; "
                               "run BEGIN first (or use Client::enqueue_many, which commits each "
                               "call by itself)");
    case PQTRANS_INERROR:
        throw std::logic_error("ax::pg::enqueue_on: the connection's transaction has failed; roll "
                               "it back first");
    case PQTRANS_ACTIVE:
        throw std::logic_error(
            "ax::pg::enqueue_on: the connection is busy with a command; collect its results first");
    default:
        throw ConnectionError("ax::pg::enqueue_on: the connection's state is unknown (broken?)");
    }
#ifdef LIBPQ_HAS_PIPELINING
    if (PQpipelineStatus(conn) != PQ_PIPELINE_OFF)
        throw std::logic_error("ax::pg::enqueue_on: the connection is in pipeline mode; leave it "
                               "first");
#endif
    // The statements run through detail::Connection's checks on the borrowed handle, which is
    // released (never closed) however the call ends.
    struct Borrowed {
        detail::Connection c;
        ~Borrowed() { (void)c.release(); }
    } borrowed{detail::Connection::adopt(conn)};
    std::string copy_buf;
    return sql::enqueue_tasks(borrowed.c, tasks, options.max_payload_bytes, options.copy_min_tasks,
                              copy_buf);
}

/// Enqueues one task on the application's connection, inside its open transaction; see the
/// overload for a span.
inline Enqueued enqueue_on(PGconn* conn, const NewTask& task,
                           const EnqueueOnOptions& options = {}) {
    return enqueue_on(conn, std::span(&task, 1), options).at(0);
}

} // namespace ax::pg
