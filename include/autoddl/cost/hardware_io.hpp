#pragma once
// Hardware profiles as JSON files (schema in docs/cost-model.md), read and written with
// nlohmann-json. Every problem is one autoddl::parse_error (or autoddl::error for files) that
// names the file and the field:
//   hardware profile 'x.json': field 'links.intra_node.beta' is 0; give a positive number (bytes per second)
// Presets: load_hardware("dgx1-v100") reads <dir>/dgx1-v100.json where <dir> is the environment
// variable AUTODDL_HARDWARE_DIR when set, else the macro AUTODDL_HARDWARE_DIR (the build sets it
// to the source tree's data/hardware; installs ship the files in <datadir>/autoddl/hardware).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "autoddl/cost/dtype.hpp"
#include "autoddl/cost/hardware.hpp"
#include "autoddl/mesh/link.hpp"
#include "autoddl/error.hpp"
#include "autoddl/json_input.hpp"
#include "autoddl/text_file.hpp"

namespace autoddl {

namespace detail {

class profile_reader {
 public:
  explicit profile_reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw parse_error("hardware profile '" + file_ + "': field '" + field + "' " + what);
  }

  const nlohmann::json& object(const nlohmann::json& j, const std::string& field) const {
    if (!j.is_object()) fail(field, "must be a JSON object");
    return j;
  }

  void only_keys(const nlohmann::json& j, const std::string& where, std::initializer_list<std::string_view> keys) const {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (std::find(keys.begin(), keys.end(), std::string_view(it.key())) != keys.end()) continue;
      std::string valid;
      for (auto k : keys) {
        if (!valid.empty()) valid += ", ";
        valid += k;
      }
      std::string path = where.empty() ? it.key() : where + "." + it.key();
      throw parse_error("hardware profile '" + file_ + "': unknown key '" + detail::excerpt(path) + "'; valid keys " +
                        (where.empty() ? std::string("at the top") : "in '" + where + "'") + " are " + valid);
    }
  }

  const nlohmann::json& member(const nlohmann::json& j, const std::string& where, const std::string& key) const {
    std::string path = where.empty() ? key : where + "." + key;
    auto it = j.find(key);
    if (it == j.end()) fail(path, "is missing; add it (see docs/cost-model.md for the schema)");
    return *it;
  }

  static std::string path_of(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }

  std::string text(const nlohmann::json& j, const std::string& where, const std::string& key) const {
    const auto& v = member(j, where, key);
    if (!v.is_string()) fail(path_of(where, key), "must be a string");
    return v.get<std::string>();
  }

  double positive(const nlohmann::json& v, const std::string& path, const std::string& unit) const {
    if (!v.is_number()) fail(path, "must be a number (" + unit + ")");
    double d = v.get<double>();
    if (!(d > 0)) fail(path, "is " + json_excerpt(v) + "; give a positive number (" + unit + ")");
    return d;
  }

  double positive(const nlohmann::json& j, const std::string& where, const std::string& key,
                  const std::string& unit) const {
    return positive(member(j, where, key), path_of(where, key), unit);
  }

  link read_link(const nlohmann::json& j, const std::string& where) const {
    object(j, where);
    only_keys(j, where, {"name", "alpha", "beta", "gamma", "large_bytes", "beta_large", "gamma_large"});
    link l;
    l.name = link_name(text(j, where, "name"));
    const auto& a = member(j, where, "alpha");
    if (!a.is_number()) fail(where + ".alpha", "must be a number (seconds)");
    l.alpha = a.get<double>();
    if (!(l.alpha > 0)) fail(where + ".alpha", "is " + json_excerpt(a) + "; give a positive number (seconds)");
    l.beta = positive(j, where, "beta", "bytes per second");
    if (auto g = j.find("gamma"); g != j.end()) {
      if (!g->is_number()) fail(where + ".gamma", "must be a number (seconds per byte reduced)");
      l.gamma = g->get<double>();
      if (!(l.gamma >= 0)) fail(where + ".gamma", "is " + json_excerpt(*g) + "; give a number >= 0 (seconds per byte reduced)");
    }
    // The optional second regime: large_bytes and beta_large together; gamma_large defaults to gamma.
    const bool any_large = j.contains("large_bytes") || j.contains("beta_large") || j.contains("gamma_large");
    if (any_large) {
      if (!j.contains("large_bytes"))
        fail(where + ".large_bytes", "is missing but the link has a second regime; add it (buffer bytes where beta_large starts)");
      if (!j.contains("beta_large"))
        fail(where + ".beta_large", "is missing but the link has a second regime; add it (bytes per second beyond large_bytes)");
      l.large_bytes = positive(j, where, "large_bytes", "bytes");
      l.beta_large = positive(j, where, "beta_large", "bytes per second");
      l.gamma_large = l.gamma;
      if (auto g = j.find("gamma_large"); g != j.end()) {
        if (!g->is_number()) fail(where + ".gamma_large", "must be a number (seconds per byte reduced)");
        l.gamma_large = g->get<double>();
        if (!(l.gamma_large >= 0))
          fail(where + ".gamma_large", "is " + json_excerpt(*g) + "; give a number >= 0 (seconds per byte reduced)");
      }
    }
    return l;
  }

