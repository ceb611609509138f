#pragma once
// How a plan is chosen, as a value: the search (`strategy::automatic`), an expert plan spelled
// with the experts' own knobs, or an exact reference. The command line and plan files write the
// same values as text, parsed here and printed back by to_string:
//   auto | dp | megatron[:tp=T,pp=P,cp=C,dp=D,mbs=B,recompute=none|selective|full,sp=1,vpp=V,dopt=1,ep=E,etp=T,fsdp=1]
//   | zero[:stage=1|2|3]
//   | owt | 2d
//   | exact | exhaustive
//   solve_plan(pp, strategy::megatron{.tp = 4})  ==  solve_plan(pp, parse_strategy("megatron:tp=4"))
// Knobs are checked for their syntax when parsed, and against the mesh when a plan is made
// (check_strategy).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <optional>
#include <variant>
#include <vector>

#include "autoddl/cost/memory.hpp"
#include "autoddl/error.hpp"
#include "autoddl/parse_number.hpp"
#include "autoddl/sbp/mesh_shape.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

namespace strategy {

/// The AutoDDL search: coordinate descent from data parallel, every expert plan and random starts.
struct automatic {
  friend constexpr bool operator==(automatic, automatic) = default;
};
/// Data parallel on every axis: activations split on the batch, parameters replicated (B).
struct dp {
  friend constexpr bool operator==(dp, dp) = default;
};
/// Megatron-LM's tensor parallelism (Shoeybi et al. 2019): weights split column- then
/// row-parallel on the tensor-parallel devices, data parallel on the rest, with Megatron-LM's
/// knobs (Narayanan et al. 2021; Korthikanti et al. 2022):
///   tp   tensor-parallel size: the innermost tp devices (inside a node, as Megatron-LM orders
///        ranks); it divides the innermost mesh axis (the plan's mesh splits that axis into
///        inner/tp x tp, planning_mesh). 0: the whole innermost axis.
///   dp   data-parallel size, the rest of the mesh (0: devices / tp; given, tp * dp == devices).
///   mbs  micro-batch size per data-parallel rank: micro-batches = batch / (mbs * dp). 0: the
///        planner chooses the micro-batch count (search/micro_batches.hpp).
///   recompute  none, selective or full; unset: the planner chooses.
///   sp   sequence parallelism (Megatron-LM's --sequence-parallel): layernorm, dropout and the
///        residual adds split the sequence dim on the tensor-parallel axis.
///   pp   pipeline-parallel size (--pipeline-model-parallel-size): stages along the outermost
///        axis, which pp divides (search/pipeline.hpp); 0 or 1: no pipeline.
///   vpp  model chunks per pipeline stage (--num-layers-per-virtual-pipeline-stage's interleaved
///        schedule, Narayanan et al. 2021 section 2.2.2); 0 or 1: plain 1F1B.
///   cp   context-parallel size (--context-parallel-size): the cp devices just outside the
///        tensor-parallel ones (Megatron-Core's rank order tp, cp, dp, pp) split every
///        activation's sequence dim (dim 1), and each attention core gathers its keys and values
///        whole over them (all-gather, as Llama 3's context parallelism does, Dubey et al. 2024
///        section 3.3.2); weights are replicated on them and their gradients summed with the
///        data-parallel ones. 0 or 1: none.
///   dopt Megatron-LM's distributed optimizer (--use-distributed-optimizer): each parameter's
///        gradient reduce-scattered over its data- and context-parallel replicas, its optimizer
///        state and update in that slice, the new values all-gathered (ZeRO-1's layouts on
///        megatron's storage).
///   ep   expert-parallel size (--expert-model-parallel-size): each experts op (ops/moe.hpp)
///        holds E / ep whole experts per device, its tokens sent there and back by all-to-all.
///        ep = tp folds the experts onto the tensor-parallel devices (Megatron-Core's MoE
///        parallel folding); otherwise the ep devices are carved from the data-parallel ones
///        just outside tp and cp (rank order tp, cp, ep, dp, pp). 0 or 1: none.
///   etp  expert tensor-parallel size (--expert-tensor-parallel-size): tp splits each expert's
///        width F on the tensor-parallel axis, 1 keeps experts whole there (the slots split).
///        0: tp, or 1 where ep = tp.
///   fsdp each weight stored sharded over its data- and context-parallel replicas and gathered
///        before use, its gradient reduce-scattered (ZeRO-3's layouts beside tensor parallelism:
///        FSDP2 over torchtitan's data_parallel_shard_degree); not with dopt.
/// With pp, dp is the data-parallel size of one stage: tp * cp * pp * dp == devices.
struct megatron {
  int tp = 0;
  int dp = 0;
  int mbs = 0;
  std::optional<recompute_mode> recompute{};
  bool sp = false;
  int pp = 0;
  int vpp = 0;
  int cp = 0;
  bool dopt = false;
  int ep = 0;
  int etp = 0;
  bool fsdp = false;
  friend constexpr bool operator==(const megatron&, const megatron&) = default;
};
/// ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
/// Parameter Models", section 5): data parallel with model state partitioned over the
/// data-parallel devices, by stage:
///   1  optimizer state sharded (P_os): each device updates its slice of the parameters, which
///      are then all-gathered; gradients are summed whole, then reduce-scattered once;
///   2  gradients too (P_os+g): each gradient is reduce-scattered as backward produces it;
///   3  parameters too (P_os+g+p, the default): stored sharded, gathered before each use.
/// Stages 1 and 2 send what data parallelism sends (a reduce-scatter and an all-gather, as one
/// all-reduce). Stage 3 resharding after forward (plan_options::reshard_after_forward) gathers
/// each weight for its forward and again for its backward, 1.5x, as the paper does; keeping the
/// gathered copy to the backward it sends what data parallelism sends and holds the copies.
struct zero {
  int stage = 3;
  friend constexpr bool operator==(zero, zero) = default;
};
/// "One weird trick" (Krizhevsky 2014, arXiv:1404.5997): convolutions data parallel, the fully
/// connected layers model parallel on every axis.
struct owt {
  friend constexpr bool operator==(owt, owt) = default;
};
/// Weights split on both axes of a 2-D mesh (2-D tensor parallelism).
struct two_d {
  friend constexpr bool operator==(two_d, two_d) = default;
};
/// The series-parallel dynamic-programming optimum of the additive step time (nothing overlapped).
struct exact {
  friend constexpr bool operator==(exact, exact) = default;
};
/// Every assignment of the tied problem (tiny models only).
struct exhaustive {
  friend constexpr bool operator==(exhaustive, exhaustive) = default;
};

}  // namespace strategy

