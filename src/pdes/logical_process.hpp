#pragma once
/// The model interface of the engine (after ROSS): init, forward, reverse, commit, finalize.
/// The engine never knows what a model is; a model never knows which engine runs it.
#include <cstddef>
#include <vector>

#include "pdes/event.hpp"

namespace scalescope::pdes {

/// What a handler may do: read the clock and its own id, and send events.
class Context {
 public:
  virtual ~Context() = default;
  SimTime now() const { return now_; }
  LpId self() const { return self_; }

  /// Sends a new event to `dst` at time `t` ≥ now(). Returns it so the caller fills the payload
  /// (before the handler returns). The new event's key must be greater than the key of the event
  /// being handled (same time: a larger priority, or a larger destination, …); this is what lets
  /// every engine process each LP's events in key order, so their histories are identical.
  virtual Event& schedule(LpId dst, SimTime t, std::uint32_t priority) = 0;

  template <class T>
  void send(LpId dst, SimTime t, std::uint32_t priority, const T& payload) {
    schedule(dst, t, priority).emplace(payload);
  }

 protected:
  SimTime now_ = 0;
  LpId self_ = 0;
};

class LogicalProcess {
 public:
  virtual ~LogicalProcess() = default;
  /// Called once before the run, at time 0: send the initial events.
  virtual void init(Context& ctx) = 0;
  /// Processes `e`. May store in `e`'s payload what reverse() needs to undo it.
  virtual void forward(Event& e, Context& ctx) = 0;
  /// Undoes forward(e) exactly (the engine cancels the events forward sent).
  virtual void reverse(Event& e, Context& ctx) = 0;
  /// Irreversible effects of a committed event (recording results), called in timestamp order.
  virtual void commit(const Event& e) = 0;
  /// False if commit() does nothing: an engine may then skip the call.
  virtual bool has_commit() const { return true; }
  /// A hint that event `e` for this LP comes soon: prefetch the state its handler will touch.
  /// Must not change anything.
  virtual void prefetch(const Event& e) const { (void)e; }
  /// Called once after the run.
  virtual void finalize() {}
  /// Appends the bytes of the LP's reversible state (everything forward may change and reverse
  /// must restore; not committed results) for the rollback-check mode. Returns false if the LP
  /// does not support the check.
  virtual bool save_state(std::vector<std::byte>& out) const {
    (void)out;
    return false;
  }
};

}  // namespace scalescope::pdes
