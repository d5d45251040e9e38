// The cluster console (include/ax/console/) against a real PostgreSQL: every security rule as a
// test case of its own ([security]), the JSON API ([console_api]), actions and bulk actions
// checked in the database ([console_actions]), the statement timeout ([console_timeout]) and
// the MetricsServer mount ([console_mount]). Requests go through cpp-httplib's client on
// loopback. Run under scripts/pg-server.sh (it exports AX_PG_CONNINFO); without it every case is
// skipped (exit 77). The browser's side (rendering, clicks, hostile strings) is
// tests/console/console_browser.py.

#define CATCH_CONFIG_RUNNER
#include <atomic>
#include <ax/console/console.hpp>
#include <ax/http/metrics_server.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace pg = ax::pg;
namespace console = ax::console;
using nlohmann::json;

namespace {

std::string g_base; // AX_PG_CONNINFO
const std::string token = "s3cret-console-token-0123456789";

/// A fresh database with the ax schema.
struct Db {
    std::string conninfo;
    explicit Db(const std::string& name) {
        auto admin = pg::detail::Connection::open(g_base);
        admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
        admin.exec(("CREATE DATABASE " + name).c_str());
        conninfo = g_base + " dbname=" + name;
        pg::Client c(conninfo, {.require_schema = false});
        c.migrate();
    }
    [[nodiscard]] pg::detail::Connection sql() const {
        return pg::detail::Connection::open(conninfo);
    }
    [[nodiscard]] std::int64_t scalar(const std::string& q) const {
        auto s = sql();
        return s.exec(q.c_str()).int64(0, 0);
    }
    [[nodiscard]] std::string text(const std::string& q) const {
        auto s = sql();
        return std::string(s.exec(q.c_str()).text(0, 0));
    }
    void exec(const std::string& q) const {
        auto s = sql();
        s.exec(q.c_str());
    }
    /// Where task `id` is: "live", "dead", "history:<state>" or "gone".
    [[nodiscard]] std::string where(std::int64_t id) const {
        const std::string i = std::to_string(id);
        return text("SELECT coalesce((SELECT 'live' FROM ax.tasks WHERE id = " + i +
                    "), (SELECT 'dead' FROM ax.dead_letters WHERE id = " + i +
                    "), (SELECT 'history:' || state FROM ax.history WHERE id = " + i +
                    "), 'gone')");
    }
    std::int64_t enqueue(const pg::NewTask& t) const {
        pg::Client c(conninfo);
        return c.enqueue(t).id;
    }
    /// Enqueues a task and makes it a dead letter with `error` (what a node's last failed
    /// attempt does, ax.dead_letter of migration 1).
    std::int64_t dead_letter(const pg::NewTask& t, const std::string& error) const {
        const std::int64_t id = enqueue(t);
        auto s = sql();
        const std::string i = std::to_string(id);
        s.exec_params("SELECT ax.dead_letter($1, $2, 'permanent error')",
                      {i.c_str(), error.c_str()});
        return id;
    }
};

/// A console on a server of its own on a free loopback port, stopped at scope exit.
struct Served {
    console::Console con;
    httplib::Server http;
    std::thread thread;
    int port = 0;
    Served(const std::string& conninfo, console::ConsoleOptions o, const std::string& base = "")
        : con(conninfo, std::move(o)) {
        http.set_payload_max_length(1 << 20);
        con.mount(http, base);
        port = http.bind_to_any_port("127.0.0.1");
        REQUIRE(port > 0);
        thread = std::thread([this] { http.listen_after_bind(); });
        while (!http.is_running())
            std::this_thread::sleep_for(1ms);
    }
    ~Served() {
        http.stop();
        thread.join();
    }
    [[nodiscard]] std::unique_ptr<httplib::Client> client() const {
        auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
        c->set_read_timeout(30, 0);
        return c;
    }
    [[nodiscard]] std::string origin() const { return "http://127.0.0.1:" + std::to_string(port); }
};

console::ConsoleOptions with_token() {
    console::ConsoleOptions o;
    o.token = token;
    return o;
}

httplib::Headers auth(const std::string& t = token) {
    return {{"Authorization", "Bearer " + t}};
}

/// POSTs `body` as JSON to `path` with `headers`.
httplib::Result post(httplib::Client& c, const std::string& path, const std::string& body,
                     httplib::Headers headers = auth(),
                     const std::string& type = "application/json") {
    return c.Post(path.c_str(), headers, body, type.c_str());
}

std::string cancel_body(std::int64_t id) {
    return json{{"action", "cancel"}, {"ids", {id}}}.dump();
}

json body_of(const httplib::Result& r) {
    REQUIRE(r);
    return json::parse(r->body);
}

/// One shared database for the security cases: each makes its own pending task to aim at.
Db& shared_db() {
    static Db db("ax_console_security");
    return db;
}

std::int64_t target_task() {
    return shared_db().enqueue({.kind = "sec.target", .payload = "p"});
}

} // namespace

// --------------------------------------------------------------------------------------------
// Security: one test case per rule (the closing report lists them with their results).

TEST_CASE("security: a non-loopback address without a token refuses to start", "[security]") {
    const std::string cmd = std::string(AX_PG_TOOL) + " --db '" + shared_db().conninfo +
                            "' serve --host 0.0.0.0 --port 8090 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr)
        out += buf;
    const int st = pclose(p);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 2);
    CHECK(out.find("refusing to listen on 0.0.0.0") != std::string::npos);
}

TEST_CASE("security: a token under 16 bytes is refused", "[security]") {
    console::ConsoleOptions o;
    o.token = "short-token-15b";
    REQUIRE(o.token.size() == 15);
    CHECK_THROWS_AS(console::Console(shared_db().conninfo, o), std::invalid_argument);
    const std::string cmd = std::string(AX_PG_TOOL) + " --db '" + shared_db().conninfo +
                            "' serve --port 0 --token short 2>/dev/null";
    const int st = std::system(cmd.c_str());
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 2);
}

TEST_CASE("security: no token configured: actions are 403 (read-only)", "[security]") {
    Served s(shared_db().conninfo, {});
    const auto id = target_task();
    auto c = s.client();
    auto r = post(*c, "/api/action", cancel_body(id), {});
    REQUIRE(r);
    CHECK(r->status == 403);
    r = post(*c, "/api/action", cancel_body(id), auth());
    REQUIRE(r);
    CHECK(r->status == 403);
    CHECK(shared_db().where(id) == "live");
    CHECK(body_of(c->Get("/api/config"))["actions"] == false);
}

