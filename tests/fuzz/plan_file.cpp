// libFuzzer target: parse_plan_file (what autoddl-plan --out writes and --check, --diff and
// autoddl-train --plan read). An accepted file has a schedule the executor can run: at least one
// micro-batch and one stage; a pipeline's cuts ascend from op 0 to an op the file lists, one per
// stage, its chunks at least 1, its whole mesh the stage mesh's devices times the stages.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "autoddl/search/plan_file.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace autoddl;
  const std::string_view text = fuzz::as_text(data, size);
  const auto f = fuzz::parse_or_refuse([&] { return parse_plan_file(text, "fuzz/plan.json"); }, text);
  if (!f) return 0;
  fuzz::expect(f->microbatches >= 1 && f->stages >= 1, "at least one micro-batch and one stage", text);
  fuzz::expect(f->pipeline_mesh.devices() == f->mesh.devices() * f->stages, "the whole mesh is the stages' devices", text);
  if (f->stages > 1) {
    fuzz::expect(int(f->cuts.size()) == f->stages && f->cuts.front() == 0 &&
                     std::adjacent_find(f->cuts.begin(), f->cuts.end(), [](int a, int b) { return a >= b; }) == f->cuts.end() &&
                     f->cuts.back() < int(f->ops.size()),
                 "a pipeline's cuts ascend from op 0 to a listed op, one per stage", text);
    fuzz::expect(f->chunks >= 1, "a pipeline runs at least one chunk per stage", text);
  }
  return 0;
}
