// Unit tests for ax/priority_ring.hpp: PriorityRing, IntrusiveFifo, PriorityLanes.
#include <array>
#include <ax/priority_ring.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using ax::Priority;
using ax::detail::IntrusiveFifo;
using ax::detail::PriorityLanes;
using ax::detail::PriorityRing;

constexpr std::uint32_t H = 1u << 0;
constexpr std::uint32_t N = 1u << 1;
constexpr std::uint32_t L = 1u << 2;

// Runs `count` picks with a constant mask and spells them as "HHHNNL...".
std::string picks(PriorityRing& ring, std::uint32_t mask, int count) {
    std::string out;
    for (int i = 0; i < count; ++i) {
        const int lane = ring.next(mask);
        out += lane == 0 ? 'H' : lane == 1 ? 'N' : lane == 2 ? 'L' : '-';
    }
    return out;
}

// Links over plain vectors: next pointer and enqueue time per slot.
struct Links {
    std::vector<std::uint32_t> next_;
    std::vector<std::int64_t> enq;

    explicit Links(std::size_t n) : next_(n, 0xdeadbeefu), enq(n, 0) {}
    [[nodiscard]] std::uint32_t next(std::uint32_t i) const noexcept { return next_[i]; }
    void set_next(std::uint32_t i, std::uint32_t v) noexcept { next_[i] = v; }
    [[nodiscard]] std::int64_t enqueue_ns(std::uint32_t i) const noexcept { return enq[i]; }
};

constexpr std::int64_t sec = 1'000'000'000;

} // namespace

TEST_CASE("PriorityRing 3:2:1 with every lane non-empty repeats HHHNNL", "[ring]") {
    PriorityRing ring({3, 2, 1});
    CHECK(ring.weights() == std::array<std::uint32_t, 3>{3, 2, 1});
    CHECK(picks(ring, H | N | L, 18) == "HHHNNLHHHNNLHHHNNL");
}

TEST_CASE("PriorityRing: an empty lane passes its share on", "[ring]") {
    SECTION("no High") {
        PriorityRing ring({3, 2, 1});
        CHECK(picks(ring, N | L, 12) == "NNLNNLNNLNNL");
    }
    SECTION("no Normal") {
        PriorityRing ring({3, 2, 1});
        CHECK(picks(ring, H | L, 12) == "HHHLHHHLHHHL");
    }
    SECTION("no Low") {
        PriorityRing ring({3, 2, 1});
        CHECK(picks(ring, H | N, 10) == "HHHNNHHHNN");
    }
    SECTION("High empties in the middle of its share") {
        PriorityRing ring({3, 2, 1});
        CHECK(picks(ring, H | N | L, 1) == "H");
        CHECK(picks(ring, N | L, 3) == "NNL");
        // High back: a fresh round starts with High's full share.
        CHECK(picks(ring, H | N | L, 6) == "HHHNNL");
    }
}

TEST_CASE("PriorityRing: a single non-empty lane is always served", "[ring]") {
    PriorityRing ring({3, 2, 1});
    CHECK(picks(ring, H, 7) == "HHHHHHH");
    CHECK(picks(ring, N, 7) == "NNNNNNN");
    CHECK(picks(ring, L, 7) == "LLLLLLL");
    CHECK(picks(ring, H, 2) == "HH");
}

TEST_CASE("PriorityRing: mask without lanes gives -1", "[ring]") {
    PriorityRing ring({3, 2, 1});
    CHECK(ring.next(0) == -1);
    CHECK(ring.next(1u << 3) == -1); // bits above the three lanes are ignored
    CHECK(ring.next(0xfffffff8u) == -1);
    // -1 does not disturb the ring.
    CHECK(picks(ring, H | N | L, 6) == "HHHNNL");
}

TEST_CASE("PriorityRing with other weights", "[ring]") {
    SECTION("10:2:1") {
        PriorityRing ring({10, 2, 1});
        CHECK(picks(ring, H | N | L, 26) == "HHHHHHHHHHNNLHHHHHHHHHHNNL");
    }
    SECTION("1:1:1") {
        PriorityRing ring({1, 1, 1});
        CHECK(picks(ring, H | N | L, 9) == "HNLHNLHNL");
    }
    SECTION("1:5:2") {
        PriorityRing ring({1, 5, 2});
        CHECK(picks(ring, H | N | L, 16) == "HNNNNNLLHNNNNNLL");
    }
}

