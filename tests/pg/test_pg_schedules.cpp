// Recurring schedules against a real PostgreSQL (scripts/pg-server.sh exports AX_PG_CONNINFO;
// without one it exits 77, skipped): the Client API and ax-pg, exactly-once ticks raced by three
// node processes of which one is killed with SIGKILL mid-firing, and the missed-ticks policies
// after every node was down. Each test case works in a database of its own. The cron parser and
// the DST rules are unit-tested without a server in tests/test_cron.cpp.

#define CATCH_CONFIG_RUNNER

#include <ax/pg/pg.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <signal.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;
namespace pg = ax::pg;

namespace {

std::string g_base;     // AX_PG_CONNINFO
std::string g_node_exe; // pg_test_node beside this executable
std::string g_ax_pg;    // tools/ax-pg of the same build

struct Db {
    std::string conninfo;
    explicit Db(const std::string& name) {
        auto admin = pg::detail::Connection::open(g_base);
        admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
        admin.exec(("CREATE DATABASE " + name).c_str());
        conninfo = g_base + " dbname=" + name;
        pg::Client c(conninfo, {.require_schema = false});
        c.migrate();
        auto s = sql();
        s.exec("CREATE TABLE results (task_id bigint PRIMARY KEY, node text NOT NULL)");
        s.exec("CREATE TABLE runs (task_id bigint NOT NULL, node text NOT NULL)");
    }
    [[nodiscard]] pg::detail::Connection sql() const {
        return pg::detail::Connection::open(conninfo);
    }
    std::int64_t scalar(const std::string& q) const {
        auto s = sql();
        return s.exec(q.c_str()).int64(0, 0);
    }
    std::string text(const std::string& q) const {
        auto s = sql();
        return std::string(s.exec(q.c_str()).text(0, 0));
    }
};

/// Polls `pred` every 20 ms; false if `limit` (a generous hang guard, not a speed claim) passed.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
        if (pred())
            return true;
        std::this_thread::sleep_for(20ms);
    }
    return pred();
}

/// A pg_test_node child process (it fires schedules: NodeOptions::fire_schedules is on by
/// default).
struct Proc {
    pid_t pid = -1;
    Proc(const std::string& db, const std::string& name, std::vector<std::string> extra = {}) {
        std::vector<std::string> args = {g_node_exe, "--db",    db,      "--name",
                                         name,       "--kinds", "record"};
        args.insert(args.end(), extra.begin(), extra.end());
        pid = fork();
        if (pid == 0) {
            std::vector<char*> argv;
            for (auto& a : args)
                argv.push_back(a.data());
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
        REQUIRE(pid > 0);
    }
    void kill9() {
        if (pid <= 0)
            return;
        kill(pid, SIGKILL);
        int st = 0;
        waitpid(pid, &st, 0);
        pid = -1;
    }
    Proc(const Proc&) = delete;
    Proc& operator=(const Proc&) = delete;
    ~Proc() { kill9(); }
};

/// Runs a shell command; its stdout and exit status.
std::pair<std::string, int> run(const std::string& cmd) {
    std::string out;
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr)
        out += buf;
    const int st = pclose(p);
    return {out, WIFEXITED(st) ? WEXITSTATUS(st) : -1};
}

std::string shell_quoted(const std::string& s) {
    return "'" + s + "'";
}

} // namespace

