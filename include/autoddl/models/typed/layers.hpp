#pragma once
// Typed layers: a model declared as a type, each layer's layout pinned or left to the search.
//
//   using block = layers::residual<auto_layout,
//       layers::layernorm<>,
//       layers::self_attention<8, true, pin<"[S(0),B]", "[B,S(1)]">,     // q, k, v: X, W
//                              pin<"[S(0),S(2)]">,                       // core: q
//                              pin<"[S(0),S(2)]", "[B,S(0)]">>>;         // proj: X, W
//
// A layout spec is `auto_layout` (every valid signature is a candidate) or `pin<L...>`: the
// nd-SBPs of the op's tensors in op_node order (inputs, then parameters), a prefix is enough
// when the rules fix the rest (a linear's bias and output follow from X and W). `box<L>` in a
// sequence says the stream tensor is boxed to L before the ops that read it next: it is the
// only way pinned neighbours whose layouts differ may meet (a boxing is never implicit).
// Each layer emits op records into a constexpr builder; typed_model (model.hpp) checks them.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/hana/fold.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include "autoddl/index.hpp"
#include "autoddl/ops/typed/static_signature.hpp"
#include "autoddl/sbp/dtensor.hpp"

namespace autoddl {

/// Layout spec: the search picks among every valid signature.
struct auto_layout {};
/// Layout spec: the nd-SBPs of the op's tensors (inputs then parameters), e.g.
/// pin<"[S(0),B]", "[B,S(1)]"> for a linear's X and W. Meshes, when written, are ignored here:
/// the model's mesh is the mesh.
template <layout_arg... L>
struct pin {};

namespace detail {

namespace hana = boost::hana;

/// What a layout spec and the boxes before an op allow: tensor t (op_node order) must be
/// tensors[t] for t < n; input j must be box[j] where boxed[j].
struct pin_spec {
  std::array<nd_sbp, 5> tensors{};
  std::int8_t n = 0;
  std::array<nd_sbp, 3> box{};
  std::array<bool, 3> boxed{};
  friend constexpr bool operator==(const pin_spec&, const pin_spec&) = default;
  constexpr bool pinned() const { return n > 0; }
  constexpr bool constrains() const { return n > 0 || boxed[0] || boxed[1] || boxed[2]; }
};

constexpr bool matches(const pin_spec& p, const static_signature& s) {
  for (int t = 0; t < p.n; ++t)
    if (t >= s.n_inputs + s.n_params || !(s.tensor(t) == at(p.tensors, t))) return false;
  for (int j = 0; j < s.n_inputs; ++j)
    if (at(p.boxed, j) && !(at(s.inputs, j) == at(p.box, j))) return false;
  return true;
}

template <class S>
struct spec_of;
template <>
struct spec_of<auto_layout> {
  static constexpr pin_spec value{};
};
template <layout_arg... L>
struct spec_of<pin<L...>> {
  static_assert(sizeof...(L) >= 1 && sizeof...(L) <= 5, "autoddl: pin<...> takes 1 to 5 layouts (inputs, then parameters)");
  static constexpr pin_spec value = [] {
    pin_spec p;
    ((at(p.tensors, p.n++) = L.value.sbp), ...);
    return p;
  }();
};

/// One op of a typed model: its name, static op, layout constraints and producers.
/// from[j]: the record that produces input j, -1 the model input, -2 the labels.
struct layer_record {
  text name{};
  static_op op{};
  pin_spec pin{};
  std::array<int, 3> from{-1, -1, -1};
  int block = -1, block_pos = -1;
  friend constexpr bool operator==(const layer_record&, const layer_record&) = default;
};

/// Collects a model's records at compile time (transient: lives inside one constant evaluation).
template <std::size_t N>
struct typed_builder {
  std::array<layer_record, N> r{};
  int n = 0;
  mesh_shape mesh{};
  tensor_shape input{};
  int block = -1, pos = 0;
  std::array<int, 8> boxed_ref{};  // stream tensors declared boxed by box<L>, and their targets
  std::array<nd_sbp, 8> boxed_to{};
  int n_boxed = 0;

