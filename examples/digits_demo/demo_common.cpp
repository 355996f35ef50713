#include "demo_common.h"

#include <torch/csrc/autograd/function.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <type_traits>
#include <unordered_set>

namespace customop::examples {

DemoData::DemoData(const std::string& path) : path_(path) {
  torch::jit::Module container = torch::jit::load(path, torch::kCPU);
  TORCH_CHECK(container.hasattr("tensors"), path,
              ": not a digits data container (no 'tensors' attribute); re-run train.py");
  for (const auto& kv : container.attr("tensors").toGenericDict()) {
    tensors_.emplace(kv.key().toStringRef(), kv.value().toTensor());
  }
}

at::Tensor DemoData::get(const std::string& name) const {
  auto it = tensors_.find(name);
  TORCH_CHECK(it != tensors_.end(), path_, ": has no tensor '", name, "'; re-run train.py");
  return it->second;
}

std::map<std::string, std::string> parse_flags(int argc, char** argv, const std::string& usage,
                                               const std::map<std::string, std::string>& defaults) {
  auto flags = defaults;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      std::exit(0);
    }
    const std::string name = arg.rfind("--", 0) == 0 ? arg.substr(2) : "";
    if (name.empty() || !defaults.count(name) || i + 1 >= argc) {
      std::cerr << argv[0] << ": bad argument '" << arg << "'"
                << (i + 1 >= argc && !name.empty() ? " (missing value)" : "") << "\n"
                << usage;
      std::exit(2);
    }
    flags[name] = argv[++i];
  }
  return flags;
}

void write_summary(const std::string& path,
                   const std::map<std::string, std::variant<double, std::string>>& fields) {
  std::ofstream out(path);
  TORCH_CHECK(out, "cannot write the summary file '", path, "'");
  out << "{";
  const char* sep = "";
  for (const auto& [key, value] : fields) {
    out << sep << "\"" << key << "\": ";
    if (const double* d = std::get_if<double>(&value)) {
      out << std::setprecision(10) << *d;
    } else {
      out << "\"";
      for (char c : std::get<std::string>(value)) {
        if (c == '"' || c == '\\') out << '\\';
        out << (c == '\n' ? ' ' : c);
      }
      out << "\"";
    }
    sep = ", ";
  }
  out << "}\n";
}

double accuracy(const at::Tensor& scores, const at::Tensor& labels) {
  return scores.argmax(1).eq(labels).to(torch::kDouble).mean().item<double>();
}

std::vector<std::string> autograd_node_names(const at::Tensor& root) {
  std::vector<std::string> names;
  std::unordered_set<const torch::autograd::Node*> seen;
  // NB: decltype: grad_fn() is a std::shared_ptr up to torch 2.14, a c10::intrusive_ptr from
  // 2.15 (as are the edges' functions).
  std::vector<std::decay_t<decltype(root.grad_fn())>> todo{root.grad_fn()};
  while (!todo.empty()) {
    auto node = std::move(todo.back());
    todo.pop_back();
    if (!node || !seen.insert(node.get()).second) continue;
    names.push_back(node->name());
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function);
  }
  return names;
}

}  // namespace customop::examples