using plan_strategy = std::variant<strategy::automatic, strategy::dp, strategy::megatron, strategy::zero,
                                   strategy::owt, strategy::two_d, strategy::exact, strategy::exhaustive>;

/// Whether s is an expert plan (as opposed to the search or an exact reference).
constexpr bool is_expert(const plan_strategy& s) {
  return !std::holds_alternative<strategy::automatic>(s) && !std::holds_alternative<strategy::exact>(s) &&
         !std::holds_alternative<strategy::exhaustive>(s);
}

/// The strategy's name, without knobs: "auto", "dp", "megatron", ...
constexpr std::string_view strategy_name(const plan_strategy& s) {
  constexpr std::string_view names[] = {"auto", "dp", "megatron", "zero", "owt", "2d", "exact", "exhaustive"};
  return names[s.index()];
}

/// The text form, knobs included where they differ from the default: "megatron:tp=4".
constexpr std::string to_string(const plan_strategy& s) {
  std::string r(strategy_name(s));
  if (const auto* m = std::get_if<strategy::megatron>(&s)) {
    std::string k;
    auto add = [&k](const std::string& kv) { k += (k.empty() ? ":" : ",") + kv; };
    if (m->tp > 0) add("tp=" + detail::itos(m->tp));
    if (m->pp > 0) add("pp=" + detail::itos(m->pp));
    if (m->cp > 0) add("cp=" + detail::itos(m->cp));
    if (m->dp > 0) add("dp=" + detail::itos(m->dp));
    if (m->mbs > 0) add("mbs=" + detail::itos(m->mbs));
    if (m->recompute) add("recompute=" + std::string(to_string(*m->recompute)));
    if (m->sp) add("sp=1");
    if (m->vpp > 0) add("vpp=" + detail::itos(m->vpp));
    if (m->dopt) add("dopt=1");
    if (m->ep > 0) add("ep=" + detail::itos(m->ep));
    if (m->etp > 0) add("etp=" + detail::itos(m->etp));
    if (m->fsdp) add("fsdp=1");
    r += k;
  }
  if (const auto* z = std::get_if<strategy::zero>(&s); z && z->stage != 3) r += ":stage=" + detail::itos(z->stage);
  return r;
}

