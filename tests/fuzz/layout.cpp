// libFuzzer target: parse_layout ("[S(0),B]@2x4" or "[S(0),B]"). An accepted layout has one SBP
// per mesh axis, prints in the notation and parses back to the same value, and answers the shape
// questions every caller asks (divides, local_shape) without overflow.
#include <cstddef>
#include <cstdint>
#include <string>

#include "autoddl/sbp/layout.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace autoddl;
  const std::string_view text = fuzz::as_text(data, size);
  const auto l = fuzz::parse_or_refuse([&] { return parse_layout(text); }, text);
  if (!l) return 0;
  fuzz::expect(!l->has_mesh() || l->sbp.size() == l->mesh.size(), "one SBP per mesh axis", text);
  const std::string printed = to_string(*l);
  fuzz::expect(fuzz::must_succeed([&] { return parse_layout(printed); }, "the printed layout parses", text) == *l,
               "parse_layout(to_string(l)) == l", text);
  if (!l->has_mesh()) {  // no mesh: a split has no known shards
    tensor_shape shape;
    for (int d = 0; d < l->sbp.min_tensor_rank(); ++d) shape.push_back(8);
    if (l->sbp.min_tensor_rank() > 0)
      fuzz::expect(!fuzz::parse_or_refuse([&] { return local_shape(shape, *l); }, text),
                   "local_shape refuses a split layout without a mesh", text);
    return 0;
  }
  // A shape that every split divides: each dim the product of the axes that split it.
  tensor_shape shape;
  for (int d = 0; d < l->sbp.min_tensor_rank(); ++d) shape.push_back(split_factor(l->sbp, l->mesh, d));
  fuzz::expect(divides(shape, *l), "a shape of the split factors divides evenly", text);
  const tensor_shape local = fuzz::must_succeed([&] { return local_shape(shape, *l); }, "local_shape of a dividing shape", text);
  for (int d = 0; d < local.rank(); ++d) fuzz::expect(local[d] == 1, "each shard of that shape has one element per dim", text);
  return 0;
}
