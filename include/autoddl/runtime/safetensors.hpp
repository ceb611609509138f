#pragma once
// The safetensors file format (Hugging Face): model weights as named tensors.
//   bytes 0..7     n, the header's length, a little-endian unsigned 64-bit integer
//   bytes 8..8+n   a JSON object {name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
//                  ..., "__metadata__": {string: string}} (the metadata optional)
//   the rest       the data: tensor `name` is bytes [b, e) of it, row-major, little-endian
// Example: a tensor "w" of shape [2] in F32 is {"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}.
// autoddl reads and writes the floating-point types F32, F64, BF16 and F16, holding values as
// float (F64 rounds to nearest; the 16-bit types widen exactly). Files are written with the
// header padded with spaces to a multiple of 8 bytes, so the data starts aligned.
// Reading is defensive: a file too short for its header, a header that is not JSON or not an
// object of tensors, an unknown dtype, a shape whose element count does not match its bytes,
// offsets outside the data or overlapping another tensor's: one sentence naming the file and the
// tensor (autoddl::error), never a read past the end.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "autoddl/backend/cpu/half_types.hpp"
#include "autoddl/error.hpp"
#include "autoddl/json_input.hpp"
#include "autoddl/runtime/checkpoint.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

/// The element types autoddl reads and writes, by their safetensors names.
enum class safetensors_dtype : std::uint8_t { f32, f64, bf16, f16 };

inline std::string_view to_string(safetensors_dtype t) {
  switch (t) {
    case safetensors_dtype::f32: return "F32";
    case safetensors_dtype::f64: return "F64";
    case safetensors_dtype::bf16: return "BF16";
    case safetensors_dtype::f16: return "F16";
  }
  return "F32";
}
inline std::int64_t element_bytes(safetensors_dtype t) {
  return t == safetensors_dtype::f64 ? 8 : t == safetensors_dtype::f32 ? 4 : 2;
}
inline std::optional<safetensors_dtype> parse_safetensors_dtype(std::string_view s) {
  for (safetensors_dtype t : {safetensors_dtype::f32, safetensors_dtype::f64, safetensors_dtype::bf16, safetensors_dtype::f16})
    if (s == to_string(t)) return t;
  return std::nullopt;
}

