#pragma once
/// \file
/// What the two C++ digits programs share: the split exported by train.py, a tiny flag
/// parser, and a summary written as one flat JSON object.

#include <torch/script.h>

#include <map>
#include <string>
#include <variant>
#include <vector>

namespace customop::examples {

/// The data train.py exported (`digits_data.pt`, a scripted module whose `tensors` attribute is
/// a Dict[str, Tensor]): x_train [N, 64] float32 pixels scaled to [0, 1], y_train [N] int64
/// labels 0..9, x_test / y_test likewise (the held-out split), py_probs_test [M, 10] the
/// scripted model's class probabilities on x_test in Python, x_grad / y_grad one training
/// batch and grad.<parameter name> the Python gradients of the model's loss on that batch.
/// Throws c10::Error when the file is missing or has no such tensor.
class DemoData {
 public:
  explicit DemoData(const std::string& path);
  /// The tensor stored under `name`; throws c10::Error naming the file when it is absent.
  at::Tensor get(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

 private:
  std::string path_;
  std::map<std::string, at::Tensor> tensors_;
};

/// `--name value` flags; `--help` prints `usage` and exits 0. Unknown flags are an error
/// (exit 2) that lists the known ones.
std::map<std::string, std::string> parse_flags(int argc, char** argv, const std::string& usage,
                                               const std::map<std::string, std::string>& defaults);

/// Writes `fields` as one JSON object to `path` (numbers as numbers, strings quoted).
void write_summary(const std::string& path,
                   const std::map<std::string, std::variant<double, std::string>>& fields);

/// Names of the autograd nodes reachable from `root`'s grad_fn (each node once; none for a
/// leaf or a tensor without grad).
std::vector<std::string> autograd_node_names(const at::Tensor& root);

/// The fraction of rows of `scores` [N, C] whose argmax equals `labels` [N].
double accuracy(const at::Tensor& scores, const at::Tensor& labels);

}  // namespace customop::examples
