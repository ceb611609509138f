#pragma once
// Test harness: runs one op on every device of a mesh inside one process (one thread per
// device), splitting global tensors by their layouts and reassembling the results.
//   split:      S axes cut blocks, B axes copy, P axes split the value into random addends
//   reassemble: sum over P axes, concatenate over S axes, take the copy at coordinate 0 over B
//               axes (and check that every B copy agrees)
#include <barrier>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/runtime/op_kernels.hpp"

namespace sim {
using namespace autoddl;

struct host_tensor {
  tensor_shape shape;
  std::vector<double> v;
};

inline std::vector<mesh_coord> all_coords(const mesh_shape& m) {
  std::vector<mesh_coord> r;
  mesh_coord c{};
  c.n = m.size();
  for (std::int64_t i = 0; i < m.devices(); ++i) {
    r.push_back(c);
    for (int a = m.size() - 1; a >= 0; --a) {
      if (++c[std::size_t(a)] < m[a]) break;
      c[std::size_t(a)] = 0;
    }
  }
  return r;
}
inline std::int64_t flat(const mesh_shape& m, const mesh_coord& c) {
  std::int64_t f = 0;
  for (int a = 0; a < m.size(); ++a) f = f * m[a] + c[std::size_t(a)];
  return f;
}

inline host_tensor random_tensor(const tensor_shape& s, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  host_tensor t{s, std::vector<double>(std::size_t(s.elements()))};
  for (double& x : t.v) x = u(rng);
  return t;
}

/// The local block of `g` at the shard, without P splitting.
inline std::vector<double> extract(const host_tensor& g, const shard_info& s) {
  std::vector<double> r(std::size_t(s.local.elements()));
  detail::for_each_global_index(s, [&](std::int64_t i, std::int64_t gi) { r[std::size_t(i)] = g.v[std::size_t(gi)]; });
  return r;
}
template <class V>
void place_add(host_tensor& g, const shard_info& s, const V& local) {
  detail::for_each_global_index(s, [&](std::int64_t i, std::int64_t gi) { g.v[std::size_t(gi)] += local[std::size_t(i)]; });
}

/// Deterministic noise for the P addends of tensor `tag` on device `dev`.
inline double noise(std::uint64_t seed, std::uint64_t tag, std::int64_t dev, std::int64_t i) {
  std::uint64_t h = detail::mix64(detail::mix64(seed ^ (tag * 0x9e37ULL)) ^ std::uint64_t(dev * 1000003 + i));
  return double(h >> 11) * 0x1.0p-53 * 2 - 1;
}

/// Device `c`'s block of `g` under `sbp`: over P axes the value is split into random addends
/// (the device with coordinate 0 on every P axis holds the value less the others' noise).
inline std::vector<double> split_for(const host_tensor& g, const nd_sbp& sbp, const mesh_shape& m, const mesh_coord& c,
                                     std::uint64_t seed, std::uint64_t tag) {
  shard_info s = make_shard(g.shape, sbp, m, c);
  std::vector<double> r = extract(g, s);
  if (!sbp.any_partial()) return r;
  auto key = [&](mesh_coord o) {  // B copies must agree: noise ignores the B axes
    for (int a = 0; a < m.size(); ++a) if (sbp[a].is_broadcast()) o[std::size_t(a)] = 0;
    return flat(m, o);
  };
  bool root = true;
  for (int a = 0; a < m.size(); ++a) if (sbp[a].is_partial() && c[std::size_t(a)] != 0) root = false;
  if (!root) {
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = noise(seed, tag, key(c), std::int64_t(i));
    return r;
  }
  for (const mesh_coord& o : all_coords(m)) {  // the other members of c's P group
    bool member = !(o == c);
    for (int a = 0; a < m.size(); ++a) if (!sbp[a].is_partial() && o[std::size_t(a)] != c[std::size_t(a)]) member = false;
    if (!member) continue;
    for (std::size_t i = 0; i < r.size(); ++i) r[i] -= noise(seed, tag, key(o), std::int64_t(i));
  }
  return r;
}

/// Reassembles the global tensor from every device's block under `sbp`; `mismatch` gets the
/// largest difference between B copies.
inline host_tensor reassemble(const tensor_shape& shape, const nd_sbp& sbp, const mesh_shape& m,
                              const std::vector<std::vector<double>>& locals, double& mismatch) {
  host_tensor g{shape, std::vector<double>(std::size_t(shape.elements()), 0.0)};
  const auto coords = all_coords(m);
  mismatch = 0;
  for (std::size_t d = 0; d < coords.size(); ++d) {
    mesh_coord canon = coords[d];
    for (int a = 0; a < m.size(); ++a) if (sbp[a].is_broadcast()) canon[std::size_t(a)] = 0;
    if (canon == coords[d]) {
      place_add(g, make_shard(shape, sbp, m, coords[d]), locals[d]);
      continue;
    }
    const auto& ref = locals[std::size_t(flat(m, canon))];
    for (std::size_t i = 0; i < ref.size(); ++i) mismatch = std::max(mismatch, std::abs(ref[i] - locals[d][i]));
  }
  return g;
}

/// Global operands of an op: values for value inputs and params, indices for the index input.
struct global_operands {
  std::vector<host_tensor> inputs, params;
  std::vector<std::int64_t> indices;
};

inline global_operands random_operands(const op_node& op, std::mt19937_64& rng) {
  global_operands g;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (is_index_input(op.kind, i)) {
      const std::int64_t range = op.kind == op_kind::embedding ? op.params[0][0] : op.inputs[0][op.inputs[0].rank() - 1];
      std::uniform_int_distribution<std::int64_t> u(0, range - 1);
      g.inputs.push_back({op.inputs[i], {}});
      g.indices.resize(std::size_t(op.inputs[i].elements()));
      for (auto& x : g.indices) x = u(rng);
    } else {
      g.inputs.push_back(random_tensor(op.inputs[i], rng));
    }
  }
  for (const tensor_shape& s : op.params) g.params.push_back(random_tensor(s, rng));
  return g;
}

