// Test helper: a DoubleBufferQueue whose standby list links live in a plain vector, with a swap()
// that hands the chain back as a vector (push order), for tests written against indices.
#pragma once

#include <ax/queue.hpp>
#include <cstdint>
#include <vector>

namespace ax_test {

/// Links of slots 0..n-1 in a vector the test owns.
struct VecLinks {
    std::vector<std::uint32_t>* next_;
    [[nodiscard]] std::uint32_t next(std::uint32_t i) const noexcept { return (*next_)[i]; }
    void set_next(std::uint32_t i, std::uint32_t v) const noexcept { (*next_)[i] = v; }
};

struct LinkStore {
    explicit LinkStore(std::size_t n) : next(n, 0xdeadbeefu) {}
    std::vector<std::uint32_t> next;
};

/// The queue over slots 0..slots-1 (default 65,536).
class TestQueue : private LinkStore, public ax::detail::DoubleBufferQueue<VecLinks> {
  public:
    using Base = ax::detail::DoubleBufferQueue<VecLinks>;
    TestQueue(std::uint32_t capacity, std::uint32_t soft_limit, std::size_t slots = 1u << 16)
        : LinkStore(slots), Base(VecLinks{&next}, capacity, soft_limit) {}

    /// Base::swap, the chain appended to `out`; `lanes` keeps the priority mask it reported.
    bool swap(std::vector<std::uint32_t>& out) {
        Chain c;
        if (!Base::swap(c, lanes))
            return false;
        for (std::uint32_t i = c.front(); i != none; i = next[i])
            out.push_back(i);
        chain_size = c.size();
        return true;
    }
    /// The slot after `i` in whatever list holds it.
    [[nodiscard]] std::uint32_t link(std::uint32_t i) const { return next[i]; }

    std::uint32_t lanes = 0;
    std::size_t chain_size = 0;
};

} // namespace ax_test
