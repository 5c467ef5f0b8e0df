#pragma once
/// Pending-event queue: a binary min-heap on the event key, keys stored inline next to the
/// pointer so comparisons do not chase pointers. `T` is what the engine queues (Event, or the
/// optimistic engine's node that wraps one).
#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "pdes/event.hpp"

namespace scalescope::pdes {

/// How a queue finds the key of what it holds: the event itself, or the event a node wraps.
inline const EventKey& key_of(const Event* e) {
  return e->key;
}

/// A 4-ary min-heap whose entries are 16 bytes (timestamp and pointer): four entries per cache
/// line and half the depth of a binary heap; the full key is read through the pointer only to
/// break timestamp ties. `T` needs a `key_of(const T*)` overload. Measured slower than
/// KeyedMinHeap in the emulation (ties are common: a collective completes for all its members
/// at once, and each tie costs a pointer chase), so it is kept only as a benchmarked alternative.
template <class T>
class QuaternaryTimeHeap {
 public:
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  void push(const EventKey& key, T* item) {
    heap_.push_back(Entry{key.time, item});
    sift_up(heap_.size() - 1);
  }
  const EventKey& top_key() const { return key_of(heap_.front().item); }
  T* top() const { return heap_.front().item; }
  T* pop() {
    T* item = heap_.front().item;
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0);
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
    SimTime time;
    T* item;
  };
  static bool less(const Entry& a, const Entry& b) {
    if (a.time != b.time) return a.time < b.time;
    return key_of(a.item) < key_of(b.item);
  }
  void sift_up(std::size_t i) {
    const Entry e = heap_[i];
    while (i > 0) {
      const std::size_t parent = (i - 1) / 4;
      if (!less(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  void sift_down(std::size_t i) {
    const Entry e = heap_[i];
    const std::size_t n = heap_.size();
    for (;;) {
      const std::size_t first = 4 * i + 1;
      if (first >= n) break;
      std::size_t best = first;
      const std::size_t last = std::min(first + 4, n);
      for (std::size_t c = first + 1; c < last; ++c)
        if (less(heap_[c], heap_[best])) best = c;
      if (!less(heap_[best], e)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = e;
  }
  std::vector<Entry> heap_;
};

/// A binary min-heap with the full keys stored inline next to the pointers, so comparisons never
/// chase pointers. Both engines use LadderQueue; this one is kept as the benchmark baseline.
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

}  // namespace scalescope::pdes

namespace scalescope::pdes {

/// Pairing heap (Fredman et al. 1986) with pooled nodes: O(1) push, amortized O(log n) pop.
/// The alternative to KeyedMinHeap; bench/queue_bench.cpp measures both on the hold model.
template <class T>
class PairingHeap {
 public:
  PairingHeap() = default;
  PairingHeap(const PairingHeap&) = delete;
  PairingHeap& operator=(const PairingHeap&) = delete;

  bool empty() const { return root_ == nullptr; }
  std::size_t size() const { return size_; }
  void push(const EventKey& key, T* item) {
    Node* n = allocate();
    n->key = key;
    n->item = item;
    n->child = n->sibling = nullptr;
    root_ = root_ ? meld(root_, n) : n;
    ++size_;
  }
  const EventKey& top_key() const { return root_->key; }
  T* top() const { return root_->item; }
  T* pop() {
    Node* old = root_;
    T* item = old->item;
    root_ = merge_pairs(old->child);
    free_.push_back(old);
    --size_;
    return item;
  }
  template <class F>
  void drain(F&& f) {
    while (!empty()) f(pop());
  }

 private:
  struct Node {
    EventKey key;
    T* item;
    Node* child;
    Node* sibling;
  };
  Node* allocate() {
    if (free_.empty()) {
      chunks_.push_back(std::make_unique<Node[]>(kChunk));
      for (std::size_t i = kChunk; i-- > 0;) free_.push_back(&chunks_.back()[i]);
    }
    Node* n = free_.back();
    free_.pop_back();
    return n;
  }
  static Node* meld(Node* a, Node* b) {
    if (b->key < a->key) std::swap(a, b);
    b->sibling = a->child;
    a->child = b;
    return a;
  }
  /// Two-pass merge: meld siblings pairwise left to right, then fold right to left.
  Node* merge_pairs(Node* first) {
    if (first == nullptr) return nullptr;
    pairs_.clear();
    while (first != nullptr) {
      Node* a = first;
      Node* b = a->sibling;
      first = b ? b->sibling : nullptr;
      a->sibling = nullptr;
      if (b) b->sibling = nullptr;
      pairs_.push_back(b ? meld(a, b) : a);
    }
    Node* r = pairs_.back();
    for (std::size_t i = pairs_.size() - 1; i-- > 0;) r = meld(pairs_[i], r);
    return r;
  }

  static constexpr std::size_t kChunk = 4096;
  Node* root_ = nullptr;
  std::size_t size_ = 0;
  std::vector<std::unique_ptr<Node[]>> chunks_;
  std::vector<Node*> free_;
  std::vector<Node*> pairs_;
};

}  // namespace scalescope::pdes

namespace scalescope::pdes {

/// A ladder queue with one rung (after Tang, Goh and Thng, "Ladder Queue", TOMACS 2005): events
/// later than the rung go to an unsorted top list; the rung's time buckets are filled in O(1);
/// only the bucket being consumed is sorted ("bottom"). Amortized O(1) per event when inserts
/// land at or after the last popped time, which the sequential engine guarantees (it never
/// inserts an event that sorts before the one it handles). Pops return the exact key order.
template <class T>
class LadderQueue {
 public:
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  void push(const EventKey& key, T* item) {
    ++size_;
    const Entry e{key, item};
    if (key.time < bottom_end_) {
      // New events usually sort last: an append. The others go to a heap beside the bottom
      // rather than into its middle (a collective's completions sent at the current instant
      // into a bucket of thousands moved the bucket's tail once per member).
      if (bottom_.size() == head_ || !(key < bottom_.back().key)) {
        bottom_.push_back(e);
      } else {
        early_.push_back(e);
        std::push_heap(early_.begin(), early_.end(), Greater{});
      }
    } else if (key.time < rung_end_) {
      buckets_[static_cast<std::size_t>((key.time - rung_start_) / width_)].push_back(e);
    } else {
      top_min_ = top_.empty() ? key.time : std::min(top_min_, key.time);
      top_max_ = top_.empty() ? key.time : std::max(top_max_, key.time);
      top_.push_back(e);
    }
  }
  const EventKey& top_key() {
    fill_bottom();
    return from_early() ? early_.front().key : bottom_[head_].key;
  }
  T* top() {
    fill_bottom();
    return from_early() ? early_.front().item : bottom_[head_].item;
  }
  T* pop() {
    fill_bottom();
    --size_;
    if (from_early()) {
      std::pop_heap(early_.begin(), early_.end(), Greater{});
      T* item = early_.back().item;
      early_.pop_back();
      return item;
    }
    T* item = bottom_[head_++].item;
    if (head_ == bottom_.size()) {
      bottom_.clear();
      head_ = 0;
    }
    return item;
  }
  template <class F>
  void drain(F&& f) {
    while (!empty()) f(pop());
  }

  struct Entry {
    EventKey key;
    T* item;
  };
  /// The entry `k` places after the top if it is already in the sorted bottom and nothing waits
  /// beside it, else null (for prefetching: call after top_key() or pop(), which fill the
  /// bottom).
  const Entry* peek(std::size_t k) const {
    return early_.empty() && head_ + k < bottom_.size() ? &bottom_[head_ + k] : nullptr;
  }

 private:
  struct Less {
    bool operator()(const Entry& a, const Entry& b) const { return a.key < b.key; }
  };
  struct Greater {
    bool operator()(const Entry& a, const Entry& b) const { return b.key < a.key; }
  };
  /// Whether the next event is the early heap's (keys are distinct: no ties).
  bool from_early() const {
    return !early_.empty() && (head_ == bottom_.size() || early_.front().key < bottom_[head_].key);
  }

  /// Makes the bottom hold the earliest events: the next non-empty bucket, or a new rung.
  void fill_bottom() {
    // The early heap holds only events before bottom_end_, so before every bucket's.
    while (head_ == bottom_.size() && early_.empty()) {
      while (cur_ < buckets_.size() && buckets_[cur_].empty()) ++cur_;
      if (cur_ < buckets_.size()) {
        // Copied, not swapped: each bucket keeps only the capacity its own events needed, and
        // the bottom's buffer is reused (swapping would park large buffers in spent buckets).
        bottom_.assign(buckets_[cur_].begin(), buckets_[cur_].end());
        buckets_[cur_].clear();
        head_ = 0;
        ++cur_;
        bottom_end_ = rung_start_ + static_cast<SimTime>(cur_) * width_;
        // Buckets are filled by appends, and events sent at one instant mostly go out in key
        // order (a collective's completions, in member order): measured at 16,384 ranks, 97 %
        // of buckets (mean 1,076 events) arrive sorted, so checking first is cheaper.
        if (!std::is_sorted(bottom_.begin(), bottom_.end(), Less{}))
          std::sort(bottom_.begin(), bottom_.end(), Less{});
        return;
      }
      SCALESCOPE_EXPECTS(!top_.empty());
      // A new rung over the top list's time span, about two events per bucket.
      const std::size_t n = std::max<std::size_t>(8, top_.size() / 2);
      rung_start_ = top_min_;
      width_ = std::max<SimTime>(1, (top_max_ - top_min_) / static_cast<SimTime>(n) + 1);
      buckets_.resize(n);
      // A bucket that once took a burst keeps its capacity; release big ones at each new rung so
      // capacities cannot ratchet up across rungs (that cost 240 MB on 16,384 ranks).
      for (auto& b : buckets_) {
        if (b.capacity() > kKeepCapacity)
          std::vector<Entry>().swap(b);
        else
          b.clear();
      }
      rung_end_ = rung_start_ + width_ * static_cast<SimTime>(n);
      for (const Entry& e : top_)
        buckets_[static_cast<std::size_t>((e.key.time - rung_start_) / width_)].push_back(e);
      top_.clear();
      cur_ = 0;
      bottom_end_ = rung_start_;
    }
  }

  static constexpr std::size_t kKeepCapacity = 64;
  std::vector<Entry> bottom_;  ///< sorted ascending; [head_, end) are pending
  std::size_t head_ = 0;
  std::vector<Entry> early_;  ///< a min-heap of events before bottom_end_ that sort before its last
  /// Every pending event earlier than this is in bottom_ or early_.
  SimTime bottom_end_ = kTimeUnknown;
  std::vector<std::vector<Entry>> buckets_;
  std::size_t cur_ = 0;  ///< next bucket to consume
  SimTime rung_start_ = 0, rung_end_ = kTimeUnknown, width_ = 1;
  std::vector<Entry> top_;  ///< events at or after rung_end_, unsorted
  SimTime top_min_ = 0, top_max_ = 0;
  std::size_t size_ = 0;
};

}  // namespace scalescope::pdes