/// The largest tp, dp or mbs a strategy's text may give (each is kept in an int).
inline constexpr std::int64_t max_strategy_knob = 2147483647;

namespace detail {

// Whether knob `key` is among `knobs` ("tp=2,pp=2" holds tp and pp).
constexpr bool knob_given_in(std::string_view knobs, std::string_view key) {
  while (!knobs.empty()) {
    const std::size_t comma = knobs.find(',');
    if (knobs.substr(0, std::min(comma, knobs.find('='))) == key) return true;
    knobs = comma == std::string_view::npos ? std::string_view{} : knobs.substr(comma + 1);
  }
  return false;
}

// The knobs of megatron strategy `text` ("tp=8,pp=2,recompute=full": what follows the colon).
constexpr strategy::megatron parse_megatron_knobs(std::string_view text, std::string_view knobs) {
  strategy::megatron m;
  std::string_view rest = knobs;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view kv = rest.substr(0, comma);
    const std::string_view given = knobs.substr(0, std::size_t(kv.data() - knobs.data()));  // the knobs before it
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const std::size_t eq = kv.find('=');
    const std::string_view key = kv.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : kv.substr(eq + 1);
    if (knob_given_in(given, key))  // the last would silently win
      fail<parse_error>("knob '" + std::string(key) + "' is given twice in strategy '" + excerpt(text) + "'; give it once");
    if (key == "recompute") {
      m.recompute = parse_recompute(value);
      continue;
    }
    if (key != "tp" && key != "dp" && key != "mbs" && key != "sp" && key != "pp" && key != "vpp" && key != "cp" &&
        key != "dopt" && key != "ep" && key != "etp" && key != "fsdp")
      fail<parse_error>("unknown knob '" + std::string(kv) + "' in strategy '" + std::string(text) +
                                "'; megatron takes tp=T, pp=P, cp=C, dp=D, mbs=B, recompute=none|selective|full, "
                                "sp=1, vpp=V, dopt=1, ep=E, etp=T and fsdp=1");
    const std::int64_t n = parse_number_or_none<std::int64_t>(value).value_or(-1);
    const bool flag = key == "sp" || key == "dopt" || key == "fsdp";
    if (n < (flag ? 0 : 1) || (flag && n > 1) || n > max_strategy_knob) {
      std::string rule = "0 or 1";
      if (!flag) rule = "a positive integer up to " + itos(max_strategy_knob);
      fail<parse_error>(std::string(key) + " in strategy '" + std::string(text) + "' must be " + rule + ", got '" +
                                std::string(value) + "'");
    }
    if (key == "tp") m.tp = int(n);
    if (key == "dp") m.dp = int(n);
    if (key == "mbs") m.mbs = int(n);
    if (key == "sp") m.sp = n == 1;
    if (key == "pp") m.pp = int(n);
    if (key == "vpp") m.vpp = int(n);
    if (key == "cp") m.cp = int(n);
    if (key == "dopt") m.dopt = n == 1;
    if (key == "ep") m.ep = int(n);
    if (key == "etp") m.etp = int(n);
    if (key == "fsdp") m.fsdp = n == 1;
  }
  return m;
}

}  // namespace detail

