// Chakra ET: byte-level fixtures from the format facts (../shared/formats/chakra-et.md), the real
// ASTRA-sim fixtures, exact round trips of a workload graph (per rank and per class) and the
// one-line errors of the reader.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "emu/emulation.hpp"
#include "graph/sliced_graph.hpp"
#include "io/chakra_et.hpp"
#include "io/config.hpp"
#include "temp_dir_test.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::io {
namespace {

namespace fs = std::filesystem;
using graph::CommRole;
using graph::OpKind;

class ChakraEt : public TempDirTest {
 protected:
  void put(const std::string& name, const std::string& bytes) const {
    std::ofstream(file(name), std::ios::binary) << bytes;
  }
  /// Writes `files` as prefix.<r>.et and returns the prefix.
  std::string put_ranks(const std::vector<EtFile>& files) const {
    for (std::size_t r = 0; r < files.size(); ++r)
      put("t." + std::to_string(r) + ".et", encode_chakra(files[r]));
    return file("t");
  }
};

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}
std::string lp(const std::string& body) {  // length-prefixed (one-byte varint)
  return std::string(1, static_cast<char>(body.size())) + body;
}
std::string lp_tag(int tag, const std::string& v) {
  return std::string(1, static_cast<char>(tag)) + lp(v);
}

/// The 81-byte all_reduce.0.et of ASTRA-sim's 8-NPU 1 MB microbenchmark, from chakra-et.md §2.
std::string all_reduce_81(int id) {
  const std::string meta = lp_tag(0x0a, "0.0.4");
  std::string node;
  if (id != 0) node += bytes({0x08, id});
  node += lp_tag(0x12, "all_reduce_8npus_1MB");
  node += bytes({0x18, 0x07});
  node += lp_tag(0x52, lp_tag(0x0a, "is_cpu_op") + bytes({0xd8, 0x01, 0x00}));
  node += lp_tag(0x52, lp_tag(0x0a, "comm_type") + bytes({0x48, 0x00}));
  node += lp_tag(0x52, lp_tag(0x0a, "comm_size") + bytes({0x48, 0x80, 0x80, 0x40}));
  return lp(meta) + lp(node);
}

std::string one_line(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
  ADD_FAILURE() << "no InputError";
  return {};
}

TEST_F(ChakraEt, Decodes81ByteAllReduceExample) {
  const std::string b = all_reduce_81(0);
  ASSERT_EQ(b.size(), 81u);
  EXPECT_EQ(static_cast<unsigned char>(b[0]), 0x07);
  EXPECT_EQ(static_cast<unsigned char>(b[8]), 0x48);  // 72-byte node
  const EtFile f = decode_chakra(b, "all_reduce.0.et");
  EXPECT_EQ(f.version, "0.0.4");
  ASSERT_EQ(f.nodes.size(), 1u);
  const EtNode& n = f.nodes[0];
  EXPECT_EQ(n.id, 0u);
  EXPECT_EQ(n.name, "all_reduce_8npus_1MB");
  EXPECT_EQ(n.type, static_cast<int>(EtNodeType::CommColl));
  ASSERT_NE(n.attr("is_cpu_op"), nullptr);
  EXPECT_EQ(n.attr("is_cpu_op")->member, 27);  // bool_val, false but present
  EXPECT_EQ(n.attr("is_cpu_op")->i, 0);
  EXPECT_EQ(n.attr("comm_type")->member, 9);  // int64_val 0 = ALL_REDUCE
  EXPECT_EQ(n.attr("comm_type")->i, 0);
  EXPECT_EQ(n.attr("comm_size")->i, 1048576);
  // The writer emits oneof members at their default value: re-encoding gives the same bytes.
  EXPECT_EQ(encode_chakra(f), b);
  // Rank 1's node starts 4a 08 01: 74 bytes, id 1.
  const std::string b1 = all_reduce_81(1);
  EXPECT_EQ(b1.substr(8, 3), bytes({0x4a, 0x08, 0x01}));
  EXPECT_EQ(decode_chakra(b1, "all_reduce.1.et").nodes[0].id, 1u);
}

