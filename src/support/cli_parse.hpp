#pragma once
// The programs' command lines read by CLI11, its refusals turned into one sentence: an option
// misspelled by a letter or two names the one meant ("--stratgy: unknown option; did you mean
// --strategy?").
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace autoddl::tools {

/// The Levenshtein distance between a and b (insertions, deletions and substitutions).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

/// The long option of `app` nearest `given` ("--stratgy" -> "--strategy"), where one lies within
/// two edits of it; nullopt otherwise.
inline std::optional<std::string> nearest_option(const CLI::App& app, std::string_view given) {
  const std::string_view name = given.substr(0, given.find('='));
  std::optional<std::string> best;
  std::size_t best_distance = 3;
  for (const CLI::Option* o : app.get_options())
    for (const std::string& l : o->get_lnames())
      if (const std::size_t d = edit_distance(name, "--" + l); d < best_distance) {
        best_distance = d;
        best = "--" + l;
      }
  return best;
}

/// CLI11's refusal of a command line as one sentence: an unknown option named, with the option
/// meant where one is near it.
inline std::string command_line_error(const CLI::App& app, const CLI::ParseError& e) {
  if (dynamic_cast<const CLI::ExtrasError*>(&e))
    for (const std::string& extra : app.remaining())
      if (extra.starts_with("--")) {
        const std::optional<std::string> meant = nearest_option(app, extra);
        return "unknown option " + extra + (meant ? "; did you mean " + *meant + "?" : "; see --help for the options");
      }
  return e.what();
}

}  // namespace autoddl::tools
