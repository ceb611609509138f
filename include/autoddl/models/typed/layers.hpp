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

constexpr std::int64_t window_extent(std::int64_t in, int kernel, int stride, int padding) {
  std::int64_t span = in + 2 * padding - kernel;
  if (span < 0) fail<layout_error>("a window of " + itos(kernel) + " does not fit an extent of " + itos(in));
  return span / stride + 1;
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
    const tensor_shape s = b.shape_of(x);
    static_op op = detail::unary_op(op_kind::linear, s);
    op.bias = Bias;
    op.params[0] = tensor_shape{s[s.rank() - 1], Out};
    op.params[1] = tensor_shape{Out};
    op.n_params = Bias ? 2 : 1;
    op.output = detail::with_last_dim(s, Out);
    return b.add("linear#", op, detail::spec_of<Spec>::value, {x, -1, -1});
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
