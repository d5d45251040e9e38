// ax example: coroutine tasks (ax/coro.hpp). A "report" coroutine fans out 1000 subtasks,
// awaits them all without holding a thread, hops to high priority for its last step, and a
// `then` continuation formats the result. It runs on ONE worker: a parent that blocked in get()
// would have to help run its children; a coroutine simply steps aside.
// Built and run by ctest (example_coroutines); exits non-zero if anything is off.
#include <ax/coro.hpp>
#include <ax/scheduler.hpp>
#include <cstdio>
#include <string>
#include <vector>

namespace {

/// A helper coroutine, awaited inline by the task that calls it.
ax::Task<long> sum_of(std::vector<long> values) {
    long s = 0;
    for (const long v : values)
        s += v;
    co_return s;
}

} // namespace

int main() {
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1; // one thread is enough: nothing blocks it
    ax::Scheduler<> sched(cfg);

    auto report = sched.submit(
        [&](ax::TaskContext& ctx) -> ax::Task<long> {
            std::vector<ax::TaskHandle<long>> parts;
            for (long i = 1; i <= 1000; ++i)
                parts.push_back(ctx.submit([i] { return i * i; }).value());
            // Suspends (the task is `pending`, the worker runs the parts), resumes on a worker.
            std::vector<long> squares = co_await ax::when_all(parts);
            ctx.heartbeat();
            // The last step matters more than the rest of the queue: hop to high priority.
            co_await sched.schedule({.priority = ax::Priority::high});
            co_return co_await sum_of(std::move(squares));
        },
        {.name = "report", .timeout = std::chrono::seconds(5)});
    if (!report) {
        std::fprintf(stderr, "submit refused: %s\n", report.error().message().c_str());
        return 1;
    }
    const ax::TaskId id = report->id();
    auto text = ax::then(sched, std::move(*report), [](long& total) {
        return "sum of squares 1..1000 = " + std::to_string(total);
    });
    if (!text)
        return 1;
    const std::string line = text->get();
    std::printf("%s\n", line.c_str());

    const auto info = sched.query(id);
    const bool ok = line == "sum of squares 1..1000 = 333833500" && info &&
                    info->state == ax::TaskState::succeeded && info->attempts == 1 &&
                    info->priority == ax::Priority::high;
    std::printf("report task %s: %s, %u attempt(s), priority %s\n", id.to_string().c_str(),
                info ? std::string(ax::to_string(info->state)).c_str() : "?",
                info ? info->attempts : 0u,
                info ? std::string(ax::to_string(info->priority)).c_str() : "?");
    return ok ? 0 : 1;
}
