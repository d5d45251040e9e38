#include <ax/pg/pg.hpp>
#include <stdexcept>

int main() {
    // Links libpq and parses a connection string; no server is needed.
    ax::pg::validate_conninfo("host=/tmp port=5432 dbname=ax");
    try {
        ax::pg::validate_conninfo("host=localhost port");
        return 1;
    } catch (const std::invalid_argument&) {
    }
    return ax::pg::schema_version >= 1 ? 0 : 1;
}
