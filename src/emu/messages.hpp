#pragma once
/// The messages RankLP and CommLP exchange, and the undo state their handlers keep in them.
#include <array>
#include <cstdint>

#include "graph/op.hpp"
#include "pdes/event.hpp"

namespace scalescope::emu {

enum class MsgKind : std::uint8_t {
  Start,
  Arrive,
  Complete,
  OpDone,
  FlowStart,
  FlowWake,
  FlowDone
};

/// Kind priorities in the event order. The engine requires every event a handler sends to come
/// after the event being handled in the total order. Ranks send ARRIVE at the time they handle a
/// START, COMPLETE or OP_DONE, so ARRIVE sorts last; a CommLP sends COMPLETE at least 1 ns after
/// the ARRIVE it handles (communication never takes zero time); OP_DONE may follow a COMPLETE
/// or an OP_DONE at the same instant (a zero-length op), so it sorts after COMPLETE.
inline constexpr std::uint32_t kPriorityStart = 0;
inline constexpr std::uint32_t kPriorityComplete = 1;
inline constexpr std::uint32_t kPriorityOpDone = 2;
inline constexpr std::uint32_t kPriorityArrive = 3;
/// The flow model (emu/fabric_lp.hpp): a CommLP sends FLOW_START when it handles the ARRIVE that
/// starts a transfer (so after it); the fabric wakes itself when its next flow ends; FLOW_DONE
/// reaches the CommLP at least 1 ns after the wake that ends the flow and sorts before the
/// COMPLETE the CommLP sends at that instant.
inline constexpr std::uint32_t kPriorityFlowDone = 0;
inline constexpr std::uint32_t kPriorityFlowStart = 4;
inline constexpr std::uint32_t kPriorityFlowWake = 5;

/// Channels of a communicator: collectives use 0; a pipeline pair uses 0 for transfers from the
/// upstream stage to the downstream one and 1 for the other direction.
inline constexpr std::uint8_t kChannelDown = 0;
inline constexpr std::uint8_t kChannelUp = 1;

struct EmuMsg {
  MsgKind kind = MsgKind::Start;
  std::uint8_t stream = 0;       ///< Complete / OpDone: the stream whose head op it finishes
  std::uint8_t channel = 0;      ///< Arrive: communicator channel
  std::uint8_t undo_issued = 0;  ///< RankLP: issued-stream bitmask before forward
  std::uint32_t op = 0;          ///< Arrive: the sender's op index in its template
  std::uint32_t instance = 0;    ///< Arrive: instance number of the op on that channel
  /// CommLP: 1 = forward completed an instance, 2 = forward ignored the event (see CommLP)
  std::uint8_t undo_completed = 0;
  /// Arrive: 1 for the receive part of a SendRecv (eager pairs tell the parts apart)
  std::uint8_t recv = 0;
  std::uint16_t undo_outstanding = 0;  ///< RankLP: completions awaited, 2 bits per stream
  std::array<std::uint32_t, graph::kNumStreams> undo_cursor{};
};
static_assert(sizeof(EmuMsg) <= pdes::kPayloadBytes);

/// A transfer between nodes under the flow model: FLOW_START (CommLP → fabric: the request),
/// FLOW_WAKE (fabric → itself: `tag` is the schedule's version), FLOW_DONE (fabric → CommLP:
/// `tag` and `channel` echo the start).
struct FlowMsg {
  MsgKind kind = MsgKind::FlowStart;
  std::uint8_t channel = 0;
  std::uint8_t src_member = 0;  ///< P2P: the sending member's index in the pair
  std::uint8_t pattern = 0;     ///< cost::FlowPattern
  std::uint32_t comm = 0;
  std::uint32_t tag = 0;  ///< START / DONE: the instance; WAKE: the version
  std::uint32_t steps = 1;
  double flow_bytes = 0;
  double alone_ns = 0;
  double latency_ns = 0;
};
static_assert(sizeof(FlowMsg) <= pdes::kPayloadBytes);

/// The kind of any message of the emulation (every payload starts with it).
inline MsgKind kind_of(const pdes::Event& e) {
  return e.as<MsgKind>();
}

}  // namespace scalescope::emu