  hardware read(const nlohmann::json& j) const {
    object(j, "(top)");
    only_keys(j, "", {"name", "description", "sources", "cpu_model", "devices_per_node", "links", "device", "overlap",
                      "kernels", "copy", "optimizer"});
    hardware h;
    h.name = text(j, "", "name");
    h.description = text(j, "", "description");
    if (j.contains("cpu_model")) h.cpu_model = text(j, "", "cpu_model");
    const auto& src = member(j, "", "sources");
    if (!src.is_array() || src.empty()) fail("sources", "must be a non-empty array of strings citing the figures used");
    for (const auto& s : src) {
      if (!s.is_string()) fail("sources", "must hold only strings");
      h.sources.push_back(s.get<std::string>());
    }
    if (j.contains("overlap")) {
      const auto& ov = j.at("overlap");
      if (!ov.is_string() || (ov != "none" && ov != "grad_sync_with_backward"))
        fail("overlap", "is " + json_excerpt(ov) + "; write \"none\" (the executor overlaps nothing) or \"grad_sync_with_backward\"");
      h.overlap = parse_overlap_rule(ov.get<std::string>());
    }
    const auto& dpn = member(j, "", "devices_per_node");
    if (!dpn.is_number_integer() || dpn.get<long long>() < 1 || dpn.get<long long>() > (1 << 20))
      fail("devices_per_node", "is " + json_excerpt(dpn) + "; give a positive integer");
    h.devices_per_node = int(dpn.get<long long>());
    const auto& links = object(member(j, "", "links"), "links");
    only_keys(links, "links", {"intra_node", "inter_node"});
    h.intra_node = read_link(member(links, "links", "intra_node"), "links.intra_node");
    h.inter_node = read_link(member(links, "links", "inter_node"), "links.inter_node");
    const auto& dev = object(member(j, "", "device"), "device");
    only_keys(dev, "device", {"name", "peak_flops", "efficiency", "memory_bytes", "memory_bandwidth"});
    h.device.name = text(dev, "device", "name");
    const auto& peak = object(member(dev, "device", "peak_flops"), "device.peak_flops");
    only_keys(peak, "device.peak_flops", {"fp32", "fp16", "bf16", "fp64"});
    if (peak.empty()) fail("device.peak_flops", "is empty; give the FLOP/s of at least one of fp32, fp16, bf16, fp64");
    for (dtype t : all_dtypes) {
      auto it = peak.find(std::string(to_string(t)));
      if (it != peak.end())
        h.device.peak_flops[std::size_t(t)] = positive(*it, "device.peak_flops." + std::string(to_string(t)), "FLOP/s");
    }
    const auto& eff = object(member(dev, "device", "efficiency"), "device.efficiency");
    only_keys(eff, "device.efficiency", {"gemm", "conv", "elementwise", "attention"});
    for (work_kind k : {work_kind::gemm, work_kind::conv, work_kind::elementwise, work_kind::attention}) {
      std::string key(to_string(k));
      if (k == work_kind::attention && !eff.contains(key)) {  // optional: the fused attention as a GEMM
        h.device.efficiency[std::size_t(k)] = h.device.efficiency_of(work_kind::gemm);
        continue;
      }
      double e = positive(eff, "device.efficiency", key, "fraction of peak");
      if (e > 1) fail("device.efficiency." + key, "is " + json_excerpt(member(eff, "device.efficiency", key)) + "; give a fraction of peak in (0, 1]");
      h.device.efficiency[std::size_t(k)] = e;
    }
    h.device.memory_bytes = positive(dev, "device", "memory_bytes", "bytes");
    h.device.memory_bandwidth = positive(dev, "device", "memory_bandwidth", "bytes per second");
    read_measured(j, h.measured);
    return h;
  }

