#pragma once
// VGG (Simonyan & Zisserman 2015, configurations A, B, D, E = vgg11, 13, 16, 19): 3x3 convs with
// padding 1 and bias, ReLU, 2x2 max-pools of stride 2, then flatten and the classifier
// fc-fc-classes (4096, 4096, 1000 on ImageNet) with ReLU and dropout 0.5, as in torchvision
// without batch norm. VGG-16 at 224x224: 138,357,544 parameters, ~15.5 GMACs per image.
// The small-image variant keeps the layers: image=32 flattens 512 x 1 x 1. `width` scales the
// channels (64, 128, 256, 512 = width x 1, 2, 4, 8): width=16 keeps every layer and layout
// question of VGG at a sixteenth of its convolution work (the executor's tests use it).
#include <cstdint>
#include <string>
#include <vector>

#include "autoddl/models/detail/builder.hpp"
#include "autoddl/models/detail/spec.hpp"

namespace autoddl {

struct vgg_config {
  int depth = 16;  ///< 11, 13, 16 or 19
  std::int64_t image = 224, classes = 1000, batch = 8, fc = 4096;
  std::int64_t width = 64;  ///< channels of the first stage; 64 in the paper
};

namespace detail {
/// Output channels per conv, 0 = max-pool.
inline std::vector<int> vgg_layers(int depth) {
  switch (depth) {
    case 11: return {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    case 13: return {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    case 16: return {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
    case 19: return {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0};
    default: fail<error>("VGG depth " + itos(depth) + " does not exist; use 11, 13, 16 or 19");
  }
}
}  // namespace detail

/// VGG as a graph; inputs images [batch, 3, image, image] and labels [batch].
inline graph build_vgg(const vgg_config& c) {
  if (c.image % 32 != 0)
    detail::fail<error>("VGG needs an image side divisible by 32 (five 2x2 pools), got image=" + detail::itos(c.image) +
                        "; use e.g. 32 or 224");
  detail::graph_builder b("vgg" + detail::itos(c.depth));
  tensor_ref x = b.input({c.batch, 3, c.image, c.image}), labels = b.input({c.batch});
  std::int64_t channels = 3;
  int conv = 0, pool = 0;
  for (int stage_channels : detail::vgg_layers(c.depth)) {
    if (stage_channels == 0) {
      op_attrs a;
      a.kernel = 2;
      a.stride = 2;
      x = b.op("pool" + detail::itos(pool++), op_kind::max_pool, a, {x});
      continue;
    }
    const std::string name = "conv" + detail::itos(conv++);
    const std::int64_t out = stage_channels / 64 * c.width;
    op_attrs a;
    a.kernel = 3;
    a.padding = 1;
    x = b.op(name, op_kind::conv2d, a, {x},
             {b.param(name + ".W", {out, channels, 3, 3}), b.param(name + ".b", {out})});
    x = b.unary(name + ".relu", op_kind::relu, x);
    channels = out;
  }
  const tensor_shape& s = shape_of(b.current(), x);
  op_attrs flat;
  flat.target = tensor_shape{c.batch, s[1] * s[2] * s[3]};
  x = b.op("flatten", op_kind::reshape, flat, {x});
  for (int i = 0; i < 2; ++i) {
    const std::string name = "fc" + detail::itos(i);
    x = b.unary(name + ".drop", op_kind::dropout, b.unary(name + ".relu", op_kind::relu, b.linear(name, x, c.fc)), 0.5);
  }
  tensor_ref logits = b.linear("fc2", x, c.classes);
  return b.finish(b.op("loss", op_kind::cross_entropy, {}, {logits, labels}));
}

}  // namespace autoddl
