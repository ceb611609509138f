#pragma once
// Small instances of every op kind, shaped so that every dim a 2x2 mesh may split divides by 4.
#include <string>
#include <vector>

#include "autoddl/ops.hpp"

namespace sim {
using namespace autoddl;

inline op_node make_op(std::string name, op_kind k, std::vector<tensor_shape> in, std::vector<tensor_shape> pr = {},
                       op_attrs a = {}) {
  op_node n{std::move(name), k, a, std::move(in), std::move(pr), {}, {}};
  for (std::size_t i = 0; i < n.params.size(); ++i) n.param_ids.push_back(int(i));
  n.outputs = infer_outputs(n);
  return n;
}

inline std::vector<op_node> op_cases() {
  std::vector<op_node> r;
  op_attrs a;
  r.push_back(make_op("linear", op_kind::linear, {{4, 8}}, {{8, 4}, {4}}));
  r.push_back(make_op("linear3d", op_kind::linear, {{4, 4, 8}}, {{8, 4}, {4}}));
  a = {};
  a.transpose_w = true;
  a.bias = false;
  r.push_back(make_op("linear.tied_head", op_kind::linear, {{4, 8}}, {{12, 8}}, a));
  a.bias = true;
  r.push_back(make_op("linear.transposed_bias", op_kind::linear, {{4, 8}}, {{4, 8}, {4}}, a));
  r.push_back(make_op("matmul", op_kind::matmul, {{4, 8}, {8, 4}}));
  r.push_back(make_op("batched_matmul", op_kind::batched_matmul, {{4, 4, 8}, {4, 8, 4}}));
  a = {};
  a.kernel = 3;
  a.padding = 1;
  r.push_back(make_op("conv3x3", op_kind::conv2d, {{4, 4, 4, 4}}, {{4, 4, 3, 3}, {4}}, a));
  a = {};
  r.push_back(make_op("conv1x1", op_kind::conv2d, {{4, 4, 4, 4}}, {{4, 4, 1, 1}, {4}}, a));
  a = {};
  a.kernel = 3;
  a.stride = 2;
  a.bias = false;
  r.push_back(make_op("conv3x3.s2.nobias", op_kind::conv2d, {{4, 4, 5, 5}}, {{4, 4, 3, 3}}, a));
  a = {};
  a.kernel = 2;
  a.stride = 2;
  r.push_back(make_op("max_pool2", op_kind::max_pool, {{4, 4, 4, 4}}, {}, a));
  a = {};
  a.kernel = 3;
  a.stride = 2;
  a.padding = 1;
  r.push_back(make_op("max_pool3.pad", op_kind::max_pool, {{4, 4, 5, 5}}, {}, a));
  r.push_back(make_op("max_pool1", op_kind::max_pool, {{4, 4, 4, 4}}));
  r.push_back(make_op("relu", op_kind::relu, {{4, 8}}));
  r.push_back(make_op("gelu", op_kind::gelu, {{4, 4, 8}}));
  a = {};
  a.dropout = 0.3;
  r.push_back(make_op("dropout", op_kind::dropout, {{4, 4, 8}}, {}, a));
  r.push_back(make_op("layernorm", op_kind::layernorm, {{4, 4, 8}}, {{8}, {8}}));
  r.push_back(make_op("softmax", op_kind::softmax, {{4, 4, 8}}));
  a = {};
  a.heads = 4;
  a.causal = true;
  a.dropout = 0.2;
  r.push_back(make_op("attention.causal.dropout", op_kind::attention, {{4, 8, 8}, {4, 8, 8}, {4, 8, 8}}, {}, a));
  a.unfused_attention = true;  // the kernel that keeps the probabilities, where a model asks for it
  r.push_back(make_op("attention.causal.dropout.unfused", op_kind::attention, {{4, 8, 8}, {4, 8, 8}, {4, 8, 8}}, {}, a));
  a = {};
  a.heads = 4;
  r.push_back(make_op("attention.cross", op_kind::attention, {{4, 4, 8}, {4, 8, 8}, {4, 8, 8}}, {}, a));
  a = {};
  a.positions = true;
  r.push_back(make_op("embedding.positions", op_kind::embedding, {{4, 8}}, {{16, 8}, {8, 8}}, a));
  r.push_back(make_op("embedding", op_kind::embedding, {{4, 4}}, {{16, 8}}));
  r.push_back(make_op("cross_entropy", op_kind::cross_entropy, {{4, 4, 16}, {4, 4}}));
  r.push_back(make_op("cross_entropy2d", op_kind::cross_entropy, {{8, 16}, {8}}));
  r.push_back(make_op("add", op_kind::add, {{4, 8}, {4, 8}}));
  a = {};
  a.target = tensor_shape{4, 16};
  r.push_back(make_op("reshape", op_kind::reshape, {{4, 4, 2, 2}}, {}, a));
  a.target = tensor_shape{16, 8};
  r.push_back(make_op("reshape.merge", op_kind::reshape, {{4, 4, 8}}, {}, a));
  // the LLaMA family's ops: RMSNorm (whole rows, and per head as Qwen3 norms q and k), SiLU,
  // the SwiGLU product (two ops, and fused), rotary embeddings (2 heads of 4: pairs (0,2), (1,3)), grouped-query
  // attention (4 query heads sharing 2 key/value heads)
  a = {};
  a.eps = 1e-6;
  r.push_back(make_op("rmsnorm", op_kind::rmsnorm, {{4, 4, 8}}, {{8}}, a));
  a.heads = 2;
  r.push_back(make_op("rmsnorm.per_head", op_kind::rmsnorm, {{4, 4, 8}}, {{4}}, a));
  r.push_back(make_op("silu", op_kind::silu, {{4, 4, 8}}));
  r.push_back(make_op("mul", op_kind::mul, {{4, 8}, {4, 8}}));
  r.push_back(make_op("swiglu", op_kind::swiglu, {{4, 4, 8}, {4, 4, 8}}));
  a = {};
  a.heads = 2;
  a.rope_theta = 500000;
  r.push_back(make_op("rotary", op_kind::rotary, {{4, 8, 8}}, {}, a));
  a = {};
  a.heads = 4;
  a.kv_heads = 2;
  a.causal = true;
  r.push_back(make_op("attention.grouped.causal", op_kind::attention, {{4, 8, 16}, {4, 8, 8}, {4, 8, 8}}, {}, a));
  // mixture of experts (4 experts): top-2 gates with and without renormalisation, the balancing
  // loss, and dispatch, experts and combine at 3 slots of 4 tokens (they route by the top 4 of
  // the random gates, every token everywhere, so the fourth token of each sequence is dropped at
  // each expert)
  a = {};
  a.topk = 2;
  a.renormalize = true;
  a.aux_coef = 0.5;
  r.push_back(make_op("router.renormalized", op_kind::router, {{4, 4, 4}}, {}, a));
  r.push_back(make_op("load_balance", op_kind::load_balance, {{4, 4, 4}}, {}, a));
  a.renormalize = false;
  r.push_back(make_op("router", op_kind::router, {{4, 4, 4}}, {}, a));
  a = {};
  a.topk = 4;
  a.capacity = 3;
  r.push_back(make_op("dispatch", op_kind::dispatch, {{4, 4, 8}, {4, 4, 4}}, {}, a));
  r.push_back(make_op("experts", op_kind::experts, {{4, 4, 3, 8}}, {{4, 8, 6}, {4, 8, 6}, {4, 6, 8}}));
  a.capacity = 0;
  r.push_back(make_op("combine", op_kind::combine, {{4, 4, 3, 8}, {4, 4, 4}}, {}, a));
  // dropless: each token's top 2 of 4 experts by its random gates, the routed rows only
  a = {};
  a.topk = 2;
  r.push_back(make_op("routed_experts", op_kind::routed_experts, {{4, 4, 8}, {4, 4, 4}}, {{4, 8, 6}, {4, 8, 6}, {4, 6, 8}}, a));
  // the shared expert's gate: each token's row of X scaled by the sigmoid of its logit
  r.push_back(make_op("sigmoid_gate", op_kind::sigmoid_gate, {{4, 4, 8}, {4, 4, 1}}));
  return r;
}

}  // namespace sim
