#pragma once
// Checkpoints: every rank's parameter and optimizer-state shards in the plan's storage layouts,
// and one manifest that says what they are, so a run resumes bit for bit on the same plan and
// mesh, or reshards onto any other plan, mesh or number of ranks.
//
// A checkpoint is a folder <dir>/step-<k> (k = the steps done, zero-padded to 8 digits):
//   rank-<r>.bin    rank r's shards, one after another (raw little-endian elements)
//   manifest.json   written last (rank 0, after every rank's file is in place)
// Every file is written to <name>.tmp, flushed to disk (fsync), then renamed, and the folder
// is synced; a crash mid-write leaves at most a folder without a manifest, which readers skip, so
// the previous checkpoint stays the newest complete one.
//
// The manifest (format "autoddl-checkpoint", version 1) holds the model spec, the dtype, the
// steps done (the data position: step k's batch is keyed by k), the optimizer and its learning
// rate, the seed, the plan (mesh, strategy, micro-batches, recomputation, pipeline stages with
// one stage's mesh and the first op of each stage, the pick, each parameter's storage layout;
// a pipeline's stages save the parameters their ops use first), the global shapes, and per rank file its size and per
// shard the parameter, the tensor ("param", "m", "v", and "master": a bf16 or fp16 run's fp32
// master weights, laid out as "m"), the global offset and local shape of its block, where it
// sits in the file and an FNV-1a 64 checksum of its bytes.
//
// Resharding (a different plan, mesh or rank count): storage layouts are B or S (never P), so
// each shard is a block of the global tensor; a rank assembles its new block from every saved
// block that overlaps it (replicas on B axes hold the same values), as PyTorch's distributed
// checkpoint does. Every element must be covered, and every shard read is checked against its
// checksum.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "autoddl/backend/shard.hpp"
#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/json_input.hpp"
#include "autoddl/parse_number.hpp"
#include "autoddl/text.hpp"
#include "autoddl/text_file.hpp"

namespace autoddl {

inline constexpr const char* checkpoint_format = "autoddl-checkpoint";
inline constexpr int checkpoint_version = 1;

/// FNV-1a, 64 bits (Fowler, Noll, Vo): a checksum of a shard's bytes.
inline std::uint64_t fnv1a64(std::span<const unsigned char> bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char b : bytes) h = (h ^ b) * 0x100000001b3ULL;
  return h;
}

/// One shard in a rank file: a block of a parameter's (or its optimizer state's) global tensor.
struct checkpoint_shard {
  int param = 0;
  std::string tensor;  ///< "param", "m" (Adam's first moment or SGD's velocity), "v" (Adam's second), "master"
  std::vector<std::int64_t> offset, shape;  ///< the block: global offset and local shape per dim
  std::int64_t byte_offset = 0, bytes = 0;  ///< where it sits in the rank file
  std::uint64_t checksum = 0;
};

/// A rank's file and the shards in it.
struct checkpoint_rank_file {
  int rank = 0;
  std::string file;  ///< relative to the checkpoint folder
  std::int64_t bytes = 0;
  std::vector<checkpoint_shard> shards;
};

/// What a checkpoint holds besides the shards (the caller fills it; write/read keep it as is).
struct checkpoint_manifest {
  std::string model, dtype = "fp32", optimizer, strategy, recompute, mesh;
  std::int64_t steps_done = 0;  ///< the next step to run is this one (0-based)
  double lr = 0;
  std::uint64_t seed = 0;
  int microbatches = 1, stages = 1;
  std::string stage_mesh;       ///< one pipeline stage's mesh (== mesh without a pipeline; empty: as mesh)
  std::vector<int> cuts{0};     ///< a pipeline's first op of each stage
  std::vector<int> pick;        ///< the layouts (of one stage's mesh for a pipeline)
  std::vector<std::string> param_names, storage;    ///< per parameter: name, storage layout
  std::vector<std::vector<std::int64_t>> shapes;    ///< per parameter: global shape
  std::vector<checkpoint_rank_file> ranks;
};

