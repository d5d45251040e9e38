#include <ax/config.hpp>

int main() {
    ax::Config cfg;
    cfg.validate();
    return cfg.max_workers == 200 ? 0 : 1;
}
