#pragma once
// Boxing paths searched once per process and pricing context. A plan_problem asks for the
// cheapest path between every pair of layouts its search tries; autoddl-plan builds one problem
// per setting it tries (micro-batch counts, recomputation, pipeline stages: 16 problems for a
// 12-layer GPT on 2x2x2x2, 15 of them on the stage mesh 2x2x2), and the problems of one mesh and
// micro-batch box the same tensors between the same layouts. A boxing_book holds, for one
// context (the mesh with its links, the copy rate, the element size), the graphs of single-axis
// steps per shape, the shortest-path trees (boxing_tree_search) and what a price needs of each
// path (path_summary); boxing_book_for gives every problem of a context the same book.
// A path depends on nothing else (the trees settle in one fixed order, boxing_path.hpp), so a
// shared book changes no price, only how often a path is searched.
//   boxing_book& b = boxing_book_for(make_device_mesh(parse_mesh("2x2x2"), hw), copy, 4);
//   const auto lock = b.lock();
//   b.summary_locked([S(0),B,B], [B,B,B], b.shape_id_locked([64, 64])).seconds  // one all-gather
#include <algorithm>
#include <bit>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "autoddl/cost/boxing_copies.hpp"
#include "autoddl/cost/boxing_path.hpp"
#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/cost/measured.hpp"
#include "autoddl/index.hpp"
#include "autoddl/mesh/device_mesh.hpp"

namespace autoddl {

/// What the price of an edge needs of a boxing path (planner's memo per path target).
struct path_summary {
  double seconds = 0;       ///< path.cost: alpha-beta seconds of its collectives
  double copy_seconds = 0;  ///< path_copy_time: the copies beside them
  std::int64_t bytes = 0;   ///< bytes_per_device
  double buffer = 0;        ///< largest per-device buffer a step touches (path_buffer)
  int steps = 0;
};

/// Largest per-device buffer a path touches: a step's input or output is at most the bytes its
/// axis group holds (T), which is what a gathered or reduced result occupies.
constexpr double path_buffer(const boxing_path& p) {
  double m = 0;
  for (const auto& st : p) m = std::max(m, double(st.group_bytes));
  return m;
}

namespace detail {

/// Path summaries by 64-bit key (open addressing, linear probing, at most half full): a lookup
/// reads a key or two where std::unordered_map chases a node, and the planner looks a summary up
/// for each of the millions of pairs a 4-D search prices. The slots hold a key and the index of
/// its summary, the summaries sit in insertion order: growing moves 12 bytes a slot, not 60, and
/// writes no summary (value-initialised summaries at each doubling would cost 5 % of planning
/// GPT-3 on 16x8x8).
class summary_table {
 public:
  const path_summary* find(std::uint64_t key) const {
    if (keys_.empty()) return nullptr;
    for (std::size_t i = slot(key);; i = (i + 1) & (keys_.size() - 1)) {
      if (keys_[i] == key) return &values_[index_[i]];
      if (keys_[i] == empty) return nullptr;
    }
  }
  /// @pre key is not in the table and is not ~0.
  void insert(std::uint64_t key, const path_summary& s) {
    if (2 * (values_.size() + 1) > keys_.size()) rehash(std::max<std::size_t>(1024, 2 * keys_.size()));
    place(key, std::uint32_t(values_.size()));
    values_.push_back(s);
  }
  std::size_t size() const { return values_.size(); }
  void clear() {
    keys_.clear();
    index_.clear();
    values_.clear();
  }

 private:
  static constexpr std::uint64_t empty = ~std::uint64_t(0);
  std::size_t slot(std::uint64_t key) const {  // Fibonacci hashing onto the power-of-two size
    return std::size_t((key * 0x9E3779B97F4A7C15ull) >> (64 - std::countr_zero(keys_.size())));
  }
  void place(std::uint64_t key, std::uint32_t index) {
    std::size_t i = slot(key);
    while (keys_[i] != empty) i = (i + 1) & (keys_.size() - 1);
    keys_[i] = key;
    index_[i] = index;
  }
  void rehash(std::size_t n) {
    std::vector<std::uint64_t> keys(n, empty);
    std::vector<std::uint32_t> index(n);
    keys.swap(keys_);
    index.swap(index_);
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != empty) place(keys[i], index[i]);
  }
  std::vector<std::uint64_t> keys_;
  std::vector<std::uint32_t> index_;  ///< per slot: its summary in values_
  std::vector<path_summary> values_;
};

}  // namespace detail

/// The searched paths of one pricing context. Every member but lock() needs the lock held
/// (`_locked`); shape ids and graphs stay valid for the book's life, trees and summaries are
/// dropped past their budgets (searches are cheap to redo, memory is not).
class boxing_book {
 public:
  boxing_book(const device_mesh& dm, const copy_rate& copy, int elem_bytes) : dm_(dm), copy_(copy), elem_(elem_bytes) {}
  boxing_book(const boxing_book&) = delete;
  boxing_book& operator=(const boxing_book&) = delete;

  [[nodiscard]] std::unique_lock<std::mutex> lock() const { return std::unique_lock<std::mutex>(mutex_); }

