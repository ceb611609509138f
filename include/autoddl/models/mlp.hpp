#pragma once
// A multi-layer perceptron: in -> hidden (ReLU), `layers - 1` more hidden -> hidden (ReLU),
// hidden -> out, softmax cross-entropy. The hidden -> hidden layers are identical repeated
// blocks. Parameters: in*h + h + (layers-1)(h*h + h) + h*out + out.
#include <cstdint>
#include <string>

#include "autoddl/models/detail/builder.hpp"

namespace autoddl {

struct mlp_config {
  std::int64_t layers = 3, hidden = 256, batch = 32, in = 784, out = 10;
};

/// MLP as a graph; inputs x [batch, in] and labels [batch].
inline graph build_mlp(const mlp_config& c) {
  detail::graph_builder b("mlp");
  tensor_ref x = b.input({c.batch, c.in}), labels = b.input({c.batch});
  x = b.unary("fc0.relu", op_kind::relu, b.linear("fc0", x, c.hidden));
  for (std::int64_t l = 1; l < c.layers; ++l) {
    const std::string name = "fc" + detail::itos(l);
    b.begin_block(int(l - 1));
    x = b.unary(name + ".relu", op_kind::relu, b.linear(name, x, c.hidden));
    b.end_block();
  }
  tensor_ref logits = b.linear("out", x, c.out);
  return b.finish(b.op("loss", op_kind::cross_entropy, {}, {logits, labels}));
}

}  // namespace autoddl