/// Parses the text form. Example: parse_strategy("megatron:tp=8") == strategy::megatron{.tp = 8}.
/// Throws parse_error naming the strategy or knob that is wrong and what is valid.
constexpr plan_strategy parse_strategy(std::string_view text) {
  const std::size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const std::string_view knobs = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  const std::string valid =
      "valid: auto, dp (also spelled ddp), megatron[:tp=T,pp=P,cp=C,dp=D,mbs=B,recompute=none|selective|full,sp=1,vpp=V,"
      "dopt=1,ep=E,etp=T,fsdp=1], zero[:stage=1|2|3] (zero alone, stage 3, also spelled fsdp), "
      "owt, 2d, "
      "exact, exhaustive";
  if (name == "megatron") return detail::parse_megatron_knobs(text, knobs);
  if (name == "zero" && colon != std::string_view::npos) {
    if (knobs != "stage=1" && knobs != "stage=2" && knobs != "stage=3")
      detail::fail<parse_error>("zero takes one knob, stage=1, 2 or 3 (ZeRO's stages), got '" + std::string(text) + "'");
    return strategy::zero{knobs.back() - '0'};
  }
  if (!knobs.empty() || colon != std::string_view::npos)
    detail::fail<parse_error>("strategy '" + std::string(name) + "' takes no knobs, got '" + std::string(text) + "'; " +
                              valid);
  if (name == "auto") return strategy::automatic{};
  if (name == "dp" || name == "ddp") return strategy::dp{};  // ddp: PyTorch's DistributedDataParallel
  if (name == "zero" || name == "fsdp") return strategy::zero{};  // fsdp: PyTorch's FSDP, fully sharded = ZeRO-3
  if (name == "owt") return strategy::owt{};
  if (name == "2d") return strategy::two_d{};
  if (name == "exact") return strategy::exact{};
  if (name == "exhaustive") return strategy::exhaustive{};
  detail::fail<parse_error>("unknown strategy '" + std::string(text) + "'; " + valid);
}

/// A comma-separated list of strategies, where a `key=value` item continues the knobs of the
/// strategy before it: "dp,megatron:tp=4,zero" -> {dp, megatron{.tp = 4}, zero}.
inline std::vector<plan_strategy> parse_strategy_list(std::string_view text) {
  std::vector<std::string> items;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    if (item.find('=') != std::string_view::npos && item.find(':') == std::string_view::npos && !items.empty())
      items.back() += "," + std::string(item);
    else
      items.emplace_back(item);
  }
  std::vector<plan_strategy> r;
  for (const std::string& s : items) r.push_back(parse_strategy(s));
  return r;
}

/// Whether s asks for ZeRO-1's parameter layouts (plan_options::zero1_layouts): zero:stage=1, megatron dopt=1.
constexpr bool uses_zero1_layouts(const plan_strategy& s) {
  const auto* z = std::get_if<strategy::zero>(&s);
  const auto* m = std::get_if<strategy::megatron>(&s);
  return (z && z->stage == 1) || (m && m->dopt);
}
/// Whether s asks for ZeRO-2's parameter layouts (plan_options::zero2_layouts; ZeRO-1 too).
constexpr bool uses_zero2_layouts(const plan_strategy& s) {
  const auto* z = std::get_if<strategy::zero>(&s);
  return z && z->stage <= 2;
}

/// The pipeline degree of s: megatron's pp, 1 for every other plan (and pp = 0).
constexpr int pipeline_stages(const plan_strategy& s) {
  const auto* m = std::get_if<strategy::megatron>(&s);
  return m && m->pp > 1 ? m->pp : 1;
}

/// s without its pipeline: what one stage of a megatron pp plan runs on its sub-mesh.
constexpr plan_strategy without_pipeline(const plan_strategy& s) {
  plan_strategy r = s;
  if (auto* m = std::get_if<strategy::megatron>(&r)) {
    m->pp = 0;
    m->vpp = 0;
  }
  return r;
}

/// The tensor-parallel size of a megatron plan on `mesh` (its tp, or the innermost axis).
constexpr int tensor_parallel_size(const strategy::megatron& m, const mesh_shape& mesh) {
  return m.tp > 0 ? m.tp : mesh[mesh.size() - 1];
}

