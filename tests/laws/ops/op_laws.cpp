// Laws every signature of every op must obey, on meshes 2, 4, 2x2 and 2x3:
// - the output follows from the inputs by the per-axis rule, and the signature is valid;
// - the enumeration is complete: every combination of candidate SBPs that is valid is listed;
// - backward layouts are the duals; no op that is nonlinear in its inputs takes P;
// - every tensor divides; per-device FLOPs times the devices doing distinct work cover the
//   global FLOPs.
// The first two re-apply the per-axis rules that built the signatures (consistency, not truth);
// the rules themselves are checked against OneFlow's published 1-D signatures of matmul, linear,
// add, mul and relu, a table written out below, and so are their n-D combinations.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "autoddl/models.hpp"
#include "autoddl/ops.hpp"

using namespace autoddl;

namespace {
std::vector<op_node> sample_ops() {
  std::vector<op_node> ops;
  // every op the zoo uses, at sizes that split 2, 3, 4 and 6 ways in places
  for (const char* spec : {"gpt:layers=1,hidden=24,heads=6,seq=12,batch=12,vocab=36",
                           "bert:layers=1,hidden=24,heads=2,seq=6,batch=4,vocab=30",
                           "vgg11:image=32,classes=12,batch=6,fc=24",
                           "llama:layers=1,hidden=24,heads=2,kv_heads=1,ffn=24,experts=4,topk=2,seq=6,batch=4,vocab=30"}) {
    graph g = build_model(spec);
    for (op_node& op : g.ops) {
      bool seen = std::any_of(ops.begin(), ops.end(), [&](const op_node& o) {
        return o.kind == op.kind && o.inputs == op.inputs && o.params == op.params && o.attrs.transpose_w == op.attrs.transpose_w;
      });
      if (!seen) ops.push_back(op);
    }
  }
  auto add = [&](op_kind k, std::vector<tensor_shape> in, op_attrs a = {}) {
    op_node n{"extra", k, a, std::move(in), {}, {}, {}};
    n.outputs = infer_outputs(n);
    ops.push_back(n);
  };
  add(op_kind::matmul, {{12, 6}, {6, 4}});
  add(op_kind::batched_matmul, {{4, 6, 12}, {4, 12, 2}});
  add(op_kind::softmax, {{6, 4, 4}});
  op_attrs r;
  r.target = {4, 6, 3};
  add(op_kind::reshape, {{4, 18}}, r);
  op_node one{"conv1x1", op_kind::conv2d, {}, {{2, 6, 4, 4}}, {{6, 6, 1, 1}, {6}}, {0, 1}, {}};
  one.outputs = infer_outputs(one);
  ops.push_back(one);
  return ops;
}

bool divides_all(const std::vector<tensor_shape>& s, const std::vector<nd_sbp>& v, const mesh_shape& m) {
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!divides(s[i], layout{v[i], m})) return false;
  return true;
}

/// Devices that do distinct work: the product of the axes on which some tensor is not B.
std::int64_t distinct_devices(const signature& s, const mesh_shape& m) {
  std::int64_t n = 1;
  for (int a = 0; a < m.size(); ++a) {
    bool all_b = true;
    for (const auto* v : {&s.inputs, &s.params, &s.outputs})
      for (const nd_sbp& x : *v) all_b = all_b && x[a].is_broadcast();
    if (!all_b) n *= m[a];
  }
  return n;
}

/// Every nd-SBP of a tensor of the given rank on `axes` axes.
std::vector<nd_sbp> all_nd(int axes, int rank) {
  std::vector<nd_sbp> out{nd_sbp{}};
  for (int i = 0; i < axes; ++i) {
    std::vector<nd_sbp> next;
    for (const nd_sbp& p : out) {
      for (int d = 0; d < rank; ++d) next.push_back([&] { nd_sbp q = p; q.push_back(S(d)); return q; }());
      for (sbp v : {B, P}) next.push_back([&] { nd_sbp q = p; q.push_back(v); return q; }());
    }
    out = next;
  }
  return out;
}

const std::vector<mesh_shape> meshes{mesh_shape{2}, mesh_shape{4}, mesh_shape{2, 2}, mesh_shape{2, 3}};
}  // namespace

