// graph.cpp — graph capture and replay for torch.compile, as torchtpu:: ops.
//
// Python captures a graph once (begin with the graph's inputs, run its ops in
// fused mode, end with its outputs) and then replays it in one call: the
// inputs are described, the core launches the program, and the graph's
// outputs come back as tensors over the fresh storages (or views of inputs).
// Graphs are kept here by an integer handle, so Python never holds a pointer.
//
// torch.tpu.graph (torchtpu/graphs.py) uses the static variant: a host read
// while capturing raises, the inputs (every tensor the region read that
// existed before it) are declared at the end, and replays write into the
// capture's own output storages (graph_replay_into).
#include "shim.h"

#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace torchtpu {
namespace {

// Destroyed with its last user: a replay in flight keeps it alive.
struct Graph {
  explicit Graph(tt_graph *graph) : g(graph) {}
  ~Graph() { tt_graph_destroy(g); }
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;
  tt_graph *g;
  std::vector<tt_graph_output> outputs;
};

std::mutex g_mu;
std::unordered_map<int64_t, std::shared_ptr<const Graph>> g_graphs;
int64_t g_next = 1;

std::vector<tt_tensor> describe_all(const std::vector<at::Tensor> &ts, const char *what) {
  std::vector<tt_tensor> out;
  out.reserve(ts.size());
  for (const at::Tensor &t : ts) out.push_back(describe(t, what));
  return out;
}

bool same_view(const at::Tensor &t, const tt_graph_output &o) {
  if (to_tt_dtype(t.scalar_type()) != o.dtype || t.dim() != o.ndim ||
      t.storage_offset() != o.offset) {
    return false;
  }
  for (int32_t d = 0; d < o.ndim; d++) {
    if (t.size(d) != o.sizes[d] || t.stride(d) != o.strides[d]) return false;
  }
  return true;
}

// A tensor over `storage` with the output's view.
at::Tensor view_of(const c10::Storage &storage, const tt_graph_output &o) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(to_scalar_type(o.dtype)));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(
      c10::IntArrayRef(o.sizes, o.ndim), c10::IntArrayRef(o.strides, o.ndim),
      o.offset);
  return t;
}

void capture_begin(int64_t device, const std::vector<at::Tensor> &inputs) {
  tt_runtime *rt = runtime();
  check(tt_graph_capture_begin(rt, static_cast<int>(device)), "graph capture");
  for (size_t i = 0; i < inputs.size(); i++) {
    const tt_tensor t = describe(inputs[i], "graph capture");
    tt_status s = tt_graph_capture_input(rt, static_cast<int>(i), &t);
    if (s != nullptr) {
      // Leave capture mode (the ops run as plain fused eager) before raising.
      tt_graph *g = nullptr;
      tt_status_free(tt_graph_capture_end(rt, nullptr, 0, &g));
      tt_graph_destroy(g);
      throw_status(s, "graph capture");
    }
  }
}

void static_capture_begin(int64_t device) {
  check(tt_graph_capture_begin_static(runtime(), static_cast<int>(device)),
        "torch.tpu.graph capture");
}

// Leaves capture mode (the recorded ops run as a plain fused graph).
void abandon_capture() {
  tt_graph *g = nullptr;
  tt_status_free(tt_graph_capture_end(runtime(), nullptr, 0, &g));
  tt_graph_destroy(g);
}

std::tuple<int64_t, std::string> capture_end(const std::vector<at::Tensor> &outputs);

// Declares `inputs` (in order), then ends the capture as capture_end.
std::tuple<int64_t, std::string> static_capture_end(const std::vector<at::Tensor> &inputs,
                                                    const std::vector<at::Tensor> &outputs) {
  tt_runtime *rt = runtime();
  for (size_t i = 0; i < inputs.size(); i++) {
    const tt_tensor t = describe(inputs[i], "torch.tpu.graph capture");
    tt_status s = tt_graph_capture_input(rt, static_cast<int>(i), &t);
    if (s != nullptr) {
      abandon_capture();
      throw_status(s, "torch.tpu.graph capture");
    }
  }
  return capture_end(outputs);
}

