#pragma once
// typed_model: a whole model as a type (layers.hpp), checked by the compiler and planned at run
// time.
//
//   using vgg_stage = typed_model<float, static_mesh<2, 4>, static_shape<32, 64, 56, 56>,
//       layers::conv2d<128, 3>, layers::relu<>, layers::conv2d<128, 3>, layers::relu<>,
//       layers::max_pool<2, pin<"[S(0),S(1)]">>>;
//
// At compile time, for every layer: its candidate signatures (signatures_v of its static op, the
// runtime list of signatures(op, mesh)), the ones its pins allow (allowed_v), and the checks:
//   - a pin (or box) that no signature takes        -> pinned_layouts_match_no_signature
//   - an auto layer whose shapes no signature divides -> layer_has_no_signature
//   - pinned neighbours that disagree without box<>   -> pinned_layouts_need_boxing
// The boxes between pinned neighbours are listed in `boxings` (a constexpr array), never silent.
// At run time: to_graph() and allowed() feed plan_problem (search/typed.hpp), and
// visit<I>(index, f) calls f with signature_constant<op, index>, the compile-time instance of
// the signature the plan picked for layer I (one switch per layer, nothing per element).
#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <boost/hana/all_of.hpp>
#include <boost/hana/bool.hpp>
#include <boost/hana/fold.hpp>
#include <boost/hana/integral_constant.hpp>
#include <boost/hana/range.hpp>
#include <boost/hana/unpack.hpp>

#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/models/typed/detail/diagnostics.hpp"
#include "autoddl/models/typed/layers.hpp"
#include "autoddl/sbp/boxing.hpp"

