#pragma once
/// \file
/// Loading op libraries with a clear error when they were built against another torch.
/// Every library that links customop::customop records the torch version it was compiled
/// against (the ELF section .customop_torch, from the TORCH_VERSION of torch/version.h).

#include <optional>
#include <string>

namespace customop {

/// The torch version this process's libcustomop was compiled against ("2.15.0"), which is the
/// torch it runs with (libcustomop would not have loaded into another).
const char* torch_version();

/// The torch version recorded in the ELF file `path` ("2.15.0"), or std::nullopt when it has
/// no .customop_torch section (not built with customop, or not an ELF file).
/// Throws c10::Error naming `path` when it cannot be opened.
std::optional<std::string> recorded_torch_version(const std::string& path);

/// dlopen(path, RTLD_NOW | RTLD_GLOBAL), so its static initializers register its ops. Checks
/// the recorded torch version first: a library built against another torch throws c10::Error
/// naming the library, both versions and how to rebuild, without loading it (the alternative
/// is the dynamic linker's "undefined symbol"). Throws c10::Error with dlerror's text (and
/// the recorded version) when dlopen fails.
void load_op_library(const std::string& path);

}  // namespace customop
