#pragma once
// JSON given by a user (hf configs, hardware profiles, model files, plan files, checkpoint
// manifests), read by one parser: nesting is bounded before nlohmann-json sees the text (its
// dump, copies and comparisons recurse once per level, so a value nested 100,000 deep would
// overflow the stack), syntax errors are one plain sentence, and a value echoed in a message is
// cut to a few dozen characters, e.g.
//   "hardware profile 'h.json' is not valid JSON (at line 1, column 37: unexpected end of input;
//    expected string literal); fix the syntax there"
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "autoddl/error.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

/// The deepest nesting of arrays and objects parse_json reads (configs use under ten levels).
inline constexpr std::size_t json_max_depth = 256;

namespace detail {

/// The deepest nesting of '[' and '{' in `text` outside string literals (an upper bound of the
/// value's depth even where the text is not valid JSON, which the parser then reports).
inline std::size_t json_nesting(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

/// nlohmann-json's message without its code: "[json.exception.parse_error.101] parse error at
/// line 1, column 5: syntax error while parsing value - invalid literal; last read: 'x'" becomes
/// "at line 1, column 5: invalid literal; last read: 'x'".
inline std::string json_reason(std::string_view what) {
  if (what.starts_with("[json.exception.")) {
    const std::size_t close = what.find("] ");
    if (close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  if (what.starts_with("parse error ")) what.remove_prefix(std::string_view("parse error ").size());
  std::string out(what);
  const std::size_t syntax = out.find("syntax error while parsing ");
  const std::size_t dash = out.find(" - ", syntax == std::string::npos ? 0 : syntax);
  if (syntax != std::string::npos && dash != std::string::npos) out.erase(syntax, dash + 3 - syntax);
  return excerpt(out, 160);
}

}  // namespace detail

/// Parses `text` as JSON; `what` names it in errors ("hardware profile 'h.json'").
/// @throws parse_error "<what> nests arrays and objects deeper than 256 levels; ..." or "<what>
/// is not valid JSON (<where and why>); fix the syntax there", never nlohmann's own exception.
inline nlohmann::json parse_json(std::string_view text, std::string_view what) {
  if (detail::json_nesting(text) > json_max_depth)
    detail::fail<parse_error>(std::string(what) + " nests arrays and objects deeper than " +
                              std::to_string(json_max_depth) + " levels, more than autoddl reads; flatten it");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number beyond a double
    detail::fail<parse_error>(std::string(what) + " is not valid JSON (" + detail::json_reason(e.what()) +
                              "); fix the syntax there");
  }
}

/// A JSON integer that I holds, or nullopt: nlohmann's get<I> of a float (1.5) or of an integer
/// beyond I's range (2^40 for an int) truncates or wraps, so both are refused here.
template <class I>
std::optional<I> json_whole(const nlohmann::json& v) {
  const bool fits = v.is_number_unsigned() ? v.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<I>::max())
                    : v.is_number_integer() ? v.get<std::int64_t>() >= std::int64_t(std::numeric_limits<I>::min()) &&
                                                 v.get<std::int64_t>() <= std::int64_t(std::numeric_limits<I>::max())
                                            : false;
  if (!fits) return std::nullopt;
  return v.get<I>();
}

/// A JSON value as a message shows it: its compact text, cut to 80 characters ("[1,2,3,...").
/// @pre v came from parse_json (or is as shallow), so its dump does not overflow the stack.
inline std::string json_excerpt(const nlohmann::json& v) {
  return detail::excerpt(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace autoddl
