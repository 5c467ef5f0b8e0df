// Chakra ET → graph: read_chakra joins the converted ranks of a trace into a sliced graph (programs
// shared between ranks, communicators from the groups); the imported durations and their
// graph.h5 record.
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/error.hpp"
#include "graph/expand.hpp"
#include "io/chakra_et.hpp"
#include "io/chakra_et_internal.hpp"
#include "io/graph_h5.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace fs = std::filesystem;
using graph::CommKind;
using graph::CommRole;
using graph::Op;
using graph::OpKind;
using graph::Stream;

namespace {

using detail::add_group;
using detail::class_file;
using detail::classes_json;
using detail::Context;
using detail::convert_file;
using detail::kSchema;
using detail::node_error;
using detail::ProgramIndex;
using detail::rank_file;
using detail::RawOp;
using detail::RawRank;
using detail::read_group_list;

}  // namespace

ChakraImport read_chakra(const std::string& prefix, const ChakraReadOptions& opt) {
#if defined(__GLIBC__)
  // Each file is decoded into ~10 allocations per node and freed again, beside the ranks' kept
  // communication ops. glibc raises its mmap threshold to the largest block freed (a file's
  // bytes), after which those long-lived vectors come from the heap between the transients and
  // malloc slows as the import goes on (measured: 3.6 files/s at rank 300 of a 1,024-rank GPT-3
  // trace, 2 at rank 700). A fixed threshold keeps large blocks in their own mappings.
  static const bool fixed_threshold = [] { return mallopt(M_MMAP_THRESHOLD, 256 << 10) == 1; }();
  (void)fixed_threshold;
#endif
  ChakraImport result;
  Context ctx;
  ctx.opt = &opt;
  std::vector<RawRank> ranks;
  nlohmann::json classes;
  const auto exists = [](const std::string& f) {
    std::error_code ec;  // a name the system cannot look up (too long) is not there
    return fs::exists(f, ec);
  };
  const bool class_layout = !exists(rank_file(prefix, 0)) && exists(classes_json(prefix));
  std::vector<std::string> files;
  if (class_layout) {
    std::ifstream in(classes_json(prefix));
    classes = nlohmann::json::parse(in, nullptr, false);
    if (classes.is_discarded() || !classes.is_object() ||
        classes.value("format", "") != "scalescope-chakra-classes-1" ||
        !classes.contains("num_classes") || !classes["num_classes"].is_number_unsigned() ||
        classes["num_classes"].get<std::uint64_t>() > (1u << 24))
      throw_input("{}: not a scalescope Chakra class map", classes_json(prefix));
    const auto k = classes["num_classes"].get<std::uint32_t>();
    for (std::uint32_t i = 0; i < k; ++i) files.push_back(class_file(prefix, i));
  } else {
    for (std::uint32_t r = 0; exists(rank_file(prefix, r)); ++r)
      files.push_back(rank_file(prefix, r));
    // The world is the rank files PREFIX.<r>.et there are; a gap (PREFIX.3.et missing beside
    // .4 … .7) or a second spelling of a rank (PREFIX.03.et) would silently change it.
    const fs::path p(prefix);
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    const std::string stem = p.filename().string() + ".";
    std::set<std::uint64_t> seen;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() <= stem.size() + 3 || name.rfind(stem, 0) != 0 ||
          name.compare(name.size() - 3, 3, ".et") != 0)
        continue;
      const std::string digits = name.substr(stem.size(), name.size() - stem.size() - 3);
      if (digits.empty() || digits.size() > 9 ||
          !std::all_of(digits.begin(), digits.end(),
                       [](char ch) { return ch >= '0' && ch <= '9'; }))
        continue;
      const std::uint64_t r = std::stoull(digits);
      if (!seen.insert(r).second)
        throw_input("{}: rank {} has two files ({} and another spelling)", prefix, r,
                    e.path().string());
      if (r >= files.size())
        throw_input(
            "{}: rank file {} is missing (there is {}): a trace has a file for every "
            "rank 0 … N − 1",
            prefix, rank_file(prefix, static_cast<std::uint32_t>(files.size())), e.path().string());
    }
  }
  if (files.empty())
    throw_input("{}: no Chakra ET files ({} does not exist)", prefix, rank_file(prefix, 0));
  if (!opt.comm_groups_path.empty()) {
    std::ifstream in(opt.comm_groups_path);
    if (!in) throw_input("{}: cannot open", opt.comm_groups_path);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_string() && j.get<std::string>() == "empty") {
    } else if (j.is_discarded() || !j.is_object()) {
      throw_input("{}: expected a JSON object {{\"<group id>\": [ranks...]}}",
                  opt.comm_groups_path);
    } else {
      for (const auto& [pg, list] : j.items()) {
        if (!list.is_array()) throw_input("{}: group '{}' is not a list", opt.comm_groups_path, pg);
        std::vector<std::uint32_t> members;
        for (const auto& r : list) {
          if (!r.is_number_unsigned())
            throw_input("{}: group '{}' has a bad rank", opt.comm_groups_path, pg);
          members.push_back(r.get<std::uint32_t>());
        }
        add_group(ctx, pg, std::move(members), opt.comm_groups_path);
      }
    }
  }

  ProgramIndex interned;  // the distinct programs so far
  // Two EtFiles and read buffers, used in turn: file i+1 is read and decoded on a second thread
  // while file i is converted here (the two take about as long; the conversion stays in file
  // order, and an error of file i is reported before any of file i+1). Ranks of one template
  // decode into the buffers an earlier file left, so the decode allocates almost nothing per
  // node.
  std::array<EtFile, 2> decoded;
  std::array<std::string, 2> buffers;
  const auto decode = [&](std::size_t k) {
    return std::async(std::launch::async,
                      [&, k] { read_chakra_file(files[k], decoded[k % 2], buffers[k % 2]); });
  };
  std::future<void> pending = files.empty() ? std::future<void>{} : decode(0);
  for (std::size_t i = 0; i < files.size(); ++i) {
    pending.get();  // file i decoded (or its error, thrown here)
    if (i + 1 < files.size()) pending = decode(i + 1);
    const EtFile& f = decoded[i % 2];
    const EtAttr* schema = f.meta_attr("schema");
    const bool ours = schema != nullptr && schema->s == kSchema;
    if (i == 0) ctx.schema = ours;
    if (const EtAttr* config = f.meta_attr("ss_config"); ours && config != nullptr)
      result.source_config = config->s;
    if (ours != ctx.schema)
      throw_input("{}: written by {} but {} was {}", files[i], ours ? "scalescope" : "another tool",
                  files[0], ctx.schema ? "scalescope's" : "not");
    if (class_layout && !ours)
      throw_input("{}: the class layout is read only from files scalescope wrote", files[i]);
    result.nodes += f.nodes.size();
    // scalescope's files name their groups in GlobalMetadata (and, written with
    // --metadata-node, in a METADATA node too).
    if (const EtAttr* groups = f.meta_attr("ss_comm_groups"); ours && groups != nullptr)
      read_group_list(ctx, groups->s, files[i], static_cast<std::int64_t>(i), 0);
    RawRank r = convert_file(ctx, f, files[i], static_cast<std::int64_t>(i));
    if (ours) {
      const EtAttr* roles = f.meta_attr("ss_roles");
      const EtAttr* name = f.meta_attr("ss_template");
      const EtAttr* mem = f.meta_attr("ss_static_memory");
      if (roles == nullptr || roles->ints.size() != graph::kNumRoles || name == nullptr ||
          mem == nullptr)
        throw_input("{}: scalescope schema without ss_roles / ss_template / ss_static_memory",
                    files[i]);
      std::copy(roles->ints.begin(), roles->ints.end(), r.roles.begin());
      r.template_name = name->s;
      r.static_memory = mem->i;
      // Our files restore every op as it was, peers as roles: ranks of one template have equal
      // programs. Keep each distinct program once (a 1,024-rank GPT-3 trace is 1,024 copies of
      // 8 programs of ~50,000 ops; holding them all took more memory than the machine had).
      const std::int64_t same = interned.find_or_add(ranks, r, i);
      if (same >= 0) {
        // Only what the checks below read stays: the communication ops (their peers are this
        // rank's), without dependencies.
        r.same_as = same;
        std::erase_if(r.ops, [](const RawOp& o) { return !graph::is_communication(o.op.kind); });
        r.ops.shrink_to_fit();
        r.dep_offsets.assign(r.ops.size() + 1, 0);
        r.deps = {};
      }
    }
    ranks.push_back(std::move(r));
    if (opt.progress) opt.progress(i + 1, files.size());
  }
  result.files = files.size();
  result.scalescope_schema = ctx.schema;

  graph::SlicedGraph& g = result.graph;
  // World, rank → program, rank → pg id per role.
  std::vector<std::uint32_t> program_of_rank;
  std::vector<std::array<std::int64_t, graph::kNumRoles>> roles;
  if (class_layout) {
    g.world_size = classes.at("world_size").get<std::uint32_t>();
    program_of_rank = classes.at("rank_class").get<std::vector<std::uint32_t>>();
    for (const auto& row : classes.at("roles")) {
      std::array<std::int64_t, graph::kNumRoles> a{};
      const auto v = row.get<std::vector<std::int64_t>>();
      if (v.size() != graph::kNumRoles) throw_input("{}: bad roles row", classes_json(prefix));
      std::copy(v.begin(), v.end(), a.begin());
      roles.push_back(a);
    }
    for (const auto& [pg, list] : classes.at("groups").items())
      add_group(ctx, pg, list.get<std::vector<std::uint32_t>>(), classes_json(prefix));
    if (program_of_rank.size() != g.world_size || roles.size() != g.world_size)
      throw_input("{}: rank_class / roles do not have world_size entries", classes_json(prefix));
    for (std::uint32_t k : program_of_rank)
      if (k >= ranks.size()) throw_input("{}: rank class {} has no file", classes_json(prefix), k);
  } else {
    g.world_size = static_cast<std::uint32_t>(ranks.size());
    for (std::uint32_t r = 0; r < g.world_size; ++r) program_of_rank.push_back(r);
  }
  const std::uint32_t world = g.world_size;
  // "" and "0" mean all ranks (unless a group "0" is defined), as does an empty member list.
  auto all_ranks = [&] {
    const auto it = ctx.groups.find("0");
    if (it != ctx.groups.end() && !it->second.empty()) return it->second;
    std::vector<std::uint32_t> all(world);
    for (std::uint32_t r = 0; r < world; ++r) all[r] = r;
    return all;
  };
  auto group_ranks = [&](const std::string& pg) -> std::vector<std::uint32_t> {
    if (pg == "0" || pg.empty()) return all_ranks();
    const auto it = ctx.groups.find(pg);
    if (it == ctx.groups.end()) return {};
    if (it->second.empty()) return all_ranks();
    return it->second;
  };

  g.rank_roles.assign(static_cast<std::size_t>(world) * graph::kNumRoles, graph::kNoComm);
  auto set_role = [&](std::uint32_t r, CommRole role, std::int32_t c) {
    g.rank_roles[static_cast<std::size_t>(r) * graph::kNumRoles + static_cast<std::size_t>(role)] =
        c;
  };

  if (ctx.schema) {
    // Communicators: every pg id a rank holds in a role, in id order; the kind follows the role.
    std::map<std::int64_t, std::pair<CommKind, std::int32_t>> comm_of_pg;
    const auto role_rows = class_layout ? roles : [&] {
      std::vector<std::array<std::int64_t, graph::kNumRoles>> v;
      for (const RawRank& r : ranks) v.push_back(r.roles);
      return v;
    }();
    for (std::uint32_t r = 0; r < world; ++r)
      for (int role = 1; role < graph::kNumRoles; ++role) {
        const std::int64_t pg = role_rows[r][static_cast<std::size_t>(role)];
        if (pg < 0) continue;
        CommKind kind = CommKind::PpPair;
        for (int k = 0; k <= static_cast<int>(CommKind::TpEpGroup); ++k)
          if (graph::role_of(static_cast<CommKind>(k)) == static_cast<CommRole>(role))
            kind = static_cast<CommKind>(k);
        comm_of_pg.emplace(pg, std::make_pair(kind, -1));
      }
    for (auto& [pg, kc] : comm_of_pg) {
      const auto members = group_ranks(std::to_string(pg));
      if (members.empty())
        throw_input("{}: communicator group {} is named in ss_roles but not defined", prefix, pg);
      for (std::uint32_t m : members)
        if (m >= world)
          throw_input("{}: communicator group {} names rank {} ≥ {} ranks", prefix, pg, m, world);
      kc.second = static_cast<std::int32_t>(g.comms.add(kc.first, members));
    }
    for (std::uint32_t r = 0; r < world; ++r)
      for (int role = 1; role < graph::kNumRoles; ++role) {
        const std::int64_t pg = role_rows[r][static_cast<std::size_t>(role)];
        if (pg >= 0) set_role(r, static_cast<CommRole>(role), comm_of_pg.at(pg).second);
      }
  } else {
    // Foreign trace: each pg group becomes a communicator whose kind (and so role and stream)
    // no member uses for another group (greedy, in order of first use); P2P peers become
    // pipeline pairs.
    const std::array<CommKind, 9> kinds{
        CommKind::DpGroup,        CommKind::TpGroup,          CommKind::CpGroup,
        CommKind::EpGroup,        CommKind::EtpGroup,         CommKind::TpEpGroup,
        CommKind::EmbeddingGroup, CommKind::DpReplicateGroup, CommKind::EdpGroup};
    std::map<std::string, std::int32_t> comm_of_group;
    std::vector<std::uint32_t> used(world, 0);  // bit k: kinds[k] taken by this rank
    for (std::uint32_t r = 0; r < world; ++r)
      for (RawOp& o : ranks[r].ops) {
        if (!graph::is_collective(o.op.kind)) continue;
        const auto members = group_ranks(o.group);
        if (members.empty())
          node_error(ranks[r].file, o.node, r,
                     fmt::format("communicator group '{}' not found (no METADATA node or "
                                 "--comm-groups entry defines it)",
                                 o.group));
        if (!std::binary_search(members.begin(), members.end(), r))
          node_error(ranks[r].file, o.node, r,
                     fmt::format("rank is not a member of its communicator group '{}'", o.group));
        for (std::uint32_t m : members)
          if (m >= world)
            node_error(
                ranks[r].file, o.node, r,
                fmt::format("group '{}' names rank {} but there are {} files", o.group, m, world));
        auto it = comm_of_group.find(o.group);
        if (it == comm_of_group.end()) {
          std::uint32_t taken = 0;
          for (std::uint32_t m : members) taken |= used[m];
          std::size_t k = 0;
          while (k < kinds.size() && (taken >> k) & 1u) ++k;
          if (k == kinds.size())
            node_error(ranks[r].file, o.node, r,
                       "a rank takes part in more than 9 communicator groups, more than "
                       "scalescope's role table holds");
          const auto c = static_cast<std::int32_t>(g.comms.add(kinds[k], members));
          for (std::uint32_t m : members) {
            used[m] |= 1u << k;
            set_role(m, graph::role_of(kinds[k]), c);
          }
          it = comm_of_group.emplace(o.group, c).first;
        }
        const CommKind kind = g.comms.kind[static_cast<std::uint32_t>(it->second)];
        o.op.role = graph::role_of(kind);
        o.op.stream = graph::stream_of(o.op.role);
        if (o.op.kind == OpKind::AllGather) o.op.comm_bytes *= static_cast<double>(members.size());
      }
    // Point-to-point: at most two peers per rank, oriented into pipeline pairs (next, prev).
    std::vector<std::set<std::uint32_t>> peers(world), sends_to(world);
    for (std::uint32_t r = 0; r < world; ++r)
      for (const RawOp& o : ranks[r].ops)
        for (std::int64_t p : {o.peer, o.peer2}) {
          if (o.op.kind != OpKind::SendRecv || p == -1) continue;
          if (p < 0 || p >= world || p == r)
            node_error(ranks[r].file, o.node, r,
                       fmt::format("send/recv peer {} is not another of the {} ranks", p, world));
          peers[r].insert(static_cast<std::uint32_t>(p));
          if (p == o.peer) sends_to[r].insert(static_cast<std::uint32_t>(p));
          peers[static_cast<std::size_t>(p)].insert(r);
        }
    for (std::uint32_t r = 0; r < world; ++r)
      if (peers[r].size() > 2)
        throw_input(
            "{}: rank {} exchanges point-to-point messages with {} ranks; scalescope models "
            "send/recv as pipeline pairs, at most a previous and a next peer per rank",
            ranks[r].file, r, peers[r].size());
    std::vector<std::int64_t> next(world, -1), prev(world, -1);
    std::vector<bool> seen(world, false);
    for (std::uint32_t s = 0; s < world; ++s) {
      if (seen[s] || peers[s].empty()) continue;
      // The component of s (a path or a cycle, every degree ≤ 2): walk it from one end (from s
      // if it is a cycle), each rank's next being the one after it.
      std::vector<std::uint32_t> comp{s}, stack{s};
      std::set<std::uint32_t> in_comp{s};
      while (!stack.empty()) {
        const std::uint32_t u = stack.back();
        stack.pop_back();
        for (std::uint32_t p : peers[u])
          if (in_comp.insert(p).second) {
            comp.push_back(p);
            stack.push_back(p);
          }
      }
      std::uint32_t start = s;
      for (std::uint32_t u : comp)
        if (peers[u].size() == 1) start = u;
      const bool cycle = peers[start].size() == 2;
      std::uint32_t cur = start;
      for (;;) {
        seen[cur] = true;
        std::int64_t step = -1;
        for (std::uint32_t p : peers[cur])  // downstream = where it sends, when it can
          if (!seen[p] && (step < 0 || sends_to[cur].count(p))) step = p;
        if (step < 0) {
          if (cycle && cur != start) {
            next[cur] = start;
            prev[start] = cur;
          }
          break;
        }
        next[cur] = step;
        prev[static_cast<std::size_t>(step)] = cur;
        cur = static_cast<std::uint32_t>(step);
      }
    }
    for (std::uint32_t r = 0; r < world; ++r)
      if (next[r] >= 0) {
        const auto n = static_cast<std::uint32_t>(next[r]);
        const auto c = static_cast<std::int32_t>(
            g.comms.add(CommKind::PpPair, {std::min(r, n), std::max(r, n)}));
        set_role(r, CommRole::PpNext, c);
        set_role(n, CommRole::PpPrev, c);
      }
    for (std::uint32_t r = 0; r < world; ++r) {
      std::map<std::int64_t, std::int64_t> sent, received;  // peer → count, for inferred tags
      bool warned = false;
      for (RawOp& o : ranks[r].ops) {
        if (o.op.kind != OpKind::SendRecv) continue;
        const bool send = o.peer >= 0;
        const std::int64_t p = send ? o.peer : o.peer2;
        const CommRole role = next[r] == p ? CommRole::PpNext : CommRole::PpPrev;
        (send ? o.op.role : o.op.role2) = role;
        o.op.stream = graph::stream_of(role);
        std::int64_t& tag = send ? o.tag : o.tag2;
        std::int64_t& count = (send ? sent : received)[p];
        if (tag < 0) {
          tag = count;
          if (!warned && opt.warn)
            opt.warn(
                fmt::format("{}: node {} (rank {}): comm_tag missing, inferred from the "
                            "order of the transfers with rank {}",
                            ranks[r].file, o.node, r, p));
          warned = true;
        }
        ++count;
      }
    }
  }

  // Collective order: every member of a communicator issues the same (kind, bytes) sequence.
  if (!class_layout) {
    struct Coll {
      OpKind kind;
      double bytes;
      std::uint64_t node;
    };
    std::vector<std::map<std::uint32_t, std::vector<Coll>>> seq(g.comms.size());
    for (std::uint32_t r = 0; r < world; ++r)
      for (const RawOp& o : ranks[r].ops)
        if (graph::is_collective(o.op.kind)) {
          const std::int32_t c = g.comm_of(r, o.op.role);
          if (c == graph::kNoComm)
            node_error(ranks[r].file, o.node, r, "collective on a role the rank has no group for");
          seq[static_cast<std::uint32_t>(c)][r].push_back({o.op.kind, o.op.comm_bytes, o.node});
        }
    for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
      if (g.comms.kind[c] == CommKind::PpPair) continue;
      const std::uint32_t first = *g.comms.members_begin(c);
      const auto& a = seq[c][first];
      for (const std::uint32_t* m = g.comms.members_begin(c) + 1; m != g.comms.members_end(c);
           ++m) {
        const auto& b = seq[c][*m];
        for (std::size_t k = 0; k < std::max(a.size(), b.size()); ++k) {
          if (k < a.size() && k < b.size() && a[k].kind == b[k].kind && a[k].bytes == b[k].bytes)
            continue;
          const std::uint64_t node = k < b.size() ? b[k].node : (b.empty() ? 0 : b.back().node);
          node_error(ranks[*m].file, node, *m,
                     fmt::format(
                         "collective order disagrees with rank {} on communicator group "
                         "{} at its collective #{}: {} here, {} there",
                         first, c + 1, k,
                         k < b.size()
                             ? fmt::format("{} of {} B", graph::op_kind_name(b[k].kind), b[k].bytes)
                             : std::string("nothing"),
                         k < a.size()
                             ? fmt::format("{} of {} B", graph::op_kind_name(a[k].kind), a[k].bytes)
                             : std::string("nothing")));
        }
      }
    }
    // Point-to-point: our pairs are FIFO per direction, so the k-th send must meet the k-th
    // receive with the same tag and size.
    struct P2p {
      std::int64_t tag;
      double bytes;
      std::uint64_t node;
    };
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<P2p>> sends, recvs;
    for (std::uint32_t r = 0; r < world; ++r)
      for (const RawOp& o : ranks[r].ops) {
        if (o.op.kind != OpKind::SendRecv) continue;
        if (o.peer >= 0)
          sends[{r, static_cast<std::uint32_t>(o.peer)}].push_back(
              {o.tag, o.op.comm_bytes, o.node});
        if (o.peer2 >= 0)
          recvs[{static_cast<std::uint32_t>(o.peer2), r}].push_back(
              {o.tag2, o.op.comm_bytes, o.node});
      }
    auto check = [&](const auto& mine, const auto& theirs, bool mine_are_sends) {
      for (const auto& [pair, list] : mine) {
        const auto it = theirs.find(pair);
        const std::uint32_t here = mine_are_sends ? pair.first : pair.second;
        const std::uint32_t there = mine_are_sends ? pair.second : pair.first;
        const std::size_t other = it == theirs.end() ? 0 : it->second.size();
        for (std::size_t k = 0; k < list.size(); ++k) {
          if (k < other && it->second[k].tag == list[k].tag &&
              (it->second[k].bytes == list[k].bytes || !mine_are_sends || it->second[k].bytes == 0))
            continue;
          node_error(
              ranks[here].file, list[k].node, here,
              fmt::format("{} #{} {} rank {} (tag {}) has no matching {} in order on rank "
                          "{}",
                          mine_are_sends ? "send" : "receive", k, mine_are_sends ? "to" : "from",
                          there, list[k].tag, mine_are_sends ? "receive" : "send", there));
        }
      }
    };
    check(sends, recvs, true);
    check(recvs, sends, false);
    // A receive without a size takes its send's.
    for (std::uint32_t r = 0; r < world; ++r)
      for (RawOp& o : ranks[r].ops)
        if (o.op.kind == OpKind::SendRecv && o.peer < 0 && o.op.comm_bytes == 0) {
          // find the matching send: k-th receive from peer2
          std::size_t k = 0;
          for (const RawOp& x : ranks[r].ops) {
            if (&x == &o) break;
            if (x.op.kind == OpKind::SendRecv && x.peer2 == o.peer2) ++k;
          }
          o.op.comm_bytes = sends.at({static_cast<std::uint32_t>(o.peer2), r}).at(k).bytes;
        }
  }

  // Templates: identical programs are shared (the ring's ranks all look alike once peers are
  // roles); the class layout already is one program per class.
  ProgramIndex distinct;
  std::vector<std::uint32_t> template_of_program(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const RawRank& r = ranks[i];
    if (r.same_as >= 0) {
      template_of_program[i] = template_of_program[static_cast<std::size_t>(r.same_as)];
      continue;
    }
    if (const std::int64_t same = distinct.find_or_add(ranks, r, i); same >= 0) {
      template_of_program[i] = template_of_program[static_cast<std::size_t>(same)];
      continue;
    }
    template_of_program[i] = static_cast<std::uint32_t>(g.templates.size());
    graph::RankProgram p;
    p.name =
        r.template_name.empty() ? fmt::format("chakra_{}", g.templates.size()) : r.template_name;
    p.static_memory = r.static_memory;
    std::vector<std::int64_t> d;
    bool any = false;
    std::vector<std::uint32_t> op_deps;
    for (std::size_t k = 0; k < r.ops.size(); ++k) {
      const RawOp& o = r.ops[k];
      const auto deps = r.deps_of(k);
      op_deps.assign(deps.begin(), deps.end());
      p.add(o.op, op_deps);
      d.push_back(o.duration_ns);
      any = any || o.duration_ns >= 0;
    }
    if (any) result.durations.emplace(template_of_program[i], std::move(d));
    g.templates.push_back(std::move(p));
  }
  g.rank_class.resize(world);
  for (std::uint32_t r = 0; r < world; ++r)
    g.rank_class[r] = template_of_program[program_of_rank[r]];
  try {
    for (auto& t : g.templates) t.finalize();
    graph::validate(g);
    if (opt.expand_dp > 1) g = graph::expand_replicas(g, opt.expand_dp);
  } catch (const InputError& e) {
    throw_input("{}: {}", prefix, e.what());
  }
  return result;
}

