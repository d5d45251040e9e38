// ax/http/metrics_server.hpp scraped by a real Prometheus server (Debian `prometheus`): the test
// runs tasks on a real scheduler (some succeed, one is dead-lettered by ax::PermanentError),
// serves them with MetricsServer on a free loopback port, starts `prometheus` as a child process
// on another free loopback port with a 1 s scrape interval, and asks its HTTP API until the
// scraped counters show up: ax_tasks_succeeded_total = N, ax_tasks_dead_lettered_total = 1, and
// the target's health "up". The child is always stopped (SIGTERM, then SIGKILL after 5 s) and
// reaped, and its temp dir removed, also when a check fails.
//
// Without a prometheus binary (/usr/bin/prometheus or on PATH) the test fails and says to run
// scripts/deps.sh; AX_SKIP_PROMETHEUS=1 turns that into a warning and a skip.
#include "test_support.hpp"

#include <arpa/inet.h>
#include <ax/errors.hpp>
#include <ax/http/metrics_server.hpp>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// The prometheus server binary: /usr/bin/prometheus, else the first `prometheus` on PATH, else
/// empty.
std::string find_prometheus() {
    const auto executable = [](const fs::path& p) {
        std::error_code ec;
        return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
    };
    if (executable("/usr/bin/prometheus"))
        return "/usr/bin/prometheus";
    const char* path = std::getenv("PATH");
    if (path == nullptr)
        return "";
    std::istringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        if (dir.empty())
            continue;
        const fs::path candidate = fs::path(dir) / "prometheus";
        if (executable(candidate))
            return candidate.string();
    }
    return "";
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed).
int free_loopback_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        const std::string err = std::strerror(errno);
        ::close(fd);
        throw std::runtime_error("bind/getsockname 127.0.0.1:0: " + err);
    }
    ::close(fd);
    return ntohs(addr.sin_port);
}

/// A fresh directory under the system temp dir, removed (recursively) on destruction.
class TempDir {
  public:
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "ax_prom_XXXXXX").string();
        if (::mkdtemp(tmpl.data()) == nullptr)
            throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
        path_ = tmpl;
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    [[nodiscard]] const fs::path& path() const noexcept { return path_; }

  private:
    fs::path path_;
};

/// A child process started with posix_spawn, stdout and stderr to `log`; stopped (SIGTERM, then
/// SIGKILL after 5 s) and reaped on destruction.
class ChildProcess {
  public:
    ChildProcess(const std::vector<std::string>& argv, const fs::path& log) {
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                         O_WRONLY | O_CREAT | O_APPEND, 0644);
        posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
        posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        const int rc = ::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        if (rc != 0)
            throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
    }
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;
    ~ChildProcess() { stop(); }

    /// Whether the child has exited (reaps it if so); `status` gets its wait status.
    bool exited(int& status) {
        if (pid_ <= 0)
            return true;
        const pid_t r = ::waitpid(pid_, &status, WNOHANG);
        if (r == pid_ || (r < 0 && errno == ECHILD)) {
            pid_ = -1;
            return true;
        }
        return false;
    }

    void stop() noexcept {
        if (pid_ <= 0)
            return;
        ::kill(pid_, SIGTERM);
        int status = 0;
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (std::chrono::steady_clock::now() < deadline) {
            const pid_t r = ::waitpid(pid_, &status, WNOHANG);
            if (r == pid_ || (r < 0 && errno != EINTR)) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(50ms);
        }
        ::kill(pid_, SIGKILL);
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
    }

  private:
    pid_t pid_ = -1;
};

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string describe_status(int status) {
    if (WIFEXITED(status))
        return "exit status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return "signal " + std::to_string(WTERMSIG(status));
    return "wait status " + std::to_string(status);
}

/// GET `path` from the Prometheus API and parse it as JSON; nullopt on any failure.
std::optional<nlohmann::json> get_json(httplib::Client& client, const std::string& path) {
    const auto res = client.Get(path);
    if (!res || res->status != 200)
        return std::nullopt;
    auto j = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
        return std::nullopt;
    return j;
}

/// The value of `metric` for job "ax" (and scheduler "thumbs") in an instant query's result, or
/// "" if the query failed or has no such series yet.
std::string query_value(httplib::Client& client, const std::string& metric) {
    const auto j = get_json(client, "/api/v1/query?query=" + metric);
    if (!j || j->value("status", "") != "success")
        return "";
    const auto& data = (*j)["data"];
    if (!data.is_object() || data.value("resultType", "") != "vector")
        return "";
    for (const auto& series : data["result"]) {
        const auto& labels = series["metric"];
        if (labels.value("job", "") != "ax" || labels.value("scheduler", "") != "thumbs")
            continue;
        const auto& value = series["value"]; // [ <unix time>, "<value>" ]
        if (value.is_array() && value.size() == 2 && value[1].is_string())
            return value[1].get<std::string>();
    }
    return "";
}

/// The health of the "ax" job's target in /api/v1/targets, or "" if not listed yet.
std::string target_health(httplib::Client& client, const std::string& scrape_url) {
    const auto j = get_json(client, "/api/v1/targets");
    if (!j || j->value("status", "") != "success")
        return "";
    const auto& data = (*j)["data"];
    if (!data.is_object() || !data.contains("activeTargets"))
        return "";
    for (const auto& t : data["activeTargets"]) {
        if (t.value("scrapePool", "") == "ax" && t.value("scrapeUrl", "") == scrape_url)
            return t.value("health", "");
    }
    return "";
}

} // namespace

