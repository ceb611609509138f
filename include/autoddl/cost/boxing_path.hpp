#pragma once
// nd boxing: the cheapest sequence of single-axis steps from one nd-SBP to another, the path the executor then runs.
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

#include "autoddl/index.hpp"
#include "autoddl/sbp/boxing.hpp"
#include "autoddl/sbp/layout.hpp"

namespace autoddl {

/// Longest path kept. Cheapest paths on 4-axis meshes take up to 23 steps where a dim cannot be
/// split (tests/laws/cost/boxing_oracle.cpp finds 22 on 2x8x2x4): to reduce-scatter on an outer
/// axis, the inner axes that split the same dim first step aside, through free local steps.
inline constexpr int max_boxing_steps = 8 * max_mesh_axes;

/// A path of single-axis steps. Most paths take a few steps: up to `inline_steps` sit in the
/// object itself, a longer one moves to the heap (a plan holds a path per operand slot and per
/// parameter, tens of thousands on a 1000-layer model: a fixed array of max_boxing_steps made
/// each path 1.3 KB). A constexpr path of up to inline_steps steps allocates nothing.
struct boxing_path {
  static constexpr int inline_steps = 6;
  int n = 0;
  double cost = 0;  ///< sum of step costs under the cost function used
  constexpr int size() const { return n; }
  constexpr const boxing_step* begin() const { return n <= inline_steps ? near_.data() : far_.data(); }
  constexpr const boxing_step* end() const { return begin() + n; }
  /// @pre 0 <= i < size()
  constexpr const boxing_step& operator[](int i) const { return begin()[i]; }
  /// Appends step s. Throws layout_error past max_boxing_steps.
  constexpr void push_back(const boxing_step& s) {
    if (n >= max_boxing_steps)
      detail::fail<layout_error>("a boxing path of more than max_boxing_steps (" + detail::itos(max_boxing_steps) + ") steps");
    if (n < inline_steps) {
      near_[std::size_t(n)] = s;
    } else {
      if (n == inline_steps) far_.assign(near_.begin(), near_.end());
      far_.push_back(s);
    }
    ++n;
  }
  /// Bytes one device sends over the whole path.
  constexpr std::int64_t bytes_per_device() const {
    std::int64_t b = 0;
    for (const auto& s : *this) b += s.bytes_per_device();
    return b;
  }

 private:
  std::array<boxing_step, inline_steps> near_{};
  std::vector<boxing_step> far_;  ///< every step, where there are more than inline_steps
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

/// Shortest paths from one nd-SBP to every reachable one, for targets with one set of P axes:
/// the tie-break among equal costs (fewer steps into P the target lacks) depends on the target
/// only through which of its axes are P. A path read from the tree is the path cheapest_boxing
/// returns for that target: both run the same search, and a state once finished never changes
/// (costs are non-negative and ties go to fewer detours, then the smaller state id), so searching
/// past the target leaves its path alone. The planner prices many targets from one source with it.
struct boxing_tree {
  nd_sbp from;
  unsigned partial_axes = 0;  ///< bit i: axis i of the targets is P
  mesh_shape mesh;
  tensor_shape shape;
  int elem_bytes = 4;
  int alphabet = 0;            ///< 0 = B, 1 = P, 2 + d = S(d)
  std::vector<double> dist;  ///< per state id: cost of the cheapest path from `from`
  std::vector<int> prev;     ///< per state id: the state before it on that path (-1: none)
  std::vector<std::int8_t> prev_axis;  ///< per state id: the axis of the step from prev

