#pragma once
/// Events of the engine. Every event carries a total-order key, so that a run gives the same
/// committed history under every engine and process count.
#include <array>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

#include "core/sim_time.hpp"

namespace scalescope::pdes {

using LpId = std::uint32_t;

/// Total order of events: (time, kind priority, destination, source, source sequence number).
/// The sequence number counts the events a source LP has sent, so the key is unique.
struct EventKey {
  SimTime time = 0;
  std::uint32_t priority = 0;
  LpId dst = 0;
  LpId src = 0;
  std::uint32_t pad_ = 0;
  std::uint64_t seq = 0;

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

/// Bytes of model data an event carries: the message and, as in ROSS, the state its receiver
/// needs to undo the forward handler.
inline constexpr std::size_t kPayloadBytes = 64;

struct Event {
  EventKey key;
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

}  // namespace scalescope::pdes
