#pragma once
// nccl_comm: the AxisCommunicator of autoddl/backend/communicator.hpp over NCCL, on GPU buffers
// (spans over device memory, e.g. cuda_device::view). Same chunk convention as the MPI ring
// (autoddl/backend/mpi/ring_comm.hpp): a buffer of size() equal chunks, rank i owns chunk i, the
// collectives work in place.
//
// Bytes: each call returns, and adds to bytes_sent(), the bytes this rank sends under the ring
// algorithms NCCL runs (Thakur, Rabenseifner & Gropp 2005; the bus-bandwidth factors of
// nccl-tests PERFORMANCE.md), computed from the element count passed to the NCCL call it made,
// on a group of n ranks:
//   all_gather      ncclAllGather(sendcount)       (n-1) * sendcount * sizeof(T)
//   reduce_scatter  ncclReduceScatter(recvcount)   (n-1) * recvcount * sizeof(T)
//   all_reduce      ncclAllReduce(count)           2(n-1) * (count/n) * sizeof(T): a reduce-scatter
//                                                  then an all-gather of count/n-element chunks
//   all_to_all      ncclSend(count), n-1 times     the sum of the sends' count * sizeof(T)
//   broadcast       ncclBroadcast(count, root)     count * sizeof(T), but 0 on the chain's last
//                                                  rank, root-1 mod n (NCCL may order its ring by
//                                                  topology; the group's sum, (n-1) count sizeof(T),
//                                                  holds whatever the order)
//   send            ncclSend(count)                count * sizeof(T)
//   all_to_all_v    ncclSend(count_j) to each j != rank, in one group: the sum of count_j * sizeof(T)
// For the collectives of sbp/boxing.hpp's table these equal the cost model's bytes per device, which
// the tests check (tests/cuda/backend/nccl.cpp).
//
// Everything is queued on stream() (by default the cuda_device's stream, so collectives are
// ordered with the kernels around them); synchronize() waits.
// Failure policy: a failed NCCL or CUDA call, or misuse, aborts this communicator
// (ncclCommAbort: its queued operations stop instead of waiting for peers) and then the whole job
// (mpi::abort_job: one sentence on stderr, MPI_Abort, which in Open MPI 4.1 terminates the whole
// job, its man page says, whatever the communicator), so no peer hangs in a collective that will
// never complete. A peer's failure reaches this rank as MPI_Abort from that peer, or as an NCCL
// asynchronous error that synchronize() watches for while it waits. A communicator destroyed
// while an exception unwinds, or after an asynchronous error, is aborted rather than destroyed:
// ncclCommDestroy would wait for operations that its peers may never join.
// Host-only: compiles with g++ (with MPI's and CUDA's include paths) as well as nvcc.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "autoddl/backend/communicator.hpp"
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

/// What a variable-count all-to-all carries: activations, or the token counts sent before them.
template <class T>
concept ExchangeElement = cuda::CudaElement<T> || std::is_same_v<T, std::int64_t>;

