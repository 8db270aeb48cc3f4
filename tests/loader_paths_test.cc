// Paths that are not model files, at every loader (they all map their file
// through core/mmap_file.h): a FIFO or a directory is refused at once, named
// for what it is, instead of blocking the thread that opened it; and a file
// of other bytes is refused without quoting those bytes, since the message
// reaches clients of /v1/load_lora_adapter.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "adapters/lora_gguf.h"
#include "adapters/soft_prompt_file.h"
#include "core/error.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "adapters/registry.h"
#include "server/openai_request.h"
#include "util/test_util.h"

namespace tessera {
namespace {

const ModelConfig& base() { return testing::stories260k().lm.model->config(); }

// The loaders a path can reach, each as "load this path".
std::vector<std::pair<std::string, std::function<void(const std::string&)>>> loaders() {
  return {
      {"gguf", [](const std::string& p) { gguf::File::open(p); }},
      {"safetensors", [](const std::string& p) { safetensors::File::open(p); }},
      {"lora", [](const std::string& p) { adapters::load_lora(p, base()); }},
      {"soft prompt", [](const std::string& p) { adapters::load_soft_prompt(p, base()); }},
      {"registry", [](const std::string& p) {
         AdapterRegistry r(base(), 0);
         r.load("x", p, "base");
       }},
  };
}

// What loading `path` throws, run on its own thread with a deadline so that
// a loader which blocks fails the test instead of hanging it. `unblock` is
// called when the deadline passes, to let the stuck thread finish.
std::string error_of(const std::function<void(const std::string&)>& load, const std::string& path,
                     const std::function<void()>& unblock) {
  std::packaged_task<std::string()> task([&] {
    try {
      load(path);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  });
  std::future<std::string> result = task.get_future();
  std::thread t(std::move(task));
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << path << ": the loader was still blocked after 5 s";
    unblock();
  }
  t.join();
  return result.get();
}

TEST(LoaderPaths, AFifoIsRefusedAtOnceNamedForWhatItIs) {
  const std::string fifo = testing::temp_path("adapter.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  // A reader stuck in open() is released by a writer opening the other end.
  const auto unblock = [&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  };
  for (const auto& [name, load] : loaders()) {
    const std::string e = error_of(load, fifo, unblock);
    EXPECT_NE(e.find("not a regular file (a FIFO)"), std::string::npos) << name << ": " << e;
  }
  const std::string dir = testing::temp_dir();
  for (const auto& [name, load] : loaders()) {
    const std::string e = error_of(load, dir, [] {});
    EXPECT_NE(e.find("not a regular file (a directory)"), std::string::npos) << name << ": " << e;
  }
  // Over the API: a 400 naming lora_path.
  AdapterRegistry r(base(), 0);
  try {
    r.load("x", fifo, "base");
    FAIL();
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "lora_path");
  }
}

TEST(LoaderPaths, ForeignBytesAreNotQuotedBack) {
  // Text a client must not be able to read through error messages, as
  // itself and as the numbers a loader would decode from it.
  const std::string secret = "PASSWORD=hunter2 and more secret text after it\n";
  const std::string path = testing::temp_path("secret.txt");
  testing::write_file(path, secret);
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  std::memcpy(&u32, secret.data(), 4);
  std::memcpy(&u64, secret.data(), 8);
  const std::vector<std::string> leaks = {"PASS", "hunter2", fmt::format("{:08x}", u32), fmt::format("{:x}", u32),
                                          std::to_string(u32), std::to_string(u64), fmt::format("{:x}", u64)};
  for (const auto& [name, load] : loaders()) {
    const std::string e = error_of(load, path, [] {});
    ASSERT_FALSE(e.empty()) << name;
    // The path names the file; the check is on the rest of the message.
    std::string rest = e;
    for (size_t p = rest.find(path); p != std::string::npos; p = rest.find(path)) rest.erase(p, path.size());
    for (const std::string& leak : leaks) EXPECT_EQ(rest.find(leak), std::string::npos) << name << " quotes " << leak << ": " << e;
    if (name != "safetensors" && name != "soft prompt") {
      EXPECT_NE(e.find("not a GGUF file (bad magic"), std::string::npos) << name << ": " << e;
    }
  }
  // A safetensors header length that fits, then text that is not JSON: the
  // parser's "last read" would quote it.
  std::string st(8, '\0');
  const uint64_t n = secret.size();
  std::memcpy(st.data(), &n, 8);
  testing::write_file(path, st + secret);
  const std::string e = error_of(loaders()[1].second, path, [] {});
  EXPECT_NE(e.find("not a safetensors file"), std::string::npos) << e;
  EXPECT_EQ(e.find("PASS"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera
