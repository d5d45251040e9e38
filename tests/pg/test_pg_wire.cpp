// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
// ax/pg/detail/wire.hpp without a server: every encoder's bytes against hand-written
// expectations (PostgreSQL's binary send formats: array_send, int8send, COPY BINARY), and the
// decoder against the same bytes. Links ax::ax only: the wire layer needs no libpq.

#include <ax/pg/detail/wire.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace std::string_view_literals;
namespace w = ax::pg::detail;

/// Bytes from a list of small integers (each 0..255), so expectations read as hex dumps.
std::string bytes(std::initializer_list<int> b) {
    std::string s;
    for (const int v : b)
        s.push_back(static_cast<char>(v));
    return s;
}

} // namespace

TEST_CASE("type OIDs are PostgreSQL's", "[wire]") {
    // pg_type.dat; a wrong number here would make the server reject or misread a parameter.
    CHECK(w::oid::boolean == 16);
    CHECK(w::oid::bytea == 17);
    CHECK(w::oid::int8 == 20);
    CHECK(w::oid::int2 == 21);
    CHECK(w::oid::int4 == 23);
    CHECK(w::oid::text == 25);
    CHECK(w::oid::float8 == 701);
    CHECK(w::oid::boolean_array == 1000);
    CHECK(w::oid::bytea_array == 1001);
    CHECK(w::oid::int2_array == 1005);
    CHECK(w::oid::int4_array == 1007);
    CHECK(w::oid::text_array == 1009);
    CHECK(w::oid::int8_array == 1016);
}

TEST_CASE("store_be and load_be are network byte order, two's complement", "[wire]") {
    char b[8];
    w::store_be(b, std::int64_t{0x0102030405060708});
    CHECK(std::string(b, 8) == bytes({1, 2, 3, 4, 5, 6, 7, 8}));
    CHECK(w::load_be<std::int64_t>(b) == 0x0102030405060708);
    w::store_be(b, std::int32_t{-2});
    CHECK(std::string(b, 4) == bytes({0xff, 0xff, 0xff, 0xfe}));
    CHECK(w::be32(b) == -2);
    w::store_be(b, std::int16_t{0x1234});
    CHECK(std::string(b, 2) == bytes({0x12, 0x34}));
    CHECK(w::be16(b) == 0x1234);
    w::store_be(b, std::int64_t{-1});
    CHECK(w::be64(b) == -1);
    std::string s;
    w::append_be(s, std::uint16_t{0xabcd});
    w::append_be(s, std::uint32_t{7});
    CHECK(s == bytes({0xab, 0xcd, 0, 0, 0, 7}));
}

TEST_CASE("BinaryInt scalars", "[wire]") {
    const auto i8 = w::BinaryInt::int8(-3);
    CHECK(i8.len == 8);
    CHECK(std::string(i8.bytes, 8) == bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfd}));
    const auto i4 = w::BinaryInt::int4(300);
    CHECK(i4.len == 4);
    CHECK(std::string(i4.bytes, 4) == bytes({0, 0, 1, 0x2c}));
    const auto i2 = w::BinaryInt::int2(1);
    CHECK(i2.len == 2);
    CHECK(std::string(i2.bytes, 2) == bytes({0, 1}));
}

TEST_CASE("BinaryArray: int8[], text[] with a NULL, bool[], int2[], empty, reuse", "[wire]") {
    w::BinaryArray ids(w::oid::int8);
    ids.add_int64(1);
    ids.add_int64(0x100);
    // ndim 1, no nulls, element int8 (20), length 2, lower bound 1; then (4-byte length, value).
    CHECK(ids.bytes() ==
          bytes({0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0,
                 0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0,  0, 8, 0, 0, 0, 0, 0, 0, 1, 0}));
    CHECK(ids.length() == 44);
    CHECK(ids.size() == 2);

    w::BinaryArray keys(w::oid::text);
    keys.add_bytes("ab");
    keys.add_null();
    CHECK(keys.bytes() == bytes({0, 0, 0, 1, 0, 0, 0, 1, 0, 0,   0,   25,   0,    0,    0,
                                 2, 0, 0, 0, 1, 0, 0, 0, 2, 'a', 'b', 0xff, 0xff, 0xff, 0xff}));

    w::BinaryArray flags(w::oid::boolean);
    flags.add_bool(true);
    flags.add_bool(false);
    CHECK(flags.bytes() == bytes({0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0,
                                  2, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0,  0, 1, 0}));

    w::BinaryArray prios(w::oid::int2);
    prios.add_int16(2);
    w::BinaryArray ints(w::oid::int4);
    ints.add_int32(-1);
    CHECK(prios.bytes() ==
          bytes({0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 21, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 2}));
    CHECK(ints.bytes() == bytes({0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,    23,   0,    0,
                                 0, 1, 0, 0, 0, 1, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff}));

    // Empty: ndim 0, no dimension fields at all.
    w::BinaryArray none(w::oid::int8);
    CHECK(none.bytes() == bytes({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20}));
    CHECK(none.empty());

    // Refilled after use: the NULL flag and the length start over.
    keys.clear();
    CHECK(keys.bytes() == bytes({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25}));
    keys.add_bytes("x");
    CHECK(keys.bytes() ==
          bytes({0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 25, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 'x'}));
}