namespace detail {
/// check_strategy's checks of megatron's expert knobs ep and etp, with tp, pp and cp resolved.
constexpr void check_megatron_experts(const strategy::megatron& m, const mesh_shape& mesh, std::int64_t tp, std::int64_t pp,
                                      std::int64_t cp) {
  if (m.ep > 1 && m.ep != tp && m.ep != tp * cp && (mesh.devices() / (tp * pp * cp)) % m.ep != 0)
    detail::fail<layout_error>("megatron ep=" + detail::itos(m.ep) + " must equal tp=" + detail::itos(tp) +
                               " or divide the data-parallel devices (" + detail::itos(mesh.devices() / (tp * pp * cp)) +
                               " on mesh " + to_string(mesh) + "); choose a divisor of that or ep=tp");
  if (m.ep > 1 && m.ep != tp && mesh.size() == 1 && tp > 1 && tp == mesh[0])
    detail::fail<layout_error>("megatron ep=" + detail::itos(m.ep) + " beside tp=" + detail::itos(tp) +
                               " needs devices outside the tensor-parallel ones; write ep=tp or a smaller tp");
  if (m.ep > 1 && cp > 1 && m.ep != tp * cp)
    detail::fail<layout_error>("megatron ep=" + detail::itos(m.ep) + " with cp=" + detail::itos(cp) +
                               " is planned folded onto the tensor- and context-parallel devices only; write ep=" +
                               detail::itos(tp * cp) + " (tp x cp) or leave cp out");
  if (m.etp > 0 && m.etp != 1 && m.etp != tp)
    detail::fail<layout_error>("megatron etp=" + detail::itos(m.etp) + " must be 1 or tp=" + detail::itos(tp));
  if (m.etp > 1 && (m.ep == tp || m.ep == tp * cp))
    detail::fail<layout_error>("megatron etp=" + detail::itos(m.etp) + " with ep=tp=" + detail::itos(tp) +
                               " would split the experts twice on one axis; write etp=1");
  const int inner = mesh[mesh.size() - 1];  // the axis ep is carved from: just outside the tensor-parallel devices
  const std::int64_t around = tp < inner ? inner / tp : (mesh.size() > 1 ? mesh[mesh.size() - 2] : 1);
  if (m.ep > 1 && m.ep != tp && cp <= 1 && around % m.ep != 0)
    detail::fail<layout_error>("megatron ep=" + detail::itos(m.ep) + " must divide the devices just outside the tensor-parallel "
                               "ones on mesh " + to_string(mesh) + " (" + detail::itos(around) +
                               "), where its devices are carved; choose a divisor of " + detail::itos(around) + " or ep=tp");
}
}  // namespace detail

