#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/ops.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace {
op_node make(op_kind k, std::vector<tensor_shape> in, std::vector<tensor_shape> pr = {}, op_attrs a = {}) {
  op_node n{"t", k, a, std::move(in), std::move(pr), {}, {}};
  for (std::size_t i = 0; i < n.params.size(); ++i) n.param_ids.push_back(int(i));
  n.outputs = infer_outputs(n);
  return n;
}
std::vector<std::string> listing(const op_node& op, const mesh_shape& m) {
  std::vector<std::string> r;
  for (const signature& s : signatures(op, m)) r.push_back(to_string(op, s));
  return r;
}
bool listed(const op_node& op, const mesh_shape& m, const std::string& text) {
  auto l = listing(op, m);
  return std::find(l.begin(), l.end(), text) != l.end();
}
bool any_partial_input(const signature& s) {
  for (const nd_sbp& v : s.inputs) if (v.any_partial()) return true;
  return false;
}
}  // namespace

TEST_CASE("matmul on a 1-D mesh has exactly the six signatures of the OneFlow table", "[ops][matmul]") {
  op_node mm = make(op_kind::matmul, {{8, 16}, {16, 4}});
  CHECK(listing(mm, mesh_shape{2}) == std::vector<std::string>{
                                          "X[S(0)] W[B] -> Y[S(0)]",
                                          "X[S(1)] W[S(0)] -> Y[P]",
                                          "X[B] W[S(1)] -> Y[S(1)]",
                                          "X[B] W[B] -> Y[B]",
                                          "X[B] W[P] -> Y[P]",
                                          "X[P] W[B] -> Y[P]",
                                      });
}

TEST_CASE("matmul on a 2x2 mesh combines the per-axis rules, less what does not divide", "[ops][matmul]") {
  CHECK(signatures(make(op_kind::matmul, {{8, 16}, {16, 4}}), mesh_shape{2, 2}).size() == 36);
  // k = 2 cannot be split by both axes: [S(1),S(1)] x [S(0),S(0)] drops out
  op_node thin = make(op_kind::matmul, {{8, 2}, {2, 4}});
  CHECK(signatures(thin, mesh_shape{2, 2}).size() == 35);
  CHECK_FALSE(listed(thin, mesh_shape{2, 2}, "X[S(1),S(1)] W[S(0),S(0)] -> Y[P,P]"));
  CHECK(listed(make(op_kind::matmul, {{8, 16}, {16, 4}}), mesh_shape{2, 2}, "X[S(1),S(1)] W[S(0),S(0)] -> Y[P,P]"));
}

TEST_CASE("a linear layer lists the Megatron layouts with the bias following the output", "[ops][linear]") {
  op_node lin = make(op_kind::linear, {{64, 32}}, {{32, 16}, {16}});
  CHECK(listed(lin, mesh_shape{2, 4}, "X[S(0),B] W[B,S(1)] b[B,S(0)] -> Y[S(0),S(1)]"));
  CHECK(listed(lin, mesh_shape{2, 4}, "X[S(0),S(1)] W[B,S(0)] b[B,P] -> Y[S(0),P]"));
  CHECK_FALSE(listed(lin, mesh_shape{2, 4}, "X[S(0),B] W[B,S(1)] b[B,B] -> Y[S(0),S(1)]"));
  CHECK(signatures(lin, mesh_shape{2}).size() == 6);
  op_attrs tied;
  tied.transpose_w = true;
  tied.bias = false;
  op_node head = make(op_kind::linear, {{4, 8, 32}}, {{100, 32}}, tied);  // W [vocab, hidden]
  CHECK(head.outputs[0] == tensor_shape{4, 8, 100});
  CHECK(listed(head, mesh_shape{2}, "X[B] W[S(0)] -> Y[S(2)]"));
  CHECK(listed(head, mesh_shape{2}, "X[S(2)] W[S(1)] -> Y[P]"));
}

