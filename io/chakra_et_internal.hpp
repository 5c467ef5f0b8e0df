#pragma once
/// Internal pieces of the Chakra ET reader and writer shared by their source files
/// (io/chakra_et*.cpp): the file names of a trace, the ss_op attribute list, and the reader's
/// per-rank ops and communicator groups. Not part of the public interface (io/chakra_et.hpp).
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/sliced_graph.hpp"
#include "io/chakra_et.hpp"

namespace scalescope::io::detail {

using graph::Op;

inline constexpr const char* kSchema = "scalescope-chakra-1";

// chakra_et_writer.cpp
std::string rank_file(const std::string& prefix, std::uint32_t r);
std::string class_file(const std::string& prefix, std::uint32_t k);
std::string classes_json(const std::string& prefix);

/// Attributes in ss_op: 21 since kernels and cuda_graph were added (files of 19 launch one kernel
/// per op, eagerly; files of 18 also have no host synchronization).
inline constexpr std::size_t kOpInts = 21;
/// An op's ss_op attribute, as an array (no allocation) and as the list the writer stores.
std::array<std::int64_t, kOpInts> op_int_array(const Op& op);
std::vector<std::int64_t> op_ints(const Op& op);

// chakra_et_convert.cpp
/// One op of a rank as read, before communicators are assigned.
struct RawOp {
  Op op;
  std::int64_t duration_ns = -1;
  std::uint64_t node = 0;              ///< node id (for errors)
  std::string group;                   ///< collectives (foreign traces): pg_name
  std::int64_t peer = -1;              ///< send/recv: the other rank
  std::int64_t tag = -1;               ///< send/recv
  std::int64_t peer2 = -1, tag2 = -1;  ///< the receive half of a batched send/recv (schema)
};

struct RawRank {
  std::string file;
  std::vector<RawOp> ops;
  /// Each op's dependencies (op indices) as CSR: op k's are deps[dep_offsets[k] ..
  /// dep_offsets[k + 1]) (one buffer per file, not one per op).
  std::vector<std::uint32_t> dep_offsets{0};
  std::vector<std::uint32_t> deps;
  std::span<const std::uint32_t> deps_of(std::size_t k) const {
    return {deps.data() + dep_offsets[k], deps.data() + dep_offsets[k + 1]};
  }
  std::array<std::int64_t, graph::kNumRoles> roles{};  ///< schema: pg id per role, -1 none
  std::string template_name;
  std::int64_t static_memory = 0;
  /// scalescope's files: the earlier rank whose program this one's equals (its compute ops are
  /// then dropped as soon as it is read, so that an import holds each distinct program once),
  /// or -1.
  std::int64_t same_as = -1;
};

/// Groups by pg_name; an empty list means all ranks.
using Groups = std::map<std::string, std::vector<std::uint32_t>>;

struct Context {
  const ChakraReadOptions* opt = nullptr;
  Groups groups;
  std::map<std::string, std::string> group_origin;  ///< pg_name → file that defined it
  /// METADATA texts already read: every file of a trace repeats the groups its rank is in, so a
  /// world-sized group would otherwise be parsed once per rank (quadratic in the world size).
  std::unordered_set<std::string> metadata_seen;
  bool schema = false;
};

[[noreturn]] void node_error(const std::string& file, std::uint64_t id, std::int64_t rank,
                             const std::string& what);
void add_group(Context& ctx, const std::string& pg, std::vector<std::uint32_t> ranks,
               const std::string& origin);
/// A JSON list of {"pg_name": "<id>", "ranks": [...]} (a METADATA node's, or the GlobalMetadata
/// attribute ss_comm_groups scalescope writes); errors name `node_id`.
void read_group_list(Context& ctx, const std::string& text, const std::string& file,
                     std::int64_t rank, std::uint64_t node_id);
/// One file → the rank's ops in a topological order (ties: ascending node id, as ASTRA-sim
/// issues ready nodes), with dependencies as op indices.
RawRank convert_file(Context& ctx, const EtFile& f, const std::string& file, std::int64_t rank);
/// A hash of what identifies a program (ops, dependencies, fixed durations, static memory,
/// template name) for template sharing; programs with equal hashes are compared with
/// same_program.
std::uint64_t program_hash(const RawRank& r);
/// Whether two programs are the same in everything program_hash reads.
bool same_program(const RawRank& a, const RawRank& b);
/// Template sharing: per hash, the ranks holding the distinct programs with that hash.
struct ProgramIndex {
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> by_hash;
  /// The rank (an index into `ranks`) whose program equals r's, or -1 after recording r as
  /// `self` (a new program).
  std::int64_t find_or_add(const std::vector<RawRank>& ranks, const RawRank& r, std::size_t self);
};

}  // namespace scalescope::io::detail
