#include "io/profile_io.hpp"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace {

constexpr std::uint32_t kProfileFormatVersion = 1;

std::vector<std::uint8_t> join(const std::vector<std::string>& v) {
  std::vector<std::uint8_t> out;
  for (const std::string& s : v) {
    out.insert(out.end(), s.begin(), s.end());
    out.push_back('\n');
  }
  return out;
}
std::vector<std::string> split(const std::vector<std::uint8_t>& bytes) {
  std::vector<std::string> out;
  std::string cur;
  for (std::uint8_t b : bytes) {
    if (b == '\n') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(b));
    }
  }
  return out;
}

}  // namespace

void write_ops_json(const graph::SlicedGraph& g, const cost::CostModel& model,
                    const std::string& experiment, const std::string& path) {
  std::vector<const graph::RankProgram*> programs;
  for (const graph::RankProgram& t : g.templates) programs.push_back(&t);
  write_ops_json(programs, model, experiment, path);
}

void write_ops_json(const std::vector<const graph::RankProgram*>& programs,
                    const cost::CostModel& model, const std::string& experiment,
                    const std::string& path) {
  struct Row {
    cost::KernelSig sig;
    std::int64_t count = 0;
    double model_s = 0;
  };
  std::map<std::string, Row> rows;
  for (const graph::RankProgram* t : programs)
    for (const graph::Op& op : t->ops) {
      const cost::KernelSig s = cost::kernel_signature(op);
      if (!s.measurable()) continue;
      Row& r = rows[s.key()];
      r.sig = s;
      ++r.count;
      // The model's time of one run of the kernel (a grouped GEMM's op is `repeat` runs).
      r.model_s = ns_to_seconds(model.compute_ns(op)) / s.repeat;
    }
  nlohmann::ordered_json j;
  j["format"] = "scalescope-ops/1";
  j["experiment"] = experiment;
  j["gpu"] = model.gpu().name;
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (const auto& [key, r] : rows) {
    const auto& d = r.sig.dims;
    nlohmann::ordered_json o;
    o["sig"] = key;
    o["kernel"] = std::string(cost::kernel_class_name(r.sig.kernel));
    switch (r.sig.kernel) {
      case cost::KernelClass::Gemm:
        o["dtype"] = r.sig.fp8 ? "fp8" : "bf16";
        o["m"] = d[0];
        o["n"] = d[1];
        o["k"] = d[2];
        break;
      case cost::KernelClass::Attention:
        o["pass"] = r.sig.backward ? "bwd" : "fwd";
        o["batch_heads"] = d[0];
        o["seq_q"] = d[1];
        o["seq_k"] = d[2];
        o["head_dim"] = d[3];
        o["head_dim_v"] = d[4];
        o["causal"] = r.sig.causal;
        break;
      case cost::KernelClass::Rope:
        o["pass"] = r.sig.backward ? "bwd" : "fwd";
        o["rows"] = d[0];
        o["heads"] = d[1];
        o["dim"] = d[2];
        break;
      case cost::KernelClass::Adam:
        o["params"] = d[0];
        break;
      case cost::KernelClass::Embedding:
        o["pass"] = r.sig.backward ? "bwd" : "fwd";
        o["rows"] = d[0];
        o["cols"] = d[1];
        o["vocab"] = d[2];
        break;
      case cost::KernelClass::Copy:
        o["bytes"] = d[0];
        break;
      case cost::KernelClass::CrossEntropy:
        o["pass"] = r.sig.backward ? "bwd" : "fwd";
        o["rows"] = d[0];
        o["vocab"] = d[1];
        break;
      default:
        o["pass"] = r.sig.backward ? "bwd" : "fwd";
        o["rows"] = d[0];
        o["cols"] = d[1];
        break;
    }
    o["count"] = r.count;
    o["model_us"] = r.model_s * 1e6;
    ops.push_back(o);
  }
  j["ops"] = ops;
  write_text_via_temporary(path, [&](std::ostream& out) { out << j.dump(1) << "\n"; });
}