TEST_CASE("nonlinear ops never list a P input", "[ops][refusals]") {
  op_attrs att;
  att.heads = 4;
  op_attrs pool;
  pool.kernel = pool.stride = 2;
  op_attrs pos;
  pos.positions = true;
  std::vector<op_node> ops{
      make(op_kind::relu, {{8, 8}}),         make(op_kind::gelu, {{8, 8}}),
      make(op_kind::dropout, {{8, 8}}),      make(op_kind::softmax, {{8, 8}}),
      make(op_kind::layernorm, {{8, 8}}, {{8}, {8}}),
      make(op_kind::max_pool, {{4, 4, 8, 8}}, {}, pool),
      make(op_kind::attention, {{4, 8, 16}, {4, 8, 16}, {4, 8, 16}}, {}, att),
      make(op_kind::embedding, {{4, 8}}, {{32, 16}, {8, 16}}, pos),
      make(op_kind::cross_entropy, {{4, 8, 32}, {4, 8}}),
  };
  for (const op_node& op : ops)
    for (const mesh_shape& m : {mesh_shape{2}, mesh_shape{2, 2}}) {
      INFO(to_string(op.kind) << " on " << to_string(m));
      auto sigs = signatures(op, m);
      CHECK_FALSE(sigs.empty());
      CHECK(std::none_of(sigs.begin(), sigs.end(), any_partial_input));
    }
  op_node relu = make(op_kind::relu, {{8, 8}});
  signature bad{{nd_sbp{P}}, {}, {nd_sbp{P}}};
  CHECK_THROWS_AS(check_signature(relu, bad, mesh_shape{2}), layout_error);
  CHECK_THROWS_WITH(check_signature(relu, bad, mesh_shape{2}), ContainsSubstring("nonlinear ops never take P"));
}

TEST_CASE("row-wise ops never split the reduced last dim", "[ops][refusals]") {
  CHECK(listing(make(op_kind::softmax, {{8, 8}}), mesh_shape{2}) ==
        std::vector<std::string>{"X[S(0)] -> Y[S(0)]", "X[B] -> Y[B]"});
  CHECK(listing(make(op_kind::layernorm, {{8, 8}}, {{8}, {8}}), mesh_shape{2}) ==
        std::vector<std::string>{"X[S(0)] gamma[B] beta[B] -> Y[S(0)]", "X[B] gamma[B] beta[B] -> Y[B]"});
}

TEST_CASE("attention splits hidden only into whole heads", "[ops][attention]") {
  op_attrs a;
  a.heads = 2;
  a.causal = true;
  op_node att = make(op_kind::attention, {{4, 8, 12}, {4, 8, 12}, {4, 8, 12}}, {}, a);
  CHECK(listing(att, mesh_shape{2}) == std::vector<std::string>{"q[S(0)] k[S(0)] v[S(0)] -> Y[S(0)]",
                                                                "q[S(1)] k[B] v[B] -> Y[S(1)]",
                                                                "q[S(2)] k[S(2)] v[S(2)] -> Y[S(2)]",
                                                                "q[B] k[B] v[B] -> Y[B]"});
  // 12 divides by 4, but 2 heads cannot be cut 4 ways
  CHECK_FALSE(listed(att, mesh_shape{4}, "q[S(2)] k[S(2)] v[S(2)] -> Y[S(2)]"));
  signature heads4{{nd_sbp{S(2)}, nd_sbp{S(2)}, nd_sbp{S(2)}}, {}, {nd_sbp{S(2)}}};
  CHECK_THROWS_WITH(check_signature(att, heads4, mesh_shape{4}), ContainsSubstring("cannot split hidden 4 ways"));
}

