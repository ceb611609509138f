#pragma once
// nccl_comm: the AxisCommunicator of autoddl/backend/communicator.hpp over NCCL, on GPU buffers
// (spans over device memory, e.g. cuda_device::view). Same chunk convention as the MPI ring
// (autoddl/backend/mpi/ring_comm.hpp): a buffer of size() equal chunks, rank i owns chunk i, the
// collectives work in place, and each returns the bytes this rank sent, counted with the
// bus-bandwidth factors the cost model prices (nccl-tests PERFORMANCE.md; DESIGN.md's table):
//   all_gather      (n-1)/n   * T     ncclAllGather, in place (send = chunk rank())
//   reduce_scatter  (n-1)/n   * T     ncclReduceScatter, in place (recv = chunk rank())
//   all_reduce      2(n-1)/n  * T     ncclAllReduce, in place
//   all_to_all      (n-1)/n^2 * nT    grouped ncclSend/ncclRecv, own chunk by cudaMemcpyAsync
//   broadcast       T, except the rank before root in ring order (a pipelined chain)
// T = the whole buffer (n chunks), for all_to_all n * one rank's buffer.
// Everything is queued on stream() (by default the cuda_device's stream, so collectives are
// ordered with the kernels around them); call synchronize() to wait.
// Failure policy as the MPI back end: misuse or an NCCL error prints one sentence and aborts the
// whole job (a rank that throws would leave its peers hanging in the collective).
// Host-only: compiles with g++ (with MPI's and CUDA's include paths) as well as nvcc.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "autoddl/backend/cuda/types.cuh"
#include "autoddl/backend/device.hpp"
#include "autoddl/backend/mpi/c_api.hpp"
#include "autoddl/backend/mpi/error.hpp"

namespace autoddl::nccl {

template <cuda::CudaElement T>
constexpr ncclDataType_t data_type_v = std::is_same_v<T, float>    ? ncclFloat32
                                       : std::is_same_v<T, double> ? ncclFloat64
                                       : std::is_same_v<T, __half> ? ncclFloat16
                                                                   : ncclBfloat16;

/// Aborts the job of `comm` when an NCCL call failed, naming the call and NCCL's reason.
inline void check(ncclResult_t rc, const char* call, MPI_Comm comm) {
  if (rc == ncclSuccess) return;
  mpi::abort_job(comm, std::string(call) + " failed: " + ncclGetErrorString(rc) + " (" + ncclGetLastError(nullptr) + ")");
}
/// Aborts the job of `comm` when a CUDA call failed, naming the call and CUDA's reason.
inline void check(cudaError_t rc, const char* call, MPI_Comm comm) {
  if (rc == cudaSuccess) return;
  mpi::abort_job(comm, std::string(call) + " failed: " + cudaGetErrorString(rc));
}

/// Number of ranks of `comm` on this node and this rank's index among them (MPI_COMM_TYPE_SHARED).
inline std::pair<int, int> node_local_rank(MPI_Comm comm = MPI_COMM_WORLD) {
  MPI_Comm node = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type", comm);
  int r = 0, n = 1;
  MPI_Comm_rank(node, &r);
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return {r, n};
}

/// The GPU this rank should use: its node-local rank modulo the node's GPU count.
inline int local_device_ordinal(MPI_Comm comm = MPI_COMM_WORLD) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount", comm);
  if (count == 0) mpi::abort_job(comm, "no CUDA device is visible to this rank; NCCL needs one GPU per rank");
  return node_local_rank(comm).first % count;
}

/// Whether some node runs more ranks of `comm` than it has GPUs. NCCL (>= 2.5) refuses a
/// communicator with two ranks on one GPU ("Duplicate GPU detected"), so such a job cannot use
/// NCCL. Collective over `comm`.
inline bool ranks_share_a_gpu(MPI_Comm comm = MPI_COMM_WORLD) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  int mine = node_local_rank(comm).second > count ? 1 : 0, any = 0;
  mpi::check(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce", comm);
  return any != 0;
}

