// The process-wide registry of customop ops: definition order, lookup by name, and the refusal
// of a second definition naming the first.

#include <customop/op_core.h>

#include <c10/util/Exception.h>

#include <mutex>

namespace customop {

// ---- registry ----------------------------------------------------------------------------

namespace {
struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<OpCore>> ops;
};
Registry& registry() {
  // Leaked on purpose: ops must outlive every static destructor that might still call them.
  static auto* r = new Registry();
  return *r;
}
}  // namespace

OpCore& register_op(std::unique_ptr<OpCore> op) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& existing : r.ops) {
    TORCH_CHECK(existing->name() != op->name(), op->name(),
                ": defined multiple times; the first definition is at ",
                format_location(existing->location()), ", this one at ",
                format_location(op->location()));
  }
  if (!op->wrapped_) {
    auto h = c10::Dispatcher::singleton().findSchema({op->name(), ""});
    TORCH_CHECK(!h.has_value(), op->name(),
                ": defined multiple times; it already exists in the dispatcher (",
                h.has_value() ? h->debug() : std::string(), "), this definition at ",
                format_location(op->location()), " is refused");
    op->register_with_dispatcher();
  }
  r.ops.push_back(std::move(op));
  return *r.ops.back();
}

std::vector<const OpCore*> registered_ops() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<const OpCore*> out;
  for (const auto& op : r.ops) out.push_back(op.get());
  return out;
}

const OpCore* find_op(std::string_view qualified_name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& op : r.ops) {
    if (op->name() == qualified_name) return op.get();
  }
  return nullptr;
}

}  // namespace customop
