// GPU benchmarks of the CUDA ops against the bound measured in the same run (a device-to-device copy):
// the feature pass with the compact predictor for one request, the reference-shape MLP in bf16, and
// greedy / sample-and-match / rejection acceptance for 64 requests x 17 rows x 151,936 fp32 logits.
// Prints a table; with an argument, also writes one JSON object per measurement to that file.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "blockpilot/cuda.cuh"

namespace bp = blockpilot;

namespace {

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "bench_gpu: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}
#define BENCH_CUDA(call) cuda_ok((call), #call)

template <class T>
struct device_array {
  T* data = nullptr;
  std::size_t count = 0;
  explicit device_array(std::size_t n) : count(n) {
    if (!BENCH_CUDA(cudaMalloc(&data, n * sizeof(T)))) data = nullptr;
  }
  ~device_array() {
    if (data) (void)cudaFree(data);
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  [[nodiscard]] std::span<std::byte> bytes() const { return {reinterpret_cast<std::byte*>(data), count * sizeof(T)}; }
};

/// A uniform value in [0, 1) from an index and a seed (splitmix64).
__device__ __forceinline__ float hash_uniform(std::uint64_t i, std::uint64_t seed) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ULL + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * 0x1p-24f;
}

template <class T>
__global__ void fill_uniform(T* p, std::size_t n, std::uint64_t seed, float lo, float hi) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float v = lo + (hi - lo) * hash_uniform(i, seed);
    if constexpr (std::is_same_v<T, float>) p[i] = v;
    else p[i] = __float2bfloat16_rn(v);
  }
}
__global__ void fill_tokens(bp::token_id* p, std::size_t n, std::uint64_t seed, int vocab) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<bp::token_id>(hash_uniform(i, seed) * static_cast<float>(vocab)) % vocab;
}
__global__ void fill_sizes(int* p, int n, std::uint64_t seed, int max_block, bool ragged) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = ragged ? 1 + static_cast<int>(hash_uniform(static_cast<std::uint64_t>(i), seed) * static_cast<float>(max_block)) % max_block
                  : max_block;
}
__global__ void fill_streams(bp::philox_stream* p, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = {0x1234567ULL + static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(7 * i)};
}

template <class T>
void fill(T* p, std::size_t n, std::uint64_t seed, float lo, float hi) {
  fill_uniform<T><<<1024, 256>>>(p, n, seed, lo, hi);
}

struct result {
  std::string name;
  double us = NAN;           ///< time per call
  double bytes = 0;          ///< bytes the call must read at least
  double goal_us = 0;        ///< 0: no goal
  std::string note;
  bool ok = true;
};

std::vector<result> results;
double copy_bandwidth = NAN;  // bytes read + written per second

/// Average time of `reps` back-to-back calls of `call` on `stream` after `warmup` calls, in µs.
double time_us(cudaStream_t stream, int warmup, int reps, const std::function<bool()>& call) {
  for (int i = 0; i < warmup; ++i)
    if (!call()) return NAN;
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  BENCH_CUDA(cudaEventRecord(start, stream));
  for (int i = 0; i < reps; ++i)
    if (!call()) return NAN;
  BENCH_CUDA(cudaEventRecord(stop, stream));
  if (!BENCH_CUDA(cudaEventSynchronize(stop))) return NAN;
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(stop));
  return 1000.0 * ms / reps;
}

/// Median over `reps` of one call timed alone (events around it, synchronised): latency, not throughput.
double latency_us(cudaStream_t stream, int reps, const std::function<bool()>& call) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double us = time_us(stream, 0, 1, call);
    if (std::isnan(us)) return NAN;
    t.push_back(us);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Time per replay of a CUDA graph holding one call.
double graph_us(cudaStream_t stream, int reps, const std::function<bool()>& call) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  if (!BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal))) return NAN;
  const bool captured = call();
  if (!BENCH_CUDA(cudaStreamEndCapture(stream, &graph)) || !captured) return NAN;
  if (!BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0))) return NAN;
  const double us = time_us(stream, 5, reps, [&] { return BENCH_CUDA(cudaGraphLaunch(exec, stream)); });
  BENCH_CUDA(cudaGraphExecDestroy(exec));
  BENCH_CUDA(cudaGraphDestroy(graph));
  return us;
}

