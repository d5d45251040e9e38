// ax-pg: operator's tool for ax's distributed mode.
//
//   ax-pg [--db CONNINFO] migrate
//   ax-pg [--db CONNINFO] status
//   ax-pg [--db CONNINFO] dead-letters list [LIMIT]
//   ax-pg [--db CONNINFO] dead-letters replay ID...
//   ax-pg [--db CONNINFO] dead-letters discard ID...
//   ax-pg [--db CONNINFO] pause|resume kind KIND | lane high|normal|low
//   ax-pg [--db CONNINFO] pause                          (lists what is paused)
//   ax-pg [--db CONNINFO] limits list | clear GROUP
//   ax-pg [--db CONNINFO] limits set GROUP [running=N] [rate=N/MS] [per-key]
//   ax-pg [--db CONNINFO] limits weight GROUP KEY N
//   ax-pg [--db CONNINFO] tasks list [--state S[,S...]] [--kind K] [--tag T] [--lane L]
//                                    [--key KEY] [--older-than SEC] [--newer-than SEC]
//                                    [--limit N] [--after ID] [--newest-first] [--explain]
//   ax-pg [--db CONNINFO] tasks show ID
//   ax-pg [--db CONNINFO] schedules list
//   ax-pg [--db CONNINFO] schedules add NAME CRON KIND [--tz ZONE] [--payload TEXT]
//         [--priority high|normal|low] [--tags a,b] [--max-attempts N] [--timeout-ms N]
//         [--missed skip|run_once] [--grace-s N] [--group G [--group-key K]]
//   ax-pg [--db CONNINFO] schedules remove NAME...
//   ax-pg [--db CONNINFO] serve [--host 127.0.0.1] [--port 8090] [--token T] [--read-only]
//         [--statement-timeout-ms N] [--allow-origin O]... [--allow-host H]...
//   ax-pg [--db CONNINFO] flows list [LIMIT]
//   ax-pg [--db CONNINFO] flows show ID
//
// Without --db the connection string comes from $AX_PG_CONNINFO, else libpq's defaults (PGHOST,
// PGPORT, PGDATABASE, ...). Exit status: 0 ok, 1 a database error, 2 bad usage or input.

#include <algorithm>
#include <ax/pg/client.hpp>
#ifdef AX_PG_CONSOLE
#include <ax/console/console.hpp>
#include <csignal>
#include <pthread.h>
#include <thread>
#endif
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

int usage() {
    std::fprintf(stderr,
                 "usage: ax-pg [--db CONNINFO] migrate\n"
                 "       ax-pg [--db CONNINFO] status\n"
                 "       ax-pg [--db CONNINFO] dead-letters list [LIMIT]\n"
                 "       ax-pg [--db CONNINFO] dead-letters replay|discard ID...\n"
                 "       ax-pg [--db CONNINFO] pause|resume kind KIND | lane LANE\n"
                 "       ax-pg [--db CONNINFO] pause   (lists what is paused)\n"
                 "       ax-pg [--db CONNINFO] limits list | clear GROUP\n"
                 "       ax-pg [--db CONNINFO] limits set GROUP [running=N] [rate=N/MS] "
                 "[per-key]\n"
                 "       ax-pg [--db CONNINFO] limits weight GROUP KEY N   (fair-share weight "
                 "1..1000)\n"
                 "       ax-pg [--db CONNINFO] tasks list [--state S[,S...]] [--kind K] "
                 "[--tag T] [--lane L] [--key KEY]\n"
                 "             [--older-than SEC] [--newer-than SEC] [--limit N] "
                 "[--after ID] [--newest-first] [--explain]\n"
                 "       ax-pg [--db CONNINFO] tasks show ID\n"
                 "       ax-pg [--db CONNINFO] schedules list\n"
                 "       ax-pg [--db CONNINFO] schedules add NAME CRON KIND [--tz ZONE]\n"
                 "             [--payload TEXT] [--priority high|normal|low] [--tags a,b]\n"
                 "             [--max-attempts N] [--timeout-ms N] [--missed skip|run_once]\n"
                 "             [--grace-s N] [--group G [--group-key K]]\n"
                 "       ax-pg [--db CONNINFO] schedules remove NAME...\n"
                 "       ax-pg [--db CONNINFO] serve [--host 127.0.0.1] [--port 8090] "
                 "[--token T] [--read-only]\n"
                 "             [--statement-timeout-ms N] [--allow-origin O]... "
                 "[--allow-host H]...\n"
                 "serve's token may come from $AX_CONSOLE_TOKEN instead (keeps it out of ps).\n"
                 "       ax-pg [--db CONNINFO] flows list [LIMIT]\n"
                 "       ax-pg [--db CONNINFO] flows show ID\n"
                 "CONNINFO defaults to $AX_PG_CONNINFO, else libpq's PG* variables.\n");
    return 2;
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v)
        s += (s.empty() ? "" : ",") + x;
    return s;
}

