#include <ax/pg/pqxx.hpp>

int main() {
    // Compiles against libpqxx and links it; no server is needed: the array literal the adapter
    // sends is built here.
    ax::pg::detail::TextArray a;
    a.add_text("x");
    a.add_null();
    return a.str() == "{\"x\",NULL}" ? 0 : 1;
}
