#pragma once
// Which price the planner gives an op's kernel under a candidate signature: the
// measured seconds where the hardware profile's kernel table has the kernel's key
// (ops/kernel_key.hpp) in the plan's dtype; else, where the table has kernels of that op kind,
// the per-kind fit time = a + flops * c_f + bytes * c_b (cost/measured.hpp, fit_kernel_time, on
// the per-device FLOPs and forward bytes of ops/work.hpp; backward fitted on its own FLOPs);
// else none, and the caller uses the analytical formula (cost/compute.hpp).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autoddl/cost/dtype.hpp"
#include "autoddl/cost/measured.hpp"
#include "autoddl/ops/work.hpp"

namespace autoddl {

/// How an op candidate was priced.
enum class price_source : std::uint8_t { measured, fitted, analytical };

struct kernel_price {
  double forward_s = 0, backward_s = 0;
  price_source source = price_source::analytical;
};

/// How many op candidates a plan_problem priced each way.
struct kernel_price_counts {
  int measured = 0, fitted = 0, analytical = 0;
  int total() const { return measured + fitted + analytical; }
};

/// The kernel table of one profile for one dtype, indexed by key, with per-op-kind fits.
class kernel_prices {
 public:
  kernel_prices() = default;
  kernel_prices(const measured_costs& m, dtype t) {
    std::map<std::string, std::pair<std::vector<detail::fit_row>, std::vector<detail::fit_row>>> rows;
    for (const auto& k : m.kernels) {
      if (k.type != t) continue;
      table_[k.key] = {k.forward_s, k.backward_s};
      rows[k.op].first.push_back({k.forward_flops, k.bytes, k.forward_s});
      rows[k.op].second.push_back({k.backward_flops, k.bytes, k.backward_s});
    }
    for (const auto& [op, r] : rows) fits_[op] = {fit_kernel_time(r.first), fit_kernel_time(r.second)};
  }

  bool empty() const { return table_.empty(); }

  /// The measured or fitted price of the kernel `key` of an op of kind `op` doing work `w`;
  /// source analytical (and no seconds) when the table has neither.
  kernel_price price(const std::string& op, const std::string& key, const op_work& w) const {
    if (auto it = table_.find(key); it != table_.end()) return {it->second.first, it->second.second, price_source::measured};
    if (auto it = fits_.find(op); it != fits_.end()) {
      const double bytes = double(w.fwd_bytes_moved);
      return {it->second.first.time(w.fwd_flops, bytes), it->second.second.time(w.bwd_flops, bytes), price_source::fitted};
    }
    return {};
  }

 private:
  std::map<std::string, std::pair<double, double>> table_;
  std::map<std::string, std::pair<kernel_fit, kernel_fit>> fits_;
};

}  // namespace autoddl