std::int64_t parse_id(const std::string& s) {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used != s.size() || v <= 0)
        throw std::invalid_argument("not a task ID: '" + s + "'");
    return v;
}

// --- pause and resume, listing (issue 28)

void print_paused(const std::vector<ax::pg::PauseInfo>& paused) {
    std::printf("paused: %s\n", paused.empty() ? "nothing" : "");
    for (const auto& p : paused)
        std::printf("  %s (%.0f s ago)\n", p.target.text().c_str(), p.age_s);
}

/// `pause|resume kind KIND | lane LANE`, and `pause` alone: what is paused.
int pause_command(const std::string& conninfo, const std::vector<std::string>& args) {
    const bool pause = args[0] == "pause";
    if (pause && args.size() == 1) {
        ax::pg::Client c(conninfo);
        print_paused(c.pauses());
        return 0;
    }
    if (args.size() != 3)
        throw std::invalid_argument(args[0] + ": expected 'kind KIND' or 'lane high|normal|low'");
    const ax::pg::PauseTarget t = ax::pg::PauseTarget::parse(args[1], args[2]);
    ax::pg::Client c(conninfo);
    const bool changed = pause ? c.pause(t) : c.resume(t);
    std::printf("%s: %s\n", t.text().c_str(),
                pause ? (changed ? "paused" : "already paused")
                      : (changed ? "resumed" : "was not paused"));
    return 0;
}

// --- group limits (issue 29)

void print_limits(const std::vector<ax::pg::LimitInfo>& limits) {
    std::printf("limits: %s\n", limits.empty() ? "none" : "");
    for (const auto& l : limits) {
        std::string what;
        if (l.spec.max_running)
            what += "running<=" + std::to_string(*l.spec.max_running);
        if (l.spec.rate_n)
            what += std::string(what.empty() ? "" : " ") + "rate " +
                    std::to_string(*l.spec.rate_n) + "/" +
                    std::to_string(l.spec.rate_period.count()) + "ms";
        std::printf("  %s: %s%s; running %lld, queued %lld, keys %lld", l.group.c_str(),
                    what.c_str(), l.spec.per_key ? " per key" : "",
                    static_cast<long long>(l.running), static_cast<long long>(l.queued),
                    static_cast<long long>(l.keys));
        if (l.next_slot_s)
            std::printf(", next rate slot in %.3f s", *l.next_slot_s);
        std::printf("\n");
    }
}

/// A non-negative int32 from `v` (the text after "name=").
std::int32_t parse_count(const std::string& name, const std::string& v) {
    std::size_t used = 0;
    long long n = -1;
    if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() <= 10)
        n = std::stoll(v, &used);
    if (used != v.size() || n < 0 || n > 2147483647)
        throw std::invalid_argument(name + ": not a count: '" + v + "'");
    return static_cast<std::int32_t>(n);
}

