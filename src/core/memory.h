// How much memory this process may use: the machine's available memory
// (/proc/meminfo MemAvailable), or less where its control group sets a limit
// (cgroup v2 memory.max, v1 memory.limit_in_bytes). Decides whether a model's weights are copied into a faster
// layout or used in place from the mapped file (model/decoder.cc).
#pragma once

#include <cstdint>

namespace tessera {

// Bytes; UINT64_MAX when nothing could be read.
uint64_t memory_available_bytes();

// The most resident memory this process has held (getrusage's ru_maxrss), in bytes.
uint64_t peak_rss_bytes();

}  // namespace tessera