TEST_CASE("security: an action without the token is 401", "[security]") {
    Served s(shared_db().conninfo, with_token());
    const auto id = target_task();
    auto c = s.client();
    auto r = post(*c, "/api/action", cancel_body(id), {});
    REQUIRE(r);
    CHECK(r->status == 401);
    CHECK(r->get_header_value("WWW-Authenticate") == "Bearer");
    r = post(*c, "/api/bulk", json{{"action", "cancel"}, {"filter", json::object()}}.dump(), {});
    REQUIRE(r);
    CHECK(r->status == 401);
    CHECK(shared_db().where(id) == "live");
}

TEST_CASE("security: an action with a wrong token is 401", "[security]") {
    Served s(shared_db().conninfo, with_token());
    const auto id = target_task();
    auto c = s.client();
    std::string same_length = token;
    same_length.back() = same_length.back() == 'x' ? 'y' : 'x';
    for (const httplib::Headers& h :
         {auth(same_length), auth(token.substr(0, token.size() - 1)), auth(token + "x"), auth(""),
          httplib::Headers{{"Authorization", token}},
          httplib::Headers{{"Authorization", "Basic " + token}},
          httplib::Headers{{"Authorization", "bearer " + token + "-"}}}) {
        auto r = post(*c, "/api/action", cancel_body(id), h);
        REQUIRE(r);
        CHECK(r->status == 401);
    }
    CHECK(shared_db().where(id) == "live");
    // The comparison itself, including prefixes and length differences.
    CHECK(console::detail::constant_time_equal(token, token));
    CHECK(console::is_loopback_host("127.0.0.1"));
    CHECK(console::is_loopback_host("127.1.2.3"));
    CHECK_FALSE(console::is_loopback_host("127.0.0.1.nip.io"));
    CHECK_FALSE(console::is_loopback_host("127.evil.example"));
    CHECK_FALSE(console::is_loopback_host("0.0.0.0"));
    CHECK_FALSE(console::detail::constant_time_equal(token.substr(0, 5), token));
    CHECK_FALSE(console::detail::constant_time_equal(token + "a", token));
    CHECK_FALSE(console::detail::constant_time_equal("", token));
}

TEST_CASE("security: a foreign Origin is 403", "[security]") {
    Served s(shared_db().conninfo, with_token());
    const auto id = target_task();
    auto c = s.client();
    for (const std::string& o : std::vector<std::string>{
             "http://evil.example", "https://127.0.0.1.evil.example", "http://localhost:1",
             "http://127.0.0.1:" + std::to_string(s.port) + ".evil.example"}) {
        httplib::Headers h = auth();
        h.emplace("Origin", o);
        auto r = post(*c, "/api/action", cancel_body(id), h);
        REQUIRE(r);
        CHECK(r->status == 403);
    }
    CHECK(shared_db().where(id) == "live");
}

TEST_CASE("security: Origin null is 403", "[security]") {
    Served s(shared_db().conninfo, with_token());
    const auto id = target_task();
    auto c = s.client();
    httplib::Headers h = auth();
    h.emplace("Origin", "null");
    auto r = post(*c, "/api/action", cancel_body(id), h);
    REQUIRE(r);
    CHECK(r->status == 403);
    CHECK(shared_db().where(id) == "live");
}

TEST_CASE("security: no Origin (curl), the console's own and an allowed one are accepted",
          "[security]") {
    console::ConsoleOptions o = with_token();
    o.allowed_origins = {"https://ops.example"};
    Served s(shared_db().conninfo, o);
    auto c = s.client();
    const auto a = target_task(), b = target_task(), d = target_task();
    auto r = post(*c, "/api/action", cancel_body(a));
    REQUIRE(r);
    CHECK(r->status == 200);
    httplib::Headers h = auth();
    h.emplace("Origin", s.origin());
    r = post(*c, "/api/action", cancel_body(b), h);
    REQUIRE(r);
    CHECK(r->status == 200);
    httplib::Headers h2 = auth();
    h2.emplace("Origin", "https://ops.example");
    r = post(*c, "/api/action", cancel_body(d), h2);
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(shared_db().where(a) == "history:2");
    CHECK(shared_db().where(b) == "history:2");
    CHECK(shared_db().where(d) == "history:2");
}

TEST_CASE("security: GET, PUT, DELETE and PATCH on action URLs are 405", "[security]") {
    Served s(shared_db().conninfo, with_token());
    const auto id = target_task();
    auto c = s.client();
    const std::string ids = std::to_string(id);
    for (const std::string& path : std::vector<std::string>{"/api/action", "/api/bulk"}) {
        auto g = c->Get((path + "?action=cancel&ids=" + ids).c_str(), auth());
        REQUIRE(g);
        CHECK(g->status == 405);
        CHECK(g->get_header_value("Allow") == "POST");
        auto p = c->Put(path.c_str(), auth(), cancel_body(id), "application/json");
        REQUIRE(p);
        CHECK(p->status == 405);
        auto d = c->Delete(path.c_str(), auth(), cancel_body(id), "application/json");
        REQUIRE(d);
        CHECK(d->status == 405);
        auto pa = c->Patch(path.c_str(), auth(), cancel_body(id), "application/json");
        REQUIRE(pa);
        CHECK(pa->status == 405);
    }
    CHECK(shared_db().where(id) == "live");
}

TEST_CASE("security: a non-JSON content type is 415", "[security]") {
    Served s(shared_db().conninfo, with_token());
    const auto id = target_task();
    auto c = s.client();
    for (const std::string& type : std::vector<std::string>{
             "text/plain", "application/x-www-form-urlencoded", "application/jsonx"}) {
        auto r = post(*c, "/api/action", cancel_body(id), auth(), type);
        REQUIRE(r);
        CHECK(r->status == 415);
    }
    // A multipart body is refused by cpp-httplib itself (400: it fails to parse it as a form)
    // before the console sees it: not a 415, but nothing happens either.
    auto mp = post(*c, "/api/action", cancel_body(id), auth(), "multipart/form-data; boundary=x");
    REQUIRE(mp);
    CHECK(mp->status >= 400);
    CHECK(shared_db().where(id) == "live");
    auto ok = post(*c, "/api/action", cancel_body(id), auth(), "application/json; charset=utf-8");
    REQUIRE(ok);
    CHECK(ok->status == 200);
}

