#pragma once
// Deterministic parameters and synthetic data, defined per global element index, so every
// device can make exactly its own shard and every plan (and serial execution) sees the same
// global values. The dropout mask's counter-based hash (backend/device.hpp's SplitMix64 mix),
// keyed by (seed, stream, index).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/runtime/kernels/context.hpp"
#include "autoddl/token_order.hpp"

namespace autoddl {

/// A uniform value in [-1, 1) for (seed, stream, index).
constexpr double hashed_uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  std::uint64_t h = detail::mix64(detail::mix64(seed * 0x100000001b3ULL + stream) ^ index);
  return double(h >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/// Calls f(local position, global flat index) for every element of a shard, row-major.
template <class F>
void for_each_global_index(const shard_info& s, F&& f) {
  const int r = s.local.rank();
  std::int64_t idx[max_tensor_rank]{};
  const std::int64_t n = s.local.elements();
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t g = 0;
    for (int d = 0; d < r; ++d) g = g * s.global[d] + idx[d] + at(s.offset, d);
    f(k, g);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < s.local[d]) break;
      idx[d] = 0;
    }
  }
}

/// How a parameter starts, by the role its graph gives it (models/graph.hpp): a constant, or
/// uniform in +-scale (variance scale^2 / 3 = 1 / fan_in, LeCun's rule).
struct param_init {
  double constant = 0;  ///< the value of every element where scale == 0
  double scale = 0;     ///< sqrt(3 / fan_in)
};

/// The start of parameter p: norm scales 1, biases and norm shifts 0; weights and embeddings
/// uniform in +-sqrt(3 / fan_in) with fan_in = elements / largest dim (a shape-only rule: the
/// smaller side of a matrix, C k^2 of a conv2d filter [O, C, k, k] with O >= C k^2); an expert
/// weight [E, in, out] per expert, fan_in = in (h for W_gate and W_up, F for W_down), since each
/// expert is its own matrix. A rank-1 weight or unused parameter starts at 0.
inline param_init init_of(const param_info& p) {
  const tensor_shape& s = p.shape;
  switch (p.role) {
    case param_role::norm_scale: return {1, 0};
    case param_role::bias:
    case param_role::norm_shift: return {0, 0};
    case param_role::expert_weight: return {0, s.rank() == 3 ? std::sqrt(3.0 / double(s[1])) : 0};
    case param_role::unused:
    case param_role::weight:
    case param_role::embedding: break;
  }
  if (s.rank() <= 1) return {0, 0};
  std::int64_t largest = 1;
  for (auto d : s) largest = std::max(largest, d);
  return {0, std::sqrt(3.0 / double(s.elements() / largest))};
}

/// This device's shard of parameter p of g, laid out by `shard`.
template <class T>
std::vector<T> init_param_shard(const graph& g, int p, const shard_info& shard, std::uint64_t seed) {
  const param_init init = init_of(at(g.params, p));
  std::vector<T> out(std::size_t(shard.local.elements()));
  for_each_global_index(shard, [&](std::int64_t k, std::int64_t gi) {
    at(out, k) = init.scale == 0 ? T(init.constant)
                                 : T(init.scale * hashed_uniform(seed, 1000 + std::uint64_t(p), std::uint64_t(gi)));
  });
  return out;
}

/// What a model input holds: class or token indices below `bound`, or real values; `labels`:
/// it is the target of a loss (cross-entropy's second input).
struct input_kind {
  bool indices = false;
  std::int64_t bound = 0;
  bool labels = false;
};

/// Which model inputs are indices (embedding ids, labels) and their range, from their consumers.
inline std::vector<input_kind> input_kinds(const graph& g) {
  std::vector<input_kind> k(g.inputs.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i)
    for (std::size_t j = 0; j < g.op_inputs[i].size(); ++j) {
      const tensor_ref r = g.op_inputs[i][j];
      if (r.op >= 0 || !is_index_input(g.ops[i].kind, j)) continue;
      const op_node& n = g.ops[i];
      at(k, r.index).indices = true;
      at(k, r.index).bound = n.kind == op_kind::embedding ? n.params[0][0] : n.inputs[0][n.inputs[0].rank() - 1];
      at(k, r.index).labels = n.kind == op_kind::cross_entropy;
    }
  return k;
}

