#pragma once
/// PHOLD, the standard synthetic benchmark of parallel discrete-event engines, as ROSS defines
/// it (ROSS `models/phold`): every LP starts with `start_events` events; each event makes its LP
/// send one new event, `lookahead + Exp(mean)` later, to a uniformly random LP among all LPs with
/// probability `remote` and to itself otherwise. Delays are at least one tick (see delay_ticks).
///
/// Random numbers come from a counter-based generator (SplitMix64 of seed, LP id and a per-LP
/// draw counter), so an LP's draws depend only on how many events it has processed: they are the
/// same under every engine, and reverse() undoes them by decrementing the counter.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "pdes/logical_process.hpp"
#include "pdes/sequential_engine.hpp"

namespace scalescope::pdes {

/// Simulated time in PHOLD is given in abstract units (ROSS's mean 1.0, lookahead 0.1); the
/// engine's integer SimTime counts 10^-6 units, so times stay exact integers.
inline constexpr double kPholdTicksPerUnit = 1e6;

/// PHOLD units to engine ticks, rounded to the nearest tick. Throws InputError naming `what`
/// for a negative, non-finite or too large value.
SimTime phold_ticks(double units, const char* what);

struct PholdParams {
  std::uint32_t num_lps = 1;       ///< all LPs of the run (lps per process × processes)
  std::uint32_t start_events = 1;  ///< events each LP holds at the start
  double remote = 0.25;            ///< probability that an event goes to a random LP
  SimTime mean = 1'000'000;        ///< mean of the exponential delay, in ticks
  SimTime lookahead = 100'000;     ///< fixed part of every delay, in ticks
  /// > 0: an event sent to an LP whose id is a multiple of this has no fixed part (the LP's
  /// lookahead is 0, as a data-parallel communicator's is in the replay, while the others keep
  /// `lookahead`): a model whose lookahead differs per LP (OptimisticConfig::lookahead_edges).
  std::uint32_t hub_every = 0;
  std::uint64_t seed = 1;
};

class PholdLP final : public LogicalProcess {
 public:
  PholdLP(LpId id, const PholdParams& params);

  void init(Context& ctx) override;
  void forward(Event& e, Context& ctx) override;
  void reverse(Event& e, Context& ctx) override;
  void commit(const Event& e) override;
  bool save_state(std::vector<std::byte>& out) const override;

  LpId id() const { return id_; }
  /// Events this LP has committed.
  std::uint64_t committed() const { return committed_; }
  /// Rolling hash of the committed events' keys (time, priority, source, sequence number) in
  /// commit order.
  std::uint64_t history_hash() const { return history_; }

 private:
  std::uint64_t draw();  ///< next raw 64-bit random value
  /// max(1, lookahead of `dst` + Exp(mean)) from one draw
  SimTime delay_ticks(std::uint64_t r, LpId dst) const;

  LpId id_;
  PholdParams params_;
  std::uint64_t lp_key_;         ///< seed and id mixed once, the generator's stream key
  std::uint64_t draws_ = 0;      ///< reversible: the generator's counter
  std::uint64_t processed_ = 0;  ///< reversible: forward() calls not undone
  std::uint64_t committed_ = 0;
  std::uint64_t history_;
};

/// The least delay of an event sent to `dst`: max(1, its fixed part).
SimTime phold_gap(const PholdParams& params, LpId dst);

/// Reports PHOLD's LP graph with each edge's least delay (OptimisticConfig::lookahead_edges):
/// every LP may send to every other. Quadratic in the LPs: for tests.
void phold_lookahead_edges(const PholdParams& params,
                           const std::function<void(LpId, LpId, SimTime)>& edge);

/// The run's checksum: the sum mod 2^64 of a hash of (LP id, history hash) over `lps`. It does
/// not depend on the order of the LPs, so per-process partial sums add up (MPI_SUM on uint64).
std::uint64_t phold_checksum(std::span<const PholdLP> lps);

/// One LP per id in [0, params.num_lps).
std::vector<PholdLP> make_phold_lps(const PholdParams& params);

/// The PHOLD LPs one process of a parallel engine owns, made as the engine places them (`make`
/// is its make_lp), and the run's checksum over the processes. Reserved up front: the engine
/// keeps pointers to the LPs, so the vector never moves.
class PholdLps {
 public:
  /// `owner[i]`: the process (rank in the engine's communicator) that owns LP i.
  PholdLps(const PholdParams& params, const std::vector<std::uint32_t>& owner, int rank);
  LogicalProcess* make(LpId id);
  /// phold_checksum over every process of `comm` (collective; unsigned addition wraps mod 2^64
  /// in every order, so the sum does not depend on the partition).
  std::uint64_t checksum(MPI_Comm comm) const;

 private:
  PholdParams params_;
  std::size_t owned_ = 0;
  std::vector<PholdLP> lps_;
};

struct PholdRun {
  EngineStats stats;
  std::uint64_t checksum = 0;
};

/// Runs all LPs on the sequential engine up to `end` (ticks), optionally in rollback-check mode.
PholdRun run_phold_sequential(const PholdParams& params, SimTime end, bool rollback_check = false);

}  // namespace scalescope::pdes
