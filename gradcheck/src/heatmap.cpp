// PNG heatmaps of |numerical - analytical| and of low-precision errors |low - precise| (libpng).

#include <customop/gradcheck/report.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

namespace customop::gradcheck {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};

void write_rgb_png(const std::string& path, int width, int height,
                   const std::vector<unsigned char>& rgb) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "wb"));
  TORCH_CHECK(file != nullptr, "write_heatmap_png: cannot open '", path, "' for writing");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  TORCH_CHECK(png != nullptr, "write_heatmap_png: png_create_write_struct failed");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    TORCH_CHECK(false, "write_heatmap_png: png_create_info_struct failed");
  }
  // NB: libpng reports errors by longjmp; no C++ object with a destructor may live between
  // setjmp and the libpng calls below.
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    TORCH_CHECK(false, "write_heatmap_png: libpng failed writing '", path, "'");
  }
  png_init_io(png, file.get());
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < height; ++y) {
    png_write_row(png, const_cast<png_bytep>(rgb.data() + static_cast<std::size_t>(y) * width * 3));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
}

// Draws a [rows, cols] grid of errors `err` (float64, +inf for non-finite) with the cells
// flagged in `bad` in red; grey level = sqrt(error / largest finite error).
void draw_grid(const at::Tensor& err_in, const at::Tensor& bad_in, const std::string& path) {
  const at::Tensor err = err_in.contiguous();
  const at::Tensor bad = bad_in.contiguous();
  const int64_t rows = err.size(0), cols = err.size(1);
  const at::Tensor finite = at::where(at::isinf(err), at::zeros_like(err), err);
  const double top = std::max(finite.max().item<double>(), 1e-300);
  // Cells up to 32 pixels, images of about 1024 pixels a side (more for huge grids).
  const int64_t cell = std::clamp<int64_t>(1024 / std::max(rows, cols), 1, 32);
  const int64_t width = cols * cell, height = rows * cell;
  std::vector<unsigned char> rgb(static_cast<std::size_t>(width * height * 3));
  const auto e = err.accessor<double, 2>();
  const auto b = bad.accessor<bool, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double v = std::isinf(e[r][c]) ? 1.0 : std::sqrt(e[r][c] / top);
      const auto level = static_cast<unsigned char>(std::lround(255.0 * std::clamp(v, 0.0, 1.0)));
      unsigned char px[3] = {level, level, level};
      if (b[r][c]) {
        px[0] = static_cast<unsigned char>(std::max<int>(level, 128));
        px[1] = static_cast<unsigned char>(level / 4);
        px[2] = static_cast<unsigned char>(level / 4);
      }
      for (int64_t y = r * cell; y < (r + 1) * cell; ++y) {
        for (int64_t x = c * cell; x < (c + 1) * cell; ++x) {
          const std::size_t at = static_cast<std::size_t>((y * width + x) * 3);
          rgb[at] = px[0];
          rgb[at + 1] = px[1];
          rgb[at + 2] = px[2];
        }
      }
    }
  }
  write_rgb_png(path, static_cast<int>(width), static_cast<int>(height), rgb);
}

}  // namespace

void write_heatmap_png(const PairReport& pair, const Tolerances& tol, const std::string& path) {
  TORCH_CHECK_VALUE(pair.numerical.defined() && pair.analytical.defined(),
                    "write_heatmap_png: the pair (output ", pair.output, ", input ", pair.input,
                    " ('", pair.input_name,
                    "')) holds no Jacobians (it passed, or had more "
                    "than 2^22 entries; set keep_jacobians to keep them)");
  const at::Tensor num = pair.numerical.to(at::kDouble).contiguous();
  const at::Tensor ana = pair.analytical.to(at::kDouble).contiguous();
  TORCH_CHECK_VALUE(num.size(0) > 0 && num.size(1) > 0, "write_heatmap_png: the Jacobian is empty");
  at::Tensor err = (ana - num).abs();
  err = at::where(at::isnan(err), at::full_like(err, INFINITY), err);
  const at::Tensor limit = pair.tolerance.defined() && pair.tolerance.sizes() == num.sizes()
                               ? pair.tolerance.to(at::kDouble)
                               : tol.atol + tol.rtol * num.abs();
  draw_grid(err, (err <= limit).logical_not(), path);
}

void write_heatmap_png(const LowPrecisionReport& rep, const std::string& path) {
  TORCH_CHECK_VALUE(rep.error.defined(), "write_heatmap_png: the low-precision comparison of ",
                    rep.what, " holds no error tensor (it passed, or failed on metadata)");
  TORCH_CHECK_VALUE(rep.error.numel() > 0, "write_heatmap_png: ", rep.what, " is empty");
  at::Tensor err = rep.error.to(at::kDouble);
  // Rows: every dim but the last; columns: the last (a 0-d or 1-d tensor is one row).
  err = err.dim() == 0 ? err.reshape({1, 1}) : err.reshape({-1, err.size(-1)});
  err = at::where(at::isnan(err), at::full_like(err, INFINITY), err);
  // Red: above the max bound, or not finite where the precise run is.
  draw_grid(err, (err <= rep.max_bound).logical_not(), path);
}

std::vector<std::string> write_heatmaps(const RunSummary& summary, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> written;
  auto clean = [](std::string s) {
    for (auto& ch : s) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.') ch = '_';
    }
    return s;
  };
  // File names carry the case's label (the spec's "case N" or the sample's label) and its
  // 0-based row in the summary, which keeps them unique.
  for (std::size_t k = 0; k < summary.cases.size(); ++k) {
    const auto& c = summary.cases[k];
    if (c.status != CaseStatus::kFailed) continue;
    for (const auto* pairs : {&c.result.pairs, &c.result.second_order_pairs}) {
      for (const auto& p : *pairs) {
        if (p.passed || !p.numerical.defined()) continue;
        const std::string name =
            clean(c.op) + "_" + clean(c.device) + "_" + c.dtype + "_" +
            std::string(mode_name(c.mode)) + "_" + clean(c.label) + "_row" + std::to_string(k) +
            (pairs == &c.result.pairs ? "" : "_second_order") + "_out" + std::to_string(p.output) +
            "_in" + std::to_string(p.input) + ".png";
        const std::string path = (std::filesystem::path(dir) / name).string();
        write_heatmap_png(p, c.result.tolerances, path);
        written.push_back(path);
      }
    }
    for (const auto& lp : c.result.low_precision) {
      if (lp.passed || !lp.error.defined() || lp.error.numel() == 0) continue;
      const std::string which =
          lp.output >= 0 ? "_out" + std::to_string(lp.output) : "_grad" + std::to_string(lp.input);
      const std::string name = clean(c.op) + "_" + clean(c.device) + "_" + c.dtype + "_" +
                               clean(c.label) + "_row" + std::to_string(k) + "_low_precision" +
                               which + ".png";
      const std::string path = (std::filesystem::path(dir) / name).string();
      write_heatmap_png(lp, path);
      written.push_back(path);
    }
  }
  return written;
}

}  // namespace customop::gradcheck
