"""torchtitan's own Llama 3 and its own tensor parallelism (torchtitan 0.2.2 from PyPI, in the
pinned venv): `scalescope capture --factory tests/capture/torchtitan_llama3.py:llama3_8b
--parallelize tests/capture/torchtitan_llama3.py:parallelize --world N --tp T --sp`.
The model is torchtitan.models.llama3's Transformer at its "8B" arguments (llama3_args), the
parallelization torchtitan's apply_tp (torchtitan/models/llama3/infra/parallelize.py), called as
its parallelize_llama calls it for TP with loss parallelism off and no float8."""
import dataclasses


def llama3_8b(layers):
    from torchtitan.models.llama3 import llama3_args
    from torchtitan.models.llama3.model.model import Transformer
    args = dataclasses.replace(llama3_args["8B"], n_layers=layers or llama3_args["8B"].n_layers)
    model = Transformer(args)
    ffn = model.layers["0"].feed_forward.w1.out_features  # torchtitan's FFN sizing: 14336
    shapes = {"hidden_size": args.dim, "num_attention_heads": args.n_heads,
              "num_query_groups": args.n_kv_heads or args.n_heads,
              "kv_channels": args.dim // args.n_heads, "ffn_hidden_size": ffn,
              "num_layers": args.n_layers, "vocab_size": args.vocab_size,
              "gated_linear_unit": True, "add_bias_linear": False,
              "position_embedding_type": "rope", "untie_embeddings": True}
    return model, shapes


def parallelize(model, mesh):
    from torchtitan.models.llama3.infra.parallelize import apply_tp
    apply_tp(model, mesh["tp"], loss_parallel=False, enable_float8_tensorwise_tp=False)
