// `svdq`: the original SVDq rule (keys only). Per (batch, head): kvtc's PCA of the keys, fitted
// once on the first fit_tokens tokens and frozen; the D latent slots are cut into 8 equal groups
// quantized at (8, 4, 2, 1, 1, 0, 0, 0) bits (the `schedule` option), 0 = the component is
// dropped. Values are stored verbatim at fp16. Bytes counted as for kvtc (docs/methods.md).
#include <memory>

#include "core/options.hpp"
#include "transform/family_coders.hpp"
#include "veloxquant/errors.hpp"

namespace vq {

namespace {

std::vector<int> schedule_of(const CacheConfig& c) {
  std::vector<int> s;
  for (int64_t b : c.get_int_list("schedule")) s.push_back(static_cast<int>(b));
  VQ_CHECK(!s.empty() && s.size() <= 64, InvalidArgument, "svdq: schedule has ", s.size(),
           " groups; allowed [1, 64]");
  return s;
}

}  // namespace

MethodInfo svdq_method_info() {
  MethodInfo m;
  m.id = "svdq";
  m.description =
      "keys-only SVDq: key PCA latents in 8 equal groups at (8,4,2,1,1,0,0,0) bits; "
      "values fp16";
  m.options = transform::chunk_options();
  m.options.push_back(opt_int_list("schedule", "8,4,2,1,1,0,0,0", 0, 8,
                                   "bits of each equal group of key latent components, "
                                   "largest-variance group first"));
  m.options.push_back(transform::kind_option());
  m.validate = [](const CacheConfig& c) { schedule_of(c); };
  transform::set_family_factories(m, [](const CacheConfig& c, int64_t head_dim) {
    const std::vector<int> schedule = schedule_of(c);
    // component j takes group j * G / D: with more groups than components some would be skipped
    VQ_CHECK(static_cast<int64_t>(schedule.size()) <= head_dim, InvalidArgument,
             "svdq: schedule has ", schedule.size(), " groups, more than head_dim ", head_dim,
             " (each group needs at least one latent component)");
    return transform::KvCoderFactory(
        [schedule](int64_t w, int kv) -> std::unique_ptr<transform::RowCoder> {
          if (kv == 1) return std::make_unique<transform::Fp16RowCoder>(w);
          return std::make_unique<transform::FixedRulePcaCoder>(
              w, [schedule](const std::vector<double>& v, int64_t D) {
                return transform::svdq_schedule_bits(static_cast<int64_t>(v.size()), D, schedule);
              });
        });
  });
  return m;
}

}  // namespace vq
