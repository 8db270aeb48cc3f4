#include "engine/stop_checker.h"

#include <algorithm>

namespace tessera::engine {

StopMatch check_stop_strings(std::string& held, const std::string& delta, const std::vector<std::string>& stops) {
  StopMatch m;
  held += delta;
  if (stops.empty()) {
    m.emit.swap(held);
    return m;
  }
  size_t first = std::string::npos;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    const size_t at = held.find(s);
    if (at != std::string::npos) first = std::min(first, at);
  }
  if (first != std::string::npos) {
    m.emit = held.substr(0, first);
    m.stopped = true;
    held.clear();
    return m;
  }
  // Keep the longest suffix of `held` that is a proper prefix of a stop string.
  size_t keep = 0;
  for (const std::string& s : stops) {
    const size_t max_len = std::min(s.size() - 1, held.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held.compare(held.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  m.emit = held.substr(0, held.size() - keep);
  held.erase(0, held.size() - keep);
  return m;
}

}  // namespace tessera::engine
