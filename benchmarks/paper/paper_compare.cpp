// The AutoDDL abstract's comparison, priced by autoddl's planner: auto against the expert plans
// a practitioner would use, on a Multi-Node-Single-GPU system (piz-daint) and two
// Multi-Node-Multi-GPU systems (dgx1-v100, dgx-a100), for VGG-16 and two Transformers at two
// or three per-GPU batch sizes, 2 to 128 nodes, with and without gradient-sync overlap.
//   build/benchmarks/paper_compare predicted OUT [--quick]
//       prices every row; writes OUT/predicted.md (tables and the summary beside the abstract's
//       figures), OUT/predicted.json (every row) and OUT/results-<system>-<model>.svg
//   build/benchmarks/paper_compare measured OUT ROWS.jsonl [HARDWARE]
//       reads bench_step_prediction --json rows (mpirun -np 2, interleaved rounds) and writes
//       OUT/measured.md: the same table shape, measured and predicted side by side (HARDWARE: the
//       profile bench_step_prediction priced with, named in the table; default cpu-local)
// Every plan, auto and expert, is planned as autoddl-plan --compare plans it
// (plan_micro_batched: the micro-batch count and the recomputation chosen where the plan leaves
// them open). scripts/paper runs both modes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/json_input.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/solve.hpp"
#include "paper/comparison.hpp"
#include "paper/line_plot.hpp"
#include "support/cli.hpp"

using namespace autoddl;
namespace fs = std::filesystem;