  constexpr tensor_shape shape_of(int ref) const {
    if (ref == -2) {  // labels: the logits' leading dims
      tensor_shape s = at(r, n - 1).op.output;
      tensor_shape l;
      for (int d = 0; d + 1 < s.rank(); ++d) l.push_back(s[d]);
      return l;
    }
    return ref < 0 ? input : at(r, ref).op.output;
  }
  constexpr void box(int ref, const nd_sbp& to) {
    for (int i = 0; i < n_boxed; ++i)
      if (at(boxed_ref, i) == ref) { at(boxed_to, i) = to; return; }
    if (n_boxed == 8) fail<layout_error>("a typed model may declare at most 8 live box<...> steps");
    at(boxed_ref, n_boxed) = ref;
    at(boxed_to, n_boxed++) = to;
  }
  /// Adds an op; a '#' in `base` becomes the op's position (in its block, else in the model).
  constexpr int add(std::string_view base, static_op op, pin_spec pin, std::array<int, 3> from) {
    op.mesh = mesh;
    layer_record& x = at(r, n);
    // (no `c ? std::string : std::string` here: g++ 12 rejects it in constant expressions)
    std::string name;
    if (block >= 0) name += "h" + itos(block) + ".";
    for (char c : base) {
      if (c == '#') name += itos(block >= 0 ? pos : n);
      else name += c;
    }
    x.name = text(std::string_view(name));
    for (int j = 0; j < op.n_inputs; ++j)
      for (int i = 0; i < n_boxed; ++i)
        if (at(boxed_ref, i) == at(from, j)) {
          at(pin.boxed, j) = true;
          at(pin.box, j) = at(boxed_to, i);
        }
    x.op = op;
    x.pin = pin;
    x.from = from;
    x.block = block;
    x.block_pos = block >= 0 ? pos++ : -1;
    return n++;
  }
};

/// Emits the layers L... in order, each reading the stream tensor the previous one produced;
/// returns the last one's record (x itself for an empty sequence).
template <class... L, class Bld>
constexpr int emit_seq(Bld& b, int x) {
  return hana::fold(hana::tuple_t<L...>, x, [&b](int stream, auto layer) {
    return decltype(layer)::type::emit(b, stream);
  });
}

constexpr tensor_shape with_last_dim(tensor_shape s, std::int64_t v) {
  s[s.rank() - 1] = v;
  return s;
}

constexpr static_op unary_op(op_kind k, const tensor_shape& x) {
  static_op op;
  op.kind = k;
  op.inputs[0] = x;
  op.n_inputs = 1;
  op.output = x;
  return op;
}

/// Y = X W [+ b] for X [..., in]: W [in, out], b [out].
constexpr static_op linear_op(const tensor_shape& x, std::int64_t out, bool bias) {
  static_op op = unary_op(op_kind::linear, x);
  op.bias = bias;
  op.params[0] = tensor_shape{x[x.rank() - 1], out};
  op.params[1] = tensor_shape{out};
  op.n_params = bias ? 2 : 1;
  op.output = with_last_dim(x, out);
  return op;
}

/// The constraint a layout spec puts on an op that precedes its own and keeps its layout (a
/// rotation before the attention core): tensor t of the spec, if pinned,
/// as that op's X. Example: of pin<"[S(0),S(2)]", "[S(0),B]">, t = 1 gives pin<"[S(0),B]">.
constexpr pin_spec pin_of_tensor(const pin_spec& p, int t) {
  pin_spec r;
  if (t < p.n) at(r.tensors, r.n++) = at(p.tensors, t);
  return r;
}

constexpr std::int64_t window_extent(std::int64_t in, int kernel, int stride, int padding) {
  std::int64_t span = in + 2 * padding - kernel;
  if (span < 0) fail<layout_error>("a window of " + itos(kernel) + " does not fit an extent of " + itos(in));
  return span / stride + 1;
}

struct gqa_config {
  int heads = 1, kv_heads = 1;
  bool causal = true;
  double rope_theta = 500000;
  pin_spec q{}, kv{}, core{}, proj{};
};

/// layers::gqa_attention's ops: q, k, v, their rotations, the core, o.
template <class Bld>
constexpr int emit_gqa_attention(Bld& b, int x, const gqa_config& c) {
  const tensor_shape s = b.shape_of(x);
  if (s.rank() != 3) fail<layout_error>("gqa_attention needs X [batch, seq, hidden], got " + to_string(s));
  const std::int64_t h = s[2];
  if (h % c.heads != 0 || (h / c.heads) % 2 != 0)
    fail<layout_error>("gqa_attention over hidden " + itos(h) + " with " + itos(c.heads) +
                       " heads: choose a head count that divides the hidden size into heads of an even size (rotary "
                       "embeddings turn pairs of a head's dims)");
  const std::int64_t kv_width = c.kv_heads * (h / c.heads);
  const int q = b.add("attn.q", linear_op(s, h, false), c.q, {x, -1, -1});
  const int k = b.add("attn.k", linear_op(s, kv_width, false), c.kv, {x, -1, -1});
  const int v = b.add("attn.v", linear_op(s, kv_width, false), c.kv, {x, -1, -1});
  auto rotary = [&](int heads, const tensor_shape& shape) {
    static_op op = unary_op(op_kind::rotary, shape);
    op.heads = heads;
    op.rope_theta = c.rope_theta;
    return op;
  };
  const int rq = b.add("attn.q_rope", rotary(c.heads, s), pin_of_tensor(c.core, 0), {q, -1, -1});
  const int rk = b.add("attn.k_rope", rotary(c.kv_heads, b.shape_of(k)), pin_of_tensor(c.core, 1), {k, -1, -1});
  static_op core;
  core.kind = op_kind::attention;
  core.heads = c.heads;
  core.kv_heads = c.kv_heads == c.heads ? 0 : c.kv_heads;
  core.causal = c.causal;
  core.inputs = {s, b.shape_of(k), b.shape_of(v)};
  core.n_inputs = 3;
  core.output = s;
  const int o = b.add("attn.core", core, c.core, {rq, rk, v});
  return b.add("attn.o", linear_op(s, h, false), c.proj, {o, -1, -1});
}

/// layers::swiglu's ops: gate, up, the fused product silu(gate) * up, down.
template <class Bld>
constexpr int emit_swiglu(Bld& b, int x, std::int64_t ffn, const pin_spec& gate_up, const pin_spec& mul_spec,
                          const pin_spec& down) {
  const tensor_shape s = b.shape_of(x);
  const int gate = b.add("mlp.gate", linear_op(s, ffn, false), gate_up, {x, -1, -1});
  const int up = b.add("mlp.up", linear_op(s, ffn, false), gate_up, {x, -1, -1});
  static_op prod;
  prod.kind = op_kind::swiglu;
  prod.inputs = {b.shape_of(gate), b.shape_of(up), {}};
  prod.n_inputs = 2;
  prod.output = b.shape_of(gate);
  const int m = b.add("mlp.swiglu", prod, mul_spec, {gate, up, -1});
  return b.add("mlp.down", linear_op(b.shape_of(m), s[s.rank() - 1], false), down, {m, -1, -1});
}

}  // namespace detail

template <class S>
concept LayoutSpec = requires { detail::spec_of<S>::value; };

namespace layers {

/// Y = X W + b, X [..., in] -> [..., Out]; W [in, Out], b [Out].
template <std::int64_t Out, LayoutSpec Spec = auto_layout, bool Bias = true>
struct linear {
  static constexpr int ops = 1;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    return b.add("linear#", detail::linear_op(b.shape_of(x), Out, Bias), detail::spec_of<Spec>::value, {x, -1, -1});
  }
};

/// Layernorm over the last dim; gamma, beta [h].
template <LayoutSpec Spec = auto_layout>
struct layernorm {
  static constexpr int ops = 1;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    const tensor_shape s = b.shape_of(x);
    static_op op = detail::unary_op(op_kind::layernorm, s);
    op.params[0] = op.params[1] = tensor_shape{s[s.rank() - 1]};
    op.n_params = 2;
    return b.add("ln#", op, detail::spec_of<Spec>::value, {x, -1, -1});
  }
};

