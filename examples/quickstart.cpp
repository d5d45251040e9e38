// The README's API example, built and run by ctest so it stays true.
#include <ax/scheduler.hpp>
#include <cstdio>
#include <thread>

int main() {
    ax::Config cfg;           // the design card's defaults...
    cfg.max_workers = 64;     // ...tuned where it matters
    ax::Scheduler sched{cfg}; // = ax::Scheduler<std::chrono::steady_clock, ax::LittleController>

    // submit: a handle to the result, or a SubmitError saying why not (never a silent drop).
    auto thumb = sched.submit(
        [](ax::TaskContext& ctx) {
            for (int row = 0; row < 4; ++row) {
                if (ctx.stop_requested())
                    return -1;   // cancel() / shutdown(cancel) asks politely
                ctx.heartbeat(); // "still making progress"
            }
            return 42;
        },
        {.name = "thumb-42", .priority = ax::Priority::high, .max_retries = 2});

    if (!thumb) { // backpressure: back off for the hint, then resubmit
        std::this_thread::sleep_for(thumb.error().retry_after);
        return 1;
    }
    const ax::TaskId id = thumb->id();
    const int value = thumb->get(); // waits; rethrows the task's exception if it failed

    auto info = sched.query(id); // state, attempts, times, last error, while in history
    std::printf("%s %s -> %d after %u attempt(s)\n", info->name.c_str(),
                std::string(ax::to_string(info->state)).c_str(), value, info->attempts);

    // Fire and forget; cancel by ID.
    auto later = sched.post([] { std::puts("never printed if cancelled in time"); },
                            {.priority = ax::Priority::low});
    if (later)
        sched.cancel(*later);

    const ax::MetricsSnapshot m = sched.metrics();
    std::printf("workers %u (target %u), queued %u, succeeded %llu\n", m.workers.current,
                m.workers.target, m.queue_length_total,
                static_cast<unsigned long long>(m.totals.succeeded));
    return value == 42 ? 0 : 1;
} // ~Scheduler drains: queued work finishes, workers are joined
