#pragma once
/// The flow model's logical process (docs/network.md, docs/architecture.md "Flow model"): every
/// transfer between nodes is a variable of a max-min system over the fabric's links. A CommLP
/// sends FLOW_START when a transfer begins; the fabric recomputes the rates of the flows that
/// share a saturable link with it (its component), and wakes itself when the next flow ends, which
/// it reports with FLOW_DONE after the transfer's latency. A wake made stale by a later start or
/// end carries an old version and is ignored.
///
/// Reverse computation of floating-point rates is not exact, so the LP saves state instead: each
/// forward appends the prior values of what it changes to an undo log, reverse restores them,
/// commit drops the committed event's records. Every order the results depend on (the flows of a
/// component, the users of a link) is canonical (sorted by slot), so a rolled-back-and-redone
/// history gives bit-identical rates.
#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/sim_time.hpp"
#include "cost/max_min.hpp"
#include "cost/topology.hpp"
#include "emu/messages.hpp"
#include "emu/model_data.hpp"
#include "pdes/logical_process.hpp"

namespace scalescope::emu {

class FabricLP final : public pdes::LogicalProcess {
 public:
  FabricLP(const ModelData& data, const cost::Fabric& fabric);

  void init(pdes::Context&) override {}
  void forward(pdes::Event& e, pdes::Context& ctx) override;
  void reverse(pdes::Event& e, pdes::Context& ctx) override;
  void commit(const pdes::Event& e) override;
  bool save_state(std::vector<std::byte>& out) const override;

  bool idle() const { return live_ == 0; }

 private:
  struct Flow {
    cost::MaxMinVar var;  ///< links and weights point into a cached Demand
    double left = 0;      ///< bytes per flow still to send at t_upd
    SimTime t_upd = 0;
    SimTime finish = kTimeInfinity;  ///< when the data is through at the current rate
    SimTime latency = 0;             ///< added after the data
    std::uint32_t comm = 0;
    std::uint32_t tag = 0;
    std::uint8_t channel = 0;
    bool live = false;
    std::int64_t load = 0;  ///< its bound in load_'s unit
  };
  enum class UndoKind : std::uint8_t { Added, AddedFresh, Removed, State, Version };
  struct Undo {
    UndoKind kind;
    std::uint32_t slot;
    Flow saved;
  };

  const cost::Demand& demand(const FlowMsg& m);
  void start(const FlowMsg& m, pdes::Context& ctx);
  void wake(pdes::Context& ctx);
  /// Recomputes the rates of every flow coupled to `seed_links` (and to flow `seed`, if any).
  void rebalance(std::uint32_t seed, const std::vector<cost::LinkId>& seed_links, SimTime now);
  /// The incremental test (docs/network.md "What a rate change costs"): an allocation is the
  /// max-min fair one iff every variable is at its bound or has a bottleneck, a saturated link on
  /// which no user has a higher per-flow rate. `try_add` gives a new flow the capacity its links
  /// have left and keeps it, with every other rate, when that holds for it (no other variable
  /// loses its bottleneck: it had one before, and the new flow crosses no saturated link);
  /// `keeps_bottleneck` tells whether a variable still has one after flows that shared its links
  /// ended.
  bool try_add(std::uint32_t slot, SimTime now);
  bool keeps_bottleneck(std::uint32_t slot) const;
  struct LinkUse {
    double used = 0;      ///< Σ weight × rate of the link's users (but `skip`)
    double max_rate = 0;  ///< their highest per-flow rate
  };
  LinkUse link_use(cost::LinkId l, std::uint32_t skip) const;
  /// Sets the finish of a flow whose rate the fast path or a solve (re)set at `now`.
  void set_finish(Flow& f, SimTime now) {
    const double dt = std::ceil(f.left / f.var.rate);
    // A link bandwidth near 0 (a degraded_nic factor of 1e-15 once made the iteration faster:
    // the finish wrapped int64) is refused, not wrapped.
    if (!(dt <= kMaxDurationSeconds * 1e9) || now > kTimeLimit) [[unlikely]]
      throw_input(
          "the flow model: a transfer of {:.3g} bytes left at {:.3g} bytes/ns would take {:.3g} "
          "s, beyond the {} s the model covers (a degraded_nic factor or a bandwidth near 0)",
          f.left, f.var.rate, dt * 1e-9, kMaxDurationSeconds);
    f.finish = now + static_cast<SimTime>(dt);
  }
  void schedule_wake(pdes::Context& ctx);
  void link_users_add(std::uint32_t slot);
  void link_users_remove(std::uint32_t slot);
  void log(UndoKind k, std::uint32_t slot) { log_.push_back(Undo{k, slot, flows_[slot]}); }
  /// The next finish: a tournament tree over the slots (the earliest live flow's slot at the
  /// root; ties: the lower slot), updated per changed slot, so a wake never scans every flow.
  SimTime key(std::uint32_t slot) const {
    return slot < flows_.size() && flows_[slot].live ? flows_[slot].finish : kTimeInfinity;
  }
  void tree_update(std::uint32_t slot);
  std::uint32_t tree_min() const { return tree_.empty() ? UINT32_MAX : tree_[1]; }

  const ModelData* data_;
  const cost::Fabric* fabric_;
  std::vector<double> capacity_;  ///< per link, bytes per ns
  std::vector<Flow> flows_;
  std::vector<std::uint32_t> free_;                ///< reusable slots, LIFO
  std::vector<std::uint32_t> tree_;                ///< 2·capacity nodes; leaves at capacity + slot
  std::vector<std::vector<std::uint32_t>> users_;  ///< per link: live slots, sorted
  /// Per link: Σ weight × bound of its live flows in 1e-6 bytes/ns (integers: exact to add and
  /// take away in any order), to tell at once whether the link can saturate.
  std::vector<std::int64_t> load_;
  std::vector<double> saturates_at_;  ///< per link: capacity in load_'s unit
  std::uint32_t version_ = 0;
  std::uint32_t live_ = 0;

  std::deque<Undo> log_;
  std::deque<std::uint32_t> marks_;  ///< undo records per uncommitted event, oldest first

  // Scratch (no allocation per event once warm).
  cost::MaxMinSolver solver_;
  std::vector<std::uint32_t> comp_;
  std::vector<std::uint8_t> in_comp_;
  std::vector<std::uint8_t> link_seen_;    ///< per link: 1 visited, 2 visited and saturable
  std::vector<std::uint8_t> link_active_;  ///< per link: constrains the current solve
  std::vector<cost::LinkId> links_todo_, links_seen_list_;
  std::vector<cost::MaxMinVar*> vars_;
  std::vector<cost::LinkId> seed_links_;
  std::vector<double> old_rate_;  ///< per component entry, its rate before the solve
  std::vector<LinkUse> use_;      ///< try_add: per link of the new flow, its other users' use
  /// Demands by (communicator, pattern, sender): a pure function of the key (rollback-safe).
  std::unordered_map<std::uint64_t, std::unique_ptr<cost::Demand>> demands_;
};

}  // namespace scalescope::emu