TEST_CASE("security: a foreign Host header is 403 (DNS rebinding)", "[security]") {
    Served s(shared_db().conninfo, with_token());
    const auto id = target_task();
    auto c = s.client();
    for (const std::string& host : std::vector<std::string>{
             "evil.example", "evil.example:" + std::to_string(s.port), "127.0.0.1.nip.io"}) {
        for (const std::string& path : std::vector<std::string>{
                 "/", "/api/overview", "/api/tasks", "/api/config", "/api/limits", "/api/flows"}) {
            auto r = c->Get(path.c_str(), {{"Host", host}});
            REQUIRE(r);
            CHECK(r->status == 403);
            CHECK(r->body.find("sec.target") == std::string::npos);
        }
        httplib::Headers h = auth();
        h.emplace("Host", host);
        auto r = post(*c, "/api/action", cancel_body(id), h);
        REQUIRE(r);
        CHECK(r->status == 403);
    }
    for (const std::string& host :
         std::vector<std::string>{"localhost:1234", "127.0.0.1", "[::1]:80", "LOCALHOST"}) {
        auto r = c->Get("/api/config", {{"Host", host}});
        REQUIRE(r);
        CHECK(r->status == 200);
    }
    CHECK(shared_db().where(id) == "live");
}

TEST_CASE("security: page size above 200 or 0 is 400", "[security]") {
    Served s(shared_db().conninfo, {});
    auto c = s.client();
    for (const std::string& q :
         std::vector<std::string>{"limit=201", "limit=0", "limit=-1", "limit=abc", "limit=1000"}) {
        auto r = c->Get(("/api/tasks?" + q).c_str());
        REQUIRE(r);
        CHECK(r->status == 400);
    }
    auto r = c->Get("/api/tasks?limit=200");
    REQUIRE(r);
    CHECK(r->status == 200);
}

TEST_CASE("security: a payload preview above 4096 bytes is 400", "[security]") {
    Served s(shared_db().conninfo, {});
    const auto id = target_task();
    auto c = s.client();
    const std::string p = "/api/task/" + std::to_string(id) + "?preview=";
    for (const std::string& n : std::vector<std::string>{"4097", "100000", "-1", "x"}) {
        auto r = c->Get((p + n).c_str());
        REQUIRE(r);
        CHECK(r->status == 400);
    }
    auto r = c->Get((p + "4096").c_str());
    REQUIRE(r);
    CHECK(r->status == 200);
}

TEST_CASE("security: a body above 64 KiB is 413", "[security]") {
    Served s(shared_db().conninfo, with_token());
    const auto id = target_task();
    auto c = s.client();
    json big = {{"action", "cancel"}, {"ids", {id}}, {"pad", std::string(64 * 1024, 'x')}};
    auto r = post(*c, "/api/action", big.dump());
    REQUIRE(r);
    CHECK(r->status == 413);
    CHECK(shared_db().where(id) == "live");
}

TEST_CASE("security: bad JSON, unknown actions, non-numeric IDs and too many IDs are 400",
          "[security]") {
    Served s(shared_db().conninfo, with_token());
    const auto id = target_task();
    auto c = s.client();
    json many = json::array();
    for (int i = 1; i <= 1001; ++i)
        many.push_back(i);
    for (const std::string& b : std::vector<std::string>{
             std::string("{not json"), std::string("[]"), std::string("{\"action\": 5}"),
             json{{"action", "drop_table"}, {"ids", {id}}}.dump(),
             json{{"action", "cancel"}, {"ids", {"abc"}}}.dump(),
             json{{"action", "cancel"}, {"ids", {std::to_string(id) + "; DELETE"}}}.dump(),
             json{{"action", "cancel"}, {"ids", {1.5}}}.dump(),
             json{{"action", "cancel"}, {"ids", {-3}}}.dump(),
             json{{"action", "cancel"}, {"ids", json::array()}}.dump(),
             json{{"action", "cancel"}, {"ids", many}}.dump(), json{{"action", "pause"}}.dump()}) {
        auto r = post(*c, "/api/action", b);
        REQUIRE(r);
        CHECK(r->status == 400);
    }
    for (const std::string& b : std::vector<std::string>{
             json{{"action", "pause"}, {"filter", json::object()}}.dump(),
             json{{"action", "cancel"}, {"filter", json::object()}, {"limit", 1001}}.dump(),
             json{{"action", "cancel"}, {"filter", json::object()}, {"limit", 0}}.dump(),
             json{{"action", "cancel"}, {"filter", {{"state", "bogus"}}}}.dump(),
             json{{"action", "cancel"}, {"filter", {{"after", "5"}}}}.dump(),
             json{{"action", "cancel"}, {"filter", "kind=x"}}.dump()}) {
        auto r = post(*c, "/api/bulk", b);
        REQUIRE(r);
        CHECK(r->status == 400);
    }
    for (const std::string& path :
         std::vector<std::string>{"/api/task/abc", "/api/task/-1", "/api/task/0", "/api/task/1e3",
                                  "/api/task/99999999999999999999"}) {
        auto r = c->Get(path.c_str());
        REQUIRE(r);
        CHECK(r->status == 400);
    }
    CHECK(shared_db().where(id) == "live");
    CHECK(shared_db().scalar("SELECT count(*) FROM ax.pauses") == 0);
}

TEST_CASE("security: --read-only refuses actions even with the token (403)", "[security]") {
    console::ConsoleOptions o = with_token();
    o.read_only = true;
    Served s(shared_db().conninfo, o);
    const auto id = target_task();
    auto c = s.client();
    auto r = post(*c, "/api/action", cancel_body(id));
    REQUIRE(r);
    CHECK(r->status == 403);
    r = post(*c, "/api/action", json{{"action", "pause"}, {"kind", "sec.target"}}.dump());
    REQUIRE(r);
    CHECK(r->status == 403);
    r = post(*c, "/api/bulk", json{{"action", "cancel"}, {"filter", json::object()}}.dump());
    REQUIRE(r);
    CHECK(r->status == 403);
    CHECK(shared_db().where(id) == "live");
    CHECK(shared_db().scalar("SELECT count(*) FROM ax.pauses") == 0);
    CHECK(body_of(c->Get("/api/config"))["read_only"] == true);
}