  // The optional measured sections (cost/measured.hpp; docs/cost-model.md, "Measured kernels").
  void read_measured(const nlohmann::json& j, measured_costs& m) const {
    if (auto it = j.find("kernels"); it != j.end()) {
      if (!it->is_array()) fail("kernels", "must be an array of measured kernels");
      for (std::size_t i = 0; i < it->size(); ++i) m.kernels.push_back(read_kernel((*it)[i], "kernels[" + std::to_string(i) + "]"));
    }
    if (auto it = j.find("copy"); it != j.end()) {
      object(*it, "copy");
      only_keys(*it, "copy", {"alpha", "bandwidth"});
      m.copy.alpha = non_negative(*it, "copy", "alpha", "seconds per copy");
      m.copy.bandwidth = positive(*it, "copy", "bandwidth", "bytes per second");
    }
    if (auto it = j.find("optimizer"); it != j.end()) {
      object(*it, "optimizer");
      only_keys(*it, "optimizer", {"sgd-momentum", "adam"});
      if (it->contains("sgd-momentum")) m.sgd_momentum = read_optimizer(it->at("sgd-momentum"), "optimizer.sgd-momentum");
      if (it->contains("adam")) m.adam = read_optimizer(it->at("adam"), "optimizer.adam");
    }
  }

  double non_negative(const nlohmann::json& j, const std::string& where, const std::string& key, const std::string& unit) const {
    const auto& v = member(j, where, key);
    if (!v.is_number()) fail(path_of(where, key), "must be a number (" + unit + ")");
    const double d = v.get<double>();
    if (!(d >= 0)) fail(path_of(where, key), "is " + json_excerpt(v) + "; give a number >= 0 (" + unit + ")");
    return d;
  }

  optimizer_rate read_optimizer(const nlohmann::json& j, const std::string& where) const {
    object(j, where);
    only_keys(j, where, {"alpha", "per_element"});
    return {non_negative(j, where, "alpha", "seconds per shard"), positive(j, where, "per_element", "seconds per element")};
  }

  kernel_entry read_kernel(const nlohmann::json& j, const std::string& where) const {
    object(j, where);
    only_keys(j, where, {"op", "key", "dtype", "forward_flops", "backward_flops", "bytes", "forward_s", "backward_s"});
    kernel_entry k;
    k.op = text(j, where, "op");
    k.key = text(j, where, "key");
    const std::string t = text(j, where, "dtype");
    const auto* known = std::find_if(std::begin(all_dtypes), std::end(all_dtypes), [&](dtype d) { return to_string(d) == t; });
    if (known == std::end(all_dtypes)) fail(where + ".dtype", "is \"" + t + "\"; write fp32, fp16, bf16 or fp64");
    k.type = *known;
    if (k.key.rfind(k.op + " ", 0) != 0) fail(where + ".key", "does not start with its op '" + k.op + "'; the key names the op first");
    k.forward_flops = non_negative(j, where, "forward_flops", "FLOPs");
    k.backward_flops = non_negative(j, where, "backward_flops", "FLOPs");
    k.bytes = non_negative(j, where, "bytes", "bytes moved by the forward");
    k.forward_s = positive(j, where, "forward_s", "seconds");
    k.backward_s = positive(j, where, "backward_s", "seconds");
    return k;
  }

 private:
  std::string file_;
};

/// The preset directory: $AUTODDL_HARDWARE_DIR, else the build's AUTODDL_HARDWARE_DIR, else "".
inline std::string hardware_dir() {
  if (const char* e = std::getenv("AUTODDL_HARDWARE_DIR"); e != nullptr && *e != '\0') return e;
#ifdef AUTODDL_HARDWARE_DIR
  return AUTODDL_HARDWARE_DIR;
#else
  return {};
#endif
}

inline bool names_a_file(std::string_view s) {
  return s.find('/') != std::string_view::npos ||
         (s.size() >= 5 && s.substr(s.size() - 5) == ".json");
}

}  // namespace detail

/// Names of the presets in the preset directory, sorted ("cpu-local", "dgx-a100", ...).
inline std::vector<std::string> hardware_presets() {
  std::vector<std::string> out;
  const std::string dir = detail::hardware_dir();
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// Parses a profile from JSON text; `file` names it in errors.
inline hardware parse_hardware(std::string_view json_text, const std::string& file = "<text>") {
  return detail::profile_reader(file).read(parse_json(json_text, "hardware profile '" + file + "'"));
}

/// Loads a preset by name ("dgx1-v100") or a file by path (anything with '/', ending .json or naming a
/// directory, which is refused as one).
inline hardware load_hardware(std::string_view name_or_path) {
  std::string file;
  std::error_code dir_ec;
  if (detail::names_a_file(name_or_path) || std::filesystem::is_directory(std::string(name_or_path), dir_ec)) {
    file = std::string(name_or_path);
  } else {
    const std::string dir = detail::hardware_dir();
    if (dir.empty())
      throw error("hardware preset '" + std::string(name_or_path) +
                  "' needs a preset directory; set the environment variable AUTODDL_HARDWARE_DIR or give a path to a .json file");
    file = (std::filesystem::path(dir) / (std::string(name_or_path) + ".json")).string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) {
      std::string valid;
      for (const auto& p : hardware_presets()) {
        if (!valid.empty()) valid += ", ";
        valid += p;
      }
      throw error("unknown hardware preset '" + std::string(name_or_path) + "' in " + dir + "; valid presets are " +
                  (valid.empty() ? std::string("(none found)") : valid) + ", or give a path to a .json file");
    }
  }
  const std::optional<std::string> text = read_text_file(file, "hardware profile");
  if (!text) throw error("hardware profile file '" + file + "' cannot be opened; check the path");
  return parse_hardware(*text, file);
}

