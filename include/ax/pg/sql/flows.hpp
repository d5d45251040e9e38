// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The statements of workflows (Client::enqueue_flow, flows, flow_tasks, parent_results), one
// typed function each, over the functions migration 10 defines (ax.enqueue_flow_arrays,
// ax.flow_progress, ax.flow_task_states, ax.flow_parent_results). Not API: Client is.

#include "../connection.hpp"
#include "../detail/wire.hpp"
#include "../types.hpp"
#include "client.hpp"
#include "enqueue.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ax::pg::sql {

/// ax.enqueue_flow_arrays with every argument a binary parameter; rows: ord, id, flow ID.
inline constexpr const char* enqueue_flow_sql =
    "SELECT ord, id, flow_id FROM ax.enqueue_flow_arrays($1::text, $2::text[], $3::text[], "
    "$4::bytea[], $5::int4[], $6::text[], $7::int4[], $8::int4[], $9::bool[], $10::int4[], "
    "$11::text[], $12::text[], $13::text[])";

/// Validates `tasks` as far as this side can (the NewTask rules, and what a flow task may not
/// have), sends the flow in one statement and returns the IDs in input order. The database
/// checks names, dependencies and cycles (SQLSTATE 22023); its refusal comes back as
/// std::invalid_argument with its message, nothing enqueued.
inline FlowEnqueued enqueue_flow(detail::Connection& c, std::string_view name,
                                 std::span<const FlowTask> tasks, std::size_t max_payload_bytes) {
    if (name.empty() || name.size() > 200)
        throw std::invalid_argument("ax::pg::Client::enqueue_flow: name = " + quoted_prefix(name) +
                                    ": must be 1..200 bytes");
    if (tasks.empty() || tasks.size() > 100000)
        throw std::invalid_argument(
            "ax::pg::Client::enqueue_flow: " + std::to_string(tasks.size()) +
            " tasks: a flow has 1..100000 tasks");
    std::vector<NewTask> plain;
    plain.reserve(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        const NewTask& t = tasks[i].task;
        if (t.delay.count() != 0 || t.run_at || !t.idempotency_key.empty())
            throw std::invalid_argument(
                "ax::pg::Client::enqueue_flow: task #" + std::to_string(i) + " (" +
                quoted_prefix(tasks[i].name) +
                "): a flow task takes no delay, run_at or idempotency_key (it runs when its "
                "dependencies let it)");
        plain.push_back(t);
    }
    validate_tasks(plain, max_payload_bytes, std::chrono::system_clock::now());

    using detail::BinaryArray;
    BinaryArray names(BinaryArray::text_oid), kinds(BinaryArray::text_oid),
        payloads(BinaryArray::bytea_oid), prios(BinaryArray::int4_oid), tags(BinaryArray::text_oid),
        attempts(BinaryArray::int4_oid), timeouts(BinaryArray::int4_oid),
        anyway(BinaryArray::bool_oid), dep_task(BinaryArray::int4_oid),
        dep_on(BinaryArray::text_oid), groups(BinaryArray::text_oid),
        group_keys(BinaryArray::text_oid);
    std::string joined;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        const FlowTask& f = tasks[i];
        names.add_bytes(f.name);
        kinds.add_bytes(f.task.kind);
        payloads.add_bytes(f.task.payload);
        prios.add_int32(static_cast<std::int32_t>(f.task.priority));
        joined.clear();
        for (std::string_view t : f.task.tags) {
            if (!joined.empty())
                joined += ',';
            joined += t;
        }
        tags.add_bytes(joined);
        attempts.add_int32(f.task.max_attempts);
        timeouts.add_int32(static_cast<std::int32_t>(f.task.timeout.count()));
        anyway.add_bool(f.run_anyway);
        groups.add_bytes(f.task.group); // '' is none, as in ax.enqueue
        group_keys.add_bytes(f.task.group_key);
        for (std::string_view d : f.depends_on) {
            dep_task.add_int32(static_cast<std::int32_t>(i + 1));
            dep_on.add_bytes(d);
        }
    }
    const std::string_view params[] = {
        name,           names.bytes(),    kinds.bytes(),     payloads.bytes(), prios.bytes(),
        tags.bytes(),   attempts.bytes(), timeouts.bytes(),  anyway.bytes(),   dep_task.bytes(),
        dep_on.bytes(), groups.bytes(),   group_keys.bytes()};
    detail::Result r = [&] {
        try {
            return c.exec_binary(enqueue_flow_sql, params, detail::Format::text);
        } catch (const ConnectionError&) {
            throw;
        } catch (const Error& e) {
            // The database's refusal of the graph (SQLSTATE 22023): bad input, nothing enqueued.
            const std::string_view what = e.what();
            const auto at = what.find("ax.enqueue_flow: ");
            if (at == std::string_view::npos)
                throw;
            auto end = what.find(" (in: ", at);
            throw std::invalid_argument("ax::pg::Client::enqueue_flow: " +
                                        std::string(what.substr(at + 17, end - at - 17)));
        }
    }();
    FlowEnqueued out;
    out.ids.resize(tasks.size());
    for (int row = 0; row < r.rows(); ++row) {
        out.ids.at(static_cast<std::size_t>(r.int64(row, 0) - 1)) = r.int64(row, 1);
        out.flow_id = r.int64(row, 2);
    }
    return out;
}