TEST_CASE("security: responses carry nosniff, a CSP with a fresh nonce and frame-ancestors none",
          "[security]") {
    Served s(shared_db().conninfo, with_token());
    auto c = s.client();
    std::set<std::string> nonces;
    for (int i = 0; i < 3; ++i) {
        auto r = c->Get("/");
        REQUIRE(r);
        REQUIRE(r->status == 200);
        CHECK(r->get_header_value("X-Content-Type-Options") == "nosniff");
        CHECK(r->get_header_value("X-Frame-Options") == "DENY");
        const std::string csp = r->get_header_value("Content-Security-Policy");
        CHECK(csp.find("default-src 'none'") != std::string::npos);
        CHECK(csp.find("frame-ancestors 'none'") != std::string::npos);
        CHECK(csp.find("connect-src 'self'") != std::string::npos);
        const auto at = csp.find("script-src 'nonce-");
        REQUIRE(at != std::string::npos);
        const std::string nonce = csp.substr(at + 18, csp.find('\'', at + 18) - at - 18);
        CHECK(nonce.size() >= 16);
        CHECK(r->body.find("<script nonce=\"" + nonce + "\">") != std::string::npos);
        CHECK(r->body.find("{{NONCE}}") == std::string::npos);
        nonces.insert(nonce);
    }
    CHECK(nonces.size() == 3);
    for (const std::string& path :
         std::vector<std::string>{"/api/overview", "/api/tasks", "/api/config", "/api/task/x",
                                  "/api/limits", "/api/flows"}) {
        auto r = c->Get(path.c_str());
        REQUIRE(r);
        CHECK(r->get_header_value("X-Content-Type-Options") == "nosniff");
        CHECK(r->get_header_value("Content-Security-Policy").find("frame-ancestors 'none'") !=
              std::string::npos);
        CHECK(r->get_header_value("Content-Type") == "application/json");
    }
    auto r = post(*c, "/api/action", "{}", {});
    REQUIRE(r);
    CHECK(r->get_header_value("X-Content-Type-Options") == "nosniff");
}

TEST_CASE("security: the page takes the token from the fragment only and strips it", "[security]") {
    const std::string page(console::console_page_html);
    // Read from location.hash, removed with history.replaceState before anything is fetched.
    CHECK(page.find("location.hash") != std::string::npos);
    CHECK(page.find("history.replaceState") < page.find("fetch("));
    // Sent only as a header; no URL the page builds carries it.
    CHECK(page.find("\"Authorization\"] = \"Bearer \" + token") != std::string::npos);
    CHECK(page.find("token=\" +") == std::string::npos);
    CHECK(page.find("?token") == std::string::npos);
    // Nothing parsed as markup, nothing loaded from elsewhere.
    CHECK(page.find("innerHTML") == std::string::npos);
    CHECK(page.find("outerHTML") == std::string::npos);
    CHECK(page.find("insertAdjacentHTML") == std::string::npos);
    CHECK(page.find("document.write") == std::string::npos);
    CHECK(page.find("eval(") == std::string::npos);
    CHECK(page.find("http://") == std::string::npos);
    CHECK(page.find("https://") == std::string::npos);
    CHECK(page.find("src=") == std::string::npos);
}

TEST_CASE("security: with protect_reads the JSON API needs the token too", "[security]") {
    console::ConsoleOptions o = with_token();
    o.protect_reads = true;
    Served s(shared_db().conninfo, o);
    auto c = s.client();
    for (const std::string& path :
         std::vector<std::string>{"/api/overview", "/api/tasks", "/api/config", "/api/task/1",
                                  "/api/limits", "/api/flows"}) {
        auto r = c->Get(path.c_str());
        REQUIRE(r);
        CHECK(r->status == 401);
        CHECK(r->body.find("sec.target") == std::string::npos);
        auto w = c->Get(path.c_str(), auth(token + "!"));
        REQUIRE(w);
        CHECK(w->status == 401);
    }
    auto r = c->Get("/api/tasks", auth());
    REQUIRE(r);
    CHECK(r->status == 200);
    // The page itself holds no data: served without the token.
    auto p = c->Get("/");
    REQUIRE(p);
    CHECK(p->status == 200);
}

TEST_CASE("security: hostile strings come back as JSON text, never as markup", "[security]") {
    Db db("ax_console_hostile");
    const std::string evil = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>";
    const auto id = db.dead_letter({.kind = evil, .payload = evil}, evil);
    Served s(db.conninfo, {});
    auto c = s.client();
    auto r = c->Get(("/api/task/" + std::to_string(id)).c_str());
    REQUIRE(r);
    REQUIRE(r->status == 200);
    CHECK(r->get_header_value("Content-Type") == "application/json");
    CHECK(r->get_header_value("X-Content-Type-Options") == "nosniff");
    const json t = json::parse(r->body);
    CHECK(t["kind"] == evil);
    CHECK(t["payload"]["preview"] == evil);
    CHECK(t["error_list"][0] == evil);
}

// --------------------------------------------------------------------------------------------
// The API.

