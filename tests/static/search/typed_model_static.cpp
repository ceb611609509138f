// Typed models checked by the compiler: candidate lists equal the runtime ones, pins restrict
// them, boxings between pinned neighbours are listed, and a fully pinned model is priced by
// the constexpr boxing costs (the planner's paths), all in static_asserts; a LLaMA block's pins
// (grouped-query attention, SwiGLU) and its candidate counts against the per-axis tables.
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

// A LLaMA block on 2x4, attention and MLP pinned to Megatron's layouts on axis 1 with 8 query
// heads sharing 2 key/value heads: 4 tensor-parallel ways are more than 2 key/value heads, so k
// and v are replicated (KV: W[B,B]) and the core takes the grouped signature (q heads split, k
// and v whole); the rotations follow the core's pins.
using megatron_gqa = layers::gqa_attention<8, 2, true,
    pin<"[S(0),B]", "[B,S(1)]">,                 // q: column parallel
    pin<"[S(0),S(2)]", "[S(0),B]", "[S(0),B]">,  // core: q heads split, k and v whole
    pin<"[S(0),S(2)]", "[B,S(0)]">,              // o: row parallel
    pin<"[S(0),B]", "[B,B]">>;                   // k, v: replicated
using megatron_swiglu = layers::swiglu<128,
    pin<"[S(0),B]", "[B,S(1)]">,        // gate, up: column parallel
    pin<"[S(0),S(2)]", "[S(0),S(2)]">,  // the fused product on the split ffn dim
    pin<"[S(0),S(2)]", "[B,S(0)]">>;    // down: row parallel
using llama_tp = typed_model<float, static_mesh<2, 4>, static_shape<8, 16, 64>,
    layers::residual<auto_layout, layers::rmsnorm<pin<"[S(0),B]">>, megatron_gqa>,
    layers::residual<auto_layout, layers::rmsnorm<pin<"[S(0),B]">>, megatron_swiglu>,
    layers::rmsnorm<>, layers::cross_entropy<>>;

static_assert(llama_tp::valid && !llama_tp::fully_pinned);  // the adds, the last norm and the loss are searched
static_assert(llama_tp::size == 17);                        // per block 1 + 7 + 1 and 1 + 4 + 1
static_assert(llama_tp::layers[4].name.view() == "attn.q_rope" && llama_tp::layers[6].name.view() == "attn.core");
static_assert(llama_tp::layers[12].name.view() == "mlp.swiglu" && llama_tp::layers[13].name.view() == "mlp.down");
static_assert(llama_tp::layers[6].op.heads == 8 && llama_tp::layers[6].op.kv_heads == 2);
static_assert(llama_tp::layers[2].op.params[0] == tensor_shape{64, 16});  // k's W: 2 heads of 64 / 8
static_assert(llama_tp::layers[5].op.heads == 2 && llama_tp::layers[5].op.rope_theta == 500000.0);
static_assert(llama_tp::layers[0].op.eps == 1e-5 && llama_tp::layers[0].op.n_params == 1);
// every pinned op, the rotations included, has one allowed signature
static_assert(llama_tp::allowed_candidates<4>.size() == 1 && llama_tp::allowed_candidates<5>.size() == 1);
static_assert(llama_tp::allowed_candidates<12>.size() == 1);
static_assert(llama_tp::allowed_candidates<14>.size() == llama_tp::candidates<14>.size());  // the add: auto
// the pinned core: q[S(0),S(2)] k[S(0),B] v[S(0),B] -> [S(0),S(2)], 2 query heads per device
constexpr static_signature gqa_core = llama_tp::candidates<6>[std::size_t(llama_tp::allowed_candidates<6>[0])];
static_assert(llama_tp::allowed_candidates<6>.size() == 1);
static_assert(gqa_core.inputs[1] == nd_sbp{S(0), B} && gqa_core.inputs[2] == nd_sbp{S(0), B});
static_assert(gqa_core.output == nd_sbp{S(0), S(2)});
// k replicated: X[S(0),B] W[B,B] -> [S(0),B]; down leaves partial sums for the searched add
static_assert(llama_tp::candidates<2>[std::size_t(llama_tp::allowed_candidates<2>[0])].output == nd_sbp{S(0), B});
static_assert(llama_tp::candidates<13>[std::size_t(llama_tp::allowed_candidates<13>[0])].output == nd_sbp{S(0), P});
static_assert(llama_tp::boxings.size() == 0);  // pinned neighbours agree
// k split into whole key/value heads is no signature here: 2 heads cannot split 4 ways
static_assert(allowed_v<llama_tp::layers[6].op, detail::spec_of<pin<"[S(0),S(2)]", "[S(0),S(2)]">>::value>.size() == 0);

// Candidate counts on one axis of 2, from the per-axis tables (ops/*.hpp), for a LLaMA of
// hidden 32, 4 query heads, 2 key/value heads, ffn 64 (every split divides):
//   linear without bias  X S(0) W B, X S(1) W B, X S(2) W S(0) -> P, X B W S(1), X B W B,
//                        X P W B, X B W P                                             7
//   rmsnorm              X S(0), S(1), B (never the normed dim, never P)              3
//   rotary               S(0), S(1), S(2), B, P                                       5
//   attention (grouped)  batch, heads, q heads with k v whole, query sequence, B      5
//   add                  S(0), S(1), S(2), B, P + P                                   5
//   swiglu               S(0), S(1), S(2), B, gate B up P                             5
//   cross_entropy        4 (the typed MLP's loss above, same rule)
// A block: 3 + 3 * 7 + 2 * 5 + 5 + 7 + 5 + 3 + 2 * 7 + 5 + 7 + 5 = 85.
using llama_auto = typed_model<float, static_mesh<2>, static_shape<4, 8, 32>,
    layers::repeat<2, layers::residual<auto_layout, layers::rmsnorm<>, layers::gqa_attention<4, 2>>,
                      layers::residual<auto_layout, layers::rmsnorm<>, layers::swiglu<64>>>,
    layers::rmsnorm<>, layers::cross_entropy<>>;
static_assert(llama_auto::candidates<1>.size() == 7 && llama_auto::candidates<0>.size() == 3);
static_assert(llama_auto::candidates<4>.size() == 5 && llama_auto::candidates<6>.size() == 5);
static_assert(llama_auto::candidates<8>.size() == 5 && llama_auto::candidates<12>.size() == 5);
static_assert(llama_auto::candidates<13>.size() == 7 && llama_auto::candidates<31>.size() == 4);
static_assert(llama_auto::instantiated_signatures == 2 * 85 + 3 + 4);
static_assert(llama_auto::layers[21].name.view() == "h1.attn.core" && llama_auto::layers[21].op.kv_heads == 2);
// as many key/value heads as query heads is multi-head attention: kv_heads 0, as graphs write it
using mha = typed_model<float, static_mesh<2>, static_shape<4, 8, 32>, layers::gqa_attention<4>>;
static_assert(mha::layers[5].op.kv_heads == 0 && mha::layers[4].op.heads == 4);
// silu alone: the pointwise rule (S(0), S(1), B on [4, 8]; never P)
using silu_only = typed_model<float, static_mesh<2>, static_shape<4, 8>, layers::silu<>>;
static_assert(silu_only::layers[0].name.view() == "silu0" && silu_only::candidates<0>.size() == 3);
// identical blocks share their static ops, hence their candidate lists
static_assert(llama_auto::layers[6].op == llama_auto::layers[21].op);

}  // namespace

int main() {}
