#pragma once
/// Events of the engine. Every event carries a total-order key, so that a run gives the same
/// committed history under every engine and process count.
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <type_traits>

#include "core/error.hpp"
#include "core/sim_time.hpp"

namespace scalescope::pdes {

using LpId = std::uint32_t;

/// Total order of events: (time, kind priority, destination, source, source sequence number).
/// The sequence number counts the events a source LP has sent, so the key is unique. 24 bytes:
/// with the payload an event is one cache line.
struct EventKey {
  SimTime time = 0;
  std::uint32_t priority = 0;
  LpId dst = 0;
  LpId src = 0;
  std::uint32_t seq = 0;  ///< engines reject an LP's 2^32-th send (ContractError)

  friend bool operator<(const EventKey& a, const EventKey& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.dst != b.dst) return a.dst < b.dst;
    if (a.src != b.src) return a.src < b.src;
    return a.seq < b.seq;
  }
  friend bool operator==(const EventKey& a, const EventKey& b) {
    return a.time == b.time && a.priority == b.priority && a.dst == b.dst && a.src == b.src &&
           a.seq == b.seq;
  }
};
static_assert(sizeof(EventKey) == 24);

/// The sequence number of an LP's next send (and counts it); throws once an LP has sent 2^32
/// events, rather than let two keys collide.
inline std::uint32_t next_sequence(std::uint64_t& counter, LpId lp) {
  if (counter > std::numeric_limits<std::uint32_t>::max())
    throw ContractError(fmt::format("LP {} sent more than 2^32 events", lp));
  return static_cast<std::uint32_t>(counter++);
}

/// Prefetches every cache line of `*p` (a hint: it changes nothing).
template <class T>
void prefetch_lines(const T* p) {
  for (std::size_t line = 0; line < sizeof(T); line += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(p) + line);
}

/// Bytes of model data an event carries: the message and, as in ROSS, the state its receiver
/// needs to undo the forward handler.
inline constexpr std::size_t kPayloadBytes = 40;

struct Event {
  EventKey key;  // the payload follows at offset 24: 64 bytes in all
  alignas(8) std::array<std::byte, kPayloadBytes> payload;

  template <class T>
  T& as() {
    static_assert(sizeof(T) <= kPayloadBytes && std::is_trivially_copyable_v<T>);
    return *std::launder(reinterpret_cast<T*>(payload.data()));
  }
  template <class T>
  const T& as() const {
    static_assert(sizeof(T) <= kPayloadBytes && std::is_trivially_copyable_v<T>);
    return *std::launder(reinterpret_cast<const T*>(payload.data()));
  }
  template <class T>
  T& emplace(const T& value) {
    static_assert(sizeof(T) <= kPayloadBytes && std::is_trivially_copyable_v<T>);
    return *new (payload.data()) T(value);
  }
};
static_assert(sizeof(Event) == 64);

}  // namespace scalescope::pdes
