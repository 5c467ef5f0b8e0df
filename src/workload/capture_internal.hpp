#pragma once
/// Internal helpers of the capture lowering shared by its source files (workload/capture*.cpp):
/// captured nodes' dtypes, op names, module paths and views. Not part of the public interface
/// (workload/capture.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "workload/capture.hpp"

namespace scalescope::workload::detail {

// capture.cpp
/// A node's (first) result dtype; "" when it has none.
std::string dtype_of(const CapturedNode& d);
std::string base_op(const std::string& op);
/// A backward op (its base name ends in "_backward"): fused attention backward ops take the
/// output gradient before the query, key and value.
bool is_backward_op(const std::string& op);
/// The expert index of a module path ("layers.0.block_sparse_moe.experts.3.w1" → 3), or -1.
std::int64_t expert_of(const std::string& module);
std::int64_t experts_in(const std::vector<CapturedNode>& nodes);

// capture_lower.cpp
bool is_view_node(const CapturedNode& d);
/// The tensor behind view-like ops (node `j` itself when it is not a view).
std::uint32_t view_root(const std::vector<CapturedNode>& nodes, std::uint32_t j);

}  // namespace scalescope::workload::detail
