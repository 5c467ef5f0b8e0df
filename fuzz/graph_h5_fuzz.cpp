// libFuzzer target for the graph.h5 reader (io/graph_h5.hpp): the input is a script of edits
// (h5_mutate.hpp) to fuzz/seeds/graph.h5, a valid graph; the edited file is read as `run --graph`
// reads it. read_graph_h5 must return a graph that passed its checks, or throw InputError /
// IoError (fuzz_common.hpp).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "fuzz/h5_mutate.hpp"
#include "io/graph_h5.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string seed = std::string(SCALESCOPE_SOURCE_DIR) + "/fuzz/seeds/graph.h5";
  static const std::string file = scalescope::fuzz::scratch("-graph.h5");
  if (!scalescope::fuzz::mutate_h5(seed, file, data, size)) std::abort();  // no seed: harness bug
  scalescope::fuzz::expect_checked([&] {
    (void)scalescope::io::read_graph_config_text(file);
    (void)scalescope::io::read_graph_h5(file);
  });
  return 0;
}
