#pragma once
// A model as a DAG of ops in topological order, with global shapes only: no tensor storage is
// ever allocated, so GPT-3 175B builds in microseconds.
//   op i's input j comes from op_inputs[i][j]: {op, index} (op == -1: graph input `index`).
// Repeated blocks (transformer layers) are marked so a planner can share one decision across
// them: ops with the same block_pos in different blocks have the same kind, attributes and shapes.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/ops/shapes.hpp"
#include "autoddl/ops/work.hpp"

namespace autoddl {

struct tensor_ref {
  int op = -1;    ///< producing op, or -1 for a graph input
  int index = 0;  ///< output index of the op, or graph input index
  friend bool operator==(const tensor_ref&, const tensor_ref&) = default;
};

/// What a parameter is to the op that uses it: the graph's own account, which decides how
/// training starts it (runtime/data.hpp), whatever the parameter is named.
enum class param_role : std::uint8_t {
  unused,         ///< no op uses it (a model file may list one)
  weight,         ///< a linear or conv2d weight: the inputs of an output element meet it
  embedding,      ///< an embedding's table or its learned positions [rows, hidden]
  expert_weight,  ///< the experts' stacked [E, in, out] (W_gate, W_up [E, h, F]; W_down [E, F, h])
  bias,           ///< a linear or conv2d bias
  norm_scale,     ///< a layernorm's or rmsnorm's gamma
  norm_shift,     ///< a layernorm's beta
};

/// The role of parameter slot `slot` of an op of kind k (the order of op_node::params, ops/op.hpp).
/// Example: param_role_of(op_kind::layernorm, 1) == param_role::norm_shift.
constexpr param_role param_role_of(op_kind k, std::size_t slot) {
  switch (k) {
    case op_kind::linear:
    case op_kind::conv2d: return slot == 0 ? param_role::weight : param_role::bias;
    case op_kind::layernorm: return slot == 0 ? param_role::norm_scale : param_role::norm_shift;
    case op_kind::rmsnorm: return param_role::norm_scale;
    case op_kind::embedding: return param_role::embedding;
    case op_kind::experts:
    case op_kind::routed_experts: return param_role::expert_weight;
    // kinds that take no parameters (shape inference refuses one): a weight, should one be asked
    case op_kind::matmul:
    case op_kind::batched_matmul:
    case op_kind::max_pool:
    case op_kind::relu:
    case op_kind::gelu:
    case op_kind::dropout:
    case op_kind::softmax:
    case op_kind::attention:
    case op_kind::cross_entropy:
    case op_kind::add:
    case op_kind::reshape:
    case op_kind::silu:
    case op_kind::mul:
    case op_kind::swiglu:
    case op_kind::rotary:
    case op_kind::router:
    case op_kind::load_balance:
    case op_kind::dispatch:
    case op_kind::combine:
    case op_kind::sigmoid_gate: return param_role::weight;
  }
  return param_role::weight;
}

struct param_info {
  std::string name;    ///< e.g. "h3.attn.q.W"
  tensor_shape shape;  ///< as stored
  param_role role = param_role::unused;  ///< from its first user's kind and slot (assign_param_roles)
};

struct graph {
  std::string name;
  std::vector<tensor_shape> inputs;              ///< e.g. tokens [batch, seq], labels [batch, seq]
  std::vector<param_info> params;
  std::vector<op_node> ops;                      ///< topological order
  std::vector<std::vector<tensor_ref>> op_inputs;
  std::vector<int> block;                        ///< per op: repeated-block index or -1
  std::vector<int> block_pos;                    ///< per op: position in its block, -1 outside blocks
  int loss_op = -1;                              ///< the op whose output is the scalar loss
};

/// Gives op n's parameters the roles of their slots in n. A parameter several ops use (GPT's
/// tied `wte`: the embedding's table and the output head's weight) keeps its first user's role:
/// the op that builds the model calls this as it appends each op, in topological order.
inline void assign_param_roles(graph& g, const op_node& n) {
  for (std::size_t slot = 0; slot < n.param_ids.size(); ++slot) {
    param_info& p = at(g.params, n.param_ids[slot]);
    if (p.role == param_role::unused) p.role = param_role_of(n.kind, slot);
  }
}

/// Number of parameter elements; tied parameters (one id used by several ops) count once.
inline std::int64_t param_count(const graph& g) {
  std::int64_t n = 0;
  for (const param_info& p : g.params) n += p.shape.elements();
  return n;
}

/// Parameters one token passes through: param_count less, for each experts or routed_experts op
/// (ops/moe.hpp), the (E - k) / E of its weights a token's top-k routing leaves out (k: the topk
/// of the router whose gates its dispatch, or itself, reads). A dense model's active count is its param_count.
inline std::int64_t active_param_count(const graph& g) {
  std::int64_t n = param_count(g);
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const op_node& x = g.ops[i];
    if (x.kind != op_kind::experts && x.kind != op_kind::routed_experts) continue;
    const tensor_ref d = g.op_inputs[i][0];
    if (x.kind == op_kind::experts && (d.op < 0 || g.ops[std::size_t(d.op)].kind != op_kind::dispatch)) continue;
    const tensor_ref r = x.kind == op_kind::experts ? g.op_inputs[std::size_t(d.op)][1] : g.op_inputs[i][1];
    if (r.op < 0 || g.ops[std::size_t(r.op)].kind != op_kind::router) continue;
    const std::int64_t e = x.params[0][0], k = g.ops[std::size_t(r.op)].attrs.topk;
    std::int64_t weights = 0;
    for (const tensor_shape& p : x.params) weights += p.elements();
    n -= weights / e * (e - k);
  }
  return n;
}

