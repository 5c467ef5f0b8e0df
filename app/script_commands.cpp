// The commands whose front end is a Python script of this checkout: `capture` (PyTorch's tracer,
// scripts/capture/capture.py, run by scripts/capture/python: $SCALESCOPE_PYTHON, else the pinned
// PyTorch 2.x venv, else Debian's /usr/bin/python3) and `report` (scripts/post/report.py, Debian's
// /usr/bin/python3).
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "app/commands.hpp"
#include "app/scripts.hpp"
#include "core/error.hpp"
#include "io/capture_h5.hpp"
#include "workload/capture.hpp"

namespace scalescope::app {

namespace fs = std::filesystem;

/// Runs a command line through the shell; its exit status (1 when it did not exit).
int shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}

/// A script of this checkout (SCALESCOPE_SOURCE_DIR), or a one-line error when it is missing.
fs::path checkout_script(const std::string& command, const fs::path& relative) {
  const fs::path script = fs::path(SCALESCOPE_SOURCE_DIR) / relative;
  if (!fs::exists(script))
    throw_input(
        "scalescope {}: {} is missing (this binary runs the scripts of the checkout it "
        "was built from)",
        command, script.string());
  return script;
}

/// `s` as one single-quoted shell word.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

int capture_command(const CaptureOptions& o) {
  const fs::path script =
      checkout_script("capture", fs::path("scripts") / "capture" / "capture.py");
  const fs::path python = checkout_script("capture", fs::path("scripts") / "capture" / "python");
  if (!o.hf_config.empty() || o.world > 0) {
    // Parallelized by PyTorch's DTensor (scripts/capture/capture_hf.py): a Hugging Face config,
    // or a factory with --parallelize (torchtitan's model and apply_tp).
    if (!o.model.empty() || (!o.hf_config.empty() && !o.factory.empty()))
      throw_input("scalescope capture: give --hf-config or --factory with --world, not both");
    if (o.world <= 0) throw_input("scalescope capture: --hf-config needs --world N");
    if (!o.factory.empty() && o.parallelize.empty())
      throw_input("scalescope capture: --factory with --world needs --parallelize FILE:FUNCTION");
    const fs::path hf =
        checkout_script("capture", fs::path("scripts") / "capture" / "capture_hf.py");
    std::string cmd =
        fmt::format("'{}' '{}' {}'{}' --world {} --tp {} --seq {} --batch {} -o '{}'",
                    python.string(), hf.string(), o.factory.empty() ? "" : "--factory ",
                    o.factory.empty() ? o.hf_config : o.factory, o.world, o.tp,
                    o.seq > 0 ? o.seq : 4096, o.batch > 0 ? o.batch : 1, o.out);
    if (o.sp) cmd += " --sp";
    if (o.fsdp) cmd += " --fsdp";
    if (o.layers > 0) cmd += fmt::format(" --layers {}", o.layers);
    if (o.ep > 0) cmd += fmt::format(" --ep {}", o.ep);
    if (!o.parallelize.empty()) cmd += fmt::format(" --parallelize '{}'", o.parallelize);
    const int code = shell(cmd);
    if (code != 0 || !o.summary) return code;
    const workload::Capture captured = io::read_capture_h5(o.out);
    std::cout << io::format_capture_summary(captured, workload::TpPlan{}, o.tp);
    return 0;
  }
  if (o.sp || o.fsdp || o.layers > 0 || o.ep > 0 || !o.parallelize.empty())
    throw_input(
        "scalescope capture: --sp, --fsdp, --ep, --layers and --parallelize apply to a DTensor "
        "capture "
        "(--hf-config, or --factory with --world)");
  if (o.model.empty() == o.factory.empty())
    throw_input("scalescope capture: give path/to/file.py:ClassName or --factory FILE:FUNCTION");
  std::string cmd = fmt::format("'{}' '{}' {}'{}' --dtype '{}' -o '{}'", python.string(),
                                script.string(), o.factory.empty() ? "" : "--factory ",
                                o.factory.empty() ? o.model : o.factory, o.dtype, o.out);
  if (o.seq > 0) cmd += fmt::format(" --seq {}", o.seq);
  if (o.batch > 0) cmd += fmt::format(" --batch {}", o.batch);
  if (!o.blocks.empty()) cmd += fmt::format(" --blocks '{}'", o.blocks);
  if (o.same_blocks) cmd += " --same-blocks";
  if (!o.args.empty()) cmd += fmt::format(" --args '{}'", o.args);
  const int code = shell(cmd);
  if (code != 0 || !o.summary) return code;
  const workload::Capture captured = io::read_capture_h5(o.out);
  std::cout << io::format_capture_summary(captured, workload::capture_default_plan(captured, o.out),
                                          o.tp);
  return 0;
}

int compare_command(const std::vector<std::string>& dirs, const std::string& out) {
  const fs::path script =
      checkout_script("compare", fs::path("scripts") / "post" / "compare_runs.py");
  std::string cmd = fmt::format("/usr/bin/python3 {}", shell_quote(script.string()));
  for (const std::string& d : dirs) cmd.append(" ").append(shell_quote(d));
  if (!out.empty()) cmd.append(" -o ").append(shell_quote(out));
  return shell(cmd);
}

int report_command(const std::string& dir, const std::string& out) {
  const fs::path script = checkout_script("report", fs::path("scripts") / "post" / "report.py");
  std::string cmd = fmt::format("/usr/bin/python3 '{}' '{}'", script.string(), dir);
  if (!out.empty()) cmd += fmt::format(" -o '{}'", out);
  return shell(cmd);
}

}  // namespace scalescope::app
