// Typed models checked by the compiler: candidate lists equal the runtime ones, pins restrict
// them, boxings between pinned neighbours are listed, and a fully pinned model is priced by
// the constexpr boxing costs (the planner's paths), all in static_asserts.
#include "autoddl/search/typed.hpp"

namespace {
using namespace autoddl;

// Megatron's MLP on the innermost axis of 2x4, data parallel on axis 0, every layer pinned:
// the row-parallel linear leaves partial sums, so the all-reduce is written as box<>.
using megatron_mlp = typed_model<float, static_mesh<2, 4>, static_shape<8, 128, 256>,
    layers::layernorm<pin<"[S(0),B]">>,
    layers::linear<1024, pin<"[S(0),B]", "[B,S(1)]">>,   // column parallel: Y [S(0),S(2)]
    layers::gelu<pin<"[S(0),S(2)]">>,
    layers::linear<256, pin<"[S(0),S(2)]", "[B,S(0)]">>,  // row parallel: Y [S(0),P]
    layers::box<"[S(0),B]">,                              // all-reduce on axis 1
    layers::cross_entropy<pin<"[S(0),B]">>>;

static_assert(megatron_mlp::valid && megatron_mlp::fully_pinned);
static_assert(megatron_mlp::size == 5);
static_assert(megatron_mlp::instantiated_signatures == 5);
static_assert(megatron_mlp::layers[1].name.view() == "linear1");
// the one allowed signature of the column-parallel linear: X[S(0),B] W[B,S(1)] b[B,S(0)] -> Y[S(0),S(2)]
constexpr static_signature col = megatron_mlp::candidates<1>[std::size_t(megatron_mlp::allowed_candidates<1>[0])];
static_assert(col.inputs[0] == nd_sbp{S(0), B} && col.params[0] == nd_sbp{B, S(1)});
static_assert(col.params[1] == nd_sbp{B, S(0)} && col.output == nd_sbp{S(0), S(2)});

// the boxing is in the type: from the row-parallel linear to the loss, [S(0),P] -> [S(0),B]
static_assert(megatron_mlp::boxings.size() == 1);
static_assert(megatron_mlp::boxings[0].from == parse_layout("[S(0),P]@2x4"));
static_assert(megatron_mlp::boxings[0].to == parse_layout("[S(0),B]@2x4"));
static_assert(megatron_mlp::boxings[0].producer.view() == "linear3" && megatron_mlp::boxings[0].consumer.view() == "loss");

// priced by the compiler: the all-reduce of a [8,128,256] fp32 tensor held 2 ways (T = 512 KiB)
// over 4 devices moves 2*3/4*T = 786432 bytes per device, forward, and again for its gradient.
constexpr device_mesh dgx_2x4{{2, 4}, {autoddl::link{5e-6, 12.5e9, "ib"}, autoddl::link{2e-6, 150e9, "nvlink"}}};
static_assert(static_boxing_bytes<megatron_mlp>(dgx_2x4) == 2 * 786432);

// One vocabulary, two binding times: the compile-time candidate list is the runtime one.
constexpr static_op q_op = megatron_mlp::layers[1].op;
static_assert(signatures_v<q_op>.size() == signatures(to_op_node(q_op), q_op.mesh).size());
static_assert(signatures_v<q_op>[7].runtime() == signatures(to_op_node(q_op), q_op.mesh)[7]);

// auto layers keep every candidate; a pin is a filter on them
using searched = typed_model<float, static_mesh<2, 4>, static_shape<8, 128, 256>,
    layers::linear<1024>, layers::gelu<>, layers::linear<256, pin<"[S(0),S(2)]", "[B,S(0)]">>,
    layers::cross_entropy<>>;
static_assert(!searched::fully_pinned);
static_assert(searched::allowed_candidates<0>.size() == searched::candidates<0>.size());
static_assert(searched::allowed_candidates<2>.size() == 1);
static_assert(searched::boxings.size() == 0);  // auto neighbours: the search prices their boxings

// a VGG stage: identical convs share one static op value, hence one candidate list
using vgg_stage = typed_model<float, static_mesh<4>, static_shape<16, 64, 32, 32>,
    layers::conv2d<64, 3>, layers::relu<>, layers::conv2d<64, 3>, layers::relu<>,
    layers::max_pool<2, pin<"[S(0)]">>>;
static_assert(vgg_stage::layers[0].op == vgg_stage::layers[2].op);
static_assert(vgg_stage::layers[4].op.output == tensor_shape{16, 64, 16, 16});
static_assert(vgg_stage::allowed_candidates<4>.size() == 1);

// visit hands the compile-time signature to the callee; in a constant expression too
constexpr nd_sbp visited_output() {
  nd_sbp out;
  megatron_mlp::visit<3>(megatron_mlp::allowed_candidates<3>[0], [&](auto sig) { out = decltype(sig)::value.output; });
  return out;
}
static_assert(visited_output() == nd_sbp{S(0), P});

}  // namespace

int main() {}
