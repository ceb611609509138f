// Laws every signature of every op must obey, on meshes 2, 4, 2x2 and 2x3:
// - the output follows from the inputs by the per-axis rule, and the signature is valid;
// - the enumeration is complete: every combination of candidate SBPs that is valid is listed;
// - backward layouts are the duals; no op that is nonlinear in its inputs takes P;
// - every tensor divides; per-device FLOPs times the devices doing distinct work cover the
//   global FLOPs.
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