bool status_ok(bp::status s, const char* what) {
  if (s == bp::status::success) return true;
  std::fprintf(stderr, "bench_gpu: %s: %s\n", what, std::string(bp::to_string(s)).c_str());
  return false;
}

void bench_copy(cudaStream_t stream) {
  const std::size_t bytes = std::size_t{1} << 30;
  device_array<std::byte> a(bytes), b(bytes);
  if (!a.data || !b.data) return;
  BENCH_CUDA(cudaMemset(a.data, 1, bytes));
  const double us = time_us(stream, 3, 20, [&] { return BENCH_CUDA(cudaMemcpyAsync(b.data, a.data, bytes, cudaMemcpyDeviceToDevice, stream)); });
  copy_bandwidth = 2.0 * static_cast<double>(bytes) / (us * 1e-6);
  results.push_back({"d2d copy 1 GiB (read + write)", us, 2.0 * static_cast<double>(bytes), 0, "the bound", !std::isnan(us)});
}

/// The feature pass (k, fp32 logits) with or without a compact predictor (hidden 256-256, 5 classes).
template <class W>
void bench_features(cudaStream_t stream, int batch, int top_k, bool with_predictor, double goal_us) {
  const std::int64_t vocab = 151936;
  const int input = top_k + 9, hidden = 256, classes = 5;
  bp::mlp_device_shape shape;
  shape.input = input;
  shape.hidden_count = 2;
  shape.hidden[0] = shape.hidden[1] = hidden;
  shape.classes = classes;
  // 64 different rows, rotated through, so that consecutive calls do not reuse one row.
  const int row_sets = batch == 1 ? 64 : 1;
  device_array<float> logits(static_cast<std::size_t>(row_sets) * batch * vocab);
  device_array<float> features(static_cast<std::size_t>(batch) * input);
  device_array<bp::status> statuses(static_cast<std::size_t>(batch));
  device_array<W> parameters(static_cast<std::size_t>(shape.parameter_count()));
  device_array<float> mean(static_cast<std::size_t>(input)), stddev(static_cast<std::size_t>(input));
  device_array<int> classes_out(static_cast<std::size_t>(batch));
  fill(logits.data, logits.count, 1, -8.0f, 8.0f);
  fill(parameters.data, parameters.count, 2, -0.05f, 0.05f);
  fill(mean.data, mean.count, 3, -0.1f, 0.1f);
  fill(stddev.data, stddev.count, 4, 0.5f, 2.0f);
  using op = bp::compact_feature_op<bp::cuda_backend>;
  bp::compact_feature_args<float> args;
  args.shape = {batch, vocab, top_k};
  args.temperature = 1.0f;
  args.features = features.data;
  args.statuses = statuses.data;
  bp::compact_predictor_args<W> predictor;
  predictor.network = {parameters.data, mean.data, stddev.data, shape};
  predictor.classes = classes_out.data;
  device_array<std::byte> workspace(op::workspace_size(args.shape));
  int next = 0;
  const auto call = [&] {
    args.logits = logits.data + static_cast<std::size_t>(next) * batch * vocab;
    next = (next + 1) % row_sets;
    const bp::status s = with_predictor ? op::run(bp::cuda_backend{stream}, args, predictor, workspace.bytes())
                                        : op::run(bp::cuda_backend{stream}, args, workspace.bytes());
    return status_ok(s, "feature pass");
  };
  const std::string name = "features k=" + std::to_string(top_k) + (with_predictor ? std::string(" + MLP ") + (sizeof(W) == 2 ? "bf16" : "fp32") : "") +
                           ", batch " + std::to_string(batch);
  const double bytes = static_cast<double>(batch) * vocab * sizeof(float);
  const double stream_us = time_us(stream, 5, 200, call);
  results.push_back({name + " (stream)", stream_us, bytes, 0, "memset + kernel, back to back", !std::isnan(stream_us)});
  const double single = latency_us(stream, 50, call);
  results.push_back({name + " (one call)", single, bytes, 0, "median latency of one call", !std::isnan(single)});
  const double graph = graph_us(stream, 200, call);  // the captured call reads one fixed row set
  results.push_back({name + " (graph)", graph, bytes, goal_us, "CUDA graph replay", !std::isnan(graph)});
}