struct device_run {
  std::vector<std::vector<double>> inputs, params;  // local operand storage
  std::vector<std::int64_t> indices;
  kernel_context<double> ctx;
  operands<double> ops;
  forward_result<cpu_device, double> fwd;
  gradients<cpu_device, double> grad;
};

/// A simulated all-reduce among threads: devices sharing their coordinates on every axis not in
/// `axes` form a group.
class sim_all_reduce {
 public:
  sim_all_reduce(const mesh_shape& m, std::vector<int> axes)
      : mesh_(m), axes_(std::move(axes)), n_(std::size_t(m.devices())), bar_(std::ptrdiff_t(n_)), slots_(n_) {}
  void operator()(std::size_t me, std::span<double> x, reduce_kind k) {
    slots_[me] = x;
    bar_.arrive_and_wait();
    const auto coords = all_coords(mesh_);
    std::vector<double> acc(x.begin(), x.end());
    for (std::size_t o = 0; o < n_; ++o) {
      if (o == me || !same_group(coords[me], coords[o])) continue;
      for (std::size_t i = 0; i < acc.size(); ++i)
        acc[i] = k == reduce_kind::max ? std::max(acc[i], slots_[o][i]) : acc[i] + slots_[o][i];
    }
    bar_.arrive_and_wait();
    std::copy(acc.begin(), acc.end(), x.begin());
    bar_.arrive_and_wait();
  }

 private:
  bool same_group(const mesh_coord& a, const mesh_coord& b) const {
    for (int ax = 0; ax < mesh_.size(); ++ax) {
      bool reduced = false;
      for (int r : axes_) reduced = reduced || r == ax;
      if (!reduced && a[std::size_t(ax)] != b[std::size_t(ax)]) return false;
    }
    return true;
  }
  mesh_shape mesh_;
  std::vector<int> axes_;
  std::size_t n_;
  std::barrier<> bar_;
  std::vector<std::span<double>> slots_;
};

/// The mesh axes that split the cross-entropy logits' vocabulary dim under `sig`.
inline std::vector<int> vocab_axes(const op_node& op, const signature& sig) {
  std::vector<int> r;
  if (op.kind != op_kind::cross_entropy) return r;
  const int last = op.inputs[0].rank() - 1;
  for (int a = 0; a < sig.inputs[0].size(); ++a)
    if (sig.inputs[0][a].is_split() && sig.inputs[0][a].dim == last) r.push_back(a);
  return r;
}

struct run_result {
  host_tensor y;                                // reassembled output
  std::vector<host_tensor> dinputs, dparams;    // reassembled gradients (empty for index inputs)
  double b_mismatch = 0;                        // largest disagreement between B copies
};