  constexpr int encode(const nd_sbp& v) const {
    int id = 0;
    for (int i = v.size() - 1; i >= 0; --i)
      id = id * alphabet + (v[i].is_broadcast() ? 0 : v[i].is_partial() ? 1 : 2 + v[i].dim);
    return id;
  }
  constexpr nd_sbp decode(int id) const {
    nd_sbp s;
    for (int i = 0; i < mesh.size(); ++i) {
      const int c = id % alphabet;
      s.push_back(c == 0 ? B : c == 1 ? P : S(c - 2));
      id /= alphabet;
    }
    return s;
  }
  /// The single-axis step into state v from its prev.
  constexpr boxing_step step_into(int v) const {
    const int axis = at(prev_axis, v);
    int c = v;
    for (int i = 0; i < axis; ++i) c /= alphabet;
    c %= alphabet;
    return make_step(decode(at(prev, v)), mesh, axis, c == 0 ? B : c == 1 ? P : S(c - 2),
                     shape.elements() * elem_bytes, elem_bytes);
  }
  /// The cheapest path to `to` (cost = its distance under the tree's step cost).
  /// @pre to's P axes are the tree's partial_axes, to divides shape (else layout_error).
  constexpr boxing_path path_to(const nd_sbp& to) const {
    if (!divides(shape, layout{to, mesh})) check_divisible(shape, layout{to, mesh});
    if (to.size() != mesh.size())
      detail::fail<layout_error>("boxing " + to_string(from) + " -> " + to_string(to) + " on mesh " +
                                 to_string(mesh) + " needs one SBP per mesh axis");
    for (int i = 0; i < to.size(); ++i)
      if (to[i].is_partial() != bool(partial_axes >> i & 1u))
        detail::fail<layout_error>("boxing_tree::path_to(" + to_string(to) + ") from a tree searched for other P axes");
    boxing_path out;
    const int src = encode(from), dst = encode(to);
    if (src == dst) return out;
    if (at(dist, dst) == std::numeric_limits<double>::infinity())
      detail::fail<layout_error>("no exact boxing path from " + to_string(from) + " to " + to_string(to) +
                                 " on mesh " + to_string(mesh) + " for shape " + to_string(shape));
    int len = 0;
    for (int v = dst; v != src; v = at(prev, v)) ++len;
    if (len > max_boxing_steps)
      detail::fail<layout_error>("the cheapest boxing " + to_string(from) + " -> " + to_string(to) + " on mesh " +
                                 to_string(mesh) + " for shape " + to_string(shape) + " takes " + detail::itos(len) +
                                 " steps, more than max_boxing_steps (" + detail::itos(max_boxing_steps) + ")");
    out.cost = at(dist, dst);
    std::array<int, max_boxing_steps> states{};
    for (int v = dst, i = len - 1; v != src; v = at(prev, v), --i) at(states, i) = v;
    for (int i = 0; i < len; ++i) out.push_back(step_into(at(states, i)));
    return out;
  }
};

/// The P axes of an nd-SBP as bits (bit i: axis i is P): what a boxing_tree is searched for.
constexpr unsigned partial_axes_of(const nd_sbp& v) {
  unsigned m = 0;
  for (int i = 0; i < v.size(); ++i)
    if (v[i].is_partial()) m |= 1u << i;
  return m;
}

/// One exact single-axis step of a boxing search: into state `to`, changing `axis`.
struct boxing_arc {
  int to = 0;  ///< state id (boxing_tree::encode)
  int axis = 0;
  bool into_p = false;  ///< the step makes `axis` P
  double cost = 0;
};

/// Every exact single-axis step between the nd-SBPs that divide one shape on one mesh, priced
/// once: the graph a boxing search walks, for searches from many sources (boxing_tree). Arcs
/// leave each state in the order the search tries them (axis, then target letter B, P, S(0)...).
struct boxing_graph {
  using arc = boxing_arc;
  mesh_shape mesh;
  tensor_shape shape;
  int elem_bytes = 4;
  int alphabet = 0;
  std::vector<int> first;  ///< arcs of state u: arcs[first[u] .. first[u + 1])
  std::vector<arc> arcs;
};

namespace detail {

/// The nd-SBPs of one mesh and shape as state ids (boxing_tree::encode) and the exact
/// single-axis steps between those that divide the shape, found as they are asked for.
template <class StepCost>
struct boxing_steps {
  boxing_tree codec;  ///< encode and decode only
  StepCost cost;
  int states = 1;                  ///< alphabet^axes
  int place[max_mesh_axes] = {};   ///< alphabet^axis: a state id's digit of each axis
  std::vector<std::int8_t> fits_;  ///< per state: divides the shape (-1: not yet known)

