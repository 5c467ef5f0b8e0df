#!/usr/bin/env bash
# Installs the Debian packages scalescope needs. Idempotent: does nothing when all are present.
set -euo pipefail
pkgs=(build-essential cmake pkg-config
  libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libgtest-dev libbenchmark-dev libmetis-dev libtrilinos-kokkos-dev libprotobuf-dev protobuf-compiler
  python3-h5py python3-numpy python3-matplotlib python3-yaml python3-torch
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
