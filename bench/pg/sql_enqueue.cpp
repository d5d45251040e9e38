// The SQL API's figures (issue 28; docs/bench/sql-enqueue.md): ax.enqueue one task per statement
// from one client (psql-like: each statement its own transaction), and ax.enqueue_many against
// Client::enqueue_many on 100k-task calls, alternating, by the calls' wall time (the server's
// time: the client's encoding is about a millisecond of it); beside them a bare `INSERT INTO
// ax.tasks SELECT ... FROM unnest(...)` of the same rows (no function, no checks, no result rows:
// the floor for anything an SQL function can run, as it cannot use COPY). Standalone (bench/pg's
// build).
//
//   ax_pg_sql_enqueue CONNINFO [seconds=10] [rounds=5] [tasks=100000]
//
// Works in the database CONNINFO names (migrated here; its ax.tasks is TRUNCATEd between
// rounds, outside the timings): use a throw-away one (scripts/pg-server.sh).

#include <algorithm>
#include <ax/pg/pg.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;

double seconds_since(clk::time_point t0) {
    return std::chrono::duration<double>(clk::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s CONNINFO [seconds=10] [rounds=5] [tasks=100000]\n",
                     argv[0]);
        return 2;
    }
    const std::string conninfo = argv[1];
    const double secs = argc > 2 ? std::atof(argv[2]) : 10;
    const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
    const std::size_t n = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 100000;

    ax::pg::Client client(conninfo, {.require_schema = false});
    client.migrate();
    ax::pg::Client insert_client(conninfo, {.copy_min_tasks = 0});
    auto c = ax::pg::detail::Connection::open(conninfo);
    c.exec("TRUNCATE ax.tasks");

    // 1. One task per statement, autocommit, parameters as a driver sends them.
    {
        const char* sql = "SELECT ax.enqueue(kind => $1, payload => $2::bytea)";
        const char* v[2] = {"resize", "\\x0001020304050607"};
        std::size_t done = 0;
        const auto t0 = clk::now();
        while (seconds_since(t0) < secs) {
            c.exec_raw(sql, 2, v, nullptr, nullptr, 0);
            ++done;
        }
        const double el = seconds_since(t0);
        std::printf("ax.enqueue, one task per statement (autocommit), 1 client: %zu tasks in "
                    "%.1f s = %.0f tasks/s (%.1f us per statement)\n",
                    done, el, done / el, el / done * 1e6);
    }

    // 2. 100k-task calls: ax.enqueue_many (arrays as binary parameters, as a driver would send
    //    them), Client::enqueue_many by its INSERT from arrays (copy_min_tasks = 0) and by COPY
    //    (the default for such a call), alternating.
    std::vector<std::string> payloads(n);
    std::vector<ax::pg::NewTask> tasks(n);
    ax::pg::detail::BinaryArray kinds{ax::pg::detail::oid::text};
    ax::pg::detail::BinaryArray pays{ax::pg::detail::oid::bytea};
    for (std::size_t i = 0; i < n; ++i) {
        payloads[i] = "payload-" + std::to_string(i % 100000000);
        payloads[i].resize(16, '.');
        tasks[i] = {.kind = "resize", .payload = payloads[i]};
        kinds.add_bytes("resize");
        pays.add_bytes(payloads[i]);
    }
    std::vector<double> sql_many, client_insert, client_copy, bare_insert;
    for (int r = 0; r < rounds; ++r) {
        {
            c.exec("TRUNCATE ax.tasks");
            c.exec("CHECKPOINT");
            const std::string_view params[] = {kinds.bytes(), pays.bytes()};
            const auto t0 = clk::now();
            auto res = c.exec_binary("SELECT count(*) FROM ax.enqueue_many(kind => $1::text[], "
                                     "payload => $2::bytea[])",
                                     params, ax::pg::detail::Format::text);
            sql_many.push_back(seconds_since(t0));
            if (res.int64(0, 0) != static_cast<std::int64_t>(n))
                return 1;
        }
        {
            c.exec("TRUNCATE ax.tasks");
            c.exec("CHECKPOINT");
            const auto t0 = clk::now();
            insert_client.enqueue_many(tasks);
            client_insert.push_back(seconds_since(t0));
        }
        {
            c.exec("TRUNCATE ax.tasks");
            c.exec("CHECKPOINT");
            const auto t0 = clk::now();
            client.enqueue_many(tasks);
            client_copy.push_back(seconds_since(t0));
        }
        {
            c.exec("TRUNCATE ax.tasks");
            c.exec("CHECKPOINT");
            const std::string_view params[] = {kinds.bytes(), pays.bytes()};
            const auto t0 = clk::now();
            c.exec_binary("INSERT INTO ax.tasks (kind, payload) SELECT u.k, u.p FROM "
                          "unnest($1::text[], $2::bytea[]) AS u(k, p)",
                          params, ax::pg::detail::Format::text);
            bare_insert.push_back(seconds_since(t0));
        }
        std::printf("round %d: ax.enqueue_many %.3f s, Client INSERT %.3f s, Client COPY %.3f s, "
                    "bare INSERT %.3f s\n",
                    r + 1, sql_many.back(), client_insert.back(), client_copy.back(),
                    bare_insert.back());
    }
    const double m_sql = median(sql_many), m_ins = median(client_insert),
                 m_copy = median(client_copy), m_bare = median(bare_insert);
    std::printf("\n%zu-task calls, median of %d alternating rounds (us per task):\n", n, rounds);
    std::printf("  ax.enqueue_many                          %6.2f\n", m_sql / n * 1e6);
    std::printf(
        "  Client::enqueue_many, INSERT from arrays %6.2f  (ax.enqueue_many / this: %.2fx)\n",
        m_ins / n * 1e6, m_sql / m_ins);
    std::printf(
        "  Client::enqueue_many, COPY (default)     %6.2f  (ax.enqueue_many / this: %.2fx)\n",
        m_copy / n * 1e6, m_sql / m_copy);
    std::printf(
        "  bare INSERT ... SELECT FROM unnest        %6.2f  (ax.enqueue_many / this: %.2fx; "
        "this / COPY: %.2fx)\n",
        m_bare / n * 1e6, m_sql / m_bare, m_bare / m_copy);
    c.exec("TRUNCATE ax.tasks");
    return 0;
}
