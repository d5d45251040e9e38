// Node of the distributed example: handles "resize" tasks on a local ax::Scheduler. The handler
// is idempotent in its own store (INSERT ... ON CONFLICT DO NOTHING into demo_results), which is
// what turns the queue's at-least-once delivery into exactly-once results; demo_runs records
// every execution, so a re-run after a node's death is visible.
//
//   ax_pg_node CONNINFO NAME [LEASE_MS]
// Stops gracefully on SIGTERM/SIGINT (unstarted tasks go back at once).

#include <atomic>
#include <ax/pg/pg.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <libpq-fe.h>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
    g_stop.store(true);
}

std::string g_conninfo, g_name;

/// The handler's own connection, one per worker thread.
PGconn* store() {
    thread_local PGconn* c = nullptr;
    if (c == nullptr || PQstatus(c) != CONNECTION_OK) {
        if (c != nullptr)
            PQfinish(c);
        c = PQconnectdb(g_conninfo.c_str());
        if (PQstatus(c) != CONNECTION_OK)
            throw std::runtime_error(std::string("store: ") + PQerrorMessage(c));
    }
    return c;
}

void exec(const char* sql, const std::string& id) {
    const char* params[2] = {id.c_str(), g_name.c_str()};
    PGresult* r = PQexecParams(store(), sql, 2, nullptr, params, nullptr, nullptr, 0);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    std::string err = ok ? "" : PQresultErrorMessage(r);
    PQclear(r);
    if (!ok)
        throw std::runtime_error("store: " + err); // a failed attempt: retried in the database
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: ax_pg_node CONNINFO NAME [LEASE_MS]\n");
        return 2;
    }
    g_conninfo = argv[1];
    g_name = argv[2];
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);

    ax::pg::NodeOptions opt;
    opt.conninfo = g_conninfo;
    opt.name = g_name;
    opt.scheduler.min_workers = 4;
    opt.scheduler.max_workers = 4;
    opt.tasks_per_worker = 8;
    opt.max_batch = 32;
    opt.lease = std::chrono::milliseconds(argc > 3 ? std::stoll(argv[3]) : 30000);
    opt.maintenance_interval = std::chrono::milliseconds(250);
    opt.on_event = [](std::string_view e) {
        std::printf("%s: %.*s\n", g_name.c_str(), static_cast<int>(e.size()), e.data());
        std::fflush(stdout);
    };
    std::atomic<long> ran{0};
    try {
        ax::pg::Node node(opt);
        node.handle("resize", [&](ax::pg::Job& job) {
            // "Resize" the image: 10 ms of work that honours the stop token.
            for (int i = 0; i < 10 && !job.stop_requested(); ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            const std::string id = std::to_string(job.id());
            exec("INSERT INTO demo_runs (task_id, node) VALUES ($1, $2)", id);
            exec("INSERT INTO demo_results (task_id, node) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                 id);
            ran.fetch_add(1);
        });
        node.start();
        std::printf("%s: started (lease %lld ms)\n", g_name.c_str(),
                    static_cast<long long>(opt.lease.count()));
        std::fflush(stdout);
        long last = -1;
        while (!g_stop.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            const long now = ran.load();
            if (now != last)
                std::printf("%s: ran %ld task(s) so far\n", g_name.c_str(), now);
            std::fflush(stdout);
            last = now;
        }
        node.stop();
        const auto s = node.stats();
        std::printf("%s: stopped after %ld task(s); %llu batch(es) claimed, %llu handed back, %llu "
                    "batch(es) "
                    "reclaimed from dead nodes\n",
                    g_name.c_str(), ran.load(), static_cast<unsigned long long>(s.batches),
                    static_cast<unsigned long long>(s.released),
                    static_cast<unsigned long long>(s.reclaimed_batches));
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", g_name.c_str(), e.what());
        return 1;
    }
}
