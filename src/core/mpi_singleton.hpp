#pragma once
/// A private Open MPI session directory for a process started without mpirun / srun.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace scalescope::core {

/// A process started on its own is an Open MPI singleton, whose session directory lives under
/// /tmp/ompi.HOST.UID, shared by every singleton on the machine. Open MPI 4.1 removes that
/// directory when the last process in it finalizes, and a singleton starting at that moment
/// fails in orte_init ("A call to mkdir was unable to create the desired directory": seen under
/// `ctest -j2` and parallel validation runs, 2026-12-05). Constructed before MPI_Init, this gives
/// the process a session root of its own (OMPI_MCA_orte_tmpdir_base), removed when it is
/// destroyed after MPI_Finalize. Under a launcher (mpirun, srun) or when the variable is set
/// already, it does nothing.
class PrivateMpiSessionRoot {
 public:
  PrivateMpiSessionRoot() {
    if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
        std::getenv("SLURM_PROCID") != nullptr ||
        std::getenv("OMPI_MCA_orte_tmpdir_base") != nullptr)
      return;
    std::error_code ec;
    const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
    if (ec) return;
    std::string dir = (tmp / "scalescope-ompi-XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) return;
    if (setenv("OMPI_MCA_orte_tmpdir_base", dir.c_str(), 1) != 0) return;
    dir_ = dir;
  }
  ~PrivateMpiSessionRoot() {
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  PrivateMpiSessionRoot(const PrivateMpiSessionRoot&) = delete;
  PrivateMpiSessionRoot& operator=(const PrivateMpiSessionRoot&) = delete;

 private:
  std::string dir_;
};

}  // namespace scalescope::core
