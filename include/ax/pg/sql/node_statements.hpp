// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Every statement ax::pg::Node sends, and one typed C++ function per statement: the node never
// spells SQL, parameter positions or type OIDs itself. The pipelined hot path (claim, ack, fail,
// release, close, renew, maintain: prepared once per link, binary parameters) queues on a
// detail::Pipeline; registration, LISTEN and leaving run blocking on the primary link outside
// pipeline mode. The claim's and the acknowledgement's texts stay in ../schema.hpp beside the
// functions and index they depend on (bench/pg/explain-claim.sh reads them there); the
// functions called here (ax.fail_tasks, ax.close_batch, ax.renew, ax.release, ax.maintain) are
// defined by the migrations in ../schema.hpp.

#include "../detail/pipeline.hpp"
#include "../detail/wire.hpp"
#include "../schema.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ax::pg::sql {

/// The prepared statements' names.
inline constexpr const char* claim_name = "ax_claim";
inline constexpr const char* ack_name = "ax_ack";
inline constexpr const char* fail_name = "ax_fail";
inline constexpr const char* close_name = "ax_close";
inline constexpr const char* renew_name = "ax_renew";
inline constexpr const char* release_name = "ax_release";
inline constexpr const char* maintain_name = "ax_maintain";
inline constexpr const char* ack_result_name = "ax_ack_result";
inline constexpr const char* snooze_name = "ax_snooze";

inline constexpr const char* fail_sql = "SELECT ax.fail_tasks($1, $2, $3, $4, $5)";
inline constexpr const char* close_sql = "SELECT ax.close_batch($1, $2, $3, $4)";
inline constexpr const char* renew_sql = "SELECT ax.renew($1, $2, $3)";
inline constexpr const char* release_sql = "SELECT ax.release($1, $2)";
inline constexpr const char* snooze_sql = "SELECT ax.snooze_tasks($1, $2, $3, $4)";
inline constexpr const char* maintain_sql =
    "SELECT got_lock, reclaimed_batches, reclaimed_nodes, requeued, dead, pruned, "
    "next_expiry_ms, dead_rows FROM ax.maintain($1, $2)";
inline constexpr const char* register_sql =
    "INSERT INTO ax.nodes (name, kinds, tags, host, pid, lease_until) VALUES "
    "($1, $2, $3, $4, $5, now() + $6::int8 * interval '1 millisecond') RETURNING id";
inline constexpr const char* leave_sql = "DELETE FROM ax.nodes WHERE id = $1 AND NOT EXISTS "
                                         "(SELECT 1 FROM ax.batches WHERE node_id = $1)";
/// SKIP_LOCKED: when another node's (or autovacuum's) pass is running, skip this one.
/// TRUNCATE false: giving the file's empty tail back needs an exclusive lock that a busy
/// queue's claims never leave free (the pass would retry for seconds); autovacuum's passes
/// still truncate.
inline constexpr const char* vacuum_tasks_sql = "VACUUM (SKIP_LOCKED, TRUNCATE false) ax.tasks";

/// Prepares the hot-path statements on a link (before it enters pipeline mode).
inline void prepare_node_statements(detail::Pipeline& p) {
    // The claim's first five executions would otherwise be planned for their parameters,
    // where PostgreSQL (no statistics for `tags <@`) guesses ~0.5 % of rows match and
    // chooses a full scan and sort: 130-170 ms per claim instead of ~8 ms with the generic
    // plan that uses the partial claim index (bench/pg/explain-claim.sh). The node's
    // statements are all prepared and index-driven, so the generic plan is the right one
    // from the first call.
    p.connection().exec("SET plan_cache_mode = force_generic_plan");
    namespace oid = detail::oid;
    using oid::int4, oid::int8, oid::text_array, oid::int8_array;
    p.prepare(claim_name, detail::claim_sql,
              std::array{int8, text_array, text_array, int8, int8, int8, int8});
    p.prepare(ack_name, detail::ack_sql, std::array{int8, int8_array});
    p.prepare(fail_name, fail_sql,
              std::array{int8, int8_array, text_array, oid::boolean_array, int8_array});
    p.prepare(close_name, close_sql, std::array{int8, int8, int4, int8});
    p.prepare(renew_name, renew_sql, std::array{int8, int8_array, int8});
    p.prepare(release_name, release_sql, std::array{int8, int8_array});
    p.prepare(maintain_name, maintain_sql, std::array{int8, int4});
    p.prepare(ack_result_name, detail::ack_result_sql,
              std::array{int8, int8_array, oid::bytea_array});
    p.prepare(snooze_name, snooze_sql, std::array{int8, int8_array, int8_array, int4});
}

