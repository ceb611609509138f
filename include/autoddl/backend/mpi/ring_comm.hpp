#pragma once
// Ring collectives over one MPI communicator (one mesh axis), built from MPI_Sendrecv, each
// counting the bytes this rank sends so that, for the boxing the cost model prices,
// bytes sent == boxing_step::bytes_per_device() exactly. Algorithms (Thakur, Rabenseifner &
// Gropp 2005, "Optimization of collective communication operations in MPICH"):
//   all-gather       ring, n-1 steps, sends (n-1) chunks          = (n-1)/n   * T
//   reduce-scatter   ring, n-1 steps, sends (n-1) chunks, sums     = (n-1)/n   * T
//   all-reduce       reduce-scatter then all-gather                = 2(n-1)/n  * T
//   all-to-all       pairwise exchange, n-1 steps, one block each  = (n-1)/n^2 * T
//   all-to-all-v     MPI_Ialltoallv, variable counts per peer      = sum over peers j != rank of count_j
// where T is the whole buffer (n chunks) for the first three and n * (one rank's buffer) for
// all-to-all. Chunk convention: a buffer of n equal chunks, rank i of the group owns chunk i.
// Sums run in a fixed order per chunk, so integer-valued floats come out exact. Every wait
// for a peer goes through wait_all (backend/mpi/wait.hpp), which sleeps between polls.
#include "autoddl/backend/mpi/c_api.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "autoddl/backend/cpu/half_types.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/backend/mpi/error.hpp"
#include "autoddl/backend/mpi/wait.hpp"

namespace autoddl::mpi {

/// The element types the collectives move: float, double and the 16-bit storage types, which
/// travel as 16-bit words and are summed here, each addition rounded as a 16-bit store is.
template <class T>
concept MpiElement = std::is_same_v<T, float> || std::is_same_v<T, double> || is_half_float_v<T>;

/// What a variable-count all-to-all carries: activations, or the token counts exchanged before them.
template <class T>
concept MpiExchangeElement = MpiElement<T> || std::is_same_v<T, std::int64_t>;

template <MpiExchangeElement T>
inline MPI_Datatype datatype_of() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else return MPI_UINT16_T;
}

/// One communicator (one mesh axis, or the world) with byte-counting ring collectives.
/// Owns (and frees) the communicator it is given when `owned` is true.
class ring_comm {
 public:
  ring_comm() = default;
  explicit ring_comm(MPI_Comm comm, bool owned = false) : comm_(comm), owned_(owned) {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", comm_);
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", comm_);
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", comm_);
  }
  ring_comm(const ring_comm&) = delete;
  ring_comm& operator=(const ring_comm&) = delete;
  ring_comm(ring_comm&& o) noexcept { *this = std::move(o); }
  ring_comm& operator=(ring_comm&& o) noexcept {
    if (this != &o) {
      release();
      comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
      owned_ = std::exchange(o.owned_, false);
      rank_ = o.rank_;
      size_ = o.size_;
      bytes_sent_ = o.bytes_sent_;
      scratch_ = std::move(o.scratch_);
    }
    return *this;
  }
  ~ring_comm() { release(); }

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm handle() const { return comm_; }
  /// Bytes this rank has sent through this communicator since construction or reset.
  std::int64_t bytes_sent() const { return bytes_sent_; }
  void reset_bytes() { bytes_sent_ = 0; }

  /// In place: on entry chunk rank() of `buf` holds this rank's part; on return every chunk
  /// holds its owner's part. @pre buf.size() divisible by size(). Returns bytes sent.
  template <MpiElement T>
  std::int64_t all_gather(std::span<T> buf) {
    const std::int64_t c = chunk_of(buf.size(), "all-gather");
    const int n = size_, right = (rank_ + 1) % n, left = (rank_ + n - 1) % n;
    std::int64_t sent = 0;
    for (int s = 0; s < n - 1; ++s) {
      const int out = (rank_ - s + n) % n, in = (rank_ - s - 1 + 2 * n) % n;
      sendrecv(buf.data() + out * c, right, buf.data() + in * c, left, c);
      sent += c * std::int64_t(sizeof(T));
    }
    return count(sent);
  }

