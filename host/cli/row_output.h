// host/cli/row_output.h — rows of command output as an aligned table, JSON Lines or CSV,
// printed as they come (commands that stream millions of rows never hold them all).
//
// Table: column widths come from the first kTableWidthRows rows (buffered; fewer if the
// output ends sooner); a longer cell later only pushes its own line out of alignment.
// JSON Lines: one object per row, keys as given; a key starting with '#' marks a cell
// that is a JSON value already (a number, or `jobhost state`'s typed values): the '#' is
// dropped and the cell printed as it is, any other cell as a JSON string. CSV: RFC 4180 with a header line.
//
// Thread-safety: one printer, one thread.
#pragma once

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "jobhost/detail/json_string.h"

namespace jobhost::host {

/// A JSON string literal of s (quotes included; jobhost/detail/json_string.h).
inline std::string jsonString(const std::string& s) {
  std::string o;
  appendJsonString(o, s);
  return o;
}

/// A CSV field: quoted when it holds a comma, quote, CR or LF (quotes doubled).
inline std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

enum class RowFormat { kTable, kJson, kCsv };

class RowPrinter {
 public:
  static constexpr size_t kTableWidthRows = 200;

  RowPrinter(std::ostream& out, RowFormat format, std::vector<std::string> header, std::vector<std::string> jsonKeys)
      : out_(out), format_(format), header_(std::move(header)), keys_(std::move(jsonKeys)) {
    if (format_ == RowFormat::kCsv) {
      std::vector<std::string> h = header_;
      printCsv(h);
    }
  }
  ~RowPrinter() { finish(); }

  /// Prints (or buffers) one row; false once the output cannot take more (a closed
  /// pipe): the caller stops.
  bool add(std::vector<std::string> row) {
    ++rows_;
    switch (format_) {
      case RowFormat::kCsv: printCsv(row); break;
      case RowFormat::kJson: printJson(row); break;
      case RowFormat::kTable:
        if (widths_.empty()) {
          pending_.push_back(std::move(row));
          if (pending_.size() >= kTableWidthRows) flushPending();
        } else {
          printTable(row);
        }
        break;
    }
    return out_.good();
  }
  /// Prints what is buffered; a table with no rows prints nothing (not even the header).
  void finish() {
    if (format_ == RowFormat::kTable && widths_.empty() && !pending_.empty()) flushPending();
    out_.flush();
  }
  uint64_t rows() const { return rows_; }

 private:
  void flushPending() {
    widths_.assign(header_.size(), 0);
    auto measure = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < r.size() && i < widths_.size(); ++i) widths_[i] = std::max(widths_[i], r[i].size());
    };
    measure(header_);
    for (const auto& r : pending_) measure(r);
    printTable(header_);
    for (const auto& r : pending_) printTable(r);
    pending_.clear();
  }
  void printTable(const std::vector<std::string>& r) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size() && i < widths_.size() && r[i].size() < widths_[i] + 2)
        line += std::string(widths_[i] - std::min(widths_[i], r[i].size()) + 2, ' ');
      else if (i + 1 < r.size())
        line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out_ << line << '\n';
  }
  void printCsv(const std::vector<std::string>& r) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) line += (i ? "," : "") + csvField(r[i]);
    out_ << line << "\r\n";
  }
  void printJson(const std::vector<std::string>& r) {
    std::string line = "{";
    for (size_t i = 0; i < r.size() && i < keys_.size(); ++i) {
      bool number = !keys_[i].empty() && keys_[i][0] == '#';
      line += (i ? "," : "") + jsonString(number ? keys_[i].substr(1) : keys_[i]) + ":" +
              (number ? r[i] : jsonString(r[i]));
    }
    out_ << line << "}\n";
  }

  std::ostream& out_;
  const RowFormat format_;
  const std::vector<std::string> header_;
  const std::vector<std::string> keys_;
  std::vector<size_t> widths_;
  std::vector<std::vector<std::string>> pending_;
  uint64_t rows_ = 0;
};

}  // namespace jobhost::host