TEST_CASE("console API: overview, filters, pagination, task page", "[console_api]") {
    Db db("ax_console_api");
    const std::int64_t a1 = db.enqueue({.kind = "alpha", .payload = "hello world"});
    const std::int64_t a2 = db.enqueue({.kind = "alpha", .priority = ax::Priority::high});
    const std::int64_t b1 =
        db.enqueue({.kind = "beta", .delay = 3600s, .tags = {"gpu"}}); // scheduled
    std::string binary("\x00\x01\x02\xff\xfe", 5);
    const std::int64_t bin = db.enqueue({.kind = "beta", .payload = binary});
    const std::string big(5000, 'y');
    const std::int64_t large = db.enqueue({.kind = "beta", .payload = big});
    const std::int64_t dead = db.dead_letter({.kind = "gamma", .payload = "d"}, "boom: it broke");
    const std::int64_t gone = db.enqueue({.kind = "gamma"});
    pg::Client cl(db.conninfo);
    REQUIRE(cl.cancel(gone) == pg::CancelResult::cancelled);
    // A succeeded task with a result, moved to the history as a node's acknowledgement does.
    const std::int64_t done = db.enqueue({.kind = "delta"});
    db.exec("WITH d AS (DELETE FROM ax.tasks WHERE id = " + std::to_string(done) +
            " RETURNING *) INSERT INTO ax.history (id, kind, priority, state, attempts, "
            "enqueued_at, idem_key, result) SELECT id, kind, priority, 1, 1, enqueued_at, "
            "idem_key, 'the answer'::bytea FROM d");
    // A node holding a2.
    const std::int64_t node = db.scalar(
        "INSERT INTO ax.nodes (name, kinds, tags, host, pid, lease_until) VALUES ('node-a', "
        "'{alpha}', '{gpu}', 'h1', 42, now() + interval '30 s') RETURNING id");
    db.exec("UPDATE ax.tasks SET node_id = " + std::to_string(node) +
            " WHERE id = " + std::to_string(a2));
    REQUIRE(cl.pause(pg::PauseTarget::kind("beta")));
    cl.schedule({.name = "nightly", .cron = "0 3 * * *", .kind = "report", .group = "reports"});

    Served s(db.conninfo, {});
    auto c = s.client();

    SECTION("overview") {
        const json o = body_of(c->Get("/api/overview"));
        CHECK(o["counts"]["pending"]["normal"] == 3); // a1, bin, large (b1 is scheduled)
        CHECK(o["counts"]["pending"]["high"] == 0);
        CHECK(o["counts"]["claimed"]["high"] == 1);
        CHECK(o["counts"]["scheduled"]["normal"] == 1);
        CHECK(o["counts"]["dead_letters"] == 1);
        CHECK(o["counts"]["cancelled"] == 1);
        CHECK(o["counts"]["succeeded"] == 1);
        std::map<std::string, json> kinds;
        for (const auto& k : o["kinds"])
            kinds[k["kind"]] = k;
        CHECK(kinds.at("alpha")["pending"] == 1);
        CHECK(kinds.at("alpha")["claimed"] == 1);
        CHECK(kinds.at("beta")["pending"] == 2);
        CHECK(kinds.at("beta")["scheduled"] == 1);
        CHECK(kinds.at("gamma")["dead_letters"] == 1);
        REQUIRE(o["nodes"].size() == 1);
        CHECK(o["nodes"][0]["name"] == "node-a");
        CHECK(o["nodes"][0]["tags"] == json::array({"gpu"}));
        CHECK(o["nodes"][0]["lease_left_s"].get<double>() > 0);
        CHECK(o["nodes"][0]["running"] == json::array({{{"kind", "alpha"}, {"tasks", 1}}}));
        REQUIRE(o["paused"].size() == 1);
        CHECK(o["paused"][0]["name"] == "beta");
        REQUIRE(o["schedules"].size() == 1);
        CHECK(o["schedules"][0]["name"] == "nightly");
        CHECK(o["schedules"][0]["group"] == "reports");
        CHECK(o["schedules"][0]["group_key"] == "");
        const auto& pm = o["per_minute"];
        REQUIRE(pm["succeeded"].size() == 60);
        std::int64_t succ = 0, fail = 0, canc = 0;
        for (int i = 0; i < 60; ++i) {
            succ += pm["succeeded"][i].get<std::int64_t>();
            fail += pm["failed"][i].get<std::int64_t>();
            canc += pm["cancelled"][i].get<std::int64_t>();
        }
        CHECK(succ == 1);
        CHECK(fail == 1);
        CHECK(canc == 1);
        CHECK(pm["failed"][59].get<std::int64_t>() + pm["failed"][58].get<std::int64_t>() == 1);
    }
    SECTION("filters") {
        const auto ids = [&](const std::string& q) {
            const json r = body_of(c->Get(("/api/tasks?" + q).c_str()));
            std::vector<std::int64_t> out;
            for (const auto& t : r["tasks"])
                out.push_back(t["id"]);
            return out;
        };
        CHECK(ids("kind=alpha") == std::vector<std::int64_t>{a1, a2});
        CHECK(ids("state=scheduled") == std::vector<std::int64_t>{b1});
        CHECK(ids("state=claimed") == std::vector<std::int64_t>{a2});
        CHECK(ids("state=dead_lettered") == std::vector<std::int64_t>{dead});
        CHECK(ids("state=cancelled,succeeded") == std::vector<std::int64_t>{gone, done});
        CHECK(ids("tag=gpu") == std::vector<std::int64_t>{b1});
        CHECK(ids("lane=high") == std::vector<std::int64_t>{a2});
        CHECK(ids("kind=beta&order=newest") == std::vector<std::int64_t>{large, bin, b1});
        CHECK(ids("newer_than=3600&kind=alpha") == std::vector<std::int64_t>{a1, a2});
        CHECK(ids("older_than=3600&kind=alpha").empty());
        auto bad = c->Get("/api/tasks?lane=urgent");
        REQUIRE(bad);
        CHECK(bad->status == 400);
        const json t = body_of(c->Get("/api/tasks?kind=gamma"));
        CHECK(t["tasks"][0]["state"] == "dead_lettered");
        CHECK(t["tasks"][0]["errors"] == 1);
    }
    SECTION("keyset pagination") {
        std::vector<std::int64_t> seen;
        std::int64_t after = 0;
        int pages = 0;
        do {
            const json r =
                body_of(c->Get(("/api/tasks?limit=3&after=" + std::to_string(after)).c_str()));
            CHECK(r["tasks"].size() <= 3);
            for (const auto& t : r["tasks"])
                seen.push_back(t["id"]);
            after = r["next"];
            ++pages;
        } while (after != 0 && pages < 10);
        CHECK(pages == 3);
        const std::vector<std::int64_t> want{a1, a2, b1, bin, large, dead, gone, done};
        CHECK(seen == want);
    }
    SECTION("task page: text payload, attempts, timeline") {
        const json t = body_of(c->Get(("/api/task/" + std::to_string(a1)).c_str()));
        CHECK(t["kind"] == "alpha");
        CHECK(t["state"] == "pending");
        CHECK(t["payload"]["encoding"] == "text");
        CHECK(t["payload"]["preview"] == "hello world");
        CHECK(t["payload"]["bytes"] == 11);
        CHECK(t["payload"]["truncated"] == false);
        CHECK(t["timeline"][0]["event"] == "enqueued");
        CHECK(t["timeline"][1]["event"] == "due");
        const json d = body_of(c->Get(("/api/task/" + std::to_string(dead)).c_str()));
        CHECK(d["state"] == "dead_lettered");
        CHECK(d["reason"] == "permanent error");
        CHECK(d["error_list"] == json::array({"boom: it broke"}));
        CHECK(d["result"]["error"] == "boom: it broke");
        CHECK(d["timeline"][1]["event"] == "failed");
    }
    SECTION("task page: hex for binary, truncated to the preview size") {
        const json b = body_of(c->Get(("/api/task/" + std::to_string(bin)).c_str()));
        CHECK(b["payload"]["encoding"] == "hex");
        CHECK(b["payload"]["preview"] == "000102fffe");
        const json l =
            body_of(c->Get(("/api/task/" + std::to_string(large) + "?preview=100").c_str()));
        CHECK(l["payload"]["encoding"] == "text");
        CHECK(l["payload"]["preview"] == std::string(100, 'y'));
        CHECK(l["payload"]["truncated"] == true);
        CHECK(l["payload"]["bytes"] == 5000);
        const json z =
            body_of(c->Get(("/api/task/" + std::to_string(large) + "?preview=0").c_str()));
        CHECK(z["payload"]["shown"] == 0);
    }
    SECTION("task page: result of a finished task, node, unknown task") {
        const json d = body_of(c->Get(("/api/task/" + std::to_string(done)).c_str()));
        CHECK(d["state"] == "succeeded");
        CHECK(d["payload"].is_null());
        CHECK(d["result"]["preview"] == "the answer");
        CHECK(d["timeline"][1]["event"] == "finished");
        const json a = body_of(c->Get(("/api/task/" + std::to_string(a2)).c_str()));
        CHECK(a["node_id"] == node);
        CHECK(a["state"] == "claimed");
        auto u = c->Get("/api/task/987654321");
        REQUIRE(u);
        CHECK(u->status == 404);
    }
    SECTION("the page under the root") {
        auto r = c->Get("/");
        REQUIRE(r);
        CHECK(r->status == 200);
        CHECK(r->get_header_value("Content-Type") == "text/html; charset=utf-8");
        CHECK(r->body.find("ax console") != std::string::npos);
    }
}

