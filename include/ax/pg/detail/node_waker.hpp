// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The driver's alarm clock: an eventfd that workers, stop() and the timeout hook write to, and
// that the driver sleeps on (beside its primary link's socket). `sleeping_` tells a finishing
// worker whether the driver sleeps at all, so a busy driver costs workers no system call. The
// eventfd is the only state; writes and reads of it are thread-safe.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <poll.h>
#include <stdexcept>
#include <sys/eventfd.h>
#include <unistd.h>

namespace ax::pg::detail {

class Waker {
  public:
    Waker() = default;
    Waker(const Waker&) = delete;
    Waker& operator=(const Waker&) = delete;
    ~Waker() { close(); }

    void open() {
        fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (fd_ < 0)
            throw std::runtime_error("ax::pg::Node: eventfd failed");
    }
    void close() noexcept {
        if (fd_ >= 0)
            ::close(fd_);
        fd_ = -1;
    }

    /// Wakes the driver (any thread).
    void wake() noexcept {
        if (fd_ >= 0) {
            const std::uint64_t one = 1;
            [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
        }
    }
    /// Wakes the driver only if it sleeps (a worker with something worth a round trip).
    void wake_if_sleeping() noexcept {
        if (sleeping_.load(std::memory_order_acquire) && sleeping_.exchange(false))
            wake();
    }
    /// The driver is about to sleep (true) or is up (false).
    void set_sleeping(bool s) noexcept { sleeping_.store(s, std::memory_order_release); }

    /// Sleeps up to `d` (at least 1 ms) or until woken (driver).
    void sleep_for(std::chrono::milliseconds d) noexcept {
        pollfd p{fd_, POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(1, d.count())));
        drain();
    }
    /// Sleeps up to `ms` or until woken or `socket` has input (driver).
    void sleep_on(int socket, int ms) noexcept {
        pollfd p[2] = {{socket, POLLIN, 0}, {fd_, POLLIN, 0}};
        ::poll(p, 2, ms);
        drain();
    }

  private:
    void drain() noexcept {
        std::uint64_t v;
        while (::read(fd_, &v, sizeof v) > 0) {
        }
    }
    int fd_ = -1;
    std::atomic<bool> sleeping_{false};
};

} // namespace ax::pg::detail