TEST_CASE("schedules: define, replace, list, remove; bad input refused", "[sched_api]") {
    Db db("ax_sched_api");
    pg::Client c(db.conninfo);
    auto error_of = [&](const pg::ScheduleSpec& s) {
        try {
            c.schedule(s);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    CHECK_THAT(error_of({.name = "a", .cron = "0 25 * * *", .kind = "k"}),
               Catch::Contains("cron = '0 25 * * *'") && Catch::Contains("hour field '25'"));
    CHECK_THAT(error_of({.name = "a", .cron = "@daily", .time_zone = "Nowhere/City", .kind = "k"}),
               Catch::Contains("time_zone = 'Nowhere/City'") && Catch::Contains("not found"));
    CHECK_THAT(error_of({.name = "", .cron = "@daily", .kind = "k"}), Catch::Contains("name"));
    CHECK_THAT(error_of({.name = "a", .cron = "@daily", .kind = ""}), Catch::Contains("kind"));
    CHECK_THAT(error_of({.name = "a", .cron = "@daily", .kind = "k", .grace = 10ms}),
               Catch::Contains("grace"));
    CHECK_THAT(error_of({.name = "a", .cron = "@daily", .kind = "k", .tags = {"a,b"}}),
               Catch::Contains("tags"));
    CHECK_THAT(error_of({.name = "a", .cron = "@daily", .kind = "k", .group_key = "t1"}),
               Catch::Contains("group_key = 't1'") && Catch::Contains("needs a group"));
    CHECK_THAT(
        error_of({.name = "a", .cron = "@daily", .kind = "k", .group = std::string(201, 'g')}),
        Catch::Contains("group = 201 bytes"));
    CHECK_THAT(error_of({.name = "a",
                         .cron = "@daily",
                         .kind = "k",
                         .group = "g",
                         .group_key = std::string(201, 'k')}),
               Catch::Contains("group_key = 201 bytes"));
    CHECK(db.scalar("SELECT count(*) FROM ax.schedules") == 0); // nothing half-written

    const pg::ScheduleSpec nightly{.name = "nightly",
                                   .cron = "30 2 * * *",
                                   .time_zone = "America/New_York",
                                   .kind = "report",
                                   .payload = std::string("\0\x01\xff", 3),
                                   .priority = ax::Priority::high,
                                   .tags = {"gpu", "eu"},
                                   .max_attempts = 7,
                                   .timeout = 1500ms,
                                   .group = "reports",
                                   .group_key = "tenant-7",
                                   .missed = pg::MissedTicks::run_once,
                                   .grace = 120s};
    CHECK(c.schedule(nightly));
    auto list = c.schedules();
    REQUIRE(list.size() == 1);
    const pg::ScheduleInfo& s = list[0];
    CHECK(s.spec.name == "nightly");
    CHECK(s.spec.cron == "30 2 * * *");
    CHECK(s.spec.time_zone == "America/New_York");
    CHECK(s.spec.kind == "report");
    CHECK(s.spec.payload == nightly.payload);
    CHECK(s.spec.priority == ax::Priority::high);
    CHECK(s.spec.tags == std::vector<std::string>{"gpu", "eu"});
    CHECK(s.spec.max_attempts == 7);
    CHECK(s.spec.timeout == 1500ms);
    CHECK(s.spec.missed == pg::MissedTicks::run_once);
    CHECK(s.spec.grace == 120s);
    CHECK(s.spec.group == "reports");
    CHECK(s.spec.group_key == "tenant-7");
    CHECK(s.fired == 0);
    CHECK(s.last_tick_s == 0);
    CHECK(s.error.empty());
    // the next tick: 02:30 New York time, within a day of the server's now
    const std::int64_t now = db.scalar("SELECT floor(extract(epoch FROM now()))::int8");
    CHECK(s.next_at_s > now);
    CHECK(s.next_at_s <= now + 86400 + 3600);
    const auto local = ax::detail::civil_of(
        s.next_at_s + ax::detail::TimeZone::load("America/New_York").offset_at(s.next_at_s));
    CHECK(local.hour == 2);
    CHECK(local.minute == 30);

    // Replaced with the same cron and zone: the pending tick stays (a deploy loses no tick).
    db.sql().exec("UPDATE ax.schedules SET next_at = next_at - interval '1 hour'");
    pg::ScheduleSpec changed = nightly;
    changed.kind = "report2";
    CHECK_FALSE(c.schedule(changed));
    list = c.schedules();
    REQUIRE(list.size() == 1);
    CHECK(list[0].spec.kind == "report2");
    CHECK(list[0].spec.group == "reports"); // replaced whole: the group came along
    CHECK(list[0].next_at_s == s.next_at_s - 3600);
    // Another cron: ticks restart from now.
    changed.cron = "@hourly";
    CHECK_FALSE(c.schedule(changed));
    list = c.schedules();
    CHECK(list[0].next_at_s % 3600 == 0);
    CHECK(list[0].next_at_s > now);
    CHECK(list[0].next_at_s <= now + 3600 + 5);

    CHECK(c.unschedule("nightly"));
    CHECK_FALSE(c.unschedule("nightly"));
    CHECK(c.schedules().empty());

    // ax-pg schedules add | list | remove
    const std::string tool = g_ax_pg + " --db " + shell_quoted(db.conninfo) + " schedules ";
    auto [out, rc] = run(tool + "add berlin '*/5 * * * *' cleanup --tz Europe/Berlin --missed "
                                "run_once --priority low --tags a,b --grace-s 30 --group sweep "
                                "--group-key eu");
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::Contains("schedule berlin created"));
    std::tie(out, rc) = run(tool + "list");
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::Contains("1 schedule(s)") && Catch::Contains("berlin") &&
                        Catch::Contains("Europe/Berlin") && Catch::Contains("cleanup") &&
                        Catch::Contains("run_once") && Catch::Contains("grace 30 s") &&
                        Catch::Contains("group sweep, key eu"));
    std::tie(out, rc) = run(tool + "add bad '* * * * 9' k");
    CHECK(rc == 2);
    CHECK_THAT(out, Catch::Contains("day-of-week field '9'"));
    std::tie(out, rc) = run(tool + "remove berlin nosuch");
    CHECK(rc == 2);
    CHECK_THAT(out,
               Catch::Contains("berlin: removed") && Catch::Contains("nosuch: no such schedule"));
    CHECK(c.schedules().empty());
}