TEST_CASE("console API: limits, key weights and flows", "[console_api]") {
    Db db("ax_console_limits");
    pg::Client cl(db.conninfo);
    // A hostile group, key and flow name: they must come back as JSON text.
    const std::string evil = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>";
    cl.set_limit(evil, {.max_running = 1});
    cl.set_limit("mail", {.per_key = true, .rate_n = 5, .rate_period = 60s});
    cl.set_key_weight(evil, evil, 3);
    std::vector<std::int64_t> grouped;
    for (const char* key : {"a", "b", "b"})
        grouped.push_back(db.enqueue({.kind = "limited", .group = evil, .group_key = key}));
    // Flow "open": a -> b, with a held by a node (running) and b waiting for it.
    const std::vector<pg::FlowTask> two = {
        {.name = "a", .task = {.kind = "step"}},
        {.name = "b", .task = {.kind = "step"}, .depends_on = {"a"}}};
    const pg::FlowEnqueued open = cl.enqueue_flow(evil, two);
    // Flow "done": its one task cancelled, so it is finished.
    const std::vector<pg::FlowTask> one = {{.name = "only", .task = {.kind = "step"}}};
    const pg::FlowEnqueued done = cl.enqueue_flow("done", one);
    REQUIRE(cl.cancel(done.ids[0]) == pg::CancelResult::cancelled);
    const std::int64_t node = db.scalar(
        "INSERT INTO ax.nodes (name, kinds, tags, host, pid, lease_until) VALUES ('node-l', "
        "'{limited,step}', '{}', 'h1', 42, now() + interval '30 s') RETURNING id");
    db.exec("UPDATE ax.tasks SET node_id = " + std::to_string(node) + " WHERE id IN (" +
            std::to_string(grouped[0]) + ", " + std::to_string(open.ids[0]) + ")");

    Served s(db.conninfo, {});
    auto c = s.client();

    SECTION("limits and key weights") {
        auto r = c->Get("/api/limits");
        REQUIRE(r);
        REQUIRE(r->status == 200);
        CHECK(r->get_header_value("Content-Type") == "application/json");
        CHECK(r->body.find("<script>") != std::string::npos); // JSON text, the page's textContent
        const json l = json::parse(r->body);
        std::map<std::string, json> groups;
        for (const auto& g : l["limits"])
            groups[g["group"]] = g;
        REQUIRE(groups.size() == 2);
        const json& e = groups.at(evil);
        CHECK(e["max_running"] == 1);
        CHECK(e["per_key"] == false);
        CHECK(e["rate_n"].is_null());
        CHECK(e["running"] == 1);
        CHECK(e["queued"] == 2);
        CHECK(e["keys"] == 2);
        CHECK(e["next_slot_s"].is_null());
        const json& m = groups.at("mail");
        CHECK(m["max_running"].is_null());
        CHECK(m["per_key"] == true);
        CHECK(m["rate_n"] == 5);
        CHECK(m["rate_period_ms"] == 60000);
        CHECK(m["running"] == 0);
        CHECK(m["queued"] == 0);
        CHECK(l["key_weights"] == json::array({{{"group", evil}, {"key", evil}, {"weight", 3}}}));
        // The same figures in the overview's status and ax::pg's JSON text agree.
        CHECK(cl.limits().size() == 2);
    }
    SECTION("flows: newest first, progress, finished marked, bounded") {
        // b waits for a: the overview counts it as waiting, in its lane, and not as live.
        const json ov = body_of(c->Get("/api/overview"));
        CHECK(ov["counts"]["waiting"]["normal"] == 1);
        CHECK(ov["counts"]["waiting"]["high"] == 0);
        CHECK(ov["counts"]["scheduled"]["normal"] == 0);
        const json f = body_of(c->Get("/api/flows"));
        REQUIRE(f["flows"].size() == 2);
        const json& newest = f["flows"][0];
        CHECK(newest["id"] == done.flow_id);
        CHECK(newest["name"] == "done");
        CHECK(newest["finished"] == true);
        CHECK(newest["cancelled"] == 1);
        const json& o = f["flows"][1];
        CHECK(o["id"] == open.flow_id);
        CHECK(o["name"] == evil);
        CHECK(o["finished"] == false);
        CHECK(o["tasks"] == 2);
        CHECK(o["running"] == 1);
        CHECK(o["waiting"] == 1);
        CHECK(o["pending"] == 0);
        CHECK(o["succeeded"] == 0);
        CHECK(o["created_at"].get<double>() > 0);
        const json first = body_of(c->Get("/api/flows?limit=1"));
        REQUIRE(first["flows"].size() == 1);
        CHECK(first["flows"][0]["id"] == done.flow_id);
        for (const char* bad : {"0", "201", "x", "-1", ""}) {
            auto r = c->Get(("/api/flows?limit=" + std::string(bad)).c_str());
            REQUIRE(r);
            CHECK(r->status == 400);
        }
    }
    SECTION("the page has the panels, filled by text only") {
        auto r = c->Get("/");
        REQUIRE(r);
        CHECK(r->body.find("<table id=\"limits\">") != std::string::npos);
        CHECK(r->body.find("<table id=\"weights\">") != std::string::npos);
        CHECK(r->body.find("<table id=\"flows\">") != std::string::npos);
        CHECK(r->body.find("api(\"api/limits\")") != std::string::npos);
        CHECK(r->body.find("api(\"api/flows?limit=20\")") != std::string::npos);
    }
}

