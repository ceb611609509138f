#pragma once
// autoddl-train's Hugging Face weights (runtime/safetensors.hpp, models/hf_weights.hpp):
// --init-from F starts every parameter from F's tensor of its Hugging Face name, each rank
// taking its own block in the plan's storage layout; --export-weights F writes the trained
// parameters, --export-grads F the first step's synchronised gradients, gathered on rank 0
// (runtime/gather.hpp), under those names.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "autoddl/backend/shard.hpp"
#include "autoddl/json_input.hpp"
#include "autoddl/models/hf_config.hpp"
#include "autoddl/models/hf_weights.hpp"
#include "autoddl/runtime/data.hpp"
#include "autoddl/runtime/safetensors.hpp"
#include "autoddl/text_file.hpp"
#include "train_setup.hpp"

namespace autoddl::tools::train {

inline std::vector<std::int64_t> dims_vector(const tensor_shape& s) { return std::vector<std::int64_t>(s.begin(), s.end()); }
/// "[32,64]"
inline std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string r = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) r += (i ? "," : "") + std::to_string(dims[i]);
  return r + "]";
}

/// Parameter p's value from the file's tensors, or error naming the file, tensor and parameter.
inline std::vector<float> initial_value(const safetensors_contents& f, const std::string& path, const param_info& p,
                                        hf_experts_naming naming, std::vector<std::string>& used) {
  const std::vector<std::int64_t> shape = dims_vector(p.shape);
  std::vector<float> value;
  for (const hf_param_name& h : hf_names_or_fail(p.name, shape, naming, "--init-from " + path)) {
    const std::vector<std::int64_t> want = hf_shape_of(h, shape);
    const named_tensor* t = f.find(h.name);
    if (!t) throw error("--init-from " + path + " lacks the tensor '" + h.name + "' (parameter '" + p.name + "')");
    if (t->shape != want)
      throw error("--init-from " + path + ": tensor '" + h.name + "' has shape " + dims_text(t->shape) +
                  "; the model's parameter '" + p.name + "' needs " + dims_text(want));
    from_hf_layout(h, shape, t->values, value);
    used.push_back(h.name);
  }
  return value;
}

/// Every parameter of g from the safetensors file `path`, in autoddl's layout (global values).
/// @throws error in one sentence: the file malformed, a parameter without a Hugging Face name,
/// a tensor missing or of another shape, a tensor the model has no parameter for.
inline std::vector<std::vector<float>> read_initial_weights(const std::string& path, const graph& g, hf_experts_naming naming) {
  const safetensors_contents f = read_safetensors(path);
  std::vector<std::vector<float>> values;
  std::vector<std::string> used;
  bool head = false;  // the model has its own lm_head.W (untied)
  for (const param_info& p : g.params) {
    head = head || p.name == "lm_head.W";
    values.push_back(initial_value(f, path, p, naming, used));
  }
  std::sort(used.begin(), used.end());
  for (const named_tensor& t : f.tensors)
    if (!std::binary_search(used.begin(), used.end(), t.name) && !(t.name == "lm_head.weight" && !head))
      throw error("--init-from " + path + " holds the tensor '" + autoddl::detail::excerpt(t.name) +
                  "', which this model has no parameter for; is it another model's file (layers, tied head)?");
  return values;
}

/// Checks that every parameter of g has a Hugging Face name (--export-weights, --export-grads).
inline void check_hf_names(const graph& g, hf_experts_naming naming, const std::string& option) {
  for (const param_info& p : g.params) (void)hf_names_or_fail(p.name, dims_vector(p.shape), naming, option);
}

/// The block `s` of a global tensor (row-major values of s.global).
inline std::vector<float> block_of(const std::vector<float>& global, const shard_info& s) {
  std::vector<float> out(std::size_t(s.local.elements()));
  for_each_global_index(s, [&](std::int64_t k, std::int64_t gi) { at(out, k) = at(global, gi); });
  return out;
}