/// Tokens one step trains: the batch x the sequence of each of `microbatches` micro-batches, for a
/// model whose first op embeds token ids [batch, seq]; 0 for any other model.
inline double tokens_per_step(const graph& g, int microbatches) {
  if (g.inputs.empty() || g.ops.empty() || g.ops.front().kind != op_kind::embedding || g.inputs[0].rank() != 2) return 0;
  return double(g.inputs[0][0]) * double(g.inputs[0][1]) * microbatches;
}

/// Model FLOPs per token of a training step as published MFU figures count them (PaLM,
/// Chowdhery et al. 2022, appendix B; torchtitan's throughput logs): 6 x the active parameters
/// a token passes through other than the input embedding's (a table only embedding ops use; a
/// tied output head's weight counts), plus for each attention core 12 x its query width (heads x
/// head size) x its keys: both products of scores and values, forward and backward, with no
/// discount for the causal mask and nothing for recomputation. 0 for a model without tokens.
inline double model_flops_per_token(const graph& g) {
  if (tokens_per_step(g, 1) == 0) return 0;
  std::vector<char> embedding_only(g.params.size(), 0), other(g.params.size(), 0);
  for (const op_node& op : g.ops)
    for (int p : op.param_ids) (op.kind == op_kind::embedding ? at(embedding_only, p) : at(other, p)) = 1;
  double n = double(active_param_count(g));
  for (std::size_t p = 0; p < g.params.size(); ++p)
    if (embedding_only[p] && !other[p]) n -= double(g.params[p].shape.elements());
  double attention = 0;
  for (std::size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].kind == op_kind::attention) {
      const tensor_ref q = at(at(g.op_inputs, i), 0), k = at(at(g.op_inputs, i), 1);
      const tensor_shape &qs = q.op < 0 ? at(g.inputs, q.index) : at(at(g.ops, q.op).outputs, q.index),
                         &ks = k.op < 0 ? at(g.inputs, k.index) : at(at(g.ops, k.op).outputs, k.index);
      attention += 12.0 * double(qs[2]) * double(ks[1]);
    }
  return 6 * n + attention;
}

/// Checks that `microbatches` micro-batches split a step's batch of `batch` rows evenly; throws
/// error in one sentence otherwise (autoddl-plan and autoddl-train say it for --microbatches).
inline void check_microbatches(int microbatches, std::int64_t batch) {
  if (microbatches < 1 || batch % microbatches != 0)
    detail::fail<error>("--microbatches " + detail::itos(microbatches) + " does not divide the batch of " +
                        detail::itos(batch) + "; choose a divisor of the batch (1 trains the whole batch at once)");
}

/// Global forward FLOPs of one training step's forward pass (conventions: autoddl/ops/work.hpp).
inline double forward_flops(const graph& g) {
  double f = 0;
  for (const op_node& op : g.ops) f += forward_flops(op);
  return f;
}
inline double backward_flops(const graph& g) {
  double f = 0;
  for (const op_node& op : g.ops) f += backward_flops(op);
  return f;
}

/// The shape of a tensor of the graph. @pre the reference is valid (see validate).
inline const tensor_shape& shape_of(const graph& g, tensor_ref t) {
  return t.op < 0 ? at(g.inputs, t.index) : at(at(g.ops, t.op).outputs, t.index);
}