namespace detail {

/// Writes `bytes` to `path` atomically: <path>.tmp, fsync, rename, fsync of the folder; `what`
/// names the file in errors.
inline void atomic_write(const std::filesystem::path& path, std::span<const unsigned char> bytes,
                         const std::string& what = "checkpoint file") {
  const std::filesystem::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) detail::fail<error>("cannot write " + what + " " + tmp.string() + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      detail::fail<error>("cannot write " + what + " " + tmp.string() + ": " + why);
    }
    done += std::size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) detail::fail<error>("cannot flush " + what + " " + tmp.string() + " to disk");
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) detail::fail<error>("cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
  const int dfd = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

inline std::string step_folder_name(std::int64_t steps_done) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(steps_done));
  return name;
}

/// Visits the overlap of two blocks (global offsets, local shapes) element by element:
/// f(index in block a, index in block b). Returns the elements visited.
template <class F>
std::int64_t for_each_overlap(const std::vector<std::int64_t>& ao, const std::vector<std::int64_t>& as,
                              const std::vector<std::int64_t>& bo, const std::vector<std::int64_t>& bs, F&& f) {
  const std::size_t r = as.size();
  std::vector<std::int64_t> lo(r), hi(r);
  for (std::size_t d = 0; d < r; ++d) {
    lo[d] = std::max(ao[d], bo[d]);
    hi[d] = std::min(ao[d] + as[d], bo[d] + bs[d]);
    if (lo[d] >= hi[d]) return 0;
  }
  std::vector<std::int64_t> idx = lo;
  std::int64_t count = 0;
  for (;;) {
    std::int64_t ia = 0, ib = 0;
    for (std::size_t d = 0; d < r; ++d) {
      ia = ia * as[d] + (idx[d] - ao[d]);
      ib = ib * bs[d] + (idx[d] - bo[d]);
    }
    f(ia, ib);
    ++count;
    std::size_t d = r;
    while (d > 0) {
      --d;
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
      if (d == 0) return count;
    }
    if (r == 0) return count;
  }
}

inline std::vector<std::int64_t> dims_of(const tensor_shape& s) {
  std::vector<std::int64_t> v;
  for (int d = 0; d < s.rank(); ++d) v.push_back(s[d]);
  return v;
}
inline std::vector<std::int64_t> offset_of(const shard_info& s) {
  std::vector<std::int64_t> v;
  for (int d = 0; d < s.local.rank(); ++d) v.push_back(at(s.offset, d));
  return v;
}

}  // namespace detail

/// The folder of the checkpoint after `steps_done` steps under `dir`.
inline std::filesystem::path checkpoint_folder(const std::filesystem::path& dir, std::int64_t steps_done) {
  return dir / detail::step_folder_name(steps_done);
}

/// The newest complete checkpoint under `dir` (a step-* folder with a manifest), or an empty
/// path when there is none.
inline std::filesystem::path latest_checkpoint(const std::filesystem::path& dir) {
  std::filesystem::path best;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step-", 0) != 0 || !std::filesystem::exists(e.path() / "manifest.json"))
      continue;
    if (best.empty() || name > best.filename().string()) best = e.path();
  }
  return best;
}

/// One shard to write: a block of parameter `param`'s tensor `tensor`, with its host values.
template <class T>
struct shard_to_write {
  int param = 0;
  std::string tensor;
  shard_info block;
  std::vector<T> values;
};

