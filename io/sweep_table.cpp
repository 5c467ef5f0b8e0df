#include "io/sweep_table.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <ostream>

#include "core/error.hpp"
#include "core/units.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace {

using Json = nlohmann::ordered_json;

/// A CSV field: quoted (with doubled quotes) when it holds a comma, quote or newline.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (const char ch : s) {
    if (ch == '"') q += '"';
    q += ch;
  }
  return q + "\"";
}

double gib(std::int64_t bytes) {
  return static_cast<double>(bytes) / units::kGiB;
}

explore::Status status_of(const std::string& name) {
  if (name == "ok") return explore::Status::Ok;
  if (name == "does_not_fit") return explore::Status::DoesNotFit;
  if (name == "invalid") return explore::Status::Invalid;
  if (name == "dominated") return explore::Status::Dominated;
  throw_io("sweep row: unknown status '{}'", name);
}

}  // namespace

Json sweep_row_json(const explore::Row& r) {
  Json j;
  j["index"] = r.index;
  j["status"] = explore::status_name(r.status);
  j["overrides"] = r.overrides;
  j["message"] = r.message;
  j["replayed"] = r.replayed;
  j["num_gpus"] = r.num_gpus;
  j["tp"] = r.tp;
  j["pp"] = r.pp;
  j["dp"] = r.dp;
  j["cp"] = r.cp;
  j["ep"] = r.ep;
  j["vpp"] = r.vpp;
  j["micro_batch_size"] = r.micro_batch;
  j["iteration_time_s"] = r.iteration_time_s;
  j["tokens_per_s"] = r.tokens_per_s;
  j["model_tflops_per_gpu"] = r.model_tflops_per_gpu;
  j["mfu"] = r.mfu;
  j["compute_s"] = r.compute_s;
  j["exposed_comm_s"] = r.exposed_comm_s;
  j["bubble_s"] = r.bubble_s;
  j["straggler_wait_s"] = r.straggler_wait_s;
  j["host_wait_s"] = r.host_wait_s;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["peak_allocated_bytes"] = r.peak_allocated_bytes;
  j["peak_reserved_bytes"] = r.peak_reserved_bytes;
  j["memory_capacity_bytes"] = r.memory_capacity_bytes;
  if (r.lower_bound_s > 0) j["lower_bound_s"] = r.lower_bound_s;
  return j;
}

explore::Row sweep_row_from_json(const Json& j) {
  try {
    explore::Row r;
    r.index = j.at("index").get<std::size_t>();
    r.status = status_of(j.at("status").get<std::string>());
    r.overrides = j.at("overrides").get<std::vector<std::string>>();
    r.message = j.at("message").get<std::string>();
    r.replayed = j.at("replayed").get<bool>();
    r.num_gpus = j.at("num_gpus").get<std::int64_t>();
    r.tp = j.at("tp").get<std::int64_t>();
    r.pp = j.at("pp").get<std::int64_t>();
    r.dp = j.at("dp").get<std::int64_t>();
    r.cp = j.at("cp").get<std::int64_t>();
    r.ep = j.at("ep").get<std::int64_t>();
    r.vpp = j.at("vpp").get<std::int64_t>();
    r.micro_batch = j.at("micro_batch_size").get<std::int64_t>();
    r.iteration_time_s = j.at("iteration_time_s").get<double>();
    r.tokens_per_s = j.at("tokens_per_s").get<double>();
    r.model_tflops_per_gpu = j.at("model_tflops_per_gpu").get<double>();
    r.mfu = j.at("mfu").get<double>();
    r.compute_s = j.at("compute_s").get<double>();
    r.exposed_comm_s = j.at("exposed_comm_s").get<double>();
    r.bubble_s = j.at("bubble_s").get<double>();
    r.straggler_wait_s = j.value("straggler_wait_s", 0.0);
    r.host_wait_s = j.at("host_wait_s").get<double>();
    r.peak_memory_bytes = j.at("peak_memory_bytes").get<std::int64_t>();
    r.peak_allocated_bytes = j.value("peak_allocated_bytes", std::int64_t{0});
    r.peak_reserved_bytes = j.value("peak_reserved_bytes", std::int64_t{0});
    r.memory_capacity_bytes = j.at("memory_capacity_bytes").get<std::int64_t>();
    r.lower_bound_s = j.value("lower_bound_s", 0.0);
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw_io("sweep row: {}", e.what());
  }
}

