// The README's API example, built and run by ctest so it stays true.
#include <ax/scheduler.hpp>
#include <cstdio>
#include <thread>
#include <vector>

int main() {
    ax::Config cfg;           // the design card's defaults...
    cfg.max_workers = 64;     // ...tuned where it matters
    ax::Scheduler sched{cfg}; // = ax::Scheduler<std::chrono::steady_clock, ax::AdaptiveController>

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

    // Subtasks: a parent may block on its children without deadlocking the pool (its worker
    // runs pending subtasks while it waits), or join them without blocking (when_all).
    auto total = sched.submit([](ax::TaskContext& ctx) {
        std::vector<ax::TaskHandle<int>> parts;
        for (int i = 1; i <= 3; ++i)
            if (auto part = ctx.submit([i] { return i * i; }))
                parts.push_back(std::move(*part));
        int sum = 0;
        for (auto& part : parts)
            sum += part.get();
        return sum; // 1 + 4 + 9
    });
    std::vector<ax::TaskHandle<int>> both;
    both.push_back(std::move(*total));
    auto report = sched.when_all(std::move(both), [](std::vector<ax::TaskHandle<int>>& done) {
        return done[0].get() == 14; // runs once the parent ended; get() does not block
    });
    const bool joined = report && report->get();

    const ax::MetricsSnapshot m = sched.metrics();
    std::printf("workers %u (target %u), queued %u, succeeded %llu\n", m.workers.current,
                m.workers.target, m.queue_length_total,
                static_cast<unsigned long long>(m.totals.succeeded));
    return value == 42 && joined ? 0 : 1;
} // ~Scheduler drains: queued work finishes, workers are joined
