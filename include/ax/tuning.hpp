// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ax {

/// Every internal constant of the scheduler in one place, each with the trade-off it strikes.
/// These are not Config knobs: they fix data layouts or hot-path shapes, were measured on the
/// 2-core development machine, and change only with a benchmark that shows why (bench/micro,
/// bench/thumbnails). The static_asserts below keep an edit from breaking what the code assumes.
struct Tuning {
    // ---- record layout (TaskRecord, TaskSlab; not templates, so plain constants) ----------------

    /// Bytes of a capture (or a result) stored inline in a task record (default 32: four
    /// pointers, a std::function, a std::string). Larger fits more lambdas without an allocation
    /// but grows the record (112 B, asserted in detail/record.hpp) and so the memory of every
    /// queued task (40 B, the first round's value, cost 16 B per task: records are 16-aligned);
    /// smaller sends ordinary captures to the heap.
    static constexpr std::size_t small_buffer_size = 32;
    /// Records per slab chunk, as a power of two (default 2^10). A chunk is allocated at once when
    /// every free slot is taken: bigger chunks grow less often but cost more memory up front
    /// (1,024 × 112 B = 112 KiB).
    static constexpr std::uint32_t slab_chunk_bits = 10;
    /// Most chunks a slab may hold (default 2^14, so 16 M live records). The chunk table is
    /// allocated up front (8 B per entry, 128 KiB); a larger cap costs that table, a smaller one
    /// refuses submits (too_many_tasks) sooner.
    static constexpr std::uint32_t slab_max_chunks = 1u << 14;
    /// Chunks a slab allocates with new[] before it takes its chunks from 2 MiB huge-page
    /// regions (default 64, ~7 MiB of records: 65,536 tasks alive at once). Past it, a fresh
    /// record costs its first touch ~16 ns instead of ~105 ns on the development VM, where a
    /// fresh 4 KiB page faults in at ~3.9 us (detail/huge_region.hpp); the price is memory taken
    /// 2 MiB (18 chunks) at a time. Lower brings the cheap growth to smaller backlogs and the
    /// 2 MiB steps to smaller schedulers; slab_max_chunks turns regions off (Config::huge_pages
    /// does, per scheduler).
    static constexpr std::uint32_t slab_huge_after_chunks = 64;
    /// Stripes of a slab's free-slot cache (default 8, a power of two; 256 B each). Threads
    /// are spread over them by thread_stripe, so up to this many threads take and return slots
    /// without sharing a line; more cost 256 B of slab each and a longer sweep before a chunk
    /// is added, fewer put more threads on one stripe's lock.
    static constexpr std::size_t slab_cache_stripes = 8;
    /// How many takes ahead TaskSlab::acquire asks for a record (default 4). A recycled record
    /// sits in the cache of the worker that freed it; asked for this far ahead it arrives while
    /// the tasks before it are built (on this VM a line moves between cores in 40-230 ns, a
    /// post takes ~70 ns). Higher hides slower transfers but holds more lines in flight.
    static constexpr std::uint32_t slab_prefetch_ahead = 4;
    /// Mutex/condvar pairs blocking waits park on (default 64). More stripes wake fewer unrelated
    /// waiters per notify; each costs a cache line (or two) in every slab.
    static constexpr std::size_t wait_stripes = 64;

    // ---- dispatch
    // ---------------------------------------------------------------------------------

    /// Dispatches between two swaps of the queue's standby list when the lanes are not dry
    /// (default 16). Lower lets a new high-priority task overtake sooner; higher bounces the queue
    /// lock's cache line between producers and the dispatcher less often.
    static constexpr std::uint32_t swap_period = 16;
    /// Most tasks one worker reserves per dispatch (default 8), used only while tasks are tiny.
    /// More amortises the dispatch lock further but lets one worker hoard work others could run.
    static constexpr std::size_t max_reserve = 8;
    /// Mean attempt duration (seconds) below which tasks count as tiny (default 20 µs): batched
    /// reservations and no chain wake. Higher batches tasks long enough to leave a core idle;
    /// lower pays the dispatch lock and a wake per task for microsecond work.
    static constexpr double tiny_task_s = 20e-6;
    /// Nested helping waits on one worker past which a wait only runs its own reservations and
    /// subtasks, not queued tasks (default 16). Deeper resolves longer wait chains on one worker
    /// at the price of stack depth (one task body per level).
    static constexpr std::uint32_t max_help_depth = 16;
    /// Shortest and longest block of a helping wait with nothing to run (default 50 µs, 2 ms,
    /// doubling in between). Shorter reacts sooner to a subtask entering the lane with no worker
    /// free; longer wastes less CPU on a wait for a long task.
    static constexpr std::chrono::microseconds help_backoff_min{50};
    static constexpr std::chrono::microseconds help_backoff_max{2000};

