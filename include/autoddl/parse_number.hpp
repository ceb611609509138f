#pragma once
// Numbers written as text (model specs, hf overrides, model-file specs, the programs' options),
// read by one parser on std::from_chars: whole numbers exactly, decimals to the nearest double
// ("1.15" is the double nearest 1.15, as a compiler reads the literal). The whole text must be
// the number: no sign '+', no spaces, nothing after it. Every refusal is one sentence naming
// the text, e.g. "model spec 'llama:tiny,capacity=1.x': capacity '1.x' has 'x' after the
// number 1; remove it".
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "autoddl/error.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

/// A number type parse_number reads: an integer other than bool and char, or a floating type.
template <class T>
concept ParsedNumber = (std::integral<T> && !std::same_as<T, bool> && !std::same_as<T, char>) || std::floating_point<T>;

namespace detail {

template <class T>
std::string number_kind() {
  if constexpr (std::floating_point<T>) return "number";
  else return "whole number";
}

template <class T>
std::string number_range() {
  if constexpr (std::floating_point<T>)
    return "what a double holds (0, or magnitudes from about 2.2e-308 to 1.8e308)";
  else
    return "[" + std::to_string(std::numeric_limits<T>::min()) + ", " + std::to_string(std::numeric_limits<T>::max()) + "]";
}

}  // namespace detail

namespace detail {

enum class number_fault { none, empty, not_a_number, trailing, out_of_range, not_finite };

template <ParsedNumber T>
struct number_read {
  T value{};
  number_fault fault = number_fault::none;
  std::size_t used = 0;  ///< characters of the number read (before a trailing fault's junk)
};

/// The one reader behind parse_number and parse_number_or_none.
template <ParsedNumber T>
number_read<T> read_number(std::string_view text) {
  number_read<T> n;
  if (text.empty()) return n.fault = number_fault::empty, n;
  const char* const end = text.data() + text.size();
  std::from_chars_result r{};
  if constexpr (std::floating_point<T>) r = std::from_chars(text.data(), end, n.value, std::chars_format::general);
  else r = std::from_chars(text.data(), end, n.value, 10);
  n.used = std::size_t(r.ptr - text.data());
  if (r.ec == std::errc::invalid_argument) n.fault = number_fault::not_a_number;
  else if (r.ec == std::errc::result_out_of_range) n.fault = number_fault::out_of_range;
  else if (r.ptr != end) n.fault = number_fault::trailing;
  else if constexpr (std::floating_point<T>) n.fault = std::isfinite(n.value) ? number_fault::none : number_fault::not_finite;
  return n;
}

}  // namespace detail

/// Reads all of `text` as a T. `what` names the value where it was given ("model spec '...':
/// capacity"); errors start with it.
/// @throws parse_error when text is empty, is not a number (a decimal point or exponent for an
/// integer type included), has anything after the number, or lies outside what T holds (a
/// 400-digit integer, 1e400, 1e-400, inf and nan are all refused, never wrapped or rounded to
/// infinity or zero).
/// Example: parse_number<double>("1.15", "capacity") == 1.15; parse_number<int>("08", "n") == 8.
template <ParsedNumber T>
T parse_number(std::string_view text, std::string_view what) {
  using detail::number_fault;
  const detail::number_read<T> n = detail::read_number<T>(text);
  const std::string head = std::string(what) + " '" + detail::excerpt(text) + "'";
  switch (n.fault) {
    case number_fault::none: return n.value;
    case number_fault::empty:
      detail::fail<parse_error>(std::string(what) + " is empty; give a " + detail::number_kind<T>());
    case number_fault::not_a_number:
      detail::fail<parse_error>(head + " is not a " + detail::number_kind<T>() + "; write digits, e.g. " +
                                (std::floating_point<T> ? "1.25" : "128"));
    case number_fault::out_of_range:
      detail::fail<parse_error>(head + " lies outside " + detail::number_range<T>() + "; give a value within it");
    case number_fault::trailing:
      detail::fail<parse_error>(head + " has '" + detail::excerpt(text.substr(n.used)) + "' after the number " +
                                detail::excerpt(text.substr(0, n.used)) + "; remove it");
    case number_fault::not_finite: break;
  }
  detail::fail<parse_error>(head + " is not a finite number; write digits, e.g. 1.25");
}

/// parse_number's value, or nullopt where parse_number would throw: for callers whose own
/// sentence names the rule (e.g. "--microbatches takes a positive whole number or auto").
template <ParsedNumber T>
std::optional<T> parse_number_or_none(std::string_view text) {
  const detail::number_read<T> n = detail::read_number<T>(text);
  if (n.fault != detail::number_fault::none) return std::nullopt;
  return n.value;
}

/// A decimal value significand x 10^exponent with a whole significand: what a decimal text
/// means exactly, before it is rounded to a double.
struct exact_decimal {
  std::uint64_t significand = 0;
  int exponent = 0;
};

/// The shortest decimal that reads back as `x` (std::to_chars' round-trip form): for a double
/// parsed from decimal text of at most 15 significant digits, exactly that decimal, e.g.
/// shortest_decimal(1.15) == {115, -2} although the double itself is 1.149999999999999911...
/// @pre x is finite and non-negative.
inline exact_decimal shortest_decimal(double x) {
  char buf[64];
  const std::to_chars_result w = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  // d.ddddde[+-]xx: at most 17 significant digits, which fit 64 bits
  exact_decimal d;
  int fraction_digits = 0;
  bool point = false;
  const char* p = buf;
  for (; p != w.ptr && *p != 'e'; ++p) {
    if (*p == '.') {
      point = true;
      continue;
    }
    d.significand = d.significand * 10 + std::uint64_t(*p - '0');
    fraction_digits += point ? 1 : 0;
  }
  int exp10 = 0;
  if (p != w.ptr) {
    const char* q = p + 1 + (p[1] == '+' ? 1 : 0);
    std::from_chars(q, w.ptr, exp10);
  }
  d.exponent = exp10 - fraction_digits;
  return d;
}

}  // namespace autoddl
