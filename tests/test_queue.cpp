// Unit tests for ax/queue.hpp: detail::DoubleBufferQueue admission, counters, swap.
#include "queue_links.hpp"

#include <atomic>
#include <ax/queue.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

using ax::Priority;
using ax::detail::Admission;
using DoubleBufferQueue = ax_test::TestQueue;

TEST_CASE("DoubleBufferQueue admits normal/low up to the soft limit, high up to capacity",
          "[queue]") {
    DoubleBufferQueue q(10, 8);
    CHECK(q.capacity() == 10);
    CHECK(q.soft_limit() == 8);
    CHECK(q.length() == 0);
    CHECK_FALSE(q.has_standby());

    std::uint32_t len = 999;
    for (std::uint32_t i = 0; i < 8; ++i) {
        const Priority p = i % 2 == 0 ? Priority::normal : Priority::low;
        REQUIRE(q.try_push(i, p, len) == Admission::admitted);
        CHECK(len == i); // the length seen before this push
    }
    CHECK(q.length() == 8);
    CHECK(q.length(Priority::normal) == 4);
    CHECK(q.length(Priority::low) == 4);
    CHECK(q.length(Priority::high) == 0);
    CHECK(q.has_standby());

    CHECK(q.try_push(100, Priority::normal, len) == Admission::busy);
    CHECK(len == 8);
    CHECK(q.try_push(101, Priority::low, len) == Admission::busy);
    CHECK(len == 8);
    CHECK(q.length() == 8);

    CHECK(q.try_push(8, Priority::high, len) == Admission::admitted);
    CHECK(len == 8);
    CHECK(q.try_push(9, Priority::high, len) == Admission::admitted);
    CHECK(len == 9);
    CHECK(q.length() == 10);
    CHECK(q.length(Priority::high) == 2);

    CHECK(q.try_push(102, Priority::high, len) == Admission::full);
    CHECK(len == 10);
    CHECK(q.try_push(103, Priority::normal, len) == Admission::full); // full beats busy
    CHECK(len == 10);
    CHECK(q.length() == 10);

    const auto c = q.counters();
    CHECK(c.incoming == 10);
    CHECK(c.rejected == 4);
    CHECK(c.requeued == 0);

    std::vector<std::uint32_t> out;
    REQUIRE(q.swap(out));
    CHECK(out == std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    // Swapping does not start tasks: they stay counted until on_dequeued.
    CHECK(q.length() == 10);
}

TEST_CASE("DoubleBufferQueue::on_dequeued frees room per priority", "[queue]") {
    DoubleBufferQueue q(10, 8);
    std::uint32_t len = 0;
    for (std::uint32_t i = 0; i < 8; ++i)
        REQUIRE(q.try_push(i, Priority::normal, len) == Admission::admitted);
    REQUIRE(q.try_push(8, Priority::high, len) == Admission::admitted);
    REQUIRE(q.try_push(9, Priority::high, len) == Admission::admitted);
    REQUIRE(q.try_push(10, Priority::low, len) == Admission::full);

    q.on_dequeued(Priority::normal);
    CHECK(q.length() == 9);
    CHECK(q.length(Priority::normal) == 7);
    // Still above the soft limit: normal busy, high admitted.
    CHECK(q.try_push(11, Priority::normal, len) == Admission::busy);
    CHECK(len == 9);
    q.on_dequeued(Priority::high);
    q.on_dequeued(Priority::high);
    CHECK(q.length(Priority::high) == 0);
    CHECK(q.length() == 7);
    CHECK(q.try_push(12, Priority::low, len) == Admission::admitted);
    CHECK(len == 7);
    CHECK(q.length(Priority::low) == 1);
    CHECK(q.try_push(13, Priority::low, len) == Admission::busy);
    CHECK(len == 8);
}

TEST_CASE("DoubleBufferQueue::swap moves everything appended, in order", "[queue]") {
    DoubleBufferQueue q(100, 100);
    std::vector<std::uint32_t> out;
    CHECK_FALSE(q.swap(out));
    CHECK(out.empty());

    std::uint32_t len = 0;
    REQUIRE(q.try_push(42, Priority::low, len) == Admission::admitted);
    REQUIRE(q.try_push(7, Priority::high, len) == Admission::admitted);
    q.push_unchecked(13, Priority::normal);
    REQUIRE(q.try_push(99, Priority::normal, len) == Admission::admitted);
    CHECK(q.has_standby());

    REQUIRE(q.swap(out));
    CHECK(out == std::vector<std::uint32_t>{42, 7, 13, 99});
    CHECK_FALSE(q.has_standby());

    // Nothing new: false, and the caller's (emptied) buffer stays empty.
    std::vector<std::uint32_t> out2;
    CHECK_FALSE(q.swap(out2));
    CHECK(out2.empty());

    // The buffer handed back is reused: later appends arrive in the next swap only.
    out.clear();
    REQUIRE(q.try_push(5, Priority::high, len) == Admission::admitted);
    CHECK(q.has_standby());
    REQUIRE(q.swap(out));
    CHECK(out == std::vector<std::uint32_t>{5});
    out.clear();
    CHECK_FALSE(q.swap(out));
    CHECK(out.empty());
}

TEST_CASE("DoubleBufferQueue::push_unchecked bypasses capacity and counts a requeue", "[queue]") {
    DoubleBufferQueue q(2, 1);
    std::uint32_t len = 0;
    REQUIRE(q.try_push(0, Priority::high, len) == Admission::admitted);
    REQUIRE(q.try_push(1, Priority::high, len) == Admission::admitted);
    REQUIRE(q.try_push(2, Priority::high, len) == Admission::full);

    q.push_unchecked(3, Priority::low);
    q.push_unchecked(4, Priority::normal);
    CHECK(q.length() == 4);
    CHECK(q.length(Priority::low) == 1);
    CHECK(q.length(Priority::normal) == 1);
    CHECK(q.length(Priority::high) == 2);

    const auto c = q.counters();
    CHECK(c.incoming == 2);
    CHECK(c.rejected == 1);
    CHECK(c.requeued == 2);

    std::vector<std::uint32_t> out;
    REQUIRE(q.swap(out));
    CHECK(out == std::vector<std::uint32_t>{0, 1, 3, 4});
}

TEST_CASE("DoubleBufferQueue::count_rejection bumps rejected only", "[queue]") {
    DoubleBufferQueue q(4, 4);
    q.count_rejection();
    q.count_rejection();
    const auto c = q.counters();
    CHECK(c.rejected == 2);
    CHECK(c.incoming == 0);
    CHECK(c.requeued == 0);
    CHECK(q.length() == 0);
}

TEST_CASE("DoubleBufferQueue::close refuses try_push but not push_unchecked", "[queue]") {
    DoubleBufferQueue q(10, 8);
    std::uint32_t len = 0;
    REQUIRE(q.try_push(1, Priority::normal, len) == Admission::admitted);
    q.close();

    len = 999;
    CHECK(q.try_push(2, Priority::high, len) == Admission::closed);
    CHECK(len == 1);
    CHECK(q.try_push(3, Priority::low, len) == Admission::closed);
    CHECK(q.length() == 1);

    q.push_unchecked(4, Priority::low);
    CHECK(q.length() == 2);

    const auto c = q.counters();
    CHECK(c.incoming == 1);
    CHECK(c.rejected == 0); // closed is not backpressure
    CHECK(c.requeued == 1);

    std::vector<std::uint32_t> out;
    REQUIRE(q.swap(out));
    CHECK(out == std::vector<std::uint32_t>{1, 4});
}

TEST_CASE("DoubleBufferQueue: 4 producers, 1 consumer, every index exactly once",
          "[queue][threads]") {
    constexpr std::uint32_t producers = 4;
    constexpr std::uint32_t per_producer = 10000;
    constexpr std::uint32_t total = producers * per_producer;
    DoubleBufferQueue q(total, total);

    auto priority_of = [](std::uint32_t index) { return static_cast<Priority>(index % 3); };

    std::atomic<std::uint32_t> refused{0};
    std::vector<std::thread> threads;
    for (std::uint32_t p = 0; p < producers; ++p) {
        threads.emplace_back([&, p] {
            std::uint32_t len = 0;
            for (std::uint32_t i = 0; i < per_producer; ++i) {
                const std::uint32_t index = p * per_producer + i;
                if (q.try_push(index, priority_of(index), len) != Admission::admitted)
                    refused.fetch_add(1, std::memory_order_relaxed);
            }
        });
    }

    std::vector<std::uint32_t> seen(total, 0);
    std::vector<std::uint32_t> next_expected(producers, 0);
    std::uint32_t received = 0;
    std::uint32_t out_of_range = 0;
    std::uint32_t out_of_order = 0;
    std::vector<std::uint32_t> out;
    out.reserve(total);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (received < total && std::chrono::steady_clock::now() < deadline) {
        if (!q.swap(out)) {
            std::this_thread::yield();
            continue;
        }
        for (const std::uint32_t index : out) {
            if (index >= total) {
                ++out_of_range;
                continue;
            }
            ++seen[index];
            // One mutex-guarded buffer keeps each producer's pushes in order.
            const std::uint32_t p = index / per_producer;
            if (index % per_producer != next_expected[p])
                ++out_of_order;
            next_expected[p] = index % per_producer + 1;
            q.on_dequeued(priority_of(index));
            ++received;
        }
        out.clear();
    }
    for (auto& t : threads)
        t.join();

    REQUIRE(refused.load() == 0);
    REQUIRE(received == total);
    CHECK(out_of_range == 0);
    CHECK(out_of_order == 0);
    std::uint32_t once = 0;
    for (const std::uint32_t n : seen)
        once += n == 1 ? 1 : 0;
    CHECK(once == total);
    CHECK(q.length() == 0);
    CHECK_FALSE(q.swap(out));
    const auto c = q.counters();
    CHECK(c.incoming == total);
    CHECK(c.rejected == 0);
}