TEST_CASE("IntrusiveFifo push_back, push_front, pop_front, size", "[ring]") {
    using Fifo = IntrusiveFifo<Links>;
    Links links(16);
    Fifo q;
    CHECK(q.empty());
    CHECK(q.size() == 0);
    CHECK(q.front() == Fifo::none);
    CHECK(q.pop_front(links) == Fifo::none);
    CHECK(q.size() == 0);

    q.push_back(links, 3);
    q.push_back(links, 7);
    q.push_back(links, 1);
    CHECK_FALSE(q.empty());
    CHECK(q.size() == 3);
    CHECK(q.front() == 3);

    q.push_front(links, 9);
    CHECK(q.size() == 4);
    CHECK(q.front() == 9);

    CHECK(q.pop_front(links) == 9);
    CHECK(q.pop_front(links) == 3);
    CHECK(q.size() == 2);
    q.push_back(links, 5);
    CHECK(q.pop_front(links) == 7);
    CHECK(q.pop_front(links) == 1);
    CHECK(q.pop_front(links) == 5);
    CHECK(q.empty());
    CHECK(q.size() == 0);
    CHECK(q.pop_front(links) == Fifo::none);

    // push_front into an empty FIFO sets the tail too: a later push_back follows it.
    q.push_front(links, 4);
    q.push_back(links, 2);
    CHECK(q.pop_front(links) == 4);
    CHECK(q.pop_front(links) == 2);
    CHECK(q.empty());

    // A popped index can be pushed again (re-insert at the head).
    q.push_back(links, 0);
    q.push_back(links, 8);
    const auto head = q.pop_front(links);
    q.push_front(links, head);
    CHECK(q.size() == 2);
    CHECK(q.pop_front(links) == 0);
    CHECK(q.pop_front(links) == 8);
}

TEST_CASE("PriorityLanes follow the ring when nothing waited too long", "[ring]") {
    Links links(64);
    PriorityLanes<Links> lanes({3, 2, 1}, 5 * sec);
    const std::int64_t now = 100 * sec;
    // Slots 0..9 high, 10..19 normal, 20..29 low, all enqueued "now".
    for (std::uint32_t i = 0; i < 30; ++i) {
        links.enq[i] = now;
        lanes.push(links, i, static_cast<Priority>(i / 10));
    }
    CHECK(lanes.size() == 30);
    CHECK(lanes.size(Priority::high) == 10);
    CHECK(lanes.size(Priority::normal) == 10);
    CHECK(lanes.size(Priority::low) == 10);

    const std::vector<std::uint32_t> expected{0, 1, 2, 10, 11, 20, 3, 4, 5, 12, 13, 21};
    std::vector<std::uint32_t> got;
    for (std::size_t i = 0; i < expected.size(); ++i)
        got.push_back(lanes.pop(links, now));
    CHECK(got == expected);
    CHECK(lanes.starvation_picks() == 0);
    CHECK(lanes.size() == 18);
    CHECK(lanes.size(Priority::high) == 4);
    CHECK(lanes.size(Priority::normal) == 6);
    CHECK(lanes.size(Priority::low) == 8);
}

TEST_CASE("PriorityLanes pop on empty lanes returns none", "[ring]") {
    Links links(4);
    PriorityLanes<Links> lanes({3, 2, 1}, 5 * sec);
    CHECK(lanes.pop(links, 0) == PriorityLanes<Links>::none);
    lanes.push(links, 2, Priority::low);
    CHECK(lanes.pop(links, 0) == 2);
    CHECK(lanes.pop(links, 0) == PriorityLanes<Links>::none);
    CHECK(lanes.size() == 0);
    CHECK(lanes.starvation_picks() == 0);
}

