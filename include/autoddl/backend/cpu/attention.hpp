#pragma once
// cpu_device's fused attention (FlashAttention-2's algorithm, Dao 2023), for float and double:
// each (sequence, query head, query tile) runs over the key tiles it sees (attention_tiles.hpp)
// with an online softmax, a running max m and sum l per row, and keeps only the output and
// lse = m + log l per row. No score outlives its tile: the scratch is one tile of scores and one
// of output rows, host memory inside the primitive, so bytes_in_use sees O(s), not O(s^2).
// Backward recomputes each tile's probabilities from q, k and lse and, with D = rowsum(dO * O),
//   dV += P'^T dO,  dP = drop(dO V^T),  dS = P (dP - D),  dQ += s dS K,  dK += s dS^T Q
// (P' the dropped probabilities, drop() the same mask and 1 / (1 - p) scale, s the score scale):
// D equals rowsum(P dP) because O = P' V. The tile products are BLAS GEMMs on strided blocks
// (backend/cpu/gemm.hpp); a causal tile that crosses the diagonal is masked inside. The keys a
// query tile visits (a whole number of key tiles, or all of them) run cpu_key_block at a time:
// the same scores as key tile by key tile, in a quarter of the BLAS calls (each call packs its
// operands, which costs as much as a 64 x 64 x 64 product does on one core).
//
// attention_tile_macs() counts the multiply-adds of the tile products and attention_tile_scores
// the scores computed on this thread (the FLOP count of ops/work.hpp is checked against them).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <span>
#include <type_traits>
#include <vector>

#include "autoddl/attention_tiles.hpp"
#include "autoddl/backend/cpu/gemm.hpp"
#include "autoddl/backend/cpu/half_types.hpp"
#include "autoddl/backend/cpu/rowwise.hpp"
#include "autoddl/backend/cpu/vector_math.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/error.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

namespace detail {
/// Multiply-adds and scores of the fused attention tiles run on this thread (one device per
/// thread, as cpu_buffer_bytes).
struct attention_tile_count {
  std::int64_t macs = 0, scores = 0;
};
inline attention_tile_count& cpu_attention_count() {
  thread_local attention_tile_count n;
  return n;
}

/// The blocks of one (sequence n, query head i, query tile) call: where its rows of q, o, dO,
/// dq start and where its key/value head's rows start, in the model's layout.
struct attention_tile {
  std::int64_t n, i, r0, rows, keys;
  std::size_t q, kv;  ///< offsets of query row r0 of head i, and of key 0 of kv_of(i)
};
inline attention_tile tile_of(const attention_desc& a, std::int64_t n, std::int64_t i, std::int64_t r0) {
  const std::int64_t rows = std::min(attention_query_tile, a.sq - r0);
  return {n, i, r0, rows, attention_tile_keys(r0, rows, a.sk, a.q_offset, a.causal),
          std::size_t((n * a.sq + r0) * a.ldq() + i * a.dh), std::size_t(n * a.sk * a.ldkv() + a.kv_of(i) * a.dh)};
}

/// Keys per GEMM of the CPU kernel: four key tiles.
inline constexpr std::int64_t cpu_key_block = 4 * attention_key_tile;

/// -inf over the scores [rows, cols] (ld apart) of keys c0 + c past each query's position.
template <class T>
void mask_tile(const attention_desc& a, const attention_tile& t, std::int64_t c0, std::int64_t cols, T* s, std::int64_t ld) {
  if (!a.causal || c0 + cols - 1 <= a.q_offset + t.r0) return;  // every key of the tile is seen
  for (std::int64_t r = 0; r < t.rows; ++r) {
    const std::int64_t seen = std::clamp<std::int64_t>(a.q_offset + t.r0 + r + 1 - c0, 0, cols);
    std::fill(s + r * ld + seen, s + r * ld + cols, -std::numeric_limits<T>::infinity());
  }
}

/// s[r, c] = e^(s[r, c] - shift[r]) over [rows, cols] (ld apart), -inf giving 0; sums[r] = the
/// row's sum where sums is not null. Float in the CPU's widest lanes (vector_math.hpp).
template <class T>
void exp_rows(std::int64_t rows, std::int64_t cols, T* s, std::int64_t ld, const T* shift, T* sums) {
  if constexpr (std::is_same_v<T, float>) {
    with_float_lanes([&]<class V>() __attribute__((always_inline)) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const float sum = exp_sum_lanes<V>(s + r * ld, shift[r], s + r * ld, std::size_t(cols));
        if (sums) sums[r] = sum;
      }
    });
  } else {
    for (std::int64_t r = 0; r < rows; ++r) {
      T sum{};
      for (std::int64_t c = 0; c < cols; ++c) sum += (s[r * ld + c] = std::exp(s[r * ld + c] - shift[r]));
      if (sums) sums[r] = sum;
    }
  }
}