TEST_CASE("every signature of every op obeys the per-axis rule, dual and divisibility laws", "[ops][laws]") {
  std::size_t checked = 0;
  for (const op_node& op : sample_ops())
    for (const mesh_shape& m : meshes) {
      const double global = forward_flops(op);
      for (const signature& s : signatures(op, m)) {
        INFO(op.name << " (" << to_string(op.kind) << "): " << to_string(op, s) << "@" << to_string(m));
        ++checked;
        std::optional<nd_sbp> y = forward_output(op, s.inputs, s.params);
        REQUIRE(y);
        CHECK(*y == s.outputs[0]);
        CHECK(signature_problem(op, s, m).empty());
        CHECK(divides_all(op.inputs, s.inputs, m));
        CHECK(divides_all(op.params, s.params, m));
        CHECK(divides_all(op.outputs, s.outputs, m));
        if (!accepts_partial(op.kind))
          for (const nd_sbp& v : s.inputs) CHECK_FALSE(v.any_partial());
        signature g = backward(s);
        for (std::size_t i = 0; i < s.inputs.size(); ++i) CHECK(g.inputs[i] == dual(s.inputs[i]));
        for (std::size_t i = 0; i < s.params.size(); ++i) CHECK(g.params[i] == dual(s.params[i]));
        for (int a = 0; a < m.size(); ++a) {
          sbp o = s.outputs[0][a], d = g.outputs[0][a];
          CHECK(((o.is_broadcast() && d.is_partial()) || (o.is_partial() && d.is_broadcast()) || (o.is_split() && d == o)));
        }
        op_work w = device_work(op, s, m, 4);
        CHECK(w.fwd_flops * double(distinct_devices(s, m)) >= global * (1 - 1e-12));
        CHECK(w.fwd_flops <= global * (1 + 1e-12));
        CHECK(w.bwd_flops >= 0);
        CHECK(w.activation_bytes >= 0);
      }
    }
  CHECK(checked > 1000);
}

TEST_CASE("the enumeration lists every valid combination and nothing else", "[ops][laws]") {
  for (const op_node& op : sample_ops()) {
    if (op.inputs.size() + op.params.size() > 3) continue;
    for (const mesh_shape& m : {mesh_shape{2}, mesh_shape{2, 3}}) {
      std::vector<signature> listed = signatures(op, m);
      std::vector<std::vector<nd_sbp>> cand;
      for (const tensor_shape& s : op.inputs) cand.push_back(all_nd(m.size(), s.rank()));
      for (const tensor_shape& s : op.params) cand.push_back(all_nd(m.size(), s.rank()));
      std::vector<std::size_t> idx(cand.size(), 0);
      std::size_t valid = 0;
      while (true) {
        signature s;
        for (std::size_t t = 0; t < cand.size(); ++t)
          (t < op.inputs.size() ? s.inputs : s.params).push_back(cand[t][idx[t]]);
        if (std::optional<nd_sbp> y = forward_output(op, s.inputs, s.params)) {
          s.outputs = {*y};
          if (signature_problem(op, s, m).empty()) {
            ++valid;
            INFO(op.name << ": " << to_string(op, s) << "@" << to_string(m));
            CHECK(std::find(listed.begin(), listed.end(), s) != listed.end());
          }
        }
        std::size_t t = cand.size();
        while (t > 0 && ++idx[t - 1] == cand[t - 1].size()) idx[--t] = 0;
        if (t == 0) break;
      }
      INFO(op.name << " on " << to_string(m));
      CHECK(valid == listed.size());
    }
  }
}

TEST_CASE("signatures come out in a deterministic order without duplicates", "[ops][laws]") {
  for (const op_node& op : sample_ops()) {
    std::vector<signature> a = signatures(op, mesh_shape{2, 3}), b = signatures(op, mesh_shape{2, 3});
    CHECK(a == b);
    for (std::size_t i = 0; i < a.size(); ++i)
      for (std::size_t j = i + 1; j < a.size(); ++j) CHECK_FALSE(a[i] == a[j]);
  }
}