TEST_CASE("conv2d splits batch and channels, and space only for a 1x1 window", "[ops][conv]") {
  op_attrs k3;
  k3.kernel = 3;
  k3.padding = 1;
  op_node conv = make(op_kind::conv2d, {{4, 8, 16, 16}}, {{8, 8, 3, 3}, {8}}, k3);
  CHECK(conv.outputs[0] == tensor_shape{4, 8, 16, 16});
  CHECK(listed(conv, mesh_shape{2}, "X[S(1)] W[S(1)] b[P] -> Y[P]"));
  CHECK(listed(conv, mesh_shape{2}, "X[B] W[S(0)] b[S(0)] -> Y[S(1)]"));
  CHECK_FALSE(listed(conv, mesh_shape{2}, "X[S(2)] W[B] b[B] -> Y[S(2)]"));
  op_node one = make(op_kind::conv2d, {{4, 8, 16, 16}}, {{8, 8, 1, 1}, {8}});
  CHECK(listed(one, mesh_shape{2}, "X[S(2)] W[B] b[B] -> Y[S(2)]"));
}

TEST_CASE("a split survives a reshape only while it stays leading", "[ops][reshape]") {
  op_attrs flat;
  flat.target = {8, 25088};
  op_node r = make(op_kind::reshape, {{8, 512, 7, 7}}, {}, flat);
  CHECK(listing(r, mesh_shape{2}) == std::vector<std::string>{"X[S(0)] -> Y[S(0)]", "X[S(1)] -> Y[S(1)]",
                                                              "X[B] -> Y[B]", "X[P] -> Y[P]"});
  CHECK(reshape_problem(nd_sbp{S(2)}, {8, 512, 7, 7}, {8, 25088}) ==
        "reshape [8,512,7,7] -> [8,25088] cannot keep [S(2)]: the split of dim 2 on mesh axis 0 does not stay a "
        "leading split of the output; gather that dim (S -> B) before the reshape");
  CHECK(reshape_split_dim(0, {4, 16, 64}, {64, 64}) == 0);
  CHECK(reshape_split_dim(1, {4, 16, 64}, {64, 64}) == -1);
}

TEST_CASE("vocabulary-parallel embedding gives P and hidden-parallel gives S(last)", "[ops][embedding]") {
  op_node emb = make(op_kind::embedding, {{4, 8}}, {{32, 16}});
  CHECK(listed(emb, mesh_shape{2}, "ids[B] W[S(0)] -> Y[P]"));
  CHECK(listed(emb, mesh_shape{2}, "ids[B] W[S(1)] -> Y[S(2)]"));
  CHECK_FALSE(listed(emb, mesh_shape{2}, "ids[P] W[B] -> Y[P]"));
}