  constexpr boxing_steps(const mesh_shape& mesh, const tensor_shape& shape, int elem_bytes, StepCost c)
      : codec{nd_sbp{}, 0, mesh, shape, elem_bytes, 2 + shape.rank(), {}, {}, {}}, cost(c) {
    for (int i = 0; i < mesh.size(); ++i) {
      place[i] = states;
      states *= codec.alphabet;
    }
    fits_.assign(static_cast<std::size_t>(states), -1);
  }
  constexpr bool fits(int id) {
    std::int8_t& f = at(fits_, id);
    if (f < 0) f = divides(codec.shape, layout{codec.decode(id), codec.mesh}) ? 1 : 0;
    return f == 1;
  }
  /// Calls f(arc) for each step out of state u into a state that divides the shape, axis by
  /// axis and, within an axis, by target letter B, P, S(0), S(1)...
  template <class F>
  constexpr void for_each(int u, F&& f) {
    const int a = codec.alphabet;
    const nd_sbp su = codec.decode(u);
    const std::int64_t total = codec.shape.elements() * codec.elem_bytes;
    for (int axis = 0; axis < codec.mesh.size(); ++axis)
      for (int c = 0; c < a; ++c) {
        const sbp to = c == 0 ? B : c == 1 ? P : S(c - 2);
        if (to == su[axis] || !single_axis_step_exact(su, axis, to)) continue;
        const int v = u + (c - u / place[axis] % a) * place[axis];
        if (!fits(v)) continue;
        const boxing_step st = make_step(su, codec.mesh, axis, to, total, codec.elem_bytes);
        f(boxing_arc{v, axis, to.is_partial(), double(cost(st))});
      }
  }
};

/// The steps of a graph built once (make_boxing_graph).
struct graph_steps {
  const boxing_graph* g;
  /// @pre 0 <= u < the graph's states (first has one entry more); read without bounds checks,
  /// as boxing_dijkstra::settle reads its arrays.
  template <class F>
  constexpr void for_each(int u, F&& f) const {
    const int* first = g->first.data();
    for (const boxing_arc *a = g->arcs.data() + first[u], *end = g->arcs.data() + first[u + 1]; a != end; ++a) f(*a);
  }
};

/// Dijkstra from one nd-SBP over the steps Steps gives, settled as far as asked: the states
/// finish in order of least (distance, detours into P the targets lack, steps, id), so every path
/// read from the tree is the one a full search holds (see boxing_tree). Steps break the ties that
/// free steps (a slice costs no bytes) leave: without them a path could wander through free
/// states (17 steps from [P,P,P,S(1)] to [S(1),S(1),B,B] on 2x8x2x4, past max_boxing_steps).
template <class Steps>
class boxing_dijkstra {
 public:
  constexpr boxing_dijkstra(Steps steps, boxing_tree t, int states) : steps_(std::move(steps)), tree_(std::move(t)) {
    const auto n = static_cast<std::size_t>(states);
    tree_.dist.assign(n, std::numeric_limits<double>::infinity());
    tree_.prev.assign(n, -1);
    tree_.prev_axis.assign(n, 0);
    detours_.assign(n, 0);
    hops_.assign(n, 0);
    done_.assign(n, 0);
    const int src = tree_.encode(tree_.from);
    at(tree_.dist, src) = 0;
    heap_.reserve(n / 2 + 1);  // most searches push about half the states: no regrowth
    heap_.push_back({0.0, 0, 0, src});
  }
  /// Continues until state `stop` is finished (-1: every reachable state).
  /// The arrays are read by pointer, without a bounds check per access: every index is a state
  /// id below their common size (the source's and `stop`'s encodings, each arc's `to`, which
  /// Steps encodes), and they keep that size while it runs. With libstdc++'s assertions on (the
  /// meson build's b_ndebug=false) the checks cost about 1.5 % of planning GPT-3 on 16x8x8;
  /// the sanitizer job still checks these reads.
  constexpr void settle(int stop) {
    double* dist = tree_.dist.data();
    int* prev = tree_.prev.data();
    std::int8_t* prev_axis = tree_.prev_axis.data();
    int* detours = detours_.data();
    int* hops = hops_.data();
    char* done = done_.data();
    while (!heap_.empty() && (stop < 0 || !done[stop])) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      const entry e = heap_.back();
      heap_.pop_back();
      if (done[e.id] || e.d != dist[e.id] || e.detours != detours[e.id] || e.hops != hops[e.id]) continue;  // stale
      done[e.id] = 1;
      const int u = e.id;
      steps_.for_each(u, [&](const boxing_arc& r) {
        const double d = dist[u] + r.cost;
        const int v = r.to;
        const int dt = detours[u] + (r.into_p && !(tree_.partial_axes >> r.axis & 1u) ? 1 : 0);
        const int h = hops[u] + 1;
        if (d < dist[v] || (d == dist[v] && (dt < detours[v] || (dt == detours[v] && h < hops[v])))) {
          dist[v] = d;
          detours[v] = dt;
          hops[v] = h;
          prev[v] = u;
          prev_axis[v] = static_cast<std::int8_t>(r.axis);
          heap_.push_back({d, dt, h, v});
          std::push_heap(heap_.begin(), heap_.end(), later);
        }
      });
    }
  }
  constexpr const boxing_tree& tree() const { return tree_; }
  constexpr boxing_tree take() && { return std::move(tree_); }
  /// Bytes the search holds (its tree and its state).
  constexpr std::size_t footprint() const {
    return tree_.dist.size() * (sizeof(double) + sizeof(int) + 2 + 2 * sizeof(int)) + heap_.capacity() * sizeof(entry);
  }