class nccl_comm {
 public:
  nccl_comm() = default;
  /// Collective over `group` (every rank of it calls this, with its GPU current): rank 0 makes
  /// an ncclUniqueId, MPI_Bcast hands it to the group, ncclCommInitRank joins. Rank i of the
  /// NCCL communicator is rank i of `group`.
  nccl_comm(MPI_Comm group, cudaStream_t stream) : mpi_(group), stream_(stream) {
    mpi::check(MPI_Comm_rank(group, &rank_), "MPI_Comm_rank", group);
    mpi::check(MPI_Comm_size(group, &size_), "MPI_Comm_size", group);
    ncclUniqueId id{};
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId", group);
    mpi::check(MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, group), "MPI_Bcast (ncclUniqueId)", group);
    check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank", group);
  }
  nccl_comm(const nccl_comm&) = delete;
  nccl_comm& operator=(const nccl_comm&) = delete;
  nccl_comm(nccl_comm&& o) noexcept { *this = std::move(o); }
  nccl_comm& operator=(nccl_comm&& o) noexcept {
    if (this != &o) {
      release();
      comm_ = std::exchange(o.comm_, nullptr);
      mpi_ = o.mpi_;
      stream_ = o.stream_;
      rank_ = o.rank_;
      size_ = o.size_;
      bytes_sent_ = o.bytes_sent_;
    }
    return *this;
  }
  ~nccl_comm() { release(); }

  int rank() const { return rank_; }
  int size() const { return size_; }
  ncclComm_t handle() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  /// The stream later collectives are queued on (see overlapped_reducer for a second stream).
  void set_stream(cudaStream_t s) { stream_ = s; }
  void synchronize() const { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (nccl_comm)", mpi_); }
  std::int64_t bytes_sent() const { return bytes_sent_; }
  void reset_bytes() { bytes_sent_ = 0; }

  template <cuda::CudaElement T>
  std::int64_t all_gather(std::span<T> buf) {
    const std::int64_t c = chunk_of(buf.size(), "all-gather");
    check(ncclAllGather(buf.data() + rank_ * c, buf.data(), std::size_t(c), data_type_v<T>, comm_, stream_), "ncclAllGather",
          mpi_);
    return count((size_ - 1) * c * std::int64_t(sizeof(T)));
  }

  /// On return chunk rank() holds the sum; the other chunks are unspecified (as the MPI ring).
  template <cuda::CudaElement T>
  std::int64_t reduce_scatter(std::span<T> buf) {
    const std::int64_t c = chunk_of(buf.size(), "reduce-scatter");
    check(ncclReduceScatter(buf.data(), buf.data() + rank_ * c, std::size_t(c), data_type_v<T>, ncclSum, comm_, stream_),
          "ncclReduceScatter", mpi_);
    return count((size_ - 1) * c * std::int64_t(sizeof(T)));
  }

  template <cuda::CudaElement T>
  std::int64_t all_reduce(std::span<T> buf) {
    const std::int64_t c = chunk_of(buf.size(), "all-reduce");
    check(ncclAllReduce(buf.data(), buf.data(), buf.size(), data_type_v<T>, ncclSum, comm_, stream_), "ncclAllReduce", mpi_);
    return count(2 * (size_ - 1) * c * std::int64_t(sizeof(T)));
  }

  /// Element-wise max over the group, in place (the row statistic of vocab-parallel
  /// cross-entropy); priced as an all-reduce.
  template <cuda::CudaElement T>
  std::int64_t all_reduce_max(std::span<T> buf) {
    const std::int64_t c = chunk_of(buf.size(), "all-reduce (max)");
    check(ncclAllReduce(buf.data(), buf.data(), buf.size(), data_type_v<T>, ncclMax, comm_, stream_), "ncclAllReduce (max)",
          mpi_);
    return count(2 * (size_ - 1) * c * std::int64_t(sizeof(T)));
  }

  /// Sum or element-wise max over the group, in place: the form the executor calls
  /// (AxisCommunicator, backend/communicator.hpp).
  template <cuda::CudaElement T>
  std::int64_t all_reduce(std::span<T> buf, reduce_kind op) {
    return op == reduce_kind::max ? all_reduce_max(buf) : all_reduce(buf);
  }

  /// Chunk j of `in` goes to rank j; chunk j of `out` comes from rank j. @pre in and out do not overlap.
  template <cuda::CudaElement T>
  std::int64_t all_to_all(std::span<const T> in, std::span<T> out) {
    if (in.size() != out.size())
      mpi::abort_job(mpi_, "all-to-all got an input of " + std::to_string(in.size()) + " and an output of " +
                               std::to_string(out.size()) + " elements; give both the same size");
    const std::int64_t c = chunk_of(in.size(), "all-to-all");
    if (c == 0) return 0;
    check(cudaMemcpyAsync(out.data() + rank_ * c, in.data() + rank_ * c, std::size_t(c) * sizeof(T),
                          cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync (all-to-all, own chunk)", mpi_);
    check(ncclGroupStart(), "ncclGroupStart", mpi_);
    for (int s = 1; s < size_; ++s) {
      const int to = (rank_ + s) % size_, from = (rank_ - s + size_) % size_;
      check(ncclSend(in.data() + to * c, std::size_t(c), data_type_v<T>, to, comm_, stream_), "ncclSend (all-to-all)", mpi_);
      check(ncclRecv(out.data() + from * c, std::size_t(c), data_type_v<T>, from, comm_, stream_), "ncclRecv (all-to-all)",
            mpi_);
    }
    check(ncclGroupEnd(), "ncclGroupEnd", mpi_);
    return count((size_ - 1) * c * std::int64_t(sizeof(T)));
  }

  template <cuda::CudaElement T>
  std::int64_t broadcast(std::span<T> buf, int root) {
    check_peer(root, "broadcast root");
    check(ncclBroadcast(buf.data(), buf.data(), buf.size(), data_type_v<T>, root, comm_, stream_), "ncclBroadcast", mpi_);
    const bool last_of_chain = rank_ == (root + size_ - 1) % size_;
    return count(size_ > 1 && !last_of_chain ? std::int64_t(buf.size() * sizeof(T)) : 0);
  }

  /// Point-to-point, queued on stream(); the peer must post the matching recv (NCCL pairs them
  /// in call order). Returns bytes sent.
  template <cuda::CudaElement T>
  std::int64_t send(std::span<const T> buf, int to) {
    check_peer(to, "send destination");
    check(ncclSend(buf.data(), buf.size(), data_type_v<T>, to, comm_, stream_), "ncclSend", mpi_);
    return count(std::int64_t(buf.size() * sizeof(T)));
  }
  template <cuda::CudaElement T>
  void recv(std::span<T> buf, int from) {
    check_peer(from, "receive source");
    check(ncclRecv(buf.data(), buf.size(), data_type_v<T>, from, comm_, stream_), "ncclRecv", mpi_);
  }

 private:
  void release() noexcept {
    if (comm_) (void)ncclCommDestroy(comm_);
    comm_ = nullptr;
  }
  std::int64_t count(std::int64_t sent) {
    bytes_sent_ += sent;
    return sent;
  }
  std::int64_t chunk_of(std::size_t elements, const char* what) const {
    if (elements % std::size_t(size_) != 0)
      mpi::abort_job(mpi_, std::string(what) + " of " + std::to_string(elements) + " elements over " +
                               std::to_string(size_) + " ranks: the buffer must split into equal chunks; pad it to a multiple of " +
                               std::to_string(size_));
    return std::int64_t(elements / std::size_t(size_));
  }
  void check_peer(int r, const char* what) const {
    if (r < 0 || r >= size_)
      mpi::abort_job(mpi_, std::string(what) + " " + std::to_string(r) + " is not in a group of " + std::to_string(size_) +
                               " ranks");
  }

  ncclComm_t comm_ = nullptr;
  MPI_Comm mpi_ = MPI_COMM_WORLD;  // the bootstrap group (not owned): whom to abort on misuse
  cudaStream_t stream_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  std::int64_t bytes_sent_ = 0;
};

}  // namespace autoddl::nccl