/// Writes rank `rank`'s shards into `folder` (created if needed) atomically; returns the record
/// the manifest keeps of them.
template <class T>
checkpoint_rank_file write_rank_shards(const std::filesystem::path& folder, int rank,
                                       const std::vector<shard_to_write<T>>& shards) {
  std::filesystem::create_directories(folder);
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.bin", rank);
  checkpoint_rank_file rf{rank, name, 0, {}};
  std::vector<unsigned char> bytes;
  for (const shard_to_write<T>& s : shards) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.values.data());
    const std::size_t n = s.values.size() * sizeof(T);
    checkpoint_shard c{s.param, s.tensor, detail::offset_of(s.block), detail::dims_of(s.block.local),
                       std::int64_t(bytes.size()), std::int64_t(n), fnv1a64({p, n})};
    bytes.insert(bytes.end(), p, p + n);
    rf.shards.push_back(std::move(c));
  }
  rf.bytes = std::int64_t(bytes.size());
  detail::atomic_write(folder / rf.file, bytes);
  return rf;
}

inline nlohmann::json to_json(const checkpoint_rank_file& rf) {
  nlohmann::json shards = nlohmann::json::array();
  for (const checkpoint_shard& s : rf.shards)
    shards.push_back({{"param", s.param},   {"tensor", s.tensor}, {"offset", s.offset},     {"shape", s.shape},
                      {"byte_offset", s.byte_offset}, {"bytes", s.bytes}, {"fnv1a64", std::to_string(s.checksum)}});
  return {{"rank", rf.rank}, {"file", rf.file}, {"bytes", rf.bytes}, {"shards", shards}};
}

inline nlohmann::json to_json(const checkpoint_manifest& m) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const checkpoint_rank_file& rf : m.ranks) ranks.push_back(to_json(rf));
  nlohmann::json params = nlohmann::json::array();
  for (std::size_t p = 0; p < m.param_names.size(); ++p)
    params.push_back({{"name", m.param_names[p]}, {"shape", m.shapes.at(p)}, {"storage", m.storage.at(p)}});
  return {{"format", checkpoint_format},
          {"version", checkpoint_version},
          {"model", m.model},
          {"dtype", m.dtype},
          {"steps_done", m.steps_done},
          {"optimizer", {{"kind", m.optimizer}, {"lr", m.lr}}},
          {"seed", std::to_string(m.seed)},
          {"plan",
           {{"mesh", m.mesh},
            {"strategy", m.strategy},
            {"microbatches", m.microbatches},
            {"recompute", m.recompute},
            {"stages", m.stages},
            {"stage_mesh", m.stage_mesh.empty() ? m.mesh : m.stage_mesh},
            {"cuts", m.cuts},
            {"pick", m.pick}}},
          {"params", params},
          {"ranks", ranks}};
}

/// Writes the manifest (last, atomically): the checkpoint is complete from then on.
inline void write_manifest(const std::filesystem::path& folder, const checkpoint_manifest& m) {
  const std::string text = to_json(m).dump(1);
  detail::atomic_write(folder / "manifest.json",
                       {reinterpret_cast<const unsigned char*>(text.data()), text.size()});
}

namespace detail {
/// Reads a manifest field, failing with one sentence naming the file and the field.
struct manifest_reader {
  std::string file;
  const nlohmann::json& need(const nlohmann::json& j, const char* field) const {
    if (!j.is_object() || !j.contains(field)) detail::fail<error>("checkpoint manifest " + file + " lacks the field '" + field + "'");
    return j.at(field);
  }
  template <class V>
  V get(const nlohmann::json& j, const char* field) const {
    const nlohmann::json& v = need(j, field);
    if constexpr (std::is_integral_v<V>) {
      return whole<V>(v, field);
    } else if constexpr (std::is_same_v<V, std::vector<int>> || std::is_same_v<V, std::vector<std::int64_t>>) {
      if (!v.is_array()) wrong_type(v, field);
      V r;
      for (const nlohmann::json& e : v) r.push_back(whole<typename V::value_type>(e, field));
      return r;
    } else {
      try {
        return v.get<V>();
      } catch (const nlohmann::json::exception&) {
        wrong_type(v, field);
      }
    }
  }
  /// A JSON integer that I holds (json_whole).
  template <class I>
  I whole(const nlohmann::json& v, const char* field) const {
    if (const std::optional<I> x = json_whole<I>(v)) return *x;
    detail::fail<error>("checkpoint manifest " + file + ": field '" + field + "' must hold whole numbers from " +
                        std::to_string(std::numeric_limits<I>::min()) + " to " + std::to_string(std::numeric_limits<I>::max()) +
                        " (got " + json_excerpt(v) + ")");
  }
  [[noreturn]] void wrong_type(const nlohmann::json& v, const char* field) const {
    detail::fail<error>("checkpoint manifest " + file + ": field '" + field + "' has the wrong type (" + json_excerpt(v) + ")");
  }
  std::uint64_t number_text(const nlohmann::json& j, const char* field) const {
    const std::string s = get<std::string>(j, field);
    // decimal digits only: an unsigned read refuses "-1" (not 2^64 - 1), " 1" and "+1"
    if (const std::optional<std::uint64_t> v = parse_number_or_none<std::uint64_t>(s)) return *v;
    detail::fail<error>("checkpoint manifest " + file + ": field '" + field + "' is not a number ('" + s + "')");
  }
};
}  // namespace detail

