#pragma once
/// \file
/// Everything a user of customop includes: define ops, register kernels and formulas.
#include <customop/arg_types.h>
#include <customop/grads.h>
#include <customop/op.h>
#include <customop/op_core.h>
