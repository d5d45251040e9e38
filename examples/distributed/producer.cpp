// Producer of the distributed example: enqueues N "resize" tasks in one round trip, each with an
// idempotency key (running it twice enqueues nothing new), then reports until they are done.
//
//   ax_pg_producer CONNINFO [N]

#include <ax/pg/pg.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: ax_pg_producer CONNINFO [N]\n");
        return 2;
    }
    const int n = argc > 2 ? std::stoi(argv[2]) : 2000;
    try {
        ax::pg::Client client(argv[1]);
        std::vector<std::string> payloads, keys;
        std::vector<ax::pg::NewTask> tasks;
        payloads.reserve(n);
        keys.reserve(n);
        for (int i = 0; i < n; ++i) {
            payloads.push_back("image-" + std::to_string(i) + ".png");
            keys.push_back("resize:" + payloads.back());
            tasks.push_back({.kind = "resize",
                             .payload = payloads.back(),
                             .priority = i % 10 == 0 ? ax::Priority::high : ax::Priority::normal,
                             .timeout = std::chrono::seconds(10),
                             .idempotency_key = keys.back()});
        }
        const auto ids = client.enqueue_many(tasks);
        int fresh = 0;
        for (const auto& e : ids)
            fresh += e.existed ? 0 : 1;
        std::printf("producer: enqueued %d task(s) in one round trip (%d already known by key), "
                    "IDs %lld..%lld\n",
                    fresh, n - fresh, static_cast<long long>(ids.front().id),
                    static_cast<long long>(ids.back().id));
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "producer: %s\n", e.what());
        return 1;
    }
}
