#include <ax/http/metrics_server.hpp>

int main() {
    // Links cpp-httplib and binds a free loopback port; no scrape needed.
    ax::http::MetricsServer server{[] { return ax::MetricsSnapshot{}; }};
    const bool ok = server.port() > 0;
    server.stop();
    return ok ? 0 : 1;
}