/// RMSNorm over the last dim (LLaMA's): X / sqrt(mean(X^2) + Eps) * gamma; gamma [h], no beta.
/// Whole rows per device: the last dim never splits.
template <LayoutSpec Spec = auto_layout, double Eps = 1e-5>
struct rmsnorm {
  static_assert(Eps > 0, "autoddl: rmsnorm<Spec, Eps> needs Eps > 0 (it keeps 1 / rms finite on a zero row)");
  static constexpr int ops = 1;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    const tensor_shape s = b.shape_of(x);
    static_op op = detail::unary_op(op_kind::rmsnorm, s);
    op.eps = Eps;
    op.params[0] = tensor_shape{s[s.rank() - 1]};
    op.n_params = 1;
    return b.add("norm#", op, detail::spec_of<Spec>::value, {x, -1, -1});
  }
};

namespace detail {
template <op_kind K, LayoutSpec Spec>
struct unary {
  static constexpr int ops = 1;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    return b.add(std::string(to_string(K)) + "#", autoddl::detail::unary_op(K, b.shape_of(x)),
                 autoddl::detail::spec_of<Spec>::value, {x, -1, -1});
  }
};
}  // namespace detail

template <LayoutSpec Spec = auto_layout>
struct relu : detail::unary<op_kind::relu, Spec> {};
template <LayoutSpec Spec = auto_layout>
struct gelu : detail::unary<op_kind::gelu, Spec> {};
template <LayoutSpec Spec = auto_layout>
struct softmax : detail::unary<op_kind::softmax, Spec> {};
template <LayoutSpec Spec = auto_layout>
struct silu : detail::unary<op_kind::silu, Spec> {};