TEST_CASE("schedules: three nodes, one killed mid-firing: every tick exactly once",
          "[sched_exactly_once]") {
    Db db("ax_sched_once");
    // Firing holds each schedule row's lock for a while (as a loaded server would), so the
    // nodes collide on due rows and the SIGKILL below lands inside a firing transaction.
    {
        auto s = db.sql();
        s.exec("CREATE FUNCTION slow_fire() RETURNS trigger LANGUAGE plpgsql AS "
               "$$ BEGIN PERFORM pg_sleep(0.01); RETURN NEW; END $$");
        s.exec("CREATE TRIGGER slow_fire BEFORE UPDATE ON ax.schedules FOR EACH ROW "
               "EXECUTE FUNCTION slow_fire()");
    }
    Proc a(db.conninfo, "a"), b(db.conninfo, "b");
    Proc victim(db.conninfo + " application_name=victim", "victim");
    pg::Client c(db.conninfo);
    constexpr int schedules = 24;
    // Every second; no node handles kind "tick", so every task stays in ax.tasks to be counted.
    // The grace is long: every tick is on time, none may be skipped or merged.
    // The odd ones put their ticks in group "g", each under a key of its own.
    for (int i = 0; i < schedules; ++i)
        c.schedule({.name = "s" + std::to_string(i),
                    .cron = "* * * * * *",
                    .kind = "tick",
                    .group = i % 2 == 1 ? "g" : "",
                    .group_key = i % 2 == 1 ? "k" + std::to_string(i) : "",
                    .grace = 3600s});
    const auto tasks = [&] { return db.scalar("SELECT count(*) FROM ax.tasks"); };
    REQUIRE(wait_until([&] { return tasks() >= schedules * 2; }, 30s));
    // SIGKILL while a firing transaction is open (the row locks show it), then a new node.
    const bool in_firing = wait_until(
        [&] {
            return db.scalar("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                             "WHERE l.relation = 'ax.schedules'::regclass AND l.mode = "
                             "'RowShareLock' AND a.application_name = 'victim'") > 0;
        },
        10s);
    victim.kill9();
    // Whether or not it landed inside (a hint, not the claim), nothing may be lost or doubled.
    std::printf("victim killed %s a firing transaction\n", in_firing ? "inside" : "outside");
    Proc late(db.conninfo, "late");
    const std::int64_t at_kill = tasks();
    REQUIRE(wait_until([&] { return tasks() >= at_kill + schedules * 2; }, 30s));
    a.kill9();
    b.kill9();
    late.kill9();

    // Per schedule: one task per tick (keys distinct), ticks contiguous from the first after
    // the schedule was made up to the row's next_at, and the row's counters agree.
    auto s = db.sql();
    auto r = s.exec(
        "SELECT c.name, count(t.id), count(DISTINCT t.idem_key), "
        "       min(substr(t.idem_key, length(c.name) + 11)), "
        "       floor(extract(epoch FROM c.next_at))::int8 - "
        "       floor(extract(epoch FROM min(to_timestamp(substr(t.idem_key, length(c.name) + 11), "
        "             'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'))))::int8, c.fired, "
        "       count(t.id) FILTER (WHERE t.kind <> 'tick'), "
        "       count(t.id) FILTER (WHERE t.grp IS DISTINCT FROM c.grp "
        "                              OR t.grp_key <> c.grp_key) "
        "FROM ax.schedules c LEFT JOIN ax.tasks t ON t.idem_key LIKE 'schedule:' || c.name || ':%' "
        "GROUP BY c.name, c.next_at, c.fired ORDER BY c.name");
    REQUIRE(r.rows() == schedules);
    std::int64_t total = 0;
    for (int i = 0; i < r.rows(); ++i) {
        INFO("schedule " << r.text(i, 0));
        const std::int64_t n = r.int64(i, 1);
        CHECK(n >= 3);
        CHECK(r.int64(i, 2) == n); // no tick twice
        CHECK(r.int64(i, 4) == n); // no tick lost: [first, next_at) has n seconds
        CHECK(r.int64(i, 5) == n); // the row's count agrees
        CHECK(r.int64(i, 6) == 0);
        CHECK(r.int64(i, 7) == 0); // each tick's task in its schedule's group and key
        total += n;
    }
    CHECK(total == tasks());
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp = 'g' AND grp_key ~ '^k[0-9]+$'") >=
          schedules / 2 * 3);
    // keys are in ax.idem_keys too (the second arbiter), one per task
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys WHERE idem_key LIKE 'schedule:%'") == total);
}

