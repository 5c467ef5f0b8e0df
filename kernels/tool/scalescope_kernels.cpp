// scalescope-kernels OPS.json -o MEASURED.json [--max-seconds S] [--only KERNEL]
//
// Measures every distinct signature of an ops.json (docs/kernels.md) once on the first visible
// CUDA device and writes measured.json. Exit codes: 0 success, 77 no CUDA device visible,
// 1 a CUDA error stopped the run (measured.json still written with what was measured), 2 usage or
// malformed input.
#include "bench.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using scalescope::cuda::OpSpec;
using scalescope::cuda::Outcome;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr const char* kTool = "scalescope-kernels 0.1";
constexpr double kPerSignatureSeconds = 1.0;

struct Malformed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::string ops, out, only;
  double max_seconds = 0;  // 0: no limit
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "scalescope-kernels: " << why << "\n"
            << "usage: scalescope-kernels OPS.json -o MEASURED.json [--max-seconds S] "
               "[--only KERNEL]\n";
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + s);
      return argv[++i];
    };
    if (s == "-o" || s == "--output")
      a.out = value();
    else if (s == "--max-seconds") {
      const std::string v = value();
      try {
        size_t pos = 0;
        a.max_seconds = std::stod(v, &pos);
        if (pos != v.size() || a.max_seconds < 0) throw std::invalid_argument(v);
      } catch (const std::exception&) {
        usage("--max-seconds wants a non-negative number, got '" + v + "'");
      }
    } else if (s == "--only")
      a.only = value();
    else if (s == "-h" || s == "--help")
      usage("measures an ops.json on the GPU");
    else if (!s.empty() && s[0] == '-')
      usage("unknown option " + s);
    else if (a.ops.empty())
      a.ops = s;
    else
      usage("more than one OPS.json given");
  }
  if (a.ops.empty()) usage("no OPS.json given");
  if (a.out.empty()) usage("no -o MEASURED.json given");
  return a;
}

int64_t int_field(const json& op, const char* key, const std::string& where) {
  const auto it = op.find(key);
  if (it == op.end() || !it->is_number_integer())
    throw Malformed(where + ": missing integer field '" + key + "'");
  return it->get<int64_t>();
}
std::string str_field(const json& op, const char* key, const std::string& where) {
  const auto it = op.find(key);
  if (it == op.end() || !it->is_string())
    throw Malformed(where + ": missing string field '" + key + "'");
  return it->get<std::string>();
}

// Fields of each kernel's row of docs/kernels.md (besides sig and kernel).
OpSpec to_spec(const json& op, const std::string& where) {
  OpSpec s;
  s.sig = str_field(op, "sig", where);
  s.kernel = str_field(op, "kernel", where);
  const std::string w = where + " (" + s.sig + ")";
  const auto ints = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) s.dims[k] = int_field(op, k, w);
  };
  const auto pass = [&] { s.pass = str_field(op, "pass", w); };
  const std::string& k = s.kernel;
  if (k == "gemm") {
    ints({"m", "n", "k"});
    s.dtype = str_field(op, "dtype", w);
  } else if (k == "attention") {
    pass();
    ints({"batch_heads", "seq_q", "seq_k", "head_dim", "head_dim_v"});
    const auto it = op.find("causal");
    if (it == op.end() || !(it->is_boolean() || it->is_number_integer()))
      throw Malformed(w + ": missing boolean field 'causal'");
    s.causal = it->is_boolean() ? it->get<bool>() : it->get<int64_t>() != 0;
  } else if (k == "rmsnorm" || k == "layernorm" || k == "swiglu" || k == "gelu") {
    pass();
    ints({"rows", "cols"});
  } else if (k == "rope") {
    pass();
    ints({"rows", "heads", "dim"});
  } else if (k == "add") {
    ints({"elements"});
  } else if (k == "cross_entropy") {
    pass();
    ints({"rows", "vocab"});
  } else if (k == "adam") {
    ints({"params"});
  } else if (k == "embedding") {
    pass();
    ints({"rows", "cols", "vocab"});
  } else if (k == "copy") {
    ints({"bytes"});
  }
  return s;  // unknown kernels pass through and are skipped later
}

