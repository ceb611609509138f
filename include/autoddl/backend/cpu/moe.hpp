#pragma once
// The mixture-of-experts primitives of the CPU device (their contracts: backend/device.hpp):
// top-k picks and gates, the balancing loss, the slot map, and combine. Tokens are rows; a
// token's experts are the columns of its row of probabilities p or gates g, and its picks are
// the k columns its routing chose: every routing decision reads the picks, so a picked gate
// that underflows to 0 still takes its slot and counts in the balancing loss.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "autoddl/backend/cpu/half_types.hpp"

namespace autoddl {

/// The CPU device's mixture-of-experts primitives (cpu_device derives from it).
struct cpu_moe_primitives {

  /// The k columns of row p[0..e) with the largest values, ties to the lower index, ascending.
  /// Example: top_k({0.1, 0.4, 0.1, 0.4}, 3) == {0, 1, 3} (1 and 3 first, then 0 before 2).
  template <class T>
  static void top_k(const T* p, std::int64_t e, std::int64_t k, std::vector<std::int64_t>& out) {
    out.clear();
    std::vector<bool> taken(static_cast<std::size_t>(e), false);
    for (std::int64_t j = 0; j < k; ++j) {
      std::int64_t best = -1;
      for (std::int64_t c = 0; c < e; ++c)
        if (!taken[std::size_t(c)] && (best < 0 || p[c] > p[best])) best = c;
      taken[std::size_t(best)] = true;
      out.push_back(best);
    }
    std::sort(out.begin(), out.end());
  }

  /// picks[r k + j] = the j-th of row r's k largest columns of p, ascending (top_k's order).
  template <class T>
  void topk_experts(std::int64_t rows, std::int64_t e, std::int64_t k, std::span<const T> p,
                    std::span<std::int64_t> picks) {
    std::vector<std::int64_t> sel;
    for (std::int64_t r = 0; r < rows; ++r) {
      top_k(p.data() + r * e, e, k, sel);
      std::copy(sel.begin(), sel.end(), picks.begin() + r * k);
    }
  }

