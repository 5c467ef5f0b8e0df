#pragma once
/// Pending-event queue: a binary min-heap on the event key, keys stored inline next to the
/// pointer so comparisons do not chase pointers. `T` is what the engine queues (Event, or the
/// optimistic engine's node that wraps one).
#include <algorithm>
#include <vector>

#include "pdes/event.hpp"

namespace scalescope::pdes {

template <class T>
class KeyedMinHeap {
 public:
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  void push(const EventKey& key, T* item) {
    heap_.push_back(Entry{key, item});
    std::push_heap(heap_.begin(), heap_.end(), Greater{});
  }
  const EventKey& top_key() const { return heap_.front().key; }
  T* top() const { return heap_.front().item; }
  T* pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Greater{});
    T* item = heap_.back().item;
    heap_.pop_back();
    return item;
  }
  /// Calls f on every queued item (in no particular order) and empties the queue.
  template <class F>
  void drain(F&& f) {
    for (const Entry& e : heap_) f(e.item);
    heap_.clear();
  }

 private:
  struct Entry {
    EventKey key;
    T* item;
  };
  struct Greater {
    bool operator()(const Entry& a, const Entry& b) const { return b.key < a.key; }
  };
  std::vector<Entry> heap_;
};

using BinaryHeapQueue = KeyedMinHeap<Event>;

}  // namespace scalescope::pdes