std::vector<OpSpec> read_ops(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Malformed("cannot open");
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    throw Malformed(std::string("not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) throw Malformed("top level is not an object");
  if (const auto f = doc.find("format");
      f != doc.end() && (!f->is_string() || f->get<std::string>() != "scalescope-ops/1"))
    throw Malformed("format is not \"scalescope-ops/1\"");
  const auto ops = doc.find("ops");
  if (ops == doc.end() || !ops->is_array()) throw Malformed("no \"ops\" array");
  std::vector<OpSpec> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < ops->size(); ++i) {
    const json& op = (*ops)[i];
    const std::string where = "ops[" + std::to_string(i) + "]";
    if (!op.is_object()) throw Malformed(where + " is not an object");
    OpSpec s = to_spec(op, where);
    if (seen.insert(s.sig).second) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  std::vector<OpSpec> ops;
  try {
    ops = read_ops(args.ops);
  } catch (const Malformed& e) {
    std::cerr << "scalescope-kernels: error: " << args.ops << ": " << e.what() << "\n";
    return 2;
  }

  const scalescope::cuda::DeviceInfo dev = scalescope::cuda::query_device();
  if (!dev.present) {
    std::cout << "scalescope-kernels: no CUDA device visible (" << dev.error
              << "); nothing measured\n";
    return 77;
  }
  std::cerr << "scalescope-kernels: " << dev.name << " (sm " << dev.compute_capability << ", "
            << dev.sms << " SMs, " << dev.free_bytes / (1 << 20) << " MiB free), " << ops.size()
            << " signatures from " << args.ops << "\n";

  ojson results = ojson::array(), skipped = ojson::array();
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // The output is rewritten (through a temporary name) after every signature, so a run cut short
  // by a timeout keeps what it measured.
  const auto write_out = [&]() -> bool {
    ojson doc;
    doc["format"] = "scalescope-measured/1";
    doc["device"] = dev.name;
    doc["compute_capability"] = dev.compute_capability;
    doc["driver"] = dev.driver;
    doc["cuda_runtime"] = dev.cuda_runtime;
    doc["cublas"] = dev.cublas;
    doc["cudnn"] = dev.cudnn;
    doc["tool"] = kTool;
    doc["results"] = results;
    doc["skipped"] = skipped;
    const std::string tmp = args.out + ".tmp";
    {
      std::ofstream out(tmp);
      if (!out) return false;
      out << doc.dump(2) << "\n";
      out.close();
      if (!out) return false;
    }
    return std::rename(tmp.c_str(), args.out.c_str()) == 0;
  };
  bool fatal = false;
  std::string fatal_why;
  for (const OpSpec& s : ops) {
    if (!args.only.empty() && s.kernel != args.only) continue;
    if (fatal) {
      skipped.push_back(
          {{"sig", s.sig}, {"why", "not run: an earlier CUDA error (" + fatal_why + ")"}});
      continue;
    }
    if (!scalescope::cuda::known_kernel(s.kernel)) {
      skipped.push_back({{"sig", s.sig}, {"why", "unknown kernel '" + s.kernel + "'"}});
      continue;
    }
    double budget = kPerSignatureSeconds;
    if (args.max_seconds > 0) {
      const double left = args.max_seconds - elapsed();
      if (left < 0.05) {
        skipped.push_back({{"sig", s.sig}, {"why", "time budget (--max-seconds) spent"}});
        continue;
      }
      budget = std::min(budget, left);
    }
    const Outcome o = scalescope::cuda::measure(s, budget);
    if (o.kind == Outcome::Kind::Measured) {
      const auto& m = o.m;
      results.push_back({{"sig", s.sig},
                         {"median_us", m.median_us},
                         {"p10_us", m.p10_us},
                         {"p90_us", m.p90_us},
                         {"reps", m.reps},
                         {"tflops", m.tflops},
                         {"gbps", m.gbps},
                         {"impl", m.impl}});
      std::fprintf(stderr, "  %-64s %12.2f us %9.1f TFLOP/s %8.1f GB/s\n", s.sig.c_str(),
                   m.median_us, m.tflops, m.gbps);
    } else {
      skipped.push_back({{"sig", s.sig}, {"why", o.why}});
      std::fprintf(stderr, "  %-64s skipped: %s\n", s.sig.c_str(), o.why.c_str());
      if (o.kind == Outcome::Kind::Fatal) {
        fatal = true;
        fatal_why = o.why;
      }
    }
    (void)write_out();
  }

  if (!write_out()) {
    std::cerr << "scalescope-kernels: error: cannot write " << args.out << "\n";
    return 2;
  }
  if (fatal) {
    std::cerr << "scalescope-kernels: error: CUDA error stopped the run: " << fatal_why << "\n";
    return 1;
  }
  return 0;
}