namespace autoddl {

namespace detail {

/// What a layer's constraints leave of its candidates: their count, and the layouts they all
/// share (output, inputs), when they do.
struct allowed_summary {
  int count = 0, total = 0;
  bool out_fixed = false;
  nd_sbp out{};
  std::array<bool, 3> in_fixed{};
  std::array<nd_sbp, 3> in{};
  static_signature nearest{};  ///< the valid signature closest to the constraints (for fixes)
};

template <static_op Op, pin_spec Pin>
constexpr std::size_t allowed_count() {
  std::size_t n = 0;
  for (const static_signature& s : signatures_v<Op>) n += matches(Pin, s) ? 1 : 0;
  return n;
}

template <static_op Op, pin_spec Pin>
constexpr auto allowed_indices() {
  std::array<int, allowed_count<Op, Pin>()> r{};
  std::size_t k = 0;
  for (std::size_t i = 0; i < signatures_v<Op>.size(); ++i)
    if (matches(Pin, signatures_v<Op>[i])) r[k++] = int(i);
  return r;
}

constexpr int closeness(const pin_spec& p, const static_signature& s) {
  int score = 0;
  auto cmp = [&](const nd_sbp& want, const nd_sbp& got) {
    for (int a = 0; a < want.size() && a < got.size(); ++a)
      score += want[a] == got[a] ? 16 : got[a].is_broadcast() ? 1 : 0;  // ties: prefer B
  };
  for (int t = 0; t < p.n && t < s.n_inputs + s.n_params; ++t) cmp(at(p.tensors, t), s.tensor(t));
  for (int j = 0; j < s.n_inputs; ++j)
    if (at(p.boxed, j)) cmp(at(p.box, j), at(s.inputs, j));
  return score;
}

template <static_op Op, pin_spec Pin>
constexpr allowed_summary summarize() {
  allowed_summary r;
  const auto& all = signatures_v<Op>;
  r.total = int(all.size());
  int best = -1;
  for (const static_signature& s : all) {
    if (int c = closeness(Pin, s); c > best) { best = c; r.nearest = s; }
    if (!matches(Pin, s)) continue;
    if (r.count++ == 0) {
      r.out_fixed = true;
      r.out = s.output;
      for (int j = 0; j < s.n_inputs; ++j) { at(r.in_fixed, j) = true; at(r.in, j) = at(s.inputs, j); }
    } else {
      r.out_fixed = r.out_fixed && r.out == s.output;
      for (int j = 0; j < s.n_inputs; ++j) at(r.in_fixed, j) = at(r.in_fixed, j) && at(r.in, j) == at(s.inputs, j);
    }
  }
  return r;
}

template <static_op Op, pin_spec Pin>
inline constexpr allowed_summary summary_v = summarize<Op, Pin>();

enum class model_error_kind : std::uint8_t { none, pin, shapes, boxing };

struct model_error {
  model_error_kind kind = model_error_kind::none;
  text a{}, b{}, c{}, d{}, e{};
};

/// A boxing between pinned neighbours, written as box<...> in the model.
struct boxing_record {
  text producer{}, consumer{};
  int producer_op = -1, consumer_op = -1, input = 0;
  layout from{}, to{};
  tensor_shape shape{};
};

template <std::size_t N>
struct model_check {
  model_error error{};
  std::array<boxing_record, 3 * N + 1> boxings{};
  int n_boxings = 0;
};

/// "box<\"[S(0),B]\"> (all-reduce axis 1)": the step to write and what it runs on each axis.
constexpr std::string boxing_fix(const nd_sbp& from, const nd_sbp& to) {
  std::string r = "box<\"" + to_string(to) + "\">";
  std::string runs;
  for (int a = 0; a < from.size(); ++a)
    if (!(from[a] == to[a])) {
      if (!runs.empty()) runs += ", ";
      runs += std::string(to_string(classify(from[a], to[a]))) + " axis " + itos(a);
    }
  return r + " (" + runs + ")";
}

constexpr std::string pinned_text(const static_op& op, const pin_spec& p) {
  const op_node n = to_op_node(op);
  const tensor_names nm = names_of(n);
  std::string r;
  for (int t = 0; t < p.n; ++t) {
    if (!r.empty()) r += " ";
    const bool in = t < op.n_inputs;
    if (in ? t < std::ssize(nm.inputs) : std::size_t(t - op.n_inputs) < nm.params.size())
      r += std::string(in ? at(nm.inputs, t) : at(nm.params, t - op.n_inputs));
    r += to_string(at(p.tensors, t));
  }
  for (int j = 0; j < 3; ++j)
    if (at(p.boxed, j)) r += (r.empty() ? "" : " ") + std::string("box") + to_string(at(p.box, j));
  return r;
}

constexpr std::string pin_fix(const pin_spec& p, const static_signature& s) {
  std::string r = "pin<";
  const int n = p.n > 0 ? p.n : s.n_inputs;
  for (int t = 0; t < n && t < s.n_inputs + s.n_params; ++t) r += (t ? ",\"" : "\"") + to_string(s.tensor(t)) + "\"";
  return r + ">";
}

template <std::size_t N>
constexpr model_check<N> check_model(const std::array<layer_record, N>& rec, const std::array<allowed_summary, N>& sum,
                                     const mesh_shape& mesh) {
  model_check<N> r;
  for (std::size_t i = 0; i < N; ++i) {
    if (sum[i].count > 0) continue;
    const layer_record& l = rec[i];
    if (sum[i].total == 0 || !l.pin.constrains()) {
      r.error = {model_error_kind::shapes, l.name, text(std::string_view(to_string(l.op.inputs[0]) + "@" + to_string(mesh))),
                 text("sizes divisible by the mesh axes")};
    } else {
      r.error = {model_error_kind::pin, l.name, text(std::string_view(pinned_text(l.op, l.pin))),
                 text(std::string_view(pin_fix(l.pin, sum[i].nearest)))};
    }
    return r;
  }
  for (std::size_t i = 0; i < N; ++i) {
    const layer_record& l = rec[i];
    for (int j = 0; j < l.op.n_inputs; ++j) {
      const int p = at(l.from, j);
      if (p < 0 || !at(sum, p).out_fixed || !sum[i].in_fixed[std::size_t(j)]) continue;
      const nd_sbp from = at(sum, p).out, to = sum[i].in[std::size_t(j)];
      if (from == to) continue;
      if (!at(l.pin.boxed, j)) {
        r.error = {model_error_kind::boxing, at(rec, p).name, l.name,
                   text(std::string_view(to_string(layout{from, mesh}))), text(std::string_view(to_string(layout{to, mesh}))),
                   text(std::string_view(boxing_fix(from, to)))};
        return r;
      }
      at(r.boxings, r.n_boxings++) = {at(rec, p).name, l.name, p, int(i), j, layout{from, mesh},
                                               layout{to, mesh}, at(l.op.inputs, j)};
    }
  }
  return r;
}

template <model_error E>
struct diagnose {};
template <model_error E>
  requires(E.kind == model_error_kind::pin)
struct diagnose<E> : pinned_layouts_match_no_signature<E.a, E.b, E.c> {};
template <model_error E>
  requires(E.kind == model_error_kind::shapes)
struct diagnose<E> : layer_has_no_signature<E.a, E.b, E.c> {};
template <model_error E>
  requires(E.kind == model_error_kind::boxing)
struct diagnose<E> : pinned_layouts_need_boxing<E.a, E.b, E.c, E.d, E.e> {};

/// 0, 1, ..., N-1 as compile-time constants (boost::hana::size_c<I>): the positions of a typed
/// model's ops, for the Hana algorithms that build a value over every op and whose body needs
/// the position as a template argument (allowed_v<layers[i].op, layers[i].pin>). Dispatching a
/// run-time index to its compile-time case is a fold over a std::index_sequence instead
/// (typed_model::visit).
template <std::size_t N>
inline constexpr auto indices_c = boost::hana::make_range(boost::hana::size_c<0>, boost::hana::size_c<N>);

template <class M>
struct is_static_mesh : std::false_type {};
template <int... E>
struct is_static_mesh<static_mesh<E...>> : std::true_type {};

}  // namespace detail

/// The signature indices (into signatures(op, mesh)) a layer's constraints allow.
template <static_op Op, detail::pin_spec Pin>
inline constexpr auto allowed_v = detail::allowed_indices<Op, Pin>();

template <class T, class Mesh, class InputShape, class... Layers>
class typed_model {
  static_assert(detail::is_static_mesh<Mesh>::value, "autoddl: typed_model's mesh is a static_mesh<...>, e.g. static_mesh<2, 4>");
  static_assert(ShapeType<InputShape> && InputShape::value.is_static(),
                "autoddl: typed_model's input shape is a fully static static_shape<...>");