/// One named tensor: its element type in the file, its shape, its values row-major.
struct named_tensor {
  std::string name;
  safetensors_dtype dtype = safetensors_dtype::f32;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

/// A file's tensors (in the order of their data) and its metadata.
struct safetensors_contents {
  std::vector<named_tensor> tensors;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::size_t, std::less<>> by_name;  ///< tensor index per name (parse_safetensors fills it)
  /// The tensor called `name`, or nullptr.
  const named_tensor* find(std::string_view name) const {
    if (const auto i = by_name.find(name); i != by_name.end()) return &tensors.at(i->second);
    if (!by_name.empty()) return nullptr;
    for (const named_tensor& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
};

/// The largest header autoddl reads (as the format's reference reader: 100 MB).
inline constexpr std::uint64_t safetensors_max_header = 100'000'000;

namespace detail {

inline std::uint64_t read_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

/// Element i of raw little-endian data of type t, as float.
inline float decode_element(const unsigned char* p, safetensors_dtype t) {
  auto le = [p](int bytes) {
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  };
  switch (t) {
    case safetensors_dtype::f32: return std::bit_cast<float>(std::uint32_t(le(4)));
    case safetensors_dtype::f64: return float(std::bit_cast<double>(le(8)));
    case safetensors_dtype::bf16: return float_of_bfloat16_bits(std::uint16_t(le(2)));
    case safetensors_dtype::f16: return float_of_float16_bits(std::uint16_t(le(2)));
  }
  return 0;
}

/// v in type t, little-endian, appended to out.
inline void encode_element(float v, safetensors_dtype t, std::vector<unsigned char>& out) {
  std::uint64_t bits = 0;
  switch (t) {
    case safetensors_dtype::f32: bits = std::bit_cast<std::uint32_t>(v); break;
    case safetensors_dtype::f64: bits = std::bit_cast<std::uint64_t>(double(v)); break;
    case safetensors_dtype::bf16: bits = bfloat16_bits_of(v); break;
    case safetensors_dtype::f16: bits = float16_bits_of(v); break;
  }
  for (std::int64_t i = 0; i < element_bytes(t); ++i) out.push_back(static_cast<unsigned char>(bits >> (8 * i)));
}

/// Reads one header entry's fields into t (its values still empty) and its [begin, end).
struct safetensors_entry_reader {
  const std::string& file;
  std::uint64_t data_bytes;
  [[noreturn]] void bad(const std::string& name, const std::string& what) const {
    fail<error>("safetensors file " + file + ": tensor '" + excerpt(name) + "' " + what);
  }
  std::uint64_t whole(const std::string& name, const nlohmann::json& v, const char* field) const {
    if (const std::optional<std::uint64_t> x = json_whole<std::uint64_t>(v)) return *x;
    bad(name, "has a field '" + std::string(field) + "' holding " + json_excerpt(v) + ", not a whole number >= 0");
  }
  std::pair<std::uint64_t, std::uint64_t> read(const std::string& name, const nlohmann::json& e, named_tensor& t) const;
};

inline std::pair<std::uint64_t, std::uint64_t> safetensors_entry_reader::read(const std::string& name, const nlohmann::json& e,
                                                                              named_tensor& t) const {
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
    bad(name, "needs an object with 'dtype', 'shape' and 'data_offsets', got " + json_excerpt(e));
  const std::optional<safetensors_dtype> dt = e["dtype"].is_string() ? parse_safetensors_dtype(e["dtype"].get<std::string>())
                                                                      : std::nullopt;
  if (!dt) bad(name, "has dtype " + json_excerpt(e["dtype"]) + "; autoddl reads F32, F64, BF16 and F16");
  t.name = name;
  t.dtype = *dt;
  if (!e["shape"].is_array()) bad(name, "has shape " + json_excerpt(e["shape"]) + ", not a list of dims");
  const std::uint64_t limit = std::uint64_t(1) << 48;
  std::uint64_t elems = 1;
  for (const nlohmann::json& d : e["shape"]) {
    const std::uint64_t n = whole(name, d, "shape");
    if (n > limit || (n > 0 && elems > limit / n)) bad(name, "has shape " + json_excerpt(e["shape"]) + ", over 2^48 elements");
    elems *= n;
    t.shape.push_back(std::int64_t(n));
  }
  const nlohmann::json& o = e["data_offsets"];
  if (!o.is_array() || o.size() != 2) bad(name, "has data_offsets " + json_excerpt(o) + "; give [begin, end]");
  const std::uint64_t begin = whole(name, o[0], "data_offsets"), end = whole(name, o[1], "data_offsets");
  if (begin > end || end > data_bytes)
    bad(name, "has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] outside the file's " +
                  std::to_string(data_bytes) + " bytes of data (truncated?)");
  if (end - begin != elems * std::uint64_t(element_bytes(*dt)))
    bad(name, "of shape " + json_excerpt(e["shape"]) + " in " + std::string(to_string(*dt)) + " needs " +
                  std::to_string(elems * std::uint64_t(element_bytes(*dt))) + " bytes, but its offsets span " +
                  std::to_string(end - begin));
  return {begin, end};
}

inline std::map<std::string, std::string> read_safetensors_metadata(const std::string& file, const nlohmann::json& m) {
  std::map<std::string, std::string> out;
  if (!m.is_object()) fail<error>("safetensors file " + file + ": '__metadata__' is " + json_excerpt(m) + ", not an object");
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string())
      fail<error>("safetensors file " + file + ": '__metadata__' entry '" + excerpt(k) + "' is " + json_excerpt(v) + ", not a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

}  // namespace detail

/// A safetensors file's tensors from its bytes; `file` names it in errors.
/// @throws error in one sentence naming the file (and the tensor) where the bytes are not a
/// well-formed safetensors file of F32, F64, BF16 and F16 tensors.
inline safetensors_contents parse_safetensors(std::span<const unsigned char> bytes, const std::string& file) {
  if (bytes.size() < 8)
    detail::fail<error>("safetensors file " + file + " has " + std::to_string(bytes.size()) +
                        " bytes, too few for the 8-byte header length; it is not a safetensors file or is truncated");
  const std::uint64_t n = detail::read_le64(bytes.data());
  if (n > safetensors_max_header || n > bytes.size() - 8)
    detail::fail<error>("safetensors file " + file + " declares a header of " + std::to_string(n) + " bytes but has " +
                        std::to_string(bytes.size() - 8) + " after the length; it is truncated or not a safetensors file");
  const nlohmann::json h = parse_json({reinterpret_cast<const char*>(bytes.data() + 8), std::size_t(n)},
                                      "safetensors file " + file + " (its header)");
  if (!h.is_object()) detail::fail<error>("safetensors file " + file + ": the header is " + json_excerpt(h) + ", not a JSON object");
  const std::span<const unsigned char> data = bytes.subspan(8 + n);
  const detail::safetensors_entry_reader r{file, data.size()};
  safetensors_contents c;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      c.metadata = detail::read_safetensors_metadata(file, e);
      continue;
    }
    named_tensor t;
    spans.push_back(r.read(name, e, t));
    c.tensors.push_back(std::move(t));
  }
  std::vector<std::size_t> order(c.tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return spans[a] < spans[b]; });
  for (std::size_t k = 1; k < order.size(); ++k)
    if (spans[order[k]].first < spans[order[k - 1]].second)
      detail::fail<error>("safetensors file " + file + ": tensors '" + detail::excerpt(c.tensors[order[k - 1]].name) + "' and '" +
                          detail::excerpt(c.tensors[order[k]].name) + "' overlap in the data (offsets " +
                          std::to_string(spans[order[k]].first) + " < " + std::to_string(spans[order[k - 1]].second) + ")");
  for (std::size_t i = 0; i < c.tensors.size(); ++i) {
    named_tensor& t = c.tensors[i];
    const std::int64_t size = element_bytes(t.dtype);
    t.values.resize(std::size_t((spans[i].second - spans[i].first) / std::uint64_t(size)));
    for (std::size_t k = 0; k < t.values.size(); ++k)
      t.values[k] = detail::decode_element(data.data() + spans[i].first + k * std::size_t(size), t.dtype);
  }
  std::vector<named_tensor> sorted;
  for (std::size_t i : order) sorted.push_back(std::move(c.tensors[i]));
  c.tensors = std::move(sorted);
  for (std::size_t i = 0; i < c.tensors.size(); ++i) c.by_name.emplace(c.tensors[i].name, i);
  return c;
}

/// Reads a safetensors file. @throws error naming the file where it cannot be read or is malformed.
inline safetensors_contents read_safetensors(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    detail::fail<error>("safetensors file " + path.string() + " is missing or not a file");
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) detail::fail<error>("safetensors file " + path.string() + " could not be read");
  return parse_safetensors(bytes, path.string());
}

