#pragma once
// A megatron strategy held to the model it plans, as Megatron-LM holds its arguments: the
// tensor-parallel size divides the attention heads (each device computes whole heads), pp x
// vpp model chunks split the layers evenly, and 2 x cp chunks the sequence. Checked for the strategy a user gives and for every
// layout the planner's search of Megatron-LM layouts prices (megatron_layouts.hpp).
#include <algorithm>
#include <cstdint>
#include <string>
#include <variant>

#include "autoddl/error.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/sbp/mesh_shape.hpp"
#include "autoddl/search/pipeline_plan.hpp"
#include "autoddl/search/solve.hpp"
#include "autoddl/search/strategy.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

/// Checks a megatron strategy's interleaving against model g: Megatron-LM gives each of the pp x
/// vpp model chunks the same number of layers (g's repeated blocks), so pp x vpp must divide them.
/// Example: megatron:pp=2,vpp=2 fits a 24-layer GPT (6 layers a chunk), not a 2-layer one.
/// @throws layout_error naming the layers and the chunks.
inline void check_interleaving(const plan_strategy& s, const graph& g) {
  const auto* m = std::get_if<strategy::megatron>(&s);
  if (!m || m->vpp <= 1) return;
  const std::int64_t layers = g.block.empty() ? 0 : *std::max_element(g.block.begin(), g.block.end()) + 1;
  const std::int64_t pp = std::max(1, m->pp), chunks = pp * m->vpp;
  if (layers > 0 && layers % chunks == 0) return;
  detail::fail<layout_error>("megatron pp=" + detail::itos(pp) + " x vpp=" + detail::itos(m->vpp) + " makes " +
                             detail::itos(chunks) + " model chunks, which must split the model's " + detail::itos(layers) +
                             " layers evenly (as Megatron-LM requires); choose pp x vpp dividing " + detail::itos(layers));
}

/// Checks a megatron strategy's tensor-parallel size on `mesh` (its tp, or the innermost axis of
/// one pipeline stage's mesh) against every attention op of g: Megatron-LM gives each device
/// whole query heads, so tp must divide them, and whole key/value heads, so tp divides those too
/// or, above them, is a multiple of them (each key/value head then kept on tp / G devices).
/// Example: megatron on 3x3 (tp 3) refuses a 4-head GPT; megatron:tp=2 on 3x2 plans it.
/// @throws layout_error naming tp, the heads and the fix.
inline void check_attention_heads(const plan_strategy& s, const graph& g, const mesh_shape& mesh) {
  const auto* m = std::get_if<strategy::megatron>(&s);
  if (!m) return;
  const int tp = tensor_parallel_size(*m, m->pp > 1 ? stage_mesh(mesh, m->pp) : mesh);
  for (const op_node& n : g.ops) {
    if (n.kind != op_kind::attention) continue;
    const int heads = n.attrs.heads, kv = n.attrs.key_value_heads();
    if (heads % tp == 0 && (kv % tp == 0 || tp % kv == 0)) continue;
    detail::fail<layout_error>("megatron tp=" + detail::itos(tp) + (m->tp > 0 ? "" : " (the innermost axis of mesh " +
                               to_string(mesh) + ")") + " must divide the " + detail::itos(heads) + " attention heads of op '" +
                               n.name + "' and divide or be a multiple of its " + detail::itos(kv) +
                               " key/value heads (Megatron-LM gives each device whole heads); give megatron:tp=T with T "
                               "dividing the heads, on a mesh whose innermost axis T divides");
  }
}

/// Checks a megatron strategy's context parallelism against model g's sequence: Megatron-LM
/// balances causal attention by cutting the sequence into 2 x cp chunks, two per device
/// (arguments.py: the sequence a multiple of 2 x context-parallel-size).
/// Example: megatron:cp=4 takes a sequence of 16, not one of 12. @throws layout_error.
inline void check_context_chunks(const plan_strategy& s, const graph& g) {
  const auto* m = std::get_if<strategy::megatron>(&s);
  if (!m || m->cp <= 1 || g.inputs.empty() || g.inputs[0].rank() < 2 || g.inputs[0][1] % (2 * m->cp) == 0) return;
  detail::fail<layout_error>("megatron cp=" + detail::itos(m->cp) + " cuts the sequence of " + detail::itos(g.inputs[0][1]) +
                             " into 2 x cp = " + detail::itos(2 * m->cp) + " chunks, two per device (as Megatron-LM " +
                             "balances causal attention), which must divide it; choose a cp with 2 x cp dividing the sequence");
}

/// The checks above, after the experts' (check_expert_parallel). @throws layout_error.
inline void check_strategy_on_model(const plan_strategy& s, const graph& g, const mesh_shape& mesh) {
  if (const auto* m = std::get_if<strategy::megatron>(&s); m && m->ep > 1) detail::check_expert_parallel(g, m->ep);
  check_interleaving(s, g);
  check_context_chunks(s, g);
  check_attention_heads(s, g, mesh);
}

}  // namespace autoddl
