#pragma once
// torch.distributed.pipelining action tables (parallel.schedule: actions): the CSV that
// PipelineScheduleMulti._dump_csv writes and _load_csv reads, one row per pipeline rank, one
// cell per action ("0F1", "5B0", "3SEND_F0", blank for an idle step).
#include <cstdint>
#include <string>
#include <vector>

#include "workload/parallel_plan.hpp"

namespace scalescope::io {

using PipelineTable = std::vector<std::vector<workload::PipelineAction>>;

/// Reads the table at `path`: compute-only (F, B) or with its transfers (SEND_F, RECV_F,
/// SEND_B, RECV_B: `_PipelineScheduleRuntime.pipeline_order_with_comms`, format
/// "compute_comms"). Blank cells (PyTorch's None), REDUCE_GRAD, UNSHARD and RESHARD (the
/// data-parallel reduction and FSDP's gathers, which the run models from the plan) are skipped.
/// Split backwards (I, W: zero-bubble schedules), overlapped pairs (DualPipeV's OVERLAP_F_B)
/// and anything else that is not an action are input errors naming the file, row and cell.
PipelineTable read_pipeline_actions(const std::string& path);

/// Checks a table against the layout and lowers it to what PyTorch's runtime runs: one row per
/// pipeline rank (pp), stages 0 … pp·vpp − 1 each on rank stage mod pp (PyTorch's loop
/// placement), every stage's forward and backward of each of the `microbatches` once, the
/// forward first, and the table runs to its end (each forward waits for the previous stage's
/// forward of its micro-batch, each backward for the next stage's backward). A compute-only
/// table gets its transfers as PyTorch's `_add_send_recv` places them (schedules.py: a send
/// right after its compute, the peer's receive at the same point of the peer's row); a table
/// with transfers must have each one, receives before their compute. Throws InputError naming
/// `path`, the rank and the action.
PipelineTable lower_pipeline_actions(const PipelineTable& table, std::int64_t pp, std::int64_t vpp,
                                     std::int64_t microbatches, const std::string& path);

/// The action as PyTorch writes it: "3F0", "1B2", "4RECV_F1".
std::string action_name(const workload::PipelineAction& a);

}  // namespace scalescope::io
