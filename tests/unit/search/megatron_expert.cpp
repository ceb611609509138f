// The megatron expert plan against Megatron-LM's published layout (Shoeybi et al. 2019,
// section 3, figure 3): in every transformer block the attention's q, k, v and the MLP's first
// linear are column-parallel (W [in, out] split on out), the attention's output projection and
// the MLP's second linear row-parallel (split on in), on the tensor-parallel (innermost) axis;
// the other axis is data parallel (weights replicated, the batch split).
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <string>
#include <utility>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search.hpp"

using namespace autoddl;
using Catch::Approx;

namespace megatron_expert_cases {

namespace {

bool ends_with(const std::string& x, const std::string& t) {
  return x.size() >= t.size() && x.compare(x.size() - t.size(), t.size(), t) == 0;
}

// Bytes per device of one transformer block (hidden h, sequence s, batch b; e bytes an element)
// under Megatron-LM's tensor parallelism on t devices of the inner axis and data parallelism on
// d devices of the outer one, for the executor's layouts. Activations (Shoeybi et al. 2019,
// section 3): 4 all-reduces of the block's b / d sequences, 2 (t - 1) / t of them per device.
// Sequence parallelism (Korthikanti et al. 2022, section 4.2.2) replaces each all-reduce by an
// all-gather and a reduce-scatter, (t - 1) / t each: the same bytes. Gradients of the block's
// parameters over the data-parallel axis, 2 (d - 1) / d of each device's part: the weights
// (12 h^2) and column-parallel biases (7 h: q, k, v, fc) split t ways, the row-parallel biases
// (2 h) whole. The layernorms' 4 h parameters are summed over all n = d t devices, 2 (n - 1) / n
// (reduce-scatter on the inner axis, all-reduce of the slice on the outer, all-gather back).
double megatron_block_bytes(double b, double s, double h, double e, int d, int t) {
  auto ring = [](int n) { return 2.0 * (n - 1) / n; };
  const double activations = 4 * ring(t) * (b / d) * s * h;
  const double dp_grads = ring(d) * (12 * h * h / t + 7 * h / t + 2 * h);
  return e * (activations + dp_grads + ring(d * t) * 4 * h);
}

// Bytes per device per step of the plan `strategy` of model g on mesh (dgx-a100, fp32; zero:
// the ZeRO stages' layouts offered), which must need no note (every op placed by the rules).
// `reshard`: whether gathered parameters are gathered again for backward (plan_options::
// reshard_after_forward; gathered inputs are gathered again in every plan here).
double plan_bytes(const graph& g, const mesh_shape& mesh, const std::string& strategy, bool zero = false, bool reshard = true) {
  plan_options o;
  o.mesh = mesh;
  o.hw = load_hardware("dgx-a100");
  o.type = dtype::fp32;
  o.zero1_layouts = o.zero2_layouts = zero;
  o.reshard_after_forward = reshard;
  const plan_problem problem(g, o);
  const plan_result r = solve_plan(problem, parse_strategy(strategy));
  CHECK(r.notes.empty());
  return r.totals.bytes;
}

// One block's bytes of a Megatron plan: the plan of 3 layers less the plan of 2.
double megatron_plan_block_bytes(const mesh_shape& mesh, const std::string& strategy) {
  auto bytes = [&](int layers) {
    return plan_bytes(build_model("gpt:layers=" + std::to_string(layers) + ",hidden=512,heads=8,seq=256,batch=8,vocab=1024"), mesh,
                      strategy);
  };
  return bytes(3) - bytes(2);
}

// The bytes that `extra` more hidden layers add to the plan `strategy` of an MLP (hidden 256,
// batch 64, in 32, out 16) with `layers` of them: what each added layer sends, its neighbours
// laid out as before.
double mlp_layer_bytes(const mesh_shape& mesh, const std::string& strategy, int layers, int extra) {
  auto bytes = [&](int l) { return plan_bytes(build_model("mlp:layers=" + std::to_string(l) + ",hidden=256,batch=64,in=32,out=16"), mesh, strategy); };
  return bytes(layers + extra) - bytes(layers);
}

}  // namespace

TEST_CASE("megatron on gpt2-medium, mesh 2x8: q, k, v, mlp.fc column-parallel; attn.proj, mlp.proj row-parallel",
          "[search][experts]") {
  for (bool sp : {false, true}) {
    plan_options o;
    o.mesh = mesh_shape{2, 8};
    o.hw = load_hardware("dgx-a100");
    o.type = dtype::bf16;
    const plan_problem problem(build_model("gpt:size=gpt2-medium,batch=16"), o);
    const plan_result r = solve_plan(problem, strategy::megatron{.sp = sp});
    const graph& g = problem.model();
    int column = 0, row = 0;
    for (int i = 0; i < int(g.ops.size()); ++i) {
      const op_node& n = at(g.ops, i);
      if (n.kind != op_kind::linear || at(g.block, i) < 0) continue;
      const signature& sig = problem.op_candidate(i, at(r.pick, i));
      CAPTURE(sp, n.name, to_string(sig.params[0]));
      const bool is_row = ends_with(n.name, "attn.proj") || ends_with(n.name, "mlp.proj");
      CHECK(sig.params[0][1] == (is_row ? S(0) : S(1)));
      CHECK(sig.params[0][0] == B);  // data parallel on axis 0
      (is_row ? row : column) += 1;
    }
    CHECK(column == 24 * 4);
    CHECK(row == 24 * 2);
  }
}

TEST_CASE("megatron lays the output layer column parallel over the vocabulary and its cross-entropy vocab parallel",
          "[search][experts]") {
  // Shoeybi et al. 2019, section 3: the output layer's weight is split on the vocabulary over the
  // tensor-parallel devices and the cross-entropy reads the logits split there (each device
  // keeps its slice; only per-token statistics are all-reduced), never the partial sums of a
  // row-parallel head. GPT's tied head stores W [vocab, hidden] (split on dim 0), LLaMA's untied
  // one W [hidden, vocab] (split on dim 1).
  for (const auto& [spec, w_split] : {std::pair{"gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=256", S(0)},
                                      std::pair{"llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=96,seq=32,batch=8,vocab=256", S(1)}})
    for (const mesh_shape& mesh : {mesh_shape{4}, mesh_shape{2, 4}})
      for (bool sp : {false, true}) {
        plan_options o;
        o.mesh = mesh;
        o.hw = load_hardware("dgx-a100");
        const plan_problem problem(build_model(spec), o);
        const plan_result r = solve_plan(problem, strategy::megatron{.sp = sp});
        const graph& g = problem.model();
        const int t = mesh.size() - 1;
        int seen = 0;
        for (int i = 0; i < int(g.ops.size()); ++i) {
          const op_node& n = at(g.ops, i);
          const signature& sig = problem.op_candidate(i, at(r.pick, i));
          CAPTURE(spec, to_string(mesh), sp, n.name, to_string(sig.params.empty() ? sig.inputs[0] : sig.params[0]));
          if (n.name == "lm_head") {
            CHECK(sig.params[0][t] == w_split);
            CHECK(sig.outputs[0][t] == S(2));
            ++seen;
          }
          if (n.kind == op_kind::cross_entropy) {
            CHECK(sig.inputs[0][t] == S(2));
            CHECK(sig.inputs[1][t] == B);
            ++seen;
          }
        }
        CHECK(seen == 2);
      }
}

TEST_CASE("an expert plan's repeated blocks take the picks the greedy gives op by op", "[search][experts]") {
  // make_expert_plan reuses an earlier op's pick where everything the greedy reads is the same
  // (the blocks of a GPT after the first); the oracle runs the greedy on every op in turn and
  // stores each parameter by a scan of the edges for its first use
  for (const auto& [spec, mesh] : {std::pair{"gpt:layers=4,hidden=64,heads=4,seq=32,batch=16,vocab=128", mesh_shape{2, 2, 2}},
                                   std::pair{"bert:layers=3,hidden=64,heads=4,seq=32,batch=8,vocab=128", mesh_shape{2, 4}}}) {
    plan_options o;
    o.mesh = mesh;
    o.hw = load_hardware("dgx1-v100");
    o.zero2_layouts = true;
    const plan_problem problem(build_model(spec, 1), o);
    const choice_problem& cp = problem.untied();
    std::vector<std::vector<int>> in_edges(std::size_t(cp.nodes()));
    for (std::size_t k = 0; k < cp.edges().size(); ++k) in_edges[std::size_t(cp.edges()[k].v)].push_back(int(k));
    for (expert e : {expert::dp, expert::megatron, expert::zero, expert::owt, expert::two_d})
      for (bool sp : {false, true})
        for (int stage : {2, 3}) {
          INFO(spec << " on " << to_string(mesh) << ", expert " << to_string(e) << " sp " << sp << " stage " << stage);
          const detail::expert_storage_rule storage{problem, e, stage};
          expert_plan want;
          want.pick.assign(std::size_t(cp.nodes()), -1);
          const std::vector<char> fc_region = detail::fc_region_of(problem.model());
          for (int i = 0; i < int(problem.model().ops.size()); ++i)
            detail::expert_pick_op(problem, e, {.sequence_parallel = sp, .zero_stage = stage}, storage, fc_region,
                                   in_edges[std::size_t(i)], i, want);
          // each parameter stored as the user of its first parameter edge computes with it
          const int nops = int(problem.model().ops.size());
          for (int p = 0; p < int(problem.model().params.size()); ++p) {
            want.pick[std::size_t(nops + p)] = 0;
            for (std::size_t k = 0; k < cp.edges().size(); ++k) {
              const auto& info = problem.edge_infos()[k];
              if (!info.param || info.from_node != nops + p) continue;
              const signature& user = problem.op_candidates(info.to_node)[std::size_t(want.pick[std::size_t(info.to_node)])];
              want.pick[std::size_t(nops + p)] = storage(p, user.params[std::size_t(info.tensor_index)]);
              break;
            }
          }
          const expert_plan got = make_expert_plan(problem, e, {.sequence_parallel = sp, .zero_stage = stage});
          CHECK(got.pick == want.pick);
          CHECK(got.relaxed == want.relaxed);
        }
  }
}

TEST_CASE("megatron without sp sends Megatron-LM's two all-reduces forward and two backward per block",
          "[search][experts][closed-form]") {
  // Shoeybi et al. 2019, section 3: per block, the g operator all-reduces the row-parallel
  // outputs of attention and MLP (forward) and the f operator the column-parallel inputs'
  // gradients (backward): 4 all-reduces of b s h, each 2 (t - 1) / t of it per device on a ring.
  // The layernorms, dropouts and residual adds are replicated on the tensor-parallel devices;
  // their layernorm parameters' gradients are summed over them too (4 h values a block: what
  // the executor sends, beside Megatron-LM, which skips that redundant sum). One block's bytes:
  // the plan of 3 layers less the plan of 2.
  for (int t : {2, 4, 8}) {
    INFO("t = " << t);
    CHECK(megatron_plan_block_bytes(mesh_shape{t}, "megatron") == Approx(megatron_block_bytes(8, 256, 512, 4, 1, t)).epsilon(1e-12));
  }
}

TEST_CASE("megatron on a 2-D mesh sends the tensor-parallel all-reduces of its batch share and the data-parallel gradients",
          "[search][experts][closed-form]") {
  for (const mesh_shape& mesh : {mesh_shape{2, 2}, mesh_shape{2, 4}, mesh_shape{4, 2}}) {
    CAPTURE(to_string(mesh));
    CHECK(megatron_plan_block_bytes(mesh, "megatron") == Approx(megatron_block_bytes(8, 256, 512, 4, mesh[0], mesh[1])).epsilon(1e-12));
  }
}

TEST_CASE("megatron with sp runs layernorm, dropout and residual on sequence shards, without sp replicated on the tensor axis",
          "[search][experts]") {
  // Korthikanti et al. 2022, figure 5: outside the column- and row-parallel regions the
  // activations [batch, seq, hidden] split the sequence over the tensor-parallel axis
  for (bool sp : {false, true}) {
    plan_options o;
    o.mesh = mesh_shape{2, 4};
    o.hw = load_hardware("dgx-a100");
    o.type = dtype::fp32;
    const plan_problem problem(build_model("gpt:layers=2,hidden=512,heads=8,seq=256,batch=8,vocab=1024"), o);
    const plan_result r = solve_plan(problem, strategy::megatron{.sp = sp});
    const graph& g = problem.model();
    int seen = 0;
    for (int i = 0; i < int(g.ops.size()); ++i) {
      const op_node& n = at(g.ops, i);
      if (at(g.block, i) < 0 || (n.kind != op_kind::layernorm && n.kind != op_kind::dropout && n.kind != op_kind::add)) continue;
      const signature& sig = problem.op_candidate(i, at(r.pick, i));
      CAPTURE(sp, n.name, to_string(sig.outputs[0]));
      CHECK(sig.outputs[0][0] == S(0));
      CHECK(sig.outputs[0][1] == (sp ? S(1) : B));
      ++seen;
    }
    CHECK(seen == 2 * 6);  // per block: 2 layernorms, 2 dropouts, 2 residual adds
  }
}

TEST_CASE("megatron with sp sends one all-gather and one reduce-scatter per sequence-parallel region and direction",
          "[search][experts][closed-form]") {
  // Korthikanti et al. 2022, section 4.2.2: per block forward, an all-gather of b s h before
  // attention's q, k, v (one, for all three) and before the MLP, a reduce-scatter after each
  // row-parallel layer; backward the same (the bytes of the 4 all-reduces without sp), and the
  // two all-gathers once more: the linears' weight gradients read the gathered inputs, which are
  // kept as sequence shards and gathered again, (t - 1) / t of the b / d sequences each.
  for (const mesh_shape& mesh : {mesh_shape{2}, mesh_shape{4}, mesh_shape{8}, mesh_shape{2, 2}, mesh_shape{2, 4}}) {
    const int d = mesh.size() == 1 ? 1 : mesh[0], t = mesh[mesh.size() - 1];
    CAPTURE(to_string(mesh));
    const double regathered = 2 * (t - 1.0) / t * (8.0 / d) * 256 * 512 * 4;  // fp32
    CHECK(megatron_plan_block_bytes(mesh, "megatron:sp=1") ==
          Approx(megatron_block_bytes(8, 256, 512, 4, d, t) + regathered).epsilon(1e-12));
  }
}

TEST_CASE("dp and every ZeRO stage send 2 (n - 1) / n of the parameters per device, as their papers do",
          "[search][experts][closed-form]") {
  // Data parallelism all-reduces every gradient (a ring: reduce-scatter then all-gather, 2 (n - 1)
  // / n of it per device); ZeRO (Rajbhandari et al. 2020, section 7) sends the same volume at every
  // stage: stages 1 and 2 reduce-scatter the gradients and all-gather the updated slices, stage 3
  // all-gathers each weight before use and keeps the copy for backward (reshard off) and
  // reduce-scatters its gradient. Resharding after forward, stage 3 all-gathers each weight again
  // for backward: 3 (n - 1) / n, the paper's 1.5x (section 7.2.2). An MLP: no activation crosses
  // devices when the batch splits.
  // On a 2-D mesh the collectives run axis by axis: 2 (b - 1) / b of it on the inner axis, then
  // 2 (a - 1) / a of the 1 / b slice on the outer, 2 (n - 1) / n in all.
  const graph g = build_model("mlp:layers=3,hidden=64,batch=32,in=16,out=8");
  const double params = double(param_count(g));
  for (const mesh_shape& mesh : {mesh_shape{2}, mesh_shape{4}, mesh_shape{8}, mesh_shape{2, 2}, mesh_shape{2, 4}}) {
    const double n = double(mesh.devices());
    for (const char* strategy : {"dp", "zero:stage=1", "zero:stage=2", "zero"}) {
      CAPTURE(to_string(mesh), strategy);
      CHECK(plan_bytes(g, mesh, strategy, true, false) == Approx(2.0 * (n - 1) / n * params * 4).epsilon(1e-12));
    }
    CHECK(plan_bytes(g, mesh, "zero", true, true) == Approx(3.0 * (n - 1) / n * params * 4).epsilon(1e-12));
  }
}

TEST_CASE("on GPT (a tied embedding) dp and ZeRO-1 and 2 send 2 (n - 1) / n of the parameters, ZeRO-3 the tied weight twice more",
          "[search][experts][closed-form]") {
  // Data parallelism moves no activation. DDP and DeepSpeed's ZeRO-1 and 2 synchronise the tied
  // weight (wte: the embedding and the LM head) once: autograd adds its uses' contributions
  // before the reduce hook runs. Stage 3 here gathers it for each use (the copy kept for
  // backward) and reduce-scatters each use's contribution: 2 (n - 1) / n of it twice; resharding
  // after forward, it gathers every weight again for backward: 1.5 times that.
  const graph g = build_model("gpt:layers=2,hidden=512,heads=8,seq=256,batch=8,vocab=1024");
  const double params = double(param_count(g)), tied = 1024.0 * 512;
  for (const mesh_shape& mesh : {mesh_shape{4}, mesh_shape{2, 2}, mesh_shape{2, 4}}) {
    for (const char* strategy : {"dp", "zero:stage=1", "zero:stage=2", "zero"}) {
      const double ring = 2.0 * double(mesh.devices() - 1) / double(mesh.devices());
      const double closed = ring * (params + (std::string(strategy) == "zero" ? tied : 0)) * 4;
      CAPTURE(to_string(mesh), strategy);
      CHECK(plan_bytes(g, mesh, strategy, true, false) == Approx(closed).epsilon(1e-12));
      if (std::string(strategy) == "zero") CHECK(plan_bytes(g, mesh, strategy, true, true) == Approx(1.5 * closed).epsilon(1e-12));
    }
  }
}

TEST_CASE("owt gathers the batch into each fully-connected layer and reduce-scatters its gradient back, as Krizhevsky's trick does",
          "[search][experts][closed-form]") {
  // Krizhevsky 2014, section 3: each of n devices computes 1/n of a fully-connected layer's
  // outputs for the whole batch. A layer reads its input whole (an all-gather of the previous
  // layer's output shares, (n - 1) / n of b x hidden per device) and its input gradient comes
  // back as partial sums (a reduce-scatter, the same bytes); its weights are split, so no
  // gradient is synchronised. The weight gradient reads the gathered input, which the step keeps
  // as its share and gathers again for backward: a third (n - 1) / n. On a 2-D mesh the shares
  // span both axes: the same (n - 1) / n.
  for (const mesh_shape& mesh : {mesh_shape{2}, mesh_shape{4}, mesh_shape{8}, mesh_shape{2, 2}, mesh_shape{2, 4}}) {
    const double n = double(mesh.devices());
    CAPTURE(to_string(mesh));
    CHECK(mlp_layer_bytes(mesh, "owt", 2, 1) == Approx(3 * (n - 1) / n * 64 * 256 * 4).epsilon(1e-12));
  }
}

TEST_CASE("owt on VGG-11: data-parallel convolutions, the flattened features gathered, model-parallel classifier",
          "[search][experts][closed-form]") {
  // Every convolution's parameters all-reduced, 2 (n - 1) / n per device; the flattened last
  // feature map (b x 512) gathered into fc0 and its gradient reduce-scattered back; fc1 and fc2
  // each gather their input (b x fc) and reduce-scatter its gradient; each of the three inputs
  // gathered again for its layer's weight gradient; the logits, split on the classes, go to the
  // loss split on the batch: an all-to-all each way, (n - 1) / n^2 of them.
  const int b = 16, fc = 64, classes = 16;
  const graph g = build_model("vgg11:image=32,classes=16,batch=16,fc=64");
  double conv_params = 0;
  for (const param_info& p : g.params)
    if (p.name.rfind("conv", 0) == 0) conv_params += double(p.shape.elements());
  for (int n : {2, 4, 8}) {
    CAPTURE(n);
    const double share = (n - 1.0) / n;
    const double closed = 2 * share * conv_params + 3 * share * b * 512 + 2 * (3 * share * b * fc) + 2 * share / n * b * classes;
    CHECK(plan_bytes(g, mesh_shape{n}, "owt") == Approx(closed * 4).epsilon(1e-12));
  }
}

TEST_CASE("2d all-reduces each linear's output over one axis and its input gradient over the other, alternating",
          "[search][experts][closed-form]") {
  // On an a x c mesh every linear holds one block of W: [S(0), S(1)] (rows over axis 0,
  // columns over axis 1) and the next [S(1), S(0)]. A layer's output is a partial sum over the
  // axis that split its rows, all-reduced there (2 (a - 1) / a of the b x hidden / c a device
  // holds, or 2 (c - 1) / c of b x hidden / a); its input gradient is one over the other axis.
  // Two added layers: one of each, 4 (a + c - 2) / (a c) of b x hidden in all.
  for (const mesh_shape& mesh : {mesh_shape{2, 2}, mesh_shape{2, 4}, mesh_shape{4, 2}}) {
    const double a = mesh[0], c = mesh[1];
    CAPTURE(to_string(mesh));
    CHECK(mlp_layer_bytes(mesh, "2d", 2, 2) == Approx(4 * (a + c - 2) / (a * c) * 64 * 256 * 4).epsilon(1e-12));
    CHECK(mlp_layer_bytes(mesh, "2d", 3, 2) == Approx(4 * (a + c - 2) / (a * c) * 64 * 256 * 4).epsilon(1e-12));
  }
}

}  // namespace megatron_expert_cases
