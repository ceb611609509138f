#pragma once
// Files a user names (configs, profiles, plan and model files, manifests, training text), read
// whole by one reader: a directory is refused by name (reading one would fail deep inside the
// stream with "basic_filebuf::underflow error").
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "autoddl/error.hpp"

namespace autoddl {

/// The bytes of the file at `path`, or nullopt where it cannot be opened (the caller's sentence
/// says so); `what` names it ("plan file").
/// @throws error "<what> 'DIR' is a directory, not a file; give the path of a file in it".
inline std::optional<std::string> read_text_file(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    detail::fail<error>(std::string(what) + " '" + path.string() + "' is a directory, not a file; give the path of a file in it");
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

}  // namespace autoddl