/// The block of a step's GLOBAL batch that a device reads for micro-batch `k` of `m`: `s` is its
/// block of one micro-batch (dim 0 is the micro-batch, mb rows); the result's dim 0 is the step's
/// batch of m * mb rows and its rows start k * mb further, so input_shard and index_shard, which
/// key every element by its global index, give m micro-batches exactly the data of one batch.
///   micro_batch_shard({local [2,3] of [4,3] at (2,0)}, 1, 2) == {local [2,3] of [8,3] at (6,0)}
inline shard_info micro_batch_shard(shard_info s, int k, int m) {
  const std::int64_t mb = s.global[0];
  s.global[0] = mb * m;
  s.offset[0] += mb * k;
  return s;
}

/// The kernel context seed of micro-batch `k` of training step `step` (it keys dropout masks):
/// seed + step * 1000003 for k = 0 (a step of one micro-batch keeps the keys it always had),
/// a mixed distinct key for every further micro-batch.
constexpr std::uint64_t micro_batch_seed(std::uint64_t seed, std::int64_t step, int k) {
  const std::uint64_t first = seed + std::uint64_t(step) * 1000003;
  return k == 0 ? first : detail::mix64(first ^ (std::uint64_t(k) * 0xd6e8feb86659fd93ULL));
}

/// A shard's values where its sequence dim (1) holds tokens in `order` (token_order.hpp):
/// `make(part)` gives the values of a block, keyed as every maker above by global index; each run
/// of natural positions is made as the block at those positions and placed at the run's rows, so
/// a device holds exactly the values of the tokens it holds. `make(s)` itself where the order is
/// natural or dim 1 is not the sequence.
template <class V, class F>
std::vector<V> in_token_order(const shard_info& s, const token_order& order, F&& make) {
  if (order.natural() || s.global.rank() < 2 || s.global[1] != order.seq || s.local.elements() == 0) return make(s);
  std::vector<V> out(std::size_t(s.local.elements()));
  const std::int64_t rows = s.local[1], inner = s.local.elements() / (s.local[0] * rows);
  for (const token_run& r : order.runs(s.offset[1], rows)) {
    shard_info part = s;
    part.local[1] = r.length;
    part.offset[1] = r.position;
    const std::vector<V> v = make(part);
    for (std::int64_t n = 0; n < s.local[0]; ++n)
      std::copy_n(v.begin() + n * r.length * inner, r.length * inner, out.begin() + (n * rows + r.row) * inner);
  }
  return out;
}

/// Shard of model input `i` for training step `step` (real values).
template <class T>
std::vector<T> input_shard(const shard_info& shard, int i, std::uint64_t seed, std::int64_t step) {
  std::vector<T> out(std::size_t(shard.local.elements()));
  for_each_global_index(shard, [&](std::int64_t k, std::int64_t gi) {
    at(out, k) = T(hashed_uniform(seed + std::uint64_t(step) * 7919, std::uint64_t(i), std::uint64_t(gi)));
  });
  return out;
}

/// Element `gi` of index input `i` at step `step`: uniform below `bound`.
constexpr std::int64_t index_value(int i, std::int64_t bound, std::uint64_t seed, std::int64_t step, std::int64_t gi) {
  double u = 0.5 * (hashed_uniform(seed + std::uint64_t(step) * 7919, std::uint64_t(i), std::uint64_t(gi)) + 1.0);
  return std::min<std::int64_t>(bound - 1, std::int64_t(u * double(bound)));
}

/// Shard of model input `i` for step `step` (indices below `bound`).
inline std::vector<std::int64_t> index_shard(const shard_info& shard, int i, std::int64_t bound, std::uint64_t seed,
                                             std::int64_t step) {
  std::vector<std::int64_t> out(std::size_t(shard.local.elements()));
  for_each_global_index(shard, [&](std::int64_t k, std::int64_t gi) { at(out, k) = index_value(i, bound, seed, step, gi); });
  return out;
}