  /// The id of shape s in this book (interned on first sight).
  int shape_id_locked(const tensor_shape& s) {
    const auto f = std::find(shapes_.begin(), shapes_.end(), s);
    if (f != shapes_.end()) return int(f - shapes_.begin());
    shapes_.push_back(s);
    return int(shapes_.size()) - 1;
  }
  /// The graph of single-axis steps of shape id `shape`, built on first use.
  const boxing_graph& graph_locked(int shape) {
    if (std::ssize(graphs_) <= shape) resize(graphs_, shape + 1);
    auto& graph = at(graphs_, shape);
    if (!graph) graph.emplace(make_boxing_graph(dm_.shape, at(shapes_, shape), elem_, alpha_beta_cost{dm_}));
    return *graph;
  }
  /// boxing_cost's path from -> to for shape id `shape`, read from one shortest-path tree per
  /// (source, target P axes, shape): the same path (boxing_tree), one search for every target.
  boxing_path box_locked(const nd_sbp& from, const nd_sbp& to, int shape) {
    return merge_ring_all_reduce(tree_locked(from, to, shape).path_to(to), dm_);
  }
  /// What a price needs of box_locked(from, to, shape), memoised by (shape, from, to).
  path_summary summary_locked(const nd_sbp& from, const nd_sbp& to, int shape) {
    const std::uint64_t key = (std::uint64_t(shape) << 40) | (layout_code(from) << 20) | layout_code(to);
    if (const path_summary* known = summaries_.find(key)) return *known;
    if (summaries_.size() >= max_summaries) summaries_.clear();
    const boxing_path p = box_locked(from, to, shape);
    const path_summary s{p.cost, path_copy_time(p, copy_), p.bytes_per_device(), path_buffer(p), p.size()};
    summaries_.insert(key, s);
    return s;
  }
  /// Shortest-path trees held now (one per source, target P axes and shape).
  std::size_t trees_locked() const { return trees_.size(); }
  /// Drops the trees and summaries (the registry does, when another context's book is made).
  void drop_searches_locked() {
    trees_.clear();
    tree_bytes_ = 0;
    summaries_.clear();
  }

  static constexpr std::size_t max_tree_bytes = std::size_t(256) << 20;
  static constexpr std::size_t max_summaries = std::size_t(1) << 22;  ///< 8M slots (96 MB) and 4M summaries (160 MB) at most

 private:
  // An nd-SBP as a number below 10^max_mesh_axes (B 0, P 1, S(d) 2 + d; 10 > 2 + max_tensor_rank).
  static std::uint64_t layout_code(const nd_sbp& v) {
    std::uint64_t c = 0;
    for (int i = 0; i < v.size(); ++i)
      c = c * 10 + (v[i].is_broadcast() ? 0 : v[i].is_partial() ? 1 : 2 + std::uint64_t(v[i].dim));
    return c * 10 + std::uint64_t(v.size());  // the length too: [B] and [B,B] differ
  }
  boxing_tree_search& tree_locked(const nd_sbp& from, const nd_sbp& to, int shape) {
    static_assert(2 + max_tensor_rank <= 10 && max_mesh_axes <= 5, "layout_code needs a wider digit or key");
    const unsigned pm = partial_axes_of(to);
    const std::uint64_t tree_key = (std::uint64_t(shape) << 40) | (layout_code(from) << 20) | pm;
    auto tree = trees_.find(tree_key);
    if (tree == trees_.end()) {
      const boxing_graph& graph = graph_locked(shape);
      if (tree_bytes_ > max_tree_bytes) {
        trees_.clear();
        tree_bytes_ = 0;
      }
      tree = trees_.emplace(tree_key, boxing_tree_search(graph, from, pm)).first;
      tree_bytes_ += tree->second.footprint();
    }
    return tree->second;
  }

  device_mesh dm_;
  copy_rate copy_;
  int elem_;
  mutable std::mutex mutex_;
  std::vector<tensor_shape> shapes_;
  /// Per shape id; trees point into them (a deque keeps them in place as it grows; no <memory>,
  /// whose <atomic> brings POSIX ::link beside autoddl::link).
  std::deque<std::optional<boxing_graph>> graphs_;
  std::unordered_map<std::uint64_t, boxing_tree_search> trees_;  ///< by (shape, source, target P axes)
  std::size_t tree_bytes_ = 0;
  detail::summary_table summaries_;  ///< by (shape, from, to)
};

namespace detail {

// The context of a book as text: the mesh, each axis's link numbers and the copy rate as the
// bits of their doubles (two contexts share a book only where every price is the same), the
// element size.
inline std::string boxing_context_key(const device_mesh& dm, const copy_rate& copy, int elem_bytes) {
  std::string k = to_string(dm.shape) + "/" + std::to_string(elem_bytes);
  auto add = [&k](double x) { k += "/" + std::to_string(std::bit_cast<std::uint64_t>(x)); };
  for (int a = 0; a < dm.size(); ++a) {
    const link& l = dm.axis_link(a);
    for (double x : {l.alpha, l.beta, l.gamma, l.large_bytes, l.beta_large, l.gamma_large}) add(x);
  }
  add(copy.alpha);
  add(copy.bandwidth);
  return k;
}

}  // namespace detail

/// The book of one pricing context, made on first use; it lives as long as the process. Making
/// a book drops the trees and summaries of the others (their graphs stay), so the searches held
/// are about one context's: a process that plans on many meshes (bench_search) does not keep
/// every mesh's paths.
inline boxing_book& boxing_book_for(const device_mesh& dm, const copy_rate& copy, int elem_bytes) {
  static std::mutex registry_mutex;
  static std::map<std::string, boxing_book> books;  // a map: a book never moves
  const std::lock_guard<std::mutex> registry(registry_mutex);
  const auto [it, fresh] = books.try_emplace(detail::boxing_context_key(dm, copy, elem_bytes), dm, copy, elem_bytes);
  if (fresh)
    for (auto& [key, other] : books)
      if (&other != &it->second) {
        const auto lock = other.lock();
        other.drop_searches_locked();
      }
  return it->second;
}

}  // namespace autoddl
