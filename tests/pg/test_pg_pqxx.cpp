// ax/pg/pqxx.hpp (issue 28): enqueue inside a libpqxx transaction, against a real PostgreSQL
// (scripts/pg-server.sh exports AX_PG_CONNINFO; without it: exit 77, reported as skipped). Built
// only when libpqxx is found (the ax::pg_pqxx target).

#define CATCH_CONFIG_RUNNER
#include <atomic>
#include <ax/pg/pg.hpp>
#include <ax/pg/pqxx.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace pg = ax::pg;

namespace {

std::string g_base; // AX_PG_CONNINFO

// Only a real transaction takes tasks: a nontransaction (autocommit) does not compile.
template <class T> constexpr bool can_enqueue_on = requires(T& t, const pg::NewTask& n) {
    pg::enqueue_on(t, n);
};
static_assert(can_enqueue_on<pqxx::work>);
static_assert(can_enqueue_on<pqxx::subtransaction>);
static_assert(!can_enqueue_on<pqxx::nontransaction>);

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
        if (pred())
            return true;
        std::this_thread::sleep_for(20ms);
    }
    return pred();
}

} // namespace

TEST_CASE("TextArray: PostgreSQL's array input format, quoted and escaped", "[pqxx_units]") {
    pg::detail::TextArray a;
    a.add_text("plain");
    a.add_text("q\"b\\,{}");
    a.add_null();
    a.add_int(-42);
    a.add_bytea(std::string_view("\x00\xff\"", 3));
    CHECK(a.str() == "{\"plain\",\"q\\\"b\\\\,{}\",NULL,-42,\"\\\\x00ff22\"}");
    a.clear();
    CHECK(a.str() == "{}");
}

TEST_CASE("enqueue_on(pqxx::dbtransaction&): tasks commit and abort with the application's "
          "transaction, every field and byte intact",
          "[pg][pqxx]") {
    const std::string name = "ax_t_pqxx";
    {
        auto admin = pg::detail::Connection::open(g_base);
        admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
        admin.exec(("CREATE DATABASE " + name).c_str());
    }
    const std::string conninfo = g_base + " dbname=" + name;
    pg::Client c(conninfo, {.require_schema = false});
    c.migrate();
    pqxx::connection conn(conninfo);
    {
        pqxx::work w(conn);
        w.exec0("CREATE TABLE orders (id int PRIMARY KEY)");
        w.commit();
    }
    // Bytes a text literal would mangle: NUL, quotes, backslashes, commas, braces, high bytes.
    const std::string odd_payload("a\0\"\\,{}'\xff", 9);
    const std::vector<std::string_view> tags = {"gpu", "q'uote"};
    const std::vector<pg::NewTask> tasks = {
        {.kind = "ship \"x\" \\ {y}",
         .payload = odd_payload,
         .priority = ax::Priority::low,
         .timeout = 1500ms,
         .max_attempts = 2,
         .idempotency_key = "order \"7\"",
         .tags = tags},
        {.kind = "ship", .payload = "later", .run_at = std::chrono::system_clock::now() + 1h},
        {.kind = "ship", .payload = "plain"}};

    std::vector<pg::Enqueued> gone;
    {
        pqxx::work w(conn);
        w.exec0("INSERT INTO orders VALUES (7)");
        gone = pg::enqueue_on(w, tasks);
        REQUIRE(gone.size() == 3);
        CHECK(pg::enqueue_on(w, pg::NewTask{.kind = "ship"}).id > gone[2].id); // no key: new
        w.abort();
    }
    CHECK(c.counts().live() == 0);
    CHECK(!c.query(gone[0].id));

    std::vector<pg::Enqueued> kept, unkeyed;
    {
        pqxx::work w(conn);
        w.exec0("INSERT INTO orders VALUES (7)");
        kept = pg::enqueue_on(w, tasks);
        CHECK(pg::enqueue_on(w, {.kind = "ship", .idempotency_key = "order \"7\""}).existed);
        // The unkeyed statement: IDs in input order.
        unkeyed = pg::enqueue_on(w, std::vector<pg::NewTask>(50, pg::NewTask{.kind = "ship"}));
        w.commit();
    }
    REQUIRE(unkeyed.size() == 50);
    for (std::size_t i = 1; i < unkeyed.size(); ++i)
        CHECK(unkeyed[i].id > unkeyed[i - 1].id);
    CHECK(c.counts().live() == 53);
    {
        pqxx::work w(conn);
        const pqxx::row r = w.exec_params1(
            "SELECT kind, encode(payload, 'hex'), priority, timeout_ms, max_attempts, idem_key, "
            "tags::text FROM ax.tasks WHERE id = $1",
            kept[0].id);
        CHECK(r[0].as<std::string>() == "ship \"x\" \\ {y}");
        CHECK(r[1].as<std::string>() == "6100225c2c7b7d27ff");
        CHECK(r[2].as<int>() == 2);
        CHECK(r[3].as<int>() == 1500);
        CHECK(r[4].as<int>() == 2);
        CHECK(r[5].as<std::string>() == "order \"7\"");
        CHECK(r[6].as<std::string>() == "{gpu,q'uote}");
    }
    CHECK(c.query(kept[1].id)->state == pg::TaskState::scheduled);

    // Refused before anything is sent; the transaction stays usable.
    {
        pqxx::work w(conn);
        CHECK_THROWS_WITH(pg::enqueue_on(w, {.kind = ""}), Catch::Contains("NewTask #0: kind"));
        CHECK_THROWS_WITH(
            pg::enqueue_on(w, {.kind = "k", .payload = "12345678901"}, {.max_payload_bytes = 10}),
            Catch::Contains("exceeds max_payload_bytes (10)"));
        CHECK(w.exec1("SELECT 1")[0].as<int>() == 1);
        w.abort();
    }

    std::mutex m;
    std::map<std::int64_t, std::string> ran;
    pg::NodeOptions o;
    o.conninfo = conninfo;
    o.name = "pqxx";
    o.poll_interval = 100ms;
    o.maintenance_interval = 200ms;
    o.tags = {"gpu", "q'uote"};
    pg::Node node(o);
    for (const char* k : {"ship \"x\" \\ {y}", "ship"})
        node.handle(k, [&](pg::Job& j) {
            std::lock_guard lock(m);
            ran.emplace(j.id(), std::string(j.payload()));
        });
    node.start();
    REQUIRE(wait_until([&] { return c.counts().succeeded == 52; }, 30s));
    node.stop();
    std::lock_guard lock(m);
    CHECK(ran.size() == 52);
    CHECK(ran[kept[0].id] == odd_payload);
    CHECK(ran[kept[2].id] == "plain");
    CHECK(ran.count(kept[1].id) == 0); // an hour ahead
}

int main(int argc, char** argv) {
    const char* conninfo = std::getenv("AX_PG_CONNINFO");
    bool units_only = argc > 1;
    for (int i = 1; i < argc; ++i)
        units_only = units_only && std::string(argv[i]) == "[pqxx_units]";
    if (!units_only && (conninfo == nullptr || *conninfo == '\0')) {
        std::printf("SKIPPED: AX_PG_CONNINFO is not set, so no PostgreSQL server to test against "
                    "(run under scripts/pg-server.sh, as scripts/test.sh's pg stage does)\n");
        return 77;
    }
    g_base = conninfo != nullptr ? conninfo : "";
    return Catch::Session().run(argc, argv);
}
