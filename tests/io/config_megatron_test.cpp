// Tests of io/megatron_args.cpp through load_experiment: a Megatron-LM launch line loads to the
// experiment it describes (options, Megatron's defaults and rules, pipeline layouts, MoE and EP
// overlap), below the YAML and above --set, and a bad option is a one-line InputError.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "io/config.hpp"
#include "io/megatron_args.hpp"
#include "workload/accounting.hpp"

#include "config_test_util.hpp"

namespace scalescope::io {
namespace {

using namespace config_test;

// ---------------------------------------------------------------- Megatron-LM launch line

/// Llama 3 70B on 1,024 H100 written by hand as Megatron-LM options, key by key from
/// inputs/experiments/llama3-70b-1k.yaml and its preset inputs/models/llama3-70b.yaml
/// (80 layers, h 8192, FFN 28672, 64 heads, 8 KV groups, head dim 128, vocabulary 128256,
/// sequence 8192, SwiGLU, untied, no biases, no dropout, RoPE; TP 8, PP 4, SP, selective
/// recomputation, distributed optimizer, overlapped grad reduce / param gather; MBS 1, GBS 512,
/// bf16). DP 32 is not an option: Megatron derives it from the world size (cluster.num_gpus).
const std::string kLlama70bLine =
    "torchrun --nproc_per_node 8 pretrain_gpt.py "
    "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
    "--group-query-attention --num-query-groups 8 --kv-channels 128 --vocab-size 128256 "
    "--make-vocab-size-divisible-by 128 --seq-length 8192 --max-position-embeddings 8192 "
    "--swiglu --untie-embeddings-and-output-weights --disable-bias-linear --hidden-dropout 0.0 "
    "--attention-dropout 0.0 --position-embedding-type rope --normalization RMSNorm "
    "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --sequence-parallel "
    "--recompute-activations --use-distributed-optimizer --overlap-grad-reduce "
    "--overlap-param-gather --tp-comm-overlap --micro-batch-size 1 --global-batch-size 512 --bf16 "
    "--transformer-impl transformer_engine --use-flash-attn --train-iters 100 --lr 1.5e-4 "
    "--data-path 0.5 /data/a_text_document 0.5 /data/b_text_document --split 99,1,0 "
    "--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-70B "
    "--save /ckpt --load /ckpt --log-interval 1 --log-throughput";
/// What the launch line cannot say: the cluster, the run section, and the label `name`.
const std::vector<std::string> kLlama70bRest = {
    "cluster.preset=dgx-h100", "cluster.num_gpus=1024", "run.trace_ranks=[0, 768]",
    "run.output=out/llama3-70b-1k", "model.name=llama3-70b"};

/// The resolved configuration without its comment header.
std::string body(const std::string& resolved) {
  return resolved.substr(resolved.find("\nmodel:"));
}

TEST(ConfigMegatron, LaunchLineLoadsToTheShippedExperiment) {
  const auto yaml = load_experiment(repo("inputs/experiments/llama3-70b-1k.yaml"));
  const auto line = load_experiment("", kLlama70bRest, kLlama70bLine);
  // Every resolved key (model, plan, training, cluster, run) is the same.
  EXPECT_EQ(body(line.resolved_yaml), body(yaml.resolved_yaml));
  EXPECT_EQ(line.parallel.dp(), 32);  // 1024 / (TP 8 · PP 4)
  EXPECT_EQ(line.model.num_query_groups, 8);
  EXPECT_EQ(line.parallel.recompute, workload::Recompute::Selective);
  EXPECT_TRUE(line.parallel.overlap_param_gather);
  EXPECT_EQ(line.training.precision, workload::Precision::Bf16);
  EXPECT_EQ(line.path, "(command line)");
  // The header names the launch line; the body stands alone (no megatron_args key).
  EXPECT_NE(line.resolved_yaml.find("# megatron_args (--megatron-args): --num-layers 80"),
            std::string::npos)
      << line.resolved_yaml;
  EXPECT_EQ(line.resolved_yaml.find("\nmegatron_args:"), std::string::npos);
  const fs::path dir = scratch();
  write(dir / "resolved.yaml", line.resolved_yaml);
  EXPECT_EQ(body(load_experiment((dir / "resolved.yaml").string()).resolved_yaml),
            body(yaml.resolved_yaml));

  // The same line as the file's `megatron_args:` key, a multi-line block with shell
  // continuations and a comment, beside the sections it cannot give.
  std::string block = kLlama70bLine;
  for (std::size_t at = 0; (at = block.find(" --", at)) != std::string::npos; at += 5)
    block.replace(at, 1, " \\\n  ");  // " --x" → " \⏎  --x"
  for (std::size_t at = 0; (at = block.find('\n', at)) != std::string::npos; at += 3)
    block.replace(at, 1, "\n  ");  // indent the continuation lines into the YAML block
  write(dir / "e.yaml", "megatron_args: |\n  # pasted from the job script\n  " + block +
                            "\ncluster: {preset: dgx-h100, num_gpus: 1024}\n"
                            "run: {trace_ranks: [0, 768], output: out/llama3-70b-1k}\n"
                            "model: {name: llama3-70b}\n");
  EXPECT_EQ(body(load_experiment((dir / "e.yaml").string()).resolved_yaml),
            body(yaml.resolved_yaml));
}

TEST(ConfigMegatron, EqualsFormAndShellQuoting) {
  const std::vector<std::string> cluster = {"cluster.preset=dgx-a100", "cluster.num_gpus=8"};
  // The Yaml() experiment's model and plan: 4 layers, h 256, 8 heads, vocab 1000, seq 128,
  // TP 2, PP 2 (DP 2 from 8 GPUs), MBS 1, GBS 4.
  const std::string plain =
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --vocab-size 1000 "
      "--seq-length 128 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
      "--micro-batch-size 1 --global-batch-size 4 --bf16";
  const std::string quoted =
      "--num-layers=4 '--hidden-size' \"256\" --num-attention-heads='8' \\\n"
      "  --vocab-size=\"1000\" --seq-length \\1\\28 # a comment --fp16\n"
      "--tensor-model-parallel-size=2 --pipeline-model-parallel-size '2' "
      "--micro-batch-size=1 --global-batch-size 4 --bf16";
  const auto a = load_experiment("", cluster, plain);
  const auto b = load_experiment("", cluster, quoted);
  EXPECT_EQ(body(a.resolved_yaml), body(b.resolved_yaml));
  EXPECT_EQ(b.model.seq_length, 128);
  EXPECT_EQ(b.parallel.dp(), 2);                               // 8 / (2·2)
  EXPECT_EQ(b.training.precision, workload::Precision::Bf16);  // "--fp16" was in the comment
  // A repeated option: the last one wins, as in argparse.
  EXPECT_EQ(load_experiment("", cluster, plain + " --num-layers 8").model.num_layers, 8);
}

TEST(ConfigMegatron, StoreTrueFlagsAndMegatronDefaults) {
  const std::vector<std::string> cluster = {"cluster.preset=dgx-h100", "cluster.num_gpus=8"};
  const std::string base =
      "--num-layers 8 --hidden-size 4096 --num-attention-heads 32 --vocab-size 32000 "
      "--seq-length 2048 --micro-batch-size 1 --global-batch-size 16 --fp16 "
      "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2";
  // Nothing but the shape: Megatron's defaults where scalescope's differ.
  const auto d = load_experiment("", cluster, base);
  EXPECT_DOUBLE_EQ(d.model.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(d.model.attention_dropout, 0.1);
  EXPECT_EQ(d.model.position_embedding_type, workload::PositionEmbedding::LearnedAbsolute);
  EXPECT_EQ(d.model.ffn_hidden_size, 4 * 4096);
  EXPECT_EQ(d.model.num_query_groups, 32);  // MHA
  EXPECT_TRUE(d.model.add_bias_linear);
  EXPECT_FALSE(d.model.untie_embeddings);
  EXPECT_FALSE(d.parallel.sequence_parallel);
  EXPECT_EQ(d.parallel.recompute, workload::Recompute::None);
  EXPECT_EQ(d.training.precision, workload::Precision::Fp16);

  const auto f = load_experiment(
      "", cluster,
      base +
          " --swiglu --untie-embeddings-and-output-weights --disable-bias-linear "
          "--group-query-attention --num-query-groups 4 --sequence-parallel "
          "--use-distributed-optimizer "
          "--overlap-grad-reduce --overlap-param-gather --recompute-granularity full "
          "--recompute-method uniform --recompute-num-layers 1 --attention-backend local "
          "--use-rotary-position-embeddings --num-layers-per-virtual-pipeline-stage 2 "
          "--no-overlap-p2p-communication --microbatch-group-size-per-virtual-pipeline-stage 2 "
          "--tp-comm-overlap --grad-reduce-in-bf16 --ddp-bucket-size 1000000");
  // Megatron's SwiGLU width: int((4·4096·2/3) / 64)·64 = int(170.67)·64 = 10880.
  EXPECT_EQ(f.model.ffn_hidden_size, 10880);
  EXPECT_TRUE(f.model.gated_linear_unit);
  EXPECT_TRUE(f.model.untie_embeddings);
  EXPECT_FALSE(f.model.add_bias_linear);
  EXPECT_EQ(f.model.num_query_groups, 4);
  EXPECT_EQ(f.model.position_embedding_type, workload::PositionEmbedding::Rope);
  EXPECT_TRUE(f.parallel.sequence_parallel);
  EXPECT_TRUE(f.parallel.use_distributed_optimizer);
  EXPECT_TRUE(f.parallel.overlap_grad_reduce);
  EXPECT_TRUE(f.parallel.overlap_param_gather);
  EXPECT_EQ(f.parallel.recompute, workload::Recompute::Full);
  EXPECT_EQ(f.training.attention, workload::AttentionBackend::Unfused);
  EXPECT_EQ(f.parallel.vpp(), 2);  // 8 layers / PP 2 = 4 per stage, 2 per virtual stage
  EXPECT_FALSE(f.parallel.overlap_p2p_comm);
  EXPECT_EQ(f.parallel.microbatch_group_size(), 2);
  EXPECT_TRUE(f.parallel.tp_comm_overlap);
  EXPECT_FALSE(f.parallel.grad_reduce_in_fp32);
  EXPECT_EQ(f.parallel.ddp_bucket_size, 1000000);

  // --use-torch-fsdp2: PyTorch FSDP2, fully sharded (ZeRO-3) layers.
  const auto fsdp2 = load_experiment("", {"cluster.preset=dgx-h100", "cluster.num_gpus=8"},
                                     base +
                                         " --use-torch-fsdp2 --tensor-model-parallel-size 1 "
                                         "--pipeline-model-parallel-size 1");
  EXPECT_TRUE(fsdp2.parallel.fsdp);
  EXPECT_EQ(fsdp2.parallel.zero_stage, 3);

  // --group-query-attention alone: Megatron's default of one group (MQA); TP 1 (the last
  // --tensor-model-parallel-size wins) so that TP divides the groups.
  const auto mqa =
      load_experiment("", {"cluster.preset=dgx-h100", "cluster.num_gpus=4"},
                      base + " --group-query-attention --tensor-model-parallel-size 1");
  EXPECT_EQ(mqa.model.num_query_groups, 1);

  // --recompute-activations is selective and wins over --recompute-granularity (arguments.py);
  // accounting the embedding and the loss: (8 + 2) / PP 2 = 5 per stage, 5 per virtual stage.
  std::string no_vocab = base;
  no_vocab.erase(no_vocab.find("--vocab-size 32000 "), 19);
  const auto g = load_experiment(
      "", cluster,
      no_vocab +
          " --recompute-activations --recompute-granularity full --padded-vocab-size 32768 "
          "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
          "--num-layers-per-virtual-pipeline-stage 5 --use-flash-attn");
  EXPECT_EQ(g.parallel.recompute, workload::Recompute::Selective);
  EXPECT_EQ(g.parallel.vpp(), 1);
  EXPECT_EQ(g.model.vocab_size, 32768);
  EXPECT_EQ(g.model.padded_vocab(2), 32768);  // already a multiple of TP 2: not padded again
  EXPECT_EQ(g.training.attention, workload::AttentionBackend::Flash);
}

TEST(ConfigMegatron, PrecedenceYamlThenLaunchLinesThenSet) {
  const fs::path dir = scratch();
  // The file: TP 2, PP 2, DP 2 (8 GPUs), hidden_dropout 0.2, and its own launch line TP 4 · PP 1.
  const std::string file = put(
      dir / "e.yaml", Yaml().drop("parallel", "dp").set("model", "hidden_dropout", "0.2").text() +
                          "megatron_args: --tensor-model-parallel-size 4 "
                          "--pipeline-model-parallel-size 1 --bf16\n");
  const auto a = load_experiment(file);
  EXPECT_EQ(a.parallel.tp(), 4);  // the file's launch line over its parallel: section
  EXPECT_EQ(a.parallel.pp(), 1);
  EXPECT_EQ(a.parallel.dp(), 2);                     // 8 / (4·1)
  EXPECT_DOUBLE_EQ(a.model.hidden_dropout, 0.2);     // set in the file: Megatron's 0.1 not applied
  EXPECT_DOUBLE_EQ(a.model.attention_dropout, 0.1);  // set nowhere: Megatron's default
  // The command line's launch line over the file's; --set over both.
  const auto b = load_experiment(file, {}, "--tensor-model-parallel-size 8");
  EXPECT_EQ(b.parallel.tp(), 8);
  EXPECT_EQ(b.parallel.pp(), 1);  // still the file's launch line
  const auto c = load_experiment(file, {"parallel.tp=2", "model.hidden_dropout=0"},
                                 "--tensor-model-parallel-size 8 --hidden-dropout 0.3");
  EXPECT_EQ(c.parallel.tp(), 2);
  EXPECT_DOUBLE_EQ(c.model.hidden_dropout, 0.0);
  // --set parallel.vpp wins over --num-layers-per-virtual-pipeline-stage.
  const auto v = load_experiment(file, {"parallel.vpp=2"},
                                 "--pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 "
                                 "--num-layers-per-virtual-pipeline-stage 2");
  EXPECT_EQ(v.parallel.vpp(), 2);  // not 4 layers / PP 2 / 2 = 1
}

TEST(ConfigMegatron, MegatronsOwnLlama3Fp8ExampleParses) {
  // The argument arrays of NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh
  // (commit 157006d), mock-data branch, paths replaced: every option is read or knowingly
  // ignored. Megatron turns --sequence-parallel off at TP 1 (arguments.py), and
  // --fp8-param-gather keeps fp8 primary weights, gathered in fp8.
  const std::string line =
      "--use-mcore-models --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 "
      "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128 "
      "--seq-length 8192 --max-position-embeddings 8192 --position-embedding-type rope "
      "--rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0 --hidden-dropout 0.0 "
      "--swiglu --init-method-std 0.0134 --attention-backend fused --apply-layernorm-1p "
      "--untie-embeddings-and-output-weights --disable-bias-linear --micro-batch-size 1 "
      "--global-batch-size 128 --train-samples 1953125000 --lr-decay-samples 1949218748 "
      "--lr-warmup-samples 3906252 --lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 "
      "--decoupled-min-lr 4.5e-5 --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 "
      "--adam-beta1 0.9 --adam-beta2 0.95 --bf16 --grad-reduce-in-bf16 "
      "--cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc "
      "--empty-unused-memory-level 1 --exit-duration-in-mins 235 --fp8-format hybrid "
      "--fp8-amax-history-len 1024 --fp8-amax-compute-algo max --fp8-param-gather "
      "--tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel "
      "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --mock-data "
      "--tokenizer-type NullTokenizer --vocab-size 128256 --data-cache-path /tmp/x "
      "--tiktoken-pattern v2 --split '99,1,0' --no-create-attention-mask-in-dataloader "
      "--no-mmap-bin-files --num-workers 1 --log-interval 1 --eval-iters 32 --eval-interval 100 "
      "--save-interval 1000 --log-throughput --profile --profile-step-start 4 "
      "--profile-step-end 6 --ckpt-format torch_dist --distributed-timeout-minutes 60 --save "
      "/tmp/ck --load /tmp/ck --tensorboard-dir /tmp/tb ";
  const ExperimentConfig c =
      load_experiment("", {"cluster.preset=dgx-h100", "cluster.num_gpus=8"}, line);
  EXPECT_EQ(c.model.num_layers, 32);
  EXPECT_EQ(c.model.num_query_groups, 8);
  EXPECT_EQ(c.training.precision, workload::Precision::Fp8);
  EXPECT_TRUE(c.parallel.fp8_param_gather);
  EXPECT_FALSE(c.parallel.sequence_parallel);
  EXPECT_EQ(c.parallel.tp(), 1);
  EXPECT_EQ(c.parallel.dp(), 8);
  EXPECT_TRUE(c.parallel.use_distributed_optimizer);
}

TEST(ConfigMegatron, MegatronsOwnGpt3Example175bParses) {
  // NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh (commit 157006d), paths
  // replaced. No --vocab-size: a --vocab-file with a --merge-file is GPT-2's BPE, 50,257
  // entries; --rampup-batch-size (3 values) only shapes the first iterations.
  const std::string line =
      "--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 "
      "--max-position-embeddings 2048 --attention-backend auto --micro-batch-size 1 "
      "--global-batch-size 1536 --rampup-batch-size 16 16 5859375 --train-iters 500000 "
      "--weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 "
      "--clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6 "
      "--lr-warmup-fraction .001 --lr-decay-iters 430000 --tensor-model-parallel-size 8 "
      "--pipeline-model-parallel-size 16 --data-path /d/x_text_document --vocab-file "
      "/v/gpt2-vocab.json --merge-file /v/gpt2-merges.txt --split 949,50,1 --log-interval 100 "
      "--save-interval 10000 --eval-interval 1000 --save /c --load /c --eval-iters 10 "
      "--tensorboard-dir /t ";
  const ExperimentConfig c =
      load_experiment("", {"cluster.preset=dgx-a100", "cluster.num_gpus=1024"}, line);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.num_layers, 96);
  EXPECT_EQ(c.training.precision, workload::Precision::Fp16);
  EXPECT_EQ(c.parallel.tp(), 8);
  EXPECT_EQ(c.parallel.pp(), 16);
  EXPECT_EQ(c.parallel.dp(), 8);
  EXPECT_EQ(c.training.global_batch_size, 1536);
}

TEST(ConfigMegatron, BadLaunchLinesAreOneLineErrorsNamingTheOption) {
  const std::vector<std::string> cluster = {"cluster.preset=dgx-a100", "cluster.num_gpus=8"};
  const std::string ok =
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --vocab-size 1000 "
      "--seq-length 128 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --bf16 "
      "--global-batch-size 16 ";
  const auto msg = [&](const std::string& line) {
    try {
      load_experiment("", cluster, line);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto expect = [&](const std::string& line, const std::string& a, const std::string& b) {
    SCOPED_TRACE(line);
    expect_names(msg(line), a, b);
  };
  expect(ok + "--num-layer 4", "--megatron-args", "unknown Megatron-LM option --num-layer");
  EXPECT_NE(msg(ok + "--num-layer 4").find("did you mean '--num-layers'"), std::string::npos);
  expect(ok + "--no-such-option", "--megatron-args", "--no-such-option");
  expect(ok + "--global-batch-size", "--megatron-args", "--global-batch-size expects a value");
  expect(ok + "--global-batch-size --fp16", "--megatron-args", "--global-batch-size expects");
  expect(ok + "--swiglu=true", "--megatron-args", "--swiglu is a flag");
  expect(ok + "--seq-length 'abc", "--megatron-args", "unterminated");
  expect(ok + "--hidden-size abc", "--hidden-size abc", "model.hidden_size");
  expect(ok + "$GPT_ARGS", "--megatron-args", "$GPT_ARGS");
  expect(ok + "80", "--megatron-args", "'80'");
  expect(ok + "--num-query-groups 2", "--num-query-groups 2", "--group-query-attention");
  // Expert options on a dense model name themselves and the missing model.num_experts.
  expect(ok + "--expert-tensor-parallel-size 2", "--expert-tensor-parallel-size 2",
         "applies to MoE models only");
  expect(ok + "--expert-model-parallel-size=4", "--expert-model-parallel-size=4",
         "applies to MoE models only");
  expect(ok + "--moe-router-topk 2", "--moe-router-topk", "applies to MoE models only");
  expect(ok + "--num-experts 8 --moe-router-topk 9", "--moe-router-topk", "exceeds");
  expect(ok + "--moe-expert-capacity-factor 1.5", "--moe-expert-capacity-factor",
         "applies to MoE models only");
  expect(ok + "--fp16", "--bf16 and --fp16", "cannot be combined");
  expect(ok + "--recompute-granularity full", "--recompute-granularity full",
         "--recompute-method (uniform or block)");
  expect(ok + "--recompute-granularity full --recompute-method random --recompute-num-layers 1",
         "--recompute-method random", "expected uniform or block");
  {
    const ExperimentConfig c = load_experiment("", cluster, ok + "--qk-layernorm --add-qkv-bias");
    EXPECT_TRUE(c.model.qk_layernorm);
    EXPECT_TRUE(c.model.add_qkv_bias);
  }
  {
    const ExperimentConfig c = load_experiment(
        "", cluster,
        ok + "--recompute-granularity full --recompute-method block --recompute-num-layers 3");
    EXPECT_EQ(c.parallel.recompute, workload::Recompute::Full);
    EXPECT_EQ(c.parallel.recompute_method, workload::RecomputeMethod::Block);
    EXPECT_EQ(c.parallel.recompute_num_layers, 3);
  }
  {
    // --recompute-modules takes a list (argparse nargs='*') up to the next option.
    const ExperimentConfig c = load_experiment(
        "", cluster,
        ok + "--recompute-granularity selective --recompute-modules moe_act layernorm "
             "--micro-batch-size 1");
    EXPECT_EQ(c.parallel.recompute, workload::Recompute::Selective);
    EXPECT_EQ(c.parallel.recompute_modules,
              workload::kRecomputeMoeAct | workload::kRecomputeLayerNorm);
  }
  expect(ok + "--recompute-granularity selective --recompute-modules attn",
         "parallel.recompute_modules", "'attn' is not a submodule");
  expect(ok + "--recompute-modules mlp", "parallel.recompute_modules",
         "applies to parallel.recompute: selective only");
  {
    // Multi-token prediction (DeepSeek-V3): a model key; Megatron's own checks refuse it with
    // learned absolute positions and with uniform recompute groups of more than one layer.
    const ExperimentConfig c =
        load_experiment("", cluster, ok + "--position-embedding-type rope --mtp-num-layers 1");
    EXPECT_EQ(c.model.mtp_num_layers, 1);
  }
  expect(ok + "--mtp-num-layers 1 --position-embedding-type learned_absolute",
         "model.mtp_num_layers=1", "MTP needs rope");
  expect(ok + "--position-embedding-type rope --mtp-num-layers 1 --recompute-granularity full "
              "--recompute-method uniform "
              "--recompute-num-layers 2",
         "model.mtp_num_layers=1", "recompute_num_layers == 1");
  expect(ok + "--num-layers-per-virtual-pipeline-stage 1 --pipeline-model-parallel-layout "
              "'Ett|ttL'",
         "--num-layers-per-virtual-pipeline-stage 1", "both give the virtual stages");
  expect(ok + "--num-layers-per-virtual-pipeline-stage 3", "--num-layers-per-virtual-pipeline",
         "2 layers per pipeline stage");  // 4 layers / PP 2 = 2, not a multiple of 3
  expect(ok + "--position-embedding-type mrope", "--position-embedding-type mrope",
         "model.position_embedding_type");
  // No --bf16 / --fp16: Megatron trains in fp32.
  std::string fp32 = ok;
  fp32.erase(fp32.find("--bf16 "), 7);
  expect(fp32, "(command line)", "fp32");
  // No vocabulary and a tokenizer whose size depends on its files (not GPT-2's or Llama 2's
  // fixed ones): the tokenizer is not read, the message says what to give.
  std::string no_vocab = ok;
  no_vocab.erase(no_vocab.find("--vocab-size 1000"), 18);
  expect(no_vocab + "--tokenizer-type HuggingFaceTokenizer", "model.vocab_size",
         "--vocab-size or --padded-vocab-size");
  // A launch line has no cluster: the preset must come from the file or --set.
  try {
    load_experiment("", {"cluster.num_gpus=8"}, ok);
    ADD_FAILURE() << "no error without a cluster";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster.preset"), std::string::npos) << e.what();
  }
  // The file's `megatron_args:` key names the file, line and column.
  const fs::path dir = scratch();
  const std::string m = error_of(dir, Yaml().text() + "megatron_args: --num-layerz 2\n");
  expect_names(m, "case.yaml:", "megatron_args: unknown Megatron-LM option --num-layerz");
  expect_names(error_of(dir, Yaml().text() + "megatron_arg: --num-layers 2\n"), "case.yaml",
               "did you mean 'megatron_args'");
}

TEST(ConfigMegatron, PipelineLayoutExpandsAsMegatronsParser) {
  // pipeline_parallel_layer_layout.py parse_str_to_list: its docstring's example
  // "Ettt|(tt|)*29,m|L" → [E t t t] + [t t]·29 + [m] + [L], 32 virtual stages; "x*n" repeats one
  // letter; commas are cosmetic.
  const auto a = detail::expand_pipeline_layout("Ettt|(tt|)*29,m|L", "x");
  ASSERT_EQ(a.size(), 32u);
  EXPECT_EQ(a.front(), "Ettt");
  for (std::size_t i = 1; i <= 29; ++i) EXPECT_EQ(a[i], "tt") << i;
  EXPECT_EQ(a[30], "m");
  EXPECT_EQ(a[31], "L");
  EXPECT_EQ(detail::expand_pipeline_layout("Et*3|t*2,|L", "x"),
            (std::vector<std::string>{"Ettt", "tt", "L"}));
  // "(t|)*2" unrolls to "t|t|": "E|t|t|L".
  EXPECT_EQ(detail::expand_pipeline_layout("E|(t|)*2L", "x"),
            (std::vector<std::string>{"E", "t", "t", "L"}));
  for (const char* bad : {"Ex|L", "E(tt|L", "E|(tt|)*|L", "*3|L"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(detail::expand_pipeline_layout(bad, "x"), InputError);
  }
}

TEST(ConfigMegatron, MoeLaunchLineTakesMegatronsDispatcherDefault) {
  const std::string line =
      "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --vocab-size 1000 "
      "--seq-length 256 --swiglu --bf16 --num-experts 8 --moe-router-topk 2 "
      "--moe-ffn-hidden-size 256 --expert-model-parallel-size 4 --global-batch-size 8";
  const std::vector<std::string> set = {"cluster.preset=dgx-h100", "cluster.num_gpus=8"};
  const auto c = load_experiment("", set, line);
  EXPECT_EQ(c.model.num_experts, 8);
  EXPECT_EQ(c.parallel.ep(), 4);
  EXPECT_EQ(c.parallel.moe_token_dispatcher_type, workload::MoeDispatcher::AllGather);
  const auto a2a = load_experiment("", set, line + " --moe-token-dispatcher-type alltoall");
  EXPECT_EQ(a2a.parallel.moe_token_dispatcher_type, workload::MoeDispatcher::AllToAll);
  // Group-limited routing: both options or neither, whole groups.
  const auto grouped =
      load_experiment("", set, line + " --moe-router-num-groups 4 --moe-router-group-topk 2");
  EXPECT_EQ(grouped.model.moe_router_num_groups, 4);
  EXPECT_EQ(grouped.model.moe_router_group_topk, 2);
  for (const char* bad : {" --moe-router-num-groups 4",
                          " --moe-router-num-groups 3 "
                          "--moe-router-group-topk 1"})
    EXPECT_THROW(load_experiment("", set, line + bad), InputError) << bad;
  // The flex dispatcher (DeepEP / HybridEP), by name or through the older --moe-enable-deepep.
  for (const char* flex : {" --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend "
                           "hybridep",
                           " --moe-enable-deepep"})
    EXPECT_EQ(load_experiment("", set, line + flex).parallel.moe_token_dispatcher_type,
              workload::MoeDispatcher::Flex)
        << flex;
  // The MoE kernel options: fusions, and the aux loss's coefficient, which runs kernels only for
  // a load-balancing type that has a loss (Megatron's default aux_loss; not none or sinkhorn).
  const auto fused = load_experiment(
      "", set, line + " --moe-router-fusion --moe-permute-fusion --moe-aux-loss-coeff 1e-2");
  EXPECT_TRUE(fused.parallel.moe_router_fusion);
  EXPECT_TRUE(fused.parallel.moe_permute_fusion);
  EXPECT_EQ(fused.model.moe_aux_loss_coeff, 1e-2);
  EXPECT_EQ(load_experiment("", set,
                            line + " --moe-aux-loss-coeff 1e-4 --moe-router-load-balancing-type "
                                   "seq_aux_loss")
                .model.moe_aux_loss_coeff,
            1e-4);
  for (const char* none : {"none", "sinkhorn"})
    EXPECT_EQ(
        load_experiment(
            "", set, line + " --moe-aux-loss-coeff 1e-2 --moe-router-load-balancing-type " + none)
            .model.moe_aux_loss_coeff,
        0.0)
        << none;
}

TEST(ConfigMegatron, EpOverlapOptionsAndMegatronsRules) {
  // --overlap-moe-expert-parallel-comm and --delay-wgrad-compute, with the rules Megatron's
  // TransformerConfig asserts; each refusal names the key.
  const std::string line =
      "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --vocab-size 1000 "
      "--seq-length 256 --swiglu --bf16 --num-experts 8 --moe-router-topk 2 "
      "--moe-ffn-hidden-size 256 --expert-model-parallel-size 4 --moe-token-dispatcher-type flex "
      "--global-batch-size 8";
  const std::vector<std::string> set = {"cluster.preset=dgx-h100", "cluster.num_gpus=8"};
  const auto c =
      load_experiment("", set, line + " --overlap-moe-expert-parallel-comm --delay-wgrad-compute");
  EXPECT_TRUE(c.parallel.moe_a2a_overlap);
  EXPECT_TRUE(c.parallel.delay_wgrad_compute);
  const auto error = [&](const std::string& extra, std::vector<std::string> more = {}) {
    std::vector<std::string> o = set;
    o.insert(o.end(), more.begin(), more.end());
    try {
      load_experiment("", o, line + " --overlap-moe-expert-parallel-comm" + extra);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(""), "");
  for (const auto& [extra, why] : std::vector<std::pair<std::string, std::string>>{
           {" --moe-token-dispatcher-type allgather", "alltoall or flex"},
           {" --expert-model-parallel-size 1", "expert_model_parallel_size > 1"},
           {" --pipeline-model-parallel-size 2", "virtual_pipeline_model_parallel_size"},
           {" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
            "recompute: full"},
           {" --recompute-granularity selective --recompute-modules moe", "moe"}}) {
    const std::string m = error(extra);
    EXPECT_NE(m.find("parallel.moe_a2a_overlap"), std::string::npos) << extra << ": " << m;
    EXPECT_NE(m.find(why), std::string::npos) << extra << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // --delay-wgrad-compute alone.
  EXPECT_THROW(load_experiment("", set, line + " --delay-wgrad-compute"), InputError);
}

// A launch line without --global-batch-size is refused naming the flag (Megatron-LM's default,
// micro_batch_size·DP, would be one micro-batch per pipeline); the YAML's key or --set gives it.
TEST(ConfigMegatron, MissingGlobalBatchSizeIsAnError) {
  const std::string line =
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --vocab-size 1000 "
      "--seq-length 128 --pipeline-model-parallel-size 2 --micro-batch-size 1 --bf16";
  const std::vector<std::string> set = {"cluster.preset=dgx-h100", "cluster.num_gpus=8"};
  try {
    load_experiment("", set, line);
    ADD_FAILURE() << "a launch line without --global-batch-size was taken";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--megatron-args"), std::string::npos) << m;
    EXPECT_NE(m.find("no --global-batch-size"), std::string::npos) << m;
  }
  std::vector<std::string> with = set;
  with.push_back("training.global_batch_size=32");
  EXPECT_EQ(load_experiment("", with, line).training.global_batch_size, 32);
  EXPECT_EQ(load_experiment("", set, line + " --global-batch-size 64").training.global_batch_size,
            64);
}

}  // namespace
}  // namespace scalescope::io