namespace detail {
inline void add_measured_json(nlohmann::ordered_json& j, const measured_costs& m) {
  if (!m.kernels.empty()) {
    nlohmann::ordered_json ks = nlohmann::ordered_json::array();
    for (const auto& k : m.kernels)
      ks.push_back({{"op", k.op}, {"key", k.key}, {"dtype", std::string(to_string(k.type))}, {"forward_flops", k.forward_flops},
                    {"backward_flops", k.backward_flops}, {"bytes", k.bytes}, {"forward_s", k.forward_s},
                    {"backward_s", k.backward_s}});
    j["kernels"] = ks;
  }
  if (m.copy.measured()) j["copy"] = {{"alpha", m.copy.alpha}, {"bandwidth", m.copy.bandwidth}};
  nlohmann::ordered_json opt = nlohmann::ordered_json::object();
  if (m.sgd_momentum.measured()) opt["sgd-momentum"] = {{"alpha", m.sgd_momentum.alpha}, {"per_element", m.sgd_momentum.per_element}};
  if (m.adam.measured()) opt["adam"] = {{"alpha", m.adam.alpha}, {"per_element", m.adam.per_element}};
  if (!opt.empty()) j["optimizer"] = opt;
}
}  // namespace detail

/// The profile as JSON, in the schema load_hardware reads (fp16/bf16 peaks of 0 are left out).
inline std::string to_json(const hardware& h) {
  auto link_json = [](const link& l) {
    nlohmann::ordered_json j{{"name", std::string(l.name.view())}, {"alpha", l.alpha}, {"beta", l.beta}};
    if (l.gamma > 0) j["gamma"] = l.gamma;
    if (l.two_regimes()) {
      j["large_bytes"] = l.large_bytes;
      j["beta_large"] = l.beta_large;
      j["gamma_large"] = l.gamma_large;
    }
    return j;
  };
  nlohmann::ordered_json peak = nlohmann::ordered_json::object();
  for (dtype t : all_dtypes)
    if (h.device.peak(t) > 0) peak[std::string(to_string(t))] = h.device.peak(t);
  nlohmann::ordered_json eff = nlohmann::ordered_json::object();
  for (work_kind k : {work_kind::gemm, work_kind::conv, work_kind::elementwise, work_kind::attention})
    if (k != work_kind::attention || h.device.efficiency_of(k) != h.device.efficiency_of(work_kind::gemm))
      eff[std::string(to_string(k))] = h.device.efficiency_of(k);
  nlohmann::ordered_json j{
      {"name", h.name},
      {"description", h.description},
      {"sources", h.sources}};
  if (!h.cpu_model.empty()) j["cpu_model"] = h.cpu_model;
  j["devices_per_node"] = h.devices_per_node;
  j["overlap"] = std::string(to_string(h.overlap));
  j["links"] = {{"intra_node", link_json(h.intra_node)}, {"inter_node", link_json(h.inter_node)}};
  j["device"] = {{"name", h.device.name},
                 {"peak_flops", peak},
                 {"efficiency", eff},
                 {"memory_bytes", h.device.memory_bytes},
                 {"memory_bandwidth", h.device.memory_bandwidth}};
  detail::add_measured_json(j, h.measured);
  return j.dump(2) + "\n";
}

/// This machine's CPU model: the first "model name" of /proc/cpuinfo ("Intel(R) Xeon(R) Platinum
/// 8480+"), or empty where there is none (another system, a CPU that does not say).
inline std::string this_cpu_model(const std::string& cpuinfo = "/proc/cpuinfo") {
  std::ifstream in(cpuinfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) return "";
    std::size_t b = colon + 1;
    while (b < line.size() && (line[b] == ' ' || line[b] == '\t')) ++b;
    std::size_t e = line.size();
    while (e > b && (line[e - 1] == ' ' || line[e - 1] == '\t' || line[e - 1] == '\r')) --e;
    return line.substr(b, e - b);
  }
  return "";
}

/// Writes the profile to `path`; throws autoddl::error when the file cannot be written.
inline void save_hardware(const hardware& h, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw error("cannot write hardware profile file '" + path + "'; check that its folder exists and is writable");
  out << to_json(h);
  if (!out) throw error("writing hardware profile file '" + path + "' failed; check free disk space");
}

}  // namespace autoddl