TEST_F(ChakraEt, MatchesShippedFixtureBytes) {
  const fs::path dir = fs::path(SCALESCOPE_SOURCE_DIR) / "../shared/formats/chakra-fixtures";
  if (!fs::exists(dir))
    GTEST_SKIP() << "!!! " << dir << " is absent: the Chakra fixture tests did NOT run !!!";
  std::ifstream in(dir / "all_reduce-8npus-1MB/all_reduce.0.et", std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(b, all_reduce_81(0));
}

TEST_F(ChakraEt, EveryFixtureImports) {
  const fs::path dir = fs::path(SCALESCOPE_SOURCE_DIR) / "../shared/formats/chakra-fixtures";
  if (!fs::exists(dir))
    GTEST_SKIP() << "!!! " << dir << " is absent: the Chakra fixture tests did NOT run !!!";
  struct Case {
    const char* prefix;
    OpKind kind;
    double bytes;  // our nccl-tests size S
  };
  // comm_size is 1 MiB in every file; ASTRA-sim's all-gather size is the per-rank input, so
  // S = 8 × 1 MiB there (chakra-et.md §7).
  for (const Case& c :
       {Case{"all_reduce-8npus-1MB/all_reduce", OpKind::AllReduce, 1048576.0},
        Case{"all_gather-8npus-1MB/all_gather", OpKind::AllGather, 8388608.0},
        Case{"all_to_all-8npus-1MB/all_to_all", OpKind::AllToAll, 1048576.0},
        Case{"reduce_scatter-8npus-1MB/reduce_scatter", OpKind::ReduceScatter, 1048576.0}}) {
    SCOPED_TRACE(c.prefix);
    const ChakraImport imp = read_chakra((dir / c.prefix).string());
    EXPECT_EQ(imp.files, 8u);
    EXPECT_FALSE(imp.scalescope_schema);
    ASSERT_EQ(imp.graph.world_size, 8u);
    ASSERT_EQ(imp.graph.templates.size(), 1u);  // ids differ per rank; the programs do not
    ASSERT_EQ(imp.graph.templates[0].size(), 1u);
    const graph::Op& op = imp.graph.templates[0].ops[0];
    EXPECT_EQ(op.kind, c.kind);
    EXPECT_EQ(op.comm_bytes, c.bytes);
    ASSERT_EQ(imp.graph.comms.size(), 1u);  // pg_name absent: all ranks
    EXPECT_EQ(imp.graph.comms.num_members(0), 8u);
  }
  // The MSCCL ring: SENDs with comm_dst only, RECVs with comm_src only, COMP nodes with
  // duration_micros: one template (the peers become pipeline roles), a ring of 8 pairs.
  const ChakraImport ring =
      read_chakra((dir / "custom-ring-allreduce-8npus-1MB/custom_allreduce").string());
  EXPECT_EQ(ring.graph.world_size, 8u);
  EXPECT_EQ(ring.graph.templates.size(), 1u);
  EXPECT_EQ(ring.graph.comms.size(), 8u);
  ASSERT_EQ(ring.durations.count(0), 1u);
  std::size_t sends = 0, recvs = 0, fixed = 0;
  for (std::size_t i = 0; i < ring.graph.templates[0].size(); ++i) {
    const graph::Op& op = ring.graph.templates[0].ops[i];
    sends += op.kind == OpKind::SendRecv && op.role == CommRole::PpNext;
    recvs += op.kind == OpKind::SendRecv && op.role2 == CommRole::PpPrev;
    fixed += ring.durations.at(0)[i] == 7000;  // duration_micros 7
  }
  EXPECT_EQ(sends, 14u);
  EXPECT_EQ(recvs, 14u);
  EXPECT_GT(fixed, 0u);
}

TEST_F(ChakraEt, AcceptsAnyIntegerAttributeType) {
  // comm_type as uint32_val, comm_size as sint64_val (zigzag) on rank 0, as fixed64 on rank 1.
  auto file_with = [&](const std::string& size_attr) {
    std::string node = lp_tag(0x12, "ar") + bytes({0x18, 0x07});
    node += lp_tag(0x52, lp_tag(0x0a, "comm_type") + bytes({0x58, 0x00}));
    node += lp_tag(0x52, lp_tag(0x0a, "comm_size") + size_attr);
    return lp(lp_tag(0x0a, "0.0.4")) + lp(node);
  };
  put("t.0.et", file_with(bytes({0x88, 0x01, 0x80, 0x80, 0x80, 0x01})));  // zigzag(2^20)
  put("t.1.et", file_with(bytes({0xa9, 0x01, 0, 0, 0x10, 0, 0, 0, 0, 0})));
  const ChakraImport imp = read_chakra(file("t"));
  ASSERT_EQ(imp.graph.templates.size(), 1u);
  EXPECT_EQ(imp.graph.templates[0].ops[0].kind, OpKind::AllReduce);
  EXPECT_EQ(imp.graph.templates[0].ops[0].comm_bytes, 1048576.0);
}

TEST_F(ChakraEt, FramingErrorsAreOneLine) {
  const std::string ok = all_reduce_81(0);
  EXPECT_NE(one_line([&] {
              decode_chakra(bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), "a.et");
            }).find("longer than 5 bytes"),
            std::string::npos);
  EXPECT_NE(one_line([&] { decode_chakra(ok.substr(0, 60), "b.et"); }).find("truncated"),
            std::string::npos);
  EXPECT_NE(one_line([&] { decode_chakra(ok + bytes({0x80}), "c.et"); }).find("truncated"),
            std::string::npos);
  EXPECT_NE(one_line([&] { decode_chakra(ok + bytes({0x7f}), "d.et"); }).find("d.et"),
            std::string::npos);
  EXPECT_NE(one_line([&] { decode_chakra("", "e.et"); }).find("empty"), std::string::npos);
  put("t.0.et", ok.substr(0, 70));
  const std::string m = one_line([&] { read_chakra(file("t")); });
  EXPECT_NE(m.find("t.0.et"), std::string::npos) << m;
}

