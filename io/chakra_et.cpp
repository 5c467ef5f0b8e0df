#include "io/chakra_et.hpp"

#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "chakra/et_def.pb.h"
#include "core/error.hpp"

namespace scalescope::io {

namespace pb = ChakraProtoMsg;

// ---------------------------------------------------------------------------------------------
// Plain attribute values

bool EtAttr::is_integer() const {
  return member == 7 || member == 9 || member == 11 || member == 13 || member == 15 ||
         member == 17 || member == 19 || member == 21 || member == 23 || member == 25 ||
         member == 27;
}
bool EtAttr::is_real() const {
  return member == 3 || member == 5;
}
bool EtAttr::is_string() const {
  return member == 29 || member == 31;
}

EtAttr EtAttr::int64(std::string name, std::int64_t v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 9;
  a.i = v;
  return a;
}
EtAttr EtAttr::uint64(std::string name, std::uint64_t v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 13;
  a.i = static_cast<std::int64_t>(v);
  a.u64_overflow = v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  return a;
}
EtAttr EtAttr::int32(std::string name, std::int32_t v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 7;
  a.i = v;
  return a;
}
EtAttr EtAttr::boolean(std::string name, bool v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 27;
  a.i = v ? 1 : 0;
  return a;
}
EtAttr EtAttr::real(std::string name, double v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 3;
  a.d = v;
  return a;
}
EtAttr EtAttr::string(std::string name, std::string v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 29;
  a.s = std::move(v);
  return a;
}
EtAttr EtAttr::int64_list(std::string name, std::vector<std::int64_t> v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 10;
  a.ints = std::move(v);
  return a;
}
EtAttr EtAttr::double_list(std::string name, std::vector<double> v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 4;
  a.reals = std::move(v);
  return a;
}

const EtAttr* EtNode::attr(std::string_view n) const {
  for (const EtAttr& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}
const EtAttr* EtFile::meta_attr(std::string_view n) const {
  for (const EtAttr& a : meta)
    if (a.name == n) return &a;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Protobuf: the only place that touches the generated classes.

namespace {

template <class List, class Out>
void copy_list(const List& l, Out& out) {
  out.assign(l.values().begin(), l.values().end());  // converting each value; keeps capacity
}

void set_uint64(EtAttr& a, std::uint64_t v) {
  a.i = static_cast<std::int64_t>(v);
  a.u64_overflow = v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
}

/// `p` into `a`, reusing a's strings and lists.
void from_proto(const pb::AttributeProto& p, EtAttr& a) {
  a.name.assign(p.name());
  a.i = 0;
  a.u64_overflow = false;
  a.d = 0;
  a.s.clear();
  a.ints.clear();
  a.reals.clear();
  a.strs.clear();
  a.member = static_cast<int>(p.value_case());
  using V = pb::AttributeProto;
  switch (p.value_case()) {
    case V::kDoubleVal:
      a.d = p.double_val();
      break;
    case V::kFloatVal:
      a.d = p.float_val();
      break;
    case V::kInt32Val:
      a.i = p.int32_val();
      break;
    case V::kInt64Val:
      a.i = p.int64_val();
      break;
    case V::kUint32Val:
      a.i = p.uint32_val();
      break;
    case V::kUint64Val:
      set_uint64(a, p.uint64_val());
      break;
    case V::kSint32Val:
      a.i = p.sint32_val();
      break;
    case V::kSint64Val:
      a.i = p.sint64_val();
      break;
    case V::kFixed32Val:
      a.i = p.fixed32_val();
      break;
    case V::kFixed64Val:
      set_uint64(a, p.fixed64_val());
      break;
    case V::kSfixed32Val:
      a.i = p.sfixed32_val();
      break;
    case V::kSfixed64Val:
      a.i = p.sfixed64_val();
      break;
    case V::kBoolVal:
      a.i = p.bool_val() ? 1 : 0;
      break;
    case V::kStringVal:
      a.s = p.string_val();
      break;
    case V::kBytesVal:
      a.s = p.bytes_val();
      break;
    case V::kDoubleList:
      copy_list(p.double_list(), a.reals);
      break;
    case V::kFloatList:
      copy_list(p.float_list(), a.reals);
      break;
    case V::kInt32List:
      copy_list(p.int32_list(), a.ints);
      break;
    case V::kInt64List:
      copy_list(p.int64_list(), a.ints);
      break;
    case V::kUint32List:
      copy_list(p.uint32_list(), a.ints);
      break;
    case V::kUint64List:
      copy_list(p.uint64_list(), a.ints);
      break;
    case V::kSint32List:
      copy_list(p.sint32_list(), a.ints);
      break;
    case V::kSint64List:
      copy_list(p.sint64_list(), a.ints);
      break;
    case V::kFixed32List:
      copy_list(p.fixed32_list(), a.ints);
      break;
    case V::kFixed64List:
      copy_list(p.fixed64_list(), a.ints);
      break;
    case V::kSfixed32List:
      copy_list(p.sfixed32_list(), a.ints);
      break;
    case V::kSfixed64List:
      copy_list(p.sfixed64_list(), a.ints);
      break;
    case V::kBoolList:
      for (bool b : p.bool_list().values()) a.ints.push_back(b ? 1 : 0);
      break;
    case V::kStringList:
      for (const auto& s : p.string_list().values()) a.strs.push_back(s);
      break;
    case V::kBytesList:
      for (const auto& s : p.bytes_list().values()) a.strs.push_back(s);
      break;
    case V::VALUE_NOT_SET:
      break;
  }
}

void to_proto(const EtAttr& a, pb::AttributeProto& p) {
  p.set_name(a.name);
  switch (a.member) {
    case 3:
      p.set_double_val(a.d);
      break;
    case 4:
      for (double v : a.reals) p.mutable_double_list()->add_values(v);
      break;
    case 7:
      p.set_int32_val(static_cast<std::int32_t>(a.i));
      break;
    case 9:
      p.set_int64_val(a.i);
      break;
    case 10:
      for (std::int64_t v : a.ints) p.mutable_int64_list()->add_values(v);
      break;
    case 13:
      p.set_uint64_val(static_cast<std::uint64_t>(a.i));
      break;
    case 27:
      p.set_bool_val(a.i != 0);
      break;
    case 29:
      p.set_string_val(a.s);
      break;
    default:
      SCALESCOPE_EXPECTS(false && "EtAttr member the writer does not emit");
  }
}

void append_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void append_message(std::string& out, const google::protobuf::MessageLite& m) {
  std::string body;
  if (!m.SerializeToString(&body)) throw_io("Chakra ET: cannot serialize a message");
  SCALESCOPE_EXPECTS(body.size() < (std::uint64_t{1} << 32));
  append_varint(out, body.size());
  out += body;
}

}  // namespace

std::string encode_chakra(const EtFile& f) {
  std::string out;
  pb::GlobalMetadata meta;
  meta.set_version(f.version);
  for (const EtAttr& a : f.meta) to_proto(a, *meta.add_attr());
  append_message(out, meta);
  pb::Node p;  // reused: Clear keeps its buffers
  for (const EtNode& n : f.nodes) {
    p.Clear();
    p.set_id(n.id);
    p.set_name(n.name);
    p.set_type(static_cast<pb::NodeType>(n.type));
    for (auto d : n.ctrl_deps) p.add_ctrl_deps(d);
    for (auto d : n.data_deps) p.add_data_deps(d);
    if (n.start_time_micros) p.set_start_time_micros(n.start_time_micros);
    if (n.duration_micros) p.set_duration_micros(n.duration_micros);
    if (!n.inputs_values.empty()) p.mutable_inputs()->set_values(n.inputs_values);
    for (const EtAttr& a : n.attrs) to_proto(a, *p.add_attr());
    append_message(out, p);
  }
  return out;
}

EtFile decode_chakra(const std::string& bytes, const std::string& label) {
  EtFile f;
  decode_chakra(bytes, label, f);
  return f;
}

void decode_chakra(const std::string& bytes, const std::string& label, EtFile& f) {
  // protobuf logs its own complaints (invalid UTF-8 in a string field, …) to stderr; a bad file
  // is reported by our one-line error alone.
  static const bool silenced = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)silenced;
  f.version.clear();
  f.meta.clear();
  std::size_t count = 0;  // nodes decoded; f.nodes beyond it are kept for their buffers
  std::size_t pos = 0;
  bool have_meta = false;
  std::uint64_t last_id = 0;
  bool any_node = false;
  auto where = [&](std::size_t at) {
    std::string s = fmt::format("{}: byte offset {}", label, at);
    if (any_node) s += fmt::format(" (after node {})", last_id);
    return s;
  };
  pb::Node p;
  while (pos < bytes.size()) {
    const std::size_t start = pos;
    // Length: a base-128 varint of at most 5 bytes and 32 bits (feeder v3's limit).
    std::uint64_t len = 0;
    int shift = 0;
    for (;;) {
      if (pos >= bytes.size())
        throw_input("{}: truncated file: the length varint runs past the end", where(start));
      if (shift >= 35)
        throw_input("{}: length varint longer than 5 bytes (not a Chakra ET file?)", where(start));
      const auto c = static_cast<std::uint8_t>(bytes[pos++]);
      len |= static_cast<std::uint64_t>(c & 0x7F) << shift;
      shift += 7;
      if ((c & 0x80) == 0) break;
    }
    if (len > 0xFFFFFFFFull)
      throw_input("{}: message length {} exceeds 32 bits", where(start), len);
    if (len == 0 && have_meta) break;  // the Python decoder stops on a length of 0 as well
    if (len > bytes.size() - pos)
      throw_input("{}: truncated file: message of {} bytes but only {} remain", where(start), len,
                  bytes.size() - pos);
    const char* data = bytes.data() + pos;
    const int n = static_cast<int>(len);
    pos += static_cast<std::size_t>(len);
    if (!have_meta) {
      pb::GlobalMetadata m;
      if (!m.ParseFromArray(data, n))
        throw_input("{}: GlobalMetadata does not parse as protobuf", where(start));
      f.version = m.version();
      f.meta.resize(static_cast<std::size_t>(m.attr_size()));
      for (int k = 0; k < m.attr_size(); ++k)
        from_proto(m.attr(k), f.meta[static_cast<std::size_t>(k)]);
      have_meta = true;
      continue;
    }
    if (!p.ParseFromArray(data, n))  // clears p first; its buffers are reused node to node
      throw_input("{}: node message does not parse as protobuf", where(start));
    if (count == f.nodes.size()) f.nodes.emplace_back();
    EtNode& node = f.nodes[count++];  // reused: its strings and lists keep their capacity
    node.id = p.id();
    node.name.assign(p.name());
    node.type = static_cast<int>(p.type());
    node.ctrl_deps.assign(p.ctrl_deps().begin(), p.ctrl_deps().end());
    node.data_deps.assign(p.data_deps().begin(), p.data_deps().end());
    node.start_time_micros = p.start_time_micros();
    node.duration_micros = p.duration_micros();
    node.inputs_values.clear();
    if (p.has_inputs()) node.inputs_values.assign(p.inputs().values());
    node.attrs.resize(static_cast<std::size_t>(p.attr_size()));
    for (int k = 0; k < p.attr_size(); ++k)
      from_proto(p.attr(k), node.attrs[static_cast<std::size_t>(k)]);
    last_id = node.id;
    any_node = true;
  }
  f.nodes.resize(count);  // a shorter file: the nodes past its end go
  if (!have_meta) throw_input("{}: empty file (no GlobalMetadata)", label);
}

EtFile read_chakra_file(const std::string& path) {
  EtFile f;
  std::string buffer;
  read_chakra_file(path, f, buffer);
  return f;
}

void read_chakra_file(const std::string& path, EtFile& f, std::string& buffer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_io("{}: cannot open", path);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw_io("{}: read error", path);
  in.seekg(0, std::ios::beg);
  buffer.resize(static_cast<std::size_t>(size));
  if (size > 0 && !in.read(buffer.data(), size)) throw_io("{}: read error", path);
  decode_chakra(buffer, path, f);
}

}  // namespace scalescope::io