 public:
  using value_type = T;
  static constexpr mesh_shape mesh = Mesh::value;
  static constexpr tensor_shape input_shape = InputShape::value;
  /// Number of ops (layers emit one or more: self_attention five, gqa_attention seven, swiglu
  /// five, residual its inner ops + add).
  static constexpr std::size_t size = std::size_t((Layers::ops + ... + 0));

  /// Every op of the model, in topological order.
  static constexpr std::array<detail::layer_record, size> layers = [] {
    detail::typed_builder<size> b;
    b.mesh = mesh;
    b.input = input_shape;
    detail::emit_seq<Layers...>(b, -1);
    return b.r;
  }();

 private:
  static constexpr auto op_indices = detail::indices_c<size>;

  static constexpr detail::model_check<size> check_ = [] {
    auto sums = boost::hana::unpack(op_indices, [](auto... i) {
      return std::array<detail::allowed_summary, size>{detail::summary_v<layers[i].op, layers[i].pin>...};
    });
    return detail::check_model(layers, sums, mesh);
  }();
  static_assert(sizeof(detail::diagnose<check_.error>) > 0);  // instantiates the diagnostic, if any

 public:
  /// Whether the model type-checks (always true in a program that compiles).
  static constexpr bool valid = check_.error.kind == detail::model_error_kind::none;

  /// Candidate signatures of op I: every valid one, and the indices its pins allow.
  template <std::size_t I>
  static constexpr const auto& candidates = signatures_v<layers[I].op>;
  template <std::size_t I>
  static constexpr const auto& allowed_candidates = allowed_v<layers[I].op, layers[I].pin>;

  /// The boxings between pinned neighbours (each written as box<...> in the model).
  static constexpr auto boxings = [] {
    std::array<detail::boxing_record, std::size_t(check_.n_boxings)> r{};
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = check_.boxings[i];
    return r;
  }();

  /// Signatures instantiated for the search: the sum over ops of their allowed candidates.
  static constexpr std::size_t instantiated_signatures =
      boost::hana::fold(op_indices, std::size_t(0), [](std::size_t n, auto i) {
        return n + allowed_v<layers[i].op, layers[i].pin>.size();
      });

