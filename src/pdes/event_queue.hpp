#pragma once
/// Pending-event queue: a binary min-heap on the event key, keys stored inline next to the
/// pointer so comparisons do not chase pointers.
#include <algorithm>
#include <vector>

#include "pdes/event.hpp"

namespace scalescope::pdes {

class BinaryHeapQueue {
 public:
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  void push(Event* e) {
    heap_.push_back(Entry{e->key, e});
    std::push_heap(heap_.begin(), heap_.end(), Greater{});
  }
  const EventKey& top_key() const { return heap_.front().key; }
  Event* pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Greater{});
    Event* e = heap_.back().event;
    heap_.pop_back();
    return e;
  }

 private:
  struct Entry {
    EventKey key;
    Event* event;
  };
  struct Greater {
    bool operator()(const Entry& a, const Entry& b) const { return b.key < a.key; }
  };
  std::vector<Entry> heap_;
};

}  // namespace scalescope::pdes
