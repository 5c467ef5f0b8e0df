// `scalescope sweep`: every configuration of a sweep run as `scalescope run` would, dealt over
// the MPI processes, ranked into sweep.csv and sweep.json.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/pipeline.hpp"
#include "app/session.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "emu/bound.hpp"
#include "explore/sweep.hpp"
#include "io/config.hpp"
#include "io/summary_json.hpp"
#include "io/sweep_table.hpp"

namespace scalescope::app {

namespace {

/// One configuration of a sweep through `scalescope run`'s pipeline: load (a refused plan is a
/// row that says why), build, the memory check from the templates, and unless it does not fit
/// (or `replay_unfit`), the replay: on the sequential engine, or with `group` on the optimistic
/// engine over that communicator's processes (the same result bit for bit). Nothing is written.
explore::Row sweep_point(const std::string& config_path, const std::vector<std::string>& base,
                         const std::string& megatron_args, const std::vector<std::string>& point,
                         std::size_t index, bool replay_unfit, MPI_Comm group, bool replay = true) {
  explore::Row r;
  r.index = index;
  r.overrides = point;
  std::vector<std::string> overrides = base;
  overrides.insert(overrides.end(), point.begin(), point.end());
  std::optional<io::ExperimentConfig> loaded;
  std::optional<graph::SlicedGraph> g;
  // The check of a layout search (no replay): micro-batches beyond what the pipeline holds in
  // flight repeat the same ops and the same memory, so the graph is built with PP · VPP of them
  // (at least 2; 2 · PP · VPP under FSDP or ZeRO-2/3, whose gathered and reduced buffers live
  // longer): their memory peak is the full run's (e2e.layout_search compares the two over a
  // whole search), and the bound below accounts for the rest. SCALESCOPE_SEARCH_FULL_BUILDS=1
  // builds them all.
  std::int64_t micro = 0, built_micro = 0;
  std::optional<io::ExperimentConfig> built;  // what the graph was built from
  try {
    loaded = io::load_experiment(config_path, overrides, megatron_args);
    io::ExperimentConfig& shortened = built.emplace(*loaded);
    micro = loaded->training.num_microbatches(loaded->parallel.dp());
    built_micro = micro;
    const std::int64_t chunks = loaded->parallel.pp() * loaded->parallel.vpp();
    const std::int64_t cap = loaded->parallel.fsdp || loaded->parallel.zero_stage >= 2
                                 ? 2 * chunks
                                 : std::max<std::int64_t>(2, chunks);
    const char* full = std::getenv("SCALESCOPE_SEARCH_FULL_BUILDS");
    if (!replay && micro > cap && loaded->training.gradient_accumulation_steps == 1 &&
        (full == nullptr || std::string(full) != "1")) {
      built_micro = cap;
      shortened.training.global_batch_size =
          cap * shortened.training.micro_batch_size * shortened.parallel.dp();
    }
    g = build(shortened);
  } catch (const InputError& e) {
    r.status = explore::Status::Invalid;
    r.message = e.what();
    return r;
  }
  const io::ExperimentConfig& c = *loaded;
  r.num_gpus = c.parallel.world();
  r.tp = c.parallel.tp();
  r.pp = c.parallel.pp();
  r.dp = c.parallel.dp();
  r.cp = c.parallel.cp();
  r.ep = c.parallel.ep();
  r.vpp = c.parallel.vpp();
  r.micro_batch = c.training.micro_batch_size;
  const auto fill_memory = [&](const emu::Summary& s) {
    r.peak_memory_bytes = s.memory_total_bytes_by_pp_stage[s.memory_tightest_stage];
    r.peak_allocated_bytes = s.peak_allocated_bytes();
    r.peak_reserved_bytes = s.peak_reserved_bytes();
    r.memory_capacity_bytes = s.memory_capacity_bytes;
    r.status = s.memory_fits ? explore::Status::Ok : explore::Status::DoesNotFit;
    r.message = s.memory_fits ? std::string() : memory_verdict(s);
  };
  fill_memory(template_memory(*built, *g));
  if (r.status == explore::Status::DoesNotFit && !replay_unfit) return r;

  const ReplaySetup setup(c);
  if (!replay) {
    // Before any replay: a lower bound on the iteration time. The busiest template's compute
    // stream with its ops back to back (every rank's compute runs in order on that stream); with
    // fewer micro-batches built, their ops' time (the ops tagged with a micro-batch) scales to
    // the real count, untagged ops count once. And each class's first rank replayed alone
    // (emu/bound.hpp): its collectives at their wire time from when it issues them, the host's
    // issue, what waits on what; each micro-batch not built adds at least the least
    // compute-stream time a built one holds. The larger of the two.
    const emu::ModelData data(*g, setup.costs, true);
    const std::vector<emu::AloneBound> alone = emu::alone_bounds(data);
    const double unbuilt = static_cast<double>(micro - built_micro);
    double lb = 0;
    for (std::size_t k = 0; k < g->templates.size(); ++k) {
      double fixed = 0, per_micro = 0;
      const graph::RankProgram& t = g->templates[k];
      for (std::uint32_t i = 0; i < t.size(); ++i)
        if (!graph::is_communication(t.ops[i].kind) && t.ops[i].stream == graph::Stream::Compute)
          (t.ops[i].microbatch == 0xFFFF ? fixed : per_micro) +=
              static_cast<double>(data.durations[k][i]);
      lb = std::max(
          {lb, fixed + per_micro * static_cast<double>(micro) / static_cast<double>(built_micro),
           static_cast<double>(alone[k].finish) +
               unbuilt * static_cast<double>(alone[k].min_microbatch_span)});
    }
    r.lower_bound_s = lb * 1e-9;
    return r;
  }
  const emu::Costs& costs = setup.costs;
  emu::EmulationOptions opt = setup.options;  // no traced ranks: no timelines needed
  emu::Summary s;
  emu::RankResult last;
  if (group != MPI_COMM_NULL) {
    // The processes of `group` replay this one configuration together (optimistic engine).
    opt.engine = emu::EngineKind::Optimistic;
    emu::DistributedResults d = emu::emulate_distributed(*g, costs, opt, group);
    complete_summary(d, c, group);
    s = d.local.summary;
    last = d.local.ranks[d.last_finishing_rank];
  } else {
    // One replica replayed where the replicas are provably identical (emu/replicas.hpp): the
    // same row bit for bit (e2e.engines_identical), a fraction of the events.
    opt.representative_where_provable = true;
    emu::RunResults res = emu::emulate(*g, costs, opt);
    complete_summary(res, c);
    s = res.summary;
    last = res.ranks[io::last_finishing_rank(res)];
  }
  check_memory(s, c);
  fill_memory(s);
  r.replayed = true;
  r.iteration_time_s = s.iteration_time_s();
  r.tokens_per_s = s.tokens_per_s();
  r.model_tflops_per_gpu = s.model_tflops_per_gpu();
  r.mfu = s.mfu();
  r.compute_s = ns_to_seconds(last.compute);
  r.exposed_comm_s = ns_to_seconds(last.exposed_tp + last.exposed_pp + last.exposed_dp +
                                   last.exposed_embedding + last.exposed_cp + last.exposed_ep);
  r.bubble_s = ns_to_seconds(last.bubble);
  r.straggler_wait_s = ns_to_seconds(last.straggler_wait);
  r.host_wait_s = ns_to_seconds(last.host_wait);
  return r;
}

/// The journal of a sweep (DIR/sweep.journal.P.jsonl, one file per reporting process P): a
/// header line naming the sweep by a fingerprint of what decides its rows, then one row per
/// finished configuration, flushed as it finishes, so that a killed sweep keeps them and
/// `--resume` continues it. Removed once sweep.csv and sweep.json are written.
std::string journal_name(std::size_t process) {
  return fmt::format("sweep.journal.{}.jsonl", process);
}

/// What decides a sweep's rows: the base experiment as resolved, the configurations in order,
/// and whether configurations that do not fit are replayed (FNV-1a, 64 bits, as hex).
std::string sweep_fingerprint(const std::string& resolved,
                              const std::vector<std::vector<std::string>>& points,
                              bool replay_unfit) {
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&](std::string_view bytes) {
    for (unsigned char ch : bytes) h = (h ^ ch) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  mix(resolved);
  for (const auto& p : points) mix(fmt::format("{}", fmt::join(p, "\n")));
  mix(replay_unfit ? "replay_unfit" : "");
  return fmt::format("{:016x}", h);
}

/// The rows of a journal left in `dir` by an interrupted sweep with this `fingerprint`: by
/// index. A journal of another sweep is refused (naming the file); a last line cut short by the
/// kill is dropped.
std::map<std::size_t, explore::Row> read_journal(
    const std::filesystem::path& dir, const std::string& fingerprint,
    const std::vector<std::vector<std::string>>& points) {
  std::map<std::size_t, explore::Row> done;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("sweep.journal.", 0) != 0) continue;
    std::ifstream in(e.path());
    std::string line;
    bool header = true;
    while (std::getline(in, line)) {
      nlohmann::ordered_json j;
      try {
        j = nlohmann::ordered_json::parse(line);
      } catch (const nlohmann::json::exception&) {
        if (in.peek() == std::char_traits<char>::eof()) break;  // the line the kill cut
        throw_input("{}: line is not JSON: the journal is damaged", e.path().string());
      }
      if (header) {
        if (!j.is_object() || j.value("fingerprint", "") != fingerprint)
          throw_input(
              "{}: the journal is of another sweep (the experiment, its overrides or axes "
              "changed): run without --resume to start over",
              e.path().string());
        header = false;
        continue;
      }
      explore::Row r;
      try {
        r = io::sweep_row_from_json(j);
      } catch (const std::exception& x) {
        throw_input("{}: a row cannot be read ({}): the journal is damaged", e.path().string(),
                    x.what());
      }
      if (r.index >= points.size() || r.overrides != points[r.index])
        throw_input("{}: row {} is not configuration {} of this sweep: the journal is damaged",
                    e.path().string(), r.index, r.index);
      done[r.index] = std::move(r);
    }
  }
  return done;
}

