// Read-only memory map of a whole file (model weights are used in place).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tessera {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws Error(kIo) if the file cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// A file kept open so that parts of it can be mapped or read on demand:
// under tensor parallelism each rank maps only the bytes of its slices, so
// its address space (and a limit on it) is its share of the weights, not
// the whole file. Same checks as MappedFile (a regular file only).
class RangeFile {
 public:
  // Throws Error(kIo) if the file cannot be opened.
  explicit RangeFile(const std::string& path);
  ~RangeFile();
  RangeFile(const RangeFile&) = delete;
  RangeFile& operator=(const RangeFile&) = delete;

  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Bytes [offset, offset + n) mapped read-only (whole pages around them);
  // `owner` keeps the mapping: the pointer is valid while it lives. Throws
  // Error(kIo) when the range is outside the file or cannot be mapped.
  const uint8_t* map(uint64_t offset, size_t n, std::shared_ptr<const void>& owner) const;
  // Copies bytes [offset, offset + n) into out (pread). Throws Error(kIo).
  void read(uint64_t offset, size_t n, void* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  size_t size_ = 0;
};

// Asks the OS to reclaim the resident pages inside [data, data + n) (whole
// pages only; MADV_PAGEOUT): for bytes that were copied elsewhere, such as
// the source rows of repacked weights. Never loses data: clean file pages
// are read again on a later access, anonymous ones go to swap or stay.
// Best effort: ignored where the kernel does not support it.
void release_pages(const void* data, size_t n);

}  // namespace tessera