TEST_CASE("schedules: missed ticks after every node was down: skip vs run once", "[sched_missed]") {
    Db db("ax_sched_missed");
    pg::Client c(db.conninfo);
    c.schedule({.name = "skip", .cron = "@yearly", .kind = "tick"});
    c.schedule(
        {.name = "once", .cron = "@yearly", .kind = "tick", .missed = pg::MissedTicks::run_once});
    c.schedule({.name = "hourly_once",
                .cron = "0 * * * *",
                .time_zone = "Europe/Berlin",
                .kind = "tick",
                .missed = pg::MissedTicks::run_once,
                .grace = 1s});
    // Written around Client::schedule: a node cannot parse it and parks it with the reason.
    db.sql().exec("INSERT INTO ax.schedules (name, cron, time_zone, kind, payload, priority, tags, "
                  "max_attempts, timeout_ms, run_once, grace_ms, next_at) VALUES ('broken', "
                  "'61 * * * *', 'UTC', 'tick', '', 1, '{}', 4, 0, false, 60000, now())");
    // A template the server refuses (here a trigger; in life a hand-written row or a trigger of
    // the application's): that schedule is parked with the server's reason, the others fire.
    c.schedule({.name = "poison",
                .cron = "@yearly",
                .kind = "poison",
                .missed = pg::MissedTicks::run_once});
    db.sql().exec("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF "
                  "NEW.kind = 'poison' THEN RAISE EXCEPTION 'poison refused'; END IF; RETURN "
                  "NEW; END $$; CREATE TRIGGER refuse BEFORE INSERT ON ax.tasks FOR EACH ROW "
                  "EXECUTE FUNCTION refuse()");
    // No node ran since 2020 (the test's way to put ticks in the past).
    db.sql().exec("UPDATE ax.schedules SET next_at = '2020-01-01 00:00:00+00' WHERE name IN "
                  "('skip', 'once', 'poison'); UPDATE ax.schedules SET next_at = "
                  "date_trunc('hour', now()) - interval '5 hours' WHERE name = 'hourly_once'");
    pg::NodeOptions o;
    o.conninfo = db.conninfo;
    o.name = "n";
    pg::Node node(o);
    node.handle("other", [](pg::Job&) {});
    node.start();
    REQUIRE(wait_until(
        [&] { return db.scalar("SELECT count(*) FROM ax.schedules WHERE next_at > now()") == 5; },
        30s));
    node.stop();
    CHECK(node.stats().schedule_tasks == 2);

    const std::int64_t year = db.scalar("SELECT extract(year FROM now())::int8");
    const auto info = c.schedules();
    REQUIRE(info.size() == 5);
    auto find = [&](const std::string& n) {
        for (const auto& s : info)
            if (s.spec.name == n)
                return s;
        FAIL("no schedule " << n);
        return pg::ScheduleInfo{};
    };
    // skip: nothing enqueued, one missed firing, next New Year
    const auto skip = find("skip");
    CHECK(skip.fired == 0);
    CHECK(skip.missed == 1);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE idem_key LIKE 'schedule:skip:%'") == 0);
    CHECK(ax::detail::civil_of(skip.next_at_s).year == year + 1);
    // run once: one task for all six missed New Years, keyed by the first missed tick
    const auto once = find("once");
    CHECK(once.fired == 1);
    CHECK(once.missed == 1);
    CHECK(db.text("SELECT string_agg(idem_key, ' ') FROM ax.tasks WHERE idem_key LIKE "
                  "'schedule:once:%'") == "schedule:once:2020-01-01T00:00:00Z");
    CHECK(ax::detail::civil_of(once.next_at_s).year == year + 1);
    // hourly, 5 hours missed: one task, next tick the next whole hour
    const auto hourly = find("hourly_once");
    CHECK(hourly.fired == 1);
    CHECK(hourly.missed == 1);
    CHECK(hourly.next_at_s % 3600 == 0);
    // the broken row: parked with the parser's reason, nothing enqueued
    const auto broken = find("broken");
    CHECK(broken.fired == 0);
    CHECK(broken.next_at_s == 0);
    CHECK_THAT(broken.error, Catch::Contains("minute field '61'"));
    const auto poison = find("poison");
    CHECK(poison.fired == 0);
    CHECK(poison.next_at_s == 0);
    CHECK_THAT(poison.error, Catch::Contains("poison refused"));
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 2);
}

int main(int argc, char** argv) {
    const char* conninfo = std::getenv("AX_PG_CONNINFO");
    if (conninfo == nullptr || *conninfo == '\0') {
        std::printf("SKIPPED: AX_PG_CONNINFO is not set, so no PostgreSQL server to test against "
                    "(run under scripts/pg-server.sh, as scripts/test.sh's pg stage does)\n");
        return 77;
    }
    g_base = conninfo;
    const std::string self = argv[0];
    const std::string dir = self.substr(0, self.rfind('/') + 1);
    g_node_exe = dir + "pg_test_node";
    g_ax_pg = dir + "../../tools/ax-pg";
    return Catch::Session().run(argc, argv);
}