  /// In place: on entry every chunk of `buf` holds this rank's addend; on return chunk rank()
  /// holds the sum (or the maximum, for reduce_kind::max) over the group (other chunks hold
  /// partial results). Returns bytes sent.
  template <MpiElement T>
  std::int64_t reduce_scatter(std::span<T> buf, reduce_kind op = reduce_kind::sum) {
    const std::int64_t c = chunk_of(buf.size(), "reduce-scatter");
    const int n = size_, right = (rank_ + 1) % n, left = (rank_ + n - 1) % n;
    T* tmp = scratch<T>(n > 1 ? c : 0);
    std::int64_t sent = 0;
    for (int s = 0; s < n - 1; ++s) {
      const int out = (rank_ - s - 1 + 2 * n) % n, in = (rank_ - s - 2 + 2 * n) % n;
      sendrecv(buf.data() + out * c, right, tmp, left, c);
      T* dst = buf.data() + in * c;
      if (op == reduce_kind::max)
        for (std::int64_t k = 0; k < c; ++k) dst[k] = dst[k] < tmp[k] ? tmp[k] : dst[k];
      else
        for (std::int64_t k = 0; k < c; ++k) dst[k] += tmp[k];
      sent += c * std::int64_t(sizeof(T));
    }
    return count(sent);
  }

  /// In place: on return every rank holds the element-wise sum (or maximum). Returns bytes sent.
  template <MpiElement T>
  std::int64_t all_reduce(std::span<T> buf, reduce_kind op = reduce_kind::sum) {
    (void)chunk_of(buf.size(), "all-reduce");
    const std::int64_t a = reduce_scatter(buf, op);
    return a + all_gather(buf);
  }

  /// Pairwise exchange: chunk j of `in` goes to rank j, chunk j of `out` comes from rank j.
  /// @pre in.size() == out.size(), divisible by size(). Returns bytes sent.
  template <MpiElement T>
  std::int64_t all_to_all(std::span<const T> in, std::span<T> out) {
    if (in.size() != out.size())
      abort_job(comm_, "all-to-all got an input of " + std::to_string(in.size()) + " and an output of " +
                           std::to_string(out.size()) + " elements; give both the same size");
    const std::int64_t c = chunk_of(in.size(), "all-to-all");
    const int n = size_;
    std::copy(in.begin() + rank_ * c, in.begin() + (rank_ + 1) * c, out.begin() + rank_ * c);
    std::int64_t sent = 0;
    for (int s = 1; s < n; ++s) {
      const int to = (rank_ + s) % n, from = (rank_ - s + n) % n;
      sendrecv(in.data() + to * c, to, out.data() + from * c, from, c);
      sent += c * std::int64_t(sizeof(T));
    }
    return count(sent);
  }

