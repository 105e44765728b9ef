// memory.cpp — torch.tpu.memory's allocation history: where each live tpu
// storage was allocated (its stack, captured as CUDA's caching allocator
// captures it: torch's CapturedTraceback, symbolized only when a snapshot is
// taken) and a ring of alloc / free / oom events, and the raw snapshot that
// torchtpu/memory.py turns into torch.cuda.memory._snapshot()'s format.
//
// The device side of a snapshot (the PJRT buffers live now, their owners and
// the bytes in use at that instant) comes from the core
// (tt_runtime_list_buffers). A storage is an allocation here; its buffer is
// the segment (PJRT buffers are immutable: a write replaces the buffer, so a
// buffer is never split or reused as CUDA's segments are).
//
// Leaves out: the allocator itself and the memory limit (device.cpp and the
// core's storage.c), the Python-side format (torchtpu/memory.py).
#include "shim.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#define TORCHTPU_SHIM_API extern "C" __attribute__((visibility("default")))

namespace torchtpu {
namespace {

enum Action { kSegmentAlloc, kAlloc, kFreeRequested, kFreeCompleted, kSegmentFree, kOom };
const char *const kActionNames[] = {"segment_alloc", "alloc", "free_requested",
                                    "free_completed", "segment_free", "oom"};

using Traceback = std::shared_ptr<torch::CapturedTraceback>;

struct Record {  // a live storage's allocation
  int device;
  int64_t size;   // bytes
  int64_t time_us;
  Traceback stack;  // may be null (no context asked, or recorded before)
};

struct Entry {  // one event of the history
  Action action;
  uintptr_t addr;
  int64_t size;
  int device;
  int64_t time_us;
  int64_t device_free;  // oom: the bytes still free under the limit
  Traceback stack;
};

// The settings of _record_memory_history: `history` keeps events (enabled =
// "all"); `live` keeps the stacks of live storages (enabled = "state" or
// "all"); context: 0 none, 1 state, 2 alloc, 3 all (which events get stacks).
// The atomics are read before g_mu is taken (stacks are gathered outside it).
std::atomic<bool> g_live{false};
std::atomic<int> g_context{0};
std::atomic<bool> g_cpp{false};
bool g_history = false;     // g_mu
size_t g_max_entries = 0;   // g_mu

// Never destroyed: at exit, a stack's destructor would reach torch's Python
// support after it is gone (static destruction order across libraries).
std::mutex &g_mu = *new std::mutex;  // guards what follows
std::unordered_map<uintptr_t, Record> &g_records = *new std::unordered_map<uintptr_t, Record>;
std::vector<Entry> &g_ring = *new std::vector<Entry>;
size_t g_next = 0;  // where the next event goes once the ring is full

int64_t now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

// Captured without g_mu held: the Python part takes the GIL, and a thread
// holding the GIL may be waiting for g_mu.
Traceback gather(bool wanted) {
  if (!wanted) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, g_cpp);
}

void push(Entry e) {  // g_mu held
  if (!g_history || g_max_entries == 0) return;
  if (g_ring.size() < g_max_entries) {
    g_ring.push_back(std::move(e));
  } else {
    g_ring[g_next] = std::move(e);
    g_next = (g_next + 1) % g_max_entries;
  }
}

}  // namespace

void memory_note_alloc(const tt_storage *s, int device, int64_t nbytes) {
  if (!g_live.load(std::memory_order_relaxed)) return;
  Traceback tb = gather(g_context >= 1);
  const int64_t t = now_us();
  const auto addr = reinterpret_cast<uintptr_t>(s);
  std::lock_guard<std::mutex> lock(g_mu);
  g_records[addr] = Record{device, nbytes, t, tb};
  // A storage is its own segment (no caching allocator): the viewers that
  // replay segments (segment_plot) find each block in one.
  Traceback alloc_tb = g_context >= 2 ? tb : nullptr;
  push(Entry{kSegmentAlloc, addr, nbytes, device, t, 0, alloc_tb});
  push(Entry{kAlloc, addr, nbytes, device, t, 0, alloc_tb});
}

