// Positive control: correct use of every API the compile-fail cases misuse. It MUST compile
// with the same command line, so a broken command cannot make every case "fail as expected".
#include <customop/customop.h>
#include <customop/static_schema.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

struct Args {
  at::Tensor x;
  int64_t dim;
  std::vector<at::Tensor> xs;
  std::optional<at::Tensor> bias;
};
struct Saved {
  at::Tensor x;
  int64_t dim;
};
struct TypedGrads {
  at::Tensor x;
  std::vector<at::Tensor> xs;
  std::optional<at::Tensor> bias;
};
using Ret = std::tuple<at::Tensor, at::Tensor>;

void correct_use() {
  auto& op = customop::define<Args, Ret>(
      "compile_fail::ok(Tensor x, int dim, Tensor[] xs, Tensor? bias) -> (Tensor, Tensor)");
  op.impl(c10::DeviceType::CPU, [](const Args& a) { return Ret{a.x, a.x}; });
  op.impl_fake([](const Args& a) {
    return Ret{at::empty_symint(a.x.sym_sizes(), a.x.options()), at::empty_like(a.x)};
  });
  op.impl_save_for_backward([](const Args& a, const Ret&) { return Saved{a.x, a.dim}; });
  op.impl_backward(
      [](const Saved&, const at::Tensor& g, const at::Tensor&) {
        return TypedGrads{g, {}, std::nullopt};
      },
      {true, false});
  op.samples(
      [](c10::Device, c10::ScalarType) { return std::vector<std::pair<std::string, Args>>{}; });

  struct XArgs {
    at::Tensor x;
  };
  struct NoSaved {};
  auto& op2 = customop::define<XArgs, "compile_fail::ok2(Tensor x) -> Tensor">();
  op2.impl_autograd([](const XArgs&, const at::Tensor&) { return NoSaved{}; },
                    [](const NoSaved&, const at::Tensor& g) {
                      return customop::Grads{{"x", g}};
                    },
                    std::vector<bool>{true});
  auto& op3 =
      customop::define<XArgs, std::vector<at::Tensor>>("compile_fail::ok3(Tensor x) -> Tensor[]");
  op3.impl_save_for_backward(
      [](const XArgs&, const std::vector<at::Tensor>&) { return NoSaved{}; });
  op3.impl_backward([](const NoSaved&, const std::vector<at::Tensor>& g) { return c10::IValue(); });
  auto& op4 = customop::define<XArgs, std::tuple<at::Tensor, int64_t>>(
      "compile_fail::ok4(Tensor x) -> (Tensor, int)");
  op4.impl_backward([](const NoSaved&, const at::Tensor& g, customop::NoGrad) {
    return customop::Grads{{"x", g}};
  });
  // The schema as a template argument, for an op that writes an argument and returns ().
  struct AddIntoArgs {
    customop::MutableTensor acc;
    at::Tensor x;
  };
  auto& op5 = customop::define<AddIntoArgs, "compile_fail::ok5(Tensor(a!) acc, Tensor x) -> ()">();
  static_assert(std::is_same_v<std::decay_t<decltype(op5)>, customop::Op<AddIntoArgs, void>>);
  op5.impl(c10::DeviceType::CPU, [](const AddIntoArgs& a) { a.acc.add_(a.x); });
}
