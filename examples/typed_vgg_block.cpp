// A typed VGG stage whose layouts the compiler checks: conv, relu, conv, relu, max-pool.
//
// Mesh 8 (one node of 8 GPUs). The first conv splits its output channels (W[S(0)] -> Y[S(1)]),
// the second contracts over them (X[S(1)] W[S(1)] -> Y[P]): its partial sums must be reduced
// before the nonlinear ReLU, and the model says so in its type with box<"[S(0)]">, a
// reduce-scatter onto the batch. Remove the box and the build fails, naming both layers, both
// layouts and this fix (docs/errors.md).
#include <autoddl/models/typed.hpp>

#include <cstdio>
#include <string>

using namespace autoddl;

using vgg_stage = typed_model<float, static_mesh<8>, static_shape<32, 64, 56, 56>,
    layers::conv2d<128, 3, pin<"[B]", "[S(0)]">>,   // out-channel split: Y[S(1)]
    layers::relu<pin<"[S(1)]">>,
    layers::conv2d<128, 3, pin<"[S(1)]", "[S(1)]">>,  // in-channel split: Y[P]
    layers::box<"[S(0)]">,                            // reduce-scatter onto the batch
    layers::relu<pin<"[S(0)]">>,
    layers::max_pool<2, pin<"[S(0)]">>>;

static_assert(vgg_stage::fully_pinned);
static_assert(vgg_stage::boxings.size() == 1);
static_assert(vgg_stage::layers[4].op.output == tensor_shape{32, 128, 28, 28});

int main() {
  for (std::size_t i = 0; i < vgg_stage::size; ++i)
    std::printf("%-6s -> %s\n", std::string(vgg_stage::layers[i].name.view()).c_str(),
                to_string(vgg_stage::layers[i].op.output).c_str());
  for (const auto& b : vgg_stage::boxings)
    std::printf("boxing %s -> %s: %s -> %s of %s\n", std::string(b.producer.view()).c_str(),
                std::string(b.consumer.view()).c_str(), to_string(b.from).c_str(), to_string(b.to).c_str(),
                to_string(b.shape).c_str());
}