namespace {

struct system_setup {
  std::string name;      ///< hardware preset
  std::string kind;      ///< "Multi-Node-Single-GPU" or "Multi-Node-Multi-GPU"
  int gpus_per_node;     ///< mesh N (1 GPU per node) or Nx8
};

struct model_setup {
  std::string label;     ///< "VGG-16"
  std::string family;    ///< "VGG" or "Transformer"
  std::string key;       ///< short name for file names
  std::string spec;      ///< model key without the batch
  dtype type;
  std::vector<int> per_gpu_batches;
  std::vector<std::string> experts;
};

const std::vector<system_setup> systems = {
    {"piz-daint", "Multi-Node-Single-GPU", 1},
    {"dgx1-v100", "Multi-Node-Multi-GPU", 8},
    {"dgx-a100", "Multi-Node-Multi-GPU", 8},
};

const std::vector<model_setup> models = {
    {"VGG-16", "VGG", "vgg16", "vgg16", dtype::fp32, {1, 4, 32}, {"dp", "owt", "zero"}},
    {"GPT-2 medium", "Transformer", "gpt2-medium", "gpt:size=gpt2-medium", dtype::fp16, {1, 8}, {"dp", "megatron", "zero"}},
    {"BERT-large", "Transformer", "bert-large", "bert:size=bert-large", dtype::fp16, {4, 32}, {"dp", "megatron", "zero"}},
};

std::string mesh_of(int nodes, int gpus) { return gpus == 1 ? std::to_string(nodes) : std::to_string(nodes) + "x" + std::to_string(gpus); }

paper::plan_time price(const std::string& spec, const plan_options& o, const std::string& plan) {
  paper::plan_time t;
  t.plan = plan;
  try {
    const std::int64_t batch = graph_batch(build_model(spec));
    micro_batched_plan p = plan_micro_batched([&](int m) { return build_model(spec, m); }, batch, o, parse_strategy(plan), {});
    t.seconds = p.result.time;
    t.feasible = p.result.feasible;
    t.note = std::to_string(p.microbatches) + "/" + std::string(to_string(p.recompute));
  } catch (const error& e) {
    t.note = e.what();  // the expert's rules do not fit this model and mesh: not applicable
  }
  return t;
}

std::vector<paper::row> price_all(bool quick) {
  std::vector<paper::row> rows;
  const std::vector<int> all_nodes = quick ? std::vector<int>{2, 8} : std::vector<int>{2, 4, 8, 16, 32, 64, 128};
  for (const system_setup& sys : systems) {
    const hardware hw = load_hardware(sys.name);
    for (const model_setup& m : models)
      for (int per : m.per_gpu_batches)
        for (int nodes : all_nodes)
          for (bool overlap : {true, false}) {
            paper::row r;
            r.system = sys.name;
            r.model = m.label;
            r.mesh = mesh_of(nodes, sys.gpus_per_node);
            r.per_gpu_batch = per;
            r.nodes = nodes;
            r.overlap = overlap;
            r.spec = m.spec + (m.spec.find(':') == std::string::npos ? ":" : ",") +
                     "batch=" + std::to_string(per * nodes * sys.gpus_per_node);
            plan_options o;
            o.hw = hw;
            o.mesh = parse_mesh(r.mesh);
            o.type = m.type;
            o.overlap = overlap ? overlap_rule::grad_sync_with_backward : overlap_rule::none;
            r.plans.push_back(price(r.spec, o, "auto"));
            for (const std::string& e : m.experts) r.plans.push_back(price(r.spec, o, e));
            rows.push_back(std::move(r));
          }
    std::fprintf(stderr, "paper_compare: priced %s\n", sys.name.c_str());
  }
  return rows;
}

const model_setup& setup_of(const std::string& label) {
  for (const model_setup& m : models)
    if (m.label == label) return m;
  throw error("unknown model '" + label + "'");
}

std::vector<const paper::row*> select(const std::vector<paper::row>& rows, const std::string& sys, const std::string& model,
                                      std::optional<bool> overlap, std::optional<int> per = std::nullopt) {
  std::vector<const paper::row*> out;
  for (const paper::row& r : rows)
    if (r.system == sys && r.model == model && (!overlap || r.overlap == *overlap) && (!per || r.per_gpu_batch == *per))
      out.push_back(&r);
  return out;
}

const char* plan_colour(const std::string& p) {
  if (p == "auto") return "#1f77b4";
  if (p == "dp") return "#d62728";
  if (p == "owt") return "#2ca02c";
  if (p == "megatron") return "#9467bd";
  return "#ff7f0e";  // zero
}

double nan_unless_usable(const paper::plan_time* p) {
  return p && p->applicable() ? p->seconds * 1e3 : std::numeric_limits<double>::quiet_NaN();
}

// One picture per system and model: step time against nodes per per-GPU batch (a line per plan,
// solid with overlap, dashed without), then auto's reduction against the best expert.
std::string figure_svg(const std::vector<paper::row>& rows, const system_setup& sys, const model_setup& m) {
  paper::figure f;
  f.title = m.label + " on " + sys.name + " (" + sys.kind + ", " + std::to_string(sys.gpus_per_node) + " GPU" +
            (sys.gpus_per_node > 1 ? "s" : "") + " per node): predicted";
  for (int per : m.per_gpu_batches) {
    paper::panel& p = f.add(std::to_string(per) + " per GPU: step time", "nodes", "step time (ms, log scale)");
    p.log_x = p.log_y = true;
    std::vector<std::string> plans{"auto"};
    plans.insert(plans.end(), m.experts.begin(), m.experts.end());
    for (bool overlap : {true, false})
      for (const std::string& plan : plans) {
        paper::line l{plan + (overlap ? "" : ", no overlap"), plan_colour(plan), !overlap, {}};
        for (const paper::row* r : select(rows, sys.name, m.label, overlap, per))
          l.points.push_back({double(r->nodes), nan_unless_usable(r->find(plan))});
        p.lines.push_back(std::move(l));
      }
  }
  paper::panel& red = f.add("auto's reduction against the best expert", "nodes", "reduction of step time (%)");
  red.log_x = true;
  red.y_marks = {0};
  const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c"};
  for (std::size_t k = 0; k < m.per_gpu_batches.size(); ++k)
    for (bool overlap : {true, false}) {
      const int per = m.per_gpu_batches[k];
      paper::line l{std::to_string(per) + "/GPU" + (overlap ? "" : ", no overlap"), colours[k % 3], !overlap, {}};
      for (const paper::row* r : select(rows, sys.name, m.label, overlap, per)) {
        const paper::plan_time* b = r->best_expert();
        l.points.push_back({double(r->nodes), b && r->automatic().applicable()
                                                  ? paper::reduction_pct(r->automatic().seconds, b->seconds)
                                                  : std::numeric_limits<double>::quiet_NaN()});
      }
      red.lines.push_back(std::move(l));
    }
  return f.svg();
}

// Per system kind, model family and baseline (the best expert, then each expert), the largest and
// the smallest reduction of auto against that baseline over the rows, with the row where the
// largest occurs.
std::string summary(const std::vector<paper::row>& rows) {
  std::string s = "| system kind | model family | abstract: up to | baseline | autoddl predicted: largest reduction (where) | "
                  "smallest |\n|---|---|---:|---|---|---:|\n";
  const std::vector<std::tuple<std::string, std::string, double>> abstract = {
      {"Multi-Node-Single-GPU", "Transformer", 31.1}, {"Multi-Node-Single-GPU", "VGG", 17.7},
      {"Multi-Node-Multi-GPU", "Transformer", 10.0}, {"Multi-Node-Multi-GPU", "VGG", 71.5}};
  auto kind_of = [](const paper::row& r) {
    for (const auto& x : systems)
      if (x.name == r.system) return x.kind;
    return std::string();
  };
  auto at = [](const paper::row& r) {
    return r.model + ", " + r.system + " " + r.mesh + ", " + std::to_string(r.per_gpu_batch) + "/GPU" +
           (r.overlap ? "" : ", no overlap");
  };
  for (const auto& [kind, family, paper_pct] : abstract) {
    std::vector<std::string> baselines{"best expert"};
    for (const model_setup& m : models)
      if (m.family == family)
        for (const std::string& e : m.experts)
          if (std::find(baselines.begin(), baselines.end(), e) == baselines.end()) baselines.push_back(e);
    for (const std::string& base : baselines) {
      double most = -1e300, least = 1e300;
      const paper::row* where = nullptr;
      for (const paper::row& r : rows) {
        if (kind_of(r) != kind || setup_of(r.model).family != family || !r.automatic().applicable()) continue;
        const paper::plan_time* b = base == "best expert" ? r.best_expert() : r.find(base);
        if (!b || !b->usable()) continue;
        const double v = paper::reduction_pct(r.automatic().seconds, b->seconds);
        if (v > most) most = v, where = &r;
        least = std::min(least, v);
      }
      if (!where) continue;
      char b[64];
      std::snprintf(b, sizeof b, "%.1f %%", paper_pct);
      s += "| " + kind + " | " + family + " | " + (base == "best expert" ? std::string(b) : "") + " | " + base + " | " +
           paper::pct(most) + " (" + at(*where) + ") | " + paper::pct(least) + " |\n";
    }
  }
  return s;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text;
  if (!f) throw error("cannot write '" + p.string() + "'");
}

nlohmann::ordered_json rows_json(const std::vector<paper::row>& rows) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const paper::row& r : rows) {
    nlohmann::ordered_json plans = nlohmann::ordered_json::object();
    for (const paper::plan_time& p : r.plans)
      plans[p.plan] = {{"step_s", p.applicable() ? nlohmann::ordered_json(p.seconds) : nlohmann::ordered_json(nullptr)},
                       {"feasible", p.feasible}, {"note", p.note}};
    a.push_back({{"system", r.system}, {"model", r.model}, {"spec", r.spec}, {"mesh", r.mesh}, {"nodes", r.nodes},
                 {"per_gpu_batch", r.per_gpu_batch}, {"overlap", r.overlap}, {"plans", plans}});
  }
  return a;
}