TEST_CASE("text[] values and their sizes", "[wire]") {
    const std::vector<std::string_view> tags = {"gpu", "a"};
    std::string s;
    w::append_text_array(s, tags);
    const std::string want = bytes({0, 0, 0, 1, 0, 0, 0, 0, 0,   0,   0,   25, 0, 0, 0, 2,
                                    0, 0, 0, 1, 0, 0, 0, 3, 'g', 'p', 'u', 0,  0, 0, 1, 'a'});
    CHECK(s == want);
    CHECK(w::text_array_size(tags) == want.size());
    s.clear();
    w::append_text_array(s, {});
    CHECK(s == bytes({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25}));
    CHECK(w::text_array_size({}) == 12);
}

TEST_CASE("decode_int8_array reads what the server sends and refuses anything else", "[wire]") {
    w::BinaryArray a(w::oid::int8);
    a.add_int64(5);
    a.add_int64(-7);
    const auto got = w::decode_int8_array(a.bytes());
    REQUIRE(got.has_value());
    CHECK(*got == std::vector<std::int64_t>{5, -7});

    w::BinaryArray empty(w::oid::int8);
    const auto none = w::decode_int8_array(empty.bytes());
    REQUIRE(none.has_value());
    CHECK(none->empty());

    // Truncated, wrong element type, NULLs, trailing bytes.
    const std::string whole(a.bytes());
    CHECK_FALSE(w::decode_int8_array(whole.substr(0, whole.size() - 1)).has_value());
    CHECK_FALSE(w::decode_int8_array(whole + "x").has_value());
    CHECK_FALSE(w::decode_int8_array("short"sv).has_value());
    w::BinaryArray ints(w::oid::int4);
    ints.add_int32(1);
    CHECK_FALSE(w::decode_int8_array(ints.bytes()).has_value());
    w::BinaryArray nulls(w::oid::int8);
    nulls.add_null();
    CHECK_FALSE(w::decode_int8_array(nulls.bytes()).has_value());
}

TEST_CASE("CopyWriter: COPY BINARY header, one row, trailer", "[wire]") {
    std::string buf = "left over from the last call";
    w::CopyWriter c(buf);
    c.row(4);
    c.field_int(std::int64_t{9});
    c.field_bytes("k");
    c.field_int(std::int16_t{1});
    const std::vector<std::string_view> tags = {"t"};
    c.field_text_array(tags);
    c.finish();
    const std::string want =
        // signature "PGCOPY\n\377\r\n\0", flags 0, header extension length 0
        bytes({'P', 'G', 'C', 'O', 'P', 'Y', '\n', 0xff, '\r', '\n', 0, 0, 0, 0, 0, 0, 0, 0, 0}) +
        // 4 fields
        bytes({0, 4}) +
        // int8 9
        bytes({0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 9}) +
        // text "k"
        bytes({0, 0, 0, 1, 'k'}) +
        // int2 1
        bytes({0, 0, 0, 2, 0, 1}) +
        // text[] {"t"}: 25 bytes of array
        bytes({0,  0, 0, 25, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0,  0,
               25, 0, 0, 0,  1, 0, 0, 0, 1, 0, 0, 0, 1, 't'}) +
        // trailer: field count -1
        bytes({0xff, 0xff});
    CHECK(buf == want);
}
