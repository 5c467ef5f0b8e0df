#pragma once
/// A lower bound on a replay's iteration time without replaying it (docs/engine.md "Bounds"):
/// each rank class's first rank replayed alone.
#include <cstdint>
#include <vector>

#include "core/sim_time.hpp"
#include "emu/model_data.hpp"

namespace scalescope::emu {

/// What the replay of one rank alone gives: its finish, and the least time one micro-batch's
/// compute holds the compute stream (its ops' durations and the idle time before each).
struct AloneBound {
  SimTime finish = 0;
  /// Over the micro-batches of the program: the smallest sum, over the compute-stream ops tagged
  /// with it, of the op's duration and the compute stream's idle time just before it; 0 when
  /// no op carries a micro-batch.
  SimTime min_microbatch_span = 0;
  std::uint32_t microbatches = 0;  ///< distinct micro-batch tags on the compute stream
};

/// Per template (class) of `data`'s graph, its first rank replayed alone: each stream in program
/// order, an op starting once its stream is free, its dependencies have finished and the host has
/// issued it (the replay's own host model); compute ops take the replay's durations; a collective
/// starts when this rank issues it, without waiting for the other members, and takes its wire
/// time on this rank's communicator (0 where the flow model runs it: its time there depends on
/// what shares the links; 0 for point-to-point transfers, whose receive can find its data
/// there). Every relaxation only moves an op earlier, and the replay's schedule is monotone in
/// its start times, so no rank of the replay finishes before `finish` of its class's first
/// rank: the iteration time is at least the largest. A template not loaded, or of no rank,
/// gets zeros.
std::vector<AloneBound> alone_bounds(const ModelData& data);

}  // namespace scalescope::emu