void bench_reference_mlp(cudaStream_t stream, int batch) {
  bp::mlp_device_shape shape;
  shape.input = 151936;
  shape.hidden_count = 2;
  shape.hidden[0] = shape.hidden[1] = 2048;
  shape.classes = 5;
  device_array<__nv_bfloat16> parameters(static_cast<std::size_t>(shape.parameter_count()));
  device_array<float> mean(151936), stddev(151936), x(static_cast<std::size_t>(batch) * 151936), logits(static_cast<std::size_t>(batch) * 5);
  fill(parameters.data, parameters.count, 5, -0.005f, 0.005f);
  fill(mean.data, mean.count, 6, -0.1f, 0.1f);
  fill(stddev.data, stddev.count, 7, 0.5f, 2.0f);
  fill(x.data, x.count, 8, -3.0f, 3.0f);
  using op = bp::mlp_forward_op<bp::cuda_backend>;
  device_array<std::byte> workspace(op::workspace_size(shape, batch));
  const bp::mlp_device_view<__nv_bfloat16> net{parameters.data, mean.data, stddev.data, shape};
  const auto call = [&] {
    return status_ok(op::run(bp::cuda_backend{stream}, net, bp::matrix_view<const float>(x.data, batch, 151936),
                             bp::matrix_view<float>(logits.data, batch, 5), workspace.bytes()),
                     "reference MLP");
  };
  const double bytes = static_cast<double>(shape.parameter_count()) * 2;
  const std::string name = "MLP 151936-2048-2048-5 bf16, batch " + std::to_string(batch);
  const double us = time_us(stream, 3, 20, call);
  results.push_back({name + " (stream)", us, bytes, batch == 1 ? 250.0 : 0.0, "7 launches", !std::isnan(us)});
  const double graph = graph_us(stream, 20, call);
  results.push_back({name + " (graph)", graph, bytes, 0, "CUDA graph replay", !std::isnan(graph)});
}

