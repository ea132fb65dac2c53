// `veloxquant bench engine`: the inference engine on random-weight Llama-shaped models built in
// memory (Model::random_typed) at realistic shapes, next to the machine's physical limits
// measured in the same run:
//   bandwidth  a STREAM-style copy between two large arrays on every thread (bytes read + bytes
//              written per second, STREAM's convention), measured before the first row, just
//              before and just after each weight type's decode rounds at each context, and after
//              the last row. A decode row's bound is the larger of the two copies around its own
//              rounds (its local bound): a shared machine's bandwidth drifts (on this project's
//              machine by 1.6x between two runs 20 minutes apart), and the rows of one run then
//              see different machines; the copies around a row show what the memory could do
//              while it ran. The run's bound (the largest of all the copies) is reported beside
//              it (docs/eval.md says how each ratio leans).
//   read       a plain read of one large array on every thread (bytes read per second): what
//              a decode step, which only reads, could reach at best; shown beside the bound as
//              a second reference (on this project's machine the copy's read + written bytes
//              per second exceed what reading alone reaches), never used for the goal
//   fma peak   a register-resident loop of independent fused multiply-adds on every thread
//              (AVX2 + FMA when compiled for it), 2 FLOP per lane per FMA
// Rows: prefill tokens/s over `prefill_tokens` tokens (FLOP/s / fma peak), and per method and
// context C decode tokens/s after a prefill of C tokens (tokens/s x bytes read per token /
// bandwidth, and tokens/s / full's at the same context), the methods' steps interleaved in
// rounds so that a drift of the machine's speed reaches every method alike. Bytes read per decode
// token are the weight bytes a step reads (every layer matrix, the output matrix, the norms, one
// embedding row, in their allocated sizes) plus the caches' resident K/V content bytes
// (CacheStats).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace vq::bench {

struct EngineBenchOptions {
  std::string shape = "1b";  ///< "1b" (dim 2048, 16 layers, 32/8 heads, hidden 8192, vocab 32000)
                             ///< or "tiny" (a small model for tests)
  std::vector<std::string> weights{"q8_0", "q4_k", "bf16"};  ///< f32 f16 bf16 q8_0 q4_k
  std::vector<int64_t> contexts{512, 4096};
  std::vector<std::string> methods{"full", "h2o:budget=1024", "q8_0", "kvtc"};
  int64_t prefill_tokens = 512;
  int64_t decode_steps = 16;  ///< timed steps per method per round
  /// Decode rounds per context: every method's engine is prefilled first, then each round runs
  /// decode_steps steps of every method in turn (forward order in even rounds, backward in odd
  /// ones), so every row is sampled across the same stretch of the machine's time and `vs full`
  /// compares like with like. decode_steps x rounds is at most 4096.
  int64_t rounds = 4;
  uint64_t seed = 1;
  std::function<void(const std::string&)> progress;  ///< called before each step (may be empty)
};

struct EngineLimits {
  int threads = 0;
  double copy_bytes = 0;       ///< bytes of one array of the copy
  double bandwidth = 0;        ///< bytes/s (read + written): the largest of all the copies
  double bandwidth_start = 0;  ///< the copy measured before the first row
  double bandwidth_end = 0;    ///< the copy measured again after the last row
  /// The copies around each group of decode rounds, in run order (two per weight type and
  /// context: before, after).
  std::vector<double> bandwidth_probes;
  double read_bandwidth = 0;  ///< bytes/s read: the larger of the read before and after the rows
  double read_start = 0, read_end = 0;
  /// The copy and read arrays, like the weights, were advised for 2 MiB pages and the kernel
  /// took the advice (core/large_buffer.hpp; VQ_HUGE_PAGES=0 turns it off for all of them).
  /// Whether it then found 2 MiB frames: EngineModelInfo::huge_page_bytes for the weights.
  bool huge_pages = false;
  double fma_flops = 0;    ///< FLOP/s
  std::string fma_kernel;  ///< "avx512-fma", "avx2-fma" or "scalar"
};

struct EngineRow {
  std::string weights;  ///< weight type
  std::string kind;     ///< "prefill" or "decode"
  std::string method;   ///< cache spec
  int64_t context = 0;  ///< prefill: tokens; decode: tokens in the context before the steps
  int64_t tokens = 0;   ///< tokens timed
  double seconds = 0;
  double tokens_per_s = 0;                 ///< tokens / seconds over every round
  std::vector<double> round_tokens_per_s;  ///< decode: each round's own tok/s, in round order
  double weight_bytes = 0;                 ///< decode: weight bytes read per token
  double kv_bytes = 0;     ///< decode: K/V content bytes resident (mean over the steps)
  double flops = 0;        ///< prefill: FLOP of the timed prefill
  double bound_ratio = 0;  ///< decode: tok/s x bytes / local bandwidth; prefill: FLOP/s / peak
  /// decode: the larger of the copies measured just before and just after this row's rounds
  double local_bandwidth = 0;
  double run_bound_ratio = 0;  ///< decode: tok/s x bytes / the run's bound (EngineLimits)
  double vs_full = 0;          ///< decode: tok/s / full's tok/s at this context (0 = no full row)
  double read_ratio = 0;       ///< decode: tok/s x bytes / read bandwidth (information only)
  /// The goal for the row and whether this run met it: prefill FLOP/s >= 0.5 of the fma
  /// peak; decode >= 0.7 of the local bandwidth bound; and for a method other than full at the
  /// largest context also tok/s >= 0.9x full's.
  std::string goal;
  bool goal_met = false;
  std::string error;  ///< the method failed (message); other fields unset
};

struct EngineModelInfo {
  std::string weights;
  double params = 0;        ///< values in all weight tensors
  double weight_bytes = 0;  ///< bytes of all weight tensors as allocated
  double build_seconds = 0;
  /// How much more of the process's memory sat on 2 MiB pages after the build than before it
  /// (the weights' share, core/large_buffer.hpp); -1 where the system does not say.
  double huge_page_bytes = -1;
};

struct EngineBenchResult {
  EngineLimits limits;
  std::vector<EngineModelInfo> models;
  std::vector<EngineRow> rows;
};

/// Validates the options first (InvalidArgument naming the value: an unknown shape or weight type,
/// a context or token count outside [1, 131072], decode_steps outside [1, 4096], rounds outside
/// [1, 64] or decode_steps x rounds above 4096, no methods).
EngineBenchResult run_engine_bench(const EngineBenchOptions& opt);

/// The measurements on their own (also used by tests).
double measure_copy_bandwidth(int64_t bytes_per_array, double min_seconds);
/// Bytes read per second by every thread summing its share of one array (the best pass).
double measure_read_bandwidth(int64_t bytes, double min_seconds);
double measure_fma_peak(double min_seconds, std::string* kernel = nullptr);

}  // namespace vq::bench
