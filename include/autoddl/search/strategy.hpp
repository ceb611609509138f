#pragma once
// How a plan is chosen, as a value: the search (`strategy::automatic`), an expert plan spelled
// with the experts' own knobs, or an exact reference. The command line and plan files write the
// same values as text, parsed here and printed back by to_string:
//   auto | dp | megatron[:tp=T] | zero | owt | 2d | exact | exhaustive
//   solve_plan(pp, strategy::megatron{.tp = 4})  ==  solve_plan(pp, parse_strategy("megatron:tp=4"))
// Knobs are checked for their syntax when parsed, and against the mesh when a plan is made
// (check_strategy).
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "autoddl/error.hpp"
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
/// row-parallel on the tensor-parallel devices, data parallel on the rest. tp = 0 takes the
/// whole innermost mesh axis (Megatron-LM places tensor parallelism inside a node).
struct megatron {
  int tp = 0;
  friend constexpr bool operator==(megatron, megatron) = default;
};
/// ZeRO (Rajbhandari et al. 2020), stage 3: data parallel with parameters, gradients and
/// optimizer state stored sharded, gathered before use.
struct zero {
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
  if (const auto* m = std::get_if<strategy::megatron>(&s); m && m->tp > 0) r += ":tp=" + detail::itos(m->tp);
  return r;
}

/// Parses the text form. Example: parse_strategy("megatron:tp=8") == strategy::megatron{.tp = 8}.
/// Throws parse_error naming the strategy or knob that is wrong and what is valid.
constexpr plan_strategy parse_strategy(std::string_view text) {
  const std::size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const std::string_view knobs = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  const std::string valid = "valid: auto, dp, megatron[:tp=T], zero, owt, 2d, exact, exhaustive";
  if (name == "megatron") {
    strategy::megatron m;
    std::string_view rest = knobs;
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      const std::string_view kv = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      if (kv.substr(0, 3) != "tp=")
        detail::fail<parse_error>("unknown knob '" + std::string(kv) + "' in strategy '" + std::string(text) +
                                  "'; megatron takes tp=T (the tensor-parallel size)");
      detail::cursor c{kv.substr(3)};
      const std::int64_t tp = c.number();
      if (tp < 1 || !c.done())
        detail::fail<parse_error>("tp in strategy '" + std::string(text) + "' must be a positive integer, got '" +
                                  std::string(kv.substr(3)) + "'");
      m.tp = int(tp);
    }
    return m;
  }
  if (!knobs.empty() || colon != std::string_view::npos)
    detail::fail<parse_error>("strategy '" + std::string(name) + "' takes no knobs, got '" + std::string(text) + "'; " +
                              valid);
  if (name == "auto") return strategy::automatic{};
  if (name == "dp") return strategy::dp{};
  if (name == "zero") return strategy::zero{};
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

/// Checks s against the mesh it will plan for; throws layout_error naming the knob and the fix.
/// Example: megatron:tp=2 on 2x4 fails: the tensor-parallel group is the innermost axis (4).
constexpr void check_strategy(const plan_strategy& s, const mesh_shape& mesh) {
  if (std::holds_alternative<strategy::two_d>(s) && mesh.size() != 2)
    detail::fail<layout_error>("the 2d plan needs a 2-D mesh, got " + to_string(mesh));
  if (const auto* m = std::get_if<strategy::megatron>(&s); m && m->tp > 0 && m->tp != mesh[mesh.size() - 1])
    detail::fail<layout_error>("megatron:tp=" + detail::itos(m->tp) + " needs a tensor-parallel group of " +
                               detail::itos(m->tp) + " devices, but the innermost axis of mesh " + to_string(mesh) +
                               " has " + detail::itos(mesh[mesh.size() - 1]) +
                               "; write the mesh so that its innermost axis holds tp devices, or leave tp out");
}

}  // namespace autoddl
