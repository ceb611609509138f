#pragma once
// Appends ops to a graph, filling shapes by inference (infer_outputs) and block marks.
#include <string>
#include <utility>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"

namespace autoddl::detail {

/// The most elements one tensor of a built model, and all its parameters together, may hold:
/// element counts stay exact in a double and their bytes fit in std::int64_t.
inline constexpr std::int64_t max_model_elements = std::int64_t(1) << 53;

/// The elements of s, or -1 when they exceed max_model_elements (checked before each product,
/// so sizes from a hostile spec never overflow).
inline std::int64_t bounded_elements(const tensor_shape& s) {
  std::int64_t r = 1;
  for (std::int64_t d : s) {
    if (d > 0 && r > max_model_elements / d) return -1;
    r *= d;
  }
  return r;
}

class graph_builder {
 public:
  explicit graph_builder(std::string name) { g_.name = std::move(name); }

  tensor_ref input(tensor_shape s) {
    check_size("input " + itos(std::int64_t(g_.inputs.size())), s);
    g_.inputs.push_back(s);
    return {-1, int(g_.inputs.size()) - 1};
  }
  int param(std::string name, tensor_shape s) {
    param_elements_ += check_size("parameter '" + name + "'", s);
    if (param_elements_ > max_model_elements)
      fail<error>("model '" + g_.name + "': its parameters hold more than " + itos(max_model_elements) +
                  " elements in all; choose smaller sizes");
    g_.params.push_back({std::move(name), s});
    return int(g_.params.size()) - 1;
  }
  /// Opens repeated block b: following ops get positions 0, 1, ... until end_block().
  void begin_block(int b) { block_ = b; pos_ = 0; }
  void end_block() { block_ = -1; }

  tensor_ref op(std::string name, op_kind kind, op_attrs attrs, std::vector<tensor_ref> ins, std::vector<int> params = {}) {
    op_node n{std::move(name), kind, attrs, {}, {}, params, {}};
    for (tensor_ref t : ins) n.inputs.push_back(shape_of(g_, t));
    for (int id : params) n.params.push_back(at(g_.params, id).shape);
    n.outputs = infer_outputs(n);
    for (const tensor_shape& o : n.outputs) check_size("the output of op '" + n.name + "'", o);
    assign_param_roles(g_, n);
    g_.ops.push_back(std::move(n));
    g_.op_inputs.push_back(std::move(ins));
    g_.block.push_back(block_);
    g_.block_pos.push_back(block_ < 0 ? -1 : pos_++);
    return {int(g_.ops.size()) - 1, 0};
  }
  /// A linear layer "name" with parameters "name.W" [in, out] and "name.b" [out].
  tensor_ref linear(const std::string& name, tensor_ref x, std::int64_t out, bool bias = true) {
    const tensor_shape& s = shape_of(g_, x);
    std::vector<int> p{param(name + ".W", {s[s.rank() - 1], out})};
    if (bias) p.push_back(param(name + ".b", {out}));
    op_attrs a;
    a.bias = bias;
    return op(name, op_kind::linear, a, {x}, p);
  }
  tensor_ref layernorm(const std::string& name, tensor_ref x) {
    const tensor_shape& s = shape_of(g_, x);
    std::int64_t h = s[s.rank() - 1];
    return op(name, op_kind::layernorm, {}, {x}, {param(name + ".gamma", {h}), param(name + ".beta", {h})});
  }
  tensor_ref unary(const std::string& name, op_kind k, tensor_ref x, double p = 0.0) {
    op_attrs a;
    a.dropout = p;
    return op(name, k, a, {x});
  }
  graph finish(tensor_ref loss) {
    g_.loss_op = loss.op;
    return std::move(g_);
  }
  const graph& current() const { return g_; }

 private:
  /// The elements of a tensor of the model; error when there are too many to describe.
  std::int64_t check_size(const std::string& what, const tensor_shape& s) const {
    const std::int64_t n = bounded_elements(s);
    if (n < 0)
      fail<error>("model '" + g_.name + "': " + what + " of shape " + to_string(s) + " holds more than " +
                  itos(max_model_elements) + " elements; choose smaller sizes");
    return n;
  }

  graph g_;
  int block_ = -1, pos_ = 0;
  std::int64_t param_elements_ = 0;
};

}  // namespace autoddl::detail