cost::Profile read_measured_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_input("{}: cannot open measured.json", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw_input("{}: malformed JSON: {}", path, e.what());
  }
  const auto str = [&](const nlohmann::json& o, const char* key) -> std::string {
    const auto it = o.find(key);
    if (it == o.end() || it->is_null()) return {};
    return it->is_string() ? it->get<std::string>() : it->dump();
  };
  if (!j.is_object() || str(j, "format") != "scalescope-measured/1")
    throw_input("{}: format: expected \"scalescope-measured/1\"", path);
  if (!j.contains("results") || !j["results"].is_array())
    throw_input("{}: results: expected a list", path);
  cost::Profile p;
  p.device = str(j, "device");
  p.backend = "cuda";
  p.source = path;
  p.versions =
      fmt::format("compute capability {}; driver {}; CUDA runtime {}; cuBLAS {}; cuDNN {}; {}",
                  str(j, "compute_capability"), str(j, "driver"), str(j, "cuda_runtime"),
                  str(j, "cublas"), str(j, "cudnn"), str(j, "tool"));
  std::size_t i = 0;
  for (const auto& r : j["results"]) {
    const auto bad = [&](const char* key) {
      throw_input("{}: results[{}].{}: missing or not a number", path, i, key);
    };
    if (!r.is_object() || !r.contains("sig") || !r["sig"].is_string())
      throw_input("{}: results[{}].sig: missing", path, i);
    cost::ProfileEntry e;
    for (const char* key : {"median_us", "p10_us", "p90_us"})
      if (!r.contains(key) || !r[key].is_number()) bad(key);
    e.median_s = r["median_us"].get<double>() * 1e-6;
    e.p10_s = r["p10_us"].get<double>() * 1e-6;
    e.p90_s = r["p90_us"].get<double>() * 1e-6;
    if (!(e.median_s > 0)) throw_input("{}: results[{}].median_us: must be > 0", path, i);
    e.reps =
        r.contains("reps") && r["reps"].is_number_integer() ? r["reps"].get<std::int64_t>() : 0;
    e.impl = str(r, "impl");
    p.entries.insert_or_assign(r["sig"].get<std::string>(), e);
    ++i;
  }
  return p;
}

namespace {

void write_profile_group(const h5::Group& g, const cost::Profile& p) {
  std::vector<std::string> sigs, impls;
  std::vector<double> median, p10, p90;
  std::vector<std::int64_t> reps;
  for (const auto& [sig, e] : p.entries) {
    sigs.push_back(sig);
    impls.push_back(e.impl);
    median.push_back(e.median_s);
    p10.push_back(e.p10_s);
    p90.push_back(e.p90_s);
    reps.push_back(e.reps);
  }
  g.set_attribute("format_version", kProfileFormatVersion);
  g.set_attribute("device", p.device);
  g.set_attribute("backend", p.backend);
  g.set_attribute("versions", p.versions);
  g.set_attribute("source", p.source);
  g.set_attribute("op_scale", p.op_scale);
  g.write("signatures", join(sigs));
  g.write("impl", join(impls));
  g.write("median_s", median);
  g.write("p10_s", p10);
  g.write("p90_s", p90);
  g.write("reps", reps);
}

cost::Profile read_profile_group(const h5::Group& g) {
  const auto version = g.attribute<std::uint32_t>("format_version");
  if (version != kProfileFormatVersion)
    g.fail(fmt::format("format_version {} is not supported (this build reads {})", version,
                       kProfileFormatVersion));
  cost::Profile p;
  p.device = g.string_attribute("device");
  p.backend = g.string_attribute("backend");
  p.versions = g.string_attribute("versions");
  p.source = g.string_attribute("source");
  p.op_scale = g.attribute<double>("op_scale");
  const auto sigs = split(g.read<std::uint8_t>("signatures"));
  const auto impls = split(g.read<std::uint8_t>("impl"));
  const auto median = g.read<double>("median_s");
  const auto p10 = g.read<double>("p10_s");
  const auto p90 = g.read<double>("p90_s");
  const auto reps = g.read<std::int64_t>("reps");
  const std::size_t n = sigs.size();
  if (impls.size() != n || median.size() != n || p10.size() != n || p90.size() != n ||
      reps.size() != n)
    g.fail(fmt::format("{} signatures but columns of other lengths", n));
  for (std::size_t i = 0; i < n; ++i) {
    if (!(median[i] > 0)) g.fail(fmt::format("median_s[{}] = {} is not > 0", i, median[i]));
    p.entries.insert_or_assign(sigs[i],
                               cost::ProfileEntry{median[i], p10[i], p90[i], reps[i], impls[i]});
  }
  return p;
}

}  // namespace

void write_profile_h5(const cost::Profile& p, const std::string& path) {
  write_via_temporary(path, [&](const std::string& tmp) {
    h5::File file = h5::File::create(tmp, path);
    write_profile_group(file.root().create_group("profile"), p);
    file.close();
  });
}

cost::Profile read_profile_h5(const std::string& path) {
  h5::silence_errors();
  const h5::File file = h5::File::open(path);
  return read_profile_group(file.root().open_group("profile"));
}

void write_sandbox_group(const std::string& results_h5, const cost::Profile& measured,
                         const std::vector<std::uint32_t>& ranks) {
  h5::File file = h5::File::open(results_h5, true);
  {
    const h5::Group g = file.root().create_group("sandbox");
    write_profile_group(g, measured);
    std::vector<std::uint32_t> r(ranks.begin(), ranks.end());
    g.write("ranks", r);
  }
  file.close();
}

cost::Profile read_sandbox_group(const std::string& results_h5, std::vector<std::uint32_t>* ranks) {
  h5::silence_errors();
  const h5::File file = h5::File::open(results_h5);
  const h5::Group root = file.root();
  if (!root.exists("sandbox"))
    root.fail("no /sandbox group: not the results of a hybrid run (run --sandbox …)");
  const h5::Group g = root.open_group("sandbox");
  if (ranks != nullptr) *ranks = g.read<std::uint32_t>("ranks");
  return read_profile_group(g);
}

}  // namespace scalescope::io