namespace detail {
// A parameter's name, global shape (every dim and the element count below 2^48) and storage.
inline void read_manifest_param(const manifest_reader& r, const nlohmann::json& p, checkpoint_manifest& m) {
  m.param_names.push_back(r.get<std::string>(p, "name"));
  m.shapes.push_back(r.get<std::vector<std::int64_t>>(p, "shape"));
  const std::int64_t limit = std::int64_t(1) << 48;
  std::int64_t elems = 1;
  for (std::int64_t d : m.shapes.back()) {
    if (d < 0 || d > limit || elems > limit / std::max<std::int64_t>(d, 1))  // (checked before multiplying)
      fail<error>("checkpoint manifest " + r.file + ": parameter '" + m.param_names.back() + "' has an impossible shape");
    elems *= std::max<std::int64_t>(d, 1);
  }
  m.storage.push_back(r.get<std::string>(p, "storage"));
}

// Whether shard s lies inside its parameter's global shape and its rank file's bytes.
inline bool shard_inside(const checkpoint_shard& s, const checkpoint_manifest& m, std::int64_t file_bytes) {
  bool inside = s.param >= 0 && s.param < std::ssize(m.shapes) && s.shape.size() == at(m.shapes, s.param).size() &&
                s.offset.size() == s.shape.size();
  for (std::size_t d = 0; inside && d < s.shape.size(); ++d) {
    const std::int64_t g = at(m.shapes, s.param)[d];
    inside = s.offset[d] >= 0 && s.shape[d] >= 0 && s.offset[d] <= g && s.shape[d] <= g - s.offset[d];
  }
  return inside && s.byte_offset >= 0 && s.bytes >= 0 && s.byte_offset <= file_bytes && s.bytes <= file_bytes - s.byte_offset;
}

// One rank's shard file: its name (inside the folder), size and shards (each checked).
inline checkpoint_rank_file read_rank_file(const manifest_reader& r, const nlohmann::json& rj, const checkpoint_manifest& m) {
  checkpoint_rank_file rf;
  rf.rank = r.get<int>(rj, "rank");
  rf.file = r.get<std::string>(rj, "file");
  if (rf.file.empty() || rf.file.find('/') != std::string::npos || rf.file.find("..") != std::string::npos)
    fail<error>("checkpoint manifest " + r.file + " names a shard file outside its folder ('" + rf.file + "')");
  rf.bytes = r.get<std::int64_t>(rj, "bytes");
  if (!r.need(rj, "shards").is_array())
    fail<error>("checkpoint manifest " + r.file + ": field 'shards' of " + rf.file + " must be an array");
  for (const nlohmann::json& sj : r.need(rj, "shards")) {
    checkpoint_shard s;
    s.param = r.get<int>(sj, "param");
    s.tensor = r.get<std::string>(sj, "tensor");
    s.offset = r.get<std::vector<std::int64_t>>(sj, "offset");
    s.shape = r.get<std::vector<std::int64_t>>(sj, "shape");
    s.byte_offset = r.get<std::int64_t>(sj, "byte_offset");
    s.bytes = r.get<std::int64_t>(sj, "bytes");
    s.checksum = r.number_text(sj, "fnv1a64");
    if (!shard_inside(s, m, rf.bytes))
      fail<error>("checkpoint manifest " + r.file + ": a shard of " + rf.file + " is inconsistent (parameter " +
                  std::to_string(s.param) + ", bytes " + std::to_string(s.byte_offset) + "+" + std::to_string(s.bytes) + ")");
    rf.shards.push_back(std::move(s));
  }
  return rf;
}
}  // namespace detail

