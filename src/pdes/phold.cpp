#include "pdes/phold.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace scalescope::pdes {

namespace detail {

/// SplitMix64's output function (Steele, Lea, Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): a bijective 64-bit mixer.
inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// SplitMix64's increment (2^64 / golden ratio): draw k of a stream is mix64(key + k·gamma).
inline constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ULL;

/// Uniform in [0, 1) from the top 53 bits.
inline double unit_interval(std::uint64_t x) {
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

}  // namespace detail

namespace {

/// forward() always draws three numbers (remote?, destination, delay), used or not, so that
/// reverse() can undo it without state in the event.
constexpr std::uint64_t kDrawsPerEvent = 3;

}  // namespace

SimTime phold_ticks(double units, const char* what) {
  // 2^62 ticks leaves headroom for now + delay without overflowing SimTime.
  constexpr double kMaxTicks = 4.611686018427387904e18;
  if (!std::isfinite(units) || units < 0 || units * kPholdTicksPerUnit > kMaxTicks)
    throw_input("{} must be a finite number ≥ 0 and < 4.6e12, got {}", what, units);
  return static_cast<SimTime>(std::llround(units * kPholdTicksPerUnit));
}

PholdLP::PholdLP(LpId id, const PholdParams& params)
    : id_(id),
      params_(params),
      lp_key_(detail::mix64(params.seed ^ detail::mix64(id + detail::kGamma))),
      history_(0) {
  SCALESCOPE_EXPECTS(id < params.num_lps);
}

std::uint64_t PholdLP::draw() {
  return detail::mix64(lp_key_ + (++draws_) * detail::kGamma);
}

namespace {
/// The fixed part of every delay to `dst`: none for a hub (PholdParams::hub_every).
SimTime fixed_delay(const PholdParams& params, LpId dst) {
  return params.hub_every > 0 && dst % params.hub_every == 0 ? 0 : params.lookahead;
}
}  // namespace

SimTime phold_gap(const PholdParams& params, LpId dst) {
  return std::max<SimTime>(1, fixed_delay(params, dst));
}

void phold_lookahead_edges(const PholdParams& params,
                           const std::function<void(LpId, LpId, SimTime)>& edge) {
  for (LpId dst = 0; dst < params.num_lps; ++dst) {
    const SimTime gap = phold_gap(params, dst);
    for (LpId src = 0; src < params.num_lps; ++src)
      if (src != dst) edge(src, dst, gap);
  }
}

SimTime PholdLP::delay_ticks(std::uint64_t r, LpId dst) const {
  // Inverse transform: -mean·ln(1 - u) is Exp(mean) for u uniform in [0, 1); 1 - u > 0.
  const double exp_ticks =
      -static_cast<double>(params_.mean) * std::log1p(-detail::unit_interval(r));
  // At least one tick: the engine requires every sent event to sort after the one being handled,
  // and a zero delay to a lower LP id would sort before it (only possible with lookahead 0).
  return std::max<SimTime>(
      1, fixed_delay(params_, dst) + static_cast<SimTime>(std::llround(exp_ticks)));
}

void PholdLP::init(Context& ctx) {
  for (std::uint32_t k = 0; k < params_.start_events; ++k)
    ctx.schedule(id_, ctx.now() + delay_ticks(draw(), id_), 0);
}

void PholdLP::forward(Event& e, Context& ctx) {
  (void)e;
  const std::uint64_t r_remote = draw();
  const std::uint64_t r_dst = draw();
  const std::uint64_t r_delay = draw();
  LpId dst = id_;
  if (detail::unit_interval(r_remote) < params_.remote)
    // Top 32 bits scaled to [0, num_lps) (Lemire's multiply-shift; bias ≤ num_lps / 2^32).
    dst = static_cast<LpId>(((r_dst >> 32) * params_.num_lps) >> 32);
  ctx.schedule(dst, ctx.now() + delay_ticks(r_delay, dst), 0);
  ++processed_;
}

void PholdLP::reverse(Event& e, Context& ctx) {
  (void)e;
  (void)ctx;
  draws_ -= kDrawsPerEvent;
  --processed_;
}

void PholdLP::commit(const Event& e) {
  std::uint64_t h = detail::mix64(history_ ^ static_cast<std::uint64_t>(e.key.time));
  h = detail::mix64(h ^ ((std::uint64_t{e.key.priority} << 32) | e.key.src));
  history_ = detail::mix64(h ^ e.key.seq);
  ++committed_;
}

bool PholdLP::save_state(std::vector<std::byte>& out) const {
  for (std::uint64_t v : {draws_, processed_}) {
    std::byte bytes[sizeof v];
    std::memcpy(bytes, &v, sizeof v);
    out.insert(out.end(), bytes, bytes + sizeof v);
  }
  return true;
}

std::uint64_t phold_checksum(std::span<const PholdLP> lps) {
  std::uint64_t sum = 0;
  for (const PholdLP& lp : lps)
    sum += detail::mix64(detail::mix64(lp.id() + detail::kGamma) ^ lp.history_hash());
  return sum;
}

PholdLps::PholdLps(const PholdParams& params, const std::vector<std::uint32_t>& owner, int rank)
    : params_(params) {
  for (std::uint32_t p : owner) owned_ += p == static_cast<std::uint32_t>(rank) ? 1 : 0;
  lps_.reserve(owned_);
}

LogicalProcess* PholdLps::make(LpId id) {
  SCALESCOPE_EXPECTS(lps_.size() < owned_);
  return &lps_.emplace_back(id, params_);
}

std::uint64_t PholdLps::checksum(MPI_Comm comm) const {
  const std::uint64_t mine = phold_checksum(lps_);
  std::uint64_t all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, comm);
  return all;
}

std::vector<PholdLP> make_phold_lps(const PholdParams& params) {
  std::vector<PholdLP> lps;
  lps.reserve(params.num_lps);
  for (LpId i = 0; i < params.num_lps; ++i) lps.emplace_back(i, params);
  return lps;
}

PholdRun run_phold_sequential(const PholdParams& params, SimTime end, bool rollback_check) {
  std::vector<PholdLP> lps = make_phold_lps(params);
  std::vector<LogicalProcess*> ptrs;
  ptrs.reserve(lps.size());
  for (PholdLP& lp : lps) ptrs.push_back(&lp);
  SequentialEngine engine(std::move(ptrs));
  PholdRun run;
  run.stats = engine.run(end, rollback_check);
  run.checksum = phold_checksum(lps);
  return run;
}

}  // namespace scalescope::pdes
