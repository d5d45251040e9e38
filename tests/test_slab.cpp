// Unit tests for detail::TaskSlab (ax/detail/slab.hpp), the record manager (detail/callable.hpp)
// and ax::TaskId.
#include <algorithm>
#include <atomic>
#include <ax/detail/callable.hpp>
#include <ax/detail/huge_region.hpp>
#include <ax/detail/slab.hpp>
#include <ax/task.hpp>
#include <ax/tuning.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_set>
#include <vector>

using ax::TaskId;
using ax::detail::TaskRecord;
using ax::detail::TaskSlab;

namespace {

// Acquires a slot the way the scheduler does: one owner reference.
std::uint32_t acquire_owned(TaskSlab& slab) {
    const std::uint32_t slot = slab.acquire();
    REQUIRE(slot != TaskSlab::no_slot);
    slab.at(slot).refs.store(1, std::memory_order_relaxed);
    return slot;
}

// Puts a callable in `r` whose destruction the returned pointer observes (it expires then).
std::weak_ptr<int> place_observed_callable(TaskRecord& r) {
    auto alive = std::make_shared<int>(1);
    std::weak_ptr<int> watch = alive;
    auto fn = [keep = std::move(alive)] { return *keep; };
    ax::detail::storage_emplace<decltype(fn)>(r, std::move(fn));
    r.manager = &ax::detail::manage<decltype(fn)>;
    r.content = ax::detail::Content::callable;
    return watch;
}

} // namespace

TEST_CASE("TaskId packs index and generation", "[slab]") {
    constexpr TaskId id = TaskId::make(5, 7);
    static_assert(id.index() == 5);
    static_assert(id.generation() == 7);
    static_assert(id.valid());
    CHECK(id.value == ((std::uint64_t{7} << 32) | 5));
    CHECK(id.to_string() == "5#7");

    constexpr TaskId none{};
    static_assert(!none.valid());
    CHECK(none.index() == 0);
    CHECK(none.generation() == 0);
    CHECK_FALSE(TaskId::make(5, 0).valid());

    const TaskId big = TaskId::make(std::numeric_limits<std::uint32_t>::max(),
                                    std::numeric_limits<std::uint32_t>::max());
    CHECK(big.index() == std::numeric_limits<std::uint32_t>::max());
    CHECK(big.generation() == std::numeric_limits<std::uint32_t>::max());
    CHECK(big.to_string() == "4294967295#4294967295");

    CHECK(TaskId::make(5, 7) == id);
    CHECK_FALSE(TaskId::make(5, 8) == id);
    CHECK_FALSE(TaskId::make(6, 7) == id);
}

TEST_CASE("TaskId hashes its value and works in unordered containers", "[slab]") {
    const TaskId id = TaskId::make(12, 3);
    CHECK(std::hash<TaskId>{}(id) == std::hash<std::uint64_t>{}(id.value));
    std::unordered_set<TaskId> set{TaskId::make(1, 1), TaskId::make(1, 2), TaskId::make(2, 1)};
    CHECK(set.size() == 3);
    CHECK(set.count(TaskId::make(1, 2)) == 1);
    CHECK(set.count(TaskId::make(2, 2)) == 0);
}

TEST_CASE("TaskSlab::acquire hands out distinct low indices first", "[slab]") {
    auto slab = std::make_unique<TaskSlab>();
    CHECK(slab->capacity() == 0);
    std::vector<std::uint32_t> got;
    for (int i = 0; i < 5; ++i)
        got.push_back(slab->acquire());
    CHECK(got == std::vector<std::uint32_t>{0, 1, 2, 3, 4});
    CHECK(slab->capacity() == TaskSlab::chunk_size);
    for (const auto i : got) {
        const TaskRecord& r = slab->at(i);
        CHECK(r.refs.load() == 0);
        CHECK(r.state.load() == 0);
        CHECK(r.content == ax::detail::Content::none);
    }
}

