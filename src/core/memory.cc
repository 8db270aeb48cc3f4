#include "core/memory.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera {
namespace {

// The first number in a file, or UINT64_MAX ("max", missing, unreadable).
uint64_t read_number(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  if (in >> v) return v;
  return UINT64_MAX;
}

uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return UINT64_MAX;
}

// The memory limit of the process's control group (v1 or v2), if any.
uint64_t cgroup_headroom() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  uint64_t best = UINT64_MAX;
  while (std::getline(in, line)) {
    // "N:controllers:path": v1 "4:memory:/a/b", v2 "0::/a/b".
    const size_t c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    const std::string controllers = line.substr(c1 + 1, c2 - c1 - 1), path = line.substr(c2 + 1);
    std::string limit_file;
    if (controllers == "memory") {
      limit_file = "/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes";
    } else if (controllers.empty()) {
      limit_file = "/sys/fs/cgroup" + path + "/memory.max";
    } else {
      continue;
    }
    // The limit itself: the group's usage counts page cache, which the
    // kernel reclaims under the limit, so it says little of what is left.
    const uint64_t limit = read_number(limit_file);
    if (limit == UINT64_MAX || limit >= (uint64_t{1} << 60)) continue;  // no limit
    best = std::min(best, limit);
  }
  return best;
}

}  // namespace

uint64_t memory_available_bytes() { return std::min(mem_available(), cgroup_headroom()); }

uint64_t peak_rss_bytes() {
  struct rusage u {};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace tessera
