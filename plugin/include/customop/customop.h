#pragma once
/// \file
/// Everything a user of customop includes: define ops, register kernels and formulas.
/// customop/load.h (loading op libraries) and customop/static_schema.h (the schema as a
/// template argument) are included separately.
///
/// Example:
///   #include <customop/customop.h>
///   auto& op = customop::define<ScaleArgs>("myns::scale(Tensor x, float alpha) -> Tensor");
#include <customop/arg_types.h>
#include <customop/grads.h>
#include <customop/op.h>
#include <customop/op_core.h>