template <ExchangeElement T>
constexpr ncclDataType_t exchange_type_v() {
  if constexpr (std::is_same_v<T, std::int64_t>) return ncclInt64;
  else return data_type_v<T>;
}

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
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    count = 0;                 // no usable GPU: every rank of this node "shares" none
    (void)cudaGetLastError();  // answered here; not a later launch's error
  }
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
    ncclComm_t made = nullptr;
    check(ncclCommInitRank(&made, size_, id, rank_), "ncclCommInitRank", group);
    comm_ = made;
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
  /// The MPI group the communicator was bootstrapped over (not owned): rank i here is rank i there.
  MPI_Comm bootstrap() const { return mpi_; }
  cudaStream_t stream() const { return stream_; }
  /// The stream later collectives are queued on (see overlapped_reducer for a second stream).
  void set_stream(cudaStream_t s) { stream_ = s; }
  /// Waits for everything queued on stream() (see wait).
  void synchronize() const { wait(stream_); }
  /// Waits for everything queued on `s`, polling this communicator's asynchronous error
  /// meanwhile: when NCCL reports one (a peer that failed on a network transport, a remote
  /// abort), aborts the communicator and the job instead of waiting forever.
  void wait(cudaStream_t s) const {
    for (;;) {
      const cudaError_t q = cudaStreamQuery(s);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) check_or_abort(q, "cudaStreamQuery (nccl_comm::wait)");
      if (comm_) {
        ncclResult_t async = ncclSuccess;
        check_or_abort(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
        if (async != ncclInProgress) check_or_abort(async, "an operation of this communicator (asynchronous error)");
      }
      std::this_thread::yield();
    }
  }
  std::int64_t bytes_sent() const { return bytes_sent_; }
  void reset_bytes() { bytes_sent_ = 0; }

  template <cuda::CudaElement T>
  std::int64_t all_gather(std::span<T> buf) {
    const std::size_t sendcount = chunk_of(buf.size(), "all-gather");
    check_or_abort(ncclAllGather(buf.data() + std::size_t(rank_) * sendcount, buf.data(), sendcount, data_type_v<T>,
                                 comm_, stream_),
                   "ncclAllGather");
    return count(std::int64_t(size_ - 1) * bytes_of<T>(sendcount));  // n-1 ring steps of one chunk
  }

  /// On return chunk rank() holds the sum; the other chunks are unspecified (as the MPI ring).
  template <cuda::CudaElement T>
  std::int64_t reduce_scatter(std::span<T> buf) {
    const std::size_t recvcount = chunk_of(buf.size(), "reduce-scatter");
    check_or_abort(ncclReduceScatter(buf.data(), buf.data() + std::size_t(rank_) * recvcount, recvcount, data_type_v<T>,
                                     ncclSum, comm_, stream_),
                   "ncclReduceScatter");
    return count(std::int64_t(size_ - 1) * bytes_of<T>(recvcount));  // n-1 ring steps of one chunk
  }

  template <cuda::CudaElement T>
  std::int64_t all_reduce(std::span<T> buf) {
    return all_reduce_with(buf, ncclSum, "ncclAllReduce");
  }

  /// Element-wise max over the group, in place (the row statistic of vocab-parallel
  /// cross-entropy); the same ring, so the same bytes, as the sum.
  template <cuda::CudaElement T>
  std::int64_t all_reduce_max(std::span<T> buf) {
    return all_reduce_with(buf, ncclMax, "ncclAllReduce (max)");
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
      fail("all-to-all got an input of " + std::to_string(in.size()) + " and an output of " + std::to_string(out.size()) +
           " elements; give both the same size");
    const std::size_t c = chunk_of(in.size(), "all-to-all");
    if (c == 0) return 0;
    const std::size_t me = std::size_t(rank_);
    check_or_abort(cudaMemcpyAsync(out.data() + me * c, in.data() + me * c, c * sizeof(T), cudaMemcpyDeviceToDevice,
                                   stream_),
                   "cudaMemcpyAsync (all-to-all, own chunk)");
    std::int64_t sent = 0;
    check_or_abort(ncclGroupStart(), "ncclGroupStart");
    for (int s = 1; s < size_; ++s) {
      const int to = (rank_ + s) % size_, from = (rank_ - s + size_) % size_;
      check_or_abort(ncclSend(in.data() + std::size_t(to) * c, c, data_type_v<T>, to, comm_, stream_),
                     "ncclSend (all-to-all)");
      sent += bytes_of<T>(c);
      check_or_abort(ncclRecv(out.data() + std::size_t(from) * c, c, data_type_v<T>, from, comm_, stream_),
                     "ncclRecv (all-to-all)");
    }
    check_or_abort(ncclGroupEnd(), "ncclGroupEnd");
    return count(sent);
  }

  /// Variable counts, as mpi::ring_comm::all_to_all_v: send_counts[j] elements of `in` (in rank
  /// order) go to rank j and recv_counts[j] arrive from it, as one group of ncclSend/ncclRecv
  /// (the counts live on the host: a dropless dispatch exchanges them first). @pre in and out do
  /// not overlap; the counts sum to the buffers' sizes.
  template <ExchangeElement T>
  std::int64_t all_to_all_v(std::span<const T> in, std::span<const std::int64_t> send_counts, std::span<T> out,
                            std::span<const std::int64_t> recv_counts) {
    const std::size_t n = std::size_t(size_);
    if (send_counts.size() != n || recv_counts.size() != n)
      fail("all-to-all-v needs one send and one receive count per rank of a group of " + std::to_string(size_));
    std::int64_t s_total = 0, r_total = 0;
    for (std::size_t j = 0; j < n; ++j) s_total += send_counts[j], r_total += recv_counts[j];
    if (s_total != std::int64_t(in.size()) || r_total != std::int64_t(out.size()))
      fail("all-to-all-v's counts sum to " + std::to_string(s_total) + " and " + std::to_string(r_total) + " for buffers of " +
           std::to_string(in.size()) + " and " + std::to_string(out.size()) + " elements; size the buffers by the counts");
    std::int64_t sent = 0, s_off = 0, r_off = 0;
    check_or_abort(ncclGroupStart(), "ncclGroupStart");
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t sc = std::size_t(send_counts[j]), rc = std::size_t(recv_counts[j]);
      if (int(j) == rank_) {
        if (sc > 0)
          check_or_abort(cudaMemcpyAsync(out.data() + r_off, in.data() + s_off, sc * sizeof(T), cudaMemcpyDeviceToDevice,
                                         stream_),
                         "cudaMemcpyAsync (all-to-all-v, own block)");
      } else {
        if (sc > 0) {
          check_or_abort(ncclSend(in.data() + s_off, sc, exchange_type_v<T>(), int(j), comm_, stream_),
                         "ncclSend (all-to-all-v)");
          sent += std::int64_t(sc * sizeof(T));
        }
        if (rc > 0)
          check_or_abort(ncclRecv(out.data() + r_off, rc, exchange_type_v<T>(), int(j), comm_, stream_),
                         "ncclRecv (all-to-all-v)");
      }
      s_off += std::int64_t(sc);
      r_off += std::int64_t(rc);
    }
    check_or_abort(ncclGroupEnd(), "ncclGroupEnd");
    return count(sent);
  }

  template <cuda::CudaElement T>
  std::int64_t broadcast(std::span<T> buf, int root) {
    check_peer(root, "broadcast root");
    const std::size_t n = buf.size();
    check_or_abort(ncclBroadcast(buf.data(), buf.data(), n, data_type_v<T>, root, comm_, stream_), "ncclBroadcast");
    const bool last_of_chain = rank_ == (root + size_ - 1) % size_;
    return count(size_ > 1 && !last_of_chain ? bytes_of<T>(n) : 0);
  }

  /// Point-to-point, queued on stream(); the peer must post the matching recv (NCCL pairs them
  /// in call order). Returns bytes sent.
  template <cuda::CudaElement T>
  std::int64_t send(std::span<const T> buf, int to) {
    check_peer(to, "send destination");
    const std::size_t n = buf.size();
    check_or_abort(ncclSend(buf.data(), n, data_type_v<T>, to, comm_, stream_), "ncclSend");
    return count(bytes_of<T>(n));
  }
  template <cuda::CudaElement T>
  void recv(std::span<T> buf, int from) {
    check_peer(from, "receive source");
    check_or_abort(ncclRecv(buf.data(), buf.size(), data_type_v<T>, from, comm_, stream_), "ncclRecv");
  }

  /// Aborts this communicator (its queued operations stop) and then the job, printing `what`.
  [[noreturn]] void fail(const std::string& what) const {
    if (comm_) (void)ncclCommAbort(comm_);  // the job ends next: nothing else will use it
    mpi::abort_job(mpi_, what);
  }
  /// fail()s naming `call` and NCCL's reason unless rc is ncclSuccess.
  void check_or_abort(ncclResult_t rc, const char* call) const {
    if (rc == ncclSuccess) return;
    fail(std::string(call) + " failed: " + ncclGetErrorString(rc) + " (" + ncclGetLastError(comm_) + ")");
  }
  /// fail()s naming `call` and CUDA's reason unless rc is cudaSuccess.
  void check_or_abort(cudaError_t rc, const char* call) const {
    if (rc == cudaSuccess) return;
    fail(std::string(call) + " failed: " + cudaGetErrorString(rc) + " (" + cudaGetErrorName(rc) + ")");
  }

 private:
  template <class T>
  static std::int64_t bytes_of(std::size_t elements) {
    return std::int64_t(elements * sizeof(T));
  }
  template <class T>
  std::int64_t all_reduce_with(std::span<T> buf, ncclRedOp_t op, const char* call) {
    const std::size_t n = buf.size();
    chunk_of(n, "all-reduce");  // the ring's chunks: n / size() elements each
    check_or_abort(ncclAllReduce(buf.data(), buf.data(), n, data_type_v<T>, op, comm_, stream_), call);
    // a reduce-scatter then an all-gather, each n-1 ring steps of one n/size() chunk
    return count(2 * std::int64_t(size_ - 1) * bytes_of<T>(n / std::size_t(size_)));
  }
  /// Destroys the communicator, or aborts it when it cannot finish cleanly: while an exception
  /// unwinds (this rank failed; its peers may wait in a collective it never joined) or after an
  /// asynchronous error. ncclCommDestroy waits for the queued operations, which then never end.
  void release() noexcept {
    if (!comm_) return;
    ncclResult_t async = ncclSuccess;
    const bool broken = ncclCommGetAsyncError(comm_, &async) != ncclSuccess ||
                        (async != ncclSuccess && async != ncclInProgress);
    if (broken || std::uncaught_exceptions() > 0) (void)ncclCommAbort(comm_);
    else (void)ncclCommDestroy(comm_);
    comm_ = nullptr;
  }
  std::int64_t count(std::int64_t sent) {
    bytes_sent_ += sent;
    return sent;
  }
  std::size_t chunk_of(std::size_t elements, const char* what) const {
    if (elements % std::size_t(size_) != 0)
      fail(std::string(what) + " of " + std::to_string(elements) + " elements over " + std::to_string(size_) +
           " ranks: the buffer must split into equal chunks; pad it to a multiple of " + std::to_string(size_));
    return elements / std::size_t(size_);
  }
  void check_peer(int r, const char* what) const {
    if (r < 0 || r >= size_)
      fail(std::string(what) + " " + std::to_string(r) + " is not in a group of " + std::to_string(size_) + " ranks");
  }

  ncclComm_t comm_ = nullptr;
  MPI_Comm mpi_ = MPI_COMM_WORLD;  // the bootstrap group (not owned): whom to abort on failure
  cudaStream_t stream_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  std::int64_t bytes_sent_ = 0;
};

static_assert(AxisCommunicator<nccl_comm>, "nccl_comm must model AxisCommunicator (float and double)");
static_assert(AxisCommunicatorFor<nccl_comm, __half> && AxisCommunicatorFor<nccl_comm, __nv_bfloat16>,
              "nccl_comm carries the half types too");

}  // namespace autoddl::nccl
