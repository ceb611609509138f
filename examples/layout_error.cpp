// A layout error caught by the compiler (built as a compile-fail test with its twin).
//
// Megatron's MLP, pinned: the row-parallel linear leaves partial sums on axis 1 ([S(0),P]), and
// the residual add is pinned to [S(0),B]. The all-reduce between them is communication, and
// autoddl never inserts communication silently, so g++ stops with
//   In instantiation of 'struct autoddl::detail::pinned_layouts_need_boxing<text{"linear3"},
//       text{"add4"}, text{"[S(0),P]@2x4"}, text{"[S(0),B]@2x4"},
//       text{"box<\"[S(0),B]\"> (all-reduce axis 1)"}>'
//   error: static assertion failed: autoddl: pinned neighbours disagree on the layout of the
//       tensor between them, and a boxing is never implicit; insert the box<...> named ...
// The fix (compiled with -DAUTODDL_TWIN) writes box<"[S(0),B]"> where the all-reduce runs.
// expect: pinned_layouts_need_boxing<.*"linear3".*"add4".*"\[S\(0\),P\]@2x4".*"\[S\(0\),B\]@2x4".*box<\\"\[S\(0\),B\]\\"> \(all-reduce axis 1\)
#include <autoddl/models/typed.hpp>

#include <cstdio>

using namespace autoddl;

using mlp = typed_model<float, static_mesh<2, 4>, static_shape<8, 128, 256>,
    layers::residual<pin<"[S(0),B]">,
        layers::layernorm<pin<"[S(0),B]">>,
        layers::linear<1024, pin<"[S(0),B]", "[B,S(1)]">>,   // column parallel
        layers::gelu<pin<"[S(0),S(2)]">>,
        layers::linear<256, pin<"[S(0),S(2)]", "[B,S(0)]">>  // row parallel: [S(0),P]
#ifdef AUTODDL_TWIN
        , layers::box<"[S(0),B]">                            // the all-reduce, written
#endif
    >>;

int main() {
  for (const auto& b : mlp::boxings)
    std::printf("%s -> %s: %s -> %s\n", std::string(b.producer.view()).c_str(), std::string(b.consumer.view()).c_str(),
                to_string(b.from).c_str(), to_string(b.to).c_str());
}
