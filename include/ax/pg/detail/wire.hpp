// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// PostgreSQL's binary wire formats, std only (no libpq): the type OIDs ax's statements name, and
// the one big-endian encoder and decoder every binary parameter, array, COPY row and binary
// result goes through. Kept free of libpq so it can be tested byte by byte without a server
// (tests/pg/test_pg_wire.cpp) and included by the lowest layer of ax::pg.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ax::pg::detail {

/// Type OIDs of the types ax's statements send and read (PostgreSQL's pg_type.dat; fixed across
/// versions for built-in types). Arrays are named `<element>_array`.
namespace oid {
inline constexpr std::uint32_t boolean = 16;
inline constexpr std::uint32_t bytea = 17;
inline constexpr std::uint32_t int8 = 20;
inline constexpr std::uint32_t int2 = 21;
inline constexpr std::uint32_t int4 = 23;
inline constexpr std::uint32_t text = 25;
inline constexpr std::uint32_t float8 = 701;
inline constexpr std::uint32_t boolean_array = 1000;
inline constexpr std::uint32_t bytea_array = 1001;
inline constexpr std::uint32_t int2_array = 1005;
inline constexpr std::uint32_t int4_array = 1007;
inline constexpr std::uint32_t text_array = 1009;
inline constexpr std::uint32_t int8_array = 1016;
} // namespace oid

/// Writes `v` at `dst` in network byte order (the one encoder: every other writer below calls
/// it). T is any integer of 1, 2, 4 or 8 bytes; signed values are sent as their two's
/// complement, as PostgreSQL's int2/int4/int8 send functions do.
template <class T> constexpr void store_be(char* dst, T v) noexcept {
    static_assert(std::is_integral_v<T>);
    using U = std::make_unsigned_t<T>;
    const auto u = static_cast<U>(v);
    for (std::size_t i = 0; i < sizeof(T); ++i)
        dst[i] = static_cast<char>((u >> (8 * (sizeof(T) - 1 - i))) & 0xffu);
}

/// Reads a T stored in network byte order at `src` (the one decoder).
template <class T> constexpr T load_be(const char* src) noexcept {
    static_assert(std::is_integral_v<T>);
    using U = std::make_unsigned_t<T>;
    U u = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
        u = static_cast<U>((u << 8) | static_cast<unsigned char>(src[i]));
    return static_cast<T>(u);
}

/// Appends `v` to `out` in network byte order.
template <class T> void append_be(std::string& out, T v) {
    char b[sizeof(T)];
    store_be(b, v);
    out.append(b, sizeof(T));
}

/// Big-endian reads of binary-format result values (the claim's columns, int8[] results).
inline std::int64_t be64(const char* p) noexcept {
    return load_be<std::int64_t>(p);
}
inline std::int32_t be32(const char* p) noexcept {
    return load_be<std::int32_t>(p);
}
inline std::int16_t be16(const char* p) noexcept {
    return load_be<std::int16_t>(p);
}

/// The header of a binary array value: ndim (0 for an empty array, which has no dimension),
/// has-nulls flag, element OID, then for one dimension its length and lower bound (1).
inline void append_array_header(std::string& out, std::uint32_t elem_oid, std::size_t n,
                                bool has_nulls) {
    append_be(out, std::int32_t{n == 0 ? 0 : 1});
    append_be(out, std::int32_t{has_nulls ? 1 : 0});
    append_be(out, elem_oid);
    if (n != 0) {
        append_be(out, static_cast<std::int32_t>(n));
        append_be(out, std::int32_t{1});
    }
}

/// Bytes of a one-dimensional text[] (or bytea[]) value without NULLs holding `items`.
inline std::size_t text_array_size(std::span<const std::string_view> items) noexcept {
    std::size_t bytes = 12;
    if (!items.empty()) {
        bytes += 8;
        for (std::string_view s : items)
            bytes += 4 + s.size();
    }
    return bytes;
}

/// Appends a one-dimensional text[] value without NULLs holding `items` (a COPY field's bytes).
inline void append_text_array(std::string& out, std::span<const std::string_view> items) {
    append_array_header(out, oid::text, items.size(), false);
    for (std::string_view s : items) {
        append_be(out, static_cast<std::int32_t>(s.size()));
        out.append(s);
    }
}

/// A one-dimensional array parameter in PostgreSQL's binary format, built in a reused buffer so
/// that refilling it per batch does not allocate once it has grown to the batch size.
class BinaryArray {
  public:
    /// Element type OIDs (the names the node's code uses; see detail::oid for the full list).
    static constexpr std::uint32_t bool_oid = oid::boolean, bytea_oid = oid::bytea,
                                   int8_oid = oid::int8, int2_oid = oid::int2, int4_oid = oid::int4,
                                   text_oid = oid::text;

    explicit BinaryArray(std::uint32_t elem_oid) : oid_(elem_oid) { clear(); }

    void clear() {
        buf_.clear();
        // One dimension of (patched) length; finish() rewrites it for an empty array.
        append_array_header(buf_, oid_, 1, false);
        n_ = 0;
        nulls_ = false;
    }
    void add_int64(std::int64_t v) { add_fixed(v); }
    void add_int32(std::int32_t v) { add_fixed(v); }
    void add_int16(std::int16_t v) { add_fixed(v); }
    void add_bool(bool v) { add_fixed(static_cast<std::uint8_t>(v ? 1 : 0)); }
    void add_bytes(std::string_view s) {
        append_be(buf_, static_cast<std::int32_t>(s.size()));
        buf_.append(s.data(), s.size());
        ++n_;
    }
    void add_null() {
        append_be(buf_, std::int32_t{-1});
        nulls_ = true;
        ++n_;
    }
    [[nodiscard]] std::size_t size() const noexcept { return n_; }
    [[nodiscard]] bool empty() const noexcept { return n_ == 0; }
    /// The element type's OID, and the array type's for a statement's parameter types.
    [[nodiscard]] std::uint32_t element_oid() const noexcept { return oid_; }

