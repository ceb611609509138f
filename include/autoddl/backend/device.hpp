#pragma once
// The Device concept: what the runtime's operator kernels (autoddl/runtime/op_kernels.hpp) ask of
// a compute device. A device allocates typed buffers and runs coarse primitives, one call per
// op-level step (a GEMM, a layernorm over all rows, an im2col of a whole batch), templated on the
// element type. The kernels never touch element memory themselves, so a CUDA device (buffers in
// GPU memory, spans over device pointers) satisfies the same concept unchanged.
//
// Conventions of every primitive:
// - Tensors are dense and row-major; sizes are element counts (std::int64_t).
// - An output span is overwritten unless the primitive says it accumulates.
// - Index tensors (token ids, labels) are std::int64_t.
//
// Memory space and ordering (what the executor, runtime/trainer.hpp, relies on):
// - Spans refer to the device's memory: view(buffer) gives them, subspan() narrows them, and only
//   the device's own primitives and its paired communicator (backend/communicator.hpp) may read
//   or write through them; the host never dereferences one. upload/download cross over.
// - Primitives run in call order (one stream); the paired communicator's collectives run in the
//   same order. upload, download, all_finite and synchronize return when their data is in place
//   (the host synchronises before it reads); the others may return before they have run.
// - A buffer is default-constructible (empty), movable, and knows its size(); destroying one
//   while queued work still uses it is safe (the device orders the release).
// - Optional: a device and its paired communicator may offer a second, side queue (the concept
//   SideQueue<D, M> and its rules, backend/communicator.hpp). "Call order" above is then per
//   queue: side-queue work runs after what the main queue had when the side queue was entered,
//   and the main queue sees it only after a join. A buffer destroyed while the side queue is
//   current is released in the side queue's order; one used there must not be destroyed on the
//   main queue before the join (the caller keeps it).
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "autoddl/backend/shard.hpp"

