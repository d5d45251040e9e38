// Shared by the ax fuzz targets: a reader over the fuzz input and the failure check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace ax_fuzz {

/// Reads the input front to back, little-endian; past the end every read is zero, so any byte
/// string is a complete program and a seed file stays readable next to the code that parses it.
class Input {
  public:
    Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

    [[nodiscard]] bool empty() const noexcept { return pos_ >= size_; }

    std::uint8_t u8() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
    std::uint32_t u32() noexcept {
        std::uint32_t v = 0;
        for (int i = 0; i < 4; ++i)
            v |= std::uint32_t{u8()} << (8 * i);
        return v;
    }
    std::uint64_t u64() noexcept {
        const std::uint64_t lo = u32();
        return lo | (std::uint64_t{u32()} << 32);
    }

  private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t pos_ = 0;
};

/// A broken invariant: say which, then abort so libFuzzer records the input as a crash. (Not
/// assert: the check must survive NDEBUG builds.)
inline void require(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "ax fuzz: invariant broken: %s\n", what);
        std::abort();
    }
}

} // namespace ax_fuzz