void predicted(const fs::path& out, bool quick) {
  const std::vector<paper::row> rows = price_all(quick);
  std::string md = "# Predicted: auto against the expert plans (generated by scripts/paper)\n\n";
  md += "Step times in ms, predicted by autoddl's planner; `vs X` = (t_X - t_auto) / t_X, the reduction of step time of "
        "auto against X (negative: auto slower). Transformers in fp16, VGG-16 in fp32, Adam; micro-batches and "
        "recomputation chosen per plan as autoddl-plan --compare does.\n\n";
  md += "### Summary beside the abstract\n\n" + summary(rows) + "\n";
  std::string slower;
  for (const paper::row& r : rows)
    for (const std::string& e : paper::auto_slower_than(r))
      slower += "- " + r.spec + " on " + r.system + " mesh " + r.mesh + (r.overlap ? "" : " (no overlap)") + ": auto " +
                paper::ms(r.automatic().seconds, 3) + " ms vs " + e + " " + paper::ms(r.find(e)->seconds, 3) + " ms\n";
  md += "### Rows where auto is predicted slower than an expert\n\n" + (slower.empty() ? "None.\n" : slower) + "\n";
  for (const system_setup& sys : systems)
    for (const model_setup& m : models)
      for (bool overlap : {true, false}) {
        md += "### " + m.label + " on " + sys.name + " (" + sys.kind + "), " +
              (overlap ? "gradient sync overlaps backward" : "no overlap") + "\n\n";
        md += paper::markdown_table(select(rows, sys.name, m.label, overlap), m.experts) + "\n";
      }
  fs::create_directories(out);
  write(out / "predicted.md", md);
  write(out / "predicted.json", rows_json(rows).dump(1) + "\n");
  for (const system_setup& sys : systems)
    for (const model_setup& m : models) write(out / ("results-" + sys.name + "-" + m.key + ".svg"), figure_svg(rows, sys, m));
  std::printf("%zu rows priced; auto predicted slower than an expert in %s\n", rows.size(),
              slower.empty() ? "no row" : "the rows listed in predicted.md");
}