TEST_CASE("PriorityLanes anti-starvation picks a task older than max_wait", "[ring]") {
    Links links(64);
    const std::int64_t max_wait = 5 * sec;
    PriorityLanes<Links> lanes({3, 2, 1}, max_wait);
    const std::int64_t now = 100 * sec;
    for (std::uint32_t i = 0; i < 6; ++i) {
        links.enq[i] = now;
        lanes.push(links, i, Priority::high);
    }

    SECTION("a low task older than max_wait goes before High") {
        links.enq[40] = now - max_wait - 1;
        lanes.push(links, 40, Priority::low);
        CHECK(lanes.pop(links, now) == 40);
        CHECK(lanes.starvation_picks() == 1);
        // Then the ring resumes with High.
        CHECK(lanes.pop(links, now) == 0);
        CHECK(lanes.pop(links, now) == 1);
        CHECK(lanes.starvation_picks() == 1);
    }
    SECTION("within max_wait the ring order holds") {
        links.enq[40] = now - max_wait / 2;
        lanes.push(links, 40, Priority::low);
        CHECK(lanes.pop(links, now) == 0);
        CHECK(lanes.pop(links, now) == 1);
        CHECK(lanes.pop(links, now) == 2);
        CHECK(lanes.pop(links, now) == 40); // High had 3, Normal is empty, then Low's share
        CHECK(lanes.starvation_picks() == 0);
    }
    SECTION("the same task becomes starved as time passes") {
        links.enq[40] = now - sec;
        lanes.push(links, 40, Priority::low);
        CHECK(lanes.pop(links, now) == 0);
        CHECK(lanes.starvation_picks() == 0);
        CHECK(lanes.pop(links, now + max_wait) == 40);
        CHECK(lanes.starvation_picks() == 1);
    }
    SECTION("the oldest of several starved heads goes first") {
        links.enq[40] = now - 20 * sec;
        lanes.push(links, 40, Priority::low);
        links.enq[50] = now - 30 * sec;
        lanes.push(links, 50, Priority::normal);
        links.enq[51] = now - 25 * sec;
        lanes.push(links, 51, Priority::normal);
        CHECK(lanes.pop(links, now) == 50);
        CHECK(lanes.pop(links, now) == 51);
        CHECK(lanes.pop(links, now) == 40);
        CHECK(lanes.starvation_picks() == 3);
        CHECK(lanes.pop(links, now) == 0);
        CHECK(lanes.starvation_picks() == 3);
    }
}

TEST_CASE("PriorityLanes: 6000 pops of 3x3000 tasks give exact 3:2:1 shares", "[ring]") {
    constexpr std::uint32_t per_lane = 3000;
    Links links(3 * per_lane);
    PriorityLanes<Links> lanes({3, 2, 1}, 5 * sec);
    const std::int64_t now = 10 * sec;
    for (std::uint32_t i = 0; i < 3 * per_lane; ++i) {
        links.enq[i] = now;
        lanes.push(links, i, static_cast<Priority>(i / per_lane));
    }
    REQUIRE(lanes.size() == 3 * per_lane);

    std::array<std::uint32_t, 3> share{};
    std::array<std::uint32_t, 3> last{};
    std::array<bool, 3> seen{};
    bool fifo = true;
    for (int i = 0; i < 6000; ++i) {
        const std::uint32_t idx = lanes.pop(links, now);
        REQUIRE(idx < 3 * per_lane);
        const std::uint32_t lane = idx / per_lane;
        if (seen[lane] && idx != last[lane] + 1)
            fifo = false;
        if (!seen[lane] && idx != lane * per_lane)
            fifo = false;
        seen[lane] = true;
        last[lane] = idx;
        ++share[lane];
    }
    CHECK(share[0] == 3000);
    CHECK(share[1] == 2000);
    CHECK(share[2] == 1000);
    CHECK(fifo);
    CHECK(lanes.size(Priority::high) == 0);
    CHECK(lanes.size(Priority::normal) == 1000);
    CHECK(lanes.size(Priority::low) == 2000);

    // The rest: High is empty, so Normal and Low split 2:1 until Normal runs out.
    std::array<std::uint32_t, 3> rest{};
    for (int i = 0; i < 3000; ++i)
        ++rest[lanes.pop(links, now) / per_lane];
    CHECK(rest[1] == 1000);
    CHECK(rest[2] == 2000);
    CHECK(lanes.size() == 0);
    CHECK(lanes.starvation_picks() == 0);
}
