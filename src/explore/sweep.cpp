#include "explore/sweep.hpp"

#include <algorithm>
#include <tuple>

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

Axis parallel_search(std::int64_t num_gpus, std::int64_t gpus_per_node, std::int64_t units) {
  SCALESCOPE_EXPECTS(num_gpus > 0 && gpus_per_node > 0 && units > 0);
  Axis a;
  a.name = "layout";
  for (std::int64_t tp = 1; tp <= std::min(gpus_per_node, num_gpus); tp *= 2)
    for (std::int64_t pp = 1; pp <= units && tp * pp <= num_gpus; pp *= 2)
      for (std::int64_t vpp = 1; vpp == 1 || (pp > 1 && vpp * pp <= units); ++vpp) {
        if (vpp > 1 && units % (pp * vpp) != 0) continue;
        std::vector<std::string> o = {
            "parallel.tp=" + std::to_string(tp), "parallel.pp=" + std::to_string(pp),
            vpp == 1 ? "parallel.vpp=" : "parallel.vpp=" + std::to_string(vpp), "parallel.dp="};
        if (tp == 1) {
          o.emplace_back("parallel.sequence_parallel=false");
          o.emplace_back("parallel.tp_comm_overlap=false");
        } else {
          o.emplace_back("parallel.sequence_parallel=true");
        }
        a.values.push_back(std::move(o));
      }
  return a;
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
    default:
      return "invalid";
  }
}

std::vector<std::size_t> rank_rows(const std::vector<Row>& rows) {
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  // (group, figure, index): group 0 fits, 1 replayed but does not fit, 2 not replayed and does
  // not fit (by peak memory), 3 refused (by index).
  const auto key = [&](std::size_t i) {
    const Row& r = rows[i];
    int group = 3;
    double figure = 0;
    if (r.status == Status::Ok) {
      group = 0;
      figure = r.iteration_time_s;
    } else if (r.status == Status::DoesNotFit && r.replayed) {
      group = 1;
      figure = r.iteration_time_s;
    } else if (r.status == Status::DoesNotFit) {
      group = 2;
      figure = static_cast<double>(r.peak_memory_bytes);
    }
    return std::make_tuple(group, figure, r.index);
  };
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  return order;
}

}  // namespace scalescope::explore