/// Parses and checks a manifest's text; `path` names it in errors.
/// @throws autoddl::error naming the file and the field.
inline checkpoint_manifest parse_manifest(std::string_view text, const std::filesystem::path& path) {
  const nlohmann::json j = parse_json(text, "checkpoint manifest " + path.string());
  const detail::manifest_reader r{path.string()};
  if (r.get<std::string>(j, "format") != checkpoint_format)
    detail::fail<error>("checkpoint manifest " + path.string() + " is not an autoddl checkpoint (format '" +
                detail::excerpt(r.get<std::string>(j, "format")) + "')");
  if (const int v = r.get<int>(j, "version"); v != checkpoint_version)
    detail::fail<error>("checkpoint manifest " + path.string() + " has format version " + std::to_string(v) +
                "; this autoddl reads version " + std::to_string(checkpoint_version));
  checkpoint_manifest m;
  m.model = r.get<std::string>(j, "model");
  m.dtype = r.get<std::string>(j, "dtype");
  m.steps_done = r.get<std::int64_t>(j, "steps_done");
  if (m.steps_done < 0)
    detail::fail<error>("checkpoint manifest " + path.string() + ": field 'steps_done' is " + std::to_string(m.steps_done) +
                        "; a checkpoint is written after 0 or more steps");
  const nlohmann::json& opt = r.need(j, "optimizer");
  m.optimizer = r.get<std::string>(opt, "kind");
  m.lr = r.get<double>(opt, "lr");
  m.seed = r.number_text(j, "seed");
  const nlohmann::json& plan = r.need(j, "plan");
  m.mesh = r.get<std::string>(plan, "mesh");
  m.strategy = r.get<std::string>(plan, "strategy");
  m.microbatches = r.get<int>(plan, "microbatches");
  m.recompute = r.get<std::string>(plan, "recompute");
  m.stages = r.get<int>(plan, "stages");
  m.stage_mesh = plan.contains("stage_mesh") ? r.get<std::string>(plan, "stage_mesh") : m.mesh;  // (older manifests)
  if (plan.contains("cuts")) m.cuts = r.get<std::vector<int>>(plan, "cuts");
  if (int(m.cuts.size()) != m.stages)
    detail::fail<error>("checkpoint manifest " + path.string() + ": field 'plan.cuts' must list the first op of each of the " +
                        std::to_string(m.stages) + " stages");
  m.pick = r.get<std::vector<int>>(plan, "pick");
  if (!r.need(j, "params").is_array() || !r.need(j, "ranks").is_array())
    detail::fail<error>("checkpoint manifest " + path.string() + ": fields 'params' and 'ranks' must be arrays");
  for (const nlohmann::json& p : r.need(j, "params")) detail::read_manifest_param(r, p, m);
  for (const nlohmann::json& rj : r.need(j, "ranks")) m.ranks.push_back(detail::read_rank_file(r, rj, m));
  return m;
}

/// Reads and checks <folder>/manifest.json. @throws autoddl::error naming the file and field.
inline checkpoint_manifest read_manifest(const std::filesystem::path& folder) {
  const std::filesystem::path path = folder / "manifest.json";
  const std::optional<std::string> text = read_text_file(path, "checkpoint manifest");
  if (!text) detail::fail<error>("checkpoint manifest " + path.string() + " is missing or unreadable");
  return parse_manifest(*text, path);
}

