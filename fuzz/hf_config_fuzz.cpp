// libFuzzer target for the Hugging Face config.json reader (io/config.hpp load_hf_config), then
// for an experiment that names the file (model.hf_config), so the keys it yields go through the
// model checks. Both must return or throw InputError / IoError (fuzz_common.hpp).
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "io/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string json = scalescope::fuzz::scratch("-config.json");
  static const std::string experiment = scalescope::fuzz::scratch("-hf.yaml");
  static const bool once = [] {
    scalescope::fuzz::write_file(experiment, "model:\n  hf_config: " + json +
                                                 "\n  seq_length: 4096\nparallel: {tp: 8, dp: 2}\n"
                                                 "training: {global_batch_size: 16}\n"
                                                 "cluster: {preset: dgx-h100, num_gpus: 16}\n");
    return true;
  }();
  (void)once;
  scalescope::fuzz::write_file(json, {reinterpret_cast<const char*>(data), size});
  scalescope::fuzz::expect_checked([&] { (void)scalescope::io::load_hf_config(json); });
  scalescope::fuzz::expect_checked([&] { (void)scalescope::io::load_experiment(experiment); });
  return 0;
}
