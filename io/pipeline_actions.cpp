#include "io/pipeline_actions.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"

namespace scalescope::io {

using workload::PipeAction;
using workload::PipelineAction;

namespace {

/// The cells of one CSV row (Python's csv.writer: quoted where a cell holds a comma, quote or
/// line break; a doubled quote inside quotes is one).
std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted && ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      cells.back() += '"';
      ++i;
    } else if (ch == '"') {
      quoted = !quoted;
    } else if (!quoted && ch == ',') {
      cells.emplace_back();
    } else if (ch != '\r') {
      cells.back() += ch;
    }
  }
  return cells;
}

std::string trim(const std::string& s) {
  const std::size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

const char* type_name(PipeAction k) {
  switch (k) {
    case PipeAction::Forward:
      return "F";
    case PipeAction::Backward:
      return "B";
    case PipeAction::SendF:
      return "SEND_F";
    case PipeAction::RecvF:
      return "RECV_F";
    case PipeAction::SendB:
      return "SEND_B";
    case PipeAction::RecvB:
      return "RECV_B";
    case PipeAction::Idle:
      return "";
    case PipeAction::BackwardInput:
      return "I";
    case PipeAction::BackwardWeight:
      return "W";
  }
  return "?";
}

using Key = std::tuple<PipeAction, std::int32_t, std::int32_t>;
Key key(const PipelineAction& a) {
  return {a.kind, a.stage, a.microbatch};
}

}  // namespace

std::string action_name(const PipelineAction& a) {
  return fmt::format("{}{}{}", a.stage, type_name(a.kind), a.microbatch);
}

PipelineTable read_pipeline_actions(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_input("{}: cannot read the pipeline action table", path);
  // _Action.__repr__: [stage][type][micro-batch] (schedules.py _action_regex).
  static const std::regex action(
      R"((\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*))");
  PipelineTable table;
  std::string line;
  for (std::size_t row = 1; std::getline(in, line); ++row) {
    std::vector<PipelineAction>& out = table.emplace_back();  // an empty row: a rank idle
    if (trim(line).empty()) continue;
    const std::vector<std::string> cells = csv_cells(line);
    for (std::size_t col = 0; col < cells.size(); ++col) {
      const std::string cell = trim(cells[col]);
      if (cell.empty()) {
        out.push_back({0, 0, PipeAction::Idle});  // None: an idle step
        continue;
      }
      const auto where = [&] {
        return fmt::format("{}: row {} (rank {}), cell {} '{}'", path, row, row - 1, col + 1, cell);
      };
      std::smatch m;
      if (cell.front() == '(')
        throw_input("{}: overlapped actions (DualPipeV's OVERLAP_F_B) are not modelled", where());
      if (!std::regex_match(cell, m, action))
        throw_input(
            "{}: not an action of torch.distributed.pipelining ([stage][type][micro-batch], "
            "e.g. 0F1)",
            where());
      const std::string type = m[2].str();
      if (type == "REDUCE_GRAD" || type == "UNSHARD" || type == "RESHARD")
        continue;  // the run reduces and gathers from the plan
      if (m[3].str().empty()) throw_input("{}: the action has no micro-batch", where());
      const auto number = [&](const std::string& text) {
        if (text.size() > 9) throw_input("{}: {} is out of range", where(), text);
        return static_cast<std::int32_t>(std::stol(text));
      };
      const PipeAction kind = type == "F"        ? PipeAction::Forward
                              : type == "B"      ? PipeAction::Backward
                              : type == "I"      ? PipeAction::BackwardInput
                              : type == "W"      ? PipeAction::BackwardWeight
                              : type == "SEND_F" ? PipeAction::SendF
                              : type == "RECV_F" ? PipeAction::RecvF
                              : type == "SEND_B" ? PipeAction::SendB
                                                 : PipeAction::RecvB;
      out.push_back({number(m[1].str()), number(m[3].str()), kind});
    }
  }
  while (!table.empty() && table.back().empty()) table.pop_back();  // a trailing line break
  if (table.empty()) throw_input("{}: the pipeline action table is empty", path);
  return table;
}