template <class Rule>
void bench_acceptance(cudaStream_t stream, bool ragged, double goal_us) {
  const int batch = 64, max_block = 17;
  const std::int64_t vocab = 151936;
  const std::size_t rows = static_cast<std::size_t>(batch) * max_block;
  device_array<float> logits(rows * vocab);
  device_array<float> q(std::is_same_v<Rule, bp::rejection_sampling> ? static_cast<std::size_t>(batch) * (max_block - 1) * vocab : 1);
  device_array<bp::token_id> blocks(rows);
  device_array<int> sizes(batch);
  device_array<bp::philox_stream> rng(batch);
  device_array<bp::acceptance_result> out(batch);
  device_array<bp::status> statuses(batch);
  fill(logits.data, logits.count, 9, -8.0f, 8.0f);
  fill(q.data, q.count, 10, 0.0f, 2.0f / static_cast<float>(vocab));
  fill_tokens<<<64, 256>>>(blocks.data, rows, 11, static_cast<int>(vocab));
  fill_sizes<<<1, 64>>>(sizes.data, batch, 12, max_block, ragged);
  fill_streams<<<1, 64>>>(rng.data, batch);
  using op = bp::acceptance_op<Rule, bp::cuda_backend>;
  bp::batched_acceptance_input in;
  in.shape = {batch, max_block, vocab};
  in.target_logits = logits.data;
  in.blocks = blocks.data;
  in.block_sizes = sizes.data;
  in.draft_probs = std::is_same_v<Rule, bp::rejection_sampling> ? q.data : nullptr;
  in.temperature = std::is_same_v<Rule, bp::greedy_match> ? 0.0f : 1.0f;
  in.rng = rng.data;
  device_array<std::byte> workspace(op::workspace_size(in.shape));
  const auto call = [&] {
    return status_ok(op::run(bp::cuda_backend{stream}, in, workspace.bytes(), {out.data, statuses.data}), Rule::name.data());
  };
  const double bytes = static_cast<double>(rows) * vocab * sizeof(float);  // every target row once (ragged: an upper bound)
  const std::string name = std::string(Rule::name) + " 64x17x151936 fp32" + (ragged ? " ragged" : "");
  const double us = time_us(stream, 3, 20, call);
  results.push_back({name + " (stream)", us, ragged ? 0.0 : bytes, ragged ? 0.0 : goal_us, "", !std::isnan(us)});
  const double graph = graph_us(stream, 20, call);
  results.push_back({name + " (graph)", graph, ragged ? 0.0 : bytes, 0, "CUDA graph replay", !std::isnan(graph)});
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "bench_gpu: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB, compute capability %d.%d\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, prop.major, prop.minor);
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  bench_copy(stream);
  bench_features<float>(stream, 1, 64, true, 10.0);
  bench_features<__nv_bfloat16>(stream, 1, 64, true, 10.0);
  bench_features<float>(stream, 1, 256, false, 0.0);
  bench_features<float>(stream, 1, 1024, false, 0.0);
  bench_features<float>(stream, 64, 256, false, 0.0);
  bench_reference_mlp(stream, 1);
  bench_reference_mlp(stream, 8);
  bench_acceptance<bp::greedy_match>(stream, false, 200.0);
  bench_acceptance<bp::sample_and_match>(stream, false, 0.0);
  bench_acceptance<bp::rejection_sampling>(stream, false, 250.0);
  bench_acceptance<bp::greedy_match>(stream, true, 0.0);
  bench_acceptance<bp::rejection_sampling>(stream, true, 0.0);
  BENCH_CUDA(cudaDeviceSynchronize());
  const bool device_ok = BENCH_CUDA(cudaGetLastError());

  std::printf("\n%-58s %12s %10s %10s %8s  %s\n", "benchmark", "time (us)", "GB/s", "vs copy", "goal", "note");
  FILE* json = argc > 1 ? std::fopen(argv[1], "w") : nullptr;
  int missed = 0;
  for (const result& r : results) {
    const double bw = r.bytes > 0 && r.us > 0 ? r.bytes / (r.us * 1e-6) : NAN;
    const double ratio = bw / copy_bandwidth;
    std::string goal = "";
    if (r.goal_us > 0) {
      const bool met = r.ok && r.us <= r.goal_us;
      missed += !met;
      goal = (met ? "met " : "MISS ") + std::to_string(static_cast<int>(r.goal_us));
    }
    std::printf("%-58s %12.2f %10.1f %10.2f %8s  %s%s\n", r.name.c_str(), r.us, bw * 1e-9, ratio, goal.c_str(), r.note.c_str(),
                r.ok ? "" : " [FAILED]");
    if (json) {
      // JSON has no NaN: a figure that does not apply (no bytes counted) is null.
      const auto number = [](double x, const char* format) {
        char text[64] = "null";
        if (std::isfinite(x)) std::snprintf(text, sizeof text, format, x);
        return std::string(text);
      };
      std::fprintf(json, "{\"name\": \"%s\", \"us\": %s, \"bytes\": %.0f, \"GBps\": %s, \"vs_copy\": %s, \"goal_us\": %s, \"ok\": %s}\n",
                   r.name.c_str(), number(r.us, "%.4f").c_str(), r.bytes, number(bw * 1e-9, "%.2f").c_str(),
                   number(ratio, "%.4f").c_str(), r.goal_us > 0 ? number(r.goal_us, "%.1f").c_str() : "null",
                   r.ok ? "true" : "false");
    }
  }
  if (json) std::fclose(json);
  std::printf("\nGB/s counts the bytes a call must read (logits or weights) once; the copy row counts read + write.\n"
              "'vs copy' is that bandwidth over the copy's. One-request feature rows stay in L2 between calls.\n");
  bool all_ok = device_ok;
  for (const result& r : results) all_ok = all_ok && r.ok;
  std::printf("bench_gpu: %s, %d goal(s) missed\n", all_ok ? "all benchmarks ran" : "SOME BENCHMARKS FAILED", missed);
  return all_ok ? 0 : 1;
}
