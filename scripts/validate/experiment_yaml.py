"""One experiment YAML from plain key/value sections, for the validation scripts that turn a row of
public measurements into a scalescope run (h100.py, megatron_memory.py)."""


def flag(value):
    """A CSV cell as a boolean ('true' / anything else)."""
    return str(value).strip().lower() == "true"


def _scalar(v):
    return str(v).lower() if isinstance(v, bool) else str(v)


def experiment_yaml(model, parallel, training, num_gpus, preset="dgx-h100", trace=(0,)):
    """The YAML text of an experiment: `model`, `parallel`, `training` are ordered dicts of
    docs/config.md keys; a `virtual_pipeline_model_parallel_size` of 1 is left out."""
    lines = ["model:"] + [f"  {k}: {_scalar(v)}" for k, v in model.items()]
    lines += ["parallel:"] + [f"  {k}: {_scalar(v)}" for k, v in parallel.items()
                              if not (k == "virtual_pipeline_model_parallel_size" and int(v) <= 1)]
    lines += ["training:"] + [f"  {k}: {_scalar(v)}" for k, v in training.items()]
    lines += ["cluster:", f"  preset: {preset}", f"  num_gpus: {num_gpus}",
              "run:", f"  trace_ranks: [{', '.join(str(t) for t in trace)}]"]
    return "\n".join(lines) + "\n"