PipelineTable lower_pipeline_actions(const PipelineTable& table, std::int64_t pp, std::int64_t vpp,
                                     std::int64_t microbatches, const std::string& path) {
  if (static_cast<std::int64_t>(table.size()) != pp)
    throw_input("{}: {} rows (pipeline ranks) but pipeline_model_parallel_size is {}", path,
                table.size(), pp);
  const auto stages = static_cast<std::int32_t>(pp * vpp);
  bool comms = false;
  std::set<Key> seen;
  for (std::int64_t r = 0; r < pp; ++r)
    for (const PipelineAction& a : table[static_cast<std::size_t>(r)]) {
      if (a.kind == PipeAction::Idle) continue;
      const std::string name = action_name(a);
      if (a.stage >= stages)
        throw_input(
            "{}: rank {} runs {} but there are {} stages (pipeline_model_parallel_size {} × "
            "virtual_pipeline_model_parallel_size {})",
            path, r, name, stages, pp, vpp);
      if (a.stage % pp != r)
        throw_input(
            "{}: rank {} runs {}, an action of rank {} (stage s runs on rank s mod {}: "
            "PyTorch's loop placement; V-shaped placements are not modelled)",
            path, r, name, a.stage % pp, pp);
      if (a.microbatch >= microbatches)
        throw_input("{}: rank {} runs {} but a run of the schedule has {} micro-batches", path, r,
                    name, microbatches);
      if (!seen.insert(key(a)).second) throw_input("{}: rank {} runs {} twice", path, r, name);
      if ((a.kind == PipeAction::Backward || a.kind == PipeAction::BackwardInput) &&
          !seen.count({PipeAction::Forward, a.stage, a.microbatch}))
        throw_input("{}: rank {} runs {} before its forward", path, r, name);
      if (a.kind == PipeAction::BackwardWeight &&
          !seen.count({PipeAction::BackwardInput, a.stage, a.microbatch}))
        throw_input("{}: rank {} runs {} before its input gradient ({})", path, r, name,
                    action_name({a.stage, a.microbatch, PipeAction::BackwardInput}));
      comms = comms || !a.compute();
    }
  for (std::int32_t s = 0; s < stages; ++s)
    for (std::int32_t mb = 0; mb < microbatches; ++mb) {
      // A forward, and a full backward or its two halves.
      const bool split = seen.count({PipeAction::BackwardInput, s, mb}) > 0;
      if (split && seen.count({PipeAction::Backward, s, mb}))
        throw_input("{}: rank {} runs both {} and {}", path, s % pp,
                    action_name({s, mb, PipeAction::Backward}),
                    action_name({s, mb, PipeAction::BackwardInput}));
      for (const PipeAction k :
           {PipeAction::Forward, split ? PipeAction::BackwardInput : PipeAction::Backward,
            split ? PipeAction::BackwardWeight : PipeAction::Forward})
        if (!seen.count({k, s, mb}))
          throw_input("{}: rank {} never runs {}", path, s % pp, action_name({s, mb, k}));
    }
  // The transfers a compute action needs: a forward's input from the previous stage, a
  // backward's gradient from the next (none at the ends of the pipeline).
  // (A split backward's input half receives and sends; the weight half needs nothing.)
  const auto input_gradient = [](PipeAction k) {
    return k == PipeAction::Backward || k == PipeAction::BackwardInput;
  };
  const auto recv_of = [&](const PipelineAction& a) -> std::optional<PipelineAction> {
    if (a.kind == PipeAction::Forward && a.stage > 0)
      return PipelineAction{a.stage, a.microbatch, PipeAction::RecvF};
    if (input_gradient(a.kind) && a.stage < stages - 1)
      return PipelineAction{a.stage, a.microbatch, PipeAction::RecvB};
    return std::nullopt;
  };
  const auto send_of = [&](const PipelineAction& a) -> std::optional<PipelineAction> {
    if (a.kind == PipeAction::Forward && a.stage < stages - 1)
      return PipelineAction{a.stage, a.microbatch, PipeAction::SendF};
    if (input_gradient(a.kind) && a.stage > 0)
      return PipelineAction{a.stage, a.microbatch, PipeAction::SendB};
    return std::nullopt;
  };
  const auto peer_recv = [](const PipelineAction& send) {
    return send.kind == PipeAction::SendF
               ? PipelineAction{send.stage + 1, send.microbatch, PipeAction::RecvF}
               : PipelineAction{send.stage - 1, send.microbatch, PipeAction::RecvB};
  };
  const auto rank_of = [&](std::int32_t stage) { return static_cast<std::size_t>(stage % pp); };
  PipelineTable out(static_cast<std::size_t>(pp));
  if (comms) {
    // Every transfer given: each compute action's receive earlier in its row, its send later,
    // and no transfer without its compute action.
    for (std::int64_t r = 0; r < pp; ++r) {
      std::set<Key> before;
      for (const PipelineAction& a : table[static_cast<std::size_t>(r)]) {
        if (a.kind == PipeAction::Idle) continue;
        if (a.compute()) {
          if (const auto recv = recv_of(a); recv && !before.count(key(*recv)))
            throw_input("{}: rank {} runs {} without receiving its input first ({})", path, r,
                        action_name(a), action_name(*recv));
          if (const auto send = send_of(a); send && !seen.count(key(*send)))
            throw_input("{}: rank {} never sends what {} makes ({})", path, r, action_name(a),
                        action_name(*send));
        } else {
          const bool send = a.kind == PipeAction::SendF || a.kind == PipeAction::SendB;
          const bool forward = a.kind == PipeAction::SendF || a.kind == PipeAction::RecvF;
          PipelineAction compute{a.stage, a.microbatch,
                                 forward ? PipeAction::Forward : PipeAction::Backward};
          if (!forward && seen.count({PipeAction::BackwardInput, a.stage, a.microbatch}))
            compute.kind = PipeAction::BackwardInput;  // a split backward's input half
          if (send && !before.count(key(compute)))
            throw_input("{}: rank {} runs {} before {}", path, r, action_name(a),
                        action_name(compute));
          if (!send_of(compute) && !recv_of(compute))
            throw_input("{}: rank {} runs {}, a transfer at the end of the pipeline", path, r,
                        action_name(a));
          if (send && !seen.count(key(peer_recv(a))))
            throw_input("{}: rank {} runs {} but no rank runs {}", path, r, action_name(a),
                        action_name(peer_recv(a)));
        }
        before.insert(key(a));
      }
    }
    for (std::int64_t r = 0; r < pp; ++r)
      for (const PipelineAction& a : table[static_cast<std::size_t>(r)])
        if (a.kind != PipeAction::Idle) out[static_cast<std::size_t>(r)].push_back(a);
  }
  // A compute-only table as PyTorch's _prepare_schedule_with_comms prepares it before placing
  // the transfers: blanks dropped, FSDP's UNSHARD / RESHARD steps added (_add_unshard_reshard,
  // max_active_stages 3) and each stage's REDUCE_GRAD after its last backward
  // (_add_reduce_grad). Those steps run nothing here (the plan models them: Idle) but take
  // their rounds in the placement below, as in PyTorch.
  PipelineTable rows = table;
  if (!comms)
    for (auto& row : rows) {
      std::vector<PipelineAction> compute;
      for (const PipelineAction& a : row)
        if (a.kind != PipeAction::Idle) compute.push_back(a);
      std::vector<PipelineAction> prepared;
      const PipelineAction step{0, 0, PipeAction::Idle};
      std::vector<std::int32_t> active;  // stages unsharded, in order
      std::map<std::int32_t, std::int64_t> backwards;
      for (std::size_t i = 0; i < compute.size(); ++i) {
        std::vector<std::int32_t> next_n;  // the next 3 distinct stages from here
        for (std::size_t j = i; j < compute.size() && next_n.size() < 3; ++j)
          if (std::find(next_n.begin(), next_n.end(), compute[j].stage) == next_n.end())
            next_n.push_back(compute[j].stage);
        const auto in = [](const std::vector<std::int32_t>& v, std::int32_t x) {
          return std::find(v.begin(), v.end(), x) != v.end();
        };
        std::vector<std::int32_t> kept;
        for (std::int32_t st : active) {
          if (in(next_n, st))
            kept.push_back(st);
          else
            prepared.push_back(step);  // RESHARD
        }
        for (std::int32_t st : next_n)
          if (!in(kept, st)) {
            kept.push_back(st);
            prepared.push_back(step);  // UNSHARD
          }
        active = kept;
        prepared.push_back(compute[i]);
        if ((compute[i].kind == PipeAction::Backward ||
             compute[i].kind == PipeAction::BackwardWeight) &&
            ++backwards[compute[i].stage] == microbatches)
          prepared.push_back(step);  // REDUCE_GRAD
      }
      prepared.insert(prepared.end(), active.size(), step);  // the last RESHARDs
      row = std::move(prepared);
    }
  // Run the table: a compute-only one lowered on the way as PyTorch's _add_send_recv does (each
  // round, every rank takes the next step of its row once its input is there: its receive
  // placed, or the producing stage on the same rank done; a compute action's send follows it
  // and the peer's receive is placed in the peer's row now), one with transfers as it is (a
  // receive completes once its send ran).
  std::set<Key> done;
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::int64_t r = 0; r < pp; ++r) {
      const auto& row = rows[static_cast<std::size_t>(r)];
      for (std::size_t& k = next[static_cast<std::size_t>(r)]; k < row.size(); ++k) {
        const PipelineAction& a = row[k];
        if (a.kind == PipeAction::Idle) {  // always ready; takes its round in a compute-only one
          progress = true;
          if (!comms) {
            ++k;
            break;
          }
          continue;
        }
        if (comms) {
          if (a.kind == PipeAction::RecvF || a.kind == PipeAction::RecvB) {
            const PipelineAction sent{
                a.kind == PipeAction::RecvF ? a.stage - 1 : a.stage + 1, a.microbatch,
                a.kind == PipeAction::RecvF ? PipeAction::SendF : PipeAction::SendB};
            if (!done.count(key(sent))) break;
          }
          done.insert(key(a));
          progress = true;
          continue;
        }
        const auto recv = recv_of(a);
        if (recv && !done.count(key(*recv))) break;
        out[static_cast<std::size_t>(r)].push_back(a);
        done.insert(key(a));
        if (const auto send = send_of(a)) {
          out[static_cast<std::size_t>(r)].push_back(*send);
          const PipelineAction peer = peer_recv(*send);
          out[rank_of(peer.stage)].push_back(peer);
          done.insert(key(peer));
        }
        progress = true;
        ++k;
        break;  // one action per rank and round, as _add_send_recv
      }
    }
  }
  for (std::int64_t r = 0; r < pp; ++r) {
    const auto& row = rows[static_cast<std::size_t>(r)];
    const std::size_t k = next[static_cast<std::size_t>(r)];
    if (k < row.size())
      throw_input("{}: the table cannot run to its end: rank {} waits forever at {}", path, r,
                  action_name(row[k]));
  }
  return out;
}

}  // namespace scalescope::io