/// conv2d NCHW, Out channels, square Kernel, stride 1, Padding zeros per side (default: "same").
template <std::int64_t Out, int Kernel, LayoutSpec Spec = auto_layout, int Padding = Kernel / 2, bool Bias = true>
struct conv2d {
  static constexpr int ops = 1;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    const tensor_shape s = b.shape_of(x);
    if (s.rank() != 4) autoddl::detail::fail<layout_error>("conv2d needs an NCHW input, got " + to_string(s));
    static_op op = autoddl::detail::unary_op(op_kind::conv2d, s);
    op.kernel = Kernel;
    op.padding = Padding;
    op.bias = Bias;
    op.params[0] = tensor_shape{Out, s[1], Kernel, Kernel};
    op.params[1] = tensor_shape{Out};
    op.n_params = Bias ? 2 : 1;
    op.output = tensor_shape{s[0], Out, autoddl::detail::window_extent(s[2], Kernel, 1, Padding),
                             autoddl::detail::window_extent(s[3], Kernel, 1, Padding)};
    return b.add("conv#", op, autoddl::detail::spec_of<Spec>::value, {x, -1, -1});
  }
};

/// Max-pool NCHW with a square Kernel and stride Kernel (VGG's 2x2/2).
template <int Kernel = 2, LayoutSpec Spec = auto_layout>
struct max_pool {
  static constexpr int ops = 1;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    const tensor_shape s = b.shape_of(x);
    if (s.rank() != 4) autoddl::detail::fail<layout_error>("max_pool needs an NCHW input, got " + to_string(s));
    static_op op = autoddl::detail::unary_op(op_kind::max_pool, s);
    op.kernel = op.stride = Kernel;
    op.output = tensor_shape{s[0], s[1], autoddl::detail::window_extent(s[2], Kernel, Kernel, 0),
                             autoddl::detail::window_extent(s[3], Kernel, Kernel, 0)};
    return b.add("pool#", op, autoddl::detail::spec_of<Spec>::value, {x, -1, -1});
  }
};

/// Multi-head self-attention on X [batch, seq, hidden]: q, k, v linears (one spec for the
/// three), the attention core, the output projection.
template <int Heads, bool Causal = true, LayoutSpec QKV = auto_layout, LayoutSpec Core = auto_layout,
          LayoutSpec Proj = auto_layout>
struct self_attention {
  static constexpr int ops = 5;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    const tensor_shape s = b.shape_of(x);
    if (s.rank() != 3) autoddl::detail::fail<layout_error>("self_attention needs X [batch, seq, hidden], got " + to_string(s));
    const std::int64_t h = s[2];
    static_op lin = autoddl::detail::unary_op(op_kind::linear, s);
    lin.params[0] = tensor_shape{h, h};
    lin.params[1] = tensor_shape{h};
    lin.n_params = 2;
    const auto qkv = autoddl::detail::spec_of<QKV>::value;
    const int q = b.add("attn.q", lin, qkv, {x, -1, -1});
    const int k = b.add("attn.k", lin, qkv, {x, -1, -1});
    const int v = b.add("attn.v", lin, qkv, {x, -1, -1});
    static_op core;
    core.kind = op_kind::attention;
    core.heads = Heads;
    core.causal = Causal;
    core.inputs = {s, s, s};
    core.n_inputs = 3;
    core.output = s;
    const int c = b.add("attn.core", core, autoddl::detail::spec_of<Core>::value, {q, k, v});
    return b.add("attn.proj", lin, autoddl::detail::spec_of<Proj>::value, {c, -1, -1});
  }
};

/// Grouped-query self-attention with rotary position embeddings, LLaMA's, on X [batch, seq,
/// hidden], d = hidden / Heads: q, k, v linears without biases (W [hidden, hidden] for q,
/// [hidden, KvHeads * d] for k and v), rotations of q and k (pairs i, i + d/2; RopeTheta, the base
/// of the angles, is an integer, as every published LLaMA-family base is), the core (each
/// key/value head read by Heads / KvHeads query heads; KvHeads == Heads is multi-head attention),
/// the output projection o without bias. Ops attn.q, .k, .v, .q_rope, .k_rope, .core, .o (h<i>.
/// first in a repeat<>), as the LLaMA graph builder names them.
/// Specs: QKV pins the three linears (X, W), KV the k and v linears where they differ from q
/// (more tensor-parallel ways than key/value heads: W[B,B], each device holding every key/value
/// head, as Megatron-Core replicates them); Core pins the core (q, k, v) and with it the rotations
/// that feed it (q_rope's X is the core's q layout, k_rope's its k layout: a rotation keeps its
/// input's layout); Proj pins o (X, W).
template <int Heads, int KvHeads = Heads, bool Causal = true, LayoutSpec QKV = auto_layout, LayoutSpec Core = auto_layout,
          LayoutSpec Proj = auto_layout, LayoutSpec KV = QKV, std::int64_t RopeTheta = 500000>