EtNode coll(std::uint64_t id, EtCollective t, std::int64_t size, std::string pg = "0",
            std::vector<std::uint64_t> deps = {}) {
  EtNode n;
  n.id = id;
  n.name = "c" + std::to_string(id);
  n.type = static_cast<int>(EtNodeType::CommColl);
  n.data_deps = std::move(deps);
  n.attrs = {EtAttr::boolean("is_cpu_op", false), EtAttr::int64("comm_type", static_cast<int>(t)),
             EtAttr::int64("comm_size", size), EtAttr::string("pg_name", std::move(pg))};
  return n;
}
EtNode comp(std::uint64_t id, std::uint64_t micros, std::vector<std::uint64_t> deps = {}) {
  EtNode n;
  n.id = id;
  n.name = "k" + std::to_string(id);
  n.type = static_cast<int>(EtNodeType::Comp);
  n.duration_micros = micros;
  n.data_deps = std::move(deps);
  return n;
}
EtFile et(std::vector<EtNode> nodes) {
  EtFile f;
  f.version = "0.0.4";
  f.nodes = std::move(nodes);
  return f;
}

TEST_F(ChakraEt, GraphErrorsNameFileNodeAndRank) {
  const auto ar = EtCollective::AllReduce;
  auto expect = [&](const std::vector<EtFile>& files, const std::string& what,
                    const std::string& where) {
    const std::string m = one_line([&] { read_chakra(put_ranks(files)); });
    EXPECT_NE(m.find(what), std::string::npos) << m;
    EXPECT_NE(m.find(where), std::string::npos) << m;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  };
  const EtFile good = et({comp(1, 5), coll(2, ar, 1024, "0", {1})});
  expect({good, et({comp(1, 5), coll(2, ar, 1024, "0", {9})})}, "node 9, which is not in the file",
         "t.1.et: node 2 (rank 1)");
  expect({et({comp(1, 5), comp(1, 6)}), good}, "duplicate node id", "t.0.et: node 1 (rank 0)");
  expect({et({comp(1, 5, {2}), comp(2, 6, {1})})}, "dependency cycle", "t.0.et: node 1 (rank 0)");
  expect({et({comp(1, 5, {1})})}, "cycle", "node 1 (rank 0)");
  expect({et({coll(1, ar, 1024), coll(2, EtCollective::AllGather, 64, "0", {1})}),
          et({coll(1, EtCollective::AllGather, 64), coll(2, ar, 1024, "0", {1})})},
         "collective order disagrees with rank 0", "t.1.et: node 1 (rank 1)");
  expect({et({coll(1, ar, 1024, "5")})}, "communicator group '5' not found", "node 1 (rank 0)");
  expect({et({coll(1, EtCollective::Barrier, 0)})}, "unsupported collective", "node 1 (rank 0)");
}

