#pragma once
/// Event memory from fixed-size chunks with a free list: no malloc per event.
#include <memory>
#include <vector>

#include "pdes/event.hpp"

namespace scalescope::pdes {

class EventPool {
 public:
  explicit EventPool(std::size_t chunk_events = 4096) : chunk_events_(chunk_events) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  Event* allocate() {
    if (free_.empty()) grow();
    Event* e = free_.back();
    free_.pop_back();
    return e;
  }
  void release(Event* e) { free_.push_back(e); }
  std::size_t capacity() const { return chunks_.size() * chunk_events_; }

 private:
  /// An event on a cache line of its own (an Event is 64 bytes).
  struct alignas(64) Slot {
    Event event;
  };
  static_assert(sizeof(Slot) == sizeof(Event));

  void grow() {
    chunks_.push_back(std::make_unique<Slot[]>(chunk_events_));
    Slot* base = chunks_.back().get();
    free_.reserve(free_.size() + chunk_events_);
    for (std::size_t i = chunk_events_; i-- > 0;) free_.push_back(&base[i].event);
  }

  std::size_t chunk_events_;
  std::vector<std::unique_ptr<Slot[]>> chunks_;
  std::vector<Event*> free_;
};

}  // namespace scalescope::pdes