// bench_step_prediction --json rows: model, mesh, ranks, plan, predicted_s, measured_s, spread_s.
void measured(const fs::path& out, const fs::path& jsonl, const std::string& hardware) {
  std::ifstream f(jsonl);
  if (!f) throw error("cannot read '" + jsonl.string() + "'");
  std::vector<paper::row> meas, pred;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = parse_json(line, "a row of " + jsonl.string());
    const std::string spec = j.at("model"), mesh = j.at("mesh");
    for (auto* rows : {&meas, &pred}) {
      if (rows->empty() || rows->back().spec != spec || rows->back().mesh != mesh) {
        paper::row r;
        r.system = hardware;
        r.model = spec.substr(0, spec.find(':'));
        r.spec = spec;
        r.mesh = mesh;
        r.nodes = j.at("ranks");
        r.overlap = false;  // the CPU executor overlaps nothing (cpu-local*: "overlap": "none")
        const graph g = build_model(spec);
        r.per_gpu_batch = int(graph_batch(g) / r.nodes);
        rows->push_back(std::move(r));
      }
    }
    paper::plan_time m{j.at("plan"), j.at("measured_s"), true, j.at("spread_s"), ""};
    paper::plan_time p{j.at("plan"), j.at("predicted_s"), true, std::numeric_limits<double>::quiet_NaN(), ""};
    meas.back().plans.push_back(m);
    pred.back().plans.push_back(p);
  }
  if (meas.empty()) throw error("'" + jsonl.string() + "' holds no bench_step_prediction --json rows");
  std::string md = "# Measured on this machine: 2 MPI ranks (generated by scripts/paper)\n\n";
  for (std::size_t i = 0; i < meas.size(); ++i) {
    std::vector<std::string> experts;
    for (const paper::plan_time& p : meas[i].plans)
      if (p.plan != "auto") experts.push_back(p.plan);
    md += "### " + meas[i].spec + ", mesh " + meas[i].mesh + "\n\nMeasured (median ± IQR of the interleaved steps):\n\n" +
          paper::markdown_table({&meas[i]}, experts, 2) + "\nPredicted (profile " + hardware + "):\n\n" +
          paper::markdown_table({&pred[i]}, experts, 2) + "\n";
  }
  fs::create_directories(out);
  write(out / "measured.md", md);
  std::printf("%zu measured settings tabulated\n", meas.size());
}

}  // namespace

int main(int argc, char** argv) {
  return tools::guarded("paper_compare", [&] {
    const std::vector<std::string> a(argv + 1, argv + argc);
    if (a.size() >= 2 && a[0] == "predicted" && (a.size() == 2 || (a.size() == 3 && a[2] == "--quick")))
      return predicted(a[1], a.size() == 3);
    if ((a.size() == 3 || a.size() == 4) && a[0] == "measured") return measured(a[1], a[2], a.size() == 4 ? a[3] : "cpu-local");
    throw error("usage: paper_compare predicted OUT [--quick] | paper_compare measured OUT ROWS.jsonl [HARDWARE]");
  });
}
