#pragma once
/// MLCommons Chakra execution traces (ET): the binary per-rank files ASTRA-sim and Chakra's tools
/// read, written from and read into the sliced graph. Format facts: ../shared/formats/chakra-et.md;
/// the mapping both ways: docs/formats.md "Chakra ET". Protobuf stays inside chakra_et.cpp (the
/// one thin wrapper); this interface speaks plain C++ types.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/sim_time.hpp"
#include "graph/sliced_graph.hpp"

namespace scalescope::io {

// ---------------------------------------------------------------------------------------------
// Decoded messages (the subset of the schema that readers look at, as plain data)

/// One `AttributeProto`: `member` is the field number of the oneof member that was set
/// (chakra-et.md §3; 0 = none). Integers of every width (and bools) land in `i`, floats in `d`,
/// strings and bytes in `s`; the list members fill `ints`, `reals` or `strs`.
struct EtAttr {
  std::string name;
  int member = 0;
  std::int64_t i = 0;
  bool u64_overflow = false;  ///< a uint64/fixed64 value above INT64_MAX (not representable in i)
  double d = 0;
  std::string s;
  std::vector<std::int64_t> ints;
  std::vector<double> reals;
  std::vector<std::string> strs;

  bool is_integer() const;  ///< int32/int64/uint32/uint64/sint*/fixed*/sfixed*/bool value
  bool is_real() const;     ///< float or double value
  bool is_string() const;   ///< string or bytes value

  static EtAttr int64(std::string name, std::int64_t v);
  static EtAttr uint64(std::string name, std::uint64_t v);
  static EtAttr int32(std::string name, std::int32_t v);
  static EtAttr boolean(std::string name, bool v);
  static EtAttr real(std::string name, double v);
  static EtAttr string(std::string name, std::string v);
  static EtAttr int64_list(std::string name, std::vector<std::int64_t> v);
  static EtAttr double_list(std::string name, std::vector<double> v);
};

/// Chakra `NodeType` values (chakra-et.md §4).
enum class EtNodeType : int {
  Invalid = 0,
  Metadata = 1,
  MemLoad = 2,
  MemStore = 3,
  Comp = 4,
  CommSend = 5,
  CommRecv = 6,
  CommColl = 7
};
/// Chakra `CollectiveCommType` values.
enum class EtCollective : int {
  AllReduce = 0,
  Reduce = 1,
  AllGather = 2,
  Gather = 3,
  Scatter = 4,
  Broadcast = 5,
  AllToAll = 6,
  ReduceScatter = 7,
  ReduceScatterBlock = 8,
  Barrier = 9
};

struct EtNode {
  std::uint64_t id = 0;
  std::string name;
  int type = 0;  ///< EtNodeType; unknown values are kept (and rejected by the importer)
  std::vector<std::uint64_t> ctrl_deps;
  std::vector<std::uint64_t> data_deps;
  std::uint64_t start_time_micros = 0;
  std::uint64_t duration_micros = 0;
  std::string inputs_values;  ///< IOInfo `inputs.values` (METADATA nodes: the groups)
  std::vector<EtAttr> attrs;

  const EtAttr* attr(std::string_view name) const;  ///< first attribute of that name, or null
};

/// One `.et` file: GlobalMetadata, then the nodes in file order.
struct EtFile {
  std::string version;
  std::vector<EtAttr> meta;
  std::vector<EtNode> nodes;