/// The synthetic task's labels, so that training has something to learn (a loss that falls): a
/// fixed function of model input 0 (`data`, of global shape `data_shape`), element by element:
///   - token ids of the labels' own shape (a language model): the label is the next id,
///     (id + 1) mod bound, at the same position;
///   - real values with one label per row (a classifier): the class a fixed random linear
///     teacher scores highest, argmax_c sum_f x[row, f] w[c, f] with w[c, f] hashed in [-1, 1);
///   - anything else: hashed like any index input (nothing to learn).
/// Every device computes its own shard from global indices, the same under every plan.
template <class T>
std::vector<std::int64_t> label_shard(const shard_info& shard, int i, std::int64_t bound, const input_kind& data,
                                      const tensor_shape& data_shape, std::uint64_t seed, std::int64_t step) {
  const bool next_id = data.indices && data_shape == shard.global;
  const bool teacher = !data.indices && shard.global.rank() == 1 && data_shape.rank() >= 1 && data_shape[0] == shard.global[0];
  if (!next_id && !teacher) return index_shard(shard, i, bound, seed, step);
  std::vector<std::int64_t> out(std::size_t(shard.local.elements()));
  const std::int64_t features = teacher ? data_shape.elements() / data_shape[0] : 0;
  // The teacher's weights [bound, features], and one sample's x as input_shard<T> makes it
  // (rounded to T), each hashed once rather than once per class and sample.
  std::vector<double> teacher_w(static_cast<std::size_t>(bound * features));
  std::vector<double> x(static_cast<std::size_t>(features));
  for (std::int64_t c = 0; c < bound; ++c)
    for (std::int64_t f = 0; f < features; ++f)
      at(teacher_w, c * features + f) = hashed_uniform(seed, 5000 + std::uint64_t(c), std::uint64_t(f));
  for_each_global_index(shard, [&](std::int64_t k, std::int64_t gi) {
    if (next_id) {
      at(out, k) = (index_value(0, data.bound, seed, step, gi) + 1) % bound;
      return;
    }
    for (std::int64_t f = 0; f < features; ++f)
      at(x, f) = double(T(hashed_uniform(seed + std::uint64_t(step) * 7919, 0, std::uint64_t(gi * features + f))));
    std::int64_t best = 0;
    double best_score = 0;
    for (std::int64_t c = 0; c < bound; ++c) {
      double score = 0;
      const double* w = teacher_w.data() + c * features;
      for (std::int64_t f = 0; f < features; ++f) score += x.data()[f] * w[f];
      if (c == 0 || score > best_score) {
        best = c;
        best_score = score;
      }
    }
    at(out, k) = best;
  });
  return out;
}

/// A byte-level text corpus for a language model (autoddl-train --data): step `step`'s global
/// row b (of `rows` per step) is the window of seq + 1 consecutive bytes starting at
/// ((step * rows + b) * seq) mod (size - seq - 1); its ids are the window's first seq bytes, its
/// labels the last seq (the next byte at every position). Every device reads the elements of its
/// own shard by global index, so every plan, mesh and micro-batch count sees the same batches.
struct text_corpus {
  std::vector<std::uint8_t> bytes;

  /// Element `gi` of a [rows, seq] ids (shift 0) or labels (shift 1) tensor at step `step`.
  /// @pre bytes.size() > seq + 1
  std::int64_t at_index(std::int64_t gi, std::int64_t rows, std::int64_t seq, std::int64_t step, int shift) const {
    const std::int64_t b = gi / seq, t = gi % seq;
    const std::int64_t span = std::int64_t(bytes.size()) - seq - 1;
    const std::int64_t start = ((step * rows + b) * seq) % span;
    return std::int64_t(at(bytes, start + t + shift));
  }
  /// This device's shard of ids (shift 0) or labels (shift 1) of global shape [rows, seq].
  std::vector<std::int64_t> shard(const shard_info& s, std::int64_t step, int shift) const {
    std::vector<std::int64_t> out(std::size_t(s.local.elements()));
    const std::int64_t rows = s.global[0], seq = s.global.elements() / rows;
    for_each_global_index(s, [&](std::int64_t k, std::int64_t gi) { at(out, k) = at_index(gi, rows, seq, step, shift); });
    return out;
  }
};

/// Throws error in one sentence unless g is a byte-level language model that `t` can feed:
/// every model input token ids or labels below 256 of one shape [rows, seq], seq + 1 < t's size.
inline void check_text_model(const graph& g, const text_corpus& t) {
  const std::vector<input_kind> kinds = input_kinds(g);
  for (std::size_t i = 0; i < kinds.size(); ++i)
    if (!kinds[i].indices || kinds[i].bound != 256 || !(g.inputs[i] == g.inputs[0]) || g.inputs[i].rank() != 2)
      detail::fail<error>("--data trains a byte-level language model: the model's inputs must be token ids and labels "
                          "[batch, seq] with a vocabulary of 256 (e.g. gpt:...,vocab=256), but input " + std::to_string(i) +
                          " is not");
  if (std::int64_t(t.bytes.size()) <= g.inputs.at(0)[1] + 1)
    detail::fail<error>("the --data text has " + std::to_string(t.bytes.size()) +
                        " bytes; it must be longer than the sequence length + 1");
}

}  // namespace autoddl