/// Checks s against the mesh it will plan for; throws layout_error naming the knob and the fix.
/// Example: megatron:tp=3 on 2x4 fails: tp must divide the innermost axis (4).
constexpr void check_strategy(const plan_strategy& s, const mesh_shape& mesh) {
  if (std::holds_alternative<strategy::two_d>(s) && mesh.size() != 2)
    detail::fail<layout_error>("the 2d plan needs a 2-D mesh, got " + to_string(mesh));
  const auto* m = std::get_if<strategy::megatron>(&s);
  if (!m) return;
  if (m->fsdp && m->dopt)
    detail::fail<layout_error>("megatron fsdp=1 and dopt=1 both shard what the data-parallel replicas keep; choose one");
  const int inner = mesh[mesh.size() - 1];
  if (m->tp > 0 && inner % m->tp != 0)
    detail::fail<layout_error>("megatron:tp=" + detail::itos(m->tp) + " must divide the innermost axis of mesh " +
                               to_string(mesh) + " (" + detail::itos(inner) +
                               " devices, where Megatron-LM places tensor parallelism); choose a divisor of " +
                               detail::itos(inner) + " or write the mesh so its innermost axis holds tp devices");
  const std::int64_t tp = tensor_parallel_size(*m, mesh), pp = std::max(1, m->pp), cp = std::max(1, m->cp);
  if (pp > 1 && mesh[0] % pp != 0)
    detail::fail<layout_error>("megatron pp=" + detail::itos(pp) + " must divide the outermost axis of mesh " +
                               to_string(mesh) + " (" + detail::itos(mesh[0]) +
                               " devices, where pipeline stages lie); choose a divisor of " + detail::itos(mesh[0]));
  if (pp > 1 && mesh.size() == 1 && m->tp > 0 && (mesh[0] / pp) % m->tp != 0)  // a 1-D mesh: stages and tp share it
    detail::fail<layout_error>("megatron tp=" + detail::itos(m->tp) + " must divide the devices of one pipeline stage: pp=" +
                               detail::itos(pp) + " leaves " + detail::itos(mesh[0] / pp) + " of mesh " + to_string(mesh) +
                               "'s " + detail::itos(mesh[0]) + " devices to each stage; choose tp dividing " +
                               detail::itos(mesh[0] / pp) + " or a smaller pp");
  if (cp > 1) {
    // the cp devices lie just outside the tensor-parallel ones, within one pipeline stage
    const std::int64_t around = inner / tp > 1 ? inner / tp : (mesh.size() > 1 ? mesh[mesh.size() - 2] : 1);
    const std::int64_t stage_outer = mesh.size() > 2 || inner / tp > 1 ? around : around / pp;
    if (stage_outer % cp != 0)
      detail::fail<layout_error>("megatron cp=" + detail::itos(cp) + " must divide the devices next to the tensor-parallel "
                                 "ones on mesh " + to_string(mesh) + " (" + detail::itos(stage_outer) +
                                 (inner / tp > 1 ? ": the innermost axis / tp" : ": the next axis out" +
                                  std::string(pp > 1 ? ", per pipeline stage" : "")) +
                                 "); choose a divisor of " + detail::itos(stage_outer));
  }
  detail::check_megatron_experts(*m, mesh, tp, pp, cp);
  if (m->dp > 0 && tp * pp * cp * m->dp != mesh.devices())
    detail::fail<layout_error>("megatron tp=" + detail::itos(tp) + (pp > 1 ? " x pp=" + detail::itos(pp) : "") +
                               (cp > 1 ? " x cp=" + detail::itos(cp) : "") + " x dp=" + detail::itos(m->dp) + " is " +
                               detail::itos(tp * pp * cp * m->dp) + " devices, but mesh " + to_string(mesh) + " has " +
                               detail::itos(mesh.devices()) + "; leave dp out or make tp" + (pp > 1 ? " * pp" : "") +
                               (cp > 1 ? " * cp" : "") + " * dp the device count");
}

/// Whether megatron's experts fold onto the tensor- (and context-) parallel devices: ep = tp, or
/// ep = tp * cp (Megatron-Core's MoE parallel folding).
constexpr bool folded_experts(const strategy::megatron& m, const mesh_shape& mesh) {
  const int tp = tensor_parallel_size(m, mesh);
  return m.ep > 1 && (m.ep == tp || (m.cp > 1 && m.ep == tp * m.cp));
}

namespace detail {
// The planning mesh r (tensor axis innermost) with ep carved from the axis just outside the
// tensor-parallel one, as (that / ep) x ep, unless ep folds onto tp or that axis is ep already.
constexpr mesh_shape with_expert_axis(const strategy::megatron& m, const mesh_shape& r) {
  if (m.ep <= 1 || (m.tp != 1 && r[r.size() - 1] == m.ep) || m.cp > 1) return r;  // none, or folded
  const int around = m.tp == 1 ? r.size() - 1 : r.size() - 2;
  if (around < 0 || r[around] == m.ep) return r;
  mesh_shape c;
  for (int a = 0; a < around; ++a) c.push_back(r[a]);
  c.push_back(r[around] / m.ep);
  c.push_back(m.ep);
  for (int a = around + 1; a < r.size(); ++a) c.push_back(r[a]);
  return c;
}
}  // namespace detail

