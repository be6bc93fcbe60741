// safetensors reading and writing (see safetensors.h). The JSON header goes through nlohmann-json.
#include "train/checkpoint/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace moewb::engine {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;

const char* dtypeName(SafetensorsDtype dtype) { return dtype == SafetensorsDtype::kF32 ? "F32" : "I32"; }

void addEntry(SafetensorsFile& file, const std::string& name, SafetensorsDtype dtype,
              const std::vector<int64_t>& shape, const void* data) {
  SafetensorsEntry entry;
  entry.name = name;
  entry.dtype = dtype;
  entry.shape = shape;
  entry.bytes.resize(size_t(entry.numel()) * 4);
  if (!entry.bytes.empty()) std::memcpy(entry.bytes.data(), data, entry.bytes.size());
  file.tensors.push_back(std::move(entry));
}

// `data` .. `data + dataBytes`: the bytes after the header, which the offsets index.
Status parseEntry(const std::string& path, const std::string& name, const nlohmann::json& info,
                  const uint8_t* data, uint64_t dataBytes, SafetensorsEntry& entry) {
  auto bad = [&](const std::string& what) {
    return dataLoss(path + ": tensor '" + name + "': " + what);
  };
  if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
      !info.contains("data_offsets")) {
    return bad("header entry lacks dtype, shape or data_offsets");
  }
  const auto& dtype = info["dtype"];
  if (dtype == "F32") entry.dtype = SafetensorsDtype::kF32;
  else if (dtype == "I32") entry.dtype = SafetensorsDtype::kI32;
  else return bad("dtype " + dtype.dump() + " is not supported; accepted: F32, I32");
  const auto& shape = info["shape"];
  if (!shape.is_array()) return bad("shape " + shape.dump() + " is not a list of sizes");
  // The element count stays <= kMaxElements; each extent is checked before it multiplies, so no
  // product of untrusted extents can overflow.
  constexpr uint64_t kMaxElements = 1ull << 40;
  uint64_t numel = 1;
  for (const auto& extent : shape) {
    if (!extent.is_number_unsigned() || extent.get<uint64_t>() > kMaxElements) {
      return bad("shape " + shape.dump() + " is not a list of sizes");
    }
    const uint64_t size = extent.get<uint64_t>();
    if (size != 0 && numel > kMaxElements / size) {
      return bad("shape " + shape.dump() + " is too large");
    }
    numel *= size;
    entry.shape.push_back(int64_t(size));
  }
  const auto& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return bad("data_offsets " + offsets.dump() + " is not [begin, end]");
  }
  uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end || end > dataBytes) {
    return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
               "] lie outside the " + std::to_string(dataBytes) + " data bytes (truncated file?)");
  }
  if (end - begin != numel * 4) {
    return bad("holds " + std::to_string(end - begin) + " bytes but its shape needs " +
               std::to_string(numel * 4));
  }
  entry.name = name;
  entry.bytes.assign(data + begin, data + end);
  return Status::ok();
}

}  // namespace

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  return n;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& entry : tensors) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

void SafetensorsWriter::addF32(const std::string& name, const std::vector<int64_t>& shape,
                               const float* data) {
  addEntry(m_file, name, SafetensorsDtype::kF32, shape, data);
}

void SafetensorsWriter::addI32(const std::string& name, const std::vector<int64_t>& shape,
                               const int32_t* data) {
  addEntry(m_file, name, SafetensorsDtype::kI32, shape, data);
}

Status SafetensorsWriter::write(const std::string& path) const {
  nlohmann::json header = nlohmann::json::object();
  if (!m_file.metadata.empty()) header["__metadata__"] = m_file.metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& entry : m_file.tensors) {
    if (!names.insert(entry.name).second) {
      return invalidArgument(path + ": tensor name '" + entry.name + "' is used twice");
    }
    header[entry.name] = {{"dtype", dtypeName(entry.dtype)},
                          {"shape", entry.shape},
                          {"data_offsets", {offset, offset + entry.bytes.size()}}};
    offset += entry.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmpPath = path + ".tmp";
  {
    std::ofstream out(tmpPath, std::ios::binary | std::ios::trunc);
    if (!out) return internalError("cannot create '" + tmpPath + "'");
    uint64_t headerBytes = text.size();
    unsigned char lengthBytes[8];
    for (int i = 0; i < 8; ++i) lengthBytes[i] = static_cast<unsigned char>(headerBytes >> (8 * i));
    out.write(reinterpret_cast<const char*>(lengthBytes), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const auto& entry : m_file.tensors) {
      out.write(reinterpret_cast<const char*>(entry.bytes.data()), std::streamsize(entry.bytes.size()));
    }
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignored;
      std::filesystem::remove(tmpPath, ignored);  // a partial file helps no one
      return internalError("short write to '" + tmpPath + "' (disk full?); nothing was written "
                           "to '" + path + "'");
    }
  }
  std::error_code error;
  std::filesystem::rename(tmpPath, path, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(tmpPath, ignored);
    return internalError("cannot rename '" + tmpPath + "' to '" + path + "': " + error.message());
  }
  return Status::ok();
}

Result<SafetensorsFile> readSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return notFound("cannot read '" + path + "'");
  // One read of the whole file (a byte-by-byte stream iterator costs ~10 ns a byte: seconds for a
  // checkpoint of a few hundred MB).
  const std::streamoff fileBytes = in.tellg();
  if (fileBytes < 0) return notFound("cannot read '" + path + "' (not a regular file?)");
  std::vector<uint8_t> bytes(static_cast<size_t>(fileBytes));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!in) return dataLoss(path + ": cannot read its " + std::to_string(fileBytes) + " bytes");
  if (bytes.size() < 8) return dataLoss(path + ": not a safetensors file (shorter than 8 bytes)");
  uint64_t headerBytes = 0;
  for (int i = 0; i < 8; ++i) headerBytes |= uint64_t(bytes[size_t(i)]) << (8 * i);
  if (headerBytes > kMaxHeaderBytes || headerBytes > bytes.size() - 8) {
    return dataLoss(path + ": not a safetensors file or truncated (header length " +
                    std::to_string(headerBytes) + " with " + std::to_string(bytes.size()) +
                    " bytes in the file)");
  }
  nlohmann::json header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + int64_t(headerBytes),
                                                nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return dataLoss(path + ": the safetensors header is not a JSON object");
  }
  const uint8_t* data = bytes.data() + 8 + headerBytes;
  const uint64_t dataBytes = bytes.size() - 8 - headerBytes;
  SafetensorsFile file;
  std::vector<std::pair<uint64_t, SafetensorsEntry>> ordered;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return dataLoss(path + ": __metadata__ is not an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) return dataLoss(path + ": metadata '" + key + "' is not a string");
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    SafetensorsEntry entry;
    MOEWB_RETURN_IF_ERROR(parseEntry(path, name, info, data, dataBytes, entry));
    ordered.emplace_back(info["data_offsets"][0].get<uint64_t>(), std::move(entry));
  }
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [offset, entry] : ordered) file.tensors.push_back(std::move(entry));
  return file;
}

}  // namespace moewb::engine