/// Reads blocks of a checkpoint: each rank file checked (present, of the manifest's size) and
/// each shard against its checksum when read.
template <class T>
class checkpoint_reader {
 public:
  checkpoint_reader(std::filesystem::path folder, checkpoint_manifest m) : folder_(std::move(folder)), manifest_(std::move(m)) {}
  const checkpoint_manifest& manifest() const { return manifest_; }

  /// The block `want` of parameter `param`'s tensor `tensor`, from every saved block overlapping it.
  /// @throws autoddl::error naming the file when a shard file is missing, truncated or corrupt,
  /// or when the saved blocks do not cover `want`.
  std::vector<T> read(int param, const std::string& tensor, const shard_info& want) {
    const std::vector<std::int64_t> wo = detail::offset_of(want), ws = detail::dims_of(want.local);
    std::vector<T> out(std::size_t(want.local.elements()));
    std::vector<char> covered(out.size(), 0);
    for (const checkpoint_rank_file& rf : manifest_.ranks)
      for (const checkpoint_shard& s : rf.shards) {
        if (s.param != param || s.tensor != tensor) continue;
        std::int64_t elems = 1;
        for (std::int64_t d : s.shape) elems *= d;
        if (elems * std::int64_t(sizeof(T)) != s.bytes)
          detail::fail<error>("checkpoint shard file " + (folder_ / rf.file).string() + ": the shard of parameter '" +
                      manifest_.param_names.at(std::size_t(param)) + "' holds " + std::to_string(s.bytes) + " bytes, not " +
                      std::to_string(elems * std::int64_t(sizeof(T))));
        bool overlaps = true;
        for (std::size_t d = 0; d < ws.size(); ++d)
          overlaps = overlaps && std::max(wo[d], s.offset[d]) < std::min(wo[d] + ws[d], s.offset[d] + s.shape[d]);
        if (!overlaps) continue;
        const std::vector<T> block = load(rf, s);
        detail::for_each_overlap(wo, ws, s.offset, s.shape, [&](std::int64_t iw, std::int64_t is) {
          at(out, iw) = at(block, is);
          at(covered, iw) = 1;
        });
      }
    if (std::find(covered.begin(), covered.end(), 0) != covered.end())
      detail::fail<error>("checkpoint " + folder_.string() + " does not hold all of " + tensor + " of parameter '" +
                  manifest_.param_names.at(std::size_t(param)) + "' (a shard file or manifest entry is missing)");
    return out;
  }

 private:
  std::vector<T> load(const checkpoint_rank_file& rf, const checkpoint_shard& s) const {
    const std::filesystem::path path = folder_ / rf.file;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) detail::fail<error>("checkpoint shard file " + path.string() + " is missing");
    const auto size = std::int64_t(std::filesystem::file_size(path, ec));
    if (ec || size != rf.bytes)
      detail::fail<error>("checkpoint shard file " + path.string() + " is truncated or damaged (" + std::to_string(size) +
                  " bytes; the manifest says " + std::to_string(rf.bytes) + ")");
    std::ifstream in(path, std::ios::binary);
    std::vector<T> v(std::size_t(s.bytes) / sizeof(T));
    in.seekg(s.byte_offset);
    in.read(reinterpret_cast<char*>(v.data()), s.bytes);
    if (!in) detail::fail<error>("checkpoint shard file " + path.string() + " could not be read");
    if (fnv1a64({reinterpret_cast<const unsigned char*>(v.data()), std::size_t(s.bytes)}) != s.checksum)
      detail::fail<error>("checkpoint shard file " + path.string() + " is corrupt: the shard of parameter '" +
                  manifest_.param_names.at(std::size_t(s.param)) + "' fails its checksum");
    return v;
  }

  std::filesystem::path folder_;
  checkpoint_manifest manifest_;
};

}  // namespace autoddl