/// The bytes of a safetensors file holding `tensors` in the given order, each in its dtype, and
/// `metadata`; the header padded with spaces to a multiple of 8 bytes.
/// @pre each tensor's values count its shape's elements (else error naming it)
inline std::vector<unsigned char> safetensors_bytes(const std::vector<named_tensor>& tensors,
                                                    const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::uint64_t at = 0;
  for (const named_tensor& t : tensors) {
    std::int64_t elems = 1;
    for (std::int64_t d : t.shape) elems *= d;
    if (elems != std::int64_t(t.values.size()))
      detail::fail<error>("safetensors: tensor '" + detail::excerpt(t.name) + "' has " + std::to_string(t.values.size()) +
                          " values for a shape of " + std::to_string(elems) + " elements");
    const std::uint64_t end = at + std::uint64_t(elems * element_bytes(t.dtype));
    h[t.name] = {{"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, end}}};
    at = end;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<unsigned char> out;
  out.reserve(8 + text.size() + at);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>(std::uint64_t(text.size()) >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  for (const named_tensor& t : tensors)
    for (float v : t.values) detail::encode_element(v, t.dtype, out);
  return out;
}

/// Writes a safetensors file atomically (<path>.tmp, flushed, renamed), as checkpoints are.
inline void write_safetensors(const std::filesystem::path& path, const std::vector<named_tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  detail::atomic_write(path, safetensors_bytes(tensors, metadata), "safetensors file");
}

}  // namespace autoddl