TEST_F(ChakraEt, GroupsFromMetadataAndCommGroupsFile) {
  // Two all-reduce groups {0,1} and {2,3} from a METADATA node (as ASTRA-sim parses it), then
  // the same from a --comm-groups file.
  EtNode meta;
  meta.id = 100;
  meta.type = static_cast<int>(EtNodeType::Metadata);
  meta.inputs_values =
      R"(['[{"pg_name": "1", "ranks": [0, 1]}, {"pg_name": "2", "ranks": [2, 3]}]'])";
  std::vector<EtFile> files;
  for (int r = 0; r < 4; ++r)
    files.push_back(et(
        {meta, comp(1, 3), coll(2, EtCollective::AllReduce, 4096, r < 2 ? "1" : "2", {1, 100})}));
  const ChakraImport a = read_chakra(put_ranks(files));
  ASSERT_EQ(a.graph.comms.size(), 2u);
  EXPECT_EQ(a.graph.templates.size(), 1u);
  EXPECT_EQ(a.graph.comm_of(0, CommRole::Dp), a.graph.comm_of(1, CommRole::Dp));
  EXPECT_NE(a.graph.comm_of(0, CommRole::Dp), a.graph.comm_of(2, CommRole::Dp));
  EXPECT_EQ(a.durations.at(0), (std::vector<std::int64_t>{3000, -1}));

  for (auto& f : files) f.nodes.erase(f.nodes.begin());
  for (auto& f : files) f.nodes[1].data_deps = {1};
  const std::string prefix = put_ranks(files);
  std::ofstream(file("groups.json")) << R"({"1": [0, 1], "2": [2, 3]})";
  ChakraReadOptions o;
  o.comm_groups_path = file("groups.json");
  EXPECT_EQ(read_chakra(prefix, o).graph.comms.size(), 2u);
  EXPECT_NE(one_line([&] { read_chakra(prefix); }).find("group '1' not found"), std::string::npos);
}

TEST_F(ChakraEt, InfersMissingSendRecvAttributesWithAWarning) {
  // PyTorch's converter writes neither peers nor tags: a two-rank pg_name group names the peer,
  // the order of the transfers gives the tag.
  EtNode meta;
  meta.id = 0;
  meta.type = static_cast<int>(EtNodeType::Metadata);
  meta.inputs_values = R"(['[{"pg_name": "7", "ranks": [0, 1]}]'])";
  auto p2p = [](std::uint64_t id, EtNodeType t, std::vector<std::uint64_t> deps) {
    EtNode n;
    n.id = id;
    n.type = static_cast<int>(t);
    n.data_deps = std::move(deps);
    n.attrs = {EtAttr::int64("comm_size", 512), EtAttr::string("pg_name", "7")};
    return n;
  };
  const std::vector<EtFile> files{et({meta, comp(1, 2, {0}), p2p(2, EtNodeType::CommSend, {1}),
                                      p2p(3, EtNodeType::CommRecv, {2})}),
                                  et({meta, p2p(2, EtNodeType::CommRecv, {0}), comp(3, 2, {2}),
                                      p2p(4, EtNodeType::CommSend, {3})})};
  std::vector<std::string> warnings;
  ChakraReadOptions o;
  o.warn = [&](const std::string& w) { warnings.push_back(w); };
  const ChakraImport imp = read_chakra(put_ranks(files), o);
  EXPECT_EQ(imp.graph.templates.size(), 2u);
  EXPECT_FALSE(warnings.empty());
  ASSERT_EQ(imp.graph.comms.size(), 1u);
  EXPECT_EQ(imp.graph.comms.kind[0], graph::CommKind::PpPair);
}