 private:
  struct entry {
    double d;
    int detours, hops, id;
  };
  struct later_t {  // heap order, least entry on top; an object so the comparisons inline
    constexpr bool operator()(const entry& x, const entry& y) const {
      if (x.d != y.d) return x.d > y.d;
      if (x.detours != y.detours) return x.detours > y.detours;
      if (x.hops != y.hops) return x.hops > y.hops;
      return x.id > y.id;
    }
  };
  static constexpr later_t later{};

  Steps steps_;
  boxing_tree tree_;
  std::vector<int> detours_;
  std::vector<int> hops_;  ///< per state id: steps of the path to it
  std::vector<char> done_;
  std::vector<entry> heap_;
};

/// The boxing tree from `from`, searched until state `stop` is finished (-1: every state).
template <class StepCost>
constexpr boxing_tree boxing_search(const nd_sbp& from, unsigned partial_axes, const mesh_shape& mesh,
                                    const tensor_shape& shape, int elem_bytes, StepCost cost, int stop) {
  boxing_steps<StepCost> steps(mesh, shape, elem_bytes, cost);
  const int states = steps.states;
  boxing_tree t{from, partial_axes, mesh, shape, elem_bytes, steps.codec.alphabet, {}, {}, {}};
  boxing_dijkstra<boxing_steps<StepCost>> s(std::move(steps), std::move(t), states);
  s.settle(stop);
  return std::move(s).take();
}

}  // namespace detail

template <class StepCost = bytes_cost>
constexpr boxing_graph make_boxing_graph(const mesh_shape& mesh, const tensor_shape& shape, int elem_bytes,
                                         StepCost cost = {}) {
  detail::boxing_steps<StepCost> steps(mesh, shape, elem_bytes, cost);
  boxing_graph g{mesh, shape, elem_bytes, steps.codec.alphabet, {}, {}};
  g.first.reserve(static_cast<std::size_t>(steps.states) + 1);
  for (int u = 0; u < steps.states; ++u) {
    g.first.push_back(static_cast<int>(g.arcs.size()));
    if (steps.fits(u)) steps.for_each(u, [&](const boxing_arc& r) { g.arcs.push_back(r); });
  }
  g.first.push_back(static_cast<int>(g.arcs.size()));
  return g;
}

/// A lower bound on the cost of every boxing path between two nd-SBPs of one graph, for far less
/// than a search: each step of a path changes one axis, so on an axis where `from` and `to`
/// differ the path takes a chain of steps on that axis from from's letter to to's letter, and
/// each step costs at least the least that letter change costs on that axis anywhere in the
/// graph. The bound is the sum over the axes of the cheapest such chain (Floyd-Warshall over
/// the letters B, P, S(0)..). The planner skips a candidate whose bound already ranks out of
/// reach, without searching its paths. On mesh 2 ([S(0)] -> [B] is one all-gather) the bound
/// is that all-gather's cost; infinity where no chain exists.
/// @post (*this)(from, to) <= the cost of every path of the graph from `from` to `to`, up to a
/// relative 1e-9 that the caller's slack covers (the sums run in another order).
struct boxing_lower_bound {
  int axes = 0;
  int alphabet = 0;
  std::vector<double> least;  ///< [axis][from letter][to letter]: the cheapest chain on that axis