/// Forward and backward of `op` under `sig` on `mesh`, every device simulated; dy is the global
/// output gradient. `order`: the token order the kernels are told the tensors hold.
inline run_result run(const op_node& op, const signature& sig, const mesh_shape& mesh, const global_operands& g,
                      const host_tensor& dy, std::uint64_t seed, const token_order& order = {}) {
  cpu_device dev;
  const auto coords = all_coords(mesh);
  const std::size_t n = coords.size();
  std::vector<device_run> runs(n);
  std::vector<std::vector<double>> dys(n);
  sim_all_reduce comm(mesh, vocab_axes(op, sig));
  std::uint64_t tag = 0;
  for (std::size_t d = 0; d < n; ++d) {
    device_run& r = runs[d];
    r.ctx = make_kernel_context<double>(op, sig, mesh, coords[d], seed, 7, order);
    if (op.kind == op_kind::cross_entropy)
      r.ctx.row_all_reduce = [&comm, d](std::span<double> x, reduce_kind k) { comm(d, x, k); };
    tag = 0;
    for (std::size_t i = 0; i < op.inputs.size(); ++i, ++tag) {
      if (is_index_input(op.kind, i)) {
        shard_info s = make_shard(op.inputs[i], sig.inputs[i], mesh, coords[d]);
        r.indices.resize(std::size_t(s.local.elements()));
        detail::for_each_global_index(s, [&](std::int64_t li, std::int64_t gi) { r.indices[std::size_t(li)] = g.indices[std::size_t(gi)]; });
        r.inputs.emplace_back();
      } else {
        r.inputs.push_back(split_for(g.inputs[i], sig.inputs[i], mesh, coords[d], seed, tag));
      }
    }
    for (std::size_t i = 0; i < op.params.size(); ++i, ++tag)
      r.params.push_back(split_for(g.params[i], sig.params[i], mesh, coords[d], seed, tag));
    for (auto& v : r.inputs) r.ops.inputs.push_back(std::span<const double>(v));
    for (auto& v : r.params) r.ops.params.push_back(std::span<const double>(v));
    r.ops.indices = r.indices;
    dys[d] = split_for(dy, dual(sig.outputs[0]), mesh, coords[d], seed, 100);
  }
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (std::size_t d = 0; d < n; ++d)
    threads.emplace_back([&, d] {
      try {
        runs[d].fwd = op_forward(dev, runs[d].ctx, runs[d].ops);
        runs[d].grad = op_backward(dev, runs[d].ctx, runs[d].ops, runs[d].fwd, std::span<const double>(dys[d]));
      } catch (const std::exception& e) {
        errors[d] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) if (!e.empty()) throw std::runtime_error(e);
  run_result out;
  double mm = 0;
  auto gather = [&](const tensor_shape& shape, const nd_sbp& sbp, auto pick) {
    std::vector<std::vector<double>> locals;
    for (std::size_t d = 0; d < n; ++d) {
      const auto v = pick(runs[d]);  // a device buffer (counting allocator) or a host vector
      locals.emplace_back(v.begin(), v.end());
    }
    host_tensor t = reassemble(shape, sbp, mesh, locals, mm);
    out.b_mismatch = std::max(out.b_mismatch, mm);
    return t;
  };
  out.y = gather(op.outputs[0], sig.outputs[0], [](device_run& r) { return r.fwd.outputs[0]; });
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (is_index_input(op.kind, i)) { out.dinputs.push_back({op.inputs[i], {}}); continue; }
    out.dinputs.push_back(gather(op.inputs[i], dual(sig.inputs[i]), [i](device_run& r) { return r.grad.inputs[i]; }));
  }
  for (std::size_t i = 0; i < op.params.size(); ++i)
    out.dparams.push_back(gather(op.params[i], dual(sig.params[i]), [i](device_run& r) { return r.grad.params[i]; }));
  return out;
}

/// Serial execution: one device, every tensor whole.
inline run_result run_serial(const op_node& op, const global_operands& g, const host_tensor& dy, std::uint64_t seed) {
  return run(op, all_broadcast(op, 1), mesh_shape{1}, g, dy, seed);
}

/// Y of a serial forward of op (run_serial with a zero dY).
inline host_tensor forward_serial(const op_node& op, const global_operands& g) {
  host_tensor dy{op.outputs[0], std::vector<double>(std::size_t(op.outputs[0].elements()), 0.0)};
  return run_serial(op, g, dy, 1).y;
}

/// max |a - b| / max(1, max |b|).
inline double rel_error(const host_tensor& a, const host_tensor& b) {
  if (a.v.size() != b.v.size()) return 1e300;
  double diff = 0, scale = 1;
  for (std::size_t i = 0; i < a.v.size(); ++i) {
    diff = std::max(diff, std::abs(a.v[i] - b.v[i]));
    scale = std::max(scale, std::abs(b.v[i]));
  }
  return diff / scale;
}

}  // namespace sim
