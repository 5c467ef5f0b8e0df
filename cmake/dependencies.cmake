# All third-party packages, found once. See ../shared/TOOLCHAIN.md for why each line is as it is.
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI REQUIRED COMPONENTS C CXX)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "scalescope needs parallel HDF5 (Debian: libhdf5-openmpi-dev)")
endif()

find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(Protobuf REQUIRED)  # Chakra execution traces (io/chakra); Debian: libprotobuf-dev

# METIS (Debian's libmetis-dev) ships no CMake config; idx_t is 32-bit there.
find_path(METIS_INCLUDE_DIR metis.h)
find_library(METIS_LIBRARY metis)
if(NOT METIS_INCLUDE_DIR OR NOT METIS_LIBRARY)
  message(FATAL_ERROR "scalescope needs METIS (Debian: libmetis-dev)")
endif()
add_library(METIS::METIS UNKNOWN IMPORTED)
set_target_properties(METIS::METIS PROPERTIES IMPORTED_LOCATION ${METIS_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${METIS_INCLUDE_DIR})
if(SCALESCOPE_ENABLE_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(SCALESCOPE_ENABLE_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