TEST_CASE("a real Prometheus scrapes MetricsServer", "[http][prometheus]") {
    const std::string prometheus = find_prometheus();
    if (prometheus.empty()) {
        const char* skip = std::getenv("AX_SKIP_PROMETHEUS");
        if (skip != nullptr && std::string(skip) == "1") {
            WARN("prometheus not found (/usr/bin/prometheus or on PATH); AX_SKIP_PROMETHEUS=1, "
                 "skipping the real-Prometheus scrape test");
            return;
        }
        FAIL("the Prometheus server is not installed (no /usr/bin/prometheus, none on PATH): run "
             "scripts/deps.sh (installs Debian's prometheus; CI does), or set "
             "AX_SKIP_PROMETHEUS=1 to skip this test");
    }

    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 4;
    ax::Scheduler sched{cfg};

    constexpr int tasks = 5; // succeed; one more is dead-lettered
    std::vector<ax::TaskHandle<int>> handles;
    for (int i = 0; i < tasks; ++i) {
        auto h = sched.submit([i] { return i + 1; });
        REQUIRE(h);
        handles.push_back(std::move(*h));
    }
    auto bad = sched.submit([]() -> int { throw ax::PermanentError("corrupt input"); },
                            {.max_retries = 3});
    REQUIRE(bad);
    for (auto& h : handles)
        REQUIRE(h.wait_for(20s));
    REQUIRE(bad->wait_for(20s));
    REQUIRE(bad->state() == ax::TaskState::dead_lettered);
    REQUIRE(ax_test::eventually([&] {
        const auto m = sched.metrics();
        return m.totals.succeeded == tasks && m.totals.dead_lettered == 1;
    }));

    ax::http::MetricsServer server{sched, {.scheduler = "thumbs"}};
    REQUIRE(server.port() > 0);
    const std::string target = "127.0.0.1:" + std::to_string(server.port());
    const std::string scrape_url = "http://" + target + "/metrics";

    const TempDir dir;
    const fs::path config = dir.path() / "prometheus.yml";
    const fs::path log = dir.path() / "prometheus.log";
    {
        std::ofstream f(config);
        f << "global:\n"
             "  scrape_interval: 1s\n"
             "  evaluation_interval: 1s\n"
             "scrape_configs:\n"
             "  - job_name: ax\n"
             "    metrics_path: /metrics\n"
             "    scrape_interval: 1s\n"
             "    scrape_timeout: 1s\n"
             "    static_configs:\n"
             "      - targets: ['"
          << target << "']\n";
        REQUIRE(f.good());
    }
    INFO("prometheus config:\n" << read_file(config));

    const auto deadline = std::chrono::steady_clock::now() + 60s;
    std::optional<ChildProcess> child;
    int prom_port = 0;
    bool ready = false;
    for (int attempt = 0; attempt < 2 && !ready; ++attempt) {
        prom_port = free_loopback_port();
        const fs::path data = dir.path() / ("data" + std::to_string(attempt));
        child.emplace(
            std::vector<std::string>{
                prometheus,
                "--config.file=" + config.string(),
                "--storage.tsdb.path=" + data.string(),
                "--web.listen-address=127.0.0.1:" + std::to_string(prom_port),
                "--log.level=warn",
            },
            log);
        httplib::Client client("127.0.0.1", prom_port);
        client.set_connection_timeout(1s);
        client.set_read_timeout(5s);
        int status = 0;
        while (std::chrono::steady_clock::now() < deadline) {
            if (child->exited(status)) {
                // Most likely the port was taken between free_loopback_port() and its bind:
                // try once more on another port.
                WARN("prometheus exited early (" << describe_status(status) << ") on port "
                                                 << prom_port << "; log:\n"
                                                 << read_file(log));
                break;
            }
            const auto res = client.Get("/-/ready");
            if (res && res->status == 200) {
                ready = true;
                break;
            }
            std::this_thread::sleep_for(200ms);
        }
    }
    INFO("prometheus log:\n" << read_file(log));
    REQUIRE(ready);

    httplib::Client client("127.0.0.1", prom_port);
    client.set_connection_timeout(1s);
    client.set_read_timeout(5s);

    std::string succeeded, dead_lettered, health;
    while (std::chrono::steady_clock::now() < deadline) {
        succeeded = query_value(client, "ax_tasks_succeeded_total");
        dead_lettered = query_value(client, "ax_tasks_dead_lettered_total");
        health = target_health(client, scrape_url);
        if (succeeded == std::to_string(tasks) && dead_lettered == "1" && health == "up")
            break;
        std::this_thread::sleep_for(200ms);
    }
    INFO("last answers: succeeded=\"" << succeeded << "\" dead_lettered=\"" << dead_lettered
                                      << "\" health=\"" << health << "\"");
    CHECK(succeeded == std::to_string(tasks));
    CHECK(dead_lettered == "1");
    CHECK(health == "up");

    // The raw API answer has the labels Prometheus attached and the scheduler's own label.
    const auto j = get_json(client, "/api/v1/query?query=ax_tasks_submitted_total");
    REQUIRE(j);
    INFO(j->dump());
    CHECK(query_value(client, "ax_tasks_submitted_total") == std::to_string(tasks + 1));
    const auto& result = (*j)["data"]["result"];
    REQUIRE(result.is_array());
    REQUIRE_FALSE(result.empty());
    CHECK(result[0]["metric"].value("instance", "") == target);
}