std::string sweep_csv(const std::vector<explore::Row>& rows,
                      const std::vector<std::size_t>& order) {
  std::string out =
      "rank,index,status,iteration_time_s,tokens_per_s,model_tflops_per_gpu,mfu,"
      "peak_memory_gib,memory_capacity_gib,num_gpus,tp,pp,dp,cp,ep,vpp,micro_batch_size,"
      "compute_s,exposed_comm_s,bubble_s,straggler_wait_s,host_wait_s,replayed,peak_allocated_gib,"
      "peak_reserved_gib,overrides,message\n";
  std::size_t rank = 0;
  for (const std::size_t i : order) {
    const explore::Row& r = rows[i];
    // A figure the row does not have is an empty cell, never a 0 that sorts first: the replay's
    // figures of a row not replayed, every figure of a refused (invalid) one.
    const bool checked = r.status != explore::Status::Invalid;
    const auto cell = [](bool has, auto v) { return has ? fmt::format("{}", v) : std::string(); };
    out += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
        ++rank, r.index, explore::status_name(r.status), cell(r.replayed, r.iteration_time_s),
        cell(r.replayed, r.tokens_per_s), cell(r.replayed, r.model_tflops_per_gpu),
        cell(r.replayed, r.mfu), cell(checked, gib(r.peak_memory_bytes)),
        cell(checked, gib(r.memory_capacity_bytes)), cell(checked, r.num_gpus), cell(checked, r.tp),
        cell(checked, r.pp), cell(checked, r.dp), cell(checked, r.cp), cell(checked, r.ep),
        cell(checked, r.vpp), cell(checked, r.micro_batch), cell(r.replayed, r.compute_s),
        cell(r.replayed, r.exposed_comm_s), cell(r.replayed, r.bubble_s),
        cell(r.replayed, r.straggler_wait_s), cell(r.replayed, r.host_wait_s),
        r.replayed ? "true" : "false", cell(checked, gib(r.peak_allocated_bytes)),
        cell(checked, gib(r.peak_reserved_bytes)),
        csv_field(fmt::format("{}", fmt::join(r.overrides, " "))), csv_field(r.message));
  }
  return out;
}

void write_sweep(const std::string& dir, const std::string& experiment,
                 const std::vector<explore::Axis>& axes, const std::vector<explore::Row>& rows,
                 const std::vector<std::size_t>& order) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_io("{}: cannot create the output directory: {}", dir, ec.message());
  const std::string csv = sweep_csv(rows, order);
  Json j;
  j["experiment"] = experiment;
  Json ax = Json::array();
  for (const explore::Axis& a : axes) ax.push_back({{"name", a.name}, {"values", a.values}});
  j["axes"] = ax;
  j["configurations"] = rows.size();
  Json ranked = Json::array();
  for (const std::size_t i : order) ranked.push_back(sweep_row_json(rows[i]));
  j["rows"] = ranked;
  // Both through temporaries; the JSON last, so a complete sweep.json means a complete table.
  write_text_via_temporary((std::filesystem::path(dir) / "sweep.csv").string(),
                           [&](std::ostream& out) { out << csv; });
  write_text_via_temporary((std::filesystem::path(dir) / "sweep.json").string(),
                           [&](std::ostream& out) { out << j.dump(2) << "\n"; });
}

std::string format_sweep_table(const std::vector<explore::Row>& rows,
                               const std::vector<std::size_t>& order, std::size_t top) {
  std::string out = fmt::format(
      "{:>4} {:>3} {:>3} {:>5} {:>3} {:>3} {:>3} {:>3}  {:>10} {:>8} {:>6} "
      "{:>9} {:>9}  {:<12} {}\n",
      "rank", "TP", "PP", "DP", "CP", "EP", "VPP", "MBS", "iter (s)", "TFLOP/s", "MFU", "alloc GiB",
      "total GiB", "status", "overrides");
  std::size_t shown = 0, left_ok = 0, left_unfit = 0, left_invalid = 0, left_dominated = 0;
  for (const std::size_t i : order) {
    const explore::Row& r = rows[i];
    if (top > 0 && shown >= top) {
      if (r.status == explore::Status::Ok) ++left_ok;
      if (r.status == explore::Status::DoesNotFit) ++left_unfit;
      if (r.status == explore::Status::Invalid) ++left_invalid;
      if (r.status == explore::Status::Dominated) ++left_dominated;
      continue;
    }
    ++shown;
    const std::string overrides = fmt::format("{}", fmt::join(r.overrides, " "));
    if (r.status == explore::Status::Invalid) {
      out += fmt::format("{:>4} {:>80}  {:<12} {}\n     refused: {}\n", shown, "", "invalid",
                         overrides, r.message);
      continue;
    }
    const std::string time = r.replayed
                                 ? fmt::format("{:10.4f} {:8.1f} {:5.1f}%", r.iteration_time_s,
                                               r.model_tflops_per_gpu, 100 * r.mfu)
                                 : fmt::format("{:>10} {:>8} {:>6}", "-", "-", "-");
    out += fmt::format(
        "{:>4} {:>3} {:>3} {:>5} {:>3} {:>3} {:>3} {:>3}  {} {:9.2f} {:9.2f}  {:<12} {}\n", shown,
        r.tp, r.pp, r.dp, r.cp, r.ep, r.vpp, r.micro_batch, time, gib(r.peak_allocated_bytes),
        gib(r.peak_memory_bytes), explore::status_name(r.status), overrides);
  }
  if (left_ok + left_unfit + left_invalid + left_dominated > 0)
    out += fmt::format(
        "… {} more: {} ok, {} dominated before their replay, {} do not fit, {} refused (all in "
        "sweep.csv)\n",
        left_ok + left_unfit + left_invalid + left_dominated, left_ok, left_dominated, left_unfit,
        left_invalid);
  return out;
}

}  // namespace scalescope::io
