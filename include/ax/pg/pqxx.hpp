// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Enqueue inside a libpqxx transaction (issue 28): ax::pg::enqueue_on for a pqxx::dbtransaction
// (pqxx::work, robusttransaction, subtransaction), so an application written against libpqxx
// (Debian libpqxx-dev) enqueues in the transaction that writes its own rows. Only this header
// and the ax::pg_pqxx CMake target (built and installed when libpqxx is found;
// find_package(ax CONFIG COMPONENTS pg_pqxx)) know libpqxx: ax::pg itself never needs it.
//
// libpqxx does not hand out its libpq connection, so this adapter runs Client::enqueue_many's
// statements (sql/enqueue.hpp, the same validation and idempotency arbiter) through the
// transaction's public exec_params with text-format array parameters, where ax::pg::enqueue_on
// for a PGconn* sends binary arrays or a COPY: fine for the tens of tasks a transaction
// enqueues; a bulk load of many thousands belongs to Client::enqueue_many. Tested with libpqxx
// 6.4 (Debian bookworm); exec_params is in every 6.x and 7.x release.

#include "enqueue_on.hpp"
#include "sql/enqueue.hpp"
#include "types.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <pqxx/pqxx>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ax::pg {
namespace detail {

/// One array parameter in PostgreSQL's text input format ('{"a","b",NULL}'), built element by
/// element: strings double-quoted with '"' and '\' escaped, bytea as "\\x<hex>".
class TextArray {
  public:
    TextArray() { clear(); }
    void clear() {
        s_.assign(1, '{');
        n_ = 0;
    }
    void add_null() {
        sep();
        s_ += "NULL";
    }
    void add_int(std::int64_t v) {
        sep();
        s_ += std::to_string(v);
    }
    void add_text(std::string_view v) {
        sep();
        s_ += '"';
        for (const char ch : v) {
            if (ch == '"' || ch == '\\')
                s_ += '\\';
            s_ += ch;
        }
        s_ += '"';
    }
    void add_bytea(std::string_view v) {
        static constexpr char hex[] = "0123456789abcdef";
        sep();
        s_ += "\"\\\\x";
        for (const char ch : v) {
            const auto b = static_cast<unsigned char>(ch);
            s_ += hex[b >> 4];
            s_ += hex[b & 15];
        }
        s_ += '"';
    }
    /// The literal (closed; adding more afterwards is not allowed until clear()).
    [[nodiscard]] std::string str() const { return s_ + '}'; }

  private:
    void sep() {
        if (n_++ != 0)
            s_ += ',';
    }
    std::string s_;
    std::size_t n_ = 0;
};

} // namespace detail