// ---------------------------------------------------------------- pipelined (one per step)

/// ax.ack: the tasks `ids` of node `node` (its ID as text) succeeded (or were cancelled).
inline void send_ack(detail::Pipeline& p, const std::string& node, detail::BinaryArray& ids) {
    p.send_prepared(ack_name, detail::Params<2>{}.text(node).array(ids));
}

/// ax_ack_result: the tasks `ids` succeeded with the results `results` (parallel, bytea).
inline void send_ack_result(detail::Pipeline& p, const std::string& node, detail::BinaryArray& ids,
                            detail::BinaryArray& results) {
    p.send_prepared(ack_result_name, detail::Params<3>{}.text(node).array(ids).array(results));
}

/// ax.snooze_tasks: parallel arrays, one element per snoozed task, and the node's bound.
struct SnoozeArgs {
    const std::string& node;
    detail::BinaryArray& ids;      // int8
    detail::BinaryArray& delay_ms; // int8: not claimable before now() + this
    std::uint32_t max_snoozes;     // beyond it the task becomes a dead letter
};
inline void send_snooze(detail::Pipeline& p, const SnoozeArgs& a) {
    const std::string max = std::to_string(a.max_snoozes);
    p.send_prepared(snooze_name,
                    detail::Params<4>{}.text(a.node).array(a.ids).array(a.delay_ms).text(max));
}

/// ax.fail_tasks: parallel arrays, one element per failed task.
struct FailArgs {
    const std::string& node;
    detail::BinaryArray& ids;       // int8
    detail::BinaryArray& errors;    // text
    detail::BinaryArray& permanent; // bool: dead-letter at once
    detail::BinaryArray& delay_ms;  // int8: retry delay
};
inline void send_fail(detail::Pipeline& p, const FailArgs& a) {
    p.send_prepared(fail_name, detail::Params<5>{}
                                   .text(a.node)
                                   .array(a.ids)
                                   .array(a.errors)
                                   .array(a.permanent)
                                   .array(a.delay_ms));
}

/// ax.release: the tasks `ids` go back unstarted (attempt not counted).
inline void send_release(detail::Pipeline& p, const std::string& node, detail::BinaryArray& ids) {
    p.send_prepared(release_name, detail::Params<2>{}.text(node).array(ids));
}

/// ax.close_batch: the batch is done; `size` and `xor_ids` are its checksum.
struct CloseArgs {
    const std::string& node;
    std::int64_t batch;
    std::uint32_t size;
    std::int64_t xor_ids;
};
inline void send_close(detail::Pipeline& p, const CloseArgs& a) {
    const std::string b = std::to_string(a.batch), sz = std::to_string(a.size),
                      x = std::to_string(a.xor_ids);
    p.send_prepared(close_name, detail::Params<4>{}.text(a.node).text(b).text(sz).text(x));
}

/// The claim-and-renew transaction's frame: asynchronous commit (a claim lost in a crash is
/// claimable again after its lease).
inline void send_begin(detail::Pipeline& p) {
    p.send_query("BEGIN");
}
inline void send_async_commit(detail::Pipeline& p) {
    p.send_query("SET LOCAL synchronous_commit TO off");
}
inline void send_commit(detail::Pipeline& p) {
    p.send_query("COMMIT");
}

/// ax.renew: extends the node's and its `batches`' leases; true while the node is registered.
inline void send_renew(detail::Pipeline& p, const std::string& node, detail::BinaryArray& batches,
                       std::int64_t lease_ms) {
    const std::string lease = std::to_string(lease_ms);
    p.send_prepared(renew_name, detail::Params<3>{}.text(node).array(batches).text(lease));
}