/// Sets every parameter trainer t holds to its --init-from value (`values`, global), its
/// optimizer state left as it starts; a 16-bit run's fp32 master copy takes the file's values.
template <class Trainer>
void load_initial_weights(Trainer& t, const prepared& p, const std::vector<std::vector<float>>& values, const mesh_coord& coords) {
  using value = typename decltype(t.param_shard(0))::value_type;
  for (std::size_t q = 0; q < p.g.params.size(); ++q) {
    if (!t.holds_param(int(q))) continue;  // another pipeline stage's
    const tensor_shape& shape = p.g.params[q].shape;
    const std::vector<float> mine = block_of(values[q], make_shard(shape, t.storage(int(q)), p.o.mesh, coords));
    std::vector<float> master;
    if (p.o.type != dtype::fp32) master = block_of(values[q], make_shard(shape, t.update_layout(int(q)), p.o.mesh, coords));
    t.restore_shard(int(q), std::vector<value>(mine.begin(), mine.end()), t.moment_shard(int(q), 0), t.moment_shard(int(q), 1),
                    master);
  }
}

/// Writes every parameter's whole value (grads: its last synchronised gradient) under its Hugging
/// Face name to `path` on rank 0, in `type`; `whole(q, shard, layout)` gathers a tensor on rank 0
/// (a call on every rank). Returns the tensors written (rank 0; 0 elsewhere).
template <class Trainer, class Whole>
std::size_t export_hf(const std::string& path, const prepared& p, const Trainer& t, Whole& whole, bool grads,
                      safetensors_dtype type, int rank) {
  std::vector<named_tensor> out;
  for (std::size_t q = 0; q < p.g.params.size(); ++q) {
    const int i = int(q);
    const std::vector<float> v = grads ? whole(i, t.grad_shard(i), t.update_layout(i)) : whole(i, t.param_shard(i), t.storage(i));
    if (rank != 0) continue;
    const std::vector<std::int64_t> shape = dims_vector(p.g.params[q].shape);
    for (const hf_param_name& h : hf_names_or_fail(p.g.params[q].name, shape, p.hf_naming, grads ? "--export-grads" : "--export-weights"))
      out.push_back({h.name, type, hf_shape_of(h, shape), to_hf_layout(h, shape, v)});
  }
  if (rank == 0) write_safetensors(path, out, {{"format", "pt"}});
  return out.size();
}

/// The element type --export-weights writes a run of `type` in: its own 16-bit type, else F32.
inline safetensors_dtype export_dtype(dtype type) {
  return type == dtype::bf16 ? safetensors_dtype::bf16 : type == dtype::fp16 ? safetensors_dtype::f16 : safetensors_dtype::f32;
}

// --steps, and --init-from, --export-weights, --export-grads: the file read and checked against the
// model, the names of every parameter known, before any communication.
inline void check_hf_options(const settings& s, prepared& p) {
  if (s.steps < 0 || (s.steps == 0 && s.export_weights.empty()))
    throw error("--steps must be at least 1 (0 only with --export-weights, to write the initial weights), got " +
                std::to_string(s.steps));
  if (!s.init_from.empty() && !s.resume.empty())
    throw error("--init-from and --resume both give the initial weights; drop one");
  if (!s.export_grads.empty() && s.steps == 0) throw error("--export-grads writes the first step's gradients; give --steps 1 or more");
  if (!s.export_grads.empty() && p.o.type == dtype::fp16)
    throw error("--export-grads writes the gradients of fp32 and bf16 runs; an fp16 run's carry its dynamic loss scale, "
                "use --dtype fp32 or bf16");
  for (const auto& [option, path] : {std::pair{"--export-weights", &s.export_weights}, {"--export-grads", &s.export_grads}}) {
    const std::filesystem::path folder = std::filesystem::path(*path).parent_path();
    std::error_code ec;
    if (!path->empty() && !folder.empty() && !std::filesystem::is_directory(folder, ec))
      throw error(std::string(option) + " " + *path + ": there is no folder " + folder.string() + " to write it in");
  }
  p.hf_naming = hf_experts_naming_of(s.model);
  if (!s.export_weights.empty()) check_hf_names(p.g, p.hf_naming, "--export-weights");
  if (!s.export_grads.empty()) check_hf_names(p.g, p.hf_naming, "--export-grads");
  if (!s.init_from.empty()) p.initial_weights = read_initial_weights(s.init_from, p.g, p.hf_naming);
}

// Hugging Face weights of a model that transformers computes otherwise (hf_unmodelled): one line.
inline std::string weights_warning(const settings& s) {
  if ((s.init_from.empty() && s.export_weights.empty() && s.export_grads.empty()) || !is_hf_spec(s.model)) return "";
  return hf_unmodelled(s.model);
}

}  // namespace autoddl::tools::train