/// `limits list`, `limits set GROUP [running=N] [rate=N/MS] [per-key]`, `limits clear GROUP`.
int limits_command(const std::string& conninfo, const std::vector<std::string>& args) {
    if (args.size() == 1 || (args.size() == 2 && args[1] == "list")) {
        ax::pg::Client c(conninfo);
        print_limits(c.limits());
        for (const auto& k : c.key_weights())
            std::printf("weight %s/%s: %d\n", k.group.c_str(), k.key.c_str(), k.weight);
        return 0;
    }
    if (args.size() == 5 && args[1] == "weight") {
        const std::int32_t w = parse_count("weight", args[4]);
        ax::pg::Client c(conninfo);
        c.set_key_weight(args[2], args[3], w);
        for (const auto& k : c.key_weights())
            std::printf("weight %s/%s: %d\n", k.group.c_str(), k.key.c_str(), k.weight);
        return 0;
    }
    if (args.size() == 3 && args[1] == "clear") {
        ax::pg::Client c(conninfo);
        std::printf("%s: %s\n", args[2].c_str(),
                    c.clear_limit(args[2]) ? "limits cleared" : "had no limits");
        return 0;
    }
    if (args.size() < 4 || args[1] != "set")
        throw std::invalid_argument(
            "limits: expected 'list', 'clear GROUP', 'weight GROUP KEY N' or 'set GROUP "
            "[running=N] [rate=N/MS] [per-key]'");
    ax::pg::LimitSpec spec;
    for (std::size_t i = 3; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "per-key") {
            spec.per_key = true;
        } else if (a.rfind("running=", 0) == 0) {
            spec.max_running = parse_count("running", a.substr(8));
        } else if (a.rfind("rate=", 0) == 0) {
            const std::string v = a.substr(5);
            const std::size_t slash = v.find('/');
            if (slash == std::string::npos)
                throw std::invalid_argument("rate: expected N/MS, e.g. rate=100/1000");
            spec.rate_n = parse_count("rate", v.substr(0, slash));
            spec.rate_period = std::chrono::milliseconds(parse_count("rate", v.substr(slash + 1)));
        } else {
            throw std::invalid_argument("limits set: unknown argument '" + a + "'");
        }
    }
    ax::pg::Client c(conninfo);
    c.set_limit(args[2], spec);
    print_limits(c.limits());
    return 0;
}

ax::Priority parse_lane(const std::string& v) {
    for (const ax::Priority p : {ax::Priority::high, ax::Priority::normal, ax::Priority::low})
        if (ax::to_string(p) == v)
            return p;
    throw std::invalid_argument("lane '" + v + "': must be high, normal or low");
}

double ago_s(std::chrono::system_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::system_clock::now() - t).count();
}