    /// The parameter bytes (valid until the next change).
    [[nodiscard]] const char* data() {
        finish();
        return buf_.data();
    }
    [[nodiscard]] int length() {
        finish();
        return static_cast<int>(n_ == 0 ? empty_size : buf_.size());
    }
    /// Both at once, as a view (valid until the next change).
    [[nodiscard]] std::string_view bytes() {
        finish();
        return std::string_view(buf_).substr(0, n_ == 0 ? empty_size : buf_.size());
    }

  private:
    template <class T> void add_fixed(T v) {
        append_be(buf_, static_cast<std::int32_t>(sizeof(T)));
        append_be(buf_, v);
        ++n_;
    }
    /// An empty array has no dimensions: ndim 0, flags, element type. The dimension fields stay
    /// in the buffer past the value's end, so elements added after reading it still follow them.
    static constexpr std::size_t empty_size = 12;

    void finish() {
        store_be(buf_.data(), std::int32_t{n_ == 0 ? 0 : 1});
        store_be(buf_.data() + 4, std::int32_t{nulls_ ? 1 : 0});
        store_be(buf_.data() + 12, static_cast<std::int32_t>(n_));
    }

    std::uint32_t oid_;
    std::string buf_;
    std::size_t n_ = 0;
    bool nulls_ = false;
};

/// Binary int2 / int4 / int8 scalar parameters (network byte order), held by value so an array
/// of parameter pointers can point into them.
struct BinaryInt {
    char bytes[8];
    int len;
    static BinaryInt int2(std::int16_t v) noexcept { return of(v); }
    static BinaryInt int4(std::int32_t v) noexcept { return of(v); }
    static BinaryInt int8(std::int64_t v) noexcept { return of(v); }

  private:
    template <class T> static BinaryInt of(T v) noexcept {
        BinaryInt b{};
        store_be(b.bytes, v);
        b.len = static_cast<int>(sizeof(T));
        return b;
    }
};

/// The elements of a one-dimensional binary int8[] value without NULLs (as `SELECT
/// array_agg(id)` answers it), or nullopt when `v` is not one (wrong element type, NULLs,
/// several dimensions, or a length that does not match its bytes). An empty array is ndim 0.
inline std::optional<std::vector<std::int64_t>> decode_int8_array(std::string_view v) {
    if (v.size() < 12)
        return std::nullopt;
    const auto ndim = load_be<std::int32_t>(v.data());
    const auto nulls = load_be<std::int32_t>(v.data() + 4);
    const auto elem = load_be<std::uint32_t>(v.data() + 8);
    if (elem != oid::int8 || nulls != 0)
        return std::nullopt;
    if (ndim == 0)
        return v.size() == 12 ? std::optional<std::vector<std::int64_t>>(std::in_place)
                              : std::nullopt;
    if (ndim != 1 || v.size() < 20)
        return std::nullopt;
    const auto n = load_be<std::int32_t>(v.data() + 12);
    if (n < 0 || v.size() != 20 + 12 * static_cast<std::size_t>(n))
        return std::nullopt;
    std::vector<std::int64_t> out(static_cast<std::size_t>(n));
    const char* p = v.data() + 20;
    for (std::size_t i = 0; i < out.size(); ++i, p += 12) {
        if (load_be<std::int32_t>(p) != 8)
            return std::nullopt;
        out[i] = load_be<std::int64_t>(p + 4);
    }
    return out;
}

/// Writes `COPY ... FROM STDIN (FORMAT binary)` data: the signature and header, rows of
/// length-prefixed fields (each in its type's binary send format), and the trailer.
class CopyWriter {
  public:
    /// Starts over in `out` (cleared; its capacity is kept for the next call).
    explicit CopyWriter(std::string& out) : out_(out) {
        out_.clear();
        out_.append("PGCOPY\n\377\r\n\0", 11);
        append_be(out_, std::int32_t{0}); // flags
        append_be(out_, std::int32_t{0}); // header extension length
    }
    /// Starts a row of `fields` fields.
    void row(std::int16_t fields) { append_be(out_, fields); }
    /// A fixed-size integer field (int2, int4, int8 by the width of T).
    template <class T> void field_int(T v) {
        append_be(out_, static_cast<std::int32_t>(sizeof(T)));
        append_be(out_, v);
    }
    /// A text or bytea field.
    void field_bytes(std::string_view s) {
        append_be(out_, static_cast<std::int32_t>(s.size()));
        out_.append(s);
    }
    /// A NULL field.
    void field_null() { append_be(out_, std::int32_t{-1}); }
    /// A text[] field without NULLs.
    void field_text_array(std::span<const std::string_view> items) {
        append_be(out_, static_cast<std::int32_t>(text_array_size(items)));
        append_text_array(out_, items);
    }
    /// Ends the data (the -1 field count); `out` then holds the whole COPY stream.
    void finish() { append_be(out_, std::int16_t{-1}); }

  private:
    std::string& out_;
};

} // namespace ax::pg::detail
