// scalescope-phold: the PHOLD benchmark (ROSS's definition) on the sequential, the optimistic or
// the conservative engine. Times are given in PHOLD units (mean 1.0, lookahead 0.1 as in ROSS); the
// engine counts 10^6 ticks per unit (pdes::kPholdTicksPerUnit).
//
//   mpirun -np 2 scalescope-phold --lps-per-process 16384 --remote 0.25 --end 200
//       --engine optimistic|conservative [--partition block|metis] [--json FILE]
#include <mpi.h>

#include <sys/resource.h>
#include "core/sanitizer_defaults.hpp"

#include <CLI/CLI.hpp>
#include <array>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/mpi_singleton.hpp"
#include "pdes/conservative_engine.hpp"
#include "pdes/optimistic_engine.hpp"
#include "pdes/partitioner.hpp"
#include "pdes/phold.hpp"
#include "pdes/sequential_engine.hpp"

using namespace scalescope;
using namespace scalescope::pdes;

namespace {

constexpr std::size_t kPerProcess = 8;  ///< figures per process in Report::per_process

/// MPI lifetime for the process; every normal exit path finalizes.
struct MpiSession {
  scalescope::core::PrivateMpiSessionRoot root;  // before MPI_Init (core/mpi_singleton.hpp)
  MpiSession(int* argc, char*** argv) { MPI_Init(argc, argv); }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

struct Options {
  std::uint32_t lps_per_process = 1024;
  std::uint32_t start_events = 1;
  double remote = 0.25;
  double mean = 1.0;
  double lookahead = 0.1;
  double end = 100.0;
  std::uint64_t seed = 1;
  std::string engine = "sequential";
  std::string partition = "block";
  std::uint32_t gvt_interval = 4096;
  double window = -1;  ///< < 0: unlimited
  std::uint32_t batch = 256;
  std::uint64_t max_uncommitted = OptimisticConfig{}.max_uncommitted;
  bool declare_lookahead = true;
  bool rollback_check = false;
  std::string json;
};

/// Figures of one run, already combined over processes.
struct Report {
  std::uint64_t committed = 0, processed = 0, rolled_back = 0, rollbacks = 0;
  std::uint64_t remote_messages = 0, anti_messages = 0, gvt_rounds = 0;
  std::uint64_t committed_at_execution = 0;
  double wall_s = 0, gvt_s = 0, idle_s = 0;  ///< gvt_s, idle_s: the largest over processes
  std::uint64_t checksum = 0;
  double peak_rss_mib = 0;      ///< largest over processes
  double peak_rss_mib_sum = 0;  ///< all processes together
  int processes = 1;
  std::string engine, partition;
  /// Optimistic engine, process 0 only: per process (processed, committed, rolled back, remote
  /// messages, anti-messages, wall s, GVT s, idle s), row-major.
  std::vector<double> per_process;