/// Every process's rows and the first error any had (in process order), through one JSON text
/// each: on every process (`everywhere`), or on process 0 only (the others get none).
std::pair<std::vector<explore::Row>, std::string> gather_rows(const std::vector<explore::Row>& mine,
                                                              const std::string& error,
                                                              bool everywhere) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const explore::Row& r : mine) rows.push_back(io::sweep_row_json(r));
  const std::string text = nlohmann::ordered_json{{"rows", rows}, {"error", error}}.dump();
  int procs = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &procs);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int len = static_cast<int>(text.size());
  std::vector<int> lens(static_cast<std::size_t>(procs)), displs(lens.size());
  if (everywhere)
    MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD);
  else
    MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  const bool receives = everywhere || me == 0;
  std::string all;
  if (receives) {
    for (std::size_t p = 0, at = 0; p < lens.size(); at += static_cast<std::size_t>(lens[p]), ++p)
      displs[p] = static_cast<int>(at);
    all.resize(static_cast<std::size_t>(displs.back() + lens.back()));
  }
  if (everywhere)
    MPI_Allgatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR,
                   MPI_COMM_WORLD);
  else
    MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
                MPI_COMM_WORLD);
  std::vector<explore::Row> out;
  if (!receives) return {out, std::string()};
  std::string first_error;
  for (std::size_t p = 0; p < lens.size(); ++p) {
    const auto j = nlohmann::ordered_json::parse(
        all.substr(static_cast<std::size_t>(displs[p]), static_cast<std::size_t>(lens[p])));
    if (first_error.empty()) first_error = j.at("error").get<std::string>();
    for (const auto& row : j.at("rows")) out.push_back(io::sweep_row_from_json(row));
  }
  return {out, first_error};
}

}  // namespace