  /// B 0, P 1, S(d) 2 + d; of dual(s) where `dual` (B and P swap, S stays: gradients run backward).
  static constexpr int letter(const sbp& s, bool dual = false) {
    return s.is_broadcast() ? (dual ? 1 : 0) : s.is_partial() ? (dual ? 0 : 1) : 2 + s.dim;
  }
  constexpr double operator()(const nd_sbp& from, const nd_sbp& to) const { return between(from, false, to, false); }
  /// The bound from `from` (or dual(from)) to `to` (or dual(to)), without making the duals.
  constexpr double between(const nd_sbp& from, bool dual_from, const nd_sbp& to, bool dual_to) const {
    double t = 0;
    for (int a = 0; a < axes; ++a)
      t += at(least, (a * alphabet + letter(from[a], dual_from)) * alphabet + letter(to[a], dual_to));
    return t;
  }
};

/// The boxing_lower_bound of graph g: the least arc of each (axis, letter change), then the
/// cheapest chains of them per axis.
constexpr boxing_lower_bound make_boxing_lower_bound(const boxing_graph& g) {
  const int k = g.alphabet, axes = g.mesh.size();
  boxing_lower_bound lb{axes, k, std::vector<double>(static_cast<std::size_t>(axes * k * k),
                                                     std::numeric_limits<double>::infinity())};
  auto cell = [&](int a, int x, int y) -> double& { return at(lb.least, (a * k + x) * k + y); };
  auto digit = [&](int id, int a) {
    for (int i = 0; i < a; ++i) id /= k;
    return id % k;
  };
  for (int u = 0; u + 1 < static_cast<int>(g.first.size()); ++u)
    for (int i = at(g.first, u); i < at(g.first, u + 1); ++i) {
      const boxing_arc& r = at(g.arcs, i);
      double& c = cell(r.axis, digit(u, r.axis), digit(r.to, r.axis));
      c = std::min(c, r.cost);
    }
  for (int a = 0; a < axes; ++a) {
    for (int x = 0; x < k; ++x) cell(a, x, x) = 0;
    for (int m = 0; m < k; ++m)
      for (int x = 0; x < k; ++x)
        for (int y = 0; y < k; ++y) cell(a, x, y) = std::min(cell(a, x, y), cell(a, x, m) + cell(a, m, y));
  }
  return lb;
}

/// A boxing_tree searched on demand over a boxing_graph: settle(v) continues the search until
/// state v is finished, so a source asked for a few near targets never walks the whole graph.
/// The states finish in the same order as in one full search and a finished state never changes
/// (see boxing_tree), so every path read is the one the full tree holds.
class boxing_tree_search : public detail::boxing_dijkstra<detail::graph_steps> {
 public:
  /// @pre from divides g.shape and has one entry per axis of g.mesh (else layout_error); g
  /// outlives the search.
  constexpr boxing_tree_search(const boxing_graph& g, const nd_sbp& from, unsigned partial_axes)
      : boxing_dijkstra({&g}, checked_tree(g, from, partial_axes), static_cast<int>(g.first.size()) - 1), g_(&g) {}
  /// The cheapest path to `to` (boxing_tree::path_to), searching as far as it needs.
  constexpr boxing_path path_to(const nd_sbp& to) {
    if (to.size() == g_->mesh.size() && divides(g_->shape, layout{to, g_->mesh})) settle(tree().encode(to));
    return tree().path_to(to);
  }

