// A node process for the multi-process tests of ax::pg. It runs until SIGTERM (graceful stop)
// or SIGKILL, and logs what it ran.
//
//   pg_test_node --db CONNINFO --name NAME [--kinds a,b] [--tags gpu] [--lease-ms N]
//                [--maintain-ms N] [--workers N] [--max-batch N] [--tasks-per-worker N]
//                [--log FILE]
//
// Kinds (handlers):
//   noop       appends "<id>\n" to --log (flushed at exit)
//   record     inserts into results(task_id PK, node) ON CONFLICT DO NOTHING (an idempotent
//              handler) and into runs(task_id, node) (every execution), on its own connection
//   sleep      sleeps payload milliseconds (honouring the stop token), then does what record does
//   wait_stop  waits (up to 60 s) until its stop token is requested, then inserts into
//              stops(task_id, node) and returns
//   gpu        like record (tests give it a required tag)
//   flow       a workflow step (tests/pg/test_pg_flows.cpp): inserts flow_log(task_id, node,
//              'start', unfinished parents, parents whose result is not theirs) at its start,
//              reading its dependencies through Client::parent_results; payload "sleep:N"
//              sleeps N ms, "fail" fails for good; inserts flow_log(..., 'end') when done and
//              sets the result "r<id>"
//   span       payload "KEY|MS": appends "S <id> <KEY> <ns>" to --spans at start, sleeps MS
//              milliseconds, then appends "E <id> <KEY> <ns>" (CLOCK_MONOTONIC, one write(2) per
//              line on an O_APPEND file, so lines survive a kill -9 and several processes can
//              share the file); the limits tests' checker reads it

#include <algorithm>
#include <ax/pg/pg.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fcntl.h>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};
void on_term(int) {
    g_stop.store(true);
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string x;
    while (std::getline(ss, x, ','))
        if (!x.empty())
            out.push_back(x);
    return out;
}

std::string g_db, g_name;

/// One connection per worker thread for the handlers' own writes.
ax::pg::detail::Connection& handler_conn() {
    thread_local ax::pg::detail::Connection c;
    if (!c.ok())
        c = ax::pg::detail::Connection::open(g_db);
    return c;
}

void record(std::int64_t id) {
    const std::string ids = std::to_string(id);
    auto& c = handler_conn();
    c.exec_params("INSERT INTO runs (task_id, node) VALUES ($1, $2)",
                  {ids.c_str(), g_name.c_str()});
    c.exec_params("INSERT INTO results (task_id, node) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                  {ids.c_str(), g_name.c_str()});
}

/// A workflow step: see the header. The clock is the database's (clock_timestamp()), so starts
/// and ends from several processes compare.
void flow_step(ax::pg::Job& j) {
    thread_local std::optional<ax::pg::Client> client;
    if (!client)
        client.emplace(g_db);
    const std::string ids = std::to_string(j.id());
    int unfinished = 0, foreign = 0;
    for (const auto& p : client->parent_results(j.id())) {
        unfinished += p.result.finished() ? 0 : 1;
        if (p.result.state == ax::pg::TaskState::succeeded &&
            p.result.result != "r" + std::to_string(p.result.id))
            ++foreign;
    }
    const std::string u = std::to_string(unfinished), f = std::to_string(foreign);
    auto& c = handler_conn();
    c.exec_params("INSERT INTO flow_log (task_id, node, ev, unfinished, foreign_results) "
                  "VALUES ($1, $2, 'start', $3, $4)",
                  {ids.c_str(), g_name.c_str(), u.c_str(), f.c_str()});
    const std::string p(j.payload());
    if (p.rfind("sleep:", 0) == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(std::stoll(p.substr(6))));
    c.exec_params("INSERT INTO flow_log (task_id, node, ev) VALUES ($1, $2, 'end')",
                  {ids.c_str(), g_name.c_str()});
    if (p == "fail")
        throw ax::PermanentError("flow step told to fail");
    j.set_result("r" + ids);
}

int g_spans = -1;

/// One line of the span log: `what` (S or E), the task, its key, now in ns (CLOCK_MONOTONIC).
void span_line(char what, std::int64_t id, std::string_view key) {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const long long ns = static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
    char b[320];
    const int n =
        std::snprintf(b, sizeof b, "%c %lld %.*s %lld\n", what, static_cast<long long>(id),
                      static_cast<int>(key.size()), key.data(), ns);
    if (n > 0 && ::write(g_spans, b, static_cast<std::size_t>(n)) != n)
        std::abort();
}

} // namespace

