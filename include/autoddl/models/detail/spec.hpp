#pragma once
// Model specs: "name" or "name:key=value,key=value", e.g. "gpt:layers=2,hidden=64,heads=4".
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/parse_number.hpp"
#include "autoddl/text.hpp"

namespace autoddl::detail {

/// The most repeated layers a model spec may ask for: the graph holds every op of every layer.
inline constexpr std::int64_t max_model_layers = 4096;

inline std::string join(const std::vector<std::string>& v) {
  std::string r;
  for (const std::string& s : v) r += (r.empty() ? "" : " ") + s;
  return r;
}

struct model_spec {
  std::string text;
  std::string model;
  std::vector<std::pair<std::string, std::string>> kv;
};

inline model_spec parse_spec(std::string_view s) {
  model_spec r{std::string(s), {}, {}};
  std::size_t colon = s.find(':');
  r.model = std::string(s.substr(0, colon));
  if (r.model.empty()) fail<parse_error>("model spec '" + excerpt(r.text) + "' has no model name; write e.g. gpt:layers=2,hidden=64");
  if (colon == std::string_view::npos) return r;
  std::string_view rest = s.substr(colon + 1);
  while (!rest.empty()) {
    std::size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
      fail<parse_error>("model spec '" + excerpt(r.text) + "': expected key=value, got '" + std::string(item) +
                        "'; write e.g. gpt:layers=2,hidden=64");
    r.kv.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
    if (rest.empty()) fail<parse_error>("model spec '" + excerpt(r.text) + "' ends with ','; remove it");
  }
  return r;
}

/// Reads the keys of one model; rejects unknown and repeated keys with the valid list.
class spec_reader {
 public:
  spec_reader(const model_spec& s, std::vector<std::string> keys) : s_(s), keys_(std::move(keys)) {
    for (std::size_t i = 0; i < s_.kv.size(); ++i) {
      bool known = false;
      for (const std::string& k : keys_) known = known || k == s_.kv[i].first;
      if (!known)
        fail<parse_error>("model spec '" + excerpt(s_.text) + "': unknown key '" + s_.kv[i].first + "' for model " + s_.model +
                          "; valid keys: " + join(keys_));
      for (std::size_t j = 0; j < i; ++j)
        if (s_.kv[j].first == s_.kv[i].first)
          fail<parse_error>("model spec '" + excerpt(s_.text) + "': key '" + s_.kv[i].first + "' is given twice; give it once");
    }
  }
  const std::string* find(std::string_view key) const {
    for (const auto& [k, v] : s_.kv) if (k == key) return &v;
    return nullptr;
  }
  std::string text(std::string_view key, std::string dflt) const {
    const std::string* v = find(key);
    return v ? *v : dflt;
  }
  /// A positive integer value up to `most`, or dflt when the key is absent.
  /// @throws parse_error when the value is not a whole number (parse_number.hpp), error when it
  /// is below 1 or above `most`.
  std::int64_t count(std::string_view key, std::int64_t dflt, std::int64_t most = std::int64_t(1) << 40) const {
    const std::string* v = find(key);
    if (!v) return dflt;
    const std::int64_t n = parse_number<std::int64_t>(*v, where(key));
    if (n < 0)
      fail<parse_error>("model spec '" + excerpt(s_.text) + "': " + std::string(key) + "=" + excerpt(*v) +
                        " is negative; write a size such as " + std::string(key) + "=" + itos(std::max<std::int64_t>(dflt, 1)));
    if (n == 0)
      fail<error>("model spec '" + excerpt(s_.text) + "': " + std::string(key) + "=0 makes no model; use a size of at least 1");
    if (n > most)
      fail<error>("model spec '" + excerpt(s_.text) + "': " + std::string(key) + "=" + itos(n) + " is more than autoddl builds; use " +
                  std::string(key) + " of at most " + itos(most));
    return n;
  }
  /// 0 or 1 (false or true), or dflt when the key is absent.
  bool flag(std::string_view key, bool dflt) const {
    const std::string* v = find(key);
    if (!v) return dflt;
    if (*v != "0" && *v != "1")
      fail<parse_error>("model spec '" + excerpt(s_.text) + "': " + std::string(key) + "=" + excerpt(*v) + " is not 0 or 1; write " +
                        std::string(key) + "=1 or " + std::string(key) + "=0");
    return *v == "1";
  }
  /// A probability in [0, 1) ("0.1", "0", "1e-2"), or dflt when the key is absent.
  double fraction(std::string_view key, double dflt) const {
    const std::string* v = find(key);
    if (!v) return dflt;
    const double x = parse_number<double>(*v, where(key));
    if (!(x >= 0) || !(x < 1))
      fail<parse_error>("model spec '" + excerpt(s_.text) + "': " + std::string(key) + "=" + excerpt(*v) +
                        " is not a probability below 1; write e.g. " + std::string(key) + "=0.1");
    return x;
  }
  /// A non-negative decimal ("1.25", "0"), the double nearest the text, or dflt when the key is
  /// absent.
  double decimal(std::string_view key, double dflt) const {
    const std::string* v = find(key);
    if (!v) return dflt;
    const double x = parse_number<double>(*v, where(key));
    if (!(x >= 0))
      fail<parse_error>("model spec '" + excerpt(s_.text) + "': " + std::string(key) + "=" + excerpt(*v) +
                        " is not a non-negative decimal; write e.g. " + std::string(key) + "=1.25");
    return x;
  }
  /// One of `options` (attention=fused or attention=unfused), or dflt when the key is absent.
  std::string one_of(std::string_view key, std::string dflt, const std::vector<std::string>& options) const {
    const std::string* v = find(key);
    if (!v) return dflt;
    for (const std::string& o : options)
      if (*v == o) return o;
    fail<parse_error>("model spec '" + excerpt(s_.text) + "': " + std::string(key) + "=" + excerpt(*v) + " is not one of " + join(options) +
                      "; write e.g. " + std::string(key) + "=" + options.front());
  }
  const model_spec& spec() const { return s_; }

 private:
  std::string where(std::string_view key) const { return "model spec '" + excerpt(s_.text) + "': " + std::string(key); }

  const model_spec& s_;
  std::vector<std::string> keys_;
};

}  // namespace autoddl::detail
