#pragma once
// Counts the calls of one dispatcher op while alive (a global RecordFunction callback on the
// FUNCTION scope, which every dispatcher call enters): a test's evidence that a formula runs
// through an op. One counter at a time.
//   const customop::testing::OpCalls calls("customop::rms_norm_backward");
//   ... run the backward ...
//   EXPECT_EQ(calls.count(), 1);

#include <ATen/record_function.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>

namespace customop::testing {

class OpCalls {
 public:
  /// Starts counting the calls of `qualified_name` ("customop::rms_norm_backward").
  explicit OpCalls(std::string qualified_name) : name_(std::move(qualified_name)) {
    active().store(this);
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&OpCalls::on_start).scopes({at::RecordScope::FUNCTION}));
  }
  ~OpCalls() {
    at::removeCallback(handle_);
    active().store(nullptr);
  }
  OpCalls(const OpCalls&) = delete;
  OpCalls& operator=(const OpCalls&) = delete;

  /// Calls counted so far.
  int count() const { return calls_.load(); }

 private:
  static std::atomic<OpCalls*>& active() {
    static std::atomic<OpCalls*> current{nullptr};
    return current;
  }
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    OpCalls* self = active().load();
    if (self != nullptr && self->name_ == fn.name()) ++self->calls_;
    return nullptr;
  }

  std::string name_;
  std::atomic<int> calls_{0};
  at::CallbackHandle handle_ = 0;
};

}  // namespace customop::testing
