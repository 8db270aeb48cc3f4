#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace tessera {

namespace {

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

[[noreturn]] void not_regular(const std::string& path, mode_t m) {
  fail(ErrorCode::kIo, "'{}' is not a regular file ({})", path, file_kind(m));
}

}  // namespace

namespace {

// Opens a regular file for reading. Every loader (GGUF, safetensors,
// adapters, soft prompts) opens its file here, and paths can come from
// clients (/v1/load_lora_adapter). Opening a FIFO for reading blocks until a
// writer appears, and a device may never end: so the type is checked before
// the open, and the open itself does not block (O_NONBLOCK) in case the path
// was swapped for one in between; fstat then checks what was actually opened.
int open_regular(const std::string& path, size_t* size) {
  struct stat st;
  TESSERA_CHECK(::stat(path.c_str(), &st) == 0, kIo, "cannot open '{}': {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  TESSERA_CHECK(fd >= 0, kIo, "cannot open '{}': {}", path, std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t m = st.st_mode;
    ::close(fd);
    not_regular(path, m);
  }
  *size = static_cast<size_t>(st.st_size);
  return fd;
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_regular(path, &size_);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(ErrorCode::kIo, "cannot mmap '{}': {}", path, std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

RangeFile::RangeFile(const std::string& path) : path_(path) { fd_ = open_regular(path, &size_); }

RangeFile::~RangeFile() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

struct RangeMapping {
  void* base = nullptr;
  size_t length = 0;
  ~RangeMapping() { ::munmap(base, length); }
};

}  // namespace

const uint8_t* RangeFile::map(uint64_t offset, size_t n, std::shared_ptr<const void>& owner) const {
  TESSERA_CHECK(offset <= size_ && n <= size_ - offset, kIo, "'{}': bytes {}..{} are past its end ({} bytes)", path_,
                offset, offset + n, size_);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = offset / page * page;
  const size_t length = static_cast<size_t>(offset + std::max<size_t>(n, 1) - begin);
  void* p = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd_, static_cast<off_t>(begin));
  TESSERA_CHECK(p != MAP_FAILED, kIo, "cannot mmap {} bytes of '{}': {}", length, path_, std::strerror(errno));
  auto m = std::make_shared<RangeMapping>();
  m->base = p;
  m->length = length;
  owner = m;
  return static_cast<const uint8_t*>(p) + (offset - begin);
}

void RangeFile::read(uint64_t offset, size_t n, void* out) const {
  TESSERA_CHECK(offset <= size_ && n <= size_ - offset, kIo, "'{}': bytes {}..{} are past its end ({} bytes)", path_,
                offset, offset + n, size_);
  auto* dst = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    TESSERA_CHECK(got > 0, kIo, "cannot read '{}' at {}: {}", path_, offset, got < 0 ? std::strerror(errno) : "end of file");
    dst += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
}

void release_pages(const void* data, size_t n) {
#ifdef MADV_PAGEOUT
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + n) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);
#else
  (void)data;
  (void)n;
#endif
}

}  // namespace tessera
