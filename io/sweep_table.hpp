#pragma once
/// A sweep's result table (docs/formats.md "sweep.csv / sweep.json"): one row per configuration,
/// ranked by explore::rank_rows. Written through temporary names.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "explore/sweep.hpp"

namespace scalescope::io {

/// A row as JSON (every field; doubles round-trip exactly), and back. row_from_json throws
/// IoError on a row that is not one.
nlohmann::ordered_json sweep_row_json(const explore::Row& r);
explore::Row sweep_row_from_json(const nlohmann::ordered_json& j);

/// sweep.csv: a header line, then the rows in `order` (positions in `rows`), the first column
/// the rank (1 = best).
std::string sweep_csv(const std::vector<explore::Row>& rows, const std::vector<std::size_t>& order);

/// Writes `dir`/sweep.csv and `dir`/sweep.json (the experiment, the axes, the rows in order).
void write_sweep(const std::string& dir, const std::string& experiment,
                 const std::vector<explore::Axis>& axes, const std::vector<explore::Row>& rows,
                 const std::vector<std::size_t>& order);

/// The console table: the first `top` rows in order (all with top = 0), and a count of the rows
/// left out by status.
std::string format_sweep_table(const std::vector<explore::Row>& rows,
                               const std::vector<std::size_t>& order, std::size_t top);

}  // namespace scalescope::io
