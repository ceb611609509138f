// Compile-fail case: a table of op kinds where one kind lacks its backward FLOPs, checked by the
// check the library runs on op_kind (ops/work.hpp, every_kind_has_work_traits); the twin states
// them. The kinds are a test enum, as a new op_kind would be: the diagnostic names the kind and
// the fact.
// expect: Traits = toy_work<toy_kind::scaled_copy>.*op_work_traits<K> lacks backward_flops
#include "autoddl/ops/work.hpp"
using namespace autoddl;

enum class toy_kind { relu, scaled_copy };

template <toy_kind K>
struct toy_work;
template <>
struct toy_work<toy_kind::relu> : op_work_traits<op_kind::relu> {};
template <>
struct toy_work<toy_kind::scaled_copy> {
  static constexpr backward_reads reads{0, false};
  static constexpr auto forward_flops = detail::per_output<1>;
#ifdef AUTODDL_TWIN
  static constexpr auto backward_flops = detail::per_output<1>;
#endif
  static constexpr auto kept_bytes = detail::no_bytes;
};

static_assert(every_kind_has_work_traits<toy_kind, 2, toy_work>());
int main() {}
