// libFuzzer target: parse_manifest (a checkpoint's manifest.json). An accepted manifest's shards
// lie inside their parameters' global shapes and their rank files' bytes, and it writes back
// (to_json) to JSON that parses to the same manifest.
#include <cstddef>
#include <cstdint>
#include <string>

#include "autoddl/runtime/checkpoint.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace autoddl;
  const std::string_view text = fuzz::as_text(data, size);
  const auto m = fuzz::parse_or_refuse([&] { return parse_manifest(text, "fuzz/manifest.json"); }, text);
  if (!m) return 0;
  for (const checkpoint_rank_file& rf : m->ranks)
    for (const checkpoint_shard& s : rf.shards) {
      fuzz::expect(s.param >= 0 && std::size_t(s.param) < m->shapes.size(), "a shard names a parameter", text);
      fuzz::expect(s.byte_offset >= 0 && s.bytes >= 0 && s.byte_offset + s.bytes <= rf.bytes, "a shard lies in its file", text);
    }
  const std::string written = to_json(*m).dump();
  const checkpoint_manifest back = fuzz::must_succeed([&] { return parse_manifest(written, "written/manifest.json"); },
                                                      "the written manifest parses", text);
  fuzz::expect(back.model == m->model && back.steps_done == m->steps_done && back.seed == m->seed &&
                   back.shapes == m->shapes && back.ranks.size() == m->ranks.size(),
               "to_json then parse_manifest keeps the manifest", text);
  return 0;
}
