// An exception thrown by an op's own code (a kernel, a fake kernel or shape function,
// save_for_backward, the backward or the JVP) leaves the op naming it: the op, which of its
// functions and where that was registered.
//
// Why: the dispatcher passes such an exception up unchanged, so a user's TORCH_CHECK in a
// kernel read only its own text, a std::runtime_error its what(), and `throw 42` "Caught an
// unknown exception!", with no word of which op of a model threw.
//
// NB: the exception's Python type must survive. c10 errors keep their object (context is
// appended, as TORCH_RETHROW does); a Python exception on its way through the kernel
// (python_error, pybind11's, torch's PyTorchError types: FakeTensor's and dynamo's own
// control-flow exceptions among them) passes untouched; any other std::exception becomes the
// c10 error of the Python type torch gives it at torch.ops' boundary (translate_exception_to_
// python): std::out_of_range IndexError, every other one RuntimeError.

#include "op_core_internal.h"

#include <c10/util/Exception.h>
#include <c10/util/Type.h>
#include <cxxabi.h>

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <typeinfo>

namespace customop::detail {

namespace {

// Exceptions that carry a Python exception, or a Python type of their own, through C++.
bool carries_python_exception(const std::exception& e) {
  const std::string type = c10::demangle(typeid(e).name());
  return type == "python_error" || type.starts_with("pybind11::") || type.starts_with("torch::");
}

std::string at(const std::source_location* loc) {
  return loc != nullptr ? " at " + format_location(*loc) : std::string();
}

// "myns::op: the CPU kernel at ops.cpp:12", the start of a message of ours.
std::string where(std::string_view op, std::string_view role, const std::source_location* loc) {
  return std::string(op) + ": the " + std::string(role) + at(loc);
}

}  // namespace

void rethrow_naming_op(std::string_view op, std::string_view role,
                       const std::source_location* loc) {
  try {
    throw;
  } catch (abi::__forced_unwind&) {
    throw;  // thread cancellation must unwind untouched
  } catch (c10::Error& e) {
    // Our own checks name the op ("ns::op: ...", "In the backward function defined for
    // ns::op"), the built-in ops' start with the name unqualified ("rms_norm: weight must ..."):
    // a line naming this op is added only where the message does not name it yet.
    const std::string& msg = e.msg();
    const size_t colons = op.rfind("::");
    const std::string_view unqualified =
        colons == std::string_view::npos ? op : op.substr(colons + 2);
    const bool named = msg.find(op) != std::string::npos ||
                       (msg.starts_with(unqualified) && msg.size() > unqualified.size() &&
                        msg[unqualified.size()] == ':');
    if (!named) {
      e.add_context("raised in " + std::string(op) + "'s " + std::string(role) + at(loc));
    }
    throw;
  } catch (const std::out_of_range& e) {
    TORCH_CHECK_INDEX(false, where(op, role, loc), " threw std::out_of_range: ", e.what());
  } catch (const std::exception& e) {
    if (carries_python_exception(e)) throw;
    TORCH_CHECK(false, where(op, role, loc), " threw ", c10::demangle(typeid(e).name()), ": ",
                e.what());
  } catch (...) {
    const std::type_info* type = abi::__cxa_current_exception_type();
    TORCH_CHECK(false, where(op, role, loc), " threw an exception",
                type != nullptr ? " of type " + c10::demangle(type->name()) : std::string(),
                ", which is no std::exception and carries no message; report errors with "
                "TORCH_CHECK (or throw a std::exception)");
  }
}

}  // namespace customop::detail
