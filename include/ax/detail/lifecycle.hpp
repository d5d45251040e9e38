// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace ax::detail {

/// The scheduler's life: open, shutting down (refusing new work), discarding (shutdown(cancel):
/// cancel instead of run), drained, threads stopped. Read on every submit and every dispatch
/// (atomics); the waits and the one-time stop are the rare part.
///
/// Locks it owns: `drain_mutex_` guards `drained_` (mark_drained, wait_drained, with
/// `drain_cv_`); `stop_mutex_` guards `stopped_` (claim_stop). Neither is ever held with another
/// lock.
class Lifecycle {
  public:
    /// Whether a submit may be admitted: top-level tasks until shutdown begins; subtasks (work
    /// a running parent already holds) until shutdown cancels or the threads are gone.
    [[nodiscard]] bool open(bool child) const noexcept {
        return child ? !discard_.load(std::memory_order_acquire) &&
                           !threads_stopped_.load(std::memory_order_acquire)
                     : accepting_.load(std::memory_order_acquire);
    }
    /// False once shutdown began.
    [[nodiscard]] bool accepting() const noexcept {
        return accepting_.load(std::memory_order_acquire);
    }
    /// True once shutdown(cancel) began: workers cancel what they pop, failures do not retry.
    [[nodiscard]] bool discarding() const noexcept {
        return discard_.load(std::memory_order_acquire);
    }

    /// discarding(), ordered with start_discarding() and cancel_all()'s scan of the workers' claim
    /// words (all seq_cst): a worker that published its claim word and then reads false here is
    /// found by that scan; one that reads true cancels its own attempt. Without the total order a
    /// task between its queued -> running CAS and its publication escapes shutdown(cancel).
    [[nodiscard]] bool discarding_ordered() const noexcept {
        return discard_.load(std::memory_order_seq_cst);
    }

    /// Shutdown begins: refuse new top-level work.
    void stop_accepting() noexcept { accepting_.store(false, std::memory_order_seq_cst); }
    /// shutdown(cancel): cancel instead of run from now on.
    void start_discarding() noexcept { discard_.store(true, std::memory_order_seq_cst); }

    /// The tick saw everything terminal: wakes shutdown().
    void mark_drained() {
        {
            std::lock_guard lock(drain_mutex_);
            drained_ = true;
        }
        drain_cv_.notify_all();
    }
    /// Waits for mark_drained(), at most `limit` when `bounded`; false if the limit passed.
    bool wait_drained(bool bounded, std::chrono::nanoseconds limit) {
        std::unique_lock lock(drain_mutex_);
        auto drained = [&] { return drained_; };
        if (bounded)
            return drain_cv_.wait_for(lock, limit, drained);
        drain_cv_.wait(lock, drained);
        return true;
    }

    /// Claims the one-time stop of the threads; false if someone claimed it before.
    bool claim_stop() {
        std::lock_guard lock(stop_mutex_);
        if (stopped_)
            return false;
        stopped_ = true;
        return true;
    }
    /// The threads are being stopped: subtasks are refused from now on.
    void mark_threads_stopped() noexcept {
        threads_stopped_.store(true, std::memory_order_release);
    }

  private:
    std::atomic<bool> accepting_{true};
    std::atomic<bool> discard_{false};
    std::atomic<bool> threads_stopped_{false};
    std::mutex drain_mutex_;
    std::condition_variable drain_cv_;
    bool drained_ = false; // under drain_mutex_
    std::mutex stop_mutex_;
    bool stopped_ = false; // under stop_mutex_
};

} // namespace ax::detail