int main(int argc, char** argv) {
    ax::pg::NodeOptions o;
    std::vector<std::string> kinds = {"noop"};
    std::string log_path;
    std::uint32_t workers = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--db")
            o.conninfo = g_db = v;
        else if (k == "--name")
            o.name = g_name = v;
        else if (k == "--kinds")
            kinds = split(v);
        else if (k == "--tags")
            o.tags = split(v);
        else if (k == "--lease-ms")
            o.lease = std::chrono::milliseconds(std::stoll(v));
        else if (k == "--maintain-ms")
            o.maintenance_interval = std::chrono::milliseconds(std::stoll(v));
        else if (k == "--workers")
            workers = static_cast<std::uint32_t>(std::stoul(v));
        else if (k == "--max-batch")
            o.max_batch = static_cast<std::uint32_t>(std::stoul(v));
        else if (k == "--tasks-per-worker")
            o.tasks_per_worker = static_cast<std::uint32_t>(std::stoul(v));
        else if (k == "--log")
            log_path = v;
        else if (k == "--spans")
            g_spans = ::open(v.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
        else {
            std::fprintf(stderr, "pg_test_node: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (g_spans < 0 && std::find(kinds.begin(), kinds.end(), "span") != kinds.end()) {
        std::fprintf(stderr, "pg_test_node: kind span needs --spans FILE (writable)\n");
        return 2;
    }
    o.scheduler.min_workers = workers;
    o.scheduler.max_workers = workers;
    o.poll_interval = std::chrono::milliseconds(200);
    o.reconnect_base = std::chrono::milliseconds(50);
    o.reconnect_max = std::chrono::milliseconds(1000);
    o.stop_grace = std::chrono::milliseconds(10000);
    o.on_event = [](std::string_view e) {
        std::fprintf(stderr, "[%s] %.*s\n", g_name.c_str(), static_cast<int>(e.size()), e.data());
    };
    std::signal(SIGTERM, on_term);
    std::signal(SIGINT, on_term);

    std::mutex log_mutex;
    std::string log_buf;
    ax::pg::Node node(o);
    for (const auto& kind : kinds) {
        if (kind == "noop") {
            node.handle(kind, [&](ax::pg::Job& j) {
                char b[24];
                const int n = std::snprintf(b, sizeof b, "%lld\n", static_cast<long long>(j.id()));
                std::lock_guard lock(log_mutex);
                log_buf.append(b, static_cast<std::size_t>(n));
            });
        } else if (kind == "record" || kind == "gpu") {
            node.handle(kind, [](ax::pg::Job& j) { record(j.id()); });
        } else if (kind == "flow") {
            node.handle(kind, flow_step);
        } else if (kind == "sleep") {
            node.handle(kind, [](ax::pg::Job& j) {
                const auto ms = std::stoll(std::string(j.payload().empty() ? "0" : j.payload()));
                const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
                while (std::chrono::steady_clock::now() < until && !j.stop_requested())
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                if (j.stop_requested())
                    throw std::runtime_error("stopped");
                record(j.id());
            });
        } else if (kind == "span") {
            node.handle(kind, [](ax::pg::Job& j) {
                const std::string_view p = j.payload();
                const std::size_t bar = p.find('|');
                const std::string_view key = p.substr(0, bar);
                const long long ms =
                    bar == std::string_view::npos ? 0 : std::stoll(std::string(p.substr(bar + 1)));
                span_line('S', j.id(), key);
                std::this_thread::sleep_for(std::chrono::milliseconds(ms));
                span_line('E', j.id(), key);
            });
        } else if (kind == "wait_stop") {
            node.handle(kind, [](ax::pg::Job& j) {
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
                while (!j.stop_requested() && std::chrono::steady_clock::now() < until)
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
                const std::string ids = std::to_string(j.id());
                handler_conn().exec_params(
                    "INSERT INTO stops (task_id, node, saw_stop) VALUES ($1, $2, $3)",
                    {ids.c_str(), g_name.c_str(), j.stop_requested() ? "t" : "f"});
            });
        } else {
            std::fprintf(stderr, "pg_test_node: unknown kind %s\n", kind.c_str());
            return 2;
        }
    }
    node.start();
    std::fprintf(stderr, "[%s] started\n", g_name.c_str());
    while (!g_stop.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    node.stop();
    const auto st = node.stats();
    if (!log_path.empty()) {
        std::FILE* f = std::fopen(log_path.c_str(), "w");
        if (f == nullptr)
            return 3;
        std::fwrite(log_buf.data(), 1, log_buf.size(), f);
        std::fclose(f);
    }
    std::fprintf(
        stderr,
        "[%s] stopped: %llu claims, %llu succeeded, %llu failed, %llu released, %llu reconnects\n",
        g_name.c_str(), static_cast<unsigned long long>(st.claims),
        static_cast<unsigned long long>(st.succeeded), static_cast<unsigned long long>(st.failed),
        static_cast<unsigned long long>(st.released),
        static_cast<unsigned long long>(st.reconnects));
    return 0;
}