    /// Yields a refused post_wait / submit_wait makes, re-reading the queue's length, before it
    /// parks on the futex (default 16). Each yield lends the producer's core to a draining
    /// worker; a queue of microsecond tasks is often back at its room mark within them, which
    /// spares a futex wait and wake. 0 parks at once (no CPU spent while the queue is slow);
    /// more burns a little CPU when tasks are long. Alternating runs of 1M tiny tasks on a
    /// loaded 2-core machine: 16 yields 3.52 M/s median against 2.98 M/s parking at once
    /// (noisy: 2.10 - 5.53 and 2.43 - 4.39).
    static constexpr std::uint32_t room_yields = 16;

    /// A worker on the default clock (std::chrono::steady_clock, x86) reuses its last clock
    /// reading as the end of an attempt when fewer than this many time-stamp-counter ticks have
    /// passed since that reading (default 2,048: at most ~2 µs on any TSC of 1 GHz or more). A
    /// clock read costs 25 - 50 ns here against ~10 - 20 ns for the TSC, so a run of tiny tasks
    /// pays one read per ~2 µs instead of one per task; the price is that such a task's
    /// `finished` (and the next one's `started`) may be up to that much early, and its own
    /// measured duration is 0 while the next reading's task absorbs the time (sums stay exact).
    /// 0 turns it off (a reading per attempt).
    static constexpr std::uint64_t stale_end_ticks = 2048;
    /// A submitting thread on the default clock (x86) derives a task's enqueue stamp from the
    /// time-stamp counter while fewer than this many ticks have passed since its last clock
    /// reading (default 2,048, ~0.85 µs at 2.4 GHz): the reading plus the elapsed ticks at a
    /// calibrated upper-bound rate, so the stamp is never early (query()'s `enqueued` is not
    /// before a time taken before the submit) and late by a few tens of nanoseconds at most.
    /// A stream of submits then reads the clock about once per microsecond instead of once per
    /// task (~13 ns per stamp against ~30 - 45 ns). Longer reads the clock less but widens how
    /// late a stamp may be (1/256 of it) and how long a wrong rate could go unnoticed; 0 turns it
    /// off (a reading per submit). See detail/enqueue_stamp.hpp.
    static constexpr std::uint64_t enqueue_stamp_ticks = 2048;

    // ---- groups -------------------------------------------------------------------------------

    /// Most groups one scheduler registers (default 1,024; GroupId is 16 bits).
    static constexpr std::size_t max_groups = 1024;
    /// Group states allocated together when a group needs them (default 64, ~6 KiB). The first
    /// registration pays one chunk; a scheduler without groups pays nothing. Bigger chunks mean
    /// fewer allocations and more unused state.
    static constexpr std::size_t group_chunk = 64;

    // ---- history ------------------------------------------------------------------------------

    /// Finished tasks a worker collects before it takes the history lock once (default 32).
    /// Bigger takes the lock less often; a finished task becomes evictable (and its slot
    /// reusable) only when its batch is flushed.
    static constexpr std::size_t history_batch = 32;

    // ---- idle workers and spin locks ----------------------------------------------------------