TEST_CASE("TaskSlab grows past one chunk", "[slab]") {
    auto slab = std::make_unique<TaskSlab>();
    std::set<std::uint32_t> got;
    for (std::uint32_t i = 0; i < TaskSlab::chunk_size + 10; ++i) {
        const std::uint32_t slot = slab->acquire();
        REQUIRE(slot != TaskSlab::no_slot);
        got.insert(slot);
    }
    CHECK(got.size() == TaskSlab::chunk_size + 10);
    CHECK(*got.begin() == 0);
    CHECK(*got.rbegin() == TaskSlab::chunk_size + 9);
    CHECK(slab->capacity() == 2 * TaskSlab::chunk_size);
    // Records in the second chunk are usable and distinct from the first.
    CHECK(&slab->at(TaskSlab::chunk_size) != &slab->at(0));
    slab->at(TaskSlab::chunk_size + 3).refs.store(1);
    CHECK(slab->at(TaskSlab::chunk_size + 3).refs.load() == 1);
}

TEST_CASE("TaskSlab takes chunks past slab_huge_after_chunks from 2 MiB regions and frees them",
          "[slab]") {
    using ax::detail::HugeRegion;
    constexpr std::uint32_t plain = ax::Tuning::slab_huge_after_chunks;
    constexpr std::uint32_t per_region = static_cast<std::uint32_t>(
        HugeRegion::bytes / (std::size_t{TaskSlab::chunk_size} * sizeof(TaskRecord)));
    static_assert(per_region >= 2);
    // Two regions' worth and a bit: the second region starts a fresh mapping.
    const std::uint32_t chunks = plain + per_region + 2;
    auto slab = std::make_unique<TaskSlab>();
    std::vector<std::uint32_t> got;
    got.reserve(std::size_t{chunks} * TaskSlab::chunk_size);
    for (std::uint32_t i = 0; i < chunks * TaskSlab::chunk_size; ++i)
        got.push_back(acquire_owned(*slab));
    CHECK(slab->capacity() == std::size_t{chunks} * TaskSlab::chunk_size);
    CHECK(std::set<std::uint32_t>(got.begin(), got.end()).size() == got.size());
    const auto addr = [&](std::uint32_t chunk) {
        return reinterpret_cast<std::uintptr_t>(&slab->at(chunk * TaskSlab::chunk_size));
    };
#if defined(__linux__)
    CHECK(slab->region_chunks() == chunks - plain);
    // Each region starts on a 2 MiB boundary and its chunks follow one another.
    CHECK(addr(plain) % HugeRegion::bytes == 0);
    CHECK(addr(plain + 1) == addr(plain) + TaskSlab::chunk_size * sizeof(TaskRecord));
    CHECK(addr(plain + per_region) % HugeRegion::bytes == 0);
#endif
    CHECK(addr(plain - 1) % alignof(TaskRecord) == 0);
    // Records in a region chunk work like any other, and the slab's destructor destroys them:
    // a callable and extras left in one are freed with the slab (LeakSanitizer and the weak
    // pointer would both see them otherwise).
    const std::uint32_t i = (plain + per_region) * TaskSlab::chunk_size + 7;
    TaskRecord& r = slab->at(i);
    const std::weak_ptr<int> watch = place_observed_callable(r);
    r.ensure_extras().name = "kept in a region record";
    // Recycling still works across plain and region chunks.
    slab->release(got[5]);
    slab->release(got.back());
    const std::uint32_t again = slab->acquire();
    CHECK(again == got.back());
    CHECK_FALSE(watch.expired());
    slab.reset();
    CHECK(watch.expired());
}

TEST_CASE("TaskSlab without huge pages (Config::huge_pages off) allocates every chunk itself",
          "[slab]") {
    const std::uint32_t chunks = ax::Tuning::slab_huge_after_chunks + 2;
    auto slab = std::make_unique<TaskSlab>(/*huge_pages=*/false);
    std::vector<std::uint32_t> got;
    for (std::uint32_t i = 0; i < chunks * TaskSlab::chunk_size; ++i)
        got.push_back(acquire_owned(*slab));
    CHECK(slab->capacity() == std::size_t{chunks} * TaskSlab::chunk_size);
    CHECK(slab->region_chunks() == 0);
    CHECK(std::set<std::uint32_t>(got.begin(), got.end()).size() == got.size());
}

