#pragma once
// nd boxing: the cheapest sequence of single-axis steps from one nd-SBP to another (DESIGN.md).
// States are nd-SBPs over the alphabet {B, P, S(0..rank-1)}; an edge is one exact single-axis
// step (single_axis_step_exact); the path is a shortest path (Dijkstra) under a step-cost
// function given as a parameter, so the bytes model, the alpha-beta model and the tests all use
// the same search, and the executor runs the returned steps in order.
//   cheapest_boxing({P,P}, {B,B}, mesh 2x4, [64,64] fp32) with bytes as the cost runs the
//   hierarchical all-reduce: reduce-scatter on axis 1, all-reduce on axis 0, all-gather on axis 1.
// Detours through P are allowed because they can be strictly cheaper ([S(0),B] -> [B,S(0)] on
// 2x4 goes [P,B] -> [P,S(0)] -> all-reduce of a quarter), but among equal costs the path with
// fewer steps into P wins (each needs a full-size zero-filled buffer).
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "autoddl/sbp/boxing.hpp"
#include "autoddl/sbp/layout.hpp"

namespace autoddl {

/// Longest path kept; real paths are at most ~3 steps per axis.
inline constexpr int max_boxing_steps = 4 * max_mesh_axes;

struct boxing_path {
  std::array<boxing_step, max_boxing_steps> steps{};
  int n = 0;
  double cost = 0;  ///< sum of step costs under the cost function used
  constexpr int size() const { return n; }
  constexpr const boxing_step* begin() const { return steps.data(); }
  constexpr const boxing_step* end() const { return steps.data() + n; }
  constexpr const boxing_step& operator[](int i) const { return steps[std::size_t(i)]; }
  /// Bytes one device sends over the whole path.
  constexpr std::int64_t bytes_per_device() const {
    std::int64_t b = 0;
    for (const auto& s : *this) b += s.bytes_per_device();
    return b;
  }
};

/// What is boxed: a tensor of `shape` with `elem_bytes` bytes per element on `mesh`.
struct boxing_request {
  nd_sbp from;
  nd_sbp to;
  mesh_shape mesh;
  tensor_shape shape;
  int elem_bytes = 4;
};

/// The step cost used when none is given: bytes one device sends.
struct bytes_cost {
  constexpr double operator()(const boxing_step& s) const { return double(s.bytes_per_device()); }
};

/// The cheapest exact path from req.from to req.to. Intermediate states must divide req.shape.
/// @pre from and to have one entry per mesh axis and divide req.shape (else layout_error).
template <class StepCost = bytes_cost>
constexpr boxing_path cheapest_boxing(const boxing_request& req, StepCost cost = {}) {
  const int k = req.mesh.size();
  const int rank = req.shape.rank();
  check_divisible(req.shape, layout{req.from, req.mesh});
  check_divisible(req.shape, layout{req.to, req.mesh});
  if (req.from.size() != k || req.to.size() != k)
    detail::fail<layout_error>("boxing " + to_string(req.from) + " -> " + to_string(req.to) + " on mesh " +
                               to_string(req.mesh) + " needs one SBP per mesh axis");
  boxing_path out;
  if (req.from == req.to) return out;

  // Alphabet: 0 = B, 1 = P, 2 + d = S(d).
  const int a = 2 + rank;
  auto letter = [](int c) { return c == 0 ? B : c == 1 ? P : S(c - 2); };
  auto code = [](sbp v) { return v.is_broadcast() ? 0 : v.is_partial() ? 1 : 2 + v.dim; };
  int states = 1;
  for (int i = 0; i < k; ++i) states *= a;
  auto decode = [&](int id) {
    nd_sbp s;
    for (int i = 0; i < k; ++i) { s.push_back(letter(id % a)); id /= a; }
    return s;
  };
  auto encode = [&](const nd_sbp& s) {
    int id = 0;
    for (int i = k - 1; i >= 0; --i) id = id * a + code(s[i]);
    return id;
  };
  const std::int64_t total = req.shape.elements() * req.elem_bytes;
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> dist(std::size_t(states), inf);
  std::vector<int> detours(std::size_t(states), 0);  // tie-break: steps into P the target lacks
  std::vector<int> prev(std::size_t(states), -1);
  std::vector<boxing_step> via(static_cast<std::size_t>(states));
  std::vector<char> done(std::size_t(states), 0);
  const int src = encode(req.from), dst = encode(req.to);
  dist[std::size_t(src)] = 0;
  // The next state is the unfinished one of least (distance, detours, id): a binary heap of
  // (distance, detours, id) entries, an entry dropped when popped stale (its state finished or
  // improved since). The order is the same as a scan over all states, so are the paths.
  struct entry {
    double d;
    int detours, id;
  };
  auto later = [](const entry& x, const entry& y) {  // heap order: the least entry on top
    if (x.d != y.d) return x.d > y.d;
    if (x.detours != y.detours) return x.detours > y.detours;
    return x.id > y.id;
  };
  std::vector<entry> heap{{0.0, 0, src}};
  while (true) {
    int u = -1;
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const entry e = heap.back();
      heap.pop_back();
      if (!done[std::size_t(e.id)] && e.d == dist[std::size_t(e.id)] && e.detours == detours[std::size_t(e.id)]) {
        u = e.id;
        break;
      }
    }
    if (u < 0 || u == dst) break;
    done[std::size_t(u)] = 1;
    const nd_sbp su = decode(u);
    for (int axis = 0; axis < k; ++axis) {
      for (int c = 0; c < a; ++c) {
        sbp to = letter(c);
        if (to == su[axis] || !single_axis_step_exact(su, axis, to)) continue;
        nd_sbp sv = su.with(axis, to);
        if (!divides(req.shape, layout{sv, req.mesh})) continue;
        boxing_step st = make_step(su, req.mesh, axis, to, total, req.elem_bytes);
        double d = dist[std::size_t(u)] + double(cost(st));
        int v = encode(sv);
        int dt = detours[std::size_t(u)] + (to.is_partial() && !req.to[axis].is_partial() ? 1 : 0);
        if (d < dist[std::size_t(v)] || (d == dist[std::size_t(v)] && dt < detours[std::size_t(v)])) {
          dist[std::size_t(v)] = d;
          detours[std::size_t(v)] = dt;
          prev[std::size_t(v)] = u;
          via[std::size_t(v)] = st;
          heap.push_back({d, dt, v});
          std::push_heap(heap.begin(), heap.end(), later);
        }
      }
    }
  }
  if (dist[std::size_t(dst)] == inf)
    detail::fail<layout_error>("no exact boxing path from " + to_string(req.from) + " to " + to_string(req.to) +
                               " on mesh " + to_string(req.mesh) + " for shape " + to_string(req.shape));
  int len = 0;
  for (int v = dst; v != src; v = prev[std::size_t(v)]) ++len;
  if (len > max_boxing_steps) detail::fail<layout_error>("boxing path longer than max_boxing_steps");
  out.n = len;
  out.cost = dist[std::size_t(dst)];
  for (int v = dst, i = len - 1; v != src; v = prev[std::size_t(v)], --i) out.steps[std::size_t(i)] = via[std::size_t(v)];
  return out;
}

}  // namespace autoddl
