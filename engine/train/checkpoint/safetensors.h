// Reading and writing safetensors files (the format of Hugging Face's `safetensors`): an 8-byte
// little-endian header length, a JSON header mapping each tensor name to its dtype, shape and byte
// range, an optional "__metadata__" string map, then the raw little-endian tensor bytes.
//
// Operations: SafetensorsWriter collects named tensors (F32 or I32) and writes them in one go,
// atomically (to "<path>.tmp", then rename). readSafetensors() loads a whole file and validates it
// as untrusted input: every problem (truncation, bad JSON, offsets outside the data, a shape that
// does not match its byte count, an unsupported dtype) is a Status naming the file and the tensor.
// Costs: one pass over the bytes each way; the whole file is held in memory.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "moewb/base/status.h"

namespace moewb::engine {

enum class SafetensorsDtype { kF32, kI32 };

struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // numel * 4 little-endian bytes

  int64_t numel() const;
  const float* f32() const { return reinterpret_cast<const float*>(bytes.data()); }
  const int32_t* i32() const { return reinterpret_cast<const int32_t*>(bytes.data()); }
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> tensors;  // in file order of their data

  // The entry named `name`, or nullptr.
  const SafetensorsEntry* find(const std::string& name) const;
};

class SafetensorsWriter {
 public:
  // Adds a tensor; `data` holds product(shape) values and is copied.
  void addF32(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  void addI32(const std::string& name, const std::vector<int64_t>& shape, const int32_t* data);
  void setMetadata(const std::string& key, const std::string& value) { m_file.metadata[key] = value; }

  // Writes everything to `path` atomically. Errors: kInternal naming the path (cannot create,
  // short write, rename failed); kInvalidArgument for duplicate tensor names.
  Status write(const std::string& path) const;

 private:
  SafetensorsFile m_file;
};

// Reads and validates `path`. Errors: kNotFound, kDataLoss (naming the file and what is wrong).
Result<SafetensorsFile> readSafetensors(const std::string& path);

}  // namespace moewb::engine
