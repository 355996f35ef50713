#pragma once
// customop-gradcheck --sharding: the sharding check is Python (DTensor is), so the CLI runs
// `python -m customop._sharding_main` with the same op glob and libraries.

#include <string>
#include <vector>

namespace customop::gradcheck::cli {

/// Runs the sharding check of every op matching `op_glob` that declares a rule, on its
/// registered samples, with `python` (CUSTOMOP_PYTHON, else python3) and the customop package
/// it imports. Its output goes to this process's stdout and stderr.
/// \param op_glob    the --op glob
/// \param libraries  the --load libraries, loaded there with customop.load_library
/// \param json_path  where the reports go as JSON ("" for none)
/// \returns 0 every rule held, 1 one failed, 2 no op matched; 3 when the check could not run
///          (Python could not start, or could not import torch and customop: the message names
///          the interpreter and CUSTOMOP_PYTHON). CUSTOMOP_PYTHON is one executable path.
/// \throws nothing
int run_sharding_check(const std::string& op_glob, const std::vector<std::string>& libraries,
                       const std::string& json_path);

}  // namespace customop::gradcheck::cli