void memory_note_free(const tt_storage *s, int device, int64_t nbytes) {
  if (!g_live.load(std::memory_order_relaxed)) return;
  Traceback tb = gather(g_context >= 3);
  const int64_t t = now_us();
  const auto addr = reinterpret_cast<uintptr_t>(s);
  std::lock_guard<std::mutex> lock(g_mu);
  g_records.erase(addr);
  // No stream waits before a tpu buffer is freed: the free completes at once.
  push(Entry{kFreeRequested, addr, nbytes, device, t, 0, tb});
  push(Entry{kFreeCompleted, addr, nbytes, device, t, 0, tb});
  push(Entry{kSegmentFree, addr, nbytes, device, t, 0, tb});
}

void memory_note_oom(int device, int64_t nbytes, int64_t free_bytes) {
  if (!g_live.load(std::memory_order_relaxed)) return;
  Traceback tb = gather(g_context >= 2);
  const int64_t t = now_us();
  std::lock_guard<std::mutex> lock(g_mu);
  push(Entry{kOom, 0, nbytes, device, t, free_bytes, tb});
}

}  // namespace torchtpu

// --- the C entry points (ctypes, torchtpu/memory.py) ---------------------------

using namespace torchtpu;

// history: keep events; live: keep live storages' stacks (off: both off, the
// records dropped; the events kept until clear). context 0..3 as above.
TORCHTPU_SHIM_API void torchtpu_shim_record_memory_history(bool live, bool history,
                                                           int context, bool cpp,
                                                           int64_t max_entries,
                                                           bool clear) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (clear || (history && static_cast<size_t>(max_entries) != g_max_entries)) {
    // A new bound starts a new ring (as CUDA's allocator does).
    std::vector<Entry> keep;
    if (!clear) {
      for (size_t i = 0; i < g_ring.size(); i++)
        keep.push_back(std::move(g_ring[(g_next + i) % g_ring.size()]));
      if (max_entries >= 0 && keep.size() > static_cast<size_t>(max_entries))
        keep.erase(keep.begin(), keep.end() - max_entries);
    }
    g_ring = std::move(keep);
    g_next = 0;
  }
  if (!live) g_records.clear();
  g_history = live && history;
  g_context = live ? context : 0;
  g_cpp = cpp;
  if (history) g_max_entries = max_entries < 0 ? 0 : static_cast<size_t>(max_entries);
  g_live.store(live, std::memory_order_relaxed);
}

namespace {

// JSON text of a string (filenames and function names are UTF-8).
void json_string(std::string &out, const std::string &s) {
  out += '"';
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", ch);
      out += esc;
    } else {
      out += static_cast<char>(ch);
    }
  }
  out += '"';
}

// Symbolizes the stacks and writes "frames": [[file, line, name], ...] (each
// frame once) and returns each stack's frame indices (innermost first).
std::vector<std::vector<uint64_t>> write_frames(std::string &out,
                                                const std::vector<Traceback> &stacks) {
  std::vector<torch::CapturedTraceback *> raw;
  for (const auto &tb : stacks) raw.push_back(tb.get());
  torch::SymbolizedTracebacks sym = torch::symbolize(raw);
  out += "\"frames\":[";
  for (size_t i = 0; i < sym.all_frames.size(); i++) {
    const auto &f = sym.all_frames[i];
    if (i) out += ',';
    out += '[';
    json_string(out, f.filename);
    out += ',' + std::to_string(f.lineno) + ',';
    json_string(out, f.funcname);
    out += ']';
  }
  out += "]";
  return sym.tracebacks;
}

void write_indices(std::string &out, const std::vector<std::vector<uint64_t>> &tbs,
                   int index) {
  out += '[';
  if (index >= 0) {
    const auto &tb = tbs[static_cast<size_t>(index)];
    for (size_t i = 0; i < tb.size(); i++) out += (i ? "," : "") + std::to_string(tb[i]);
  }
  out += ']';
}

// The live buffers, listed at one instant with the bytes in use.
std::vector<tt_buffer_info> list_buffers(int64_t *bytes_in_use) {
  std::vector<tt_buffer_info> bufs(64);
  int64_t n = 0;
  for (;;) {
    tt_runtime_list_buffers(runtime(), bufs.data(), static_cast<int64_t>(bufs.size()), &n,
                            bytes_in_use);
    if (n <= static_cast<int64_t>(bufs.size())) break;
    bufs.resize(static_cast<size_t>(n) + 64);
  }
  bufs.resize(static_cast<size_t>(n));
  return bufs;
}