TEST_F(ChakraEt, EagerSendsReplayARingThatDeadlocksUnderRendezvous) {
  // A ring of 3 ranks, as MSCCL / ASTRA-sim write one: each rank computes (rank 0 for 10 µs,
  // the others for 1 µs), sends to the next rank, then receives from the previous one (the
  // receive depends on the send), then computes 1 µs. Every transfer takes P = 500 ns.
  auto p2p = [](std::uint64_t id, EtNodeType t, int peer, std::vector<std::uint64_t> deps) {
    EtNode n;
    n.id = id;
    n.type = static_cast<int>(t);
    n.data_deps = std::move(deps);
    n.attrs = {EtAttr::int64("comm_size", 4096), EtAttr::int32("comm_tag", 0),
               EtAttr::int32(t == EtNodeType::CommSend ? "comm_dst" : "comm_src", peer)};
    return n;
  };
  std::vector<EtFile> files;
  for (int r = 0; r < 3; ++r)
    files.push_back(et({comp(1, r == 0 ? 10 : 1), p2p(2, EtNodeType::CommSend, (r + 1) % 3, {1}),
                        p2p(3, EtNodeType::CommRecv, (r + 2) % 3, {2}), comp(4, 1, {3})}));
  const ChakraImport imp = read_chakra(put_ranks(files));
  EXPECT_FALSE(imp.scalescope_schema);
  emu::Costs c;
  c.compute = [](const graph::Op&) -> SimTime { return 0; };  // every COMP has its duration
  c.collective = [](graph::OpKind, double, const cost::CommShape&) -> SimTime { return 1; };
  c.p2p = [](double, bool) -> SimTime { return 500; };
  c.shape = [](const std::uint32_t*, const std::uint32_t*) { return cost::CommShape{1, 1, 1}; };
  emu::EmulationOptions o;
  o.class_durations = resolve_durations(imp.graph, imp.durations, c.compute);
  o.trace_ranks = {};
  // Rendezvous: rank 0's send waits for rank 1's receive, which waits for rank 1's send, …,
  // which waits for rank 0's receive, which comes after rank 0's send.
  EXPECT_THROW(emu::emulate(imp.graph, c, o), ContractError);
  o.eager_p2p = true;
  const emu::RunResults r = emu::emulate(imp.graph, c, o);
  // By hand (P = 500): rank 1 and 2 send at 1000, done at 1500; rank 0 sends at 10000, done at
  // 10500. Rank 2's receive (from 1) is posted at 1500 when the data is there: done 1 ns later
  // (a completion follows the arrival that causes it); + 1 µs → 2501. Rank 1's receive (from 0)
  // waits until rank 0's data is there at 10500; + 1 µs → 11500. Rank 0's receive (from 2,
  // there since 1500) is posted at 10500: done at 10501; + 1 µs → 11501.
  EXPECT_EQ(r.ranks[0].finish, 11501);
  EXPECT_EQ(r.ranks[1].finish, 11500);
  EXPECT_EQ(r.ranks[2].finish, 2501);
  // Rank 1 computed 2 × 1 µs and was idle from 1000 to 10500, blamed on its send and receive.
  EXPECT_EQ(r.ranks[1].compute, 2000);
  EXPECT_EQ(r.ranks[1].exposed_pp + r.ranks[1].bubble, 9500);

  // A ring of two: each rank's next is its previous, one pair both ways. By hand: rank 1 sends
  // at 1000 (done 1500) and waits for rank 0's data, there at 10500; + 1 µs → 11500. Rank 0
  // sends at 10000 (done 10500), rank 1's data is there since 1500: done at 10501; → 11501.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  std::vector<EtFile> two;
  for (int rank = 0; rank < 2; ++rank)
    two.push_back(et({comp(1, rank == 0 ? 10 : 1), p2p(2, EtNodeType::CommSend, 1 - rank, {1}),
                      p2p(3, EtNodeType::CommRecv, 1 - rank, {2}), comp(4, 1, {3})}));
  const ChakraImport pair = read_chakra(put_ranks(two));
  o.class_durations = resolve_durations(pair.graph, pair.durations, c.compute);
  const emu::RunResults rp = emu::emulate(pair.graph, c, o);
  EXPECT_EQ(rp.ranks[0].finish, 11501);
  EXPECT_EQ(rp.ranks[1].finish, 11500);
}