  template <class T>
  void topk_gates(std::int64_t rows, std::int64_t e, std::int64_t k, bool renormalize, std::span<const T> p,
                  std::span<const std::int64_t> picks, std::span<T> g) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* pr = p.data() + r * e;
      T* gr = g.data() + r * e;
      const std::span<const std::int64_t> sel = picks.subspan(std::size_t(r * k), std::size_t(k));
      compute_type_t<T> sum{};
      for (std::int64_t c : sel) sum += pr[c];
      std::fill(gr, gr + e, T{});
      for (std::int64_t c : sel) gr[c] = renormalize ? pr[c] / sum : compute_type_t<T>(pr[c]);
    }
  }

  /// dp = (dg/dp)^T dg: without renormalisation the selected columns pass dg; with it,
  /// g_j = p_j / S over the selected, so dp_j = (dg_j - sum_sel g dg) / S there; 0 elsewhere.
  template <class T>
  void topk_gates_bwd(std::int64_t rows, std::int64_t e, std::int64_t k, bool renormalize, std::span<const T> p,
                      std::span<const std::int64_t> picks, std::span<const T> dg, std::span<T> dp) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* pr = p.data() + r * e;
      const T* dgr = dg.data() + r * e;
      T* dpr = dp.data() + r * e;
      const std::span<const std::int64_t> sel = picks.subspan(std::size_t(r * k), std::size_t(k));
      std::fill(dpr, dpr + e, T{});
      if (!renormalize) {
        for (std::int64_t c : sel) dpr[c] = dgr[c];
        continue;
      }
      compute_type_t<T> sum{}, dot{};
      for (std::int64_t c : sel) sum += pr[c];
      for (std::int64_t c : sel) dot += pr[c] / sum * dgr[c];
      for (std::int64_t c : sel) dpr[c] = (dgr[c] - dot) / sum;
    }
  }

  /// Tokens of each sequence routed to each expert: counts[i e + c] for b sequences of s tokens,
  /// from their picks [b s, k].
  template <class T>
  static std::vector<T> routed_counts(std::int64_t b, std::int64_t s, std::int64_t e, std::int64_t k,
                                      std::span<const std::int64_t> picks) {
    std::vector<T> counts(std::size_t(b * e), T{});
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t j = 0; j < s * k; ++j) counts[std::size_t(i * e + picks[std::size_t(i * s * k + j)])] += T(1);
    return counts;
  }

  /// out[0] = scale sum_i E / (k s^2) sum_c count_ic sum_t p_itc.
  template <class T>
  void balance_loss(std::int64_t b, std::int64_t s, std::int64_t e, std::int64_t k, std::span<const T> p,
                    std::span<const std::int64_t> picks, T scale, std::span<T> out) {
    const std::vector<T> counts = routed_counts<T>(b, s, e, k, picks);
    compute_type_t<T> total{};
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t c = 0; c < e; ++c) {
        compute_type_t<T> mass{};
        for (std::int64_t t = 0; t < s; ++t) mass += p[std::size_t((i * s + t) * e + c)];
        total += counts[std::size_t(i * e + c)] * mass;
      }
    out[0] = scale * T(e) / (T(k) * T(s) * T(s)) * total;
  }

  /// dp[i, t, c] = dloss scale E / (k s^2) count_ic (the counts are not differentiable).
  template <class T>
  void balance_loss_bwd(std::int64_t b, std::int64_t s, std::int64_t e, std::int64_t k,
                        std::span<const std::int64_t> picks, std::span<const T> dloss, T scale, std::span<T> dp) {
    const std::vector<T> counts = routed_counts<T>(b, s, e, k, picks);
    const compute_type_t<T> f = dloss[0] * scale * T(e) / (T(k) * T(s) * T(s));
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t t = 0; t < s; ++t)
        for (std::int64_t c = 0; c < e; ++c) dp[std::size_t((i * s + t) * e + c)] = f * counts[std::size_t(i * e + c)];
  }

  /// The slot map of picks [b s, k] (each token's k experts, ascending) at `capacity` slots per
  /// expert per sequence: src[(i e + c) capacity + slot] = the token row i s + t in that slot (-1:
  /// empty), dst[(i s + t) e + c] = the slot row token t has at expert c (-1: not picked there, or
  /// dropped).
  void moe_slots(std::int64_t b, std::int64_t s, std::int64_t e, std::int64_t k, std::int64_t capacity,
                 std::span<const std::int64_t> picks, std::span<std::int64_t> src, std::span<std::int64_t> dst) {
    std::fill(src.begin(), src.end(), std::int64_t(-1));
    std::fill(dst.begin(), dst.end(), std::int64_t(-1));
    std::vector<std::int64_t> used(static_cast<std::size_t>(e), 0);
    for (std::int64_t i = 0; i < b; ++i) {
      std::fill(used.begin(), used.end(), std::int64_t(0));
      for (std::int64_t t = 0; t < s; ++t)
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int64_t row = i * s + t, c = picks[std::size_t(row * k + j)];
          const std::int64_t slot = used[std::size_t(c)]++;
          if (slot >= capacity) continue;
          const std::int64_t d = (i * e + c) * capacity + slot;
          dst[std::size_t(row * e + c)] = d;
          src[std::size_t(d)] = row;
        }
    }
  }

  /// y[r, :] = sum_c g[r, c] x[dst[r, c], :] over the routed c.
  template <class T>
  void combine_rows(std::int64_t rows, std::int64_t e, std::span<const std::int64_t> dst, std::span<const T> g,
                    std::span<const T> x, std::span<T> y) {
    const std::int64_t cols = rows ? std::int64_t(y.size()) / rows : 0;
    std::fill(y.begin(), y.end(), T{});
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < e; ++c) {
        const std::int64_t d = dst[std::size_t(r * e + c)];
        if (d < 0) continue;
        const compute_type_t<T> w = g[std::size_t(r * e + c)];
        const T* xr = x.data() + d * cols;
        T* yr = y.data() + r * cols;
        for (std::int64_t j = 0; j < cols; ++j) yr[j] += w * xr[j];
      }
  }

  /// dx[dst[r, c], :] = g[r, c] dy[r, :] (0 in unused slots); dg[r, c] = dy[r, :] . x[dst[r, c], :].
  template <class T>
  void combine_rows_bwd(std::int64_t rows, std::int64_t e, std::span<const std::int64_t> dst, std::span<const T> g,
                        std::span<const T> x, std::span<const T> dy, std::span<T> dx, std::span<T> dg) {
    const std::int64_t cols = rows ? std::int64_t(dy.size()) / rows : 0;
    std::fill(dx.begin(), dx.end(), T{});
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < e; ++c) {
        const std::int64_t d = dst[std::size_t(r * e + c)];
        T& gr = dg[std::size_t(r * e + c)];
        gr = T{};
        if (d < 0) continue;
        const compute_type_t<T> w = g[std::size_t(r * e + c)];
        const T* dyr = dy.data() + r * cols;
        const T* xr = x.data() + d * cols;
        T* dxr = dx.data() + d * cols;
        for (std::int64_t j = 0; j < cols; ++j) {
          dxr[j] = w * dyr[j];
          gr += dyr[j] * xr[j];
        }
      }
  }

};

}  // namespace autoddl
