#!/usr/bin/env bash
# Installs the Debian packages scalescope needs. Idempotent: does nothing when all are present.
set -euo pipefail
pkgs=(build-essential cmake pkg-config
  libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libgtest-dev libbenchmark-dev libmetis-dev libtrilinos-kokkos-dev libprotobuf-dev protobuf-compiler
  python3-h5py python3-numpy python3-matplotlib python3-yaml python3-torch python3-venv
  chromium chromium-driver python3-selenium fonts-liberation
  slurmctld slurmd slurm-client munge libpmix2
  clang libclang-rt-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
  $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The pinned PyTorch 2.x venv for capture (scripts/torch_venv.sh): installed once per pin, kept
# when its packages import. SCALESCOPE_SKIP_TORCH_VENV=1 skips it (capture then runs on Debian's
# PyTorch 1.13 and the 2.x capture tests skip, saying so).
source "$(dirname "$0")/torch_venv.sh"
if [ "${SCALESCOPE_SKIP_TORCH_VENV:-0}" != 1 ]; then
  if ! "$SCALESCOPE_TORCH_VENV/bin/python" -c "import torch, transformers, h5py, einops, torchtitan" \
      >/dev/null 2>&1; then
    echo "setup: installing $SCALESCOPE_TORCH_PINS into $SCALESCOPE_TORCH_VENV (~3 GB download)"
    rm -rf "$SCALESCOPE_TORCH_VENV"
    mkdir -p "$(dirname "$SCALESCOPE_TORCH_VENV")"
    /usr/bin/python3 -m venv "$SCALESCOPE_TORCH_VENV"
    # shellcheck disable=SC2086  # the pins are words
    "$SCALESCOPE_TORCH_VENV/bin/pip" install -q --disable-pip-version-check \
      $SCALESCOPE_TORCH_PINS
  fi
fi