/// `tasks list ...`: one line per task, then the command line for the next page.
int tasks_list(const std::string& conninfo, const std::vector<std::string>& args) {
    ax::pg::TaskFilter f;
    bool explain = false;
    const auto now = std::chrono::system_clock::now();
    for (std::size_t i = 2; i < args.size(); ++i) {
        const std::string& o = args[i];
        if (o == "--newest-first") {
            f.newest_first = true;
            continue;
        }
        if (o == "--explain") {
            explain = true;
            continue;
        }
        if (i + 1 >= args.size())
            throw std::invalid_argument("tasks list: " + o + " needs a value (or is unknown)");
        const std::string& v = args[++i];
        if (o == "--state") {
            std::size_t at = 0;
            while (at <= v.size()) {
                const std::size_t end = std::min(v.find(',', at), v.size());
                const std::string one = v.substr(at, end - at);
                const auto s = ax::pg::parse_task_state(one);
                if (!s)
                    throw std::invalid_argument("tasks list: state '" + one + "': must be one of " +
                                                std::string(ax::pg::task_state_names));
                f.states.push_back(*s);
                at = end + 1;
            }
        } else if (o == "--kind") {
            f.kind = v;
        } else if (o == "--tag") {
            f.tag = v;
        } else if (o == "--lane") {
            f.lane = parse_lane(v);
        } else if (o == "--key") {
            f.idempotency_key = v;
        } else if (o == "--limit") {
            f.limit = static_cast<std::size_t>(parse_id(v));
        } else if (o == "--after") {
            f.after = parse_id(v);
        } else if (o == "--older-than" || o == "--newer-than") {
            std::size_t used = 0;
            const double s = std::stod(v, &used);
            if (used != v.size() || s < 0)
                throw std::invalid_argument("tasks list: " + o + " '" + v +
                                            "': must be seconds >= 0");
            const auto t = now - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                     std::chrono::duration<double>(s));
            (o == "--older-than" ? f.enqueued_before : f.enqueued_after) = t;
        } else {
            throw std::invalid_argument("tasks list: unknown option " + o);
        }
    }
    ax::pg::Client c(conninfo);
    if (explain) {
        std::fputs(c.explain_list(f).c_str(), stdout);
        return 0;
    }
    const ax::pg::TaskPage page = c.list(f);
    for (const auto& t : page.tasks)
        std::printf("#%lld %-13s %-6s kind %s, %d attempt(s)%s%s, enqueued %.0f s ago\n",
                    static_cast<long long>(t.id), std::string(to_string(t.state)).c_str(),
                    std::string(ax::to_string(t.priority)).c_str(), t.kind.c_str(), t.attempts,
                    t.node_id != 0 ? (", node #" + std::to_string(t.node_id)).c_str() : "",
                    t.idempotency_key.empty() ? "" : (", key " + t.idempotency_key).c_str(),
                    ago_s(t.enqueued_at));
    std::printf("%zu task(s)", page.tasks.size());
    if (page.next != 0)
        std::printf("; next page: --after %lld\n", static_cast<long long>(page.next));
    else
        std::printf("; no more\n");
    return 0;
}

/// `tasks show ID`: everything known of one task.
int tasks_show(const std::string& conninfo, const std::string& arg) {
    const std::int64_t id = parse_id(arg);
    ax::pg::Client c(conninfo);
    const auto d = c.task_details(id);
    if (!d) {
        std::printf("#%lld: unknown (never enqueued, or its history was pruned)\n",
                    static_cast<long long>(id));
        return 2;
    }
    const ax::pg::TaskInfo& t = d->info;
    std::printf("task #%lld\n  state      %s%s\n  kind       %s\n  lane       %s\n",
                static_cast<long long>(t.id), std::string(to_string(t.state)).c_str(),
                d->cancel_requested ? " (cancel requested)" : "", t.kind.c_str(),
                std::string(ax::to_string(t.priority)).c_str());
    std::printf("  attempts   %d", t.attempts);
    if (d->max_attempts > 0)
        std::printf(" of %d", d->max_attempts);
    std::printf("\n  timeout    %lld ms\n  node       #%lld\n  batch      #%lld\n",
                static_cast<long long>(d->timeout_ms), static_cast<long long>(t.node_id),
                static_cast<long long>(d->batch_id));
    std::printf("  tags       [%s]\n  key        %s\n", join(t.tags).c_str(),
                t.idempotency_key.c_str());
    std::printf("  enqueued   %.1f s ago\n  %-10s %.1f s %s\n", ago_s(t.enqueued_at),
                t.state == ax::pg::TaskState::dead_lettered ? "failed"
                : t.payload_bytes < 0                       ? "finished"
                                                            : "due",
                std::abs(ago_s(t.at)), ago_s(t.at) >= 0 ? "ago" : "from now");
    if (!d->reason.empty())
        std::printf("  reason     %s\n", d->reason.c_str());
    std::printf("  errors     %zu\n", d->errors.size());
    for (const auto& e : d->errors)
        std::printf("    %s\n", e.c_str());
    if (t.payload_bytes < 0)
        std::printf("  payload    (not kept after the task finished)\n");
    else
        std::printf("  payload    %lld bytes: %s%s\n", static_cast<long long>(t.payload_bytes),
                    d->payload_preview.c_str(),
                    static_cast<std::size_t>(t.payload_bytes) > 256 ? "..." : "");
    return 0;
}

