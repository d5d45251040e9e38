// Shared helpers for the scheduler tests.
#pragma once

#include <atomic>
#include <ax/task.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <thread>

namespace ax_test {

/// Polls `pred` until it holds or a generous hang guard expires; returns whether it held.
/// Never a speed assertion: the bound only stops a broken build from hanging CI.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds guard = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + guard;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
}

/// A gate tasks block on until the test opens it.
class Gate {
  public:
    void open() {
        open_.store(true, std::memory_order_release);
        open_.notify_all();
    }
    void wait() const {
        waiters_.fetch_add(1, std::memory_order_acq_rel);
        while (!open_.load(std::memory_order_acquire))
            open_.wait(false);
        waiters_.fetch_sub(1, std::memory_order_acq_rel);
    }
    [[nodiscard]] bool is_open() const { return open_.load(std::memory_order_acquire); }
    /// Opens on destruction too, so a failed REQUIRE cannot leave tasks blocked forever and hang
    /// the scheduler's draining destructor; and waits for the waiters to leave wait(), since a
    /// Gate declared after the scheduler dies while a worker may still be inside it.
    Gate() = default;
    Gate(const Gate&) = delete;
    Gate& operator=(const Gate&) = delete;
    ~Gate() {
        open();
        while (waiters_.load(std::memory_order_acquire) != 0)
            std::this_thread::yield();
    }

  private:
    std::atomic<bool> open_{false};
    mutable std::atomic<int> waiters_{0};
};

/// Waits for every handle (a generous hang guard each), checks each ended in a terminal state,
/// and that the scheduler's totals agree: admitted = handles, and the succeeded / dead-lettered /
/// cancelled counts match what the handles say.
template <class Sched, class Handles>
void check_every_task_ended_once(Sched& sched, Handles& handles, std::chrono::seconds guard) {
    std::uint64_t ok = 0, dead = 0, cancelled = 0;
    for (auto& h : handles) {
        REQUIRE(h.wait_for(guard));
        switch (h.state()) {
        case ax::TaskState::succeeded:
            ++ok;
            break;
        case ax::TaskState::dead_lettered:
            ++dead;
            break;
        case ax::TaskState::cancelled:
            ++cancelled;
            break;
        default:
            FAIL("non-terminal state after wait");
        }
    }
    const auto m = sched.metrics();
    CHECK(m.totals.submitted == handles.size());
    CHECK(m.totals.succeeded == ok);
    CHECK(m.totals.dead_lettered == dead);
    CHECK(m.totals.cancelled == cancelled);
    CHECK(ok + dead + cancelled == handles.size());
}

} // namespace ax_test