namespace detail {
/// A dispatch, combine or routed_experts routes by the top attrs.topk of its gates: where a router makes them,
/// its topk. @pre op i's input edges are valid.
inline void check_router_topk(const graph& g, std::size_t i, const std::string& who) {
  const op_node& op = g.ops[i];
  const bool routes = op.kind == op_kind::dispatch || op.kind == op_kind::combine || op.kind == op_kind::routed_experts;
  if (!routes || op.inputs.size() < 2) return;
  const tensor_ref gates = g.op_inputs[i][1];
  if (gates.op < 0 || at(g.ops, gates.op).kind != op_kind::router) return;
  const op_node& r = at(g.ops, gates.op);
  if (r.attrs.topk != op.attrs.topk)
    fail<layout_error>("graph '" + g.name + "': " + who + " routes by topk=" + itos(op.attrs.topk) + " but its router '" +
                       r.name + "' picks topk=" + itos(r.attrs.topk) + "; give it the router's topk");
}
}  // namespace detail

/// Checks that shapes agree along every edge, parameters match their ids, every op's outputs
/// are what its operands imply, dispatch and combine route by their router's topk, blocks repeat,
/// and the loss is a scalar. Throws layout_error
/// naming the op, the edge and the shapes otherwise.
inline void validate(const graph& g) {
  auto fail = [&](const std::string& what) { detail::fail<layout_error>("graph '" + g.name + "': " + what); };
  const std::size_t n = g.ops.size();
  if (g.op_inputs.size() != n || g.block.size() != n || g.block_pos.size() != n)
    fail("op_inputs, block and block_pos need one entry per op (" + detail::itos(std::int64_t(n)) + ")");
  for (std::size_t i = 0; i < n; ++i) {
    const op_node& op = g.ops[i];
    const std::string who = "op " + detail::itos(std::int64_t(i)) + " '" + op.name + "'";
    if (g.op_inputs[i].size() != op.inputs.size())
      fail(who + " has " + detail::itos(std::int64_t(op.inputs.size())) + " inputs but " +
           detail::itos(std::int64_t(g.op_inputs[i].size())) + " edges; give one edge per input");
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      tensor_ref t = g.op_inputs[i][j];
      bool ok = t.op < 0 ? (t.op == -1 && t.index >= 0 && t.index < std::ssize(g.inputs))
                         : (std::size_t(t.op) < i && t.index >= 0 &&
                            t.index < std::ssize(at(g.ops, t.op).outputs));
      if (!ok)
        fail(who + " input " + detail::itos(std::int64_t(j)) + " refers to {" + detail::itos(t.op) + "," +
             detail::itos(t.index) + "}, which is not a graph input or an output of an earlier op");
      if (!(shape_of(g, t) == op.inputs[j]))
        fail(who + " input " + detail::itos(std::int64_t(j)) + " expects " + to_string(op.inputs[j]) + " but its edge carries " +
             to_string(shape_of(g, t)));
    }
    if (op.param_ids.size() != op.params.size()) fail(who + " needs one param id per parameter");
    for (std::size_t j = 0; j < op.params.size(); ++j) {
      int id = op.param_ids[j];
      if (id < 0 || id >= std::ssize(g.params)) fail(who + " refers to parameter id " + detail::itos(id) + ", which does not exist");
      if (!(at(g.params, id).shape == op.params[j]))
        fail(who + " parameter " + detail::itos(std::int64_t(j)) + " is " + to_string(op.params[j]) + " but '" +
             at(g.params, id).name + "' is " + to_string(at(g.params, id).shape));
    }
    check_shapes(op);
    detail::check_router_topk(g, i, who);
    if ((g.block[i] < 0) != (g.block_pos[i] < 0)) fail(who + " has a block without a position or the reverse");
  }
  std::map<int, std::size_t> first_at;  // block_pos -> first op holding it
  for (std::size_t i = 0; i < n; ++i) {
    if (g.block[i] < 0) continue;
    auto [it, fresh] = first_at.emplace(g.block_pos[i], i);
    if (fresh) continue;
    const op_node& a = g.ops[it->second];
    const op_node& b = g.ops[i];
    if (a.kind != b.kind || a.inputs != b.inputs || a.params != b.params || a.outputs != b.outputs)
      fail("ops '" + a.name + "' and '" + b.name + "' share block position " + detail::itos(g.block_pos[i]) +
           " but differ in kind or shapes; mark only identical repeated blocks");
  }
  if (g.loss_op < 0 || std::size_t(g.loss_op) >= n || at(g.ops, g.loss_op).outputs[0].rank() != 0)
    fail("loss_op must name an op whose output is a scalar []");
}

}  // namespace autoddl