/// x[r, c] *= keep(global index) / (1 - p) over the tile's [rows, cols] from key c0.
template <class T>
void drop_tile(const attention_desc& a, const dropout_mask& mask, const attention_tile& t, std::int64_t c0,
               std::int64_t cols, T* x, std::int64_t ld) {
  const T keep_scale = T(1.0 / (1.0 - a.dropout.p));
  for (std::int64_t r = 0; r < t.rows; ++r) {
    const std::uint64_t g = a.prob_row(t.n, t.i, t.r0 + r) + std::uint64_t(c0);
    T* row = x + r * ld;
    for (std::int64_t c = 0; c < cols; ++c) row[c] = mask.keep(g + std::uint64_t(c)) ? row[c] * keep_scale : T(0);
  }
}

/// A tile GEMM (one batch entry of g), its multiply-adds counted in cpu_attention_count.
template <class T>
void tile_gemm(const gemm_desc& g, T alpha, const T* a, const T* b, T beta, T* c) {
  cpu_attention_count().macs += g.m * g.n * g.k;
  gemm_at(g, alpha, a, b, beta, c);
}

/// The forward of one query tile: the online softmax over its key tiles, then o and lse.
template <class T>
void attention_tile_fwd(const attention_desc& a, const attention_tile& t, const T* q, const T* k, const T* v, T* o,
                        statistic_t<T>* lse, std::vector<T>& scratch) {
  constexpr std::int64_t bc = cpu_key_block;
  const std::int64_t rows = t.rows, dh = a.dh;
  scratch.resize(std::size_t(rows * (bc + dh + 3)));  // scores (written before read), then the rest zeroed
  T *s = scratch.data(), *acc = s + rows * bc, *m = acc + rows * dh, *l = m + rows, *tile_max = l + rows;
  std::fill(acc, l + rows, T(0));
  std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
  const dropout_mask mask(a.dropout);
  for (std::int64_t c0 = 0; c0 < t.keys; c0 += bc) {
    const std::int64_t cols = std::min(bc, t.keys - c0);
    const std::size_t kv = t.kv + std::size_t(c0 * a.ldkv());
    tile_gemm(gemm_desc{false, true, rows, cols, dh, a.ldq(), a.ldkv(), bc}, T(a.scale), q + t.q, k + kv, T(0), s);
    mask_tile(a, t, c0, cols, s, bc);
    for (std::int64_t r = 0; r < rows; ++r) {  // the new running max; rescale what was summed
      const T mr = std::max(m[r], row_max_of(s + r * bc, cols));
      const T alpha = mr == m[r] ? T(1) : std::exp(m[r] - mr);  // key 0 is in every row's first tile
      l[r] *= alpha;
      for (std::int64_t e = 0; e < dh; ++e) acc[r * dh + e] *= alpha;
      m[r] = mr;
      tile_max[r] = mr == -std::numeric_limits<T>::infinity() ? T(0) : mr;  // a row masked so far sums 0
    }
    exp_rows(rows, cols, s, bc, tile_max, tile_max);  // tile_max becomes the tile's row sums
    for (std::int64_t r = 0; r < rows; ++r) l[r] += tile_max[r];
    if (a.drops) drop_tile(a, mask, t, c0, cols, s, bc);
    tile_gemm(gemm_desc{false, false, rows, dh, cols, bc, a.ldkv(), dh}, T(1), s, v + kv, T(1), acc);
    cpu_attention_count().scores += rows * cols;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const T inv = T(1) / l[r];
    for (std::int64_t e = 0; e < dh; ++e) o[t.q + std::size_t(r * a.ldq() + e)] = acc[r * dh + e] * inv;
    lse[std::size_t((t.n * a.heads + t.i) * a.sq + t.r0 + r)] = statistic_t<T>(m[r] + std::log(l[r]));
  }
}