/// Every rank runs the same ops (instance numbers included) with the same dependencies, and
/// every role reaches a communicator of the same kind and members: the replay is identical.
void expect_equivalent(const graph::SlicedGraph& a, const graph::SlicedGraph& b) {
  ASSERT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.templates.size(), b.templates.size());
  for (std::uint32_t r = 0; r < a.world_size; ++r) {
    const graph::RankProgram& p = a.program_of(r);
    const graph::RankProgram& q = b.program_of(r);
    ASSERT_EQ(p.size(), q.size()) << "rank " << r;
    EXPECT_EQ(p.name, q.name);
    EXPECT_EQ(p.static_memory, q.static_memory);
    EXPECT_EQ(p.dep_offsets, q.dep_offsets);
    EXPECT_EQ(p.deps, q.deps);
    for (std::uint32_t i = 0; i < p.size(); ++i) {
      const graph::Op& x = p.ops[i];
      const graph::Op& y = q.ops[i];
      ASSERT_TRUE(
          x.kind == y.kind && x.stream == y.stream && x.role == y.role && x.role2 == y.role2 &&
          x.phase == y.phase && x.name == y.name && x.layer == y.layer &&
          x.microbatch == y.microbatch && x.attention_impl == y.attention_impl &&
          x.gemm_dtype == y.gemm_dtype && x.shape == y.shape && x.flops == y.flops &&
          x.mem_bytes == y.mem_bytes && x.comm_bytes == y.comm_bytes &&
          x.mem_alloc == y.mem_alloc && x.mem_free == y.mem_free &&
          x.mem_transient == y.mem_transient && x.instance == y.instance &&
          x.instance2 == y.instance2 && x.comm_sms == y.comm_sms && x.value_dim == y.value_dim &&
          x.host_sync == y.host_sync && x.kernels == y.kernels && x.cuda_graph == y.cuda_graph)
          << "rank " << r << " op " << i;
    }
    for (int role = 1; role < graph::kNumRoles; ++role) {
      const auto ca = a.comm_of(r, static_cast<CommRole>(role));
      const auto cb = b.comm_of(r, static_cast<CommRole>(role));
      ASSERT_EQ(ca == graph::kNoComm, cb == graph::kNoComm) << "rank " << r << " role " << role;
      if (ca == graph::kNoComm) continue;
      const auto ua = static_cast<std::uint32_t>(ca), ub = static_cast<std::uint32_t>(cb);
      EXPECT_EQ(a.comms.kind[ua], b.comms.kind[ub]);
      EXPECT_EQ(std::vector<std::uint32_t>(a.comms.members_begin(ua), a.comms.members_end(ua)),
                std::vector<std::uint32_t>(b.comms.members_begin(ub), b.comms.members_end(ub)));
    }
  }
}

TEST_F(ChakraEt, ExpandDpReplicatesAReplicaAndJoinsItsDataParallelGroups) {
  // One replica of two ranks: a TP all-reduce over {0, 1}, a send 0 → 1 (explicit peers and
  // tag), and a gradient all-reduce over each rank's own one-member data-parallel group. dp=4
  // must equal the same job written out for 8 ranks: TP pairs {2d, 2d+1}, the pipeline pair
  // shifted, data-parallel groups {0, 2, 4, 6} and {1, 3, 5, 7}.
  const auto ar = EtCollective::AllReduce;
  auto p2p = [](std::uint64_t id, EtNodeType t, std::int64_t src, std::int64_t dst,
                std::vector<std::uint64_t> deps) {
    EtNode n;
    n.id = id;
    n.type = static_cast<int>(t);
    n.data_deps = std::move(deps);
    n.attrs = {EtAttr::int64("comm_size", 512), EtAttr::int64("comm_src", src),
               EtAttr::int64("comm_dst", dst), EtAttr::int64("comm_tag", 0)};
    return n;
  };
  // Rank r of a world whose replica starts at rank `base`.
  auto rank_file = [&](int r, int base, const std::string& tp, const std::string& dp) {
    std::vector<EtNode> nodes = {comp(1, 10), coll(2, ar, 1 << 20, tp, {1})};
    if (r == base)
      nodes.push_back(p2p(3, EtNodeType::CommSend, base, base + 1, {2}));
    else
      nodes.push_back(p2p(3, EtNodeType::CommRecv, base, base + 1, {2}));
    nodes.push_back(comp(4, 20, {3}));
    nodes.push_back(coll(5, ar, 4 << 20, dp, {4}));
    return et(nodes);
  };
  const std::string replica =
      put_ranks({rank_file(0, 0, "tp0", "dp0"), rank_file(1, 0, "tp0", "dp1")});
  std::ofstream(file("replica.json")) << R"({"tp0": [0, 1], "dp0": [0], "dp1": [1]})";
  ChakraReadOptions o;
  o.comm_groups_path = file("replica.json");
  o.expand_dp = 4;
  const ChakraImport expanded = read_chakra(replica, o);
  ASSERT_EQ(expanded.graph.world_size, 8u);
  EXPECT_EQ(expanded.graph.templates.size(), 2u);  // the replica's programs, shared
  EXPECT_EQ(expanded.durations.at(0), (std::vector<std::int64_t>{10000, -1, -1, 20000, -1}));

  fs::remove_all(dir_);
  fs::create_directories(dir_);
  std::vector<EtFile> full;
  for (int r = 0; r < 8; ++r)
    full.push_back(
        rank_file(r, r & ~1, "tp" + std::to_string(r / 2), "dp" + std::to_string(r % 2)));
  std::ofstream(file("full.json"))
      << R"({"tp0": [0, 1], "tp1": [2, 3], "tp2": [4, 5], "tp3": [6, 7], )"
      << R"("dp0": [0, 2, 4, 6], "dp1": [1, 3, 5, 7]})";
  ChakraReadOptions f;
  f.comm_groups_path = file("full.json");
  expect_equivalent(expanded.graph, read_chakra(put_ranks(full), f).graph);
}