// The oracle of the per-axis rules: OneFlow's published 1-D SBP signatures, written out by hand
// (oneflow/user/ops/matmul_op.cpp, bias_add_op.cpp, the binary element-wise ops and relu; "all
// B" is the signature every OneFlow op has). Each op's detail::axis_signatures must list exactly
// these, and its n-D signatures on a mesh must be exactly their per-axis combinations whose
// tensors divide. Rows read "inputs then parameters -> output".
namespace {
using table = std::vector<std::string>;

std::string row_of(const detail::axis_signature& s) {
  std::string r;
  for (const auto* v : {&s.inputs, &s.params})
    for (sbp x : *v) r += to_string(x) + " ";
  return r + "-> " + to_string(s.output);
}

table sorted(table t) {
  std::sort(t.begin(), t.end());
  return t;
}

table listed_rows(const op_node& op) {
  table t;
  for (const detail::axis_signature& s : detail::axis_signatures(op)) t.push_back(row_of(s));
  return sorted(t);
}

op_node make_op(op_kind k, std::vector<tensor_shape> in, std::vector<tensor_shape> params, op_attrs a = {}) {
  op_node n{"oracle", k, a, std::move(in), std::move(params), {}, {}};
  n.outputs = infer_outputs(n);
  return n;
}

// MatMul X [m, k] x W [k, n]: OneFlow's MatMul signatures.
const table matmul_rows{
    "S(0) B -> S(0)",  // rows of X split, W whole
    "B S(1) -> S(1)",  // columns of W split
    "S(1) S(0) -> P",  // the contracted dim split on both: partial sums
    "P B -> P", "B P -> P",  // a partial operand times a whole one
    "B B -> B",
};
// MatMul with W stored transposed, [n, k] (transpose_b): the split dims of W swap.
const table matmul_transposed_rows{"S(0) B -> S(0)", "B S(0) -> S(1)", "S(1) S(1) -> P", "P B -> P", "B P -> P",
                                   "B B -> B"};
// Linear Y = X W + b, X [batch, seq, in]: broadcast MatMul (every batch dim of X may split)
// followed by BiasAdd (b B under a batch split, S(0) under a column split, P under P).
const table linear_rows{"S(0) B B -> S(0)", "S(1) B B -> S(1)", "B S(1) S(0) -> S(2)", "S(2) S(0) P -> P",
                        "P B P -> P",       "B P P -> P",       "B B B -> B"};
// Add (a residual): both alike, partial sums included.
const table add_rows{"S(0) S(0) -> S(0)", "S(1) S(1) -> S(1)", "B B -> B", "P P -> P"};
// Mul (broadcast_mul of two same-shape tensors): both alike but P, or one partial times a whole.
const table mul_rows{"S(0) S(0) -> S(0)", "S(1) S(1) -> S(1)", "B B -> B", "P B -> P", "B P -> P"};
// ReLU: any split passes through, never a partial sum (it is not linear).
const table relu_rows{"S(0) -> S(0)", "S(1) -> S(1)", "B -> B"};

struct tabled_op {
  op_node op;
  table rows;
};

std::vector<tabled_op> tabled_ops() {
  op_attrs no_bias;
  no_bias.bias = false;
  op_attrs transposed = no_bias;
  transposed.transpose_w = true;
  return {
      {make_op(op_kind::matmul, {{12, 6}, {6, 4}}, {}), matmul_rows},
      {make_op(op_kind::linear, {{12, 6}}, {{6, 4}}, no_bias), matmul_rows},
      {make_op(op_kind::linear, {{12, 6}}, {{4, 6}}, transposed), matmul_transposed_rows},
      {make_op(op_kind::linear, {{4, 6, 12}}, {{12, 6}, {6}}), linear_rows},
      {make_op(op_kind::add, {{12, 6}, {12, 6}}, {}), add_rows},
      {make_op(op_kind::mul, {{12, 6}, {12, 6}}, {}), mul_rows},
      {make_op(op_kind::relu, {{12, 6}}, {}), relu_rows},
  };
}
}  // namespace

TEST_CASE("1-D signatures of matmul, linear and element-wise ops are OneFlow's published ones", "[ops][laws][oracle]") {
  for (const tabled_op& t : tabled_ops()) {
    INFO(to_string(t.op.kind) << (t.op.attrs.transpose_w ? " (W transposed)" : "") << " with "
                              << t.op.params.size() << " parameters");
    CHECK(listed_rows(t.op) == sorted(t.rows));
  }
}

TEST_CASE("n-D signatures of the tabled ops are the per-axis rows that divide, on 2x3", "[ops][laws][oracle]") {
  const mesh_shape m{2, 3};
  for (const tabled_op& t : tabled_ops()) {
    // Expected: every pair of table rows (axis 0, axis 1) whose tensors divide on m, as text.
    table want;
    for (const std::string& r0 : t.rows)
      for (const std::string& r1 : t.rows) {
        auto words = [](const std::string& r) {
          std::vector<std::string> w;
          std::string cur;
          for (char ch : r + " ") {
            if (ch != ' ') cur += ch;
            else if (!cur.empty() && cur != "->") { w.push_back(cur); cur.clear(); }
            else cur.clear();
          }
          return w;  // the tensors' SBPs in order, the output last
        };
        const std::vector<std::string> a = words(r0), b = words(r1);
        std::vector<tensor_shape> shapes = t.op.inputs;
        shapes.insert(shapes.end(), t.op.params.begin(), t.op.params.end());
        shapes.push_back(t.op.outputs[0]);
        bool fits = true;
        std::string text;
        for (std::size_t i = 0; i < a.size(); ++i) {
          const nd_sbp v = parse_nd_sbp("[" + a[i] + "," + b[i] + "]");
          fits = fits && divides(shapes[i], layout{v, m});
          text += (i ? " " : "") + to_string(v);
        }
        if (fits) want.push_back(text);
      }
    table got;
    for (const signature& s : signatures(t.op, m)) {
      std::string text;
      for (const auto* v : {&s.inputs, &s.params, &s.outputs})
        for (const nd_sbp& x : *v) text += (text.empty() ? "" : " ") + to_string(x);
      got.push_back(text);
    }
    INFO(to_string(t.op.kind) << " on " << to_string(m));
    CHECK(sorted(got) == sorted(want));
  }
}
