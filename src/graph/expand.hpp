#pragma once
/// Data-parallel expansion of a graph of one replica (Chakra `--expand dp=N`, docs/formats.md).
#include <cstdint>
#include <map>
#include <vector>

#include "graph/sliced_graph.hpp"

namespace scalescope::graph {

/// `g` is one data-parallel replica of R ranks; the result is `replicas` of them, N·R ranks,
/// replica d's rank r being rank d·R + r, each running r's program (the templates are shared, so
/// the result has as many templates as `g`). Every communicator of two or more members is
/// copied into each replica (members + d·R). A communicator of one member is a rank's own
/// data-parallel group in a one-replica job: it becomes the group of that rank's N replicas,
/// {r, R + r, …, (N−1)·R + r}, with the same kind, and its collectives keep their size S (the
/// gradient or parameter bucket every replica holds whole). Validates the result.
SlicedGraph expand_replicas(const SlicedGraph& g, std::uint32_t replicas);

}  // namespace scalescope::graph

namespace scalescope::graph {

/// A collective of `kind` (AllReduce, AllGather, ReduceScatter or AllToAll) of nccl-tests size
/// `bytes` over a world-wide group: the data-parallel one, an all-to-all the expert-parallel one.
Op world_collective(OpKind kind, double bytes);
/// `ranks` ranks all running `program` (finalized here), each role its ops talk on (data- or
/// expert-parallel) one communicator of every rank. Validates the result.
SlicedGraph replicated_world(RankProgram program, std::uint32_t ranks);

/// The same with the groups of each role given: `groups[role]`, for every role the program's
/// communication ops use, the disjoint groups covering the `ranks` ranks (each sorted), every
/// rank's communicator of that role the group holding it. Collective roles only (no pipeline
/// pairs). Validates the result.
SlicedGraph replicated_world(
    RankProgram program, std::uint32_t ranks,
    const std::map<CommRole, std::vector<std::vector<std::uint32_t>>>& groups);

/// The communicator kind of a collective role (the inverse of role_of; not the pipeline pairs).
CommKind comm_kind_of(CommRole role);

/// `group` (sorted, global ranks) as one of a DeviceMesh dimension's groups over `ranks` ranks:
/// equally spaced members (stride s, n of them), the mesh's groups the translates
/// {b·n·s + o + k·s : k < n} for every block b and offset o < s. Empty where `group` is not of
/// that form or n·s does not divide `ranks`.
std::vector<std::vector<std::uint32_t>> mesh_groups(const std::vector<std::uint32_t>& group,
                                                    std::uint32_t ranks);

/// ASTRA-sim's collective microbenchmarks as a graph: `ranks` ranks, each running one collective
/// of `kind` (AllReduce, AllGather, ReduceScatter or AllToAll) of nccl-tests size `bytes` over
/// all of them (`scalescope chakra-microbench`, written out with io::write_chakra).
SlicedGraph collective_microbenchmark(OpKind kind, std::uint32_t ranks, double bytes);

}  // namespace scalescope::graph
