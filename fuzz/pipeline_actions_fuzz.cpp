// libFuzzer target for torch.distributed.pipelining action tables (io/pipeline_actions.hpp): the
// CSV reader, then the checks and the lowering at each layout the table could be meant for (its
// rows as PP, 1 or 2 stages a rank, 1 to 4 micro-batches), then the builder running a lowered
// table on a tiny model. Each must return or throw InputError / IoError (fuzz_common.hpp); a
// contract violation in the builder (a receive missing, a deferral off the chain) aborts.
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "io/pipeline_actions.hpp"
#include "workload/transformer_builder.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ws = scalescope::workload;
  static const std::string csv = scalescope::fuzz::scratch("-actions.csv");
  scalescope::fuzz::write_file(csv, {reinterpret_cast<const char*>(data), size});
  scalescope::fuzz::expect_checked([&] {
    const scalescope::io::PipelineTable table = scalescope::io::read_pipeline_actions(csv);
    const auto pp = static_cast<std::int64_t>(table.size());
    for (const std::int64_t vpp : {1, 2})
      for (std::int64_t mb = 1; mb <= 4; ++mb)
        scalescope::fuzz::expect_checked([&] {
          ws::ParallelPlan p;
          p.pipeline_model_parallel_size = pp;
          p.virtual_pipeline_model_parallel_size = vpp;
          p.data_parallel_size = 1;
          p.schedule = ws::Schedule::Actions;
          p.pipeline_actions = scalescope::io::lower_pipeline_actions(table, pp, vpp, mb, csv);
          if (pp > 8 || (vpp > 1 && pp == 1)) return;  // the builder's own rules
          ws::ModelSpec m;
          m.num_layers = pp * vpp;
          m.hidden_size = 64;
          m.ffn_hidden_size = 128;
          m.num_attention_heads = 4;
          m.num_query_groups = 4;
          m.vocab_size = 256;
          m.seq_length = 32;
          ws::TrainingSpec t;
          t.micro_batch_size = 1;
          t.global_batch_size = mb;
          (void)ws::build_graph(m, p, t);
        });
  });
  return 0;
}