TEST_CASE("TaskSlab: a freshly acquired slot has a valid (non-zero) generation", "[slab]") {
    // acquire() promises "a fresh generation"; the scheduler builds the task's ID as
    // TaskId::make(index, generation), and an ID with generation 0 is invalid (try_pin,
    // cancel and query all reject it).
    auto slab = std::make_unique<TaskSlab>();
    const std::uint32_t i = acquire_owned(*slab);
    const std::uint32_t gen = slab->at(i).generation.load();
    CHECK(gen != 0);
    const TaskId id = TaskId::make(i, gen);
    CHECK(id.valid());
    TaskRecord* pinned = slab->try_pin(id);
    CHECK(pinned == &slab->at(i));
    if (pinned != nullptr)
        slab->release(i);
    CHECK(slab->at(i).refs.load() == 1);
}

TEST_CASE("TaskSlab::release recycles on the last reference", "[slab]") {
    auto slab = std::make_unique<TaskSlab>();
    const std::uint32_t i = acquire_owned(*slab);
    TaskRecord& r = slab->at(i);
    const std::uint32_t g0 = r.generation.load();
    r.refs.store(2);
    r.state.store(static_cast<std::uint32_t>(ax::TaskState::succeeded) |
                  ax::detail::has_waiter_bit);

    slab->release(i);
    CHECK(r.refs.load() == 1);
    CHECK(r.generation.load() == g0); // still live
    CHECK(r.state.load() != 0);

    slab->release(i);
    CHECK(r.refs.load() == 0);
    CHECK(r.generation.load() == g0 + 1);
    CHECK(r.state.load() == 0);

    // LIFO free list: the recycled slot comes back first, with the bumped generation.
    const std::uint32_t again = slab->acquire();
    REQUIRE(again == i);
    CHECK(slab->at(again).generation.load() == g0 + 1);
}

TEST_CASE("TaskSlab recycle destroys content and clears extras", "[slab]") {
    auto slab = std::make_unique<TaskSlab>();
    const std::uint32_t i = acquire_owned(*slab);
    TaskRecord& r = slab->at(i);
    const std::weak_ptr<int> watch = place_observed_callable(r);
    r.set_final_error(std::make_exception_ptr(std::runtime_error("boom")));
    CHECK(r.final_error() != nullptr);
    r.ensure_extras().name = "job";
    r.record_failure({1, "std::runtime_error", "failed once", 10, 20});
    CHECK(r.extras->last_error == "failed once");
    CHECK(r.extras->last_error_type == "std::runtime_error");
    CHECK(r.extras->failures.size() == 1);
    CHECK_FALSE(watch.expired());

    slab->release(i);
    CHECK(watch.expired()); // the callable (and its captures) died with the slot's last ref
    CHECK(r.content == ax::detail::Content::none);
    CHECK(r.final_error() == nullptr);
    REQUIRE(r.extras != nullptr);  // kept for reuse...
    CHECK(r.extras->name.empty()); // ...but emptied
    CHECK(r.extras->last_error.empty());
    CHECK(r.extras->failures.empty());
}

