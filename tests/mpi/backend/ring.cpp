#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/mpi.hpp"

// The MPI back end is a model of the communicator concepts the executor is written against.
static_assert(autoddl::AxisCommunicator<autoddl::mpi::ring_comm>);
static_assert(autoddl::MeshCommunicator<autoddl::mpi::mpi_mesh_comm>);
#include "autoddl/cost/boxing_path.hpp"

using namespace autoddl;
using autoddl::mpi::mpi_mesh_comm;
using autoddl::mpi::ring_comm;

TEST_CASE("autoddl::mpi::init runs Open MPI's shared-memory transport without single copy unless the user chose one", "[mpi][init]") {
  // catch_mpi_main started MPI through autoddl::mpi::init, so the variable is set (to "none", or
  // to what the person running the suite chose).
  const char* name = "OMPI_MCA_btl_vader_single_copy_mechanism";
  REQUIRE(std::getenv(name) != nullptr);
  const std::string started_with = std::getenv(name);
  ::setenv(name, "cma", 1);  // a user's choice is kept
  autoddl::mpi::set_transport_defaults();
  CHECK(std::string(std::getenv(name)) == "cma");
  ::unsetenv(name);  // and an unset value gets the default
  autoddl::mpi::set_transport_defaults();
  CHECK(std::string(std::getenv(name)) == "none");
  ::setenv(name, started_with.c_str(), 1);
}

namespace {

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// Integer-valued input of `rank` at index i (small, so every sum is exact in float).
template <class T>
T input(int rank, std::int64_t i) {
  return T(((rank + 1) * 7 + i * 3) % 17) - T(8);
}

template <class T>
std::vector<T> inputs(int rank, std::int64_t n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = input<T>(rank, i);
  return v;
}

/// Serial reference: the sum over the ranks of `group` of their inputs.
template <class T>
std::vector<T> summed(const std::vector<int>& group, std::int64_t n) {
  std::vector<T> s(std::size_t(n), T(0));
  for (int r : group)
    for (std::int64_t i = 0; i < n; ++i) s[std::size_t(i)] += input<T>(r, i);
  return s;
}

std::vector<int> iota_group(int n) {
  std::vector<int> g;
  for (int i = 0; i < n; ++i) g.push_back(i);
  return g;
}

/// The model's bytes for one boxing on a 1-D mesh of n devices, tensor [rows, 5].
std::int64_t model_bytes(sbp from, sbp to, int n, std::int64_t rows, int elem) {
  return cheapest_boxing({{from}, {to}, {n}, {rows, 5}, elem}).bytes_per_device();
}

}  // namespace

TEMPLATE_TEST_CASE("ring all-gather gives every rank every chunk, sending the model's bytes", "[mpi][ring]", float,
                   double) {
  const int n = world_size();
  mpi_mesh_comm mc({n});
  ring_comm& c = mc.axis(0);
  const std::int64_t rows = 4 * n, len = rows * 5, chunk = len / n;
  std::vector<TestType> buf(std::size_t(len), TestType(-99));
  auto mine = inputs<TestType>(c.rank(), len);
  std::copy(mine.begin() + c.rank() * chunk, mine.begin() + (c.rank() + 1) * chunk, buf.begin() + c.rank() * chunk);
  const std::int64_t sent = c.all_gather(std::span<TestType>(buf));
  for (int r = 0; r < n; ++r) {
    auto theirs = inputs<TestType>(r, len);
    for (std::int64_t i = r * chunk; i < (r + 1) * chunk; ++i) REQUIRE(buf[std::size_t(i)] == theirs[std::size_t(i)]);
  }
  CHECK(sent == model_bytes(S(0), B, n, rows, int(sizeof(TestType))));
  CHECK(sent == (n - 1) * chunk * std::int64_t(sizeof(TestType)));
  CHECK(c.bytes_sent() == sent);
}