/// The mesh a strategy plans on: `mesh` itself, except megatron with a tp below the innermost
/// axis, whose mesh splits that axis into (inner / tp) x tp (tensor parallel innermost), as
/// Megatron-LM orders ranks. planning_mesh(megatron:tp=2, 4x8) == 4x4x2. Same devices, same
/// rank order. @pre check_strategy(s, mesh)
constexpr mesh_shape planning_mesh(const plan_strategy& s, const mesh_shape& mesh) {
  const auto* m = std::get_if<strategy::megatron>(&s);
  const int inner = mesh[mesh.size() - 1];
  mesh_shape r = mesh;
  if (m && m->tp > 1 && m->tp != inner) {  // tp = 1: data parallel on the mesh as given
    r = mesh_shape{};
    for (int a = 0; a + 1 < mesh.size(); ++a) r.push_back(mesh[a]);
    r.push_back(inner / m->tp);
    r.push_back(m->tp);
  }
  if (m) r = detail::with_expert_axis(*m, r);
  if (!m || m->cp <= 1) return r;
  // cp: the axis just outside the tensor-parallel one (the innermost where tp = 1), split into
  // (that / cp) x cp
  const int around = m->tp == 1 ? r.size() - 1 : r.size() - 2;
  if (around < 0 || r[around] == m->cp) return r;
  mesh_shape c;
  for (int a = 0; a < around; ++a) c.push_back(r[a]);
  c.push_back(r[around] / m->cp);
  c.push_back(m->cp);
  for (int a = around + 1; a < r.size(); ++a) c.push_back(r[a]);
  return c;
}

/// The axis of a megatron plan's planning mesh that context parallelism splits the sequence
/// on (the one just outside the tensor-parallel axis; the innermost where tp = 1), or -1
/// without cp.
/// @pre mesh == planning_mesh(s, some mesh)
constexpr int context_parallel_axis(const plan_strategy& s, const mesh_shape& mesh) {
  const auto* m = std::get_if<strategy::megatron>(&s);
  if (!m || m->cp <= 1) return -1;
  return m->tp == 1 ? mesh.size() - 1 : mesh.size() - 2;
}

/// The axes of a megatron plan's planning mesh whose devices hold whole experts (ep > 1), as a
/// bit mask: the tensor-parallel axis (and the context-parallel one) where ep folds onto them,
/// else the one just outside the tensor-parallel axis; 0 without ep.
/// @pre mesh == planning_mesh(s, some mesh)
constexpr unsigned expert_parallel_axes(const plan_strategy& s, const mesh_shape& mesh) {
  const auto* m = std::get_if<strategy::megatron>(&s);
  if (!m || m->ep <= 1) return 0;
  const int last = mesh.size() - 1;
  if (m->cp > 1) return (1u << last) | (1u << context_parallel_axis(s, mesh));
  if (m->tp == 1 || (mesh[last] == m->ep && (m->tp == 0 || m->tp == m->ep))) return 1u << last;
  return last >= 1 ? 1u << (last - 1) : 0;
}

/// The micro-batch count a megatron plan's mbs knob implies for a step of `batch` on `mesh`
/// (batch / (mbs * dp)), or nullopt where the planner chooses. Throws layout_error when mbs * dp
/// does not divide the batch.
constexpr std::optional<int> megatron_microbatches(const plan_strategy& s, const mesh_shape& mesh, std::int64_t batch) {
  const auto* m = std::get_if<strategy::megatron>(&s);
  if (!m || m->mbs <= 0) return std::nullopt;
  const std::int64_t dp = mesh.devices() / tensor_parallel_size(*m, mesh) / std::max(1, m->pp) / std::max(1, m->cp);
  if (batch % (std::int64_t(m->mbs) * dp) != 0)
    detail::fail<layout_error>("megatron mbs=" + detail::itos(m->mbs) + " x dp=" + detail::itos(dp) +
                               " does not divide the batch of " + detail::itos(batch) +
                               "; choose mbs so that batch / (mbs * dp) is a whole number of micro-batches");
  return int(batch / (std::int64_t(m->mbs) * dp));
}

}  // namespace autoddl
