// Compile-time benchmark (templates must stay cheap to compile): a 12-layer typed GPT-2 small block stack on a 2x4
// mesh, every op auto_layout, with a run-time visit over every op, so the compiler
// instantiates every candidate signature of every layer (signature_constant<op, i> and the
// callee for each) as an executable instance: its constant local shapes, its shards and its
// forward and backward on cpu_device (runtime/typed_program.hpp), what a typed model trains
// through. benchmarks/typed_compile_time.sh times `g++ -O2` on this file.
#include <autoddl/backend/cpu.hpp>
#include <autoddl/models/typed.hpp>
#include <autoddl/runtime/typed_program.hpp>

#include <cstdio>

using namespace autoddl;

constexpr std::int64_t hidden = 768;
using gpt_block = layers::repeat<12,
    layers::residual<auto_layout, layers::layernorm<>, layers::self_attention<12>>,
    layers::residual<auto_layout, layers::layernorm<>, layers::linear<4 * hidden>, layers::gelu<>,
                     layers::linear<hidden>>>;
using gpt12 = typed_model<float, static_mesh<2, 4>, static_shape<8, 1024, hidden>, gpt_block, layers::layernorm<>,
                          layers::cross_entropy<>>;

int main() {
  // every (op, candidate) pair is a case of the dispatch; visit them all once
  std::size_t visited = 0, outputs_split = 0;
  std::int64_t local_elements = 0;  // summed over instances: keeps every entry point alive
  const auto allowed = gpt12::allowed();
  for (int op = 0; op < int(gpt12::size); ++op)
    for (int index : allowed[std::size_t(op)])
      gpt12::visit(op, index, [&](auto sig) {
        ++visited;
        if (decltype(sig)::value.output.splits(0)) ++outputs_split;
        using S = decltype(sig);
        const op_instance<float, cpu_device> x = instance_kernels<S::op, S::index, float, cpu_device>::entry();
        local_elements += x.local_elements + (x.forward != nullptr) + (x.backward != nullptr) + (x.shards != nullptr);
      });
  std::printf("ops %zu\ninstantiated_signatures %zu\nvisited %zu\nexecutable instances: local elements %lld\n", gpt12::size,
              gpt12::instantiated_signatures, visited, static_cast<long long>(local_elements));
  return visited == gpt12::instantiated_signatures ? 0 : 1;
}
