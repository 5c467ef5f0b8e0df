#pragma once
/// One virtual rank: replays its class template on its streams. Ops on a stream run in program
/// order; streams overlap; an op starts when its stream is free and its dependencies are done.
/// A chain of local compute ops advances inside one event up to the next communication point.
///
/// Layout for scale (docs/engine.md, "At scale: memory traffic per event"): the object is one cache
/// line; the per-op times live in an arena the emulation owns, one block per rank in rank order;
/// results are derived from those times once, in finalize(), so committing an event writes nothing.
#include <array>
#include <cstdint>
#include <vector>

#include "emu/messages.hpp"
#include "emu/model_data.hpp"
#include "emu/results.hpp"
#include "pdes/logical_process.hpp"

namespace scalescope::emu {

/// Where a rank's results go (owned by the emulation; read in finalize only).
struct RankRecorder {
  RankResult* result = nullptr;
  std::vector<TimelineRecord>* timeline = nullptr;  ///< null unless the rank is traced
  std::vector<MemoryRecord>* memory = nullptr;      ///< null unless the rank is traced
  bool traced() const { return timeline != nullptr || memory != nullptr; }
};

class alignas(64) RankLP final : public pdes::LogicalProcess {
 public:
  /// Time slots a rank of this class needs in the arena: a finish time per op, and when traced a
  /// start time per communication op (a compute op's start is its finish minus its duration).
  static std::size_t slots(const RankClass& cls, bool traced) {
    return cls.prog->size() + (traced ? cls.comm_ops : 0);
  }

  /// `times` points to slots(class, traced) SimTimes, exclusively this rank's.
  RankLP(std::uint32_t rank, const ModelData& data, const RankRecorder* recorder, SimTime* times);

  void init(pdes::Context& ctx) override;
  void forward(pdes::Event& e, pdes::Context& ctx) override;
  void reverse(pdes::Event& e, pdes::Context& ctx) override;
  void commit(const pdes::Event&) override {}
  bool has_commit() const override { return false; }
  void prefetch(const pdes::Event& e) const override;
  void finalize() override;
  bool save_state(std::vector<std::byte>& out) const override;

  /// True when every op has finished (checked after a run: a stuck rank is a graph bug).
  bool done() const;
  std::uint32_t rank() const { return rank_; }
  /// Per op, its finish time (after the run: the committed history; emu/critical_path.hpp).
  const SimTime* finish_times() const { return time_; }
  const RankClass& rank_class() const { return *cls_; }
  /// Bytes this rank occupies: the object and its time slots (the template is shared by its
  /// class and not counted).
  std::size_t state_bytes() const {
    return sizeof(*this) + slots(*cls_, traced_) * sizeof(SimTime);
  }

 private:
  SimTime stream_free(int s) const;
  /// Finish time of the latest dependency of op i on another stream (WaitDeps), or kTimeUnknown
  /// if one is not finished.
  SimTime deps_ready(std::uint32_t i) const;
  /// When the host has issued op i (docs/engine.md "Host issue"): its issue time after the
  /// start, or after the host's last synchronization once that op finished; kTimeUnknown while
  /// that op is unfinished; 0 when the host is not modelled.
  SimTime issue_time(std::uint32_t i) const;
  /// All streams when op i is one the host synchronizes on (its finish releases the host),
  /// else none: a bit set for advance().
  unsigned host_wake(std::uint32_t i) const {
    return cls_->last_sync != nullptr && cls_->prog->ops[i].host_sync
               ? (1u << graph::kNumStreams) - 1
               : 0u;
  }
  /// Starts what can start on the streams in the bit set `check` (and on those it wakes).
  void advance(unsigned check, pdes::Context& ctx);
  /// The streams whose head op waits for op i (which just finished), as a bit set.
  unsigned wake(std::uint32_t i) const;
  void issue_comm(std::uint32_t i, int s, SimTime t, pdes::Context& ctx);
  /// Slot of the start time of the c-th op of communication stream s (traced ranks only).
  std::size_t start_slot(int s, std::uint32_t c) const {
    return cls_->prog->size() + cls_->comm_base[s] + c;
  }
  SimTime start_of(int s, std::uint32_t c) const;
  void record_trace() const;

  const RankClass* cls_;
  const RankRecorder* rec_;
  /// Per op, its finish time (kTimeUnknown until finished); then, when traced, the start time of
  /// each communication op per stream in stream order (kTimeUnknown until issued).
  SimTime* time_;
  // Dynamic state besides the times (undone by reverse).
  std::array<std::uint32_t, graph::kNumStreams> cursor_{};  ///< next op per stream
  /// Completions awaited per stream, 2 bits each (an op has at most a send and a receive part).
  std::uint16_t outstanding_ = 0;
  unsigned outstanding(int s) const { return (outstanding_ >> (2 * s)) & 3u; }
  void set_outstanding(int s, unsigned n) {
    outstanding_ = static_cast<std::uint16_t>((outstanding_ & ~(3u << (2 * s))) | (n << (2 * s)));
  }
  std::uint8_t issued_ = 0;  ///< bit s: head op of stream s is issued and awaits completion
  bool traced_;
  std::uint32_t rank_;
};
static_assert(sizeof(RankLP) == 64, "a rank's LP object is one cache line");

}  // namespace scalescope::emu