namespace autoddl {

/// A (batched, strided) row-major GEMM: for each batch i,
///   C_i[m,n] = alpha * op(A_i)[m,k] * op(B_i)[k,n] + beta * C_i,
/// op(A) = A^T when trans_a (A stored [k,m]), likewise B; A_i starts at i * stride_a.
/// Example: a plain Y[8,4] = X[8,16] W[16,4] is {false,false, 8,4,16, 16,4,4}.
struct gemm_desc {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

/// The geometry of a square-window op on NCHW images (conv2d's im2col, max-pool).
/// out_h = (h + 2 padding - kernel) / stride + 1, likewise out_w.
struct window_geom {
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  int kernel = 1, stride = 1, padding = 0;
  constexpr std::int64_t out_h() const { return (h + 2 * padding - kernel) / stride + 1; }
  constexpr std::int64_t out_w() const { return (w + 2 * padding - kernel) / stride + 1; }
  /// Rows of the im2col matrix: c * kernel^2; columns: n * out_h * out_w.
  constexpr std::int64_t col_rows() const { return c * kernel * kernel; }
  constexpr std::int64_t col_cols() const { return n * out_h() * out_w(); }
};

/// Optimizer hyper-parameters (one struct for both rules, unused fields ignored).
///   SGD-momentum: v = momentum v + g + weight_decay p;  p -= lr v
///   Adam (Kingma & Ba 2015, L2 weight decay added to g): m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
///   p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps)
struct optimizer_step {
  double lr = 1e-3, momentum = 0.9, weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  std::int64_t step = 1;  ///< Adam's bias-correction step, from 1
};

/// The all-reduce a row statistic needs (vocab-parallel cross-entropy).
enum class reduce_kind : std::uint8_t { sum, max };

// ---- the dropout mask ---------------------------------------------------------------------
namespace detail {
/// SplitMix64's finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace detail

/// Counter-based keep decision of one element: a pure function of (seed, op id, global element
/// index), so an element's mask is the same on every device and under every layout, and the
/// backward pass recomputes it instead of storing it. Keeps with probability 1 - p.
constexpr bool dropout_keep(std::uint64_t seed, std::uint64_t op_id, std::uint64_t index, double p) {
  std::uint64_t h = detail::mix64(detail::mix64(seed ^ 0x9e3779b97f4a7c15ULL) ^ (op_id * 0xd1b54a32d192ed03ULL));
  h = detail::mix64(h ^ index);
  double u = double(h >> 11) * 0x1.0p-53;  // uniform in [0, 1)
  return u >= p;
}

/// The dropout key of a whole op call.
struct dropout_key {
  std::uint64_t seed = 0, op_id = 0;
  double p = 0.0;
};

namespace detail {
/// dropout_keep (above) of one op call with its per-call hashing done once: u >= p
/// with u = (h >> 11) 2^-53 is (h >> 11) >= ceil(p 2^53), both sides exact, so the integer test
/// keeps exactly the elements dropout_keep keeps.
struct dropout_mask {
  std::uint64_t base, threshold;
  explicit dropout_mask(const dropout_key& k)
      : base(mix64(mix64(k.seed ^ 0x9e3779b97f4a7c15ULL) ^ (k.op_id * 0xd1b54a32d192ed03ULL))),
        threshold(std::uint64_t(std::ceil(k.p * 0x1.0p53))) {}
  bool keep(std::uint64_t index) const { return (mix64(base ^ index) >> 11) >= threshold; }
};
}  // namespace detail

/// One fused attention call (attention_fwd / attention_bwd below) on a device's local shards:
/// q, o, dq [b, sq, heads * dh] and k, v, dk, dv [b, sk, kv_heads * dh] in the model's layout
/// (query rows ldq() apart, key rows ldkv() apart), the log-sum-exp lse [b, heads, sq].
/// Grouped-query attention: local query head i reads local key/value head kv_of(i). The causal
/// mask compares global positions: local query r (position q_offset + r) sees keys <= q_offset + r.
/// Dropout (where `drops`) keeps the probability of (n, i, r, c) by dropout_keep at its global
/// index in the probabilities [B, heads, Sq, Sk], whose local block `probs` describes, so a
/// sharded call drops what the serial one drops.
struct attention_desc {
  std::int64_t b = 0, sq = 0, sk = 0, heads = 0, dh = 0;  ///< local batch, queries, keys, query heads; head size
  std::int64_t kv_heads = 0;                              ///< local key/value heads
  std::int64_t group = 1, head0 = 0, kv0 = 0;             ///< query heads per key/value head; global first heads
  std::int64_t q_offset = 0;                              ///< global position of the first local query
  bool causal = false;
  double scale = 1;                                       ///< applied to q k^T, 1 / sqrt(dh)
  bool drops = false;
  dropout_key dropout{};
  shard_info probs{};                                     ///< this call's block of [B, heads, Sq, Sk]

