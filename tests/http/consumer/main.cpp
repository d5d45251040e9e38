#include <ax/http/event_log.hpp>
#include <ax/http/json.hpp>
#include <ax/http/metrics_server.hpp>
#include <sstream>

int main() {
    // Links cpp-httplib and binds a free loopback port; no scrape needed.
    ax::http::MetricsServer server{[] { return ax::MetricsSnapshot{}; }};
    bool ok = server.port() > 0;
    server.stop();
    // nlohmann-json comes with ax::http: the snapshot and an event line render.
    ok = ok &&
         ax::http::snapshot_json_text(ax::MetricsSnapshot{}).find("\"slots\"") != std::string::npos;
    std::ostringstream out;
    ax::http::JsonEventLog log(out, {.timestamps = false});
    log.write("start", ax::TaskEvent{.name = "x"});
    return ok && out.str().find("\"name\":\"x\"") != std::string::npos ? 0 : 1;
}