/// The backward of one query tile: dq's rows whole, dk and dv of its key/value head added to.
template <class T>
void attention_tile_bwd(const attention_desc& a, const attention_tile& t, const T* q, const T* k, const T* v, const T* o,
                        const statistic_t<T>* lse, const T* dout, T* dq, T* dk, T* dv, std::vector<T>& scratch) {
  constexpr std::int64_t bc = cpu_key_block;
  const std::int64_t rows = t.rows, dh = a.dh, ldq = a.ldq(), ldkv = a.ldkv();
  scratch.resize(std::size_t(rows * (3 * bc + dh + 2)));  // tiles written before read, then the rest zeroed
  T *p = scratch.data(), *pd = p + rows * bc, *ds = pd + rows * bc, *dq_acc = ds + rows * bc, *shift = dq_acc + rows * dh,
    *dot = shift + rows;
  std::fill(dq_acc, dot + rows, T(0));
  for (std::int64_t r = 0; r < rows; ++r) {  // D = rowsum(dO * O), and each row's lse
    const std::size_t at = t.q + std::size_t(r * ldq);
    for (std::int64_t e = 0; e < dh; ++e) dot[r] += dout[at + std::size_t(e)] * o[at + std::size_t(e)];
    shift[r] = T(lse[std::size_t((t.n * a.heads + t.i) * a.sq + t.r0 + r)]);
  }
  const dropout_mask mask(a.dropout);
  const T scale = T(a.scale);
  for (std::int64_t c0 = 0; c0 < t.keys; c0 += bc) {
    const std::int64_t cols = std::min(bc, t.keys - c0);
    const std::size_t kv = t.kv + std::size_t(c0 * ldkv);
    tile_gemm(gemm_desc{false, true, rows, cols, dh, ldq, ldkv, bc}, scale, q + t.q, k + kv, T(0), p);
    mask_tile(a, t, c0, cols, p, bc);
    exp_rows<T>(rows, cols, p, bc, shift, nullptr);  // P, 0 where masked
    tile_gemm(gemm_desc{false, true, rows, cols, dh, ldq, ldkv, bc}, T(1), dout + t.q, v + kv, T(0), ds);  // dP'
    const T* dropped = p;
    if (a.drops) {
      std::copy(p, p + rows * bc, pd);
      drop_tile(a, mask, t, c0, cols, pd, bc);
      drop_tile(a, mask, t, c0, cols, ds, bc);
      dropped = pd;
    }
    tile_gemm(gemm_desc{true, false, cols, dh, rows, bc, ldq, ldkv}, T(1), dropped, dout + t.q, T(1), dv + kv);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) ds[r * bc + c] = p[r * bc + c] * (ds[r * bc + c] - dot[r]);
    tile_gemm(gemm_desc{false, false, rows, dh, cols, bc, ldkv, dh}, scale, ds, k + kv, T(1), dq_acc);
    tile_gemm(gemm_desc{true, false, cols, dh, rows, bc, ldq, ldkv}, scale, ds, q + t.q, T(1), dk + kv);
    cpu_attention_count().scores += rows * cols;
  }
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy(dq_acc + r * dh, dq_acc + (r + 1) * dh, dq + t.q + std::size_t(r * ldq));
}
}  // namespace detail

