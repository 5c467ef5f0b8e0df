// GoogleTest main that owns MPI start-up, so tests can use parallel HDF5 and the MPI engine.
#include <gtest/gtest.h>
#include <mpi.h>

#include "core/mpi_singleton.hpp"
#include "core/sanitizer_defaults.hpp"

int main(int argc, char** argv) {
  // ctest runs these as parallel singletons: each gets its own Open MPI session directory.
  const scalescope::core::PrivateMpiSessionRoot session_root;
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
