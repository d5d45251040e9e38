// The randomized stress engine shared by tests/test_stress.cpp (a few thousand operations under
// Catch) and bench/stress_long.cpp (millions, standalone). It depends on ax and the standard
// library only, and reports violated invariants in its result instead of asserting, so each
// caller decides how to fail.
//
// Producers submit, cancel and query at every priority while bodies succeed, throw (std and
// non-std), fail permanently, time out, ignore their stop token for a while, heartbeat past their
// timeout and belong to a limited group, under a config small enough that backpressure,
// resizing and retries all happen. Each producer keeps a bounded window of live handles (so
// millions of operations need no more memory than a few thousand) and checks every task as it
// leaves the window: terminal, in a state its kind allows, with the value or exception its body
// produced, cancelled if cancel() said yes, and in the same terminal state query() reported.
// At the end the scheduler's totals must equal what the handles and refusals add up to.
#pragma once

#include <algorithm>
#include <atomic>
#include <ax/scheduler.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ax_stress {

struct Options {
    unsigned seed = 12345;
    unsigned producers = 4;
    /// Producer loop iterations, all producers together: each is one submit (admitted or
    /// refused), cancel or query.
    std::uint64_t operations = 6000;
    /// Live handles per producer before it waits for its oldest task.
    std::size_t window = 96;
    /// How long any single task may take to become terminal before it counts as hung.
    std::chrono::seconds hang_guard{60};
    /// Called (from a producer thread) each time `progress_every` more operations are done.
    std::function<void(std::uint64_t done)> progress;
    std::uint64_t progress_every = 1'000'000;
};

struct Result {
    std::uint64_t operations = 0;
    std::uint64_t submits = 0; ///< Submit calls, admitted or not.
    std::uint64_t admitted = 0;
    std::uint64_t refused = 0; ///< queue_full / busy.
    /// group_full / breaker_open: the limited group's own bound (its parked tasks are outside
    /// the shared queue's count, so it can fill up on its own). Counted by the scheduler in
    /// refused_other, never in rejected (a group's refusals are not load on the queue).
    std::uint64_t refused_group = 0;
    std::uint64_t cancels = 0;
    std::uint64_t cancels_accepted = 0;
    std::uint64_t queries = 0;
    /// Terminal states as the handles saw them.
    std::uint64_t succeeded = 0;
    std::uint64_t dead_lettered = 0;
    std::uint64_t cancelled = 0;
    /// The scheduler's own view at the end.
    ax::MetricsTotals totals;
    double elapsed_s = 0.0;
    /// Every violated invariant, one line each (capped; `violations` counts them all).
    std::vector<std::string> failures;
    std::uint64_t violations = 0;

    [[nodiscard]] bool ok() const { return violations == 0; }
};

/// What a stress task's body does. The switch in make_body() and the checks in Checker agree on
/// what each kind may end as.
enum class Kind : std::uint8_t {
    succeed,        ///< Returns its value.
    throw_std,      ///< Always throws std::runtime_error: dead-lettered once retries run out.
    throw_int_once, ///< Throws int on attempt 1, then succeeds (dead-lettered without retries).
    throw_struct,   ///< Always throws a non-std struct.
    permanent,      ///< Throws ax::PermanentError: dead-lettered after one attempt.
    heartbeat,      ///< Runs past its timeout but heartbeats all along: must not time out.
    time_out,       ///< Waits for its stop token: only the watchdog (or a cancel) ends it.
    ignore_stop,    ///< Overruns its timeout ignoring the token, then returns a value.
    subtasks,       ///< Spawns 1-3 children (one may fail once and retry), then waits for them, or
                    ///< joins them with when_all and waits for the join; always succeeds.
};

/// A non-std exception type.
struct StressOdd {
    int code;
};

namespace detail {

constexpr int group_limit = 2;

/// Bodies in the limited group count themselves in and out, so a breach of the group limit is
/// seen by the body that breaches it.
struct Shared {
    std::atomic<int> group_running{0};
    std::atomic<int> group_peak{0};
    std::atomic<std::uint64_t> ops{0};
    std::mutex failures_mutex;
    std::vector<std::string> failures;
    std::atomic<std::uint64_t> violations{0};
    /// Set at the first hung task: the rest get a short guard, so a lost task costs one hang
    /// guard, not one per task behind it.
    std::atomic<bool> hung{false};
    /// Subtasks (children and joins) admitted by subtask bodies, and how they ended; every one
    /// is awaited by its parent, so these are final once the parents are.
    std::atomic<std::uint64_t> children{0};
    std::atomic<std::uint64_t> child_succeeded{0};
    std::atomic<std::uint64_t> child_dead_lettered{0};
    std::atomic<std::uint64_t> child_cancelled{0};