TEST_CASE("TaskSlab::acquire_many takes distinct slots across refills and chunks; they come back",
          "[slab]") {
    auto slab = std::make_unique<TaskSlab>();
    // More than a chunk in uneven takes: each crosses cache refills, the last a new chunk.
    std::vector<std::uint32_t> all;
    std::vector<std::uint32_t> buf(300);
    while (all.size() < TaskSlab::chunk_size + 10) {
        const auto want = static_cast<std::uint32_t>(
            std::min<std::size_t>(buf.size(), TaskSlab::chunk_size + 10 - all.size()));
        const std::uint32_t got = slab->acquire_many(buf.data(), want);
        REQUIRE(got == want);
        for (std::uint32_t k = 0; k < got; ++k) {
            CHECK(slab->at(buf[k]).refs.load() == 0);
            slab->at(buf[k]).refs.store(1, std::memory_order_relaxed);
            all.push_back(buf[k]);
        }
    }
    CHECK(std::set<std::uint32_t>(all.begin(), all.end()).size() == all.size());
    CHECK(slab->capacity() == 2 * TaskSlab::chunk_size);
    // Given back (as admit_many gives back the slots a throwing move left unfilled), they are
    // taken again before the slab grows.
    for (const auto i : all)
        slab->release(i);
    std::set<std::uint32_t> again;
    while (again.size() < all.size()) {
        const auto want = static_cast<std::uint32_t>(
            std::min<std::size_t>(buf.size(), all.size() - again.size()));
        REQUIRE(slab->acquire_many(buf.data(), want) == want);
        again.insert(buf.begin(), buf.begin() + want);
    }
    CHECK(again.size() == all.size());
    CHECK(slab->capacity() == 2 * TaskSlab::chunk_size);
}

TEST_CASE("TaskSlab: slots freed anywhere come back before the slab grows", "[slab]") {
    auto slab = std::make_unique<TaskSlab>();
    std::vector<std::uint32_t> all;
    for (std::uint32_t i = 0; i < TaskSlab::chunk_size; ++i)
        all.push_back(acquire_owned(*slab));
    REQUIRE(slab->capacity() == TaskSlab::chunk_size);

    SECTION("one at a time on this thread: more than a cache holds spills to the shared stack") {
        for (const auto i : all)
            slab->release(i);
        std::set<std::uint32_t> again;
        for (std::uint32_t k = 0; k < TaskSlab::chunk_size; ++k)
            again.insert(acquire_owned(*slab));
        CHECK(again.size() == TaskSlab::chunk_size);
        CHECK(*again.rbegin() == TaskSlab::chunk_size - 1);
        CHECK(slab->capacity() == TaskSlab::chunk_size);
    }
    SECTION("in batches (release_many), larger than a cache") {
        slab->release_many(all.data(), 200);
        std::set<std::uint32_t> again;
        for (std::uint32_t k = 0; k < 200; ++k)
            again.insert(acquire_owned(*slab));
        CHECK(again == std::set<std::uint32_t>(all.begin(), all.begin() + 200));
        CHECK(slab->capacity() == TaskSlab::chunk_size);
    }
    SECTION("on another thread, whose cache keeps them until this one runs dry") {
        // The other thread's stripe cache holds what it freed (or this thread's, if the two
        // numbers pick one stripe): either way they are found before a chunk is added.
        std::thread([&] {
            for (std::uint32_t k = 0; k < 10; ++k)
                slab->release(all[k]);
        }).join();
        std::set<std::uint32_t> again;
        for (std::uint32_t k = 0; k < 10; ++k)
            again.insert(acquire_owned(*slab));
        CHECK(again == std::set<std::uint32_t>(all.begin(), all.begin() + 10));
        CHECK(slab->capacity() == TaskSlab::chunk_size);
        // Nothing is left anywhere: the next slot is a new chunk's first.
        CHECK(acquire_owned(*slab) == TaskSlab::chunk_size);
    }
}

