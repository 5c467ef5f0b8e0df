#include "io/capture_h5.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace {

std::vector<workload::CapturedNode> read_nodes(const h5::Group& g, const std::string& path) {
  const std::vector<std::uint8_t> bytes = g.read<std::uint8_t>("nodes_json");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw_input("{}: {}/nodes_json: malformed JSON: {}", path, g.path(), e.what());
  }
  if (!j.is_array()) throw_input("{}: {}/nodes_json: expected a list of nodes", path, g.path());
  std::vector<workload::CapturedNode> out;
  out.reserve(j.size());
  try {
    for (const auto& n : j) {
      workload::CapturedNode d;
      d.name = n.at("name").get<std::string>();
      d.kind = n.at("kind").get<std::string>();
      d.op = n.at("op").get<std::string>();
      d.inputs = n.at("inputs").get<std::vector<std::uint32_t>>();
      d.shapes = n.at("shapes").get<std::vector<std::vector<std::int64_t>>>();
      d.dtypes = n.at("dtypes").get<std::vector<std::string>>();
      d.module = n.value("module", std::string());
      d.param = n.value("param", std::string());
      d.causal = n.value("causal", false);
      for (std::uint32_t i : d.inputs)
        if (i >= out.size())
          throw_input("{}: {}/nodes_json: node {} ('{}') reads node {}, which does not precede it",
                      path, g.path(), out.size(), d.name, i);
      out.push_back(std::move(d));
    }
  } catch (const nlohmann::json::exception& e) {
    throw_input("{}: {}/nodes_json: node {}: {}", path, g.path(), out.size(), e.what());
  }
  return out;
}

}  // namespace

workload::Capture read_capture_h5(const std::string& path) {
  h5::silence_errors();
  const h5::File file = h5::File::open(path);
  const h5::Group root = file.root();
  const h5::Group meta = root.open_group("meta");
  if (meta.attribute<std::int64_t>("format_version") != 1)
    meta.fail("format_version is not 1 (this build reads capture format 1)");
  workload::Capture c;
  c.model = meta.string_attribute("model");
  c.num_blocks = meta.attribute<std::int64_t>("num_blocks");
  c.batch = meta.attribute<std::int64_t>("batch");
  c.seq = meta.attribute<std::int64_t>("seq");
  c.vocab_size = meta.attribute<std::int64_t>("vocab_size");
  c.dtype = meta.string_attribute("dtype");
  c.torch_version = meta.string_attribute("torch_version");
  c.blocks_attr = meta.string_attribute("blocks_attr");
  c.block = read_nodes(root.open_group("block"), path);
  c.outer = read_nodes(root.open_group("outer"), path);
  return c;
}

}  // namespace scalescope::io