    void count_child(ax::TaskState s) {
        switch (s) {
        case ax::TaskState::succeeded:
            child_succeeded.fetch_add(1, std::memory_order_relaxed);
            break;
        case ax::TaskState::dead_lettered:
            child_dead_lettered.fetch_add(1, std::memory_order_relaxed);
            break;
        case ax::TaskState::cancelled:
            child_cancelled.fetch_add(1, std::memory_order_relaxed);
            break;
        default:
            fail("a subtask its parent waited for is not terminal: " +
                 std::string(ax::to_string(s)));
        }
    }

    void fail(std::string what) {
        violations.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard lock(failures_mutex);
        if (failures.size() < 50)
            failures.push_back(std::move(what));
    }
};

inline int kind_value(Kind k, std::uint32_t salt) {
    return static_cast<int>(k) * 1'000'000 + static_cast<int>(salt % 1'000'000);
}

/// The body of a stress task of kind `k`. Returns kind_value(k, salt) when it succeeds.
inline auto make_body(Kind k, std::uint32_t salt, bool in_group, Shared* shared) {
    return [k, salt, in_group, shared](ax::TaskContext& ctx) -> int {
        struct GroupCount {
            Shared* s;
            bool on;
            GroupCount(Shared* sh, bool in) : s(sh), on(in) {
                if (!on)
                    return;
                const int now = s->group_running.fetch_add(1, std::memory_order_acq_rel) + 1;
                int peak = s->group_peak.load(std::memory_order_relaxed);
                while (now > peak && !s->group_peak.compare_exchange_weak(peak, now))
                    ;
            }
            ~GroupCount() {
                if (on)
                    s->group_running.fetch_sub(1, std::memory_order_acq_rel);
            }
        } count(shared, in_group);
        using namespace std::chrono_literals;
        switch (k) {
        case Kind::succeed:
            break;
        case Kind::throw_std:
            throw std::runtime_error("stress: fails");
        case Kind::throw_int_once:
            if (ctx.attempt() == 1)
                throw 7;
            break;
        case Kind::throw_struct:
            throw StressOdd{static_cast<int>(salt)};
        case Kind::permanent:
            throw ax::PermanentError("stress: permanent");
        case Kind::heartbeat:
            // 30 x 2 ms = 60 ms against a 50 ms timeout: only the heartbeats keep it alive.
            for (int i = 0; i < 30; ++i) {
                if (ctx.stop_requested())
                    break;
                std::this_thread::sleep_for(2ms);
                ctx.heartbeat();
            }
            break;
        case Kind::time_out: {
            // Returns only when stopped; the hang guard lets a broken watchdog surface as a
            // wrong outcome (succeeded) instead of a hang.
            const auto guard = std::chrono::steady_clock::now() + 5s;
            while (!ctx.stop_requested() && std::chrono::steady_clock::now() < guard)
                std::this_thread::sleep_for(200us);
            break;
        }
        case Kind::ignore_stop:
            // Long enough past its 2 ms timeout to be orphaned and taken over (timeout_grace).
            std::this_thread::sleep_for(40ms);
            break;
        case Kind::subtasks: {
            const int n = 1 + static_cast<int>(salt % 3);
            std::vector<ax::TaskHandle<int>> kids;
            int want = 0;
            for (int c = 0; c < n; ++c) {
                const bool flaky = c == 0 && salt % 4 == 0;
                auto kid = ctx.submit(
                    [c, flaky](ax::TaskContext& kctx) {
                        if (flaky && kctx.attempt() == 1)
                            throw std::runtime_error("stress: child fails once");
                        return c + 1;
                    },
                    {.max_retries = flaky ? 1 : 0});
                if (!kid) {
                    shared->fail("subtask refused: " + kid.error().message());
                    continue;
                }
                shared->children.fetch_add(1, std::memory_order_relaxed);
                want += c + 1;
                kids.push_back(std::move(*kid));
            }
            int got = 0;
            if (salt % 2 == 0) {
                for (auto& kid : kids) {
                    kid.wait();
                    shared->count_child(kid.state());
                    got += kid.state() == ax::TaskState::succeeded ? kid.get() : 0;
                }
            } else {
                // Non-blocking join; the parent then waits for the join (helping meanwhile).
                auto join = ctx.when_all(std::move(kids), [shared](auto& done) {
                    int sum = 0;
                    for (auto& kid : done) {
                        shared->count_child(kid.state());
                        sum += kid.state() == ax::TaskState::succeeded ? kid.get() : 0;
                    }
                    return sum;
                });
                if (!join) {
                    shared->fail("join refused: " + join.error().message());
                } else {
                    shared->children.fetch_add(1, std::memory_order_relaxed);
                    join->wait();
                    shared->count_child(join->state());
                    got = join->state() == ax::TaskState::succeeded ? join->get() : -1;
                }
            }
            if (got != want)
                shared->fail("subtask results add up to " + std::to_string(got) + ", not " +
                             std::to_string(want));
            break;
        }
        }
        return kind_value(k, salt);
    };
}

/// One task a producer still holds.
struct Pending {
    ax::TaskHandle<int> handle;
    Kind kind = Kind::succeed;
    std::uint32_t salt = 0;
    ax::Priority priority = ax::Priority::normal;
    std::uint8_t max_retries = 0;
    bool cancel_accepted = false;
    /// A terminal state query() reported, if any: the handle must end the same.
    std::optional<ax::TaskState> queried_terminal;
};

struct Tally {
    std::uint64_t submits = 0, admitted = 0, refused = 0, refused_group = 0, cancels = 0,
                  cancels_accepted = 0, queries = 0, succeeded = 0, dead_lettered = 0,
                  cancelled = 0;
};

/// Waits for `p` to end and checks its outcome against what its kind allows.
template <class Sched>
void settle(Pending& p, Tally& t, Shared& shared, Sched& sched, std::chrono::seconds guard) {
    const std::string who =
        "task " + p.handle.id().to_string() + " kind " + std::to_string(static_cast<int>(p.kind));
    if (!p.handle.wait_for(shared.hung.load() ? std::chrono::seconds(1) : guard)) {
        shared.hung.store(true);
        // Say where it is stuck and what the scheduler looks like, so a hang is diagnosable
        // from the report alone.
        const auto info = sched.query(p.handle.id());
        const auto m = sched.metrics();
        std::string where = info ? std::string(ax::to_string(info->state)) +
                                       " attempts=" + std::to_string(info->attempts) +
                                       " cancel_requested=" + std::to_string(info->cancel_requested)
                                 : std::string("unknown to query");
        shared.fail(who + " (priority " + std::string(ax::to_string(p.priority)) +
                    "): not terminal within the hang guard: " + where + "; queue " +
                    std::to_string(m.queue_length[0]) + "/" + std::to_string(m.queue_length[1]) +
                    "/" + std::to_string(m.queue_length[2]) + ", workers current " +
                    std::to_string(m.workers.current) + " busy " + std::to_string(m.workers.busy) +
                    " target " + std::to_string(m.workers.target) + ", waiting_retry " +
                    std::to_string(m.waiting_retry));
        return;
    }
    const ax::TaskState s = p.handle.state();
    if (p.queried_terminal && *p.queried_terminal != s)
        shared.fail(who + ": query said " + std::string(ax::to_string(*p.queried_terminal)) +
                    ", handle says " + std::string(ax::to_string(s)));
    if (p.cancel_accepted && s != ax::TaskState::cancelled)
        shared.fail(who + ": cancel() returned true but it ended " + std::string(ax::to_string(s)));
    switch (s) {
    case ax::TaskState::succeeded:
        ++t.succeeded;
        break;
    case ax::TaskState::dead_lettered:
        ++t.dead_lettered;
        break;
    case ax::TaskState::cancelled:
        ++t.cancelled;
        break;
    default:
        shared.fail(who + ": ready but in state " + std::string(ax::to_string(s)));
        return;
    }
    if (s == ax::TaskState::cancelled) {
        try {
            (void)p.handle.get();
            shared.fail(who + ": cancelled, yet get() returned a value");
        } catch (const ax::TaskCancelled&) {
        } catch (...) {
            shared.fail(who + ": cancelled, yet get() threw something else");
        }
        return;
    }
    // What each kind may end as (cancellation aside, handled above).
    bool may_succeed = false;
    switch (p.kind) {
    case Kind::succeed:
    case Kind::heartbeat:
    case Kind::subtasks:
    case Kind::ignore_stop: // succeeds if the watchdog did not reach it in time
        may_succeed = true;
        break;
    case Kind::throw_int_once:
        may_succeed = p.max_retries > 0;
        break;
    case Kind::throw_std:
    case Kind::throw_struct:
    case Kind::permanent:
    case Kind::time_out:
        break;
    }
    // Heartbeat tasks get retries, so one scheduling hiccup longer than their timeout is not a
    // failure; a heartbeat that does not work times out every attempt and dead-letters.
    const bool may_die = p.kind != Kind::succeed && p.kind != Kind::heartbeat &&
                         p.kind != Kind::subtasks &&
                         !(p.kind == Kind::throw_int_once && p.max_retries > 0);
    if (s == ax::TaskState::succeeded && !may_succeed) {
        shared.fail(who + ": succeeded, which its kind cannot");
        return;
    }
    if (s == ax::TaskState::dead_lettered && !may_die) {
        shared.fail(who + ": dead-lettered, which its kind cannot");
        return;
    }
    const std::string expected_error = [&]() -> std::string {
        switch (p.kind) {
        case Kind::throw_std:
            return "runtime_error";
        case Kind::throw_int_once:
            return "int";
        case Kind::throw_struct:
            return "StressOdd";
        case Kind::permanent:
            return "PermanentError";
        case Kind::heartbeat:
        case Kind::time_out:
        case Kind::ignore_stop:
            return "TaskTimedOut";
        default:
            return "";
        }
    }();
    try {
        const int v = p.handle.get();
        if (s != ax::TaskState::succeeded)
            shared.fail(who + ": get() returned a value for a dead letter");
        else if (v != kind_value(p.kind, p.salt))
            shared.fail(who + ": get() returned " + std::to_string(v));
    } catch (const ax::PermanentError&) {
        if (expected_error != "PermanentError")
            shared.fail(who + ": unexpected ax::PermanentError");
    } catch (const ax::TaskTimedOut&) {
        if (expected_error != "TaskTimedOut")
            shared.fail(who + ": unexpected ax::TaskTimedOut");
    } catch (const std::runtime_error& e) {
        if (expected_error != "runtime_error")
            shared.fail(who + ": unexpected std::runtime_error: " + e.what());
    } catch (int v) {
        if (expected_error != "int" || v != 7)
            shared.fail(who + ": unexpected int " + std::to_string(v));
    } catch (const StressOdd& odd) {
        if (expected_error != "StressOdd" || odd.code != static_cast<int>(p.salt))
            shared.fail(who + ": unexpected StressOdd");
    } catch (...) {
        shared.fail(who + ": get() threw an unexpected type");
    }
}

/// Draws the next kind. Slow kinds are rare so a run's length is set by the scheduler's
/// overhead, not by sleeping bodies.
inline Kind draw_kind(std::mt19937& rng) {
    const auto r = rng() % 10'000;
    if (r < 5'000)
        return Kind::succeed;
    if (r < 6'500)
        return Kind::throw_std;
    if (r < 8'000)
        return Kind::throw_int_once;
    if (r < 9'000)
        return Kind::throw_struct;
    if (r < 9'500)
        return Kind::permanent;
    if (r < 9'990)
        return Kind::subtasks;
    if (r < 9'994)
        return Kind::heartbeat;
    if (r < 9'997)
        return Kind::time_out;
    return Kind::ignore_stop;
}

} // namespace detail

/// The scheduler configuration the engine runs under: small enough that backpressure, pool
/// resizing, retries, history eviction and dead-letter eviction all happen.
inline ax::Config stress_config() {
    using namespace std::chrono_literals;
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 8;
    cfg.queue_capacity = 32;
    cfg.retry_base_delay = 1ms;
    cfg.retry_jitter = 1ms;
    cfg.controller_interval = 20ms;
    cfg.watchdog_interval = 10ms;
    cfg.history_capacity = 64;
    cfg.dead_letter_capacity = 16;
    // A run that lost a task should fail in seconds, not wait out the 30 s default twice.
    cfg.shutdown_grace = 5s;
    // Deaf bodies (ignore_stop) are orphaned and taken over soon after their timeout.
    cfg.timeout_grace = 5ms;
    return cfg;
}

/// Runs the stress and returns what it saw. Never throws for a violated invariant: it lists it.
inline Result run(const Options& opt) {
    using namespace std::chrono_literals;
    const auto t0 = std::chrono::steady_clock::now();
    detail::Shared shared;
    Result res;
    std::vector<detail::Tally> tallies(opt.producers);
    {
        ax::Scheduler sched{stress_config()};
        const auto group = sched.group("limited");
        sched.set_group_limit(group, detail::group_limit);

        std::vector<std::thread> threads;
        for (unsigned p = 0; p < opt.producers; ++p) {
            const std::uint64_t mine =
                opt.operations / opt.producers + (p < opt.operations % opt.producers ? 1 : 0);
            threads.emplace_back([&, p, mine] {
                std::mt19937 rng(opt.seed * 7919u + p);
                detail::Tally& t = tallies[p];
                std::deque<detail::Pending> window;
                auto op_done = [&] {
                    const auto done = shared.ops.fetch_add(1, std::memory_order_relaxed) + 1;
                    if (opt.progress && opt.progress_every != 0 && done % opt.progress_every == 0)
                        opt.progress(done);
                };
                for (std::uint64_t i = 0; i < mine; ++i, op_done()) {
                    const auto op = rng() % 100;
                    if (op < 8 && !window.empty()) {
                        auto& victim = window[rng() % window.size()];
                        ++t.cancels;
                        if (sched.cancel(victim.handle.id())) {
                            ++t.cancels_accepted;
                            victim.cancel_accepted = true;
                        }
                        continue;
                    }
                    if (op < 16 && !window.empty()) {
                        auto& target = window[rng() % window.size()];
                        ++t.queries;
                        const auto info = sched.query(target.handle.id());
                        if (!info)
                            continue; // may have left the bounded history
                        if (info->id != target.handle.id() || info->priority != target.priority ||
                            info->max_retries != target.max_retries)
                            shared.fail("task " + target.handle.id().to_string() +
                                        ": query reports another task's options");
                        if (ax::is_terminal(info->state)) {
                            if (!target.handle.ready())
                                shared.fail("task " + target.handle.id().to_string() +
                                            ": query says terminal, handle does not");
                            target.queried_terminal = info->state;
                        }
                        continue;
                    }
                    const Kind kind = detail::draw_kind(rng);
                    ax::SubmitOptions o;
                    o.priority = static_cast<ax::Priority>(rng() % 3);
                    o.max_retries = static_cast<int>(rng() % 3);
                    const bool in_group = rng() % 4 == 0;
                    if (in_group)
                        o.group = group;
                    switch (kind) {
                    case Kind::heartbeat:
                        o.timeout = 50ms;
                        o.max_retries = 2;
                        break;
                    case Kind::time_out:
                        o.timeout = 2ms;
                        break;
                    case Kind::ignore_stop:
                        o.timeout = 2ms;
                        o.max_retries = 0;
                        break;
                    case Kind::subtasks:
                        o.max_retries = 0; // its body never fails
                        break;
                    default:
                        break;
                    }
                    const auto salt = static_cast<std::uint32_t>(rng());
                    ++t.submits;
                    auto r = sched.submit(detail::make_body(kind, salt, in_group, &shared), o);
                    if (!r) {
                        if (!r.error().retryable())
                            shared.fail("submit refused with " + r.error().message());
                        const auto code = r.error().code;
                        if (code == ax::Errc::group_full || code == ax::Errc::breaker_open) {
                            // Only the group's own submits may meet its gate, and it has no
                            // breaker.
                            if (!in_group || code == ax::Errc::breaker_open)
                                shared.fail("submit refused with " + r.error().message() +
                                            (in_group ? "" : " outside the group"));
                            ++t.refused_group;
                        } else {
                            ++t.refused;
                        }
                        // Back off a little; the hint may be long when tasks are slow, and
                        // a stress run wants pressure, not politeness.
                        std::this_thread::sleep_for(
                            std::min<std::chrono::microseconds>(r.error().retry_after, 200us));
                        continue;
                    }
                    ++t.admitted;
                    detail::Pending pend;
                    pend.handle = std::move(*r);
                    pend.kind = kind;
                    pend.salt = salt;
                    pend.priority = o.priority;
                    pend.max_retries = static_cast<std::uint8_t>(o.max_retries);
                    window.push_back(std::move(pend));
                    if (window.size() > opt.window) {
                        detail::settle(window.front(), t, shared, sched, opt.hang_guard);
                        window.pop_front();
                    }
                }
                for (auto& pend : window)
                    detail::settle(pend, t, shared, sched, opt.hang_guard);
            });
        }
        for (auto& th : threads)
            th.join();

        for (const auto& t : tallies) {
            res.submits += t.submits;
            res.admitted += t.admitted;
            res.refused += t.refused;
            res.refused_group += t.refused_group;
            res.cancels += t.cancels;
            res.cancels_accepted += t.cancels_accepted;
            res.queries += t.queries;
            res.succeeded += t.succeeded;
            res.dead_lettered += t.dead_lettered;
            res.cancelled += t.cancelled;
        }
        res.operations = shared.ops.load();

        // Every handle is terminal, so the counters must have settled; the group's bookkeeping
        // may trail the last body by a moment.
        const auto m = sched.metrics();
        res.totals = m.totals;
        auto expect = [&](bool ok, const std::string& what) {
            if (!ok)
                shared.fail(what);
        };
        auto eq = [&](std::uint64_t a, std::uint64_t b, const char* what) {
            expect(a == b,
                   std::string(what) + ": " + std::to_string(a) + " != " + std::to_string(b));
        };
        eq(res.operations, opt.operations, "operations run vs asked");
        eq(m.totals.subtasks, shared.children.load(), "metrics subtasks vs subtasks admitted");
        eq(m.totals.submitted, res.admitted + shared.children.load(),
           "metrics submitted vs admitted handles and subtasks");
        eq(m.totals.rejected, res.refused, "metrics rejected vs refusals seen");
        eq(m.totals.refused_other, res.refused_group,
           "metrics refused_other vs the group's refusals seen");
        eq(res.submits, res.admitted + res.refused + res.refused_group,
           "submits vs admitted + refused");
        eq(m.totals.succeeded, res.succeeded + shared.child_succeeded.load(),
           "metrics succeeded vs handles");
        eq(m.totals.dead_lettered, res.dead_lettered + shared.child_dead_lettered.load(),
           "metrics dead_lettered vs handles");
        eq(m.totals.cancelled, res.cancelled + shared.child_cancelled.load(),
           "metrics cancelled vs handles");
        eq(m.totals.succeeded + m.totals.dead_lettered + m.totals.cancelled, m.totals.submitted,
           "terminal totals vs submitted");
        eq(m.totals.dead_letters_evicted + m.dead_letters, m.totals.dead_lettered,
           "dead letters listed + evicted vs dead_lettered");
        eq(m.queue_length_total, 0, "queue length at the end");
        eq(m.waiting_retry, 0, "waiting_retry at the end");
        expect(m.dead_letters <= stress_config().dead_letter_capacity,
               "dead-letter list beyond its capacity");
        const auto deadline = std::chrono::steady_clock::now() + 20s;
        while (sched.group_stats(group).active != 0 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(1ms);
        const auto gs = sched.group_stats(group);
        eq(gs.active, 0, "group active at the end");
        eq(gs.waiting, 0, "group waiting at the end");
        // Its admission counts came back to zero: every place taken at admission or re-queue
        // was given back once, by a start or a cancel (a wrap would read as ~4e9).
        eq(gs.queued, 0, "group queued at the end");
        eq(gs.held, 0, "group held at the end");
        expect(shared.group_peak.load() <= detail::group_limit,
               "group limit " + std::to_string(detail::group_limit) + " exceeded: " +
                   std::to_string(shared.group_peak.load()) + " bodies ran at once");
        expect(sched.shutdown(ax::ShutdownMode::drain, shared.hung.load() ? 1s : 30s),
               "final drain did not finish");
    }
    res.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    res.failures = std::move(shared.failures);
    res.violations = shared.violations.load();
    return res;
}

} // namespace ax_stress
