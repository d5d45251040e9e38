// Unit tests for detail::History (ax/detail/history.hpp): the bounded ring, batching, eviction
// releasing the scheduler's reference, and "forgotten" for records still held elsewhere.
#include <ax/detail/history.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

using ax::TaskId;
using ax::detail::forgotten_bit;
using ax::detail::History;
using ax::detail::TaskSlab;

namespace {
/// A finished task holding `refs` references (the scheduler's first).
TaskId finished_task(TaskSlab& slab, std::uint32_t refs = 1) {
    const auto i = slab.acquire();
    auto& r = slab.at(i);
    r.refs.store(refs);
    r.state.store(static_cast<std::uint32_t>(ax::TaskState::succeeded));
    return TaskId::make(i, r.generation.load());
}
bool alive(TaskSlab& slab, TaskId id) {
    auto* r = slab.try_pin(id);
    if (r == nullptr)
        return false;
    slab.release(id.index());
    return true;
}
} // namespace

TEST_CASE("History keeps the newest `capacity` tasks and releases the oldest", "[history]") {
    TaskSlab slab;
    History h(slab, 2);
    const TaskId a = finished_task(slab);
    const TaskId b = finished_task(slab);
    const TaskId c = finished_task(slab);
    h.retire(a.index(), nullptr);
    h.retire(b.index(), nullptr);
    CHECK(h.size() == 2);
    CHECK(alive(slab, a));
    h.retire(c.index(), nullptr);
    CHECK(h.size() == 2);
    CHECK_FALSE(alive(slab, a)); // evicted, last reference gone: recycled
    CHECK(alive(slab, b));
    CHECK(alive(slab, c));
    h.release_all();
    CHECK(h.size() == 0);
    CHECK_FALSE(alive(slab, b));
    CHECK_FALSE(alive(slab, c));
}

TEST_CASE("History batches a worker's tasks and flushes when the batch is full", "[history]") {
    TaskSlab slab;
    History h(slab, 1000);
    std::vector<std::uint32_t> batch;
    batch.reserve(ax::Tuning::history_batch);
    for (std::size_t k = 0; k + 1 < ax::Tuning::history_batch; ++k)
        h.retire(finished_task(slab).index(), &batch);
    CHECK(h.size() == 0);
    CHECK(batch.size() == ax::Tuning::history_batch - 1);
    h.retire(finished_task(slab).index(), &batch);
    CHECK(h.size() == ax::Tuning::history_batch);
    CHECK(batch.empty());
    CHECK(batch.capacity() >= ax::Tuning::history_batch); // reused, no reallocation
    h.release_all();
}

TEST_CASE("History marks an evicted task held elsewhere as forgotten", "[history]") {
    TaskSlab slab;
    History h(slab, 1);
    const TaskId held = finished_task(slab, /*refs=*/2); // the scheduler's and a handle's
    const TaskId other = finished_task(slab);
    h.retire(held.index(), nullptr);
    CHECK((slab.at(held.index()).state.load() & forgotten_bit) == 0);
    h.retire(other.index(), nullptr);
    auto& r = slab.at(held.index());
    CHECK((r.state.load() & forgotten_bit) != 0);
    CHECK(r.load_state() == ax::TaskState::succeeded); // the handle still sees its state
    CHECK(r.refs.load() == 1);
    slab.release(held.index()); // the handle goes: recycled, flag cleared with the slot
    CHECK(r.state.load() == 0);
    h.release_all();
}

TEST_CASE("History of capacity 0 forgets every task at once", "[history]") {
    TaskSlab slab;
    History h(slab, 0);
    const TaskId a = finished_task(slab);
    h.retire(a.index(), nullptr);
    CHECK(h.size() == 0);
    CHECK_FALSE(alive(slab, a));
}