  double efficiency() const {
    return processed ? static_cast<double>(committed) / static_cast<double>(processed) : 1.0;
  }
  double rate() const { return wall_s > 0 ? static_cast<double>(committed) / wall_s : 0.0; }
};

/// Peak resident set of this process so far (Linux reports ru_maxrss in KiB).
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

void reduce_rss(Report& r) {
  double local = peak_rss_mib();
  MPI_Allreduce(&local, &r.peak_rss_mib, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&local, &r.peak_rss_mib_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

PholdParams make_params(const Options& o, int processes) {
  const std::uint64_t total =
      std::uint64_t{o.lps_per_process} * static_cast<std::uint64_t>(processes);
  if (total > std::numeric_limits<LpId>::max())
    throw_input("--lps-per-process {} × {} processes exceeds 2^32 - 1 LPs", o.lps_per_process,
                processes);
  PholdParams p;
  p.num_lps = static_cast<std::uint32_t>(total);
  p.start_events = o.start_events;
  p.remote = o.remote;
  p.mean = phold_ticks(o.mean, "--mean");
  p.lookahead = phold_ticks(o.lookahead, "--lookahead");
  p.seed = o.seed;
  // Delays of zero ticks forever would never advance time.
  if (p.mean + p.lookahead <= 0) throw_input("--mean + --lookahead must be > 0");
  return p;
}

Report run_sequential(const Options& o) {
  const int processes = world_size();
  if (processes != 1)
    throw_input("--engine sequential runs on one MPI process, got {} (use --engine optimistic)",
                processes);
  const PholdParams params = make_params(o, 1);
  const PholdRun run = run_phold_sequential(params, phold_ticks(o.end, "--end"), o.rollback_check);
  Report r;
  r.committed = run.stats.events_committed;
  r.processed = run.stats.events_processed;
  r.wall_s = run.stats.wall_s;
  r.checksum = run.checksum;
  r.engine = "sequential";
  r.partition = "none";
  reduce_rss(r);
  return r;
}

Report run_optimistic(const Options& o) {
  if (o.rollback_check)
    throw_input("--rollback-check is a mode of the sequential engine (use --engine sequential)");
  const int processes = world_size();
  const int rank = world_rank();
  const PholdParams params = make_params(o, processes);
  const SimTime end = phold_ticks(o.end, "--end");
  OptimisticConfig config;
  config.gvt_interval = o.gvt_interval;
  config.batch_events = o.batch;
  if (o.window >= 0) config.optimism_window = phold_ticks(o.window, "--window");
  config.max_uncommitted = o.max_uncommitted;
  // Every PHOLD delay is at least max(1 tick, lookahead) (PholdLP::delay_ticks).
  if (o.declare_lookahead) config.lookahead = std::max<SimTime>(1, params.lookahead);

  // PHOLD sends uniformly all-to-all, so no partition beats blocks; the graph states only that
  // each LP talks to itself (METIS then falls back to blocks), which keeps --partition metis
  // runnable on this benchmark.
  auto partitioner = make_partitioner(o.partition);
  LpGraph graph;
  graph.offsets.resize(params.num_lps + 1);
  graph.neighbours.resize(params.num_lps);
  graph.weights.assign(params.num_lps, 1);
  for (LpId i = 0; i < params.num_lps; ++i) {
    graph.offsets[i + 1] = i + 1;
    graph.neighbours[i] = i;
  }
  std::vector<std::uint32_t> owner =
      partitioner->assign(params.num_lps, static_cast<std::uint32_t>(processes), &graph);
  PholdLps lps(params, owner, rank);
  OptimisticEngine engine(
      MPI_COMM_WORLD, owner, [&](LpId id) { return lps.make(id); }, config);
  const OptimisticStats local = engine.run(end);
  const OptimisticStats total = engine.total(local);
  const std::array<double, kPerProcess> mine{static_cast<double>(local.events_processed),
                                             static_cast<double>(local.events_committed),
                                             static_cast<double>(local.events_rolled_back),
                                             static_cast<double>(local.remote_messages),
                                             static_cast<double>(local.anti_messages),
                                             local.wall_s,
                                             local.gvt_s,
                                             local.idle_s};
  std::vector<double> per_process(rank == 0 ? mine.size() * static_cast<std::size_t>(processes)
                                            : 0);
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, per_process.data(),
             static_cast<int>(mine.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);

  Report r;
  r.committed = total.events_committed;
  r.processed = total.events_processed;
  r.rolled_back = total.events_rolled_back;
  r.rollbacks = total.rollbacks;
  r.remote_messages = total.remote_messages;
  r.anti_messages = total.anti_messages;
  r.gvt_rounds = total.gvt_rounds;
  r.committed_at_execution = total.committed_at_execution;
  r.wall_s = total.wall_s;
  r.gvt_s = total.gvt_s;
  r.idle_s = total.idle_s;
  r.checksum = lps.checksum(MPI_COMM_WORLD);
  r.processes = processes;
  r.per_process = std::move(per_process);
  r.engine = "optimistic";
  r.partition = partitioner->name();
  reduce_rss(r);
  return r;
}

/// PHOLD on the conservative engine: windows of PHOLD's lookahead (max(1 tick, lookahead)),
/// blocks of LPs per process.
Report run_conservative(const Options& o) {
  const int processes = world_size();
  const int rank = world_rank();
  const PholdParams params = make_params(o, processes);
  const SimTime end = phold_ticks(o.end, "--end");
  if (o.partition != "block")
    throw_input("--partition {}: the conservative engine runs PHOLD on blocks of LPs", o.partition);
  std::vector<std::uint32_t> owner =
      BlockPartitioner{}.assign(params.num_lps, static_cast<std::uint32_t>(processes), nullptr);
  PholdLps lps(params, owner, rank);
  ConservativeConfig config;
  config.lookahead = std::max<SimTime>(1, params.lookahead);
  ConservativeEngine engine(
      MPI_COMM_WORLD, owner, [&](LpId id) { return lps.make(id); }, config);
  const ConservativeStats total = engine.total(engine.run(end));
  Report r;
  r.committed = r.processed = total.events_processed;
  r.remote_messages = total.remote_messages;
  r.gvt_rounds = total.windows;
  r.wall_s = total.wall_s;
  r.gvt_s = total.exchange_s;
  r.checksum = lps.checksum(MPI_COMM_WORLD);
  r.processes = processes;
  r.engine = "conservative";
  r.partition = "block";
  reduce_rss(r);
  return r;
}

void print_report(const Report& r, const Options& o, std::uint32_t num_lps) {
  std::cout << fmt::format(
      "PHOLD: {} LPs ({} per process × {}), start events {}, remote {}, mean {}, lookahead {}, "
      "end {}, seed {}\n",
      num_lps, o.lps_per_process, r.processes, o.start_events, o.remote, o.mean, o.lookahead, o.end,
      o.seed);
  std::cout << fmt::format("engine {} (partition {}), {} process(es)\n", r.engine, r.partition,
                           r.processes);
  std::cout << fmt::format("  committed events    {}\n", r.committed);
  std::cout << fmt::format("  processed events    {}\n", r.processed);
  std::cout << fmt::format("  rolled back events  {} ({} rollbacks)\n", r.rolled_back, r.rollbacks);
  std::cout << fmt::format("  efficiency          {:.4f}\n", r.efficiency());
  std::cout << fmt::format("  remote messages     {}\n", r.remote_messages);
  std::cout << fmt::format("  anti-messages       {}\n", r.anti_messages);
  std::cout << fmt::format("  {}          {}\n",
                           r.engine == "conservative" ? "windows   " : "GVT rounds", r.gvt_rounds);
  if (r.engine == "conservative")
    std::cout << fmt::format("  exchange wall       {:.3f} s (largest process)\n", r.gvt_s);
  if (r.engine == "optimistic") {
    std::cout << fmt::format("  committed at once   {} (below GVT + lookahead)\n",
                             r.committed_at_execution);
    std::cout << fmt::format("  GVT / idle wall     {:.3f} / {:.3f} s (largest process)\n", r.gvt_s,
                             r.idle_s);
  }
  std::cout << fmt::format("  committed events/s  {:.4g}\n", r.rate());
  std::cout << fmt::format("  wall                {:.3f} s\n", r.wall_s);
  std::cout << fmt::format("  peak RSS            {:.1f} MiB per process (max), {:.1f} MiB total\n",
                           r.peak_rss_mib, r.peak_rss_mib_sum);
  std::cout << fmt::format("  checksum            {:016x}\n", r.checksum);
  if (r.per_process.empty()) return;
  std::cout << "  per process:   processed   committed  rolled back      remote        anti   "
               "committed/s   GVT s  idle s\n";
  for (std::size_t p = 0; p * kPerProcess < r.per_process.size(); ++p) {
    const double* v = &r.per_process[p * kPerProcess];
    std::cout << fmt::format(
        "  {:>11} {:>11.0f} {:>11.0f} {:>12.0f} {:>11.0f} {:>11.0f} {:>13.4g} {:>7.3f} {:>7.3f}\n",
        p, v[0], v[1], v[2], v[3], v[4], v[5] > 0 ? v[1] / v[5] : 0.0, v[6], v[7]);
  }
}

void write_json(const Report& r, const std::string& path) {
  nlohmann::ordered_json j;
  j["committed_events"] = r.committed;
  j["processed_events"] = r.processed;
  j["rolled_back_events"] = r.rolled_back;
  j["efficiency"] = r.efficiency();
  j["committed_events_per_s"] = r.rate();
  j["wall_s"] = r.wall_s;
  j["checksum"] = fmt::format("{:016x}", r.checksum);
  j["peak_rss_mib"] = r.peak_rss_mib;
  j["peak_rss_mib_total"] = r.peak_rss_mib_sum;
  j["processes"] = r.processes;
  j["engine"] = r.engine;
  j["partition"] = r.partition;
  j["rollbacks"] = r.rollbacks;
  j["remote_messages"] = r.remote_messages;
  j["anti_messages"] = r.anti_messages;
  j["gvt_rounds"] = r.gvt_rounds;
  j["committed_at_execution"] = r.committed_at_execution;
  j["gvt_s"] = r.gvt_s;
  j["idle_s"] = r.idle_s;
  if (!r.per_process.empty()) {
    auto& rows = j["per_process"] = nlohmann::ordered_json::array();
    for (std::size_t p = 0; p * kPerProcess < r.per_process.size(); ++p) {
      const double* v = &r.per_process[p * kPerProcess];
      rows.push_back({{"processed_events", v[0]},
                      {"committed_events", v[1]},
                      {"rolled_back_events", v[2]},
                      {"remote_messages", v[3]},
                      {"anti_messages", v[4]},
                      {"wall_s", v[5]},
                      {"gvt_s", v[6]},
                      {"idle_s", v[7]}});
    }
  }
  std::ofstream f(path);
  if (!f) throw_io("{}: cannot open for writing", path);
  f << j.dump(2) << "\n";
  if (!f) throw_io("{}: write failed", path);
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  const int rank = world_rank();
  CLI::App app{"scalescope-phold: the PHOLD benchmark on the scalescope engines"};
  Options o;
  app.add_option("--lps-per-process", o.lps_per_process, "LPs per MPI process")
      ->check(CLI::PositiveNumber);
  app.add_option("--start-events", o.start_events, "Events each LP holds at the start");
  app.add_option("--remote", o.remote, "Probability that an event goes to a random LP")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--mean", o.mean, "Mean of the exponential delay (units)");
  app.add_option("--lookahead", o.lookahead, "Fixed part of every delay (units)");
  app.add_option("--end", o.end, "End of simulated time (units)");
  app.add_option("--seed", o.seed, "Random seed");
  app.add_option("--engine", o.engine,
                 "sequential, optimistic (Time Warp) or conservative (windows of the lookahead)")
      ->check(CLI::IsMember({"sequential", "optimistic", "conservative"}));
  app.add_option("--partition", o.partition, "block or metis (optimistic engine)");
  app.add_option("--gvt-interval", o.gvt_interval, "Events processed between GVT rounds")
      ->check(CLI::PositiveNumber);
  app.add_option("--window", o.window, "Optimism window beyond GVT (units; default unlimited)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch", o.batch, "Remote events per MPI message (at most)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-uncommitted", o.max_uncommitted,
                 "Processed, uncommitted events a process may hold before it waits for GVT")
      ->check(CLI::PositiveNumber);
  app.add_option("--declare-lookahead", o.declare_lookahead,
                 "Tell the optimistic engine PHOLD's lookahead, so it commits events below GVT + "
                 "lookahead at once (true/false)");
  app.add_flag("--rollback-check", o.rollback_check,
               "Execute every event forward, reverse, compare state (sequential engine)");
  app.add_option("--json", o.json, "Write the statistics as JSON to this file");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return rank == 0 ? app.exit(e) : 0;
  } catch (const CLI::ParseError& e) {
    if (rank == 0) std::cerr << "scalescope-phold: error: " << e.what() << "\n";
    return 1;
  }
  try {
    make_partitioner(o.partition);  // rejects a bad --partition under every engine
    const Report r = o.engine == "sequential"     ? run_sequential(o)
                     : o.engine == "conservative" ? run_conservative(o)
                                                  : run_optimistic(o);
    if (rank == 0) {
      print_report(r, o, make_params(o, r.processes).num_lps);
      if (!o.json.empty()) write_json(r, o.json);
    }
    return 0;
  } catch (const InputError& e) {
    if (rank == 0) std::cerr << "scalescope-phold: error: " << e.what() << "\n";
  } catch (const IoError& e) {
    std::cerr << "scalescope-phold: error: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "scalescope-phold: internal error (rank " << rank << "): " << e.what() << "\n";
    // Another process may be waiting in a collective this one will never reach.
    if (world_size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}
