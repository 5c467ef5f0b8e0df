#pragma once
/// One communicator. Collectives: each member sends ARRIVE; when all members of an instance
/// have arrived, the network model gives its duration and COMPLETE goes to every member.
/// Pipeline pairs: a transfer is a rendezvous of its sender and receiver on a channel (NCCL's
/// P2P), or with ModelData::eager_p2p an eager send (ASTRA-sim's): the send completes when its
/// transfer is done whether or not the receive is posted, and the receive completes when it is
/// posted and the data is there.
#include <array>
#include <cstdint>
#include <vector>

#include "cost/cost_model.hpp"
#include "emu/messages.hpp"
#include "emu/model_data.hpp"
#include "pdes/logical_process.hpp"

namespace scalescope::emu {

/// Per template and role, one op of each distinct (kind, bytes, shape) its program runs on that
/// role's communicator: what CommLP::least_gap prices. Empty for a template not loaded.
using RoleOps = std::vector<std::array<std::vector<const graph::Op*>, graph::kNumRoles>>;
RoleOps role_ops(const ModelData& data);

class CommLP final : public pdes::LogicalProcess {
 public:
  CommLP(std::uint32_t comm, const ModelData& data);

  void init(pdes::Context&) override {}
  void forward(pdes::Event& e, pdes::Context& ctx) override;
  void reverse(pdes::Event& e, pdes::Context& ctx) override;
  void commit(const pdes::Event&) override {}
  bool has_commit() const override { return false; }
  void prefetch(const pdes::Event&) const override { __builtin_prefetch(members_); }
  bool save_state(std::vector<std::byte>& out) const override;

  /// The least time from the event that completes an instance here to the COMPLETE it sends a
  /// member (the model's lookahead, pdes::OptimisticConfig::lookahead_edges): the smallest wire
  /// time of the ops its members run on it (`ops` must hold their templates); 0 under the flow
  /// model (COMPLETE at the instant of the fabric's FLOW_DONE), 1 ns for an eager pair (a
  /// receive posted after the data came completes 1 ns after it).
  SimTime least_gap(const RoleOps& ops) const;

  /// True when no instance is half-arrived (checked after a run); eager: every send received.
  bool idle() const {
    return eager_ ? expected_ == received_ : arrived_[0] == 0 && arrived_[1] == 0;
  }

 private:
  SimTime duration(const pdes::Event& arrival) const;
  /// Flow model: sends the transfer of `op` (the last arrival's) to the fabric.
  void start_flow(const graph::Op& op, std::uint8_t channel, std::uint32_t instance,
                  pdes::Context& ctx) const;
  void forward_eager(pdes::Event& e, pdes::Context& ctx);
  std::uint32_t eager_channel(const pdes::Event& e) const;

  std::uint32_t comm_;
  const ModelData* data_;
  const std::uint32_t* members_;
  std::uint32_t size_;
  graph::CommKind kind_;
  cost::CommShape shape_;
  /// The members a COMPLETE goes to and whose arrivals start an instance: all of them, or in a
  /// representative replay (ModelData::active) those in the replayed replica; the network shape
  /// stays the whole communicator's.
  const std::uint32_t* targets_;
  std::uint32_t num_targets_;
  std::uint32_t needed_;  ///< arrivals that start an instance (2 for a pipeline pair)
  std::vector<std::uint32_t> active_members_;
  /// Stream of the COMPLETE each member receives: members 0 and 1 of a pipeline pair differ; a
  /// collective's members all use stream_[0] (index min(i, 1) with equal entries).
  std::array<std::uint8_t, 2> stream_{};
  bool eager_ = false;  ///< a pipeline pair with eager sends
  bool flow_ = false;   ///< transfers go through the fabric (flow model, members on several nodes)
  std::uint8_t upstream_ = 0;  ///< pipeline pair: the member that sends on kChannelDown

  // Dynamic state (undone by reverse): per channel, the instance awaited and arrivals so far.
  // Eager pairs: per sending member, sends (expected_) and receives (received_) that have
  // arrived, and when each send's data is there (entries below expected_ are valid; reverse
  // only counts down).
  std::array<std::uint32_t, 2> expected_{};
  std::array<std::uint32_t, 2> arrived_{};
  std::array<std::uint32_t, 2> received_{};
  std::array<std::vector<SimTime>, 2> delivered_;
  /// Eager: the stream of a receive posted before its data (written when it arrives).
  std::array<std::uint8_t, 2> waiting_stream_{};

  // Memo of the last durations asked for (a pure function of its key, so rollback-safe). A
  // communicator cycles through a few (kind, size) pairs (a DP group's buckets, its
  // reduce-scatter and all-gather): one entry missed 35 % of the time at 1,024 GPUs, and the
  // misses' NCCL estimates were 7 % of the replay's instructions (callgrind).
  struct Memo {
    double bytes = -1;
    SimTime ns = 0;
    graph::OpKind kind = graph::OpKind::Gemm;
  };
  mutable std::array<Memo, 4> memo_{};
  mutable std::uint8_t memo_next_ = 0;
};

}  // namespace scalescope::emu