std::string snapshot_json() {
  std::lock_guard<std::mutex> lock(g_mu);  // no storage of a record dies meanwhile
  int64_t in_use = 0;
  const std::vector<tt_buffer_info> bufs = list_buffers(&in_use);
  // Stacks to symbolize: the buffers' owners', then the events'.
  std::vector<Traceback> stacks;
  std::vector<int> buf_stack(bufs.size(), -1), entry_stack(g_ring.size(), -1);
  for (size_t i = 0; i < bufs.size(); i++) {
    auto it = g_records.find(reinterpret_cast<uintptr_t>(bufs[i].storage));
    if (it != g_records.end() && it->second.stack) {
      buf_stack[i] = static_cast<int>(stacks.size());
      stacks.push_back(it->second.stack);
    }
  }
  for (size_t i = 0; i < g_ring.size(); i++) {
    if (g_ring[i].stack) {
      entry_stack[i] = static_cast<int>(stacks.size());
      stacks.push_back(g_ring[i].stack);
    }
  }
  // Recorded storages that hold no buffer (not written yet, or computed by
  // a deferred program that has not run): PyTorch's, without device memory.
  std::unordered_set<uintptr_t> listed;
  for (const auto &b : bufs) listed.insert(reinterpret_cast<uintptr_t>(b.storage));
  std::vector<std::pair<uintptr_t, const Record *>> unwritten;
  std::vector<int> unwritten_stack;
  for (const auto &kv : g_records) {
    if (listed.count(kv.first)) continue;
    unwritten.emplace_back(kv.first, &kv.second);
    unwritten_stack.push_back(kv.second.stack ? static_cast<int>(stacks.size()) : -1);
    if (kv.second.stack) stacks.push_back(kv.second.stack);
  }
  std::string out = "{";
  const auto tbs = write_frames(out, stacks);
  out += ",\"bytes_in_use\":" + std::to_string(in_use) + ",\"buffers\":[";
  for (size_t i = 0; i < bufs.size(); i++) {
    const auto addr = reinterpret_cast<uintptr_t>(bufs[i].storage);
    auto it = g_records.find(addr);
    const int64_t size = it != g_records.end() ? it->second.size : -1;
    out += (i ? ",[" : "[") + std::to_string(addr) + ',' + std::to_string(bufs[i].device) +
           ',' + std::to_string(bufs[i].bytes) + ',' + std::to_string(size) + ',';
    write_indices(out, tbs, buf_stack[i]);
    out += ']';
  }
  out += "],\"unwritten\":[";
  for (size_t i = 0; i < unwritten.size(); i++) {
    const Record &r = *unwritten[i].second;
    out += (i ? ",[" : "[") + std::to_string(unwritten[i].first) + ',' +
           std::to_string(r.device) + ',' + std::to_string(r.size) + ',';
    write_indices(out, tbs, unwritten_stack[i]);
    out += ']';
  }
  out += "],\"events\":[";
  for (size_t k = 0; k < g_ring.size(); k++) {
    const size_t i = (g_next + k) % g_ring.size();  // oldest first
    const Entry &e = g_ring[i];
    out += (k ? ",[\"" : "[\"") + std::string(kActionNames[e.action]) + "\"," +
           std::to_string(e.addr) + ',' + std::to_string(e.size) + ',' +
           std::to_string(e.device) + ',' + std::to_string(e.time_us) + ',' +
           std::to_string(e.device_free) + ',';
    write_indices(out, tbs, entry_stack[i]);
    out += ']';
  }
  out += "]}";
  return out;
}

}  // namespace

// The raw snapshot as JSON text (malloc'd, *out_text; free it with
// torchtpu_shim_free): "frames", "bytes_in_use", "buffers" ([address,
// device, bytes, recorded size or -1, [frame indices]]), "unwritten"
// (recorded live storages without a buffer: [address, device, size, [frame
// indices]]) and "events"
// ([action, address, size, device, time_us, device_free, [frame indices]],
// oldest first). Call it holding the GIL (ctypes.PyDLL): Python frames are
// symbolized here. Returns false with the error's text in *out_text.
TORCHTPU_SHIM_API bool torchtpu_shim_memory_snapshot(char **out_text) {
  std::string text;
  bool ok = true;
  try {
    text = snapshot_json();
  } catch (const std::exception &e) {
    text = e.what();
    ok = false;
  }
  *out_text = static_cast<char *>(std::malloc(text.size() + 1));
  if (*out_text == nullptr) return false;
  std::memcpy(*out_text, text.c_str(), text.size() + 1);
  return ok;
}

TORCHTPU_SHIM_API void torchtpu_shim_free(char *p) { std::free(p); }
