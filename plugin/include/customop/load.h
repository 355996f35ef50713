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
/// \returns  TORCH_VERSION of torch/version.h at libcustomop's build, a static string
/// \throws nothing
/// Example:
///   std::cout << "customop built for torch " << customop::torch_version() << '\n';
const char* torch_version();

/// The torch version recorded in the ELF file `path` ("2.15.0"), or std::nullopt when it has
/// no .customop_torch section (not built with customop, or not an ELF file).
/// Reads the ELF headers and that section only; the file is not loaded (no dlopen).
/// \param path  file system path of a shared library (or any file)
/// \returns     the recorded version; std::nullopt also for an ELF file that is not 64-bit
///              little-endian, has truncated headers, or whose section lacks the customop stamp
/// \throws c10::Error naming `path` when it cannot be opened.
/// Example:
///   auto v = customop::recorded_torch_version("libmy_ops.so");
///   if (v && *v != customop::torch_version()) std::cerr << "built against torch " << *v;
std::optional<std::string> recorded_torch_version(const std::string& path);

/// Loads the op library `path` after checking the torch version it was built against.
/// dlopen(path, RTLD_NOW | RTLD_GLOBAL), so its static initializers register its ops. Checks
/// the recorded torch version first: a library built against another torch throws c10::Error
/// naming the library, both versions and how to rebuild, without loading it (the alternative
/// is the dynamic linker's "undefined symbol"). Throws c10::Error with dlerror's text (and
/// the recorded version) when dlopen fails.
/// A library with no recorded version (not built with customop) is loaded unchecked.
/// \param path  path of the op library, as dlopen takes it
/// \throws c10::Error naming `path` when it cannot be opened to read its version (see
///         recorded_torch_version), when it was built against another torch (both versions and
///         the rebuild flag -DCUSTOMOP_PYTHON), or when dlopen fails (dlerror's text).
/// Example:
///   customop::load_op_library("build/libmy_ops.so");
///   auto op = c10::Dispatcher::singleton().findSchemaOrThrow("myns::scale", "");
void load_op_library(const std::string& path);

}  // namespace customop