  /// Whether every op has exactly one allowed signature (the model is then priced statically).
  static constexpr bool fully_pinned = boost::hana::all_of(op_indices, [](auto i) {
    return boost::hana::bool_c<allowed_v<layers[i].op, layers[i].pin>.size() == 1>;
  });

  /// The allowed signature indices of every op: plan_options::allowed.
  static std::vector<std::vector<int>> allowed() {
    return boost::hana::unpack(op_indices, [](auto... i) {
      return std::vector<std::vector<int>>{
          std::vector<int>(allowed_v<layers[i].op, layers[i].pin>.begin(), allowed_v<layers[i].op, layers[i].pin>.end())...};
    });
  }

  /// Calls f(signature_constant<op I, index>{}) for the allowed signature `index` of op I.
  /// @throws layout_error when op I does not allow `index`.
  template <std::size_t I, class F>
  static constexpr void visit(int index, F&& f) {
    constexpr static_op op = layers[I].op;
    constexpr const auto& allow = allowed_v<op, layers[I].pin>;
    // A fold expression, as every dispatch of a run-time index here: it runs once per (op,
    // allowed signature), thousands of cases in a real model, and hana::for_each made the -O2
    // compile of benchmarks/typed_gpt_compile.cpp 2.5x slower, hana::unpack 6%
    // (docs/reference/models.md).
    const bool hit = [&]<std::size_t... J>(std::index_sequence<J...>) {
      return ((index == allow[J] ? (f(signature_constant<op, allow[J]>{}), true) : false) || ...);
    }(std::make_index_sequence<allow.size()>{});
    if (!hit)
      detail::fail<layout_error>("op '" + std::string(layers[I].name.view()) + "' does not allow signature " +
                                 detail::itos(index) + "; pick one of its allowed candidates");
  }
  /// visit for an op known at run time: one switch over the ops, then visit<I>.
  template <class F>
  static constexpr void visit(int op, int index, F&& f) {
    const bool hit = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return ((op == int(I) ? (visit<I>(index, f), true) : false) || ...);
    }(std::make_index_sequence<size>{});
    if (!hit) detail::fail<layout_error>("op " + detail::itos(op) + " is not an op of the typed model");
  }

  /// The runtime graph: one op per record, parameters named after their op (".W", ".b",
  /// ".gamma", ".beta") with the roles of their slots, repeat<> copies marked as blocks.
  /// @throws layout_error without a loss.
  static graph to_graph(std::string name = "typed") {
    graph g;
    g.name = std::move(name);
    g.inputs.push_back(input_shape);
    if (size == 0 || layers[size - 1].op.kind != op_kind::cross_entropy)
      detail::fail<layout_error>("typed model '" + g.name +
                                 "' ends without a loss; end it with layers::cross_entropy<> to plan it");
    g.inputs.push_back(layers[size - 1].op.inputs[1]);
    for (std::size_t i = 0; i < size; ++i) {
      const detail::layer_record& l = layers[i];
      op_node n = to_op_node(l.op, l.name.view());
      static constexpr const char* weight_names[] = {".W", ".b"};
      static constexpr const char* norm_names[] = {".gamma", ".beta"};
      for (int p = 0; p < l.op.n_params; ++p) {
        const bool norm = l.op.kind == op_kind::layernorm || l.op.kind == op_kind::rmsnorm;
        const char* suffix = norm ? norm_names[p] : weight_names[p];
        g.params.push_back({n.name + suffix, at(l.op.params, p)});
        n.param_ids.push_back(int(g.params.size()) - 1);
      }
      std::vector<tensor_ref> ins;
      for (int j = 0; j < l.op.n_inputs; ++j) {
        const int f = at(l.from, j);
        ins.push_back(f >= 0 ? tensor_ref{f, 0} : tensor_ref{-1, f == -2 ? 1 : 0});
      }
      assign_param_roles(g, n);
      g.ops.push_back(std::move(n));
      g.op_inputs.push_back(std::move(ins));
      g.block.push_back(l.block);
      g.block_pos.push_back(l.block_pos);
    }
    g.loss_op = int(size) - 1;
    return g;
  }
};

}  // namespace autoddl
