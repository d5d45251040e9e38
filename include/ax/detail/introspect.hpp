// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../task.hpp"
#include "core.hpp"
#include "record.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

/// Introspection: tasks listed by state, and the oldest waiting task per priority. Nothing here
/// runs on a hot path: each list is gathered at call time from the one store that owns that
/// state, under that store's own lock (one lock at a time; dispatch -> queue is the only
/// nesting), as slot IDs only, stopping at the limit; the summaries are filled afterwards from
/// pinned records, outside every store lock.
namespace ax::detail {

/// The summary of task `id` if it is still in state `want` (nullopt if it moved on meanwhile,
/// was forgotten or recycled). Pins the record while reading it.
template <class Slab>
std::optional<TaskSummary> summarize(Slab& slab, TaskId id, TaskState want, std::int64_t now) {
    TaskRecord* r = slab.try_pin(id);
    if (r == nullptr)
        return std::nullopt;
    std::optional<TaskSummary> out;
    const auto s = r->state.load(std::memory_order_acquire);
    if ((s & forgotten_bit) == 0 && static_cast<TaskState>(s & state_mask) == want) {
        TaskSummary t;
        t.id = id;
        t.priority = r->priority;
        t.state = want;
        t.attempts = r->attempts.load(std::memory_order_relaxed);
        t.age = std::chrono::nanoseconds(
            std::max<std::int64_t>(0, now - r->enqueue_ns.load(std::memory_order_relaxed)));
        r->lock_extras();
        if (r->extras != nullptr) {
            try {
                t.name = r->extras->name;
            } catch (...) {
                r->unlock_extras();
                slab.release(id.index());
                throw;
            }
        }
        r->unlock_extras();
        out = std::move(t);
    }
    slab.release(id.index());
    return out;
}

template <SchedulerClock Clock, ControllerPolicy Controller>
std::vector<TaskSummary> SchedulerCore<Clock, Controller>::list_tasks(TaskState state,
                                                                      std::size_t limit) {
    switch (state) {
    case TaskState::queued:
    case TaskState::running:
    case TaskState::waiting_retry:
    case TaskState::scheduled:
    case TaskState::pending:
    case TaskState::succeeded:
    case TaskState::dead_lettered:
    case TaskState::cancelled:
        break;
    default:
        throw std::invalid_argument("ax: list_tasks: unknown TaskState " +
                                    std::to_string(static_cast<unsigned>(state)));
    }
    std::vector<TaskSummary> out;
    if (limit == 0)
        return out;
    const auto id_of = [&](std::uint32_t i) {
        return TaskId::make(i, slab_->at(i).generation.load(std::memory_order_acquire));
    };
    const auto in_state = [&](std::uint32_t i) { return slab_->at(i).load_state() == state; };
    // The join table lends no scan: its (rare) joins are copied out, then taken.
    const auto take_joins = [&](auto& take_one) {
        std::vector<std::uint32_t> joins;
        joins_.waiting(joins);
        for (const auto j : joins)
            if (!take_one(j))
                break;
    };
    // No store holds more tasks than the slab has records. Reserved up front, so nothing
    // allocates under a store's lock.
    const std::size_t cap = std::min(limit, slab_->capacity());
    std::vector<TaskId> ids;
    ids.reserve(cap);
    const auto take = [&](std::uint32_t i) {
        if (ids.size() >= cap)
            return false;
        if (in_state(i))
            ids.push_back(id_of(i));
        return ids.size() < cap;
    };
    switch (state) {
    case TaskState::queued:
        dispatcher_.scan(take);
        break;
    case TaskState::running: {
        const auto running = [&](Worker& w) {
            const auto c = w.current.load(std::memory_order_acquire);
            if (c != no_attempt && ids.size() < cap)
                if (in_state(static_cast<std::uint32_t>(c)))
                    ids.push_back(id_of(static_cast<std::uint32_t>(c)));
        };
        pool_.for_each(running);
        pool_.for_each_guest(running); // tasks producers run while they wait for room
        break;
    }
    case TaskState::waiting_retry:
    case TaskState::scheduled:
        // A cancelled entry stays in the heap as a tombstone, and its slot may be waiting for
        // another task's retry meanwhile: only the entry whose due time the record carries is
        // that task's.
        timers_.scan([&](const RetryTimers::Entry& e) {
            if (slab_->at(e.index).mark_ns.load(std::memory_order_relaxed) != e.due_ns)
                return true;
            return take(e.index);
        });
        break;
    case TaskState::pending:
        take_joins(take);
        break;
    case TaskState::cancelled:
        // History, newest first; then tasks cancelled where they waited, which stay there as
        // tombstones until taken (a lane, the timer heap, the join table).
        history_.scan_newest(take);
        if (ids.size() < cap)
            dispatcher_.scan(take);
        if (ids.size() < cap)
            timers_.scan([&](const RetryTimers::Entry& e) { return take(e.index); });
        if (ids.size() < cap)
            take_joins(take);
        break;
    default: // succeeded, dead_lettered: the bounded history, newest first
        history_.scan_newest(take);
        break;
    }
    const std::int64_t now = now_ns();
    out.reserve(ids.size());
    for (const TaskId id : ids)
        if (auto t = summarize(*slab_, id, state, now))
            out.push_back(std::move(*t));
    return out;
}

template <SchedulerClock Clock, ControllerPolicy Controller>
std::array<std::optional<TaskSummary>, priority_count>
SchedulerCore<Clock, Controller>::oldest_waiting() {
    std::array<TaskId, priority_count> ids{};
    std::array<std::int64_t, priority_count> at{};
    dispatcher_.oldest_queued(ids, at);
    std::array<std::optional<TaskSummary>, priority_count> out;
    const std::int64_t now = now_ns();
    for (std::size_t p = 0; p < priority_count; ++p)
        if (ids[p].valid())
            out[p] = summarize(*slab_, ids[p], TaskState::queued, now);
    return out;
}

} // namespace ax::detail