TEST_CASE("FLOPs and memory by hand", "[ops][work]") {
  op_node lin = make(op_kind::linear, {{8, 64}}, {{64, 32}, {32}});
  CHECK(forward_flops(lin) == 2.0 * 8 * 64 * 32 + 8 * 32);
  CHECK(backward_flops(lin) == 2 * forward_flops(lin));
  signature col{{nd_sbp{B}}, {nd_sbp{S(1)}, nd_sbp{S(0)}}, {nd_sbp{S(1)}}};
  op_work w = device_work(lin, col, mesh_shape{4}, 4);
  CHECK(w.kind == work_kind::gemm);
  CHECK(w.fwd_flops == forward_flops(lin) / 4);
  CHECK(w.bwd_flops == 2 * w.fwd_flops);
  CHECK(w.activation_bytes == 8 * 64 * 4);                       // X is kept whole
  CHECK(w.fwd_bytes_moved == (8 * 64 + 64 * 8 + 8 + 8 * 8) * 4);  // X, W shard, b shard, Y shard

  op_attrs k3;
  k3.kernel = 3;
  k3.padding = 1;
  op_node conv = make(op_kind::conv2d, {{2, 3, 8, 8}}, {{4, 3, 3, 3}, {4}}, k3);
  CHECK(forward_flops(conv) == 2.0 * (2 * 4 * 8 * 8) * 27 + 2 * 4 * 8 * 8);

  op_attrs a;
  a.heads = 2;
  op_node att = make(op_kind::attention, {{2, 4, 8}, {2, 4, 8}, {2, 4, 8}}, {}, a);
  CHECK(forward_flops(att) == 4.0 * 2 * 4 * 4 * 8 + 5.0 * 2 * 2 * 4 * 4);
  signature heads{{nd_sbp{S(2)}, nd_sbp{S(2)}, nd_sbp{S(2)}}, {}, {nd_sbp{S(2)}}};
  op_work aw = device_work(att, heads, mesh_shape{2}, 2);
  CHECK(aw.fwd_flops == forward_flops(att) / 2);
  // the fused kernel: q, k, v and output shards, and one float log-sum-exp per row of its head
  CHECK(aw.activation_bytes == (3 * 2 * 4 * 4 + 2 * 4 * 4) * 2 + 2 * 1 * 4 * 4);
  op_attrs u = a;
  u.unfused_attention = true;
  const op_node unfused = make(op_kind::attention, {{2, 4, 8}, {2, 4, 8}, {2, 4, 8}}, {}, u);
  CHECK(device_work(unfused, heads, mesh_shape{2}, 2).activation_bytes ==
        (3 * 2 * 4 * 4 + 2 * 1 * 4 * 4) * 2);  // q, k, v shards + one head's probabilities

  op_node relu = make(op_kind::relu, {{8, 8}});
  op_work rw = device_work(relu, {{nd_sbp{S(0)}}, {}, {nd_sbp{S(0)}}}, mesh_shape{2}, 4);
  CHECK(rw.kind == work_kind::elementwise);
  CHECK(rw.fwd_flops == 32);
  CHECK(rw.fwd_bytes_moved == 2 * 32 * 4);
}

TEST_CASE("vocabulary-parallel cross-entropy reports its statistics all-reduce", "[ops][loss]") {
  op_node ce = make(op_kind::cross_entropy, {{4, 8, 32}, {4, 8}});
  CHECK(ce.outputs[0] == tensor_shape{});
  signature vocab{{nd_sbp{S(0), S(2)}, nd_sbp{S(0), B}}, {}, {nd_sbp{P, P}}};
  op_work w = device_work(ce, vocab, mesh_shape{2, 2}, 4);
  REQUIRE(w.stat_all_reduces.size() == 2);  // two calls, each padded alone where the rows do not divide
  CHECK(w.stat_all_reduces[0].axis == 1);
  CHECK(w.stat_all_reduces[0].bytes == (2 * 8) * 4);      // the row max per local row
  CHECK(w.stat_all_reduces[1].axis == 1);
  CHECK(w.stat_all_reduces[1].bytes == 2 * (2 * 8) * 4);  // sum of exp, target logit per local row
  signature tokens{{nd_sbp{S(0), S(1)}, nd_sbp{S(0), S(1)}}, {}, {nd_sbp{P, P}}};
  CHECK(device_work(ce, tokens, mesh_shape{2, 2}, 4).stat_all_reduces.empty());
}

TEST_CASE("shape errors name the op, the shape and the fix", "[ops][errors]") {
  CHECK_THROWS_AS(make(op_kind::linear, {{8, 64}}, {{32, 16}, {16}}), layout_error);
  CHECK_THROWS_WITH(make(op_kind::linear, {{8, 64}}, {{32, 16}, {16}}),
                    ContainsSubstring("W [32,16] does not match X [8,64]"));
  op_attrs a;
  a.heads = 5;
  CHECK_THROWS_WITH(make(op_kind::attention, {{2, 4, 8}, {2, 4, 8}, {2, 4, 8}}, {}, a),
                    ContainsSubstring("heads=5 does not divide hidden 8"));
  op_node lin = make(op_kind::linear, {{6, 64}}, {{64, 32}, {32}});
  signature rows{{nd_sbp{S(0)}}, {nd_sbp{B}, nd_sbp{B}}, {nd_sbp{S(0)}}};
  CHECK_THROWS_WITH(device_work(lin, rows, mesh_shape{4}, 4), ContainsSubstring("does not divide evenly"));
}
