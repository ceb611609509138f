// NCCL collectives through nccl_mesh_comm on the GPU buffers of a cuda_device, checked exactly
// against a serial reference (integer-valued inputs, so every sum is exact in float), on a 1-D
// mesh of all ranks and, with 4 ranks, on each axis of a 2x2 mesh. Bytes: nccl_comm counts them
// from the element counts of the NCCL calls it makes (ring rules, comm.cuh); they must equal the
// cost model's bytes per device (cheapest_boxing, priced from the tensor's shape and layouts),
// and, where the model has no entry, closed forms written here (all-to-all, broadcast, send).
// Also the overlapped gradient all-reduce on a side stream.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/cuda.cuh"
#include "autoddl/backend/nccl.cuh"
#include "autoddl/cost/boxing_path.hpp"
#include "harness.hpp"

using namespace autoddl;
using autoddl::nccl::nccl_comm;
using autoddl::nccl::nccl_mesh_comm;
using cudatest::dvec;

static_assert(AxisCommunicator<nccl_comm>, "nccl_comm must model AxisCommunicator");
static_assert(MeshCommunicator<nccl_mesh_comm>, "nccl_mesh_comm must model MeshCommunicator");

namespace {

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
double input(int rank, std::int64_t i) { return double(((rank + 1) * 7 + i * 3) % 17) - 8.0; }
std::vector<double> inputs(int rank, std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = input(rank, i);
  return v;
}
std::int64_t model_bytes(sbp from, sbp to, int n, std::int64_t rows, int elem) {
  return cheapest_boxing({{from}, {to}, {n}, {rows, 5}, elem}).bytes_per_device();
}

/// Checks every collective of `c`, whose rank r is the world rank group[r].
template <class T>
void check_axis(cudatest::cuda_device& dev, nccl_comm& c, const std::vector<int>& group) {
  const int n = c.size(), me = c.rank();
  const std::int64_t rows = 2 * n, len = rows * 5, chunk = len / n;
  const int eb = int(sizeof(T));
  // all-reduce: P -> B
  {
    dvec<T> b(dev, inputs(group[std::size_t(me)], len));
    const std::int64_t sent = c.all_reduce(b.m());
    std::vector<double> want(std::size_t(len), 0.0);
    for (int r : group)
      for (std::int64_t i = 0; i < len; ++i) want[std::size_t(i)] += input(r, i);
    CHECK(b.get() == want);
    CHECK(sent == model_bytes(P, B, n, rows, eb));
  }
  // all-reduce of the element-wise max (vocab-parallel cross-entropy's row max): priced as P -> B
  {
    dvec<T> b(dev, inputs(group[std::size_t(me)], len));
    const std::int64_t sent = c.all_reduce(b.m(), reduce_kind::max);
    std::vector<double> want(std::size_t(len), -1e300);
    for (int r : group)
      for (std::int64_t i = 0; i < len; ++i) want[std::size_t(i)] = std::max(want[std::size_t(i)], input(r, i));
    CHECK(b.get() == want);
    CHECK(sent == model_bytes(P, B, n, rows, eb));
  }
  // reduce-scatter: P -> S(0), chunk rank() holds the sum
  {
    dvec<T> b(dev, inputs(group[std::size_t(me)], len));
    const std::int64_t sent = c.reduce_scatter(b.m());
    const std::vector<double> got = b.get();
    for (std::int64_t i = me * chunk; i < (me + 1) * chunk; ++i) {
      double s = 0;
      for (int r : group) s += input(r, i);
      CHECK(got[std::size_t(i)] == s);
    }
    CHECK(sent == model_bytes(P, S(0), n, rows, eb));
  }
  // all-gather: S(0) -> B
  {
    std::vector<double> h(std::size_t(len), -99.0);
    for (std::int64_t i = me * chunk; i < (me + 1) * chunk; ++i) h[std::size_t(i)] = input(group[std::size_t(me)], i);
    dvec<T> b(dev, h);
    const std::int64_t sent = c.all_gather(b.m());
    const std::vector<double> got = b.get();
    for (std::int64_t i = 0; i < len; ++i) CHECK(got[std::size_t(i)] == input(group[std::size_t(i / chunk)], i));
    CHECK(sent == model_bytes(S(0), B, n, rows, eb));
  }
  // all-to-all: chunk j of in goes to rank j
  {
    dvec<T> in(dev, inputs(group[std::size_t(me)], len)), out(dev, std::vector<double>(std::size_t(len), 0.0));
    const std::int64_t sent = c.all_to_all(in.c(), out.m());
    const std::vector<double> got = out.get();
    for (int j = 0; j < n; ++j)
      for (std::int64_t k = 0; k < chunk; ++k)
        CHECK(got[std::size_t(j * chunk + k)] == input(group[std::size_t(j)], me * chunk + k));
    CHECK(sent == (n - 1) * chunk * eb);
  }
  // all-to-all with variable counts: rank r sends (r + j) % 3 elements to rank j (none for some
  // pairs), its elements in send order input(r, 0), input(r, 1), ...
  {
    auto amount = [](int from, int to) { return std::int64_t((from + to) % 3); };
    std::vector<std::int64_t> sc, rc;
    std::int64_t total_out = 0, total_in = 0;
    for (int j = 0; j < n; ++j) sc.push_back(amount(me, j)), rc.push_back(amount(j, me));
    for (int j = 0; j < n; ++j) total_out += sc[std::size_t(j)], total_in += rc[std::size_t(j)];
    dvec<T> in(dev, inputs(group[std::size_t(me)], total_out)), out(dev, std::vector<double>(std::size_t(total_in), 0.0));
    const std::int64_t sent = c.all_to_all_v(in.c(), std::span<const std::int64_t>(sc), out.m(), std::span<const std::int64_t>(rc));
    const std::vector<double> got = out.get();
    std::int64_t at = 0, want_sent = 0;
    for (int j = 0; j < n; ++j) {
      std::int64_t first = 0;  // where rank j's block for me starts in its send buffer
      for (int q = 0; q < me; ++q) first += amount(j, q);
      for (std::int64_t k = 0; k < amount(j, me); ++k, ++at) CHECK(got[std::size_t(at)] == input(group[std::size_t(j)], first + k));
      if (j != me) want_sent += amount(me, j) * eb;
    }
    CHECK(sent == want_sent);
  }
  // broadcast from the last rank: every other rank receives len elements once, so the group
  // sends (n-1) len elements in all, whatever order NCCL's ring takes
  {
    dvec<T> b(dev, inputs(group[std::size_t(me)], len));
    std::int64_t sent = c.broadcast(b.m(), n - 1);
    CHECK(b.get() == inputs(group[std::size_t(n - 1)], len));
    MPI_Allreduce(MPI_IN_PLACE, &sent, 1, MPI_INT64_T, MPI_SUM, c.bootstrap());
    CHECK(sent == (n - 1) * len * eb);
  }
  // send / recv around the ring, grouped so that every rank posts both before waiting
  if (n > 1) {
    dvec<T> out(dev, inputs(group[std::size_t(me)], 10)), in(dev, std::vector<double>(10, 0.0));
    ncclGroupStart();
    const std::int64_t sent = c.send(out.c(), (me + 1) % n);
    c.recv(in.m(), (me + n - 1) % n);
    ncclGroupEnd();
    CHECK(in.get() == inputs(group[std::size_t((me + n - 1) % n)], 10));
    CHECK(sent == 10 * eb);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("NCCL collectives on a 1-D mesh of every rank are exact and cost what the model says",
                   "[nccl][collectives]", float, double, __half, __nv_bfloat16) {
  cudatest::cuda_device dev(nccl::local_device_ordinal());
  const int n = world_size();
  nccl_mesh_comm mesh(mesh_shape{n}, dev.ordinal(), dev.stream());
  std::vector<int> group;
  for (int r = 0; r < n; ++r) group.push_back(r);
  check_axis<TestType>(dev, mesh.axis(0), group);
  CHECK(mesh.bytes_sent() == mesh.axis(0).bytes_sent());
}

TEST_CASE("on a 2x2 mesh every axis communicator joins the devices of one mesh line", "[nccl][mesh]") {
  if (world_size() != 4) SKIP("needs 4 ranks");
  cudatest::cuda_device dev(nccl::local_device_ordinal());
  nccl_mesh_comm mesh(mesh_shape{2, 2}, dev.ordinal(), dev.stream());
  const mesh_coord me = mesh.coords();
  CHECK(mesh.axis(0).rank() == me[0]);
  CHECK(mesh.axis(1).rank() == me[1]);
  // axis 0 joins (0,b),(1,b) = world ranks {b, 2+b}; axis 1 joins (a,0),(a,1) = {2a, 2a+1}
  check_axis<float>(dev, mesh.axis(0), {me[1], 2 + me[1]});
  check_axis<float>(dev, mesh.axis(1), {2 * me[0], 2 * me[0] + 1});
}

TEST_CASE("an overlapped gradient all-reduce on a side stream waits for the kernels that made the gradient",
          "[nccl][overlap]") {
  cudatest::cuda_device dev(nccl::local_device_ordinal());
  const int n = world_size();
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  nccl_mesh_comm mesh(mesh_shape{n}, dev.ordinal(), dev.stream());
  nccl::overlapped_reducer red(mesh.axis(0), dev.stream());
  const std::int64_t len = 1 << 20;
  dvec<float> grad(dev, std::vector<double>(std::size_t(len), 0.0)), other(dev, std::vector<double>(std::size_t(len), 1.0));
  dev.fill(grad.m(), float(me + 1));  // queued on the compute stream just before the reduction
  red.all_reduce(grad.m());
  dev.scale(2.0f, other.m());  // compute that may overlap the reduction
  red.join();
  dev.scale(0.5f, grad.m());  // after join: sees the reduced gradient
  CHECK(grad.get() == std::vector<double>(std::size_t(len), 0.5 * n * (n + 1) / 2));
  CHECK(other.get() == std::vector<double>(std::size_t(len), 2.0));
}

// The device's own side queue (SideQueue with nccl_mesh_comm), as the trainer uses it: a boxing
// queued on the side stream after the main stream's kernel that made the gradient, through a
// temporary that dies while the side queue is current (freed on the side stream), beside main
// stream compute, then joined before the main stream reads the result.
TEST_CASE("cuda_device's side queue runs after the main stream's kernels and is joined before the main stream reads",
          "[nccl][overlap][side_queue]") {
  static_assert(SideQueue<cudatest::cuda_device, nccl_mesh_comm>);
  cudatest::cuda_device dev(nccl::local_device_ordinal());
  const int n = world_size();
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  nccl_mesh_comm mesh(mesh_shape{n}, dev.ordinal(), dev.stream());
  const std::int64_t len = 1 << 20;
  dvec<float> grad(dev, std::vector<double>(std::size_t(len), 0.0)), other(dev, std::vector<double>(std::size_t(len), 1.0));
  dev.fill(grad.m(), float(me + 1));  // main stream, just before the fork
  dev.use_side_queue(mesh);
  CHECK(dev.stream() == dev.side_stream());
  {
    auto tmp = dev.alloc<float>(std::size_t(len));  // allocated, and freed below, on the side stream
    dev.copy(grad.c(), dev.view(tmp));
    mesh.axis(0).all_reduce(dev.view(tmp));
    dev.copy(std::as_const(dev).view(tmp), grad.m());
  }
  dev.use_main_queue(mesh);
  CHECK(dev.stream() == dev.main_stream());
  dev.scale(2.0f, other.m());  // main-stream compute beside the side stream's all-reduce
  dev.join_side_queue(mesh);
  dev.scale(0.5f, grad.m());  // after the join: sees the reduced gradient
  CHECK(grad.get() == std::vector<double>(std::size_t(len), 0.5 * n * (n + 1) / 2));
  CHECK(other.get() == std::vector<double>(std::size_t(len), 2.0));
}
