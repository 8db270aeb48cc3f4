#include "kvstore/disk_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace tessera::kvstore {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

DiskStore::DiskStore(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {
  std::error_code ec;
  fs::create_directories(fs::path(dir_) / "blocks", ec);
  if (!ec) fs::create_directories(fs::path(dir_) / "tmp", ec);
  TESSERA_CHECK(!ec, kIo, "--kv-store {}: cannot create the directory: {}", dir_, ec.message());
  bytes_ = usage().bytes;
  if (max_bytes_ > 0 && bytes_ > max_bytes_) trim(max_bytes_ * 9 / 10);
}

std::string DiskStore::path_of(const StoreKey& key) const {
  const std::string h = key.hex();
  return fmt::format("{}/blocks/{}/{}.kvb", dir_, h.substr(0, 2), h);
}

bool DiskStore::get(const StoreKey& key, std::vector<uint8_t>& out) {
  error_.clear();
  const std::string path = path_of(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) error_ = fmt::format("{}: {}", path, errno_text());
    return false;
  }
  struct stat st{};
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) {
    out.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < out.size()) {
      const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    out.resize(got);  // short: the record's check says truncated
    // Least recently used by modification time: a read makes it recent.
    ::futimens(fd, nullptr);
  } else {
    error_ = fmt::format("{}: {}", path, errno_text());
  }
  ::close(fd);
  return ok;
}

bool DiskStore::contains(const StoreKey& key) {
  struct stat st{};
  return ::stat(path_of(key).c_str(), &st) == 0;
}

bool DiskStore::put(const StoreKey& key, std::span<const uint8_t> record) {
  error_.clear();
  const std::string final_path = path_of(key);
  const std::string tmp = fmt::format("{}/tmp/{}.{}.{}", dir_, key.hex(), ::getpid(), tmp_counter_++);
  std::error_code ec;
  fs::create_directories(fs::path(final_path).parent_path(), ec);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    error_ = fmt::format("{}: {}", tmp, errno_text());
    return false;
  }
  // No fsync: a process killed mid-write cannot show a partial record
  // (the rename is atomic), and what an OS crash might leave torn fails
  // its checksum on load and is recomputed.
  bool ok = write_all(fd, record.data(), record.size());
  if (!ok) error_ = fmt::format("writing {}: {}", tmp, errno_text());
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    error_ = fmt::format("renaming {}: {}", tmp, errno_text());
    ok = false;
  }
  if (!ok) {
    ::unlink(tmp.c_str());  // a full disk leaves nothing half-written behind
    return false;
  }
  bytes_ += static_cast<int64_t>(record.size());
  if (max_bytes_ > 0 && bytes_ > max_bytes_) trim(max_bytes_ * 9 / 10);
  return true;
}

void DiskStore::drop(const StoreKey& key) {
  struct stat st{};
  const std::string p = path_of(key);
  if (::stat(p.c_str(), &st) == 0 && ::unlink(p.c_str()) == 0) bytes_ -= static_cast<int64_t>(st.st_size);
}

DiskUsage DiskStore::usage() const {
  DiskUsage u;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(fs::path(dir_) / "blocks", ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->path().extension() != ".kvb") continue;
    ++u.records;
    u.bytes += static_cast<int64_t>(it->file_size(ec));
  }
  for (auto it = fs::directory_iterator(fs::path(dir_) / "tmp", ec); !ec && it != fs::end(it); it.increment(ec)) {
    ++u.temp_files;
  }
  return u;
}

VerifyReport DiskStore::verify(bool drop) {
  VerifyReport report;
  std::vector<fs::path> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(fs::path(dir_) / "blocks", ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().extension() == ".kvb") files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    ++report.records;
    const std::optional<StoreKey> named = StoreKey::from_hex(p.stem().string());
    std::string why;
    std::vector<uint8_t> bytes;
    if (!named) {
      why = "not named by a key";
    } else if (!get(*named, bytes)) {
      why = error_.empty() ? "vanished" : error_;
    } else {
      why = check_record(bytes);
      const std::optional<StoreKey> inside = record_key(bytes);
      if (why.empty() && !(inside && *inside == *named)) why = "holds another key than its name";
    }
    if (why.empty()) continue;
    report.bad.emplace_back(p.string(), why);
    if (drop) fs::remove(p, ec);
  }
  return report;
}

int64_t DiskStore::trim(int64_t max_bytes, double temp_age_s) {
  struct Entry {
    fs::file_time_type mtime;
    int64_t size;
    fs::path path;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(fs::path(dir_) / "blocks", ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->path().extension() != ".kvb") continue;
    const int64_t size = static_cast<int64_t>(it->file_size(ec));
    entries.push_back({it->last_write_time(ec), size, it->path()});
    total += size;
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.mtime < b.mtime; });
  int64_t deleted = 0;
  for (const Entry& e : entries) {
    if (total <= max_bytes) break;
    if (fs::remove(e.path, ec)) {
      total -= e.size;
      ++deleted;
    }
  }
  const auto now = fs::file_time_type::clock::now();
  for (auto it = fs::directory_iterator(fs::path(dir_) / "tmp", ec); !ec && it != fs::end(it); it.increment(ec)) {
    const double age = std::chrono::duration<double>(now - it->last_write_time(ec)).count();
    if (age > temp_age_s) fs::remove(it->path(), ec);
  }
  bytes_ = total;
  return deleted;
}

}  // namespace tessera::kvstore
