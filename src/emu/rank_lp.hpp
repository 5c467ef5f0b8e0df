#pragma once
/// One virtual rank: replays its class template on its streams. Ops on a stream run in program
/// order; streams overlap; an op starts when its stream is free and its dependencies are done.
/// A chain of local compute ops advances inside one event up to the next communication point.
#include <array>
#include <cstdint>
#include <vector>

#include "emu/messages.hpp"
#include "emu/model_data.hpp"
#include "emu/results.hpp"
#include "pdes/logical_process.hpp"

namespace scalescope::emu {

/// Where a RankLP's commit handler records what happened (owned by the emulation).
struct RankRecorder {
  RankResult* result = nullptr;
  std::vector<TimelineRecord>* timeline = nullptr;  ///< null unless the rank is traced
  std::vector<MemoryRecord>* memory = nullptr;      ///< null unless the rank is traced
};

class RankLP final : public pdes::LogicalProcess {
 public:
  RankLP(std::uint32_t rank, const ModelData& data, RankRecorder recorder);

  void init(pdes::Context& ctx) override;
  void forward(pdes::Event& e, pdes::Context& ctx) override;
  void reverse(pdes::Event& e, pdes::Context& ctx) override;
  void commit(const pdes::Event& e) override;
  void finalize() override;
  bool save_state(std::vector<std::byte>& out) const override;

  /// True when every op has finished (checked after a run: a stuck rank is a graph bug).
  bool done() const;
  std::uint32_t rank() const { return rank_; }
  /// Bytes this rank's LP occupies: the object and its per-op dynamic state (the template is
  /// shared by its class and not counted).
  std::size_t state_bytes() const {
    return sizeof(*this) + finish_.capacity() * sizeof(SimTime) +
           comm_start_.capacity() * sizeof(SimTime);
  }

 private:
  SimTime stream_free(int s) const;
  /// Finish time of the latest dependency of op i, or kTimeUnknown if one is not finished.
  SimTime deps_ready(std::uint32_t i) const;
  void advance(pdes::Context& ctx);
  void issue_comm(std::uint32_t i, int s, SimTime t, pdes::Context& ctx);
  void record(int s, std::uint32_t c);
  /// Slot of the c-th op of communication stream s in comm_start_.
  std::size_t comm_slot(int s, std::uint32_t c) const { return comm_base_[s] + c; }

  std::uint32_t rank_;
  const ModelData* data_;
  const graph::RankProgram* prog_;
  const SimTime* dur_;
  const MemoryProfile* mem_;
  RankRecorder rec_;

  // Dynamic state (undone by reverse).
  /// Start times of communication ops (per stream, in stream order), kTimeUnknown until issued.
  /// A compute op's start is its finish minus its duration, so only finish times are kept per op.
  std::vector<SimTime> comm_start_;
  std::array<std::uint32_t, graph::kNumStreams> comm_base_{};
  std::vector<SimTime> finish_;                             ///< per op, kTimeUnknown until finished
  std::array<std::uint32_t, graph::kNumStreams> cursor_{};  ///< next op per stream
  std::array<std::uint8_t, graph::kNumStreams> outstanding_{};  ///< completions awaited
  std::uint8_t issued_ = 0;  ///< bit s: head op of stream s is issued and awaits completion

  // Committed accounting (written by commit only, never undone).
  SimTime last_finish_ = 0;
  std::uint32_t last_op_ = 0;
};

}  // namespace scalescope::emu