TEST_CASE("TaskSlab: slots freed while the slab grows are all found again", "[slab][threads]") {
    // Threads hold growing piles of slots and free half of each pile at a time, so chunks are
    // added while freed slots reach the shared stack (which is reallocated as the slab grows).
    // Afterwards every slot is free: taking capacity() of them must need no further chunk.
    // No Catch assertion on the threads (they are not thread-safe): failures are counted.
    auto slab = std::make_unique<TaskSlab>();
    constexpr int threads_n = 4;
    std::atomic<int> exhausted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < threads_n; ++t) {
        threads.emplace_back([&] {
            std::vector<std::uint32_t> held;
            for (int n = 0; n < 20000; ++n) {
                const std::uint32_t slot = slab->acquire();
                if (slot == TaskSlab::no_slot) {
                    exhausted.fetch_add(1);
                    continue;
                }
                slab->at(slot).refs.store(1, std::memory_order_relaxed);
                held.push_back(slot);
                if (held.size() >= 3000) {
                    for (std::size_t k = 0; k < held.size(); k += 2)
                        slab->release(held[k]);
                    std::vector<std::uint32_t> kept;
                    for (std::size_t k = 1; k < held.size(); k += 2)
                        kept.push_back(held[k]);
                    held.swap(kept);
                }
            }
            slab->release_many(held.data(), held.size());
        });
    }
    for (auto& t : threads)
        t.join();
    CHECK(exhausted.load() == 0);
    const std::size_t capacity = slab->capacity();
    // One thread's pile alone reaches 3,000 slots (the threads may run one after another).
    CHECK(capacity >= 3 * TaskSlab::chunk_size);
    std::set<std::uint32_t> all;
    for (std::size_t k = 0; k < capacity; ++k)
        all.insert(acquire_owned(*slab));
    CHECK(all.size() == capacity);
    CHECK(slab->capacity() == capacity);
}

TEST_CASE("TaskSlab: every slot of a large slab can be free at once", "[slab]") {
    // The shared stack is stored in blocks of 64 chunks' slots: free more than one block holds.
    constexpr std::uint32_t slots = 70 * TaskSlab::chunk_size;
    auto slab = std::make_unique<TaskSlab>();
    std::vector<std::uint32_t> all;
    all.reserve(slots);
    for (std::uint32_t k = 0; k < slots; ++k)
        all.push_back(acquire_owned(*slab));
    const std::size_t capacity = slab->capacity();
    slab->release_many(all.data(), all.size());
    std::set<std::uint32_t> again;
    for (std::uint32_t k = 0; k < slots; ++k)
        again.insert(acquire_owned(*slab));
    CHECK(again == std::set<std::uint32_t>(all.begin(), all.end()));
    CHECK(slab->capacity() == capacity);
}

TEST_CASE("TaskSlab generation skips 0 when it wraps", "[slab]") {
    auto slab = std::make_unique<TaskSlab>();
    const std::uint32_t i = acquire_owned(*slab);
    slab->at(i).generation.store(std::numeric_limits<std::uint32_t>::max());
    slab->release(i);
    CHECK(slab->at(i).generation.load() == 1);
}

TEST_CASE("TaskSlab::try_pin pins live IDs and rejects stale ones", "[slab]") {
    auto slab = std::make_unique<TaskSlab>();
    // Cycle the slot once so its generation is certainly non-zero whatever acquire() starts at.
    const std::uint32_t i = acquire_owned(*slab);
    slab->release(i);
    REQUIRE(slab->acquire() == i);
    TaskRecord& r = slab->at(i);
    r.refs.store(1);
    const std::uint32_t g = r.generation.load();
    REQUIRE(g != 0);
    const TaskId live = TaskId::make(i, g);

    SECTION("a live ID pins, release unpins") {
        TaskRecord* p = slab->try_pin(live);
        REQUIRE(p == &r);
        CHECK(r.refs.load() == 2);
        TaskRecord* p2 = slab->try_pin(live);
        CHECK(p2 == &r);
        CHECK(r.refs.load() == 3);
        slab->release(i);
        slab->release(i);
        CHECK(r.refs.load() == 1);
        CHECK(r.generation.load() == g);
    }
    SECTION("a stale generation is rejected and leaves refs alone") {
        CHECK(slab->try_pin(TaskId::make(i, g + 1)) == nullptr);
        CHECK(slab->try_pin(TaskId::make(i, g - 1 == 0 ? g + 2 : g - 1)) == nullptr);
        CHECK(r.refs.load() == 1);
        CHECK(r.generation.load() == g);
    }
    SECTION("an ID whose task was recycled is rejected") {
        slab->release(i); // last reference: recycled, generation g + 1
        CHECK(r.refs.load() == 0);
        CHECK(slab->try_pin(live) == nullptr);
        CHECK(r.refs.load() == 0);
        // Reused by a new task: the old ID still does not alias it.
        REQUIRE(slab->acquire() == i);
        r.refs.store(1);
        CHECK(slab->try_pin(live) == nullptr);
        CHECK(r.refs.load() == 1);
        TaskRecord* p = slab->try_pin(TaskId::make(i, g + 1));
        CHECK(p == &r);
        CHECK(r.refs.load() == 2);
        slab->release(i);
    }
    SECTION("invalid IDs and indices beyond the slab are rejected") {
        CHECK(slab->try_pin(TaskId{}) == nullptr);
        CHECK(slab->try_pin(TaskId::make(i, 0)) == nullptr);
        CHECK(slab->try_pin(TaskId::make(TaskSlab::chunk_size, 1)) == nullptr);
        CHECK(slab->try_pin(TaskId::make(std::numeric_limits<std::uint32_t>::max(), 1)) == nullptr);
        CHECK(r.refs.load() == 1);
    }
    SECTION("a free slot (refs 0) is not pinned") {
        const std::uint32_t j = slab->acquire(); // acquired, refs still 0
        CHECK(slab->try_pin(TaskId::make(j, slab->at(j).generation.load() + 1)) == nullptr);
        CHECK(slab->try_pin(TaskId::make(j, 1)) == nullptr);
        CHECK(slab->at(j).refs.load() == 0);
    }
}