// --- end of pause and resume, listing

// --- workflows (issue 29)

/// One line per flow: its tasks by state. `unfinished_only`: status's summary of the newest 20.
void print_flows(const std::vector<ax::pg::FlowProgress>& flows, bool unfinished_only) {
    std::size_t open = 0;
    for (const auto& f : flows)
        open += f.finished ? 0 : 1;
    if (unfinished_only)
        std::printf("flows: %zu of the newest %zu unfinished\n", open, flows.size());
    for (const auto& f : flows) {
        if (unfinished_only && f.finished)
            continue;
        std::printf("  flow %lld %s: %lld tasks: %lld waiting, %lld pending, %lld running, %lld "
                    "succeeded, %lld cancelled, %lld dead-lettered, %lld other%s\n",
                    static_cast<long long>(f.id), f.name.c_str(), static_cast<long long>(f.tasks),
                    static_cast<long long>(f.waiting), static_cast<long long>(f.pending),
                    static_cast<long long>(f.running), static_cast<long long>(f.succeeded),
                    static_cast<long long>(f.cancelled), static_cast<long long>(f.dead_lettered),
                    static_cast<long long>(f.other), f.finished ? " (finished)" : "");
    }
}

int flows_command(ax::pg::Client& c, const std::vector<std::string>& args) {
    if (args[1] == "list" && args.size() <= 3) {
        const std::size_t limit =
            args.size() == 3 ? static_cast<std::size_t>(parse_id(args[2])) : 20;
        const auto flows = c.flows(limit);
        std::printf("%zu flow(s)\n", flows.size());
        print_flows(flows, false);
        return 0;
    }
    if (args[1] == "show" && args.size() == 3) {
        const std::int64_t id = parse_id(args[2]);
        const auto f = c.flow(id);
        if (!f) {
            std::printf("flow %lld: no such flow\n", static_cast<long long>(id));
            return 2;
        }
        print_flows({*f}, false);
        for (const auto& t : c.flow_tasks(id)) {
            std::printf("  #%lld %-20s %-13s", static_cast<long long>(t.id), t.name.c_str(),
                        t.state.c_str());
            if (!t.depends_on.empty())
                std::printf(" after %s", join(t.depends_on).c_str());
            if (!t.reason.empty())
                std::printf("  (%s)", t.reason.c_str());
            std::printf("\n");
        }
        return 0;
    }
    return usage();
}

void print_status(ax::pg::Client& c) {
    const ax::pg::Status s = c.status();
    const char* lanes[3] = {"high", "normal", "low"};
    std::printf("%-10s %10s %10s %10s %10s\n", "lane", "pending", "scheduled", "claimed",
                "waiting");
    for (std::size_t p = 0; p < 3; ++p)
        std::printf("%-10s %10lld %10lld %10lld %10lld\n", lanes[p],
                    static_cast<long long>(s.counts.pending[p]),
                    static_cast<long long>(s.counts.scheduled[p]),
                    static_cast<long long>(s.counts.claimed[p]),
                    static_cast<long long>(s.counts.waiting[p]));
    std::printf(
        "dead letters: %lld   history: %lld succeeded, %lld cancelled, %lld discarded\n",
        static_cast<long long>(s.counts.dead_letters), static_cast<long long>(s.counts.succeeded),
        static_cast<long long>(s.counts.cancelled), static_cast<long long>(s.counts.discarded));
    std::printf("oldest pending task: %.1f s\n", s.oldest_pending_age_s);
    std::printf("nodes: %zu\n", s.nodes.size());
    for (const auto& n : s.nodes)
        std::printf("  #%lld %s (%s pid %d) kinds [%s] tags [%s] lease %s %.1f s, %lld batch(es), "
                    "%lld task(s)\n",
                    static_cast<long long>(n.id), n.name.c_str(), n.host.c_str(), n.pid,
                    join(n.kinds).c_str(), join(n.tags).c_str(),
                    n.lease_left_s >= 0 ? "left" : "EXPIRED",
                    n.lease_left_s >= 0 ? n.lease_left_s : -n.lease_left_s,
                    static_cast<long long>(n.batches), static_cast<long long>(n.tasks));
    std::printf("unclaimable by any live node: %lld\n",
                static_cast<long long>(s.unclaimable_total));
    for (const auto& [why, n] : s.unclaimable)
        std::printf("  %lld  %s\n", static_cast<long long>(n), why.c_str());
    std::printf("recovery: %lld batch(es) reclaimed, %lld task(s) reclaimed, %lld checksum "
                "mismatch(es)\n",
                static_cast<long long>(s.reclaimed_batches),
                static_cast<long long>(s.reclaimed_tasks),
                static_cast<long long>(s.checksum_mismatches));
    print_paused(s.paused);
    print_flows(c.flows(20), true);
    print_limits(s.limits);
}