TEST_CASE("console actions: cancel, retry now, replay, discard, pause, resume",
          "[console_actions]") {
    Db db("ax_console_actions");
    const auto pending = db.enqueue({.kind = "act"});
    const auto scheduled = db.enqueue({.kind = "act", .delay = 3600s});
    const auto d1 = db.dead_letter({.kind = "act"}, "e1");
    const auto d2 = db.dead_letter({.kind = "act"}, "e2");
    Served s(db.conninfo, with_token());
    auto c = s.client();
    const auto act = [&](const std::string& action, std::int64_t id) {
        const json r =
            body_of(post(*c, "/api/action", json{{"action", action}, {"ids", {id}}}.dump()));
        return r["results"][0]["result"].get<std::string>();
    };
    CHECK(act("retry", pending) == "not_waiting");
    CHECK(act("retry", scheduled) == "retried");
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE id = " + std::to_string(scheduled) +
                    " AND run_at <= now()") == 1);
    CHECK(act("cancel", pending) == "cancelled");
    CHECK(db.where(pending) == "history:2");
    CHECK(act("cancel", pending) == "finished");
    CHECK(act("replay", pending) == "not_a_dead_letter");
    CHECK(act("replay", d1) == "replayed");
    CHECK(db.where(d1) == "live");
    CHECK(act("discard", d2) == "discarded");
    CHECK(db.where(d2) == "history:3");
    const json p =
        body_of(post(*c, "/api/action", json{{"action", "pause"}, {"kind", "act"}}.dump()));
    CHECK(p["changed"] == true);
    CHECK(db.scalar("SELECT count(*) FROM ax.pauses WHERE scope = 'kind' AND name = 'act'") == 1);
    const json p2 =
        body_of(post(*c, "/api/action", json{{"action", "pause"}, {"kind", "act"}}.dump()));
    CHECK(p2["changed"] == false);
    const json r =
        body_of(post(*c, "/api/action", json{{"action", "resume"}, {"kind", "act"}}.dump()));
    CHECK(r["changed"] == true);
    CHECK(db.scalar("SELECT count(*) FROM ax.pauses") == 0);
    // Several IDs in one request, reported with counts.
    const auto x = db.enqueue({.kind = "act"}), y = db.enqueue({.kind = "act"});
    const json m =
        body_of(post(*c, "/api/action", json{{"action", "cancel"}, {"ids", {x, y, 99999}}}.dump()));
    CHECK(m["counts"]["cancelled"] == 2);
    CHECK(m["counts"]["unknown"] == 1);
    CHECK(db.where(x) == "history:2");
    CHECK(db.where(y) == "history:2");
}

TEST_CASE("console actions: bulk on a filter, bounded and reported", "[console_actions]") {
    Db db("ax_console_bulk");
    std::vector<std::int64_t> bulk;
    for (int i = 0; i < 12; ++i)
        bulk.push_back(db.enqueue({.kind = "bulk"}));
    const auto other = db.enqueue({.kind = "keep"});
    std::vector<std::int64_t> dead;
    for (int i = 0; i < 3; ++i)
        dead.push_back(db.dead_letter({.kind = "bulk"}, "x"));
    const auto dead_other = db.dead_letter({.kind = "keep"}, "x");
    Served s(db.conninfo, with_token());
    auto c = s.client();
    const auto run = [&](const json& b) { return body_of(post(*c, "/api/bulk", b.dump())); };

    json r = run({{"action", "cancel"}, {"filter", {{"kind", "bulk"}}}, {"limit", 5}});
    CHECK(r["matched"] == 5);
    CHECK(r["more"] == true);
    CHECK(r["counts"]["cancelled"] == 5);
    CHECK(db.scalar("SELECT count(*) FROM ax.history WHERE kind = 'bulk' AND state = 2") == 5);
    r = run({{"action", "cancel"}, {"filter", {{"kind", "bulk"}}}});
    CHECK(r["matched"] == 7);
    CHECK(r["more"] == false);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE kind = 'bulk'") == 0);
    CHECK(db.where(other) == "live");
    // The dead letters of kind bulk were not cancelled: a bulk cancel acts on live tasks only.
    CHECK(db.scalar("SELECT count(*) FROM ax.dead_letters WHERE kind = 'bulk'") == 3);
    r = run({{"action", "replay"}, {"filter", {{"kind", "bulk"}, {"state", "dead_lettered"}}}});
    CHECK(r["matched"] == 3);
    CHECK(r["counts"]["replayed"] == 3);
    for (const auto id : dead)
        CHECK(db.where(id) == "live");
    CHECK(db.where(dead_other) == "dead");
    r = run({{"action", "discard"}, {"filter", {{"kind", "keep"}}}});
    CHECK(r["counts"]["discarded"] == 1);
    CHECK(db.where(dead_other) == "history:3");
    CHECK(db.where(other) == "live");
    // A state the action does not apply to matches nothing.
    r = run({{"action", "replay"}, {"filter", {{"state", "pending"}}}});
    CHECK(r["matched"] == 0);
    CHECK(db.where(other) == "live");
}

