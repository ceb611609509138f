#pragma once
// Float convolutions through oneDNN's direct kernels, where the build links oneDNN (meson defines
// AUTODDL_DNNL when it finds the `dnnl` pkg-config package, libdnnl-dev on Debian): forward,
// backward to the input and backward to the weights and bias, on NCHW activations and OIHW
// weights as the rest of the CPU device keeps them (oneDNN picks its blocked layouts; each call
// reorders in and out). cpu_window_primitives' conv_*_direct take this path for float where the
// output plane has at least 16 elements and AUTODDL_CONV is not `im2col`; everything else (double,
// the 2x2 planes of a VGG's last stage, where im2col and one GEMM measured faster, builds without
// oneDNN) keeps im2col + GEMM. One thread per rank, as OpenBLAS runs: each call sets the calling
// thread's OpenMP thread count to 1 for its own duration and restores it on return (oneDNN's
// OpenMP build offers no per-call limit of its own), so a program's OpenMP code around it keeps
// its thread count.
// Without AUTODDL_DNNL (or without <dnnl.hpp>) every function here answers false.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "autoddl/backend/device.hpp"

#if defined(AUTODDL_DNNL) && __has_include(<dnnl.hpp>)
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include <dnnl.hpp>
#define AUTODDL_HAS_DNNL 1
extern "C" void omp_set_num_threads(int);
extern "C" int omp_get_max_threads(void);
#else
#define AUTODDL_HAS_DNNL 0
#endif

namespace autoddl::detail {

/// Whether a float convolution of this geometry runs on oneDNN here.
inline bool dnnl_conv_wanted(const window_geom& g) {
#if AUTODDL_HAS_DNNL
  static const bool off = [] {
    const char* v = std::getenv("AUTODDL_CONV");
    return v && std::strcmp(v, "im2col") == 0;
  }();
  return !off && g.out_h() * g.out_w() >= 16;
#else
  (void)g;
  return false;
#endif
}

#if AUTODDL_HAS_DNNL
/// The three primitives of one convolution geometry, created once per thread.
struct dnnl_conv_set {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc data_pd;
  dnnl::convolution_backward_weights::primitive_desc weights_pd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights weights;
  dnnl::memory::desc x, w, b, y;  // NCHW, OIHW, the bias, NCHW
};

struct dnnl_conv_context {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, int, int>,
           std::unique_ptr<dnnl_conv_set>>
      sets;

  /// The primitives of this geometry, or null where oneDNN has none for it (the caller then takes
  /// im2col and a GEMM; a geometry is asked once per thread).
  dnnl_conv_set* get(const window_geom& g, std::int64_t o) {
    const auto key = std::make_tuple(g.n, g.c, g.h, g.w, o, g.kernel, g.stride, g.padding);
    if (const auto it = sets.find(key); it != sets.end()) return it->second.get();
    std::unique_ptr<dnnl_conv_set>& slot = sets[key];
    try {
      slot = make(g, o);
    } catch (const dnnl::error&) {
      slot.reset();
    }
    return slot.get();
  }
  std::unique_ptr<dnnl_conv_set> make(const window_geom& g, std::int64_t o) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::dims xd{g.n, g.c, g.h, g.w}, wd{o, g.c, g.kernel, g.kernel}, bd{o}, yd{g.n, o, g.out_h(), g.out_w()};
    const dnnl::memory::dims st{g.stride, g.stride}, pad{g.padding, g.padding};
    const dnnl::memory::desc xa(xd, dt::f32, tag::any), wa(wd, dt::f32, tag::any), ba(bd, dt::f32, tag::any),
        ya(yd, dt::f32, tag::any);
    const auto algo = dnnl::algorithm::convolution_direct;
    dnnl::convolution_forward::primitive_desc fpd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, xa, wa, ba, ya, st, pad, pad), eng);
    dnnl::convolution_backward_data::primitive_desc dpd(dnnl::convolution_backward_data::desc(algo, xa, wa, ya, st, pad, pad),
                                                        eng, fpd);
    dnnl::convolution_backward_weights::primitive_desc wpd(
        dnnl::convolution_backward_weights::desc(algo, xa, wa, ba, ya, st, pad, pad), eng, fpd);
    return std::unique_ptr<dnnl_conv_set>(new dnnl_conv_set{
        fpd, dpd, wpd, dnnl::convolution_forward(fpd), dnnl::convolution_backward_data(dpd),
        dnnl::convolution_backward_weights(wpd), dnnl::memory::desc(xd, dt::f32, tag::nchw),
        dnnl::memory::desc(wd, dt::f32, tag::oihw), dnnl::memory::desc(bd, dt::f32, tag::x), dnnl::memory::desc(yd, dt::f32, tag::nchw)});
  }
  /// `user` in the layout `want`: itself, or a reordered copy.
  dnnl::memory in(dnnl::memory user, const dnnl::memory::desc& want) {
    if (user.get_desc() == want) return user;
    dnnl::memory m(want, eng);
    dnnl::reorder(user, m).execute(stream, user, m);
    return m;
  }
  /// Where a primitive writes an output that ends in `user`: `user` itself or a buffer in `want`.
  dnnl::memory out(const dnnl::memory& user, const dnnl::memory::desc& want) {
    return user.get_desc() == want ? user : dnnl::memory(want, eng);
  }
  void back(dnnl::memory& got, dnnl::memory& user) {
    if (got != user) dnnl::reorder(got, user).execute(stream, got, user);
  }
};

