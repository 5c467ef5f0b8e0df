# The pinned PyTorch 2.x environment for capture (sourced by scripts/setup.sh and
# scripts/capture/python). PyPI's torch is the CUDA build (it runs on the CPU; ~3 GB of wheels,
# ~5 GB installed); one venv per pin, shared by every checkout of this user.
# Pins: torch 2.11.0 (the release our H200 measurements ran, docs/h200-measurements.md),
# transformers 5.25.0 (Hugging Face models from config.json, their base_model_tp_plan), torchtitan
# 0.2.2 (its Llama 3 and apply_tp; the last release for torch 2.11: 0.3.0 needs a newer torch),
# h5py 3.16.0.
SCALESCOPE_TORCH_PINS="torch==2.11.0 transformers==5.25.0 torchtitan==0.2.2 h5py==3.16.0 einops==0.8.2"
SCALESCOPE_TORCH_VENV="${SCALESCOPE_TORCH_VENV:-${HOME:-/root}/.cache/scalescope/torch-2.11.0}"
