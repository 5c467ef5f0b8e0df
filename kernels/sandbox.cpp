#include "kernels/sandbox.hpp"

#include <algorithm>
#include <cmath>
#include <deque>

#include "core/error.hpp"
#include "cost/kernel_signature.hpp"

namespace scalescope::kernels {

std::uint64_t measure_template(const graph::RankProgram& prog, Executor& exec,
                               SandboxMeasurements& m) {
  std::uint64_t ran = 0;
  for (const graph::Op& op : prog.ops) {
    const cost::KernelSig s = cost::kernel_signature(op);
    if (!s.measurable()) continue;
    std::string key = s.key();
    if (m.by_signature.count(key)) continue;  // memoized: a signature runs once
    if (const auto r = exec.measure(s)) {
      m.by_signature.emplace(std::move(key), *r);
      ++ran;
    }
  }
  m.executions += ran;
  return ran;
}

cost::Profile as_profile(const SandboxMeasurements& m) {
  cost::Profile p;
  p.backend = m.backend;
  p.device = m.device;
  p.versions = m.versions;
  p.op_scale = m.op_scale;
  for (const auto& [sig, e] : m.by_signature)
    p.entries.emplace(sig, cost::ProfileEntry{e.median_s, e.p10_s, e.p90_s, e.reps, e.impl});
  return p;
}

std::vector<SimTime> sandbox_durations(const graph::RankProgram& prog,
                                       const cost::Profile& measured,
                                       const std::function<SimTime(const graph::Op&)>& fallback,
                                       double* measured_ns, double* total_ns) {
  std::vector<SimTime> d(prog.size(), 0);
  double from_profile = 0, total = 0;
  for (std::uint32_t i = 0; i < prog.size(); ++i) {
    const graph::Op& op = prog.ops[i];
    if (graph::is_communication(op.kind)) continue;
    if (const auto t = measured.duration(op)) {
      d[i] = *t;
      from_profile += static_cast<double>(d[i]);
    } else {
      d[i] = fallback(op);
    }
    total += static_cast<double>(d[i]);
  }
  if (measured_ns != nullptr) *measured_ns = from_profile;
  if (total_ns != nullptr) *total_ns = total;
  return d;
}

// ---- CachingAllocator ------------------------------------------------------------------------

namespace {
constexpr std::int64_t kMinBlock = 512;
constexpr std::int64_t kSmallSize = 1 << 20;     // 1 MiB
constexpr std::int64_t kSmallBuffer = 2 << 20;   // 2 MiB
constexpr std::int64_t kLargeBuffer = 20 << 20;  // 20 MiB
constexpr std::int64_t kMinLargeAlloc = 10 << 20;
constexpr std::int64_t kRoundLarge = 2 << 20;
std::int64_t round_up(std::int64_t x, std::int64_t m) {
  return (x + m - 1) / m * m;
}
}  // namespace

void CachingAllocator::insert_free(std::uint64_t h) {
  const Block& b = blocks_.at(h);
  (b.small ? free_small_ : free_large_).emplace(b.size, h);
}
void CachingAllocator::erase_free(std::uint64_t h) {
  const Block& b = blocks_.at(h);
  auto& pool = b.small ? free_small_ : free_large_;
  auto [lo, hi] = pool.equal_range(b.size);
  for (auto it = lo; it != hi; ++it)
    if (it->second == h) {
      pool.erase(it);
      return;
    }
  SCALESCOPE_EXPECTS(false && "free block missing from its pool");
}

std::uint64_t CachingAllocator::allocate(std::int64_t bytes) {
  const std::int64_t size =
      std::max(kMinBlock, round_up(std::max<std::int64_t>(bytes, 1), kMinBlock));
  const bool small = size <= kSmallSize;
  auto& pool = small ? free_small_ : free_large_;
  std::uint64_t h = 0;
  if (auto it = pool.lower_bound(size); it != pool.end()) {
    h = it->second;
    pool.erase(it);
  } else {
    const std::int64_t seg = small                   ? kSmallBuffer
                             : size < kMinLargeAlloc ? kLargeBuffer
                                                     : round_up(size, kRoundLarge);
    h = next_++;
    blocks_[h] = Block{seg, segments_++, 0, true, small};
    reserved_ += seg;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  Block& b = blocks_.at(h);
  const std::int64_t rest = b.size - size;
  if (small ? rest >= kMinBlock : rest > kSmallSize) {
    // Split: the remainder stays free in the same segment, just after the block.
    const std::uint64_t r = next_++;
    blocks_[r] = Block{rest, b.segment, b.offset + size, true, small};
    b.size = size;
    insert_free(r);
  }
  Block& used = blocks_.at(h);
  used.free = false;
  allocated_ += used.size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return h;
}

void CachingAllocator::release(std::uint64_t handle) {
  Block& b = blocks_.at(handle);
  SCALESCOPE_EXPECTS(!b.free);
  allocated_ -= b.size;
  b.free = true;
  // Merge with free neighbours of the same segment (blocks_ is small enough to search).
  for (bool merged = true; merged;) {
    merged = false;
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->first == handle || !it->second.free) continue;
      Block& o = it->second;
      Block& me = blocks_.at(handle);
      if (o.segment != me.segment) continue;
      if (o.offset + o.size == me.offset || me.offset + me.size == o.offset) {
        erase_free(it->first);
        me.offset = std::min(me.offset, o.offset);
        me.size += o.size;
        blocks_.erase(it);
        merged = true;
        break;
      }
    }
  }
  insert_free(handle);
}

AllocatorPeaks replay_allocator(const graph::RankProgram& prog) {
  CachingAllocator a;
  struct Live {
    std::uint64_t handle;
    std::int64_t bytes;
  };
  std::deque<Live> live;                                       // in allocation order
  if (prog.static_memory > 0) a.allocate(prog.static_memory);  // weights, grads, optimizer
  const auto release_bytes = [&](std::int64_t bytes) {
    if (bytes <= 0 || live.empty()) return;
    // The earliest run of consecutive live allocations adding up to `bytes` (two pointers:
    // sizes are positive).
    std::size_t lo = 0;
    std::int64_t sum = 0;
    for (std::size_t hi = 0; hi < live.size(); ++hi) {
      sum += live[hi].bytes;
      while (sum > bytes && lo <= hi) sum -= live[lo++].bytes;
      if (sum == bytes) {
        for (std::size_t i = lo; i <= hi; ++i) a.release(live[i].handle);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(lo),
                   live.begin() + static_cast<std::ptrdiff_t>(hi) + 1);
        return;
      }
    }
    // No exact run: release the oldest allocations until `bytes` are covered.
    std::int64_t freed = 0;
    while (!live.empty() && freed < bytes) {
      freed += live.front().bytes;
      a.release(live.front().handle);
      live.pop_front();
    }
  };
  for (const graph::Op& op : prog.ops) {
    if (op.mem_alloc > 0) live.push_back({a.allocate(op.mem_alloc), op.mem_alloc});
    if (op.mem_transient > 0) a.release(a.allocate(op.mem_transient));
    release_bytes(op.mem_free);
  }
  return {a.peak_allocated(), a.peak_reserved()};
}

}  // namespace scalescope::kernels
