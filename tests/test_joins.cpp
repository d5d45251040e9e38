// Unit tests for detail::JoinTable (ax/detail/joins.hpp): who waits for whom, without threads.
#include <ax/detail/joins.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

using ax::TaskId;
using ax::TaskState;
using ax::detail::JoinTable;
using ax::detail::TaskSlab;

namespace {
TaskId live_task(TaskSlab& slab, TaskState s) {
    const auto i = slab.acquire();
    auto& r = slab.at(i);
    r.refs.store(1);
    r.state.store(static_cast<std::uint32_t>(s));
    return TaskId::make(i, r.generation.load());
}
} // namespace

TEST_CASE("JoinTable counts only dependencies still running and flags them", "[joins]") {
    TaskSlab slab;
    JoinTable joins;
    const TaskId a = live_task(slab, TaskState::running);
    const TaskId b = live_task(slab, TaskState::succeeded);
    const TaskId c = live_task(slab, TaskState::queued);
    const TaskId gone = TaskId::make(a.index(), a.generation() + 7); // stale: ended long ago
    const TaskId deps[] = {a, b, c, gone};
    const std::uint32_t j = 900;
    CHECK(joins.add(slab, j, deps, 4) == 2);
    for (const TaskId d : {a, b, c})
        CHECK((slab.at(d.index()).state.load() & ax::detail::has_dependents_bit) != 0);
    CHECK(slab.at(a.index()).refs.load() == 1); // pins were released

    std::vector<std::uint32_t> waiting;
    joins.waiting(waiting);
    CHECK(waiting == std::vector<std::uint32_t>{j});

    std::vector<std::uint32_t> ready;
    joins.take_ready(a.index(), ready);
    CHECK(ready.empty()); // c still runs
    joins.take_ready(b.index(), ready);
    CHECK(ready.empty()); // b was terminal at add: never counted
    joins.take_ready(c.index(), ready);
    CHECK(ready == std::vector<std::uint32_t>{j});
    waiting.clear();
    joins.waiting(waiting);
    CHECK(waiting.empty());
}

TEST_CASE("JoinTable: a join with nothing to wait for is ready at once", "[joins]") {
    TaskSlab slab;
    JoinTable joins;
    const TaskId done = live_task(slab, TaskState::cancelled);
    CHECK(joins.add(slab, 5, &done, 1) == 0);
    std::vector<std::uint32_t> waiting;
    joins.waiting(waiting);
    CHECK(waiting.empty());
}

TEST_CASE("JoinTable: one task ending frees every join waiting on it", "[joins]") {
    TaskSlab slab;
    JoinTable joins;
    const TaskId a = live_task(slab, TaskState::running);
    const TaskId b = live_task(slab, TaskState::running);
    const TaskId ab[] = {a, b};
    CHECK(joins.add(slab, 100, &a, 1) == 1);
    CHECK(joins.add(slab, 101, ab, 2) == 2);
    std::vector<std::uint32_t> ready;
    joins.take_ready(a.index(), ready);
    CHECK(ready == std::vector<std::uint32_t>{100});
    ready.clear();
    joins.take_ready(a.index(), ready); // its entry is gone: nothing twice
    CHECK(ready.empty());
    joins.take_ready(b.index(), ready);
    CHECK(ready == std::vector<std::uint32_t>{101});
}
