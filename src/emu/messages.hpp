#pragma once
/// The messages RankLP and CommLP exchange, and the undo state their handlers keep in them.
#include <array>
#include <cstdint>

#include "graph/op.hpp"
#include "pdes/event.hpp"

namespace scalescope::emu {

enum class MsgKind : std::uint8_t { Start, Arrive, Complete, OpDone };

/// Kind priorities in the event order. The engine requires every event a handler sends to come
/// after the event being handled in the total order. Ranks send ARRIVE at the time they handle a
/// START, COMPLETE or OP_DONE, so ARRIVE sorts last; a CommLP sends COMPLETE at least 1 ns after
/// the ARRIVE it handles (communication never takes zero time); OP_DONE may follow a COMPLETE
/// or an OP_DONE at the same instant (a zero-length op), so it sorts after COMPLETE.
inline constexpr std::uint32_t kPriorityStart = 0;
inline constexpr std::uint32_t kPriorityComplete = 1;
inline constexpr std::uint32_t kPriorityOpDone = 2;
inline constexpr std::uint32_t kPriorityArrive = 3;

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

}  // namespace scalescope::emu
