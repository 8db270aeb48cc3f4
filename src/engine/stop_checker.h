// Stop strings matched on detokenized text across token boundaries. Text
// that might be the beginning of a stop string is held back until the next
// tokens decide; a matched stop string (and anything after it) is never
// emitted.
#pragma once

#include <string>
#include <vector>

namespace tessera::engine {

struct StopMatch {
  std::string emit;   // text safe to emit now
  bool stopped = false;
};

// held: text withheld so far (updated). delta: newly decoded text.
StopMatch check_stop_strings(std::string& held, const std::string& delta, const std::vector<std::string>& stops);

}  // namespace tessera::engine