  constexpr std::int64_t ldq() const { return heads * dh; }
  constexpr std::int64_t ldkv() const { return kv_heads * dh; }
  /// The local key/value head that local query head i reads.
  constexpr std::int64_t kv_of(std::int64_t i) const { return (head0 + i) / group - kv0; }
  /// The global index in [B, heads, Sq, Sk] of local probability (n, i, r, 0).
  constexpr std::uint64_t prob_row(std::int64_t n, std::int64_t i, std::int64_t r) const {
    const tensor_shape& g = probs.global;
    return std::uint64_t((((n + probs.offset[0]) * g[1] + i + probs.offset[1]) * g[2] + r + probs.offset[2]) * g[3] +
                         probs.offset[3]);
  }
};

template <class D, class T>
using buffer_t = typename D::template buffer<T>;

/// The type a device keeps per-row statistics in: layernorm's mean and rstd, cross-entropy's row
/// max and stats. T for float and double. A back end with narrower element types specialises
/// statistic_type for them, next to where it defines them (the CUDA back end, cuda/types.cuh:
/// float for __half and __nv_bfloat16, whose sum of exp overflows past 65,504 and whose mean
/// and rstd would lose digits), before anything names statistic_t of that type.
template <class T>
struct statistic_type {
  using type = T;
};
template <class T>
using statistic_t = typename statistic_type<T>::type;

/// What the executor does with a device buffer itself: default-construct (empty), move, ask its
/// size. Its elements are reached only through the device (view).
template <class B>
concept DeviceBuffer = std::default_initializable<B> && std::movable<B> && requires(const B& b) {
  { b.size() } -> std::convertible_to<std::size_t>;
  { b.empty() } -> std::convertible_to<bool>;
};

/// A device that runs every primitive for element type T. Each line states the contract.
/// Row statistics (layernorm's mean and rstd; cross-entropy's max and stats) are spans of
/// statistic_t<T> (st, cst below), computed in at least that precision: for float and double
/// they are T, so nothing changes there.
template <class D, class T>
concept DeviceFor = requires(D& d, const D& cd, std::size_t n, std::int64_t i, T a, buffer_t<D, T>& buf,
                             const buffer_t<D, T>& cbuf, buffer_t<D, statistic_t<T>>& sbuf,
                             const buffer_t<D, statistic_t<T>>& csbuf, std::span<T> y, std::span<const T> x,
                             std::span<statistic_t<T>> st, std::span<const statistic_t<T>> cst, statistic_t<T> sa,
                             std::span<const std::int64_t> ids, std::span<std::int64_t> slots, const gemm_desc& g, const window_geom& wg,
                             const shard_info& s, const dropout_key& key, const optimizer_step& opt, double f,
                             const attention_desc& ad) {
  // memory: alloc gives n zeros; view spans a buffer; upload/download cross host <-> device.
  // Optional: alloc_for_overwrite<T>(n), n elements of unspecified value for a kernel that writes
  // them all before reading (runtime/kernels/context.hpp uses alloc where a device lacks it)
  { d.template alloc<T>(n) } -> std::same_as<buffer_t<D, T>>;
  { cd.view(cbuf) } -> std::same_as<std::span<const T>>;
  { d.view(buf) } -> std::same_as<std::span<T>>;
  { d.template alloc<statistic_t<T>>(n) } -> std::same_as<buffer_t<D, statistic_t<T>>>;  // row statistics
  { cd.view(csbuf) } -> std::same_as<std::span<const statistic_t<T>>>;
  { d.view(sbuf) } -> std::same_as<std::span<statistic_t<T>>>;
  d.upload(x, y);    // host x -> device y
  d.download(x, y);  // device x -> host y
  d.copy(x, y);      // device -> device
  d.fill(y, a);
  // strided block copy (the boxing's pack and unpack): y[r ldy + c] = x[r ldx + c] for r < rows,
  // c < cols; x and y start at the first row's first element
  d.copy_rows(i, i, x, i, y, i);  // (rows, cols, x, ldx, y, ldy)
  { cd.all_finite(x) } -> std::same_as<bool>;  // no NaN or Inf in x
  // BLAS-like
  d.gemm(g, a, x, x, a, y);  // C = alpha op(A) op(B) + beta C, see gemm_desc
  d.add(x, x, y);            // y = a + b
  d.axpy(a, x, y);           // y += alpha x
  d.scale(a, y);             // y *= alpha
  d.permute_0213(i, i, i, i, x, y);  // y[a][c][b][d] = x[a][b][c][d], x of shape [a,b,c,d]
  // bias over y [outer, channels, inner]: y[o,c,i] += b[c];  db[c] = sum_{o,i} dy[o,c,i]
  d.bias_add(i, i, i, x, y);
  d.bias_grad(i, i, i, x, y);
  // activations: y = f(x); dx = f'(x) dy. gelu is GPT-2's tanh approximation
  d.relu_fwd(x, y);
  d.relu_bwd(x, x, y);  // (x, dy, dx)
  d.gelu_fwd(x, y);
  d.gelu_bwd(x, x, y);
  // silu y = x / (1 + exp(-x)); dx = dy s (1 + x (1 - s)), s = sigmoid(x); y = a * b element-wise
  d.silu_fwd(x, y);
  d.silu_bwd(x, x, y);  // (x, dy, dx)
  d.mul(x, x, y);       // (a, b, y)
  // rotary embedding of x [b, s, heads, d], sequence index j at position pos0 + j: element i <
  // d/2 of each head turns with element i + d/2 by pos * theta^(-2i/d); `inverse` turns back
  d.rotary(i, i, i, i, i, f, true, x, y);  // (b, s, heads, d, pos0, theta, inverse, x, y)
  // rows x cols: layernorm (eps 1e-5, saves mean and rstd per row, in statistic_t<T>) and
  // softmax over each row
  d.layernorm_fwd(i, i, x, x, x, y, st, st);          // (rows, cols, x, gamma, beta, y, mean, rstd)
  d.layernorm_bwd(i, i, x, x, cst, cst, x, y, y, y);  // (rows, cols, x, gamma, mean, rstd, dy, dx, dgamma, dbeta)
  // rows x cols RMSNorm: y = x rstd gamma, rstd = 1 / sqrt(mean(x^2) + eps) saved per row (in
  // statistic_t<T>); dgamma = sum over rows of dy x rstd
  d.rmsnorm_fwd(i, i, x, x, f, y, st);      // (rows, cols, x, gamma, eps, y, rstd)
  d.rmsnorm_bwd(i, i, x, x, cst, x, y, y);  // (rows, cols, x, gamma, rstd, dy, dx, dgamma)
  d.softmax_fwd(i, i, x, y);
  d.softmax_bwd(i, i, x, x, y);  // (rows, cols, y, dy, dx)
  // attention scores [groups, sq, sk] in place: x *= scale; with causal, query q (global
  // position q_offset + q) sees keys k <= q_offset + q, the rest become -inf
  d.scale_causal_mask(i, i, i, a, i, true, y);  // (groups, sq, sk, scale, q_offset, causal, scores)
  // fused attention (attention_desc): o = dropout(softmax(scale q k^T [+ mask])) v per query head,
  // lse[n, i, r] = the log of the row's sum of exp (in statistic_t<T>), no score kept; backward
  // recomputes the probabilities from q, k and lse and overwrites dq, dk and dv
  d.attention_fwd(ad, x, x, x, y, st);                      // (desc, q, k, v, o, lse)
  d.attention_bwd(ad, x, x, x, x, cst, x, y, y, y);         // (desc, q, k, v, o, lse, do, dq, dk, dv)
  // embedding over a table holding global rows [lo, lo + table rows): y[t,:] = table[ids[t]-lo,:]
  // or 0 when ids[t] is not held; scatter_add accumulates dy rows into dtable the same way
  d.gather_rows(ids, i, x, y);       // (ids, lo, table, y); cols = y.size() / ids.size()
  d.scatter_add_rows(ids, i, x, y);  // (ids, lo, dy, dtable); cols = dy.size() / ids.size()
  // im2col of a whole NCHW batch into [c k k, n oh ow]; col2im sums back (overwrites dx)
  d.im2col(wg, x, y);
  d.col2im(wg, x, y);
  d.max_pool_fwd(wg, x, y);
  d.max_pool_bwd(wg, x, x, y);  // (geom, x, dy, dx): dy goes to the first max of each window
  // dropout of a shard: y = x * keep(seed, op, global index) / (1 - p), with the global index
  // of each local element from the shard
  d.dropout(key, s, x, y);
  // softmax cross-entropy statistics over logits rows [rows, cols] holding global columns
  // [lo, lo + cols): row_max; xent_stats writes stats[r] = sum_c exp(x - max[r]) and
  // stats[rows + r] = x[r, label - lo] (0 when the label's column is not held);
  // xent_loss: out[0] = scale * sum_r (log stats[r] + max[r] - stats[rows + r]);
  // xent_bwd: dx = scale * dloss[0] * (exp(x - max) / stats[r] - onehot(label - lo)).
  // max, stats, the loss and its scale (1 / the global rows) are statistic_t<T>: a vocabulary of
  // 70,000 sums past fp16's 65,504, and the engines compute a 16-bit model's loss in fp32
  d.row_max(i, i, x, st);
  d.xent_stats(i, i, x, ids, i, cst, st);           // (rows, cols, x, labels, lo, max, stats)
  d.xent_loss(i, cst, cst, sa, st);                 // (rows, max, stats, scale, out)
  d.xent_bwd(i, i, x, ids, i, cst, cst, x, sa, y);  // (rows, cols, x, labels, lo, max, stats, dloss, scale, dx)
  // mixture of experts (ops/moe.hpp), tokens as rows of e experts' probabilities p or gates g,
  // and their picks [rows, k] (index tensors): every routing decision reads the picks, never
  // whether a gate is 0, so a picked probability that underflows to 0 is still routed.
  // topk_experts: picks[r k + j] = the j-th of row r's k largest columns, ascending (ties to the
  // lower column); topk_gates: g keeps p at the picks, scaled to sum to 1 where `renormalize`,
  // the rest 0; topk_gates_bwd: dp = (dg/dp)^T dg.
  d.topk_experts(i, i, i, x, slots);                 // (rows, e, k, p, picks)
  d.topk_gates(i, i, i, true, x, ids, y);         // (rows, e, k, renormalize, p, picks, g)
  d.topk_gates_bwd(i, i, i, true, x, ids, x, y);  // (rows, e, k, renormalize, p, picks, dg, dp)
  // balance_loss over b sequences of s tokens: out[0] = scale sum_seq E / (k s^2) sum_c
  // count_c sum_t p_tc, count_c = the sequence's tokens whose picks hold c; dp = its gradient
  // (the counts held constant)
  d.balance_loss(i, i, i, i, x, ids, a, y);      // (b, s, e, k, p, picks, scale, out)
  d.balance_loss_bwd(i, i, i, i, ids, x, a, y);  // (b, s, e, k, picks, dloss, scale, dp)
  // moe_slots: the slot map of picks [b s, k], `capacity` slots per expert per sequence in token
  // order: src[(seq e + c) capacity + slot] = token row (seq s + t) or -1; dst[row e + c] = the
  // slot row of that token at expert c, or -1 (not picked, or past capacity)
  d.moe_slots(i, i, i, i, i, ids, slots, slots);  // (b, s, e, k, capacity, picks, src, dst)
  // combine_rows: y[r, :] = sum_c g[r, c] x[dst[r, c], :]; its backward writes dx (0 in unused
  // slots) and dg[r, c] = dy[r, :] . x[dst[r, c], :]
  d.combine_rows(i, i, ids, x, x, y);            // (rows, e, dst, g, x, y)
  d.combine_rows_bwd(i, i, ids, x, x, x, y, y);  // (rows, e, dst, g, x, dy, dx, dg)
  // optimizers, element-wise over a parameter: (opt, grad, state..., param)
  d.sgd_momentum(opt, x, y, y);  // (opt, grad, velocity, param)
  d.adam(opt, x, y, y, y);       // (opt, grad, m, v, param)
};

/// A compute device for the runtime: every primitive for float and double (CUDA devices add
/// half types, accumulating in float), and index buffers for token ids and labels.
template <class D>
concept Device = DeviceFor<D, float> && DeviceFor<D, double> &&
                 DeviceBuffer<buffer_t<D, float>> && DeviceBuffer<buffer_t<D, double>> &&
                 DeviceBuffer<buffer_t<D, std::int64_t>> &&
                 requires(D& d, const D& cd, std::size_t n, std::span<const std::int64_t> x, std::span<std::int64_t> y) {
  { d.template alloc<std::int64_t>(n) } -> std::same_as<buffer_t<D, std::int64_t>>;
  d.upload(x, y);
  d.download(x, y);
  d.copy(x, y);
  cd.synchronize();  // waits for every primitive queued so far
  // bytes the device's allocator holds for live buffers now (a host device may report its heap);
  // the executor's peak-memory figure samples it
  { cd.bytes_in_use() } -> std::convertible_to<std::int64_t>;
};

}  // namespace autoddl
