#include <chrono>
#include <cmath>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/models.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace {
bool near(double got, double want, double rel) { return std::abs(got - want) <= rel * std::abs(want); }
}  // namespace

TEST_CASE("every model builds and validates at several sizes", "[models]") {
  for (const char* spec : {"gpt", "gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128", "gpt:size=gpt2-medium",
                           "gpt:size=gpt2-xl,batch=1", "gpt:size=gpt3-175b", "bert", "bert:size=bert-large",
                           "bert:layers=1,hidden=16,heads=2,seq=8,batch=2,vocab=40", "vgg11", "vgg13", "vgg16", "vgg19",
                           "vgg16:image=32,classes=10", "mlp", "mlp:layers=1,hidden=8,batch=4,in=6,out=3"}) {
    INFO(spec);
    graph g = build_model(spec);
    CHECK_NOTHROW(validate(g));
    CHECK(g.ops[std::size_t(g.loss_op)].kind == op_kind::cross_entropy);
  }
  CHECK(model_names() == std::vector<std::string>{"gpt", "bert", "llama", "vgg11", "vgg13", "vgg16", "vgg19", "mlp"});
}

TEST_CASE("LLaMA-family parameter counts match the published figures and the closed form", "[models][params][llama]") {
  // untied: 2 V H; per layer: q H A d, k and v H G d each, o A d H, gate, up, down H F each, two
  // norms of H; (Qwen2) q, k, v biases A d + 2 G d; a final norm of H
  auto closed = [](std::int64_t L, std::int64_t H, std::int64_t A, std::int64_t G, std::int64_t F, std::int64_t V,
                   bool bias) {
    const std::int64_t d = H / A;
    return 2 * V * H + L * (2 * H * A * d + 2 * H * G * d + 3 * H * F + 2 * H + (bias ? A * d + 2 * G * d : 0)) + H;
  };
  CHECK(param_count(build_model("llama:size=llama3-8b")) == 8'030'261'248);  // Meta-Llama-3-8B
  CHECK(param_count(build_model("llama:size=llama3-8b")) == closed(32, 4096, 32, 8, 14336, 128256, false));
  CHECK(param_count(build_model("llama:size=llama3-70b")) == 70'553'706'496);
  CHECK(param_count(build_model("llama:size=llama3-70b")) == closed(80, 8192, 64, 8, 28672, 128256, false));
  CHECK(param_count(build_model("llama:size=llama3-405b")) == 405'853'388'800);
  CHECK(param_count(build_model("llama:size=llama3-405b")) == closed(126, 16384, 128, 8, 53248, 128256, false));
  CHECK(param_count(build_model("llama:size=mistral-7b")) == 7'241'732'096);
  CHECK(param_count(build_model("llama:size=mistral-7b")) == closed(32, 4096, 32, 8, 14336, 32000, false));
  CHECK(param_count(build_model("llama:size=qwen2-7b")) == 7'615'616'512);
  CHECK(param_count(build_model("llama:size=qwen2-7b")) == closed(28, 3584, 28, 4, 18944, 152064, true));
  // tied: one V H table; Qwen3's per-head q and k norms add 2 d per layer
  CHECK(param_count(build_model("llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=96,vocab=96,tied=1,qk_norm=1")) ==
        closed(2, 64, 4, 2, 96, 96, false) - 96 * 64 + 2 * 2 * 16);
  // head_dim beyond hidden / heads (Qwen3-0.6B's 16 heads of 128 on hidden 1024)
  const std::int64_t H = 64, A = 4, G = 2, D = 32, F = 96, V = 96;
  CHECK(param_count(build_model("llama:layers=1,hidden=64,heads=4,kv_heads=2,ffn=96,vocab=96,head_dim=32")) ==
        2 * V * H + (H * A * D + 2 * H * G * D + A * D * H + 3 * H * F + 2 * H) + H);
}

TEST_CASE("LLaMA-family specs refuse what makes no model, naming the value", "[models][llama][errors]") {
  CHECK_THROWS_WITH(build_model("llama:layers=2,hidden=64,heads=4,kv_heads=3,ffn=96,vocab=96"),
                    ContainsSubstring("kv_heads=3 does not divide heads=4"));
  CHECK_THROWS_WITH(build_model("llama:layers=2,hidden=66,heads=4,ffn=96,vocab=96"),
                    ContainsSubstring("heads=4 does not divide hidden=66"));
  CHECK_THROWS_WITH(build_model("llama:layers=2,hidden=60,heads=4,ffn=96,vocab=96"),
                    ContainsSubstring("the head size 15 is odd"));
  CHECK_THROWS_WITH(build_model("llama:size=llama4"), ContainsSubstring("unknown size 'llama4'; valid sizes: llama3-8b"));
  CHECK_THROWS_WITH(build_model("llama:tied=2"), ContainsSubstring("tied=2 is not 0 or 1"));
  // heads alone: multi-head attention (kv_heads = heads), not the preset's 8 key/value heads
  CHECK_NOTHROW(build_model("llama:layers=1,hidden=64,heads=4,ffn=96,vocab=96"));
}

TEST_CASE("parameter counts match the published figures", "[models][params]") {
  CHECK(param_count(build_model("vgg16")) == 138'357'544);  // torchvision vgg16
  CHECK(param_count(build_model("vgg11")) == 132'863'336);
  CHECK(param_count(build_model("vgg13")) == 133'047'848);
  CHECK(param_count(build_model("vgg19")) == 143'667'240);
  // width=16 at image 32: convs 3->16->32->64->64->128 x4 (9 c_in c_out + c_out each), then
  // fc 128->32, 32->32, 32->16 (c_in c_out + c_out)
  auto conv = [](std::int64_t ci, std::int64_t co) { return 9 * ci * co + co; };
  auto fc = [](std::int64_t ci, std::int64_t co) { return ci * co + co; };
  CHECK(param_count(build_model("vgg11:image=32,classes=16,batch=8,fc=32,width=16")) ==
        conv(3, 16) + conv(16, 32) + conv(32, 64) + conv(64, 64) + conv(64, 128) + 3 * conv(128, 128) + fc(128, 32) +
            fc(32, 32) + fc(32, 16));
  CHECK(param_count(build_model("gpt:size=gpt2")) == 124'439'808);  // GPT-2 small, tied embeddings
  CHECK(param_count(build_model("gpt:size=gpt2-medium")) == 354'823'168);
  // GPT-3 175B (Brown et al. 2020): 96 x (12 h^2 + 13 h) + (50257 + 2048) h + 2 h
  std::int64_t gpt3 = param_count(build_model("gpt:size=gpt3-175b"));
  CHECK(gpt3 == 96LL * (12LL * 12288 * 12288 + 13 * 12288) + (50257LL + 2048) * 12288 + 2 * 12288);
  CHECK(near(double(gpt3), 174.6e9, 0.001));
  // HF BertForMaskedLM bert-base-uncased has 109,514,298, of which 2 x 768 are token types we omit
  CHECK(param_count(build_model("bert")) == 109'514'298 - 2 * 768);
  CHECK(param_count(build_model("mlp:layers=3,hidden=256,in=784,out=10")) ==
        784 * 256 + 256 + 2 * (256 * 256 + 256) + 256 * 10 + 10);
}

TEST_CASE("tied embeddings are one parameter used by two ops", "[models][params]") {
  graph g = build_model("gpt:layers=1,hidden=16,heads=2,seq=8,batch=2,vocab=40");
  int users = 0;
  for (const op_node& op : g.ops)
    for (int id : op.param_ids) users += g.params[std::size_t(id)].name == "wte";
  CHECK(users == 2);
}

TEST_CASE("forward FLOPs match the published formulas", "[models][flops]") {
  // VGG-16: ~15.5 GMACs per 224x224 image, i.e. ~31 GFLOPs (15.47e9 MACs in conv + fc layers)
  double vgg = forward_flops(build_model("vgg16:batch=1"));
  CHECK(near(vgg, 2 * 15.47e9, 0.01));
  // Transformer: 2 * (non-embedding params + vocab * hidden) * tokens + 4 * layers * batch * seq^2 * hidden
  // (Kaplan et al. 2020, C_forward = 2N + 2 n_layer n_ctx d_attn per token; the logit layer as
  // in Narayanan et al. 2021), within 1.5 % for the element-wise work they leave out. A causal
  // attention (GPT's) computes the fused kernel's tiles of 64 queries x 64 keys on and below the
  // diagonal: with n = s / 64 tiles a side, n (n + 1) / 2 of n^2, so its term is
  // scaled by (n + 1) / (2 n); BERT's full attention computes the whole square.
  for (const char* spec : {"gpt:size=gpt2,batch=4", "gpt:size=gpt3-175b,batch=1", "bert:batch=2"}) {
    INFO(spec);
    graph g = build_model(spec);
    const tensor_shape& tok = g.inputs[0];
    double b = double(tok[0]), s = double(tok[1]);
    const op_node& emb = g.ops[0];
    double V = double(emb.params[0][0]), h = double(emb.params[0][1]);
    double layers = 0;
    bool causal = false;
    for (const op_node& op : g.ops)
      if (op.kind == op_kind::attention) {
        ++layers;
        causal = op.attrs.causal;
      }
    const double n = s / 64, square = causal ? (n + 1) / (2 * n) : 1.0;
    double nonembed = double(param_count(g)) - V * h - s * h;
    double want = 2 * (nonembed + V * h) * b * s + 4 * layers * b * s * s * h * square;
    CHECK(near(forward_flops(g), want, 0.015));
    CHECK(backward_flops(g) > 1.9 * forward_flops(g));
  }
}

TEST_CASE("model FLOPs per token are PaLM's count, as published MFU figures use it", "[models][flops]") {
  // Llama 3 8B at seq 8192: 6 x (the published 8,030,261,248 parameters less the 128,256 x 4,096
  // input table; the untied head counts) + 12 x 32 layers x 4,096 query width x 8,192 keys
  const double n = 8030261248.0 - 128256.0 * 4096.0;
  CHECK(near(model_flops_per_token(build_model("llama:size=llama3-8b,seq=8192,batch=1")), 6 * n + 12.0 * 32 * 4096 * 8192, 1e-12));
  // GPT-2 (tied head: wte counts through the head; wpe, used only by the embedding, does not):
  // 12 layers of 12 h^2 + 13 h, the final norm's 2 h, the 50,257 x h table; 12 x 12 x h x s
  const double h = 768, s = 1024, gpt2 = 12 * (12 * h * h + 13 * h) + 2 * h + 50257 * h;
  CHECK(near(model_flops_per_token(build_model("gpt:size=gpt2,batch=4")), 6 * gpt2 + 12.0 * 12 * h * s, 1e-12));
  // Mixtral: 6 x the active parameters (2 of 8 experts) less the input table
  const graph mix = build_model("llama:size=mixtral-8x7b,seq=4096,batch=1");
  CHECK(near(model_flops_per_token(mix), 6 * (double(active_param_count(mix)) - 32000.0 * 4096) + 12.0 * 32 * 4096 * 4096, 1e-12));
  CHECK(tokens_per_step(build_model("llama:size=llama3-8b,seq=8192,batch=4"), 3) == 4.0 * 8192 * 3);
  CHECK(model_flops_per_token(build_model("vgg11:batch=1")) == 0);
  CHECK(tokens_per_step(build_model("mlp"), 1) == 0);
}

TEST_CASE("GPT-3 175B builds without allocating tensors", "[models]") {
  auto t0 = std::chrono::steady_clock::now();
  graph g = build_model("gpt:size=gpt3-175b,batch=1536");
  auto dt = std::chrono::steady_clock::now() - t0;
  CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(dt).count() < 2000);
  CHECK(g.ops.size() == 2 + 96 * 14 + 3);  // embed, dropout; 14 per layer; ln_f, head, loss
}

TEST_CASE("transformer layers are marked as identical repeated blocks", "[models][blocks]") {
  graph g = build_model("gpt:layers=3,hidden=16,heads=2,seq=8,batch=2,vocab=40");
  int in_blocks = 0;
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    if (g.block[i] < 0) continue;
    ++in_blocks;
    CHECK(g.ops[i].name.rfind("h" + std::to_string(g.block[i]) + ".", 0) == 0);
  }
  CHECK(in_blocks == 3 * 14);
  CHECK(g.block_pos[2] == 0);  // h0.ln1 opens the first layer
  CHECK(g.block_pos[2 + 14] == 0);
  graph bad = g;
  bad.block[0] = 0;  // the embedding claims to be position 0 of a layer
  bad.block_pos[0] = 0;
  CHECK_THROWS_WITH(validate(bad), ContainsSubstring("share block position 0 but differ"));
}

TEST_CASE("validate names the broken edge", "[models][errors]") {
  graph g = build_model("mlp:layers=2,hidden=8,batch=4,in=6,out=3");
  graph wrong = g;
  wrong.op_inputs[2][0] = {-1, 0};  // feed the raw input [4,6] where [4,8] is expected
  CHECK_THROWS_AS(validate(wrong), layout_error);
  CHECK_THROWS_WITH(validate(wrong), ContainsSubstring("expects [4,8] but its edge carries [4,6]"));
  graph later = g;
  later.op_inputs[0][0] = {3, 0};
  CHECK_THROWS_WITH(validate(later), ContainsSubstring("not a graph input or an output of an earlier op"));
}

TEST_CASE("bad specs are errors that list the valid choices", "[models][errors]") {
  CHECK_THROWS_AS(build_model("resnet50"), parse_error);
  CHECK_THROWS_WITH(build_model("resnet50"), ContainsSubstring("valid models: gpt bert llama vgg11 vgg13 vgg16 vgg19 mlp"));
  CHECK_THROWS_WITH(build_model("gpt:depth=3"), ContainsSubstring("unknown key 'depth' for model gpt; valid keys: size layers"));
  CHECK_THROWS_WITH(build_model("gpt:size=gpt5"), ContainsSubstring("valid sizes: gpt2 gpt2-medium"));
  CHECK_THROWS_AS(build_model("gpt:layers=two"), parse_error);
  CHECK_THROWS_AS(build_model("gpt:layers"), parse_error);
  CHECK_THROWS_AS(build_model("gpt:layers=2,layers=3"), parse_error);
  CHECK_THROWS_AS(build_model("gpt:hidden=0"), error);
  CHECK_THROWS_WITH(build_model("gpt:hidden=100,heads=12"), ContainsSubstring("heads=12 does not divide hidden=100"));
  CHECK_THROWS_WITH(build_model("vgg16:image=100"), ContainsSubstring("divisible by 32"));
}

TEST_CASE("specs too large to describe are errors before anything is built (fuzz regressions)", "[models][errors]") {
  // tests/fuzz/regressions/model_spec/: each once overflowed std::int64_t or ran for hours.
  CHECK_THROWS_WITH(build_model("mlp:layers=100000000"),
                    ContainsSubstring("layers=100000000 is more than autoddl builds; use layers of at most 4096"));
  CHECK_THROWS_WITH(build_model("gpt:layers=4097"), ContainsSubstring("use layers of at most 4096"));
  CHECK(build_model("mlp:layers=4096,hidden=8,in=8,out=2,batch=2").params.size() == 2 * 4097);  // the most layers build
  // [2^40, 2^40] = 2^80 elements: refused, not overflowed (2^53 is the most a tensor may hold)
  CHECK_THROWS_WITH(build_model("gpt:hidden=1099511627776,heads=1,vocab=1099511627776"),
                    ContainsSubstring("parameter 'wte' of shape [1099511627776,1099511627776] holds more than "
                                      "9007199254740992 elements"));
  CHECK_THROWS_WITH(build_model("vgg11:image=1099511627776"),
                    ContainsSubstring("input 0 of shape [8,3,1099511627776,1099511627776] holds more than"));
  CHECK_THROWS_WITH(build_model("mlp:layers=2,hidden=4294967296,in=4294967296"), ContainsSubstring("parameter 'fc0.W'"));
  // within the limits: a model described, never allocated (autoddl-train refuses it by its memory check)
  CHECK(param_count(build_model("gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=1000000000000")) > 32'000'000'000'000);
}