/// Enqueues `tasks` inside the libpqxx transaction `tx` (never commits or aborts it): they
/// become claimable when the application commits `tx`, and vanish if it aborts, together with
/// its own writes; the wake notification to idle nodes goes at commit. Same rules, results and
/// errors as enqueue_on for a PGconn* (options.max_payload_bytes applies; copy_min_tasks does
/// not: no COPY here): std::invalid_argument naming the first bad task before anything is sent;
/// a server error is libpqxx's exception, and `tx` is then failed (abort it). A
/// pqxx::nontransaction is not accepted (not a dbtransaction): outside a transaction use
/// Client::enqueue_many.
inline std::vector<Enqueued> enqueue_on(pqxx::dbtransaction& tx, std::span<const NewTask> tasks,
                                        const EnqueueOnOptions& options = {}) {
    if (tasks.empty())
        return {};
    if (options.max_payload_bytes > (std::size_t{64} << 20))
        throw std::invalid_argument("ax::pg::EnqueueOnOptions: max_payload_bytes = " +
                                    std::to_string(options.max_payload_bytes) +
                                    ": must be at most 64 MiB");
    const sql::TaskCall call =
        sql::validate_tasks(tasks, options.max_payload_bytes, std::chrono::system_clock::now());
    detail::TextArray kind, payload, priority, timeout_ms, max_attempts, delay_ms, idem_key, tags,
        run_at_us, unique_for_ms, unique_states, grp, grp_key;
    std::string joined;
    const bool grouped =
        std::any_of(tasks.begin(), tasks.end(), [](const NewTask& t) { return !t.group.empty(); });
    const bool timed = std::any_of(tasks.begin(), tasks.end(),
                                   [](const NewTask& t) { return t.run_at.has_value(); });
    // As sql::EnqueueColumns: the unique columns are sent empty when no task sets them.
    const bool windowed = std::any_of(tasks.begin(), tasks.end(),
                                      [](const NewTask& t) { return t.unique_for.count() != 0; });
    const bool stated = std::any_of(tasks.begin(), tasks.end(), [](const NewTask& t) {
        return t.unique_states != UniqueStates::all;
    });
    for (const NewTask& t : tasks) {
        kind.add_text(t.kind);
        payload.add_bytea(t.payload);
        priority.add_int(static_cast<std::int64_t>(t.priority));
        timeout_ms.add_int(t.timeout.count());
        max_attempts.add_int(t.max_attempts);
        delay_ms.add_int(t.delay.count());
        if (t.idempotency_key.empty())
            idem_key.add_null();
        else
            idem_key.add_text(t.idempotency_key);
        joined.clear();
        for (std::size_t k = 0; k < t.tags.size(); ++k) {
            if (k != 0)
                joined += ',';
            joined += t.tags[k];
        }
        tags.add_text(joined);
        if (timed) {
            if (t.run_at)
                run_at_us.add_int(std::chrono::duration_cast<std::chrono::microseconds>(
                                      t.run_at->time_since_epoch())
                                      .count());
            else
                run_at_us.add_null();
        }
        if (windowed)
            unique_for_ms.add_int(t.unique_for.count());
        if (stated)
            unique_states.add_int(static_cast<std::int64_t>(t.unique_states));
        if (grouped) {
            if (t.group.empty())
                grp.add_null();
            else
                grp.add_text(t.group);
            grp_key.add_text(t.group_key);
        }
    }
    const std::size_t n = tasks.size();
    std::vector<Enqueued> out;
    out.reserve(n);
    if (call.keyed || call.grouped) {
        const pqxx::result r = tx.exec_params(
            sql::enqueue_keyed_sql, kind.str(), payload.str(), priority.str(), timeout_ms.str(),
            max_attempts.str(), delay_ms.str(), idem_key.str(), tags.str(), run_at_us.str(),
            unique_for_ms.str(), unique_states.str(), grp.str(), grp_key.str());
        if (r.size() != n)
            throw Error("ax::pg: enqueue returned " + std::to_string(r.size()) + " rows for " +
                        std::to_string(n) + " tasks");
        for (const auto& row : r)
            out.push_back(Enqueued{row[1].as<std::int64_t>(), row[2].as<bool>()});
        return out;
    }
    const pqxx::result r = tx.exec_params(sql::enqueue_unkeyed_sql, kind.str(), payload.str(),
                                          priority.str(), timeout_ms.str(), max_attempts.str(),
                                          delay_ms.str(), tags.str(), run_at_us.str());
    // One row: the IDs as an int8[] literal, '{7,8,9}'; ascending is input order (see
    // sql::enqueue_unkeyed_sql).
    const std::string ids = r.size() == 1 && !r[0][0].is_null() ? r[0][0].c_str() : "";
    std::int64_t v = 0;
    bool in_number = false;
    for (const char ch : ids) {
        if (ch >= '0' && ch <= '9') {
            v = v * 10 + (ch - '0');
            in_number = true;
        } else if (in_number) {
            out.push_back(Enqueued{v, false});
            v = 0;
            in_number = false;
        }
    }
    if (out.size() != n)
        throw Error("ax::pg: enqueue returned " + std::to_string(out.size()) + " IDs for " +
                    std::to_string(n) + " tasks");
    std::sort(out.begin(), out.end(),
              [](const Enqueued& a, const Enqueued& b) { return a.id < b.id; });
    return out;
}

/// Enqueues one task inside the libpqxx transaction `tx`; see the overload for a span.
inline Enqueued enqueue_on(pqxx::dbtransaction& tx, const NewTask& task,
                           const EnqueueOnOptions& options = {}) {
    return enqueue_on(tx, std::span(&task, 1), options).at(0);
}

} // namespace ax::pg
