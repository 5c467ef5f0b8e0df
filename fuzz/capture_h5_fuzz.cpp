// libFuzzer target for the capture.h5 reader (io/capture_h5.hpp) and the lowering behind
// `scalescope capture --summary` (the default tensor-parallel plan, lowered at TP 2): the input
// is a script of edits (h5_mutate.hpp) to fuzz/seeds/capture.h5, a valid capture of
// inputs/pytorch/llama.py. Each must return or throw InputError / IoError (fuzz_common.hpp).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "fuzz/h5_mutate.hpp"
#include "io/capture_h5.hpp"
#include "workload/capture.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string seed = std::string(SCALESCOPE_SOURCE_DIR) + "/fuzz/seeds/capture.h5";
  static const std::string file = scalescope::fuzz::scratch("-capture.h5");
  if (!scalescope::fuzz::mutate_h5(seed, file, data, size)) std::abort();  // no seed: harness bug
  scalescope::fuzz::expect_checked([&] {
    const scalescope::workload::Capture c = scalescope::io::read_capture_h5(file);
    (void)scalescope::io::format_capture_summary(
        c, scalescope::workload::capture_default_plan(c, file), 2);
  });
  return 0;
}