graph::SlicedGraph small_workload() {
  // The quickstart cut to TP 4 × PP 2 × DP 2 = 16 ranks, 4 micro-batches.
  const ExperimentConfig c =
      load_experiment(std::string(SCALESCOPE_SOURCE_DIR) + "/inputs/experiments/quickstart.yaml",
                      {"parallel.dp=2", "cluster.num_gpus=16", "training.global_batch_size=8",
                       "run.trace_ranks=[0]"});
  graph::SlicedGraph g = workload::build_graph(c.model, c.parallel, c.training, c.resolved_yaml);
  for (auto& t : g.templates) t.finalize();
  return g;
}

TEST_F(ChakraEt, RoundTripPerRankIsExact) {
  const graph::SlicedGraph g = small_workload();
  ChakraWriteOptions w;
  w.duration = [](const graph::Op& op) { return static_cast<SimTime>(op.flops / 1e9) + 1; };
  EXPECT_EQ(write_chakra(g, file("g"), w), 16u);
  const ChakraImport imp = read_chakra(file("g"));
  EXPECT_TRUE(imp.scalescope_schema);
  EXPECT_TRUE(imp.durations.empty());  // our own nodes restore the exact op instead
  expect_equivalent(g, imp.graph);
  // The files are what stock ASTRA-sim reads: GlobalMetadata 0.0.4, no METADATA node (its
  // feeder stops on one: "Invalid node_type, node.id=0, node.type=1"), the groups in
  // GlobalMetadata and in PREFIX.comm_groups.json for --comm-group-configuration, typed attrs.
  const EtFile f = read_chakra_file(file("g.0.et"));
  EXPECT_EQ(f.version, "0.0.4");
  EXPECT_EQ(f.meta_attr("schema")->s, "scalescope-chakra-1");
  ASSERT_FALSE(f.nodes.empty());
  for (const EtNode& n : f.nodes) {
    EXPECT_NE(n.type, static_cast<int>(EtNodeType::Metadata));
    EXPECT_TRUE(n.ctrl_deps.empty());
  }
  ASSERT_NE(f.meta_attr("ss_comm_groups"), nullptr);
  const nlohmann::json groups = nlohmann::json::parse(std::ifstream(file("g.comm_groups.json")));
  EXPECT_EQ(groups.size(), g.comms.size());
  for (std::uint32_t c = 0; c < g.comms.size(); ++c)
    EXPECT_EQ(groups.at(std::to_string(c + 1)).get<std::vector<std::uint32_t>>(),
              std::vector<std::uint32_t>(g.comms.members_begin(c), g.comms.members_end(c)));
  bool saw_coll = false, saw_send = false;
  for (const EtNode& n : f.nodes) {
    if (n.type == static_cast<int>(EtNodeType::CommColl)) {
      saw_coll = true;
      EXPECT_EQ(n.attr("comm_size")->member, 9);  // int64_val
      EXPECT_EQ(n.attr("pg_name")->member, 29);   // string_val
      EXPECT_NE(n.attr("pg_name")->s, "0");
    }
    if (n.type == static_cast<int>(EtNodeType::CommSend)) {
      saw_send = true;
      EXPECT_EQ(n.attr("comm_dst")->member, 7);  // int32_val
      EXPECT_EQ(n.attr("comm_tag")->member, 7);
    }
    if (n.type == static_cast<int>(EtNodeType::Comp)) {
      EXPECT_EQ(n.attr("num_ops")->member, 9);
      EXPECT_EQ(n.attr("tensor_size")->member, 13);  // uint64_val
      EXPECT_GT(n.duration_micros, 0u);
    }
  }
  EXPECT_TRUE(saw_coll);
  EXPECT_TRUE(saw_send);
}