/// The newest `limit` flows' progress, or flow `id`'s alone.
inline std::vector<FlowProgress> flows(detail::Connection& c, std::optional<std::int64_t> id,
                                       std::size_t limit) {
    const std::string fid = id ? std::to_string(*id) : std::string(), lim = std::to_string(limit);
    detail::Result r = c.exec_params(
        "SELECT flow_id, name, extract(epoch FROM created_at)::float8, tasks, waiting, pending, "
        "running, succeeded, cancelled, dead_lettered, other, finished "
        "FROM ax.flow_progress($1::int8, $2::int4)",
        {id ? fid.c_str() : nullptr, lim.c_str()});
    std::vector<FlowProgress> out;
    for (int i = 0; i < r.rows(); ++i) {
        FlowProgress f;
        f.id = r.int64(i, 0);
        f.name = std::string(r.text(i, 1));
        f.created_at_s = r.float8(i, 2);
        f.tasks = r.int64(i, 3);
        f.waiting = r.int64(i, 4);
        f.pending = r.int64(i, 5);
        f.running = r.int64(i, 6);
        f.succeeded = r.int64(i, 7);
        f.cancelled = r.int64(i, 8);
        f.dead_lettered = r.int64(i, 9);
        f.other = r.int64(i, 10);
        f.finished = r.boolean(i, 11);
        out.push_back(std::move(f));
    }
    return out;
}

/// Every task of flow `id`, in ID order (empty for an unknown flow).
inline std::vector<FlowTaskState> flow_tasks(detail::Connection& c, std::int64_t id) {
    const std::string fid = std::to_string(id);
    detail::Result r = c.exec_params("SELECT task_id, name, state, coalesce(reason, ''), "
                                     "array_to_json(depends_on)::text "
                                     "FROM ax.flow_task_states($1::int8)",
                                     {fid.c_str()});
    std::vector<FlowTaskState> out;
    for (int i = 0; i < r.rows(); ++i) {
        FlowTaskState t;
        t.id = r.int64(i, 0);
        t.name = std::string(r.text(i, 1));
        t.state = std::string(r.text(i, 2));
        t.reason = std::string(r.text(i, 3));
        t.depends_on = detail::parse_json_strings(r.text(i, 4));
        out.push_back(std::move(t));
    }
    return out;
}

/// Task `id`'s dependencies' outcomes in the order of the flow's task list (binary: results keep
/// their bytes).
inline std::vector<ParentResult> parent_results(detail::Connection& c, std::int64_t id) {
    const std::string tid = std::to_string(id);
    const char* values[] = {tid.c_str()};
    detail::Result r = c.exec_raw("SELECT name, id, state, attempts, result, error "
                                  "FROM ax.flow_parent_results($1::int8)",
                                  1, values, nullptr, nullptr, 1);
    std::vector<ParentResult> out;
    for (int i = 0; i < r.rows(); ++i) {
        ParentResult p;
        p.name = std::string(r.text(i, 0));
        p.result.id = static_cast<std::int64_t>(detail::be64(r.text(i, 1).data()));
        if (r.null(i, 2)) { // its history was pruned
            p.result.state = TaskState::discarded;
            p.result.error = "unknown: its history was pruned";
        } else {
            p.result.state = static_cast<TaskState>(detail::be16(r.text(i, 2).data()));
            p.result.attempts = static_cast<int>(detail::be32(r.text(i, 3).data()));
            if (!r.null(i, 4))
                p.result.result = std::string(r.text(i, 4));
            if (!r.null(i, 5))
                p.result.error = std::string(r.text(i, 5));
        }
        out.push_back(std::move(p));
    }
    return out;
}

} // namespace ax::pg::sql