// --- recurring schedules

/// "YYYY-MM-DD HH:MM:SS UTC" of UTC seconds `s` ("-" for 0: none).
std::string utc_text(std::int64_t s) {
    if (s == 0)
        return "-";
    const ax::detail::CivilTime c = ax::detail::civil_of(s);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%04d-%02u-%02u %02u:%02u:%02u UTC", c.year, c.month, c.day,
                  c.hour, c.minute, c.second);
    return buf;
}

int schedules_command(ax::pg::Client& c, const std::vector<std::string>& args) {
    const std::string& sub = args[1];
    if (sub == "list" && args.size() == 2) {
        const auto list = c.schedules();
        std::printf("%zu schedule(s)\n", list.size());
        for (const auto& s : list) {
            std::printf("%s  '%s' %s -> kind %s %s, missed %s, grace %lld s\n", s.spec.name.c_str(),
                        s.spec.cron.c_str(), s.spec.time_zone.c_str(), s.spec.kind.c_str(),
                        std::string(ax::to_string(s.spec.priority)).c_str(),
                        std::string(ax::pg::to_string(s.spec.missed)).c_str(),
                        static_cast<long long>(s.spec.grace.count() / 1000));
            if (!s.spec.group.empty())
                std::printf("    group %s%s%s\n", s.spec.group.c_str(),
                            s.spec.group_key.empty() ? "" : ", key ", s.spec.group_key.c_str());
            std::printf("    next %s, last %s, %lld task(s), %lld missed firing(s)%s%s\n",
                        utc_text(s.next_at_s).c_str(), utc_text(s.last_tick_s).c_str(),
                        static_cast<long long>(s.fired), static_cast<long long>(s.missed),
                        s.error.empty() ? "" : ", ERROR: ", s.error.c_str());
        }
        return 0;
    }
    if (sub == "add" && args.size() >= 5 && args.size() % 2 == 1) {
        ax::pg::ScheduleSpec spec{.name = args[2], .cron = args[3], .kind = args[4]};
        for (std::size_t i = 5; i + 1 < args.size(); i += 2) {
            const std::string &k = args[i], &v = args[i + 1];
            if (k == "--tz")
                spec.time_zone = v;
            else if (k == "--payload")
                spec.payload = v;
            else if (k == "--priority" && (v == "high" || v == "normal" || v == "low"))
                spec.priority = v == "high"  ? ax::Priority::high
                                : v == "low" ? ax::Priority::low
                                             : ax::Priority::normal;
            else if (k == "--tags") {
                spec.tags.clear();
                for (std::size_t p = 0; p <= v.size();) {
                    const std::size_t e = std::min(v.find(',', p), v.size());
                    spec.tags.push_back(v.substr(p, e - p));
                    p = e + 1;
                }
            } else if (k == "--max-attempts")
                spec.max_attempts = static_cast<int>(parse_id(v));
            else if (k == "--timeout-ms")
                spec.timeout = std::chrono::milliseconds(parse_id(v));
            else if (k == "--missed" && (v == "skip" || v == "run_once"))
                spec.missed =
                    v == "skip" ? ax::pg::MissedTicks::skip : ax::pg::MissedTicks::run_once;
            else if (k == "--grace-s")
                spec.grace = std::chrono::seconds(parse_id(v));
            else if (k == "--group")
                spec.group = v;
            else if (k == "--group-key")
                spec.group_key = v;
            else
                throw std::invalid_argument("schedules add: bad option " + k + " " + v);
        }
        const bool created = c.schedule(spec);
        std::printf("schedule %s %s\n", spec.name.c_str(), created ? "created" : "replaced");
        return 0;
    }
    if (sub == "remove" && args.size() >= 3) {
        int rc = 0;
        for (std::size_t i = 2; i < args.size(); ++i) {
            const bool ok = c.unschedule(args[i]);
            std::printf("schedule %s: %s\n", args[i].c_str(), ok ? "removed" : "no such schedule");
            if (!ok)
                rc = 2;
        }
        return rc;
    }
    return usage();
}