TEMPLATE_TEST_CASE("ring reduce-scatter leaves each rank the sum of its chunk", "[mpi][ring]", float, double) {
  const int n = world_size();
  mpi_mesh_comm mc({n});
  ring_comm& c = mc.axis(0);
  const std::int64_t rows = 2 * n, len = rows * 5, chunk = len / n;
  auto buf = inputs<TestType>(c.rank(), len);
  const std::int64_t sent = c.reduce_scatter(std::span<TestType>(buf));
  auto ref = summed<TestType>(iota_group(n), len);
  for (std::int64_t i = c.rank() * chunk; i < (c.rank() + 1) * chunk; ++i) REQUIRE(buf[std::size_t(i)] == ref[std::size_t(i)]);
  CHECK(sent == model_bytes(P, S(0), n, rows, int(sizeof(TestType))));
}

TEMPLATE_TEST_CASE("ring all-reduce equals the serial sum on every rank", "[mpi][ring]", float, double) {
  const int n = world_size();
  mpi_mesh_comm mc({n});
  ring_comm& c = mc.axis(0);
  const std::int64_t rows = 3 * n, len = rows * 5;
  auto buf = inputs<TestType>(c.rank(), len);
  const std::int64_t sent = c.all_reduce(std::span<TestType>(buf));
  CHECK(buf == summed<TestType>(iota_group(n), len));
  CHECK(sent == model_bytes(P, B, n, rows, int(sizeof(TestType))));
  CHECK(sent == 2 * (n - 1) * (len / n) * std::int64_t(sizeof(TestType)));
}

TEMPLATE_TEST_CASE("pairwise all-to-all delivers chunk j of rank i to chunk i of rank j", "[mpi][ring]", float, double) {
  const int n = world_size();
  mpi_mesh_comm mc({n});
  ring_comm& c = mc.axis(0);
  // [S(0)] -> [S(1)] on n devices, tensor [n*n*2, 5*n] ... one rank's shard is len elements
  const std::int64_t len = std::int64_t(n) * 6, chunk = len / n;
  auto in = inputs<TestType>(c.rank(), len);
  std::vector<TestType> out(std::size_t(len), TestType(-99));
  const std::int64_t sent = c.all_to_all(std::span<const TestType>(in), std::span<TestType>(out));
  for (int r = 0; r < n; ++r) {
    auto theirs = inputs<TestType>(r, len);
    for (std::int64_t k = 0; k < chunk; ++k)
      REQUIRE(out[std::size_t(r * chunk + k)] == theirs[std::size_t(c.rank() * chunk + k)]);
  }
  // the model's T for all-to-all is the group's whole tensor: n shards of len elements
  const boxing_step step{0, S(0), S(1), collective::all_to_all, n, n * len * std::int64_t(sizeof(TestType))};
  CHECK(sent == step.bytes_per_device());
}

