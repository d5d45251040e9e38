// ax benchmarks — the baseline: a fixed-size thread pool with one mutex, one condition variable and
// an unbounded std::deque of std::function, the "fixed worker pool + blocking queue" of seed §2.2.
// SPDX-License-Identifier: MIT
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ax_bench {

/// A fixed pool of `threads` workers. submit() never refuses (the queue is unbounded); the
/// destructor finishes every queued task, then joins.
class NaivePool {
  public:
    explicit NaivePool(std::size_t threads) {
        workers_.reserve(threads);
        for (std::size_t i = 0; i < threads; ++i)
            workers_.emplace_back([this] { loop(); });
    }
    NaivePool(const NaivePool&) = delete;
    NaivePool& operator=(const NaivePool&) = delete;
    ~NaivePool() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        cv_.notify_all();
        for (auto& t : workers_)
            t.join();
    }

    /// Appends `f` to the queue and wakes one worker.
    void submit(std::function<void()> f) {
        {
            std::lock_guard lock(mutex_);
            queue_.push_back(std::move(f));
        }
        cv_.notify_one();
    }

    /// Tasks waiting in the queue (not yet started).
    [[nodiscard]] std::size_t queue_length() {
        std::lock_guard lock(mutex_);
        return queue_.size();
    }

    /// Worker threads (fixed for the pool's lifetime).
    [[nodiscard]] std::size_t threads() const noexcept { return workers_.size(); }

  private:
    void loop() {
        for (;;) {
            std::function<void()> f;
            {
                std::unique_lock lock(mutex_);
                cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
                if (queue_.empty())
                    return; // stopping and drained
                f = std::move(queue_.front());
                queue_.pop_front();
            }
            f();
        }
    }

    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> queue_;
    bool stopping_ = false;
    std::vector<std::thread> workers_;
};

} // namespace ax_bench
