// Child processes for the http tests that run real programs (prometheus, chromium, the
// examples/metrics_server binary): finding a program, a free loopback port, a temp dir removed
// at the end, a child that is always stopped and reaped, and the example server itself.
#pragma once

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
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

namespace ax_test {

namespace fs = std::filesystem;

/// `/usr/bin/<name>` if executable, else the first executable `<name>` on PATH, else "".
inline std::string find_program(const std::string& name) {
    const auto executable = [](const fs::path& p) {
        std::error_code ec;
        return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
    };
    if (executable("/usr/bin/" + name))
        return "/usr/bin/" + name;
    const char* path = std::getenv("PATH");
    if (path == nullptr)
        return "";
    std::istringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        if (dir.empty())
            continue;
        const fs::path candidate = fs::path(dir) / name;
        if (executable(candidate))
            return candidate.string();
    }
    return "";
}

/// The prometheus server binary: /usr/bin/prometheus, else the first `prometheus` on PATH, else
/// empty.
inline std::string find_prometheus() {
    return find_program("prometheus");
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed).
inline int free_loopback_port() {
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
        std::string tmpl = (fs::temp_directory_path() / "ax_http_XXXXXX").string();
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

/// A child process started with posix_spawn, stdout and stderr to `log` (or stdout to `log` and
/// stderr to `err_log` when given); stopped (SIGTERM, then SIGKILL after 5 s) and reaped on
/// destruction.
class ChildProcess {
  public:
    ChildProcess(const std::vector<std::string>& argv, const fs::path& log,
                 const std::optional<fs::path>& err_log = std::nullopt) {
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                         O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (err_log)
            posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_log->c_str(),
                                             O_WRONLY | O_CREAT | O_APPEND, 0644);
        else
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

    /// Waits up to `guard` for the child to exit on its own; true (and `status`) if it did,
    /// false if it is still running (a hang guard, not a speed check).
    bool wait_for(std::chrono::milliseconds guard, int& status) {
        const auto deadline = std::chrono::steady_clock::now() + guard;
        while (!exited(status)) {
            if (std::chrono::steady_clock::now() > deadline)
                return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return true;
    }

    /// SIGTERM, then SIGKILL after 5 s; reaps. Safe to call twice.
    void stop() noexcept {
        if (pid_ <= 0)
            return;
        ::kill(pid_, SIGTERM);
        int status = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (std::chrono::steady_clock::now() < deadline) {
            const pid_t r = ::waitpid(pid_, &status, WNOHANG);
            if (r == pid_ || (r < 0 && errno != EINTR)) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        ::kill(pid_, SIGKILL);
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
    }

    [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  private:
    pid_t pid_ = -1;
};

inline std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline std::string describe_status(int status) {
    if (WIFEXITED(status))
        return "exit status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return "signal " + std::to_string(WTERMSIG(status));
    return "wait status " + std::to_string(status);
}

#ifdef AX_METRICS_SERVER_PATH
/// examples/metrics_server running as a child (`--port 0`, events to a file in `dir`), its port
/// read from the "listening on" line it prints; stopped (SIGTERM) and reaped on destruction,
/// also when a check fails. Its --seconds is only a hang guard in case the test process dies.
class ExampleServer {
  public:
    explicit ExampleServer(const fs::path& dir)
        : out_(dir / "metrics_server.out"), events_(dir / "events.jsonl"),
          child_(std::vector<std::string>{AX_METRICS_SERVER_PATH, "--port", "0", "--seconds", "120",
                                          "--events", events_.string()},
                 out_) {
        const std::string prefix = "listening on http://127.0.0.1:";
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (std::chrono::steady_clock::now() < deadline) {
            const std::string out = read_file(out_);
            const auto at = out.find(prefix);
            const auto eol = at == std::string::npos ? at : out.find('\n', at);
            if (eol != std::string::npos) {
                port_ = std::stoi(out.substr(at + prefix.size(), eol - at - prefix.size()));
                return;
            }
            int status = 0;
            if (child_.exited(status))
                throw std::runtime_error("metrics_server exited (" + describe_status(status) +
                                         "): " + out);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        throw std::runtime_error("metrics_server printed no 'listening on' line in 20 s: " +
                                 read_file(out_));
    }

    [[nodiscard]] int port() const noexcept { return port_; }
    [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    [[nodiscard]] const fs::path& events() const noexcept { return events_; }
    [[nodiscard]] std::string output() const { return read_file(out_); }
    /// Stops it now (SIGTERM; it exits cleanly); `status` gets its wait status.
    void stop() { child_.stop(); }
    /// SIGTERM, then whether it exited by itself within `guard` (and its status).
    bool terminate(std::chrono::milliseconds guard, int& status) {
        if (child_.pid() <= 0)
            return child_.exited(status); // already reaped: never kill(-1, ...)
        ::kill(child_.pid(), SIGTERM);
        return child_.wait_for(guard, status);
    }

  private:
    fs::path out_;
    fs::path events_;
    ChildProcess child_;
    int port_ = 0;
};
#endif

} // namespace ax_test