std::map<std::uint32_t, std::vector<SimTime>> resolve_durations(
    const graph::SlicedGraph& g, const std::map<std::uint32_t, std::vector<std::int64_t>>& d,
    const std::function<SimTime(const graph::Op&)>& compute) {
  std::map<std::uint32_t, std::vector<SimTime>> out;
  for (const auto& [k, v] : d) {
    const graph::RankProgram& p = g.templates.at(k);
    SCALESCOPE_EXPECTS(v.size() == p.size());
    std::vector<SimTime> t(p.size(), 0);
    for (std::uint32_t i = 0; i < p.size(); ++i)
      if (!graph::is_communication(p.ops[i].kind)) t[i] = v[i] >= 0 ? v[i] : compute(p.ops[i]);
    out.emplace(k, std::move(t));
  }
  return out;
}

void write_imported_graph_h5(const graph::SlicedGraph& g,
                             const std::map<std::uint32_t, std::vector<std::int64_t>>& durations,
                             const std::string& path) {
  write_via_temporary(path, [&](const std::string& tmp) {
    write_graph_h5(g, tmp);
    if (durations.empty()) return;
    h5::File f = h5::File::open(tmp, true);
    const h5::Group d = f.root().create_group("chakra_durations");
    for (const auto& [k, v] : durations) d.write(std::to_string(k), v);
  });
}

std::map<std::uint32_t, std::vector<std::int64_t>> read_graph_durations_h5(
    const std::string& graph_h5) {
  std::map<std::uint32_t, std::vector<std::int64_t>> out;
  h5::File f = h5::File::open(graph_h5);
  if (!f.root().exists("chakra_durations")) return out;
  const h5::Group g = f.root().open_group("chakra_durations");
  const std::uint32_t n = f.root().open_group("meta").attribute<std::uint32_t>("num_templates");
  for (std::uint32_t k = 0; k < n; ++k)
    if (g.exists(std::to_string(k))) out.emplace(k, g.read<std::int64_t>(std::to_string(k)));
  return out;
}

}  // namespace scalescope::io
