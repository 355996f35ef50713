#pragma once
// The mutation corpus: ops in the TorchScript namespace `customop_mutants`
// (libcustomop_mutants.so), correct ones and their deliberately wrong twins, for the gradcheck
// harness's tests, the CLI and the Python agreement test. Loading the library registers every op
// (static initializers).

#include <string>
#include <vector>

namespace customop_mutants {

/// One op of the corpus.
struct CorpusEntry {
  std::string op;             ///< qualified name, "customop_mutants::cube_sign_flip"
  std::string twin;           ///< the correct op it breaks ("" for a correct op)
  std::string fault;          ///< what is wrong, in words ("" for a correct op)
  std::string expected;       ///< the check that must fail (check_name(), "" for a correct op)
  bool float32_only = false;  ///< its kernel refuses float64 (samples only for float32)
  /// The fault is below what float32 differences resolve (a 0.1 % error): it must be caught
  /// in float64 and in float32 through the float64 reference, not by Ridders in float32.
  bool fine = false;
  /// Its samples cost thousands of evaluations in slow mode: fewer seeds in the suites.
  bool heavy = false;
};

/// Every op of the corpus, correct ones first. Calling it also makes sure the ops are registered.
const std::vector<CorpusEntry>& corpus();

/// One op of the schema corpus: its backward is right (or it has none); what may be wrong is its
/// contract with the dispatcher: what it writes, its version counter, its fake kernel.
struct SchemaCorpusEntry {
  std::string op;        ///< qualified name, "customop_mutants::double_it_writes_input"
  std::string twin;      ///< the correct op it breaks ("" for a correct op)
  std::string fault;     ///< what is wrong, in words ("" for a correct op)
  std::string expected;  ///< the check that must fail: check_name(), or "shape_lock" (the
                         ///< Python API's symbolic-shape check; "" for a correct op)
};

/// The schema corpus, correct ops first (their samples: op.samples, float64 on CPU).
const std::vector<SchemaCorpusEntry>& schema_corpus();

}  // namespace customop_mutants