    /// How long one idle worker spins for work before it parks (default 20 µs). Longer catches
    /// more tasks without a futex wake (~13 µs here) but burns a core a producer may need.
    static constexpr std::chrono::microseconds idle_spin{20};
    /// An idle spin yields the CPU every this many polls (a power of two, default 16), so on an
    /// oversubscribed machine the spinner does not starve the producer.
    static constexpr std::uint32_t idle_spin_yield_every = 16;
    /// Before a parking worker goes to sleep, it yields up to this many times, checking for a
    /// wake after each (default 4, what libstdc++'s atomic wait did before the notifier called
    /// the futex itself). A wake that lands in those yields costs neither side a sleep: more
    /// yields catch more of them on a busy machine, at one sched_yield call each when idle.
    static constexpr std::uint32_t park_yields = 4;
    /// A wake into a pool whose workers have all been asleep at least this long (default
    /// 100 µs) goes to the worker that went to sleep last, the one whose stack and task
    /// structures are most likely still in the caches; with four workers (min_workers' default)
    /// the kernel's own order, longest asleep first, cost an idle submit 1.3 - 1.8 µs more than
    /// a pool of two. Shorter idle stays in the kernel's order, which measured 7 - 24 % faster
    /// for the default Config's refuse-and-retry stream, where nearly every wake follows a park
    /// by under 50 µs (docs/hot-path.md, "The warm wake"). It is also how long the last worker to
    /// park sleeps before it asks for wake_slice. Shorter: both start sooner after a burst
    /// (streams pay the preempted producer); longer: fewer idle spells get either.
    static constexpr std::chrono::microseconds warm_wake_after{100};
    /// The time slice the last worker of an idle pool asks the kernel for after sleeping
    /// warm_wake_after (default 100 µs, the shortest Linux grants; 0: never ask). A woken thread
    /// with a slice shorter than the running one's may preempt it, so the worker the kernel puts
    /// on the submitting thread's CPU (nearly every idle wake-up on the development VM) runs as
    /// the wake call returns instead of when the submitter blocks: idle submit-to-start p50
    /// ~0.75 × the textbook pool's instead of ~1.0 ×. The price: a producer submitting into an
    /// idle pool gives its CPU to that task at once. The worker returns to the default slice
    /// after its next task; Linux 6.12 and later only (EEVDF), elsewhere nothing changes.
    static constexpr std::chrono::nanoseconds wake_slice{100'000};
    /// A contended SpinLock yields every this many polls (default 64): sooner gives a preempted
    /// holder its CPU back sooner; later keeps a waiter off the run queue for short holds.
    static constexpr std::uint32_t spin_lock_yield_every = 64;

    // ---- telemetry ----------------------------------------------------------------------------

    /// Weight of the previous CPU-utilisation estimate in each tick's smoothing (default 0.7; the
    /// new sample gets the rest). Higher ignores short bursts; lower reacts within fewer ticks.
    static constexpr double cpu_smoothing = 0.7;
    /// Longest retry_after a refusal suggests (default 60 s), whatever the drain rate says; a
    /// stalled pool must not tell producers to wait for hours.
    static constexpr std::chrono::microseconds retry_after_max{60'000'000};
    /// Shortest retry_after a backpressure refusal suggests while the queue holds more than
    /// that much work above its room mark (default 1 ms; the hint stays the time to free one
    /// slot where that is longer, and never covers more than the drain to the room mark). A
    /// producer obeying a one-slot hint on a queue that drains a task every few tens of
    /// microseconds wakes once per task, and on a small machine each wake takes a core from a
    /// worker: 4,000 tasks of 0.13 ms on 2 cores (family gen-10) ran 1.11 x fixed4 with ~1,400
    /// producer wakes, 1.00 x with a producer that waited for the room mark; with this floor
    /// ~400 wakes, 1.02 - 1.04 x (medians on a loaded VM, noisy; docs/bench/family.md).
    /// Longer: fewer wakes, a queue that swings further below its limit; 0 gives the one-slot
    /// hint. Kept well under a tick (dispatch_interval, 10 ms) so that a held-back producer is
    /// still refused once per tick and the controller still reads the queue as saturated.
    static constexpr std::chrono::microseconds retry_after_floor{1000};
};

static_assert(Tuning::small_buffer_size % 8 == 0 && Tuning::small_buffer_size >= 16,
              "the inline buffer holds at least a pointer pair, 8-byte aligned");
static_assert(Tuning::slab_chunk_bits >= 4 && Tuning::slab_chunk_bits <= 20);
static_assert((std::uint64_t{Tuning::slab_max_chunks} << Tuning::slab_chunk_bits) <= UINT32_MAX,
              "slot indices are 32 bits (and index + 1 must not overflow)");
static_assert(Tuning::slab_huge_after_chunks <= Tuning::slab_max_chunks);
static_assert(Tuning::wait_stripes > 0);
static_assert(Tuning::slab_cache_stripes != 0 &&
              (Tuning::slab_cache_stripes & (Tuning::slab_cache_stripes - 1)) == 0);
static_assert(Tuning::slab_prefetch_ahead >= 1 && Tuning::slab_prefetch_ahead <= 32);
static_assert(Tuning::swap_period >= 1);
static_assert(Tuning::max_reserve >= 1 && Tuning::max_reserve <= 64);
static_assert(Tuning::tiny_task_s > 0.0 && Tuning::tiny_task_s < 1e-3);
static_assert(Tuning::max_help_depth >= 1);
static_assert(Tuning::help_backoff_min.count() > 0 &&
              Tuning::help_backoff_min <= Tuning::help_backoff_max);
static_assert(Tuning::max_groups >= 1 && Tuning::max_groups < 65535, "GroupId is 16 bits");
static_assert(Tuning::group_chunk >= 1 && Tuning::max_groups % Tuning::group_chunk == 0);
static_assert(Tuning::history_batch >= 1);
static_assert((Tuning::idle_spin_yield_every & (Tuning::idle_spin_yield_every - 1)) == 0,
              "idle_spin_yield_every is a power of two (tested with a mask)");
static_assert(Tuning::spin_lock_yield_every >= 1);
static_assert(Tuning::cpu_smoothing >= 0.0 && Tuning::cpu_smoothing < 1.0);
static_assert(Tuning::retry_after_max.count() >= 1);
static_assert(Tuning::retry_after_floor.count() >= 0 &&
              Tuning::retry_after_floor < Tuning::retry_after_max);

} // namespace ax