TEST_CASE("TaskSlab: 4 threads acquire/release concurrently, no slot handed out twice",
          "[slab][threads]") {
    auto slab = std::make_unique<TaskSlab>();
    slab->release(acquire_owned(*slab)); // create the first chunk
    std::vector<std::uint32_t> generation_before;
    for (std::uint32_t i = 0; i < TaskSlab::chunk_size; ++i)
        generation_before.push_back(slab->at(i).generation.load());
    constexpr int threads_n = 4;
    constexpr int rounds = 100000;
    constexpr std::uint32_t tracked = 4 * TaskSlab::chunk_size;
    std::vector<std::atomic<bool>> in_use(tracked);
    for (auto& f : in_use)
        f.store(false);
    std::atomic<std::uint64_t> double_handouts{0};
    std::atomic<std::uint64_t> out_of_range{0};
    std::atomic<std::uint64_t> exhausted{0};

    std::vector<std::thread> threads;
    for (int t = 0; t < threads_n; ++t) {
        threads.emplace_back([&] {
            for (int n = 0; n < rounds; ++n) {
                const std::uint32_t i = slab->acquire();
                if (i == TaskSlab::no_slot) {
                    exhausted.fetch_add(1);
                    continue;
                }
                if (i >= tracked) {
                    out_of_range.fetch_add(1);
                    continue;
                }
                if (in_use[i].exchange(true, std::memory_order_acq_rel))
                    double_handouts.fetch_add(1);
                slab->at(i).refs.store(1, std::memory_order_relaxed);
                in_use[i].store(false, std::memory_order_release);
                slab->release(i);
            }
        });
    }
    for (auto& t : threads)
        t.join();

    CHECK(double_handouts.load() == 0);
    CHECK(out_of_range.load() == 0);
    CHECK(exhausted.load() == 0);
    // At most 4 slots are ever held at once, so one chunk suffices.
    CHECK(slab->capacity() == TaskSlab::chunk_size);
    // Every release recycled exactly once: generations advanced by the total round count.
    std::uint64_t advanced = 0;
    for (std::uint32_t i = 0; i < TaskSlab::chunk_size; ++i)
        advanced += slab->at(i).generation.load() - generation_before[i];
    CHECK(advanced == std::uint64_t{threads_n} * rounds);
    // The free list is intact: all chunk_size slots can be taken, each once.
    std::set<std::uint32_t> all;
    for (std::uint32_t i = 0; i < TaskSlab::chunk_size; ++i)
        all.insert(slab->acquire());
    CHECK(all.size() == TaskSlab::chunk_size);
    CHECK(*all.rbegin() == TaskSlab::chunk_size - 1);
    CHECK(slab->capacity() == TaskSlab::chunk_size);
}