/// The claim: up to quota[p] tasks from lane p of `kinds` whose tags are all in `tags`, as one
/// batch leased for lease_ms. Its rows come back in binary format (ClaimColumn).
struct ClaimArgs {
    std::int64_t node_id;
    detail::BinaryArray& kinds; // text
    detail::BinaryArray& tags;  // text
    std::array<std::uint32_t, 3> quota;
    std::int64_t lease_ms;
};
inline void send_claim(detail::Pipeline& p, const ClaimArgs& a) {
    const auto node = detail::BinaryInt::int8(a.node_id);
    const auto q0 = detail::BinaryInt::int8(a.quota[0]), q1 = detail::BinaryInt::int8(a.quota[1]),
               q2 = detail::BinaryInt::int8(a.quota[2]),
               lease = detail::BinaryInt::int8(a.lease_ms);
    p.send_prepared(claim_name,
                    detail::Params<7>{}
                        .scalar(node)
                        .array(a.kinds)
                        .array(a.tags)
                        .scalar(q0)
                        .scalar(q1)
                        .scalar(q2)
                        .scalar(lease),
                    1);
}
/// The claim's result columns (binary format).
enum ClaimColumn : int {
    claim_id = 0,       // int8
    claim_batch = 1,    // int8
    claim_kind = 2,     // int4: 1-based index into the kinds parameter
    claim_priority = 3, // int2
    claim_attempt = 4,  // int4
    claim_timeout = 5,  // int4 ms
    claim_cancel = 6,   // bool
    claim_waited = 7,   // int8 ms since run_at
    claim_payload = 8   // bytea
};

/// ax.maintain: reclaim expired batches and nodes, prune history (one node at a time: the
/// advisory lock).
inline void send_maintain(detail::Pipeline& p, std::int64_t retention_ms,
                          std::int64_t prune_batch) {
    const std::string ms = std::to_string(retention_ms), lim = std::to_string(prune_batch);
    p.send_prepared(maintain_name, detail::Params<2>{}.text(ms).text(lim));
}
/// What ax.maintain reported.
struct MaintainReport {
    bool got_lock = false;         // this node ran it (the others skipped)
    std::string reclaimed_batches; // '{..}' of the batches reclaimed
    std::string reclaimed_nodes;
    std::int64_t requeued = 0, dead = 0;
    std::optional<std::int64_t> next_expiry_ms; // the earliest running lease ends in
    std::optional<std::int64_t> dead_rows;      // ax.tasks' dead row versions (owner only)
};
inline MaintainReport read_maintain(const detail::Result& r) {
    MaintainReport m;
    m.got_lock = r.boolean(0, 0);
    m.reclaimed_batches = std::string(r.text(0, 1));
    m.reclaimed_nodes = std::string(r.text(0, 2));
    m.requeued = r.null(0, 3) ? 0 : r.int64(0, 3);
    m.dead = r.null(0, 4) ? 0 : r.int64(0, 4);
    if (!r.null(0, 6))
        m.next_expiry_ms = r.int64(0, 6);
    if (!r.null(0, 7))
        m.dead_rows = r.int64(0, 7);
    return m;
}

// ---------------------------------------------------------------- blocking, primary link

/// Renews a registered node after a reconnect: true if the database still has it.
inline bool renew_node(detail::Connection& c, std::int64_t node_id, detail::BinaryArray& batches,
                       std::int64_t lease_ms) {
    const std::string id = std::to_string(node_id), lease = std::to_string(lease_ms);
    const auto p = detail::Params<3>{}.text(id).array(batches).text(lease);
    return c.exec_raw(renew_sql, p.count(), p.values(), p.lengths(), p.formats(), 0).boolean(0, 0);
}

/// Registers a node; returns its ID.
struct RegisterArgs {
    const std::string& name;
    detail::BinaryArray& kinds; // text
    detail::BinaryArray& tags;  // text
    const std::string& host;
    std::int64_t pid;
    std::int64_t lease_ms;
};
inline std::int64_t register_node(detail::Connection& c, const RegisterArgs& a) {
    const std::string pid = std::to_string(a.pid), lease = std::to_string(a.lease_ms);
    const auto p =
        detail::Params<6>{}.text(a.name).array(a.kinds).array(a.tags).text(a.host).text(pid).text(
            lease);
    return c.exec_raw(register_sql, p.count(), p.values(), p.lengths(), p.formats(), 0).int64(0, 0);
}

/// LISTEN ax_wake (new work) and ax_node_<id> (cross-node cancels for this node's tasks).
inline constexpr const char* wake_channel = "ax_wake";
inline void listen_wake(detail::Connection& c) {
    c.exec("LISTEN ax_wake");
}
inline void listen_node(detail::Connection& c, std::int64_t node_id) {
    c.exec(("LISTEN ax_node_" + std::to_string(node_id)).c_str());
}

/// Removes the node's row unless it still holds batches (they are left to their lease).
inline void leave(detail::Connection& c, std::int64_t node_id) {
    const std::string id = std::to_string(node_id);
    c.exec_params(leave_sql, {id.c_str()});
}

} // namespace ax::pg::sql
