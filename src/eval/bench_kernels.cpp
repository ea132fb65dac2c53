// Stored-type kernel benchmark (see bench_kernels.hpp).
#include "eval/bench_kernels.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>

#include "core/rng.hpp"
#include "kernels/matmul.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/model.hpp"
#include "veloxquant/tensor.hpp"

namespace vq::bench {

namespace {

const char* const kAllTypes[] = {"F32",  "F16",  "BF16", "Q8_0", "Q4_0", "Q4_1",
                                 "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

GgmlType type_named(const std::string& n) {
  // Either case (q8_0 as bench engine spells it, or Q8_0 as ggml does).
  const std::string up = upper(n);
  for (uint32_t id = 0; id < 64; ++id)
    if (ggml_type_supported(id) && ggml_type_name(id) == up) return static_cast<GgmlType>(id);
  VQ_THROW(InvalidArgument, "bench kernels: type '", n,
           "' is not supported (supported: ", ggml_supported_types_list(), ")");
}

// Valid stored bytes: random codes; every fp16 scale / min field set to a small value, so each
// block decodes to finite weights (the speed does not depend on the values).
std::vector<uint8_t> random_weights(GgmlType t, int64_t n, Rng& rng) {
  const int64_t bv = ggml_block_values(t), bb = ggml_block_bytes(t);
  std::vector<uint8_t> b(static_cast<size_t>(n / bv * bb));
  for (auto& x : b) x = static_cast<uint8_t>(rng.next_u64() & 0xFF);
  const uint16_t small = fp32_to_fp16(0.001f);
  auto set16 = [&](size_t at) { std::memcpy(b.data() + at, &small, 2); };
  if (t == GgmlType::F32) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(rng.normal() * 0.05);
      std::memcpy(b.data() + 4 * i, &v, 4);
    }
  } else if (t == GgmlType::F16 || t == GgmlType::BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(rng.normal() * 0.05);
      uint32_t u;
      std::memcpy(&u, &v, 4);
      const uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(v) : static_cast<uint16_t>(u >> 16);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  } else {
    for (int64_t k = 0; k < n / bv; ++k) {
      const size_t o = static_cast<size_t>(k * bb);
      if (t == GgmlType::Q6_K) {
        set16(o + 208);
      } else {
        set16(o);
        if (t != GgmlType::Q8_0 && t != GgmlType::Q4_0 && t != GgmlType::Q5_0) set16(o + 2);
      }
    }
  }
  return b;
}

// The best of `repeats` timed calls, after one untimed call (the first call of a run also starts
// the thread pool's workers and faults in the output).
template <typename F>
double best_us(int repeats, F&& f) {
  f();
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best,
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

std::vector<KernelRow> run_kernel_bench(const KernelOptions& opt) {
  VQ_CHECK(opt.rows >= 1 && opt.rows <= 65536 && opt.cols >= 256 && opt.cols <= 65536 &&
               opt.cols % 256 == 0,
           InvalidArgument, "bench kernels: rows = ", opt.rows,
           " must be in [1, 65536], cols = ", opt.cols, " a multiple of 256 in [256, 65536]");
  VQ_CHECK(opt.batch >= 1 && opt.batch <= 4096, InvalidArgument,
           "bench kernels: batch = ", opt.batch, " is outside [1, 4096]");
  VQ_CHECK(opt.repeats >= 1 && opt.repeats <= 1000, InvalidArgument,
           "bench kernels: repeats = ", opt.repeats, " is outside [1, 1000]");
  // ggml's spelling, each type once (q8_0 and Q8_0 are the same kernel)
  std::vector<std::string> names;
  for (const std::string& n : opt.types) {
    (void)type_named(n);  // refuses an unknown type, naming it
    if (std::find(names.begin(), names.end(), upper(n)) == names.end()) names.push_back(upper(n));
  }
  if (names.empty()) names.assign(std::begin(kAllTypes), std::end(kAllTypes));
  if (std::find(names.begin(), names.end(), "F32") == names.end())
    names.insert(names.begin(), "F32");  // the reference every ratio is taken against
  Rng rng(1);
  AlignedFloats x(static_cast<size_t>(opt.cols)), X(static_cast<size_t>(opt.batch * opt.cols));
  AlignedFloats y(static_cast<size_t>(opt.rows)), Y(static_cast<size_t>(opt.batch * opt.rows));
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (auto& v : X) v = static_cast<float>(rng.normal());
  std::vector<KernelRow> rows;
  for (const std::string& n : names) {
    const GgmlType t = type_named(n);
    const std::vector<uint8_t> w = random_weights(t, opt.rows * opt.cols, rng);
    const WeightMatrix m{t, w.data(), opt.rows, opt.cols};
    KernelRow r;
    r.type = n;
    r.bits_per_weight =
        static_cast<double>(w.size()) * 8.0 / static_cast<double>(opt.rows * opt.cols);
    r.matvec_us = best_us(opt.repeats, [&] { kernels::matvec(m, x.data(), y.data()); });
    r.matvec_ref_us =
        best_us(std::max(1, opt.repeats / 2), [&] { kernels::matvec_ref(m, x.data(), y.data()); });
    r.matmul_us = best_us(opt.repeats, [&] { kernels::matmul(m, X.data(), opt.batch, Y.data()); });
    rows.push_back(r);
  }
  const auto f32 =
      std::find_if(rows.begin(), rows.end(), [](const KernelRow& r) { return r.type == "F32"; });
  for (auto& r : rows) {
    r.matvec_vs_f32 = r.matvec_us / f32->matvec_us;
    r.matmul_vs_f32 = r.matmul_us / f32->matmul_us;
  }
  return rows;
}

}  // namespace vq::bench