/// `scalescope sweep`: every configuration of the axes' product (or of the parallel-layout
/// search) run as `scalescope run` would, ranked into DIR/sweep.csv and sweep.json. Under
/// mpirun the configurations are dealt to the processes (round-robin, each on the sequential
/// engine; or, with more processes than configurations, a group of processes per configuration
/// on the optimistic engine), so the table is the same at any process count.
int sweep_command(const MpiWorld& mpi, const std::string& config_path,
                  const std::vector<std::string>& base, const std::string& megatron_args,
                  const std::vector<std::string>& vary, const std::string& search,
                  const std::string& out, bool replay_unfit, std::size_t top, bool quiet,
                  bool resume) {
  if (config_path.empty() && megatron_args.empty())
    throw_input("scalescope sweep: give an experiment CONFIG or --megatron-args \"…\"");
  // The base experiment must load on its own: its errors are the user's, not a row's.
  const io::ExperimentConfig c0 = io::load_experiment(config_path, base, megatron_args);
  // Axes: the layout search, the file's `sweep:` axes, then --vary's.
  const io::SweepSpec spec =
      config_path.empty() ? io::SweepSpec{} : io::read_sweep_spec(config_path);
  const std::string& kind = search.empty() ? spec.search : search;
  std::vector<explore::Axis> axes;
  if (!kind.empty()) {
    if (kind != "parallel" && kind != "layout")
      throw_input("{}: sweep search '{}': expected 'parallel' or 'layout'",
                  search.empty() ? config_path : std::string("--search"), kind);
    // The units the pipeline split counts: the layers, and the embedding and the loss where the
    // experiment accounts for them.
    const std::int64_t units = c0.model.num_layers +
                               (c0.parallel.account_for_embedding_in_pipeline_split ? 1 : 0) +
                               (c0.parallel.account_for_loss_in_pipeline_split ? 1 : 0);
    if (kind == "layout" && resume)
      throw_input(
          "--resume continues sweeps of --vary axes and --search parallel; a layout search "
          "checks its configurations again and replays only the best (run it without --resume)");
    if (kind == "parallel")
      axes.push_back(
          explore::parallel_search(c0.cluster.num_gpus, c0.cluster.gpus_per_node, units));
    else
      axes.push_back(explore::layout_search({c0.cluster.num_gpus, c0.cluster.gpus_per_node, units,
                                             c0.model.num_experts, c0.training.global_batch_size}));
  }
  axes.insert(axes.end(), spec.axes.begin(), spec.axes.end());
  for (const std::string& v : vary) {
    explore::Axis a = explore::parse_vary(v);
    for (const auto& value : a.values)
      for (const std::string& o : value) io::check_override(o, c0.path);
    axes.push_back(std::move(a));
  }
  if (axes.empty())
    throw_input(
        "scalescope sweep: give --vary key=v1,v2,…, --search parallel or a sweep: section in "
        "the experiment file");
  const std::vector<std::vector<std::string>> points = explore::expand(axes);
  // The journal: finished rows of an interrupted run of the same sweep (--resume), else none.
  const std::string fingerprint = sweep_fingerprint(c0.resolved_yaml, points, replay_unfit);
  std::map<std::size_t, explore::Row> done;
  if (resume) done = read_journal(out, fingerprint, points);
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < points.size(); ++i)
    if (done.count(i) == 0) todo.push_back(i);
  if (resume && !quiet && mpi.rank() == 0)
    std::cerr << fmt::format("resuming: {} of {} configurations were finished\n", done.size(),
                             points.size());
  // The table: ranked, written, and (unless quiet) printed with the best configuration.
  const auto finish = [&](const std::vector<explore::Row>& rows) -> int {
    const std::vector<std::size_t> order = explore::rank_rows(rows);
    io::write_sweep(out, c0.path, axes, rows, order);
    if (!quiet) {
      std::cout << io::format_sweep_table(rows, order, top);
      const explore::Row& best = rows[order.front()];
      if (best.status == explore::Status::Ok)
        std::cout << fmt::format("best: {:.4f} s per iteration with --set {}\n",
                                 best.iteration_time_s, fmt::join(best.overrides, " --set "));
      else if (best.status == explore::Status::DoesNotFit) {
        const explore::Row* lean = &best;
        for (const explore::Row& r : rows)
          if (r.status == explore::Status::DoesNotFit &&
              r.peak_memory_bytes < lean->peak_memory_bytes)
            lean = &r;
        std::cout << fmt::format(
            "no configuration fits in memory; the leanest needs {:.2f} GiB of {:.2f} GiB with "
            "--set {}\n",
            static_cast<double>(lean->peak_memory_bytes) / (1 << 30),
            static_cast<double>(lean->memory_capacity_bytes) / (1 << 30),
            fmt::join(lean->overrides, " --set "));
      } else
        std::cout << "every configuration was refused by the plan rules (see the messages)\n";
      std::cout << fmt::format("{} configurations; table in {}/sweep.csv and sweep.json\n",
                               rows.size(), out);
    }
    return 0;
  };
  // --search layout: every configuration checked first (the plan rules, the memory model, a
  // lower bound on its time), dealt over the processes; then the ones that fit replayed in
  // order of their bound, in rounds of a fixed size so that the table does not depend on the
  // process count: a configuration that a replayed one of an earlier round dominates (no
  // slower than its bound, no more memory) is not replayed.
  if (kind == "layout") {
    const auto me = static_cast<std::size_t>(mpi.rank());
    const auto procs = static_cast<std::size_t>(mpi.size());
    const auto phase_start = std::chrono::steady_clock::now();
    std::vector<explore::Row> mine;
    std::string error;
    core::Progress checking("layout search, checking", "configurations",
                            (points.size() + procs - 1 - me) / procs, !quiet && me == 0);
    for (std::size_t i = me; i < points.size() && error.empty(); i += procs) {
      try {
        mine.push_back(sweep_point(config_path, base, megatron_args, points[i], i, replay_unfit,
                                   MPI_COMM_NULL, false));
      } catch (const std::exception& e) {
        error = e.what();
      }
      checking.update(mine.size());
    }
    auto [checked, err] = gather_rows(mine, error, true);
    if (!err.empty()) throw_io("{}", err);
    std::vector<explore::Row> rows(points.size());
    for (explore::Row& r : checked) rows[r.index] = std::move(r);
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (rows[i].status == explore::Status::Ok ||
          (replay_unfit && rows[i].status == explore::Status::DoesNotFit))
        candidates.push_back(i);
    std::stable_sort(candidates.begin(), candidates.end(), [&](std::size_t x, std::size_t y) {
      return rows[x].lower_bound_s < rows[y].lower_bound_s;
    });
    const double check_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_start).count();
    if (!quiet && me == 0)
      std::cerr << fmt::format(
          "layout search: {} configurations checked in {:.1f} s: {} refused, {} do not fit, {} to "
          "replay at most, by their lower bound\n",
          points.size(), check_s,
          std::count_if(rows.begin(), rows.end(),
                        [](const explore::Row& r) { return r.status == explore::Status::Invalid; }),
          std::count_if(
              rows.begin(), rows.end(),
              [](const explore::Row& r) { return r.status == explore::Status::DoesNotFit; }),
          candidates.size());
    constexpr std::size_t kRound = 8;
    std::vector<std::size_t> replayed;  // indices, in the order replayed
    std::size_t next = 0, dominated = 0;
    core::Progress progress("layout search", "candidates", candidates.size(), !quiet && me == 0);
    while (next < candidates.size()) {
      std::vector<std::size_t> round;
      for (; next < candidates.size() && round.size() < kRound; ++next) {
        explore::Row& r = rows[candidates[next]];
        const auto by = std::find_if(replayed.begin(), replayed.end(), [&](std::size_t k) {
          return explore::dominates(rows[k], r.lower_bound_s, r.peak_memory_bytes);
        });
        if (by == replayed.end()) {
          round.push_back(candidates[next]);
          continue;
        }
        r.status = explore::Status::Dominated;
        r.message = fmt::format(
            "dominated before its replay: #{} takes {:.4f} s with {:.2f} GiB, no more than this "
            "one's lower bound {:.4f} s with {:.2f} GiB",
            rows[*by].index, rows[*by].iteration_time_s,
            static_cast<double>(rows[*by].peak_memory_bytes) / (1 << 30), r.lower_bound_s,
            static_cast<double>(r.peak_memory_bytes) / (1 << 30));
        ++dominated;
      }
      std::vector<explore::Row> done_here;
      std::string round_error;
      for (std::size_t k = me; k < round.size() && round_error.empty(); k += procs) {
        try {
          explore::Row r = sweep_point(config_path, base, megatron_args, points[round[k]], round[k],
                                       replay_unfit, MPI_COMM_NULL);
          r.lower_bound_s = rows[round[k]].lower_bound_s;
          done_here.push_back(std::move(r));
        } catch (const std::exception& e) {
          round_error = e.what();
        }
      }
      auto [got, e2] = gather_rows(done_here, round_error, true);
      if (!e2.empty()) throw_io("{}", e2);
      for (explore::Row& r : got) rows[r.index] = std::move(r);
      replayed.insert(replayed.end(), round.begin(), round.end());
      progress.update(next);
    }
    if (!quiet && me == 0)
      std::cerr << fmt::format(
          "layout search: {} replayed, {} dominated before their replay; {:.1f} s in all\n",
          replayed.size(), dominated,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_start).count());
    if (me != 0) return 0;
    return finish(rows);
  }

  // This process's share: with fewer processes than configurations, every procs-th one on the
  // sequential engine; with more, one configuration per group of processes (process p in group
  // p mod N), replayed by the group on the optimistic engine. Then every share to process 0 as
  // one JSON text each (a group's rows from its first process).
  const auto me = static_cast<std::size_t>(mpi.rank());
  const auto procs = static_cast<std::size_t>(mpi.size());
  const std::size_t n = todo.size();
  std::vector<std::size_t> share;
  MPI_Comm group = MPI_COMM_NULL;
  bool reports = true;
  if (n == 0) {
    reports = false;  // every configuration was in the journal
  } else if (procs > n) {
    MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(me % n), static_cast<int>(me), &group);
    int size = 1;
    MPI_Comm_size(group, &size);
    if (size == 1) MPI_Comm_free(&group);  // a group of one: the sequential engine
    share.push_back(todo[me % n]);
    reports = me < n;
  } else {
    for (std::size_t i = me; i < n; i += procs) share.push_back(todo[i]);
  }
  // This process's journal (a fresh sweep first removes any left in DIR).
  const std::filesystem::path journal = std::filesystem::path(out) / journal_name(me);
  std::error_code out_ec;
  const bool created_out = !std::filesystem::exists(out, out_ec);
  const auto remove_journals = [&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(out, ec))
      if (e.path().filename().string().rfind("sweep.journal.", 0) == 0)
        std::filesystem::remove(e.path(), ec);
  };
  if (!resume && me == 0) remove_journals();
  MPI_Barrier(MPI_COMM_WORLD);
  std::ofstream log;
  if (reports) {
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    const bool fresh = !std::filesystem::exists(journal, ec);
    log.open(journal, std::ios::app);
    if (!log) throw_io("{}: cannot write the sweep's journal", journal.string());
    if (fresh)
      log << nlohmann::ordered_json{{"fingerprint", fingerprint}}.dump() << "\n" << std::flush;
  }
  // An unreadable file (cost.profile, a capture) stops this process's share; the error travels
  // with the rows, so no process is left waiting in the gather, and process 0 reports it.
  std::vector<explore::Row> mine;
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  std::size_t finished = 0;  // of this process's share
  for (const std::size_t i : share) {
    const auto t0 = std::chrono::steady_clock::now();
    explore::Row r;
    try {
      r = sweep_point(config_path, base, megatron_args, points[i], i, replay_unfit, group);
    } catch (const IoError& e) {
      error = e.what();
      break;
    } catch (const InputError& e) {
      error = e.what();
      break;
    }
    if (!reports) continue;
    ++finished;
    if (!quiet && me == 0) {
      // This process's rate so far and what is left of its share: the ETA (every process has
      // a share of the same size, ±1).
      const double spent =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double eta =
          spent / static_cast<double>(finished) * static_cast<double>(share.size() - finished);
      std::cerr << fmt::format(
          "[{}/{}] {} → {} ({:.1f} s) | {:.2f} configurations/s | ETA {:.0f} s\n", i + 1,
          points.size(), fmt::join(points[i], " "),
          r.replayed ? fmt::format("{:.4f} s", r.iteration_time_s) : explore::status_name(r.status),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
          static_cast<double>(finished) * static_cast<double>(procs) / std::max(spent, 1e-9), eta);
    }
    log << io::sweep_row_json(r).dump() << "\n" << std::flush;
    mine.push_back(std::move(r));
  }
  if (group != MPI_COMM_NULL) MPI_Comm_free(&group);
  auto [gathered, gather_error] = gather_rows(mine, error, false);
  if (me != 0) return 0;
  if (!gather_error.empty()) {
    // An error of the input repeats on a resume: the journal goes, and a DIR made for it.
    remove_journals();
    std::error_code ec;
    if (created_out) std::filesystem::remove(out, ec);  // only if empty
    throw_io("{}", gather_error);
  }
  std::vector<explore::Row> rows(points.size());
  for (auto& [i, r] : done) rows[i] = std::move(r);
  for (explore::Row& r : gathered) rows[r.index] = std::move(r);
  const int rc = finish(rows);
  remove_journals();  // the table is written: the journals are no longer needed
  return rc;
}

}  // namespace scalescope::app