TEMPLATE_TEST_CASE("broadcast and send/recv move the root's data", "[mpi][ring]", float, double) {
  const int n = world_size();
  mpi_mesh_comm mc({n});
  ring_comm& c = mc.axis(0);
  for (int root = 0; root < n; ++root) {
    auto buf = c.rank() == root ? inputs<TestType>(root, 10) : std::vector<TestType>(10, TestType(0));
    const std::int64_t sent = c.broadcast(std::span<TestType>(buf), root);
    CHECK(buf == inputs<TestType>(root, 10));
    std::int64_t total = 0;
    MPI_Allreduce(&sent, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    CHECK(total == (n - 1) * 10 * std::int64_t(sizeof(TestType)));  // each non-root receives once
  }
  if (n >= 2) {
    auto v = inputs<TestType>(0, 8);
    if (c.rank() == 0) CHECK(c.send(std::span<const TestType>(v), n - 1, 5) == 8 * std::int64_t(sizeof(TestType)));
    if (c.rank() == n - 1) {
      std::vector<TestType> got(8);
      c.recv(std::span<TestType>(got), 0, 5);
      CHECK(got == v);
    }
  }
}

TEST_CASE("a 2x2 mesh splits the world into axis groups and runs the hierarchical all-reduce", "[mpi][mesh]") {
  if (world_size() != 4) SKIP("needs 4 ranks");
  mpi_mesh_comm mc({2, 2});
  const device_mesh dm = uniform_mesh({2, 2}, link{1e-6, 1e9, "l"});
  CHECK(mc.coords() == dm.coords(mc.rank()));
  for (int a = 0; a < 2; ++a) {
    CHECK(mc.axis(a).size() == 2);
    CHECK(mc.axis(a).rank() == mc.coords()[a]);
    // each axis group reduces exactly the ranks device_mesh names
    auto g = dm.axis_group(mc.rank(), a);
    std::vector<float> buf = inputs<float>(mc.rank(), 12);
    mc.axis(a).all_reduce(std::span<float>(buf));
    CHECK(buf == summed<float>(std::vector<int>(g.begin(), g.end()), 12));
  }
  // all-gather and all-to-all on each axis: exact data and the model's bytes
  for (int a = 0; a < 2; ++a) {
    ring_comm& c = mc.axis(a);
    auto g = dm.axis_group(mc.rank(), a);
    std::vector<double> buf(8, -1.0);
    auto mine = inputs<double>(mc.rank(), 8);
    std::copy(mine.begin() + c.rank() * 4, mine.begin() + (c.rank() + 1) * 4, buf.begin() + c.rank() * 4);
    const std::int64_t ag = c.all_gather(std::span<double>(buf));
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < 4; ++i) CHECK(buf[std::size_t(k * 4 + i)] == input<double>(g[k], k * 4 + i));
    // [S(0),S(0)] -> [S(0),B] on axis 1 / [S(0),B] -> [B,B] on axis 0 move (n-1)/n of the group's part
    CHECK(ag == make_step(a == 1 ? nd_sbp{S(0), S(0)} : nd_sbp{S(0), B}, {2, 2}, a, B, a == 1 ? 128 : 64).bytes_per_device());
    std::vector<double> out(8, 0.0);
    const std::int64_t sent = c.all_to_all(std::span<const double>(mine), std::span<double>(out));
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < 4; ++i) CHECK(out[std::size_t(k * 4 + i)] == input<double>(g[k], c.rank() * 4 + i));
    CHECK(sent == boxing_step{a, S(0), S(1), collective::all_to_all, 2, 2 * 8 * 8}.bytes_per_device());
  }
  // [P,P] -> [B,B] for a [8,6] fp32 tensor: run exactly the priced path
  const boxing_path p = cheapest_boxing({{P, P}, {B, B}, {2, 2}, {8, 6}, 4});
  REQUIRE(p.size() == 3);
  std::vector<float> t = inputs<float>(mc.rank(), 48);
  std::span<float> view(t);
  std::int64_t sent = 0;
  std::int64_t offset = 0, len = 48;  // the part of the tensor the current state makes us hold
  for (const auto& s : p) {
    ring_comm& c = mc.axis(s.axis);
    auto part = view.subspan(std::size_t(offset), std::size_t(len));
    if (s.op == collective::reduce_scatter) {
      sent += c.reduce_scatter(part);
      len /= c.size();
      offset += c.rank() * len;
    } else if (s.op == collective::all_reduce) {
      sent += c.all_reduce(part);
    } else if (s.op == collective::all_gather) {
      offset -= c.rank() * len;
      len *= c.size();
      sent += c.all_gather(view.subspan(std::size_t(offset), std::size_t(len)));
    } else {
      FAIL("unexpected step " << to_string(s.op));
    }
  }
  CHECK(t == summed<float>({0, 1, 2, 3}, 48));
  CHECK(sent == p.bytes_per_device());
  CHECK(mc.bytes_sent() >= sent);
}