// --- the cluster console

/// `serve ...`: the console (include/ax/console/) until SIGINT or SIGTERM. Refuses a non-loopback
/// address without a token, and a token under 16 bytes.
int serve_command(const std::string& conninfo, const std::vector<std::string>& args) {
#ifndef AX_PG_CONSOLE
    (void)conninfo;
    (void)args;
    std::fprintf(stderr, "ax-pg: serve: this ax-pg was built without the console (ax::http's "
                         "cpp-httplib and nlohmann-json were not found)\n");
    return 2;
#else
    std::string host = "127.0.0.1";
    int port = 8090;
    ax::console::ConsoleOptions o;
    if (const char* t = std::getenv("AX_CONSOLE_TOKEN"))
        o.token = t;
    for (std::size_t i = 1; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--read-only") {
            o.read_only = true;
            continue;
        }
        if (i + 1 >= args.size())
            throw std::invalid_argument("serve: " + a + " needs a value (or is unknown)");
        const std::string& v = args[++i];
        if (a == "--host")
            host = v;
        else if (a == "--port") {
            const std::int64_t p = parse_id(v);
            if (p > 65535)
                throw std::invalid_argument("serve: --port " + v + ": must be 1..65535");
            port = static_cast<int>(p);
        } else if (a == "--token")
            o.token = v;
        else if (a == "--statement-timeout-ms")
            o.statement_timeout = std::chrono::milliseconds(parse_id(v));
        else if (a == "--allow-origin")
            o.allowed_origins.push_back(v);
        else if (a == "--allow-host")
            o.allowed_hosts.push_back(v);
        else
            throw std::invalid_argument("serve: unknown option " + a);
    }
    const bool loopback = ax::console::is_loopback_host(host);
    if (!loopback && o.token.empty())
        throw std::invalid_argument("serve: refusing to listen on " + host +
                                    " (not loopback) without a token: pass --token or set "
                                    "AX_CONSOLE_TOKEN (at least 16 bytes)");
    if (!loopback) {
        // Reads carry payloads and errors: off loopback they need the token too, and the
        // address itself is a name the console is reached by.
        o.protect_reads = true;
        if (host != "0.0.0.0" && host != "::")
            o.allowed_hosts.push_back(ax::console::detail::host_name(host));
    }
    for (const auto& origin : o.allowed_origins) {
        const auto at = origin.find("://");
        if (at != std::string::npos)
            o.allowed_hosts.push_back(ax::console::detail::host_name(origin.substr(at + 3)));
    }
    // SIGINT / SIGTERM are taken by a thread of their own (blocked here, before any thread
    // starts, so every thread inherits the mask): it stops the server, and main returns.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    ax::console::Console console(conninfo, o);
    httplib::Server server;
    server.new_task_queue = [] { return new httplib::ThreadPool(4); };
    server.set_payload_max_length(1 << 20); // above the console's own 64 KiB: its 413 names it
    server.set_keep_alive_timeout(2);
    console.mount(server);
    if (!server.bind_to_port(host, port)) {
        std::fprintf(stderr, "ax-pg: serve: cannot bind %s:%d\n", host.c_str(), port);
        return 1;
    }
    std::thread stopper([&server, stop_signals] {
        int sig = 0;
        sigwait(&stop_signals, &sig);
        server.stop();
    });
    std::printf("ax-pg: console on http://%s:%d/ (%s)\n",
                host.find(':') != std::string::npos ? ("[" + host + "]").c_str() : host.c_str(),
                port,
                o.read_only       ? "read-only"
                : o.token.empty() ? "read-only: no token configured"
                                  : "actions need the token: open the page with #token=<token>");
    std::fflush(stdout);
    const bool ok = server.listen_after_bind();
    if (stopper.joinable()) {
        pthread_kill(stopper.native_handle(), SIGTERM);
        stopper.join();
    }
    return ok ? 0 : 1;
