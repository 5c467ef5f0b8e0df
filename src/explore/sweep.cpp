#include "explore/sweep.hpp"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"

namespace scalescope::explore {

Axis parse_vary(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw_input("--vary '{}': expected section.key=value1,value2,…", text);
  Axis a;
  a.name = text.substr(0, eq);
  const std::string list = text.substr(eq + 1);
  if (list.empty()) throw_input("--vary '{}': no values after '='", text);
  int depth = 0;
  std::string value;
  const auto flush = [&] {
    if (value.find_first_not_of(" \t") == std::string::npos)
      throw_input("--vary '{}': empty value in the list", text);
    a.values.push_back({a.name + "=" + value});
    value.clear();
  };
  for (const char ch : list) {
    if (ch == '[' || ch == '{') ++depth;
    if (ch == ']' || ch == '}') --depth;
    if (depth < 0) throw_input("--vary '{}': unbalanced brackets", text);
    if (ch == ',' && depth == 0)
      flush();
    else
      value += ch;
  }
  if (depth != 0) throw_input("--vary '{}': unbalanced brackets", text);
  flush();
  return a;
}

namespace {

/// The pipeline layouts of a search: every TP that is a power of two up to the GPUs of a node,
/// every PP that is a power of two up to the pipeline's units and the GPUs left, and VPP 1 or,
/// with PP > 1, every interleaving ≥ 2 (at most `max_vpp`; 0: any) whose PP · VPP chunks divide
/// the units: fn(tp, pp, vpp).
template <class Fn>
void for_each_pipeline_layout(std::int64_t num_gpus, std::int64_t gpus_per_node, std::int64_t units,
                              std::int64_t max_vpp, Fn fn) {
  for (std::int64_t tp = 1; tp <= std::min(gpus_per_node, num_gpus); tp *= 2)
    for (std::int64_t pp = 1; pp <= units && tp * pp <= num_gpus; pp *= 2)
      for (std::int64_t vpp = 1;
           vpp == 1 || (pp > 1 && vpp * pp <= units && (max_vpp == 0 || vpp <= max_vpp)); ++vpp) {
        if (vpp > 1 && units % (pp * vpp) != 0) continue;
        fn(tp, pp, vpp);
      }
}

/// What goes with a TP: sequence parallelism with TP > 1 (Megatron's recipes; required for MoE
/// with TP); off at TP 1, where Megatron switches it off, with TE's TP overlap.
void add_tp_companions(std::vector<std::string>& o, std::int64_t tp) {
  if (tp == 1) {
    o.emplace_back("parallel.sequence_parallel=false");
    o.emplace_back("parallel.tp_comm_overlap=false");
  } else {
    o.emplace_back("parallel.sequence_parallel=true");
  }
}

std::string vpp_override(std::int64_t vpp) {
  return vpp == 1 ? "parallel.vpp=" : "parallel.vpp=" + std::to_string(vpp);
}

}  // namespace

Axis parallel_search(std::int64_t num_gpus, std::int64_t gpus_per_node, std::int64_t units) {
  SCALESCOPE_EXPECTS(num_gpus > 0 && gpus_per_node > 0 && units > 0);
  Axis a;
  a.name = "layout";
  for_each_pipeline_layout(num_gpus, gpus_per_node, units, 0,
                           [&](std::int64_t tp, std::int64_t pp, std::int64_t vpp) {
                             std::vector<std::string> o = {"parallel.tp=" + std::to_string(tp),
                                                           "parallel.pp=" + std::to_string(pp),
                                                           vpp_override(vpp), "parallel.dp="};
                             add_tp_companions(o, tp);
                             a.values.push_back(std::move(o));
                           });
  return a;
}

Axis layout_search(const LayoutSpace& s) {
  SCALESCOPE_EXPECTS(s.num_gpus > 0 && s.gpus_per_node > 0 && s.units > 0);
  Axis a;
  a.name = "layout";
  std::vector<std::int64_t> eps = {1};
  for (std::int64_t ep = 2; s.num_experts > 0 && ep <= s.num_experts && ep <= s.num_gpus; ep *= 2)
    if (s.num_experts % ep == 0) eps.push_back(ep);
  for_each_pipeline_layout(
      s.num_gpus, s.gpus_per_node, s.units, 2,
      [&](std::int64_t tp, std::int64_t pp, std::int64_t vpp) {
        for (std::int64_t cp = 1; cp <= 8 && tp * pp * cp <= s.num_gpus; cp *= 2) {
          if (s.num_gpus % (tp * pp * cp) != 0) continue;
          const std::int64_t dp = s.num_gpus / (tp * pp * cp);
          for (const std::int64_t ep : eps) {
            if ((s.num_gpus / pp) % ep != 0) continue;
            for (const std::int64_t mbs : {1, 2, 4}) {
              if (s.global_batch > 0 && s.global_batch % (mbs * dp) != 0) continue;
              for (const char* recompute : {"none", "selective", "full"})
                for (const bool fsdp : {false, true}) {
                  std::vector<std::string> o = {"parallel.tp=" + std::to_string(tp),
                                                "parallel.pp=" + std::to_string(pp),
                                                vpp_override(vpp),
                                                "parallel.cp=" + std::to_string(cp),
                                                "parallel.dp=",
                                                "training.micro_batch_size=" + std::to_string(mbs),
                                                std::string("parallel.recompute=") + recompute};
                  if (s.num_experts > 0) {
                    o.push_back("parallel.ep=" + std::to_string(ep));
                    o.emplace_back("parallel.expert_tensor_parallel_size=1");
                  }
                  add_tp_companions(o, tp);
                  if (fsdp) {
                    o.emplace_back("parallel.fsdp=true");
                    o.emplace_back("parallel.zero_stage=3");
                    o.emplace_back("parallel.overlap_param_gather=false");
                  } else {
                    o.emplace_back("parallel.use_distributed_optimizer=true");
                  }
                  a.values.push_back(std::move(o));
                }
            }
          }
        }
      });
  return a;
}

bool dominates(const Row& r, double lower_bound_s, std::int64_t memory) {
  return r.status == Status::Ok && r.replayed && r.iteration_time_s <= lower_bound_s &&
         r.peak_memory_bytes <= memory;
}

std::vector<std::vector<std::string>> expand(const std::vector<Axis>& axes) {
  std::vector<std::vector<std::string>> points{{}};
  for (const Axis& axis : axes) {
    SCALESCOPE_EXPECTS(!axis.values.empty());
    std::vector<std::vector<std::string>> next;
    next.reserve(points.size() * axis.values.size());
    for (const auto& p : points)
      for (const auto& v : axis.values) {
        std::vector<std::string> q = p;
        q.insert(q.end(), v.begin(), v.end());
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  return points;
}

const char* status_name(Status s) {
  switch (s) {
    case Status::Ok:
      return "ok";
    case Status::DoesNotFit:
      return "does_not_fit";
    case Status::Dominated:
      return "dominated";
    default:
      return "invalid";
  }
}

std::vector<std::size_t> rank_rows(const std::vector<Row>& rows) {
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  // (group, figure, index): group 0 fits, 1 dominated (by its lower bound), 2 replayed but does
  // not fit, 3 not replayed and does not fit (by peak memory), 4 refused (by index).
  const auto key = [&](std::size_t i) {
    const Row& r = rows[i];
    int group = 4;
    double figure = 0;
    if (r.status == Status::Ok) {
      group = 0;
      figure = r.iteration_time_s;
    } else if (r.status == Status::Dominated) {
      group = 1;
      figure = r.lower_bound_s;
    } else if (r.status == Status::DoesNotFit && r.replayed) {
      group = 2;
      figure = r.iteration_time_s;
    } else if (r.status == Status::DoesNotFit) {
      group = 3;
      figure = static_cast<double>(r.peak_memory_bytes);
    } else {
      group = 4;
    }
    return std::make_tuple(group, figure, r.index);
  };
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  return order;
}

}  // namespace scalescope::explore