TEST_F(ChakraEt, TheMetadataNodeFlavourRoundTripsToo) {
  // --metadata-node: the groups also as a METADATA node (id 0, the PyTorch converter's), every
  // root depending on it; read back, the same graph.
  const graph::SlicedGraph g = small_workload();
  ChakraWriteOptions w;
  w.metadata_node = true;
  write_chakra(g, file("m"), w);
  const EtFile f = read_chakra_file(file("m.0.et"));
  ASSERT_FALSE(f.nodes.empty());
  EXPECT_EQ(f.nodes[0].type, static_cast<int>(EtNodeType::Metadata));
  EXPECT_EQ(f.nodes[0].id, 0u);
  expect_equivalent(g, read_chakra(file("m")).graph);
}

TEST_F(ChakraEt, MoeKernelCountsAndCudaGraphMarksRoundTrip) {
  // A small Mixtral with Megatron's MoE fusions and CUDA graphs carries nonzero Op::kernels and
  // Op::cuda_graph (1 and 2): they survive the Chakra round trip (ss_op entries 19 and 20).
  const ExperimentConfig c = load_experiment(
      std::string(SCALESCOPE_SOURCE_DIR) + "/inputs/experiments/quickstart.yaml",
      {"model.preset=mixtral-8x7b", "model.num_layers=2", "model.seq_length=1024", "parallel.tp=1",
       "parallel.pp=1", "parallel.dp=4", "parallel.sequence_parallel=false",
       "parallel.expert_model_parallel_size=4", "parallel.moe_token_dispatcher_type=alltoall",
       "parallel.moe_router_fusion=true", "parallel.moe_permute_fusion=true",
       "parallel.cuda_graph_scope=[attn, moe_router, moe_preprocess]", "cluster.num_gpus=4",
       "training.global_batch_size=8", "run.trace_ranks=[0]"});
  graph::SlicedGraph g = workload::build_graph(c.model, c.parallel, c.training, c.resolved_yaml);
  for (auto& t : g.templates) t.finalize();
  int kernels = 0, inside = 0, first = 0;
  for (const graph::Op& op : g.templates[0].ops) {
    kernels += op.kernels > 1 ? 1 : 0;
    inside += op.cuda_graph == 1 ? 1 : 0;
    first += op.cuda_graph == 2 ? 1 : 0;
  }
  EXPECT_GT(kernels, 0);
  EXPECT_GT(inside, 0);
  EXPECT_GT(first, 0);
  write_chakra(g, file("moe"), ChakraWriteOptions{});
  expect_equivalent(g, read_chakra(file("moe")).graph);
}

TEST_F(ChakraEt, RoundTripPerClassIsExact) {
  const graph::SlicedGraph g = small_workload();
  ChakraWriteOptions w;
  w.classes = true;
  write_chakra(g, file("c"), w);
  EXPECT_TRUE(fs::exists(file("c.classes.json")));
  EXPECT_TRUE(fs::exists(file("c.class0.et")));
  EXPECT_FALSE(fs::exists(file("c.0.et")));
  expect_equivalent(g, read_chakra(file("c")).graph);
}

}  // namespace
}  // namespace scalescope::io