  const EtAttr* meta_attr(std::string_view name) const;
};

/// Encodes a file: varint32 length, GlobalMetadata, then each node the same way (no header).
std::string encode_chakra(const EtFile& f);
/// Decodes the bytes of one file. `label` names the file in errors. Throws InputError, one line
/// naming the file and the byte offset (and the node id where one was decoded), for: a length
/// varint longer than 5 bytes or above 32 bits, a length beyond the end of the file, a message
/// protobuf cannot parse, an empty file (no GlobalMetadata).
EtFile decode_chakra(const std::string& bytes, const std::string& label);
/// The same into `f`, whose nodes, strings and lists are reused: decoding file after file of one
/// program into one EtFile allocates almost nothing after the first (the import at scale).
void decode_chakra(const std::string& bytes, const std::string& label, EtFile& f);
/// decode_chakra of a file on disk (IoError when it cannot be read).
EtFile read_chakra_file(const std::string& path);
/// The same into `f` (reused as above), reading the file through `buffer` (reused too).
void read_chakra_file(const std::string& path, EtFile& f, std::string& buffer);

// ---------------------------------------------------------------------------------------------
// Graph → Chakra

struct ChakraWriteOptions {
  /// One file per rank class (`<prefix>.class<k>.et`) plus `<prefix>.classes.json`, instead of
  /// one file per rank (`<prefix>.<rank>.et`, what ASTRA-sim reads).
  bool classes = false;
  /// When set, compute nodes carry `duration_micros` = this duration (ns) rounded up to µs.
  std::function<SimTime(const graph::Op&)> duration;
  /// Also write the communicator groups as a METADATA node (id 0, what Chakra's PyTorch
  /// converter writes and the roots depend on), for readers that take groups from it. Off by
  /// default: ASTRA-sim's feeder stops on a METADATA node ("Invalid node_type"); the groups are
  /// always in the GlobalMetadata attribute ss_comm_groups and, for per-rank files, in
  /// PREFIX.comm_groups.json (ASTRA-sim's --comm-group-configuration).
  bool metadata_node = false;
  /// Called after each file is encoded with (files done, files in all); empty: none.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
};

/// Writes the graph as Chakra ET files (mapping: docs/formats.md "Chakra ET"). Every file is
/// written through a temporary and renamed; on error the files already written are removed.
/// Returns the number of files written. The graph must be fully loaded.
std::size_t write_chakra(const graph::SlicedGraph& g, const std::string& prefix,
                         const ChakraWriteOptions& options = {});

// ---------------------------------------------------------------------------------------------
// Chakra → graph

struct ChakraReadOptions {
  /// A communicator-group file as ASTRA-sim's `--comm-group-configuration` takes it
  /// (`{"<id>": [ranks...]}`); its groups add to (and override) those of METADATA nodes.
  std::string comm_groups_path;
  /// Receives warnings (inferred send/recv attributes, unsupported node kinds skipped).
  std::function<void(const std::string&)> warn;
  /// `--expand dp=N`: the trace is one data-parallel replica; replay N of them
  /// (graph::expand_replicas: single-member groups become the data-parallel groups).
  std::uint32_t expand_dp = 1;
  /// Called after each file is read with (files done, files in all); empty: none.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
};

struct ChakraImport {
  graph::SlicedGraph graph;  ///< finalized and validated; config_text left empty
  /// Per template, when any of its compute nodes carried `duration_micros` > 0: the duration of
  /// each op in ns, or -1 where the cost model decides (ops without one, communication ops).
  /// The CLI turns it into emu::EmulationOptions::class_durations.
  std::map<std::uint32_t, std::vector<std::int64_t>> durations;
  std::size_t files = 0;
  std::size_t nodes = 0;
  bool scalescope_schema = false;  ///< written by write_chakra: ops restored exactly
  /// write_chakra's files: the resolved configuration of the graph they came from (GlobalMetadata
  /// ss_config), whose cluster and network the replay of the trace keeps; else empty.
  std::string source_config;
};

/// Reads `<prefix>.0.et`, `<prefix>.1.et`, … until the first missing one (or, when
/// `<prefix>.classes.json` exists and `<prefix>.0.et` does not, the class layout write_chakra
/// produces with `classes`). Identical rank programs become one template. Throws InputError
/// (one line naming the file, node id and rank) on any malformed or inconsistent input.
ChakraImport read_chakra(const std::string& prefix, const ChakraReadOptions& options = {});

/// `durations` of a ChakraImport as the emulation takes them (ns per op; -1 entries replaced by
/// `compute(op)` for compute ops and 0 for communication ops).
std::map<std::uint32_t, std::vector<SimTime>> resolve_durations(
    const graph::SlicedGraph& g, const std::map<std::uint32_t, std::vector<std::int64_t>>& d,
    const std::function<SimTime(const graph::Op&)>& compute);

/// graph.h5 of an imported graph (io::write_graph_h5) with its fixed durations beside it
/// (`/chakra_durations/<k>`, i64 per op, -1 = cost model), written through one temporary.
void write_imported_graph_h5(const graph::SlicedGraph& g,
                             const std::map<std::uint32_t, std::vector<std::int64_t>>& durations,
                             const std::string& path);
/// The fixed durations of a graph.h5; empty when it has none.
std::map<std::uint32_t, std::vector<std::int64_t>> read_graph_durations_h5(
    const std::string& graph_h5);

}  // namespace scalescope::io
