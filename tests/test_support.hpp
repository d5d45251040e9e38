// Shared helpers for the scheduler tests.
#pragma once

#include <atomic>
#include <chrono>
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
        while (!open_.load(std::memory_order_acquire))
            open_.wait(false);
    }
    [[nodiscard]] bool is_open() const { return open_.load(std::memory_order_acquire); }
    /// Opens on destruction too, so a failed REQUIRE cannot leave tasks blocked forever and hang
    /// the scheduler's draining destructor.
    ~Gate() { open(); }

  private:
    std::atomic<bool> open_{false};
};

} // namespace ax_test
