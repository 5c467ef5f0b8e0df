#pragma once
/// The SMs communication kernels take from the compute kernels that run beside them
/// (docs/cost-model.md §1.7; the decision record in docs/architecture.md).
#include <cstdint>
#include <functional>
#include <vector>

#include "core/sim_time.hpp"
#include "graph/rank_program.hpp"

namespace scalescope::emu {

/// How much longer compute op `op` takes while communication kernels hold `taken` SMs (≥ 1).
using SmContentionFactor = std::function<double(const graph::Op& op, std::uint32_t taken)>;

/// The durations of program `p`'s compute ops once the communication kernels beside them hold
/// their SMs. `dur`: each compute op's duration alone (communication: ignored); `wire`: each
/// communication op's time; `sms`: the SMs each communication op's kernel holds while it runs.
///
/// The program is list-scheduled alone, as the replay runs it (each stream in order, an op starts
/// once its stream is free and its dependencies are done) except that a communication op takes
/// its wire time from its start, without waiting for the other members, and the host runs ahead.
/// While communication kernels holding `taken` SMs in all run, a compute op advances at
/// 1 / factor(op, taken) of its rate alone; its duration is what that schedule gives it. One pass:
/// the communication's times are not moved by the slower compute. Returns `dur` unchanged where
/// no communication overlaps a compute op.
std::vector<SimTime> with_comm_kernel_sms(const graph::RankProgram& p,
                                          const std::vector<SimTime>& dur,
                                          const std::vector<SimTime>& wire,
                                          const std::vector<std::uint32_t>& sms,
                                          const SmContentionFactor& factor);

}  // namespace scalescope::emu