/// One OpenMP thread for oneDNN while it lives; the calling thread's own count again after.
class one_omp_thread {
 public:
  one_omp_thread() : before_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~one_omp_thread() { omp_set_num_threads(before_); }
  one_omp_thread(const one_omp_thread&) = delete;
  one_omp_thread& operator=(const one_omp_thread&) = delete;

 private:
  int before_;
};

inline dnnl_conv_context& dnnl_conv_here() {
  thread_local dnnl_conv_context c;
  return c;
}
inline float* mutable_ptr(const float* p) { return const_cast<float*>(p); }  // oneDNN's memory takes void*

/// y = conv(x, w) + b (b may be null) on NCHW / OIHW floats; false where oneDNN does not run it.
inline bool dnnl_conv_fwd(const window_geom& g, std::int64_t o, const float* x, const float* w, const float* b, float* y) {
  const one_omp_thread one_thread;  // primitives are made and run with it
  dnnl_conv_context& c = dnnl_conv_here();
  dnnl_conv_set* set = c.get(g, o);
  if (!set) return false;
  dnnl_conv_set& s = *set;
  thread_local std::vector<float> zeros;
  if (!b) {
    zeros.assign(std::size_t(o), 0.0f);
    b = zeros.data();
  }
  dnnl::memory ux(s.x, c.eng, mutable_ptr(x)), uw(s.w, c.eng, mutable_ptr(w)), ub(s.b, c.eng, mutable_ptr(b)), uy(s.y, c.eng, y);
  dnnl::memory mx = c.in(ux, s.fwd_pd.src_desc()), mw = c.in(uw, s.fwd_pd.weights_desc()), mb = c.in(ub, s.fwd_pd.bias_desc());
  dnnl::memory my = c.out(uy, s.fwd_pd.dst_desc());
  s.fwd.execute(c.stream, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, my}});
  c.back(my, uy);
  c.stream.wait();
  return true;
}

/// dx = the input gradient of conv(x, w) given dy; false where oneDNN does not run it.
inline bool dnnl_conv_bwd_data(const window_geom& g, std::int64_t o, const float* w, const float* dy, float* dx) {
  const one_omp_thread one_thread;  // primitives are made and run with it
  dnnl_conv_context& c = dnnl_conv_here();
  dnnl_conv_set* set = c.get(g, o);
  if (!set) return false;
  dnnl_conv_set& s = *set;
  dnnl::memory uw(s.w, c.eng, mutable_ptr(w)), udy(s.y, c.eng, mutable_ptr(dy)), udx(s.x, c.eng, dx);
  dnnl::memory mw = c.in(uw, s.data_pd.weights_desc()), mdy = c.in(udy, s.data_pd.diff_dst_desc());
  dnnl::memory mdx = c.out(udx, s.data_pd.diff_src_desc());
  s.data.execute(c.stream, {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, mdx}});
  c.back(mdx, udx);
  c.stream.wait();
  return true;
}

/// dw (and db where not null) of conv(x, w) + b given dy, overwritten; false where oneDNN does not run it.
inline bool dnnl_conv_bwd_weights(const window_geom& g, std::int64_t o, const float* x, const float* dy, float* dw, float* db) {
  const one_omp_thread one_thread;  // primitives are made and run with it
  dnnl_conv_context& c = dnnl_conv_here();
  dnnl_conv_set* set = c.get(g, o);
  if (!set) return false;
  dnnl_conv_set& s = *set;
  thread_local std::vector<float> unused;
  if (!db) {
    unused.resize(std::size_t(o));
    db = unused.data();
  }
  dnnl::memory ux(s.x, c.eng, mutable_ptr(x)), udy(s.y, c.eng, mutable_ptr(dy)), udw(s.w, c.eng, dw), udb(s.b, c.eng, db);
  dnnl::memory mx = c.in(ux, s.weights_pd.src_desc()), mdy = c.in(udy, s.weights_pd.diff_dst_desc());
  dnnl::memory mdw = c.out(udw, s.weights_pd.diff_weights_desc()), mdb = c.out(udb, s.weights_pd.diff_bias_desc());
  s.weights.execute(c.stream,
                    {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_WEIGHTS, mdw}, {DNNL_ARG_DIFF_BIAS, mdb}});
  c.back(mdw, udw);
  c.back(mdb, udb);
  c.stream.wait();
  return true;
}

#else
// Without oneDNN dnnl_conv_wanted is false, so these are never reached; they keep the callers compiling.
inline bool dnnl_conv_fwd(const window_geom&, std::int64_t, const float*, const float*, const float*, float*) {
  return false;
}
inline bool dnnl_conv_bwd_data(const window_geom&, std::int64_t, const float*, const float*, float*) { return false; }
inline bool dnnl_conv_bwd_weights(const window_geom&, std::int64_t, const float*, const float*, float*, float*) {
  return false;
}
#endif

}  // namespace autoddl::detail
