#pragma once
/// Pending-event queue: a binary min-heap on the event key, keys stored inline next to the
/// pointer so comparisons do not chase pointers. `T` is what the engine queues (Event, or the
/// optimistic engine's node that wraps one).
#include <algorithm>
#include <memory>
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