// (handle, "") or (0, why the graph could not be captured).
std::tuple<int64_t, std::string> capture_end(const std::vector<at::Tensor> &outputs) {
  std::vector<tt_tensor> outs = describe_all(outputs, "graph capture");
  tt_graph *g = nullptr;
  tt_status s = tt_graph_capture_end(runtime(), outs.data(),
                                     static_cast<int>(outs.size()), &g);
  if (s != nullptr && tt_status_code(s) == TT_UNIMPLEMENTED) {
    std::string why = tt_status_message(s) ? tt_status_message(s) : "";
    tt_status_free(s);
    return {0, why};
  }
  check(s, "graph capture");
  auto entry = std::make_shared<Graph>(g);
  entry->outputs.resize(static_cast<size_t>(tt_graph_num_outputs(g)));
  for (size_t i = 0; i < entry->outputs.size(); i++) {
    tt_graph_output_info(g, static_cast<int>(i), &entry->outputs[i]);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  const int64_t handle = g_next++;
  g_graphs.emplace(handle, std::move(entry));
  return {handle, ""};
}

std::vector<at::Tensor> replay(int64_t handle, const std::vector<at::Tensor> &inputs) {
  std::shared_ptr<const Graph> entry;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_graphs.find(handle);
    TORCH_CHECK(it != g_graphs.end(), "graph replay: no graph ", handle);
    entry = it->second;  // the graph lives until destroy, called by its owner
  }
  std::vector<tt_tensor> ins = describe_all(inputs, "graph replay");
  std::vector<tt_op_result> results(
      std::max<size_t>(static_cast<size_t>(tt_graph_num_results(entry->g)), 1));
  int n = 0;
  tt_status s = tt_graph_replay(runtime(), entry->g, ins.data(),
                                static_cast<int>(ins.size()), results.data(),
                                static_cast<int>(results.size()), &n);
  if (s != nullptr && tt_status_code(s) == TT_INVALID_ARGUMENT) {
    std::string msg = tt_status_message(s) ? tt_status_message(s) : "";
    tt_status_free(s);
    TORCH_CHECK_VALUE(false, msg);  // ValueError: Python recaptures
  }
  check(s, "graph replay");
  std::vector<c10::Storage> storages;
  storages.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; r++) {
    tt_storage *st = results[r].storage;
    results[r].storage = nullptr;
    try {
      storages.push_back(wrap_storage(st, to_scalar_type(results[r].dtype),
                                      c10::IntArrayRef(results[r].sizes, results[r].ndim))
                             .storage());
    } catch (...) {
      for (int k = r + 1; k < n; k++) tt_storage_destroy(results[k].storage);
      throw;
    }
  }
  std::vector<at::Tensor> out;
  out.reserve(entry->outputs.size());
  for (const tt_graph_output &o : entry->outputs) {
    if (o.input >= 0) {
      const at::Tensor &base = inputs[static_cast<size_t>(o.input)];
      out.push_back(same_view(base, o) ? base : view_of(base.storage(), o));
    } else {
      TORCH_CHECK(o.result >= 0, "graph replay: output of a static capture; replay it "
                  "with graph_replay_into");
      out.push_back(view_of(storages[static_cast<size_t>(o.result)], o));
    }
  }
  return out;
}

std::shared_ptr<const Graph> find(int64_t handle) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_graphs.find(handle);
  TORCH_CHECK(it != g_graphs.end(), "graph replay: no graph ", handle);
  return it->second;  // the graph lives until destroy, called by its owner
}

// One launch that reads `inputs` and writes the graph's results into the
// storages of `outputs` (static buffers).
void replay_into(int64_t handle, const std::vector<at::Tensor> &inputs,
                 const std::vector<at::Tensor> &outputs) {
  std::shared_ptr<const Graph> entry = find(handle);
  std::vector<tt_tensor> ins = describe_all(inputs, "graph replay");
  std::vector<tt_tensor> outs = describe_all(outputs, "graph replay");
  check(tt_graph_replay_into(runtime(), entry->g, ins.data(), static_cast<int>(ins.size()),
                             outs.data(), static_cast<int>(outs.size())),
        "graph replay");
}

// Names the graph in profiles (torchtpu.profiler); an unknown handle is ignored.
void set_name(int64_t handle, const std::string &name) {
  std::shared_ptr<const Graph> graph;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_graphs.find(handle);
    if (it == g_graphs.end()) return;
    graph = it->second;
  }
  tt_graph_set_name(graph->g, name.c_str());
}

void destroy(int64_t handle) {
  std::shared_ptr<const Graph> last;  // freed outside the lock
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_graphs.find(handle);
  if (it == g_graphs.end()) return;
  last = std::move(it->second);
  g_graphs.erase(it);
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def("graph_capture_begin(int device, Tensor[] inputs) -> ()", &torchtpu::capture_begin);
  m.def("graph_capture_end(Tensor[] outputs) -> (int, str)", &torchtpu::capture_end);
  m.def("graph_replay(int handle, Tensor[] inputs) -> Tensor[]", &torchtpu::replay);
  m.def("graph_destroy(int handle) -> ()", &torchtpu::destroy);
  m.def("graph_set_name(int handle, str name) -> ()", &torchtpu::set_name);
  m.def("graph_static_capture_begin(int device) -> ()", &torchtpu::static_capture_begin);
  m.def("graph_static_capture_end(Tensor[] inputs, Tensor[] outputs) -> (int, str)",
        &torchtpu::static_capture_end);
  m.def("graph_abandon_capture() -> ()", &torchtpu::abandon_capture);
  m.def("graph_replay_into(int handle, Tensor[] inputs, Tensor[] outputs) -> ()",
        &torchtpu::replay_into);
}
