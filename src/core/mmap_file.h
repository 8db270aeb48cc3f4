// Read-only memory map of a whole file (model weights are used in place).
#pragma once

#include <cstddef>
#include <cstdint>
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

// Asks the OS to reclaim the resident pages inside [data, data + n) (whole
// pages only; MADV_PAGEOUT): for bytes that were copied elsewhere, such as
// the source rows of repacked weights. Never loses data: clean file pages
// are read again on a later access, anonymous ones go to swap or stay.
// Best effort: ignored where the kernel does not support it.
void release_pages(const void* data, size_t n);

}  // namespace tessera
