#include "common/yaml_scan.h"

#include <cstddef>

namespace ringmaster {

static bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::optional<int> FlowTooDeepAt(std::string_view text, int limit) {
  const size_t n = text.size();
  const auto at = [&](size_t k) { return k < n ? text[k] : '\n'; };  // past the end: as a last newline
  int depth = 0, line = 1;
  size_t line_start = 0;         // offset of the current line
  size_t block_col = 0;          // column of the current block node: its block scalar's lines are deeper
  size_t key_col = 0;            // column of the last scalar that may be a key (before `: `)
  bool token_start = true;       // a node may start here: a quote or bracket opens a quoted scalar or collection
  bool after_colon = false;      // on this line, after a block `: `, so a scalar here is a value, not a key
  bool plain_open = false;       // the line ends inside a plain scalar, which a deeper next line continues
  bool after_json_node = false;  // a flow `:` right after a quoted scalar or a collection is an indicator
  // Moves to the line starting at `next`; returns the offset of its first non-space.
  const auto new_line = [&](size_t next) {
    ++line;
    line_start = next;
    size_t indent = 0;
    while (at(next + indent) == ' ') ++indent;
    token_start = !(plain_open && depth == 0 && indent > block_col);
    if (token_start) {
      plain_open = false;
      block_col = key_col = indent;
    }
    after_colon = false;
    return next + indent;
  };
  const auto flow_indicator = [&](char c) { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'; };
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '\n') {
      i = new_line(i + 1);
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (c == '#' && (i == 0 || IsBlank(text[i - 1]))) {  // a comment, which also ends a plain scalar
      while (i < n && text[i] != '\n') ++i;
      plain_open = false;
      continue;
    }
    const size_t col = i - line_start;
    if (token_start && (c == '"' || c == '\'')) {  // a quoted scalar, perhaps over several lines
      if (depth == 0 && !after_colon) key_col = col;
      for (++i; i < n; ++i) {
        if (c == '"' && text[i] == '\\') {
          if (at(i + 1) == '\n') {
            ++line;
            line_start = i + 2;
          }
          ++i;
        } else if (text[i] == c) {
          if (c == '\'' && at(i + 1) == '\'') {
            ++i;  // '' is a quote inside single quotes
          } else {
            break;
          }
        } else if (text[i] == '\n') {
          ++line;
          line_start = i + 1;
        }
      }
      ++i;
      token_start = plain_open = false;
      after_json_node = true;
      continue;
    }
    if (token_start && depth == 0 && (c == '|' || c == '>')) {  // a block scalar: skip its lines
      size_t k = i + 1;
      while (k < n && (text[k] == '+' || text[k] == '-' || (text[k] >= '0' && text[k] <= '9'))) ++k;
      while (k < n && (text[k] == ' ' || text[k] == '\t')) ++k;
      if (at(k) == '#' && IsBlank(text[k - 1])) {
        while (k < n && text[k] != '\n') ++k;
      }
      if (at(k) == '\r') ++k;
      if (at(k) == '\n') {
        size_t next = k + 1;  // the start of a line that may be the scalar's
        while (next < n) {
          size_t indent = 0;
          while (at(next + indent) == ' ') ++indent;
          const char first = at(next + indent);
          const bool empty = first == '\n' || (first == '\r' && at(next + indent + 1) == '\n');
          if (!empty && indent <= block_col) break;
          size_t end = next;
          while (end < n && text[end] != '\n') ++end;
          next = end + 1;
          if (next < n) ++line;
        }
        plain_open = false;
        i = next < n ? new_line(next) : n;
        continue;
      }
    }
    const bool indicator = IsBlank(at(i + 1)) || (depth > 0 && flow_indicator(at(i + 1)));
    if (c == '[' || c == '{') {
      if (token_start || depth > 0) {
        if (++depth > limit) return line;
        token_start = true;
        plain_open = after_json_node = false;
        ++i;
        continue;
      }
    } else if (depth > 0 && (c == ']' || c == '}')) {
      --depth;
      token_start = plain_open = false;
      after_json_node = true;
      ++i;
      continue;
    } else if (depth > 0 && c == ',') {
      token_start = true;
      plain_open = after_json_node = false;
      ++i;
      continue;
    } else if ((c == '-' || c == '?') && token_start && indicator) {
      if (depth == 0) {
        block_col = key_col = col;
        after_colon = false;
      }
      plain_open = false;
      ++i;
      continue;
    } else if (c == ':' && (indicator || (depth > 0 && after_json_node))) {
      if (depth == 0) {
        block_col = key_col;
        after_colon = true;
      }
      token_start = true;
      plain_open = after_json_node = false;
      ++i;
      continue;
    } else if (token_start && col == 0 && (text.substr(i, 3) == "---" || text.substr(i, 3) == "...") &&
               IsBlank(at(i + 3))) {
      i += 3;  // a document marker; a node may follow on its line
      continue;
    } else if (token_start && (c == '&' || c == '!' || c == '*')) {  // an anchor, tag or alias
      for (++i; i < n && !IsBlank(text[i]) && !flow_indicator(text[i]);) ++i;
      if (c == '*') {
        token_start = false;
        after_json_node = true;
      }
      continue;
    }
    // Part of a plain scalar.
    if (token_start && depth == 0 && !after_colon) key_col = col;
    token_start = after_json_node = false;
    plain_open = true;
    ++i;
  }
  return std::nullopt;
}

}  // namespace ringmaster
