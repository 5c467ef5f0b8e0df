#pragma once
/// The sliced execution graph: one template per class of ranks, the rank → class map, and the
/// communicator table. Nothing here grows with the world size except the map and the table.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "graph/rank_program.hpp"

namespace scalescope::graph {

enum class CommKind : std::uint8_t {
  TpGroup,
  DpGroup,
  PpPair,
  EmbeddingGroup,
  CpGroup,
  DpReplicateGroup,
  EpGroup,
  EtpGroup,
  EdpGroup,
  TpEpGroup
};
std::string_view comm_kind_name(CommKind k);
/// The role under which a communicator of this kind is reached (PpNext for a pipeline pair:
/// its upstream member holds it as PpNext, its downstream member as PpPrev).
CommRole role_of(CommKind k);

/// Every communicator of the job; members as CSR, ordered by rank.
struct CommTable {
  std::vector<CommKind> kind;
  std::vector<std::uint32_t> offsets{0};
  std::vector<std::uint32_t> members;

  std::uint32_t size() const { return static_cast<std::uint32_t>(kind.size()); }
  std::uint32_t num_members(std::uint32_t c) const { return offsets[c + 1] - offsets[c]; }
  const std::uint32_t* members_begin(std::uint32_t c) const { return members.data() + offsets[c]; }
  const std::uint32_t* members_end(std::uint32_t c) const {
    return members.data() + offsets[c + 1];
  }
  std::uint32_t add(CommKind k, const std::vector<std::uint32_t>& ranks);
};

inline constexpr std::int32_t kNoComm = -1;

struct SlicedGraph {
  std::uint32_t world_size = 0;
  std::string config_text;  ///< the resolved configuration, for provenance
  std::vector<RankProgram> templates;
  std::vector<std::uint32_t> rank_class;  ///< world_size entries: template of each rank
  CommTable comms;
  /// world_size × kNumRoles, row-major: communicator of each role of each rank, or kNoComm.
  std::vector<std::int32_t> rank_roles;
  /// Per template: whether its ops were loaded. A partial read (io::read_graph_h5 with an MPI
  /// communicator) loads only the templates one process needs; the others keep their name and
  /// static_memory but no ops, dependencies or stream lists, and nothing may touch them.
  /// Empty (the default, and what every builder produces): all templates are loaded.
  std::vector<bool> loaded;

  bool is_loaded(std::size_t k) const { return loaded.empty() || loaded[k]; }
  bool fully_loaded() const;
  /// The template of `rank`; a contract violation if it was not loaded.
  const RankProgram& program_of(std::uint32_t rank) const {
    SCALESCOPE_EXPECTS(is_loaded(rank_class[rank]));
    return templates[rank_class[rank]];
  }
  std::int32_t comm_of(std::uint32_t rank, CommRole role) const {
    return rank_roles[static_cast<std::size_t>(rank) * kNumRoles + static_cast<std::size_t>(role)];
  }
  /// Index of `rank` among the members of communicator `c`.
  std::uint32_t member_index(std::uint32_t c, std::uint32_t rank) const;
};

/// Checks the graph for structural errors: dependency order (no cycles), role/stream
/// consistency, communicator membership, collectives whose members disagree on the sequence of
/// (kind, bytes), and point-to-point sends without a matching receive. Throws InputError naming
/// the template, op or communicator. Templates that are not loaded are skipped: the checks that
/// need their ops (role use, collective and point-to-point signatures involving them) are left to
/// a process that loaded them; the rank map and communicator table are always checked in full.
void validate(const SlicedGraph& g);

}  // namespace scalescope::graph