TEST_CASE("console: a query past the statement timeout is a 503, then the console recovers",
          "[console_timeout]") {
    Db db("ax_console_timeout");
    db.enqueue({.kind = "slow"});
    console::ConsoleOptions o = with_token();
    o.statement_timeout = 300ms;
    o.pool_size = 1;
    Served s(db.conninfo, o);
    auto c = s.client();
    REQUIRE(c->Get("/api/overview")->status == 200);
    // Another session holds an exclusive lock on the live table: every read of it waits.
    auto locker = db.sql();
    locker.exec("BEGIN");
    locker.exec("LOCK TABLE ax.tasks IN ACCESS EXCLUSIVE MODE");
    for (const std::string& path :
         std::vector<std::string>{"/api/overview", "/api/tasks", "/api/task/1", "/api/limits"}) {
        const auto t0 = std::chrono::steady_clock::now();
        auto r = c->Get(path.c_str());
        REQUIRE(r);
        CHECK(r->status == 503);
        CHECK(r->body.find("statement timeout") != std::string::npos);
        CHECK(std::chrono::steady_clock::now() - t0 < 20s); // a hang guard, not a speed claim
    }
    auto a = post(*c, "/api/action", cancel_body(1));
    REQUIRE(a);
    CHECK(a->status == 503);
    locker.exec("ROLLBACK");
    auto r = c->Get("/api/overview");
    REQUIRE(r);
    CHECK(r->status == 200);
    auto t = c->Get("/api/tasks");
    REQUIRE(t);
    CHECK(t->status == 200);
    CHECK(json::parse(t->body)["tasks"].size() == 1);
}

TEST_CASE("console: mounted on a MetricsServer beside its routes", "[console_mount]") {
    Db db("ax_console_mount");
    const auto id = db.enqueue({.kind = "mounted"});
    console::Console con(db.conninfo, with_token());
    ax::http::MetricsServerOptions mo;
    mo.routes = [&con](httplib::Server& srv) { con.mount(srv, "/console"); };
    ax::http::MetricsServer server([] { return ax::MetricsSnapshot{}; }, mo);
    httplib::Client c("127.0.0.1", server.port());
    auto m = c.Get("/metrics");
    REQUIRE(m);
    CHECK(m->status == 200);
    auto page = c.Get("/console/");
    REQUIRE(page);
    CHECK(page->status == 200);
    CHECK(page->body.find("ax console") != std::string::npos);
    auto redirect = c.Get("/console");
    REQUIRE(redirect);
    CHECK(redirect->status == 302);
    CHECK(redirect->get_header_value("Location") == "/console/");
    const json t = body_of(c.Get("/console/api/tasks?kind=mounted"));
    REQUIRE(t["tasks"].size() == 1);
    auto no = c.Post("/console/api/action", cancel_body(id), "application/json");
    REQUIRE(no);
    CHECK(no->status == 401);
    CHECK(db.where(id) == "live");
    auto yes = c.Post("/console/api/action", auth(), cancel_body(id), "application/json");
    REQUIRE(yes);
    CHECK(yes->status == 200);
    CHECK(db.where(id) == "history:2");
    auto dash = c.Get("/");
    REQUIRE(dash);
    CHECK(dash->status == 200);
    CHECK(dash->body.find("ax console") == std::string::npos); // the dashboard, untouched
    CHECK_THROWS_AS(con.mount(*std::make_unique<httplib::Server>(), "console/"),
                    std::invalid_argument);
}

TEST_CASE("console: concurrent actions and reads on a small pool, each task acted on once",
          "[console_concurrency]") {
    Db db("ax_console_concurrency");
    constexpr int writers = 6, per_writer = 20;
    std::vector<std::vector<std::int64_t>> ids(writers);
    {
        pg::Client cl(db.conninfo);
        for (int w = 0; w < writers; ++w)
            for (int i = 0; i < per_writer; ++i)
                ids[static_cast<std::size_t>(w)].push_back(cl.enqueue({.kind = "race"}).id);
    }
    console::ConsoleOptions o = with_token();
    o.pool_size = 2; // fewer connections kept than threads asking: extras open and close
    Served s(db.conninfo, o);
    std::atomic<int> bad{0}, cancelled{0}, reads{0};
    std::atomic<bool> writing{true};
    std::vector<std::thread> threads;
    for (int w = 0; w < writers; ++w)
        threads.emplace_back([&, w] {
            auto c = s.client();
            const auto& mine = ids[static_cast<std::size_t>(w)];
            const auto& next = ids[static_cast<std::size_t>((w + 1) % writers)];
            for (std::size_t i = 0; i < mine.size(); ++i) {
                // Every task twice, from two writers: exactly one of them cancels it.
                for (const std::int64_t target : {mine[i], next[i]}) {
                    auto r = post(*c, "/api/action", cancel_body(target));
                    if (!r || r->status != 200) {
                        ++bad;
                        continue;
                    }
                    const std::string res = json::parse(r->body)["results"][0]["result"];
                    if (res == "cancelled")
                        ++cancelled;
                    else if (res != "finished")
                        ++bad;
                }
            }
        });
    std::vector<std::thread> readers;
    for (int r = 0; r < 2; ++r)
        readers.emplace_back([&] {
            auto c = s.client();
            while (writing.load()) {
                for (const char* path : {"/api/overview", "/api/tasks?kind=race&limit=200"}) {
                    auto res = c->Get(path);
                    if (!res || res->status != 200)
                        ++bad;
                    else
                        ++reads;
                }
            }
        });
    for (auto& t : threads)
        t.join();
    writing = false;
    for (auto& t : readers)
        t.join();
    CHECK(bad.load() == 0);
    CHECK(cancelled.load() == writers * per_writer);
    CHECK(reads.load() > 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.history WHERE kind = 'race' AND state = 2") ==
          writers * per_writer);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 0);
}

int main(int argc, char** argv) {
    const char* conninfo = std::getenv("AX_PG_CONNINFO");
    if (conninfo == nullptr || *conninfo == '\0') {
        std::printf("SKIPPED: AX_PG_CONNINFO is not set, so no PostgreSQL server to test against "
                    "(run under scripts/pg-server.sh, as scripts/test.sh's pg stage does)\n");
        return 77;
    }
    g_base = conninfo;
    return Catch::Session().run(argc, argv);
}