  /// Variable counts (MPI_Ialltoallv): the first send_counts[0] elements of `in` go to rank 0,
  /// the next send_counts[1] to rank 1, ...; `out` receives recv_counts[j] elements from rank j,
  /// in rank order. A dropless expert dispatch carries exactly its routed tokens this way.
  /// Example on 2 ranks: rank 0 sends {a | b c}, rank 1 {d e | f}; rank 0 gets {a | d e}.
  /// @pre in.size() == sum(send_counts), out.size() == sum(recv_counts), each count < 2^31.
  /// Returns the bytes sent to other ranks (its own block is a local copy).
  template <MpiExchangeElement T>
  std::int64_t all_to_all_v(std::span<const T> in, std::span<const std::int64_t> send_counts, std::span<T> out,
                            std::span<const std::int64_t> recv_counts) {
    if (send_counts.size() != std::size_t(size_) || recv_counts.size() != std::size_t(size_))
      abort_job(comm_, "all-to-all-v needs one send and one receive count per rank of a group of " +
                           std::to_string(size_) + ", got " + std::to_string(send_counts.size()) + " and " +
                           std::to_string(recv_counts.size()));
    const auto n = static_cast<std::size_t>(size_);
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    std::int64_t s_off = 0, r_off = 0, sent = 0;
    for (int j = 0; j < size_; ++j) {
      sc[std::size_t(j)] = count_of(send_counts[std::size_t(j)], comm_);
      rc[std::size_t(j)] = count_of(recv_counts[std::size_t(j)], comm_);
      sd[std::size_t(j)] = count_of(s_off, comm_);
      rd[std::size_t(j)] = count_of(r_off, comm_);
      s_off += send_counts[std::size_t(j)];
      r_off += recv_counts[std::size_t(j)];
      if (j != rank_) sent += send_counts[std::size_t(j)] * std::int64_t(sizeof(T));
    }
    if (s_off != std::int64_t(in.size()) || r_off != std::int64_t(out.size()))
      abort_job(comm_, "all-to-all-v got " + std::to_string(in.size()) + " elements to send and room for " +
                           std::to_string(out.size()) + ", but its counts sum to " + std::to_string(s_off) + " and " +
                           std::to_string(r_off) + "; size the buffers by the counts");
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Ialltoallv(in.data(), sc.data(), sd.data(), datatype_of<T>(), out.data(), rc.data(), rd.data(),
                         datatype_of<T>(), comm_, &r),
          "MPI_Ialltoallv", comm_);
    check(wait_one(r, sent), "MPI_Alltoallv", comm_);
    return count(sent);
  }

  /// Binomial-tree broadcast of `buf` from `root` (Thakur et al. 2005:
  /// ceil(log2 n) steps). Returns bytes this rank sent.
  template <MpiElement T>
  std::int64_t broadcast(std::span<T> buf, int root) {
    check_peer(root, "broadcast root");
    const int n = size_, me = (rank_ - root + n) % n;
    const int cnt = count_of(std::int64_t(buf.size()), comm_);
    std::int64_t sent = 0;
    int mask = 1;
    while (mask < n) {
      if (me & mask) {
        receive(buf.data(), cnt, datatype_of<T>(), ((me - mask) + root) % n, tag_bcast, "MPI_Recv (broadcast)");
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
      if (me + mask < n) {
        transmit(buf.data(), cnt, datatype_of<T>(), (me + mask + root) % n, tag_bcast, "MPI_Send (broadcast)");
        sent += std::int64_t(buf.size() * sizeof(T));
      }
    return count(sent);
  }

  template <MpiElement T>
  std::int64_t send(std::span<const T> buf, int to, int tag = 0) {
    check_peer(to, "send destination");
    transmit(buf.data(), count_of(std::int64_t(buf.size()), comm_), datatype_of<T>(), to, tag, "MPI_Send");
    return count(std::int64_t(buf.size() * sizeof(T)));
  }

  /// A send in flight (isend): its buffer must stay untouched until wait(request) or a true
  /// test(request). Move-only; a request never waited is waited by its destructor.
  class send_request {
   public:
    send_request() = default;
    send_request(MPI_Request r, std::int64_t bytes) : request_(r), bytes_(bytes) {}
    send_request(const send_request&) = delete;
    send_request& operator=(const send_request&) = delete;
    send_request(send_request&& o) noexcept : request_(std::exchange(o.request_, MPI_REQUEST_NULL)), bytes_(o.bytes_) {}
    send_request& operator=(send_request&& o) noexcept {
      if (this != &o) {
        finish();
        request_ = std::exchange(o.request_, MPI_REQUEST_NULL);
        bytes_ = o.bytes_;
      }
      return *this;
    }
    ~send_request() { finish(); }
    /// Whether the send has completed (the buffer may be reused or freed).
    bool test() {
      int done = 1;
      if (request_ != MPI_REQUEST_NULL) MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
      return done != 0;
    }
    void wait() { finish(); }

   private:
    void finish() {
      if (request_ != MPI_REQUEST_NULL) wait_one(request_, bytes_);
      request_ = MPI_REQUEST_NULL;
    }
    MPI_Request request_ = MPI_REQUEST_NULL;
    std::int64_t bytes_ = 0;  ///< the message's, for wait_one's polling
  };

  /// Starts sending `buf` to rank `to` and returns at once (MPI_Isend), counting its bytes; a
  /// pipeline's sends between stages never block, so no order of blocking receives can deadlock
  /// on them.
  template <MpiElement T>
  send_request isend(std::span<const T> buf, int to, int tag = 0) {
    check_peer(to, "send destination");
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Isend(buf.data(), count_of(std::int64_t(buf.size()), comm_), datatype_of<T>(), to, tag, comm_, &r),
          "MPI_Isend", comm_);
    const std::int64_t bytes = count(std::int64_t(buf.size() * sizeof(T)));
    return send_request(r, bytes);
  }

  template <MpiElement T>
  void recv(std::span<T> buf, int from, int tag = 0) {
    check_peer(from, "receive source");
    receive(buf.data(), count_of(std::int64_t(buf.size()), comm_), datatype_of<T>(), from, tag, "MPI_Recv");
  }

  void barrier() const { check(mpi::barrier(comm_), "MPI_Barrier", comm_); }

 private:
  static constexpr int tag_ring = 7301;
  static constexpr int tag_bcast = 7302;

  void release() {
    if (owned_ && comm_ != MPI_COMM_NULL) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Comm_free(&comm_);
    }
    comm_ = MPI_COMM_NULL;
    owned_ = false;
  }
  /// A receive buffer of `elements` kept between calls: a fresh one per call would page-fault
  /// its whole size every time (tens of ms per 64 MiB), which is not the collective's cost.
  template <MpiElement T>
  T* scratch(std::int64_t elements) {
    const std::size_t bytes = std::size_t(elements) * sizeof(T);
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return reinterpret_cast<T*>(scratch_.data());
  }
  std::int64_t count(std::int64_t sent) {
    bytes_sent_ += sent;
    return sent;
  }
  std::int64_t chunk_of(std::size_t elements, const char* what) const {
    if (elements % std::size_t(size_) != 0)
      abort_job(comm_, std::string(what) + " of " + std::to_string(elements) + " elements over " + std::to_string(size_) +
                           " ranks: the buffer must split into equal chunks; pad it to a multiple of " +
                           std::to_string(size_));
    return std::int64_t(elements / std::size_t(size_));
  }
  void check_peer(int r, const char* what) const {
    if (r < 0 || r >= size_)
      abort_job(comm_, std::string(what) + " " + std::to_string(r) + " is not in a group of " + std::to_string(size_) +
                           " ranks");
  }
  template <MpiElement T>
  void sendrecv(const T* out, int to, T* in, int from, std::int64_t c) {
    const int cnt = count_of(c, comm_);
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    check(MPI_Irecv(in, cnt, datatype_of<T>(), from, tag_ring, comm_, &r[0]), "MPI_Irecv (sendrecv)", comm_);
    check(MPI_Isend(out, cnt, datatype_of<T>(), to, tag_ring, comm_, &r[1]), "MPI_Isend (sendrecv)", comm_);
    check(wait_all(r, c * std::int64_t(sizeof(T))), "MPI_Sendrecv", comm_);
  }
  /// MPI_Send and MPI_Recv, waiting through wait_one.
  void transmit(const void* buf, int cnt, MPI_Datatype type, int to, int tag, const char* what) {
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Isend(buf, cnt, type, to, tag, comm_, &r), what, comm_);
    check(wait_one(r, std::int64_t(cnt) * type_size(type)), what, comm_);
  }
  void receive(void* buf, int cnt, MPI_Datatype type, int from, int tag, const char* what) {
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Irecv(buf, cnt, type, from, tag, comm_, &r), what, comm_);
    check(wait_one(r, std::int64_t(cnt) * type_size(type)), what, comm_);
  }
  static std::int64_t type_size(MPI_Datatype type) {
    int s = 0;
    MPI_Type_size(type, &s);
    return s;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
  std::int64_t bytes_sent_ = 0;
  std::vector<std::byte> scratch_;  // holds doubles or floats; new'd storage, suitably aligned
};

}  // namespace autoddl::mpi