#endif
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::string conninfo;
    if (const char* e = std::getenv("AX_PG_CONNINFO"))
        conninfo = e;
    if (args.size() >= 2 && args[0] == "--db") {
        conninfo = args[1];
        args.erase(args.begin(), args.begin() + 2);
    }
    if (args.empty())
        return usage();
    try {
        const std::string& cmd = args[0];
        if (cmd == "migrate") {
            ax::pg::Client c(conninfo, {.require_schema = false});
            const int v = c.migrate();
            std::printf("ax-pg: schema at version %d\n", v);
            return 0;
        }
        if (cmd == "status") {
            ax::pg::Client c(conninfo);
            print_status(c);
            return 0;
        }
        if (cmd == "pause" || cmd == "resume")
            return pause_command(conninfo, args);
        if (cmd == "limits")
            return limits_command(conninfo, args);
        if (cmd == "tasks" && args.size() >= 2 && args[1] == "list")
            return tasks_list(conninfo, args);
        if (cmd == "tasks" && args.size() == 3 && args[1] == "show")
            return tasks_show(conninfo, args[2]);
        if (cmd == "dead-letters" && args.size() >= 2) {
            ax::pg::Client c(conninfo);
            const std::string& sub = args[1];
            if (sub == "list") {
                const std::size_t limit =
                    args.size() >= 3 ? static_cast<std::size_t>(parse_id(args[2])) : 1000;
                const auto list = c.dead_letters(limit);
                std::printf("%zu dead letter(s)\n", list.size());
                for (const auto& d : list) {
                    std::printf("#%lld kind %s %s, %d attempt(s), %s, %.0f s ago\n",
                                static_cast<long long>(d.id), d.kind.c_str(),
                                std::string(ax::to_string(d.priority)).c_str(), d.attempts,
                                d.reason.c_str(), d.age_s);
                    for (const auto& e : d.errors)
                        std::printf("    %s\n", e.c_str());
                }
                return 0;
            }
            if ((sub == "replay" || sub == "discard") && args.size() >= 3) {
                int rc = 0;
                for (std::size_t i = 2; i < args.size(); ++i) {
                    const std::int64_t id = parse_id(args[i]);
                    const bool ok =
                        sub == "replay" ? c.replay_dead_letter(id) : c.discard_dead_letter(id);
                    std::printf("#%lld: %s\n", static_cast<long long>(id),
                                ok ? (sub == "replay" ? "replayed" : "discarded")
                                   : "not a dead letter");
                    if (!ok)
                        rc = 2;
                }
                return rc;
            }
        }
        if (cmd == "serve")
            return serve_command(conninfo, args);
        if (cmd == "flows" && args.size() >= 2) {
            ax::pg::Client c(conninfo);
            return flows_command(c, args);
        }
        if (cmd == "schedules" && args.size() >= 2) {
            ax::pg::Client c(conninfo);
            return schedules_command(c, args);
        }
        return usage();
    } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "ax-pg: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ax-pg: %s\n", e.what());
        return 1;
    }
}
