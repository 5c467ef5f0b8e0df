#include "pdes/optimistic_engine.hpp"

#include "core/error.hpp"

namespace scalescope::pdes {

class OptimisticEngine::Impl {};

OptimisticEngine::OptimisticEngine(MPI_Comm, std::vector<std::uint32_t>,
                                   const std::function<LogicalProcess*(LpId)>&, OptimisticConfig)
    : impl_(std::make_unique<Impl>()) {}
OptimisticEngine::~OptimisticEngine() = default;
OptimisticStats OptimisticEngine::run(SimTime) {
  throw ContractError("OptimisticEngine: not implemented yet");
}
OptimisticStats OptimisticEngine::total(const OptimisticStats& local) const { return local; }

}  // namespace scalescope::pdes