struct gqa_attention {
  static_assert(Heads > 0 && KvHeads > 0 && Heads % KvHeads == 0,
                "autoddl: gqa_attention<Heads, KvHeads> needs KvHeads to divide Heads (each key/value head serves "
                "Heads / KvHeads query heads)");
  static_assert(RopeTheta > 0, "autoddl: gqa_attention's RopeTheta (the base of the rotary angles) must be positive");
  static constexpr int ops = 7;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    using autoddl::detail::spec_of;
    return autoddl::detail::emit_gqa_attention(
        b, x,
        {Heads, KvHeads, Causal, double(RopeTheta), spec_of<QKV>::value, spec_of<KV>::value, spec_of<Core>::value,
         spec_of<Proj>::value});
  }
};

/// SwiGLU MLP (Shazeer 2020), LLaMA's, on X [..., hidden]: down(silu(gate(X)) * up(X)), three
/// linears without biases (gate and up W [hidden, Ffn], down W [Ffn, hidden]) and the fused
/// product. Ops mlp.gate, .up, .swiglu, .down (h<i>. first in a repeat<>), as the LLaMA graph
/// builder names them. Specs: GateUpSpec pins gate and up (X, W); MulSpec the fused product
/// (gate, up); DownSpec pins down (X, W).
template <std::int64_t Ffn, LayoutSpec GateUpSpec = auto_layout, LayoutSpec MulSpec = auto_layout,
          LayoutSpec DownSpec = auto_layout>
struct swiglu {
  static constexpr int ops = 4;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    using autoddl::detail::spec_of;
    return autoddl::detail::emit_swiglu(b, x, Ffn, spec_of<GateUpSpec>::value, spec_of<MulSpec>::value,
                                        spec_of<DownSpec>::value);
  }
};

/// y = x + Layers(x): the add's layout spec first, then the inner sequence.
template <LayoutSpec AddSpec, class... Layers>
struct residual {
  static constexpr int ops = (Layers::ops + ... + 1);
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    const int y = autoddl::detail::emit_seq<Layers...>(b, x);
    static_op add;
    add.kind = op_kind::add;
    add.inputs = {b.shape_of(x), b.shape_of(y), {}};
    add.n_inputs = 2;
    add.output = b.shape_of(x);
    return b.add("add#", add, autoddl::detail::spec_of<AddSpec>::value, {x, y, -1});
  }
};

/// N copies of a block; each copy is a repeated block of the graph (named h0., h1., ...), so the
/// search ties corresponding layers into one decision first. Not nested.
template <int N, class... Layers>
struct repeat {
  static constexpr int ops = N * (Layers::ops + ... + 0);
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    for (int i = 0; i < N; ++i) {
      b.block = i;
      b.pos = 0;
      x = autoddl::detail::emit_seq<Layers...>(b, x);
      b.block = -1;
    }
    return x;
  }
};

/// The stream tensor is boxed to L before every op that reads it next: the written form of
/// the communication between pinned neighbours (typed_model::boxings lists it).
template <layout_arg L>
struct box {
  static constexpr int ops = 0;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    b.box(x, L.value.sbp);
    return x;
  }
};

/// Softmax cross-entropy of the stream (logits [..., classes]) against labels [...]: the loss a
/// model needs before it can be planned (typed_model::to_graph).
template <LayoutSpec Spec = auto_layout>
struct cross_entropy {
  static constexpr int ops = 1;
  template <class Bld>
  static constexpr int emit(Bld& b, int x) {
    const tensor_shape s = b.shape_of(x);
    tensor_shape labels;
    for (int d = 0; d + 1 < s.rank(); ++d) labels.push_back(s[d]);
    static_op op;
    op.kind = op_kind::cross_entropy;
    op.inputs = {s, labels, {}};
    op.n_inputs = 2;
    op.output = tensor_shape{};
    return b.add("loss", op, autoddl::detail::spec_of<Spec>::value, {x, -2, -1});
  }
};

}  // namespace layers
}  // namespace autoddl