 private:
  static constexpr boxing_tree checked_tree(const boxing_graph& g, const nd_sbp& from, unsigned partial_axes) {
    check_divisible(g.shape, layout{from, g.mesh});
    if (from.size() != g.mesh.size())
      detail::fail<layout_error>("boxing from " + to_string(from) + " on mesh " + to_string(g.mesh) +
                                 " needs one SBP per mesh axis");
    return boxing_tree{from, partial_axes, g.mesh, g.shape, g.elem_bytes, g.alphabet, {}, {}, {}};
  }
  const boxing_graph* g_;
};

/// cheapest_boxing_tree over a graph built once for its mesh and shape: the same tree.
/// @pre from divides g.shape and has one entry per axis of g.mesh (else layout_error).
constexpr boxing_tree cheapest_boxing_tree(const boxing_graph& g, const nd_sbp& from, unsigned partial_axes) {
  boxing_tree_search s(g, from, partial_axes);
  s.settle(-1);
  return std::move(s).take();
}

/// Every cheapest path from `from` to the targets whose P axes are `partial_axes`
/// (partial_axes_of(target)): one search for many targets.
/// @pre from has one entry per mesh axis and divides shape (else layout_error).
template <class StepCost = bytes_cost>
constexpr boxing_tree cheapest_boxing_tree(const nd_sbp& from, unsigned partial_axes, const mesh_shape& mesh,
                                           const tensor_shape& shape, int elem_bytes, StepCost cost = {}) {
  check_divisible(shape, layout{from, mesh});
  if (from.size() != mesh.size())
    detail::fail<layout_error>("boxing from " + to_string(from) + " on mesh " + to_string(mesh) +
                               " needs one SBP per mesh axis");
  return detail::boxing_search(from, partial_axes, mesh, shape, elem_bytes, cost, -1);
}

/// The cheapest exact path from req.from to req.to. Intermediate states must divide req.shape.
/// @pre from and to have one entry per mesh axis and divide req.shape (else layout_error).
template <class StepCost = bytes_cost>
constexpr boxing_path cheapest_boxing(const boxing_request& req, StepCost cost = {}) {
  const int k = req.mesh.size();
  check_divisible(req.shape, layout{req.from, req.mesh});
  check_divisible(req.shape, layout{req.to, req.mesh});
  if (req.from.size() != k || req.to.size() != k)
    detail::fail<layout_error>("boxing " + to_string(req.from) + " -> " + to_string(req.to) + " on mesh " +
                               to_string(req.mesh) + " needs one SBP per mesh axis");
  if (req.from == req.to) return boxing_path{};
  const unsigned pm = partial_axes_of(req.to);
  boxing_tree probe{req.from, pm, req.mesh, req.shape, req.elem_bytes, 2 + req.shape.rank(), {}, {}, {}};
  const boxing_tree t = detail::boxing_search(req.from, pm, req.mesh, req.shape, req.elem_bytes, cost, probe.encode(req.to));
  return t.path_to(req.to);
}

}  // namespace autoddl