/// The fused attention primitives of the Device concept (backend/device.hpp) on the host. The 16-bit
/// types run the float kernel on widened copies and round o (and dq, dk, dv) once, as a GPU's
/// fused kernel keeps its running sums in float registers.
struct cpu_attention_primitives {
  template <class T>
  void attention_fwd(const attention_desc& a, std::span<const T> q, std::span<const T> k, std::span<const T> v,
                     std::span<T> o, std::span<statistic_t<T>> lse) {
    if constexpr (is_half_float_v<T>) {
      std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v), of(o.size());
      attention_fwd<float>(a, qf, kf, vf, of, lse);
      std::copy(of.begin(), of.end(), o.begin());
    } else {
      check_attention(a, q.size(), k.size(), v.size(), o.size(), "attention_fwd");
      std::vector<T> scratch;
      for (std::int64_t n = 0; n < a.b; ++n)
        for (std::int64_t i = 0; i < a.heads; ++i)
          for (std::int64_t r0 = 0; r0 < a.sq; r0 += attention_query_tile)
            detail::attention_tile_fwd(a, detail::tile_of(a, n, i, r0), q.data(), k.data(), v.data(), o.data(),
                                       lse.data(), scratch);
    }
  }
  template <class T>
  void attention_bwd(const attention_desc& a, std::span<const T> q, std::span<const T> k, std::span<const T> v,
                     std::span<const T> o, std::span<const statistic_t<T>> lse, std::span<const T> dout, std::span<T> dq,
                     std::span<T> dk, std::span<T> dv) {
    if constexpr (is_half_float_v<T>) {
      std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v), of = widened(o), df = widened(dout);
      std::vector<float> dqf(dq.size()), dkf(dk.size()), dvf(dv.size());
      attention_bwd<float>(a, qf, kf, vf, of, lse, df, dqf, dkf, dvf);
      std::copy(dqf.begin(), dqf.end(), dq.begin());
      std::copy(dkf.begin(), dkf.end(), dk.begin());
      std::copy(dvf.begin(), dvf.end(), dv.begin());
    } else {
      check_attention(a, q.size(), k.size(), v.size(), o.size(), "attention_bwd");
      std::fill(dk.begin(), dk.end(), T(0));
      std::fill(dv.begin(), dv.end(), T(0));
      std::vector<T> scratch;
      for (std::int64_t n = 0; n < a.b; ++n)
        for (std::int64_t i = 0; i < a.heads; ++i)
          for (std::int64_t r0 = 0; r0 < a.sq; r0 += attention_query_tile)
            detail::attention_tile_bwd(a, detail::tile_of(a, n, i, r0), q.data(), k.data(), v.data(), o.data(),
                                       lse.data(), dout.data(), dq.data(), dk.data(), dv.data(), scratch);
    }
  }
  /// Multiply-adds of the fused attention's tile products on this thread so far.
  std::int64_t attention_tile_macs() const { return detail::cpu_attention_count().macs; }
  /// Scores (query, key pairs) the fused attention computed on this thread so far.
  std::int64_t attention_tile_scores() const { return detail::cpu_attention_count().scores; }

 private:
  template <class T>
  static std::vector<float> widened(std::span<const T> x) { return {x.begin(), x.end()}; }
  static void check_attention(const attention_desc& a, std::size_t q, std::size_t k, std::size_t v, std::size_t o,
                              const char* what) {
    const auto nq = std::size_t(a.b * a.sq * a.ldq()), nkv = std::size_t(a.b * a.sk * a.ldkv());
    if (q != nq || o != nq || k != nkv || v != nkv || a.group < 1 || a.dh < 1)
      detail::fail<error>(std::string(what) + ": q and o need " + detail::itos(std::int64_t(nq)) + " elements, k and v " +
                          detail::itos(std::int64_t(nkv)) + " (got " + detail::itos(std::int64_t(q)) + ", " +
                          detail::itos(std::int64_t(k)) + "); describe the shards the spans hold");
  }
};

}  // namespace autoddl
