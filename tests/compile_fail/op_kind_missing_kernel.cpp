// Compile-fail case: a table of op kinds where one kind lacks its forward kernel (it would
// otherwise fall through to some other kernel and train as the wrong function), checked by the
// check the library runs on op_kind (runtime/op_kernels.hpp, every_kind_has_kernel_traits); the
// twin gives it one.
// expect: Traits = toy_kernels<toy_kind::reshape>.*op_kernel_traits<K> lacks forward
#include "autoddl/runtime/op_kernels.hpp"
using namespace autoddl;

enum class toy_kind { relu, reshape };

template <toy_kind K>
struct toy_kernels;
template <>
struct toy_kernels<toy_kind::relu> : op_kernel_traits<op_kind::relu> {};
template <>
struct toy_kernels<toy_kind::reshape> {
#ifdef AUTODDL_TWIN
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) { return detail::reshape_fwd(d, c, in); };
#endif
  static constexpr auto backward = [](auto& d, const auto& c, const auto&, const auto&, auto dy) {
    return detail::reshape_bwd(d, c, dy);
  };
};

static_assert(every_kind_has_kernel_traits<toy_kind, 2, toy_kernels>());
int main() {}
